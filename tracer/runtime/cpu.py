"""How this process's CPU cores are shared among its XLA CPU devices.

XLA runs each CPU device's kernels one after another, each on one core (a large loop may split
in two). So a process gets the most from its cores with one device per core
(``--xla_force_host_platform_device_count``, as the farm's CPU workers set it), and work sized
for one core per device: a small path pool that stays in that core's cache, and host engines
that do not split a query over cores another device is using.
"""
import os

__all__ = ["MIN_CPU_DEVICES", "cores", "cores_per_device", "device_count", "use_every_core"]

_DEVICE_COUNT = "--xla_force_host_platform_device_count"
# XLA compiles a one-device program without its SPMD partitioner, and that program fuses (and so
# rounds) differently from one partitioned over several devices (``tracer.runtime.xla_flags``): every CPU
# process has at least two devices, so every work unit is a partitioned program.
MIN_CPU_DEVICES = 2


def cores() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def device_count(requested: int | None = None) -> int:
    """The XLA CPU devices a process gets: ``requested``, else one per core it may run on; at
    least ``MIN_CPU_DEVICES``. The one rule for the tracer's processes and the farm's workers."""
    return max(int(cores() if requested is None else requested), MIN_CPU_DEVICES)


def cores_per_device() -> int | None:
    """Cores per local device when JAX runs on the CPU (at least 1); None on GPUs and TPUs."""
    import jax  # (only here: the farm's members read cores() before JAX starts)

    if jax.default_backend() != "cpu":
        return None
    return max(1, cores() // max(1, jax.local_device_count()))


def use_every_core() -> None:
    """Give this process ``device_count()`` XLA CPU devices (``jax_num_cpu_devices``), unless the
    process says otherwise: a device count in XLA_FLAGS or ``JAX_NUM_CPU_DEVICES``, the option
    set already, or JAX's backend already started (then nothing can change; it stays as is).

    Part of ``tracer.runtime.process.configure``, so that ``tracer.render`` uses every core with nothing
    for the user to set: it splits each pass over ``jax.local_devices()``, and XLA runs one
    device's kernels on one core at a time.
    """
    import jax

    from tracer.runtime.jax_private import backends_are_initialized

    if (_DEVICE_COUNT in os.environ.get("XLA_FLAGS", "") or "JAX_NUM_CPU_DEVICES" in os.environ
            or jax.config.jax_num_cpu_devices >= 0 or backends_are_initialized()):
        return
    jax.config.update("jax_num_cpu_devices", device_count())
