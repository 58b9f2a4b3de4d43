"""tracer.render keeps its compiled work units in the farm's persistent compilation cache, as
Mitsuba's Dr.Jit keeps its kernels: a second process rendering the same scene loads the program
whole (``tracer.runtime.compiled``) instead of tracing and compiling it, and gets the same bits."""
import json
import os
import subprocess
import sys

import jax

from tracer.runtime import compilation_cache, compiled

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_RENDER = """
import hashlib, json, jax
from jax import monitoring
hits = []
monitoring.register_event_listener(lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)
import numpy as np, tracer
from tracer.rendering import render_tile
image = tracer.render(tracer.load_scene("examples/cbox.xml", res=16), spp=2)
print(json.dumps({"hits": len(hits), "folder": jax.config.jax_compilation_cache_dir,
                  "traced": render_tile.programs_made,
                  "image": hashlib.sha1(np.asarray(image).tobytes()).hexdigest()}))
"""


def _render(env):
    result = subprocess.run([sys.executable, "-c", _RENDER], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_work_unit_and_renders_the_same_bits(tmp_path):
    env = dict(os.environ, JAXFARM_XLA_CACHE=str(tmp_path / "xla"), JAX_PLATFORMS="cpu")
    first = _render(env)
    assert first["folder"] == str(tmp_path / "xla") and first["hits"] == 0 and first["traced"] == 1
    assert os.listdir(tmp_path / "xla" / compiled.FOLDER), "the work unit was not kept whole"
    second = _render(env)
    assert second["traced"] == 0 and second["image"] == first["image"]
    for entry in (tmp_path / "xla" / compiled.FOLDER).iterdir():
        entry.unlink()
    # Without its whole program, JAX's entry is passed over and the program compiled by XLA
    # again, so that it is kept whole (a copy of the one JAX's cache gives lacks kernels).
    third = _render(env)
    assert third["traced"] == 1 and third["hits"] == 0 and third["image"] == first["image"]
    fourth = _render(env)
    assert fourth["traced"] == 0 and fourth["image"] == first["image"]
    off = _render(dict(env, JAXFARM_XLA_CACHE="off"))
    assert off["folder"] is None and off["hits"] == 0 and off["traced"] == 1 and off["image"] == first["image"]


def test_a_folder_the_process_chose_is_kept():
    chosen = jax.config.jax_compilation_cache_dir  # the test session's own (tests/conftest.py)
    assert chosen
    compilation_cache.use_by_default()
    assert jax.config.jax_compilation_cache_dir == chosen
    assert compilation_cache.default_folder() is None  # so tracer.render keeps no programs of its own there
