"""The tracer takes one XLA CPU device per core by default, and leaves a process's own choice alone."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = """
import jax, tracer
from tracer.runtime import cpu
tracer.load_scene("examples/cbox.xml", res=8)
print(jax.local_device_count(), cpu.cores())
"""


def _devices(env):
    """(JAX's local devices, tracer.runtime.cpu.cores()) in a fresh process with environment ``env``."""
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env | {"JAX_PLATFORMS": "cpu"}, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return tuple(int(x) for x in result.stdout.split())


@pytest.fixture
def clean_env():
    return {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}


def test_a_process_that_sets_nothing_gets_a_device_per_core(clean_env):
    devices, cores = _devices(clean_env)
    assert devices == cores


@pytest.mark.parametrize("setting", [{"XLA_FLAGS": "--xla_force_host_platform_device_count=3"},
                                     {"JAX_NUM_CPU_DEVICES": "3"}])
def test_a_device_count_the_process_sets_is_kept(clean_env, setting):
    assert _devices(clean_env | setting)[0] == 3


@pytest.mark.parametrize("host, flags, width", [("AVX512", "", "512"), ("AVX2", "", None),
                                                 ("AVX512", "--xla_cpu_prefer_vector_width=256", "256"),
                                                 ("AVX512", "--xla_cpu_max_isa=AVX2", None)])  # an AVX2 job's worker
def test_an_avx512_host_vectorizes_512_bits_wide_unless_the_process_says(clean_env, host, flags, width):
    code = (f"from tracer.runtime import xla_flags; xla_flags.host_isa = lambda: {host!r}; import os, tracer, jax; "
            # (the pure-JAX structure: Embree would refuse the level this AVX2 host only pretends to have)
            "tracer.load_scene('examples/cbox.xml', res=8, accel='jax'); print(os.environ.get('XLA_FLAGS', ''))")
    result = subprocess.run([sys.executable, "-c", code], env=clean_env | {"XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"},
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    widths = [f.split("=")[1] for f in result.stdout.split() if f.startswith("--xla_cpu_prefer_vector_width=")]
    assert widths == ([width] if width else [])


@pytest.mark.parametrize("flags, want", [("", "false"), ("--xla_cpu_enable_platform_dependent_math=true", "true")])
def test_a_process_gets_no_math_of_its_cpu_models_own_unless_it_says(clean_env, flags, want):
    # (on an Intel Sapphire Rapids host that math gave orbit.xml other bits on 2 and 3 devices)
    code = ("import os, tracer; tracer.load_scene('examples/cbox.xml', res=8, accel='jax'); "
            "print(os.environ.get('XLA_FLAGS', ''))")
    result = subprocess.run([sys.executable, "-c", code], env=clean_env | {"XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"},
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    said = [f.split("=")[1] for f in result.stdout.split() if f.startswith("--xla_cpu_enable_platform_dependent_math=")]
    assert said == [want], result.stdout


def test_importing_the_tracer_changes_nothing_in_the_process(clean_env):
    """Only the entry points set a process up (``tracer.runtime.process.configure``): importing every
    module of the tracer leaves XLA_FLAGS, the device count and JAX's backend as they were."""
    code = ("import importlib, os, pkgutil, jax, tracer; "
            "[importlib.import_module(m.name) for m in pkgutil.walk_packages(tracer.__path__, 'tracer.')]; "
            "from tracer.runtime.jax_private import backends_are_initialized; "
            "print(repr(os.environ.get('XLA_FLAGS')), jax.config.jax_num_cpu_devices, backends_are_initialized())")
    result = subprocess.run([sys.executable, "-c", code], env=clean_env | {"JAX_PLATFORMS": "cpu"}, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["None", "-1", "False"]
