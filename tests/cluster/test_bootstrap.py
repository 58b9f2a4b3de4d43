"""A worker's start-up (cluster.bootstrap): its environment, and the persistent compilation cache
that lets a second run of a job compile nothing."""
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


def test_instruction_set_levels(tmp_path):
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
    xla_flags.check_host("AVX512", have=None)
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
    assert warm_stats["compiled"] == 0 and warm_stats["cache_hits"] == warm_stats["programs"] > 0
    assert cold.mean() > 0
    np.testing.assert_array_equal(warm, cold)
