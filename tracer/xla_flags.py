"""XLA settings that make the tracer's CPU arithmetic reproducible (importing this does not import JAX).

A work unit must give the same bits on any device count, host count and x86 CPU, so that a job
can be split, resumed and refined anywhere. Three things decide its rounding:

* The instruction set. XLA's CPU backend compiles for the host's CPU, and its code differs
  between AVX2 and AVX-512 machines (measured: 160 to 5,261 pixels of five example scenes).
  ``--xla_cpu_max_isa=AVX2`` gives every x86-64 CPU since 2013-2015 (Haswell, Excavator) the
  same code: FMAs included.
* Where a multiply and an add are contracted into an FMA. XLA does so wherever its fusion puts
  them together, so one program must trace a path whatever the schedule: every bounce runs in one
  loop body (``tracer.integrator``; a pool of 256 paths differed from one pool holding every path
  in 5% of pixels until then), and float reductions are left out of the traced code
  (``tracer.vecmath.fold``).
* The program itself. XLA compiles a program over one device without its SPMD partitioner, and
  that module fuses differently from the one partitioned over several devices (examples/orbit.xml:
  6 of 1,200 pixels between 1 and 2 devices; 2 and 4 devices, and 2 hosts, agree). So a CPU
  process gets at least ``MIN_CPU_DEVICES`` devices (virtual ones cost nothing) and every work
  unit is a partitioned program.

Until November 2026 the farm capped the instruction set at AVX (no FMA at all, the bits then
independent of fusion), at a cost of 20-42% of the speed (Cornell box, 2 cores: 0.39x Mitsuba
instead of 0.55x); these settings cost 3-10% against XLA's default AVX-512 code on this machine
(``scripts/bench_tracer.py``). The farm's CPU workers always use them (``cluster.bootstrap``
starts them); set them in your own process (``set_in_environment()`` before JAX starts) to get a
farm job's bits from ``tracer.render``.
"""
import os

__all__ = ["DETERMINISTIC_CPU", "MIN_CPU_DEVICES", "with_flags", "set_in_environment", "cpu_devices"]

DETERMINISTIC_CPU = "--xla_cpu_max_isa=AVX2"
MIN_CPU_DEVICES = 2


def cpu_devices(count):
    """The XLA CPU devices a process asking for ``count`` gets: at least ``MIN_CPU_DEVICES``."""
    return max(int(count), MIN_CPU_DEVICES)


def with_flags(xla_flags="", devices=None, deterministic=True):
    """``xla_flags`` (an XLA_FLAGS value) with the deterministic CPU flag and, if given, a
    virtual CPU device count (with the flag: at least ``MIN_CPU_DEVICES``); earlier values of
    the same flags are replaced."""
    drop = ("--xla_cpu_max_isa", "--xla_force_host_platform_device_count")
    flags = [f for f in (xla_flags or "").split() if not f.startswith(drop)]
    if deterministic:
        flags.append(DETERMINISTIC_CPU)
    if devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={cpu_devices(devices) if deterministic else devices}")
    return " ".join(flags)


def set_in_environment(devices=None):
    """Put the flags in this process's XLA_FLAGS (effective only before JAX starts its backend)."""
    os.environ["XLA_FLAGS"] = with_flags(os.environ.get("XLA_FLAGS", ""), devices)
