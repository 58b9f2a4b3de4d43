"""XLA settings that make the tracer's CPU arithmetic reproducible (importing this does not import JAX).

A work unit must give the same bits on any device count, host count and x86 CPU of its
instruction-set level, so that a job can be split, resumed and refined anywhere. Three things decide its rounding:

* The instruction set. XLA's CPU backend compiles for the host's CPU, and its code differs
  between AVX2 and AVX-512 machines (measured: 160 to 5,261 pixels of five example scenes). So a
  job renders with one instruction-set level (``--xla_cpu_max_isa``), chosen when its store is
  made and kept with it: the host's own on this machine (AVX512 here, with 512-bit vectors: the
  fastest code XLA makes here), ``PORTABLE_ISA`` (AVX2: every x86-64 CPU since 2013-2015, Haswell and
  Excavator) on a cluster, whose hosts may differ. A host without the job's level refuses to
  work on it rather than give other bits (``check_host``).
* Where a multiply and an add are contracted into an FMA. XLA does so wherever its fusion puts
  them together, so one program must trace a path whatever the schedule: every bounce runs in one
  loop body (``tracer.integrators.path``; a pool of 256 paths differed from one pool holding every path
  in 5% of pixels until then), and float reductions are left out of the traced code
  (``tracer.vecmath.fold``).
* The CPU model's own math. XLA may choose arithmetic whose results depend on the CPU it
  compiles for (``--xla_cpu_enable_platform_dependent_math``, on by default): on an Intel
  Sapphire Rapids host at the AVX512 level, examples/orbit.xml differed between 2 and 3 devices
  in 2 of 340 pixels (by 2e-7) until it was turned off, which agrees with an AMD EPYC host and
  cost 0-3% of a frame there (cbox 2.03 -> 2.03-2.07 s, mesh 1.38 -> 1.42 s, orbit 1.01 s at
  256x256, 64 spp). So it is off at every level (``PLATFORM_MATH``).
* The program itself. XLA compiles a program over one device without its SPMD partitioner, and
  that module fuses differently from the one partitioned over several devices (examples/orbit.xml:
  6 of 1,200 pixels between 1 and 2 devices; 2 and 4 devices, and 2 hosts, agree). So a CPU
  process gets at least ``tracer.runtime.cpu.MIN_CPU_DEVICES`` devices (virtual ones cost nothing) and every work
  unit is a partitioned program.

Until November 2026 the farm capped the instruction set at AVX (no FMA at all, the bits then
independent of fusion), at a cost of 20-42% of the speed (Cornell box, 2 cores: 0.39x Mitsuba
instead of 0.55x); then at AVX2 on every host, which cost 8-25% against XLA's default AVX-512 code
on this machine (``scripts/bench_tracer.py``). The farm's CPU workers always use these settings
(``cluster.bootstrap`` starts them); set them in your own process (``set_in_environment(isa=)``
before JAX starts) to get a farm job's bits from ``tracer.render``.
"""
import os

from tracer.runtime.cpu import device_count
from tracer.shared import ISAS, PORTABLE_ISA

__all__ = ["host_isa", "local_isa", "isa_flags", "named_isa", "check_host", "with_flags", "set_in_environment",
           "use_platform_independent_math",
           "use_wide_vectors"]

# XLA vectorizes for 256-bit registers even where AVX-512 has 512-bit ones (a guard against the
# clock drop of early AVX-512 chips). 512-bit vectors render 1.29x faster on the Cornell box, 1.06x
# on orbit.xml and 1.03-1.11x on mesh.xml (AMD EPYC, 2 cores, medians of 5 renders a process), so
# the AVX512 level uses them, and so does tracer.render on such a host (``use_wide_vectors``).
_MAX_ISA = "--xla_cpu_max_isa"
_VECTOR_WIDTH = "--xla_cpu_prefer_vector_width"
_WIDE_VECTORS = f"{_VECTOR_WIDTH}=512"
_PLATFORM_MATH = "--xla_cpu_enable_platform_dependent_math"
PLATFORM_MATH = f"{_PLATFORM_MATH}=false"  # the same arithmetic on every CPU of a level (see above)
# What /proc/cpuinfo lists for each level: XLA's AVX512 code may use F, CD, BW, DQ and VL.
_LEVEL_FLAGS = (("AVX512", {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma"}),
                ("AVX2", {"avx2", "fma"}), ("AVX", {"avx"}))


def host_isa(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> str | None:
    """The highest of ``ISAS`` this host's CPU has, or None where that cannot be told (not an
    x86 Linux host)."""
    try:
        with open(cpuinfo) as f:
            line = next((line for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    if line is None:
        return None
    flags = set(line.split(":", 1)[1].split())
    return next((isa for isa, needs in _LEVEL_FLAGS if needs <= flags), None)


def local_isa() -> str:
    """The level of a job made on this host: its own, or ``PORTABLE_ISA`` where that cannot be told."""
    return host_isa() or PORTABLE_ISA


def isa_flags(isa: str) -> tuple[str, ...]:
    """The XLA flags that make a CPU program of the ``isa`` level (one of ``ISAS``): its
    instructions and, for AVX512, 512-bit vectors (``_WIDE_VECTORS``), then no math of the CPU
    model's own (``PLATFORM_MATH``)."""
    if isa not in ISAS:
        raise ValueError(f"an instruction-set level is one of {', '.join(ISAS)}, got {isa!r}")
    return (f"{_MAX_ISA}={isa}",) + ((_WIDE_VECTORS,) if isa == "AVX512" else ()) + (PLATFORM_MATH,)


def named_isa(xla_flags: str | None) -> str | None:
    """The instruction-set level an XLA_FLAGS value names (its last ``--xla_cpu_max_isa``), or None."""
    named = [f.split("=", 1)[1] for f in (xla_flags or "").split() if f.startswith(f"{_MAX_ISA}=")]
    return named[-1] if named else None


def check_host(isa: str, have: str | None = None) -> None:
    """Refuse (RuntimeError) a host whose CPU lacks the ``isa`` level: XLA would quietly make
    code of a lower level there, with other bits. ``have``: the host's level (``host_isa()``);
    a host whose level cannot be told is let through."""
    have = host_isa() if have is None else have
    if have is not None and ISAS.index(have) < ISAS.index(isa):
        raise RuntimeError(f"this host's CPU has {have}, not {isa}, the instruction set of the job's arithmetic "
                           f"(its bits would differ): render it with --cpu-isa {have} (the bits of what is "
                           f"rendered from then on differ from those rendered before)")


def with_flags(xla_flags: str | None = "", devices: int | None = None, deterministic: bool = True,
               isa: str | None = None) -> str:
    """``xla_flags`` (an XLA_FLAGS value) with the deterministic CPU flags of the ``isa`` level
    (default: this host's, else ``PORTABLE_ISA``) and, if given, a virtual CPU device count (with
    the flag: ``tracer.runtime.cpu.device_count``'s rule); earlier values of the same flags are replaced."""
    drop = (_MAX_ISA, _VECTOR_WIDTH, _PLATFORM_MATH, "--xla_force_host_platform_device_count")
    flags = [f for f in (xla_flags or "").split() if not f.startswith(drop)]
    if deterministic:
        flags.extend(isa_flags(isa or local_isa()))
    if devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={device_count(devices) if deterministic else devices}")
    return " ".join(flags)


def set_in_environment(devices: int | None = None, isa: str | None = None) -> None:
    """Put the flags in this process's XLA_FLAGS (effective only before JAX starts its backend);
    ``isa``: the job's level (``farm status`` shows it), default this host's."""
    os.environ["XLA_FLAGS"] = with_flags(os.environ.get("XLA_FLAGS", ""), devices, isa=isa)


def use_wide_vectors() -> None:
    """Give this process's XLA CPU code 512-bit vectors on an AVX-512 host, unless the process
    names a vector width or an instruction-set level in XLA_FLAGS (a farm worker's are its job's:
    ``isa_flags``) or JAX's backend has started (then nothing can change).

    Part of ``tracer.runtime.process.configure``, beside ``tracer.runtime.cpu.use_every_core``, so that
    ``tracer.render`` runs at the speed of a local farm job with nothing for the user to set.
    """
    from tracer.runtime.jax_private import backends_are_initialized

    flags = os.environ.get("XLA_FLAGS", "")
    if (_VECTOR_WIDTH in flags or named_isa(flags) is not None or backends_are_initialized()
            or host_isa() != "AVX512"):  # (the file read last)
        return
    os.environ["XLA_FLAGS"] = f"{flags} {_WIDE_VECTORS}".strip()


def use_platform_independent_math() -> None:
    """No math of the CPU model's own in this process's XLA CPU code (``PLATFORM_MATH``: a
    render's bits then do not depend on its device count on any CPU), unless the process sets
    that flag in XLA_FLAGS or JAX's backend has started. Part of ``tracer.runtime.process.configure``."""
    from tracer.runtime.jax_private import backends_are_initialized

    flags = os.environ.get("XLA_FLAGS", "")
    if _PLATFORM_MATH in flags or backends_are_initialized():
        return
    os.environ["XLA_FLAGS"] = f"{flags} {PLATFORM_MATH}".strip()
