"""Test-session set-up: the farm's deterministic CPU arithmetic in this process too, so that
renders made here (references) and in worker processes agree bit for bit; a local Ray fixture."""
import os

import pytest
from hypothesis import settings

from tracer.xla_flags import set_in_environment

set_in_environment()  # before any test module imports JAX

# The same hypothesis examples on every run: CI must not turn red on a draw it never saw before.
# HYPOTHESIS_PROFILE=explore searches afresh (and remembers failures in .hypothesis/).
settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray for one test module (6 logical CPUs, so that several groups fit)."""
    import ray
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
