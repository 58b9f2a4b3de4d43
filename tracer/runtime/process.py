"""This process set up for the tracer, by the entry points that need it: importing any module of
the tracer changes nothing in the process.

``configure()`` gives a user's process the settings a local farm job's workers run with, where the
process has not chosen its own: one XLA CPU device per core, at least two (``tracer.runtime.cpu``),
512-bit vectors on an AVX-512 host (``tracer.runtime.xla_flags.use_wide_vectors``), no math of the
CPU model's own (``use_platform_independent_math``: the same bits on any device count), and the farm's
persistent compilation cache (``tracer.runtime.compilation_cache``: a scene compiled once, in any
process, loads in the next). The first three must be in place
before JAX's backend starts, that is before the first array exists: ``tracer.load_scene`` and
``tracer.render`` call it first, and a program that makes JAX arrays before either calls it
itself. A farm worker is set up by ``cluster.bootstrap`` instead (its XLA_FLAGS name a device count
and an instruction-set level, which ``configure`` leaves alone).
"""
from tracer.runtime import compilation_cache, cpu
from tracer.runtime import xla_flags

__all__ = ["configure"]


def configure() -> None:
    """Set this process up for the tracer (idempotent; the devices and vectors change nothing once
    JAX's backend started, the cache nothing once JAX compiled)."""
    cpu.use_every_core()
    xla_flags.use_wide_vectors()
    xla_flags.use_platform_independent_math()
    compilation_cache.use_by_default()
