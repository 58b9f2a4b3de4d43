"""What renders a member's samples, named: the tracer's code, JAX and jaxlib, the platform, and on
CPUs the instruction-set level of the job's arithmetic.

A work unit's bits are the same on any device count, host count and split (``tracer.rendering``),
given the same software: another version of the tracer, of JAX or of XLA (jaxlib) compiles the
work unit into other machine code, whose rounding may differ in the last bits. So a group's
members must all render with the same software (``cluster.group`` refuses a group that does not),
and a store notes what rendered its samples (``farm.store.FrameStore.note_renderer``): a job
resumed or refined by other software is told so, once, and its images then agree with a single
render in expectation, not to the bit.
"""
import os

__all__ = ["describe"]


def describe() -> str:
    """This process's renderer, one line: called in a member once JAX has started there."""
    import jax
    import jaxlib

    from tracer.runtime.compiled import code_digest
    from tracer.runtime.xla_flags import named_isa

    platform = jax.default_backend()
    if platform == "cpu":
        where = f"cpu {named_isa(os.environ.get('XLA_FLAGS')) or 'default'}"
    else:
        where = f"{platform} {jax.local_devices()[0].device_kind}"
    return f"tracer {code_digest()[:12]}, jax {jax.__version__}, jaxlib {jaxlib.__version__}, {where}"
