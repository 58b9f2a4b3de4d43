"""XLA flags that make the tracer's CPU arithmetic reproducible (importing this does not import JAX).

XLA's CPU backend contracts a * b + c into fused multiply-adds where its fusion decisions put the
two operations together, and those decisions change with the number of devices a program is
partitioned over: the same rays traced on 1 and on 2 devices then differ in the last bit
(measured: 28 of 2,592 paths of examples/materials.xml). Float reductions were one cause
(XLA gives those over batches above a few thousand lanes to a library kernel; the traced code
now has none, ``tracer.vecmath.fold``, and its compiled bounce is the same at any batch size),
but not the only one: with FMAs, 20x18-pixel tiles of examples/orbit.xml still differed in 1
pixel between 1 and 2 devices, and examples/materials.xml in 42 between a whole-batch pool and a
256-path pool (November 2026; both the same with this flag). Capping the instruction set at AVX (no
FMA) makes every rounding explicit, so a work unit gives the same bits on any device count, host
count, or x86 CPU generation. It costs about a fifth of the speed (Cornell box, 2 cores: 0.46 ->
0.35 Msamples/s). The farm's CPU workers always use it (``cluster.bootstrap`` starts them); set
it in your own process (``set_in_environment()`` before JAX starts) to get a farm job's bits from
``tracer.render``.
"""
import os

__all__ = ["DETERMINISTIC_CPU", "with_flags", "set_in_environment"]

DETERMINISTIC_CPU = "--xla_cpu_max_isa=AVX"


def with_flags(xla_flags="", devices=None, deterministic=True):
    """``xla_flags`` (an XLA_FLAGS value) with the deterministic CPU flag and, if given, a
    virtual CPU device count; earlier values of the same flags are replaced."""
    drop = ("--xla_cpu_max_isa", "--xla_force_host_platform_device_count")
    flags = [f for f in (xla_flags or "").split() if not f.startswith(drop)]
    if deterministic:
        flags.append(DETERMINISTIC_CPU)
    if devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    return " ".join(flags)


def set_in_environment(devices=None):
    """Put the flags in this process's XLA_FLAGS (effective only before JAX starts its backend)."""
    os.environ["XLA_FLAGS"] = with_flags(os.environ.get("XLA_FLAGS", ""), devices)
