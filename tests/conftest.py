"""Test-session set-up: the farm's deterministic CPU arithmetic in this process too, so that
renders made here (references) and in worker processes agree bit for bit; a local Ray fixture."""
import os

import pytest

from tracer.xla_flags import set_in_environment

set_in_environment()  # before any test module imports JAX


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray for one test module (6 logical CPUs, so that several groups fit)."""
    import ray
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
