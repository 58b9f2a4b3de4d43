"""Test-session set-up: the farm's deterministic CPU arithmetic in this process too, so that
renders made here (references) and in worker processes agree bit for bit."""
from tracer.xla_flags import set_in_environment

set_in_environment()
