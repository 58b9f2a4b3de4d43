"""Test-session set-up: the farm's deterministic CPU arithmetic in this process too, so that
renders made here (references) and in worker processes agree bit for bit; a local Ray fixture."""
import atexit
import os
import shutil
import tempfile

import pytest
from hypothesis import settings

from tracer.runtime.process import configure
from tracer.runtime.xla_flags import set_in_environment


def _session_folder(prefix: str) -> str:
    """A temporary folder removed when this process exits (the compilation cache's, made by the
    process that starts the session, is shared by pytest-xdist's workers, which inherit its name):
    a run had left some 110 MB of programs behind in the system's temporary folder."""
    folder = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


set_in_environment()  # before any test module imports JAX
# (Before configure(), which would otherwise point tracer.render's default cache at the
# user's ~/.cache.) Worker groups share one persistent compilation cache for the session, not the user's own.
# JAXFARM_TEST_XLA_CACHE names a folder kept between runs (CI's cache) instead of one made for the
# session: a run then loads what an earlier one compiled (JAX keys each program by its HLO,
# flags and versions, so a stale entry is never used). Tests that count compilations count the
# traces in memory (``render_tile.programs_made``), or use a cache folder of their own.
if os.environ.get("JAXFARM_TEST_XLA_CACHE"):
    os.environ["JAXFARM_XLA_CACHE"] = os.environ["JAXFARM_TEST_XLA_CACHE"]
if "JAXFARM_XLA_CACHE" not in os.environ:
    os.environ["JAXFARM_XLA_CACHE"] = os.path.join(_session_folder("farm-xla-cache-"), "xla")
configure()  # a device per core (at least two), as tracer.render's callers get, before any array exists
# `farm render` and `farm submit` note their stores for `farm list`: the tests' in a file of their own.
os.environ["FARM_REGISTRY"] = os.path.join(_session_folder("farm-registry-"), "stores")
# Dr.Jit reads this when mitsuba is first imported; without it, its LLVM variant loads whichever
# libLLVM it finds (an older one here), which aborts the process. Absent, the variant is refused.
os.environ.setdefault("DRJIT_LIBLLVM_PATH", "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1")

import jax  # noqa: E402  (after the flags: JAX reads XLA_FLAGS when its backend starts)

# This process's own programs too, those that take a second or more: modules render the same
# scenes at the same sizes, and pytest-xdist's workers share the folder (they inherit it).
from cluster.bootstrap import enable_compilation_cache  # noqa: E402
enable_compilation_cache(os.environ["JAXFARM_XLA_CACHE"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)

# Mixed dtypes must be cast explicitly, as in equinox's tests: an implicit int32 + float32 or
# bool - int32 promotion is where bit-exact float32 code silently changes type.
jax.config.update("jax_numpy_dtype_promotion", "strict")

# The same hypothesis examples on every run: CI must not turn red on a draw it never saw before.
# HYPOTHESIS_PROFILE=explore searches afresh (and remembers failures in .hypothesis/).
settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray for one test module (6 logical CPUs, so that several groups fit), started
    as `farm render` starts its embedded Ray (farm.session)."""
    import ray

    from farm.session import start_local_ray
    start_local_ray(6)
    yield
    ray.shutdown()


@pytest.fixture(scope="module", autouse=True)
def compiled_programs_freed():
    """After a module, JAX's compiled programs are let go once the process holds 20,000 memory
    maps: XLA maps each program's machine code in hundreds of them, jax.jit keeps every program
    its functions made, and past Linux's 65,530 (vm.max_map_count) LLVM aborts the process (a
    whole-suite run did, after some 1,300 tests; the renders' own work unit keeps 8 programs,
    tracer.runtime.programs, but the tests jit many functions of their own)."""
    yield
    with open("/proc/self/maps", "rb") as maps:
        if maps.read().count(b"\n") > 20_000:
            import gc
            jax.clear_caches()
            gc.collect()


@pytest.fixture(autouse=True)
def mitsuba_scalar_variant():
    """Every test starts with Mitsuba's scalar RGB variant: modules that set a variant when they
    are imported (collection) would otherwise leave the last one imported in force, and the
    vectorized variant (where libLLVM 19 is installed) answers in other shapes. Tests that want
    another variant select it themselves, as tests/helpers/bsdf_cases.py does on every call."""
    import sys

    mi = sys.modules.get("mitsuba")
    if mi is not None:
        mi.set_variant("scalar_rgb")
    yield
