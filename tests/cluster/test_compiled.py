"""A host's compiled work units on disk (tracer.runtime.compiled): a process loads the program another
compiled and runs it without tracing, to the same bits; anything that decides the program changes
its key; an entry that does not load is removed and the program compiled again, and a program JAX's
cache gave is not saved (its copy would fail where it runs)."""
import os
import pathlib
import subprocess
import sys

import numpy as np

from tracer.runtime import compiled

ROOT = pathlib.Path(__file__).resolve().parents[2]

# One member's process: render a tile of orbit.xml, print how many times it traced the work unit
# and how many programs it loaded whole, and save the tile's value.
MEMBER = """
import sys, numpy as np
from cluster.member import Member
from cluster.task import SceneRef, TileTask
from tracer.rendering import render_tile
member = Member(0, 1, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAXFARM_XLA_CACHE": sys.argv[1]})
member.initialize(None, 60, 20)
ref = SceneRef(path=sys.argv[3], params=(("height", "24"), ("width", "24")))
task = TileTask(scene=ref, frame=1, seed=3, spp=8, tile_y=0, tile_x=0, tile_h=24, tile_w=24, first_pass=0,
                n_passes=2, pass_size=4, chunk_passes=2, job_samples=24 * 24 * 8)
np.save(sys.argv[2], member.render(task).value)
print("traced", render_tile.programs_made, "whole", member.compile_stats()["whole"])
"""


def _member(cache, out, scene=ROOT / "examples" / "orbit.xml"):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)
    result = subprocess.run([sys.executable, "-c", MEMBER, str(cache), str(out), str(scene)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split()[-4:], np.load(out)


def test_a_program_compiled_once_is_loaded_untraced_to_the_same_bits(tmp_path):
    cache = tmp_path / "cache"
    first, value = _member(cache, tmp_path / "a.npy")
    assert first == ["traced", "1", "whole", "0"]
    entries = list((cache / compiled.FOLDER).glob("*.program"))
    assert len(entries) == 1
    second, again = _member(cache, tmp_path / "b.npy")
    assert second == ["traced", "0", "whole", "1"]  # loaded whole: no trace, no lowering
    np.testing.assert_array_equal(again, value)
    # An entry that does not load is removed and the program traced again. JAX's cache has it
    # (the first member's), and a member takes it from there: XLA's copy of an executable JAX's
    # cache gave lacks kernels, so it is not saved (a member that loaded such a copy failed,
    # "Function ... not found"), and the next member traces too, to the same bits.
    entries[0].write_bytes(b"not a program")
    third, once_more = _member(cache, tmp_path / "c.npy")
    assert third == ["traced", "1", "whole", "0"]
    np.testing.assert_array_equal(once_more, value)
    assert not entries[0].exists()
    fourth, last = _member(cache, tmp_path / "d.npy")
    assert fourth == ["traced", "1", "whole", "0"]
    np.testing.assert_array_equal(last, value)


def test_what_decides_the_program_decides_its_key(monkeypatch):
    import jax
    from jax.sharding import Mesh

    import tracer
    from tracer.rendering import RAY_AXIS, WorkItem, WorkShape, render_tile

    scene = tracer.load_scene(str(ROOT / "examples" / "cbox.xml"), res=16)
    mesh = Mesh(np.array(jax.devices()[:2]), (RAY_AXIS,))
    item = WorkItem.of(0, 1, 0, 0, 0, 1, 4)
    z = (np.zeros((16, 16, 3), np.float32), np.zeros((16, 16), np.float32))

    def key(shape=WorkShape(16, 16, 4), scene=scene, mesh=mesh, start=z):
        return compiled.key(render_tile, (scene, item, *start), dict(shape=shape, mesh=mesh))

    base = key()
    assert base == key() and len(base) == 64
    other_frame_values = tracer.load_scene(str(ROOT / "examples" / "cbox.xml"), res=16)
    assert key(scene=other_frame_values) == base  # values are arguments: every frame shares it
    keys = {key(shape=WorkShape(16, 16, 8)),  # the pass size
            key(scene=tracer.load_scene(str(ROOT / "examples" / "orbit.xml"), width=16, height=16)),  # the structure
            key(mesh=Mesh(np.array(jax.devices()[:1]), (RAY_AXIS,))),  # the devices it runs on
            key(start=(z[0][:8], z[1][:8]))}  # a shape
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_fast_math=false")
    keys.add(key())
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(compiled, "_code", ["another version of the tracer"])
    keys.add(key())
    assert base not in keys and len(keys) == 6


class _Kept:
    """A stand-in for ``KeptPrograms``: what ``compiled.program`` asks of one, counted."""

    def __init__(self):
        self.made, self.adopted = 0, []

    def has_program(self, args, kwargs):
        return bool(self.adopted) or self.made > 0

    def signature(self, args, kwargs):
        return ("a stand-in", args)

    def compile(self, *args, **kwargs):
        self.made += 1
        return "compiled here"

    def adopt(self, program, args, kwargs):
        self.adopted.append(program)


def test_the_preflight_leaves_a_saved_program_there_without_loading_it(tmp_path, monkeypatch):
    kept = _Kept()
    path = tmp_path / compiled.FOLDER / (compiled.key(kept, (1,), {}) + ".program")
    path.parent.mkdir()
    path.write_bytes(b"a program")
    os.utime(path, (1, 1))
    monkeypatch.setattr(compiled, "load", lambda *a: (_ for _ in ()).throw(AssertionError("loaded")))
    assert compiled.program(kept, str(tmp_path), (1,), {}, for_others=True) == "saved"
    assert kept.made == 0 and path.stat().st_mtime > 1  # made the newest: kept longest
    # Without it there, the preflight compiles it, past JAX's cache, and saves it.
    monkeypatch.setattr(compiled, "load", lambda *a: None)
    monkeypatch.setattr(compiled, "save", lambda folder, digest, made: saved.append(made))
    saved = []
    assert compiled.program(_Kept(), str(tmp_path), (2,), {}, for_others=True) == "compiled"
    assert saved == ["compiled here"]


def test_a_member_waits_for_the_program_another_process_is_compiling(tmp_path, monkeypatch):
    import threading

    kept = _Kept()
    path = tmp_path / compiled.FOLDER / (compiled.key(kept, (1,), {}) + ".program")
    path.parent.mkdir()
    monkeypatch.setattr(compiled, "load", lambda folder, digest: "loaded from disk"
                        if (tmp_path / compiled.FOLDER / (digest + ".program")).exists() else None)
    writer = threading.Timer(0.3, path.write_bytes, (b"a program",))
    writer.start()
    # "loaded", not "compiled": it waited for the file the writer makes 0.3 s later (no clock needed).
    assert compiled.program(kept, str(tmp_path), (1,), {}, past_cache=False, awaiting=lambda: True) == "loaded"
    assert kept.adopted == ["loaded from disk"] and kept.made == 0
    # The compiling process ended without it: compiled here, at once.
    other = _Kept()
    monkeypatch.setattr(compiled, "save", lambda *a: None)
    assert compiled.program(other, str(tmp_path), (3,), {}, past_cache=False, awaiting=lambda: False) == "compiled"
    assert other.made == 1


# A user's script: render the Cornell box; print how many programs XLA compiled, save the image.
USER = """
import sys, numpy as np
from jax._src import monitoring
compiles = []
monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: compiles.append(event) if event == "/jax/core/compile/backend_compile_duration" else None)
import tracer
image = tracer.render(tracer.load_scene(sys.argv[2], resolution=(16, 16)), spp=4)
np.save(sys.argv[1], image)
print("compiled", len(compiles))
"""


def test_a_warm_tracer_render_compiles_nothing(tmp_path):
    """With the work unit saved whole by an earlier process, ``tracer.render`` in a new process
    compiles no program at all, not even the small ones its accumulators' zeros once took (three,
    0.1 s of every process's first render), and gives the same bits."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAXFARM_XLA_CACHE=str(tmp_path / "cache"))
    outputs = []
    for name in ("cold", "warm"):
        result = subprocess.run([sys.executable, "-c", USER, str(tmp_path / f"{name}.npy"),
                                 str(ROOT / "examples" / "cbox.xml")], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        outputs.append(result.stdout.split()[-2:])
    assert outputs[0][0] == "compiled" and int(outputs[0][1]) >= 1
    assert outputs[1] == ["compiled", "0"]
    np.testing.assert_array_equal(np.load(tmp_path / "warm.npy"), np.load(tmp_path / "cold.npy"))
