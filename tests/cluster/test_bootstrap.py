"""A worker's start-up (cluster.bootstrap): its environment, and the persistent compilation cache
that lets a second run of a job compile nothing."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from cluster import bootstrap
from cluster.group import GroupShape, WorkerGroup
from cluster.task import SceneRef, TileTask
from tracer.runtime import xla_flags

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_worker_environment():
    env = bootstrap.worker_env("cpu", 3, environ={"XLA_FLAGS": "--xla_cpu_max_isa=AVX512 --xla_dump_to=/x"},
                               isa="AVX")
    flags = env["XLA_FLAGS"].split()
    assert env["JAX_PLATFORMS"] == "cpu" and "--xla_cpu_max_isa=AVX" in flags
    assert "--xla_cpu_max_isa=AVX512" not in flags
    assert "--xla_force_host_platform_device_count=3" in flags and "--xla_dump_to=/x" in flags
    # The AVX512 level vectorizes 512 bits wide; the others keep XLA's 256 (a driver's own width goes).
    wide = bootstrap.worker_env("cpu", 2, environ={"XLA_FLAGS": "--xla_cpu_prefer_vector_width=256"}, isa="AVX512")
    assert wide["XLA_FLAGS"].split()[:2] == ["--xla_cpu_max_isa=AVX512", "--xla_cpu_prefer_vector_width=512"]
    narrow = bootstrap.worker_env("cpu", 2, environ={"XLA_FLAGS": "--xla_cpu_prefer_vector_width=512"}, isa="AVX2")
    assert "vector_width" not in narrow["XLA_FLAGS"]
    assert bootstrap.worker_env("gpu", environ={}) == {"JAX_PLATFORMS": "cuda"}
    # The cache folder travels only when the driver names one; otherwise each host takes its own default.
    assert bootstrap.worker_env("tpu", environ={bootstrap.CACHE_ENV: "/c"})[bootstrap.CACHE_ENV] == "/c"


def test_instruction_set_levels(tmp_path, monkeypatch):
    def level(flags):
        (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        return xla_flags.host_isa(tmp_path / "cpuinfo")
    avx2 = "fpu sse4_2 avx avx2 fma bmi2"
    assert level(avx2) == "AVX2" and level("fpu sse4_2 avx") == "AVX" and level("fp asimd") is None
    assert level(avx2 + " avx512f avx512cd avx512bw avx512dq avx512vl") == "AVX512"
    assert level(avx2 + " avx512f avx512cd avx512er avx512pf") == "AVX2"  # Knights Landing: no VL, BW, DQ
    assert xla_flags.host_isa(tmp_path / "none") is None
    # A host below the job's level refuses it (XLA would quietly make code of its own level);
    # one at or above it, or one whose level cannot be told, takes it.
    with pytest.raises(RuntimeError, match="has AVX2, not AVX512.*--cpu-isa AVX2"):
        xla_flags.check_host("AVX512", have="AVX2")
    xla_flags.check_host("AVX2", have="AVX512")
    monkeypatch.setattr(xla_flags, "host_isa", lambda: None)  # (have=None asks this host, which may be of any level)
    xla_flags.check_host("AVX512")
    with pytest.raises(ValueError, match="one of AVX, AVX2, AVX512"):
        xla_flags.isa_flags("SSE2")
    # A worker reads its job's level back from its flags (the last one named counts).
    assert xla_flags.named_isa("--xla_dump_to=/x --xla_cpu_max_isa=AVX --xla_cpu_max_isa=AVX2") == "AVX2"
    assert xla_flags.named_isa("--xla_cpu_prefer_vector_width=512") is None and xla_flags.named_isa("") is None


def test_a_host_below_the_jobs_instruction_set_refuses_it():
    code = ("from tracer.runtime import xla_flags; xla_flags.host_isa = lambda: 'AVX'; from cluster import bootstrap; "
            "bootstrap.start_jax(bootstrap.worker_env('cpu', 2, isa='AVX2'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode != 0 and "this host's CPU has AVX, not AVX2" in result.stderr


def test_cache_folder():
    assert bootstrap.cache_dir({"XDG_CACHE_HOME": "/xdg"}) == "/xdg/jaxfarm/xla"
    assert bootstrap.cache_dir({"XDG_CACHE_HOME": "/xdg", bootstrap.CACHE_ENV: "/mine"}) == "/mine"
    assert bootstrap.cache_dir({bootstrap.CACHE_ENV: "off"}) is None
    assert bootstrap.cache_dir({bootstrap.CACHE_ENV: ""}) is None


def test_a_process_whose_jax_started_otherwise_is_refused():
    code = ("import jax; jax.devices(); from cluster import bootstrap; "
            "bootstrap.start_jax(bootstrap.worker_env('cpu', 3))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode != 0 and "JAX already started" in result.stderr


def test_a_second_group_compiles_nothing(local_ray, tmp_path, monkeypatch):
    """New member processes load the first group's programs from the persistent cache, host
    callbacks (Embree) included, and render the same bits."""
    monkeypatch.setenv(bootstrap.CACHE_ENV, str(tmp_path))
    scene = SceneRef(path=str(ROOT / "examples" / "cbox.xml"), params=(("res", 16),), accel="embree")
    task = TileTask(scene=scene, frame=0, seed=1, spp=4, tile_y=0, tile_x=0, tile_h=16, tile_w=16,
                    first_pass=0, n_passes=1, pass_size=4)
    runs = []
    for name in ("cold", "warm"):
        group = WorkerGroup(GroupShape(hosts=1, devices_per_host=1, strategy="PACK"), name=name).start()
        try:
            value, _, _ = group.result(group.submit(task))
            runs.append((value, group.compile_stats()))
        finally:
            group.teardown()
    (cold, cold_stats), (warm, warm_stats) = runs
    assert cold_stats["compiled"] > 0 and any(tmp_path.iterdir())
    # Its work unit loaded (whole, or from JAX's cache), nothing compiled. (A scene's load makes no
    # program of its own: tracer.table_rows.on_device.)
    assert warm_stats["compiled"] == 0 and warm_stats["cache_hits"] == warm_stats["programs"], warm_stats
    assert warm_stats["whole"] + warm_stats["cache_hits"] > 0, warm_stats
    assert cold.mean() > 0
    np.testing.assert_array_equal(warm, cold)


def _preflight(lines, env):
    """``python -m cluster.preflight`` fed ``lines`` (JSON objects, or "" for an empty line)."""
    import json
    stdin = "".join((json.dumps(line) if line != "" else "") + "\n" for line in lines)
    return subprocess.run([sys.executable, "-m", "cluster.preflight"], input=stdin, capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


def _scene_job(path, **params):
    return {"path": str(path), "resolution": None, "accel": "auto", "aovs": None, "rfilter": None,
            "param_sets": [[[k, v] for k, v in params.items()]]}


def test_a_group_after_the_preflight_compiles_nothing(local_ray, tmp_path, monkeypatch):
    """The driver's preflight child, started as a member (its environment, its code), leaves the
    work unit of a task's shape in the cache: a group that then renders a task of that shape
    compiles nothing."""
    import os

    from cluster.preflight import task_json
    monkeypatch.setenv(bootstrap.CACHE_ENV, str(tmp_path))
    shape = GroupShape(hosts=1, devices_per_host=2, strategy="PACK")
    scene = SceneRef(path=str(ROOT / "examples" / "cbox.xml"), params=(("res", "16"),))
    task = TileTask(scene=scene, frame=3, seed=1, spp=8, tile_y=0, tile_x=0, tile_h=16, tile_w=16,
                    first_pass=0, n_passes=2, pass_size=4, chunk_passes=2, job_samples=8 * 16 * 16)
    done = _preflight([{"scene": _scene_job(scene.path, res="16"), "env": shape.env()}, {"task": task_json(task)}],
                      dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == "checked" and done.stdout.split()[1] == "compiled", done.stdout
    group = WorkerGroup(shape, name="after-preflight").start()
    try:
        value, _, _ = group.result(group.submit(TileTask(**dict(vars(task), frame=5, seed=7))))
        stats = group.compile_stats()
    finally:
        group.teardown()
    assert value.mean() > 0
    assert stats["compiled"] == 0 and stats["cache_hits"] == stats["programs"], stats
    assert stats["whole"] + stats["cache_hits"] > 0, stats  # the work unit loaded (whole, or from JAX's cache)


def test_the_preflight_checks_only_or_refuses_a_bad_scene_in_one_line(tmp_path):
    import os
    bad = tmp_path / "bad.xml"
    bad.write_text('<scene version="3.0.0"><shape type="sphere"><bsdf type="nosuchbsdf"/></shape>'
                   '<sensor type="perspective"/></scene>')
    refused = _preflight([{"scene": _scene_job(bad), "env": None}], dict(os.environ, JAX_PLATFORMS="cpu"))
    assert refused.returncode == 1 and "nosuchbsdf" in refused.stderr.strip().splitlines()[-1]
    assert "checked" not in refused.stdout
    # Without the members' environment it checks and stops, whatever it is asked next.
    only = _preflight([{"scene": _scene_job(ROOT / "examples" / "cbox.xml", res="8"), "env": None}, ""],
                      dict(os.environ, JAX_PLATFORMS="cpu"))
    assert only.returncode == 0 and only.stdout.split() == ["checked"], only.stderr[-2000:]


_COMPILE_ONCE = """
from cluster import bootstrap
jax = bootstrap.start_jax(bootstrap.worker_env("cpu", 1))
import jax.numpy as jnp
jax.jit(lambda x: jnp.sin(x) * 3 + 1)(jnp.arange(8.0)).block_until_ready()
s = bootstrap.compile_stats()
print(int(s["programs"]), int(s["cache_hits"]))
"""


def test_a_corrupt_cache_entry_is_replaced_once_recompiled(tmp_path):
    """JAX's cache never overwrites a key it has: an entry that does not read would be compiled
    again in every run (issue 37, item 6). It goes when its read fails, and the program compiled
    then takes its place."""
    from jax._src import compilation_cache
    assert callable(compilation_cache.get_executable_and_time), \
        "jax moved the cache's read: see tracer.runtime.compilation_cache"
    env = dict(os.environ, JAXFARM_XLA_CACHE=str(tmp_path))

    def run():
        result = subprocess.run([sys.executable, "-c", _COMPILE_ONCE], capture_output=True, text=True, timeout=300,
                                cwd=ROOT, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        return tuple(map(int, result.stdout.split()))

    programs, hits = run()
    assert programs > 0 and hits == 0
    entries = sorted(p for p in tmp_path.iterdir() if p.name.endswith("-cache"))
    assert entries
    for entry in entries:
        entry.write_bytes(b"not an executable")
    assert run() == (programs, 0)  # read, refused, compiled again
    assert all(entry.read_bytes() != b"not an executable" for entry in entries)
    assert run() == (programs, programs)  # the replaced entries load
