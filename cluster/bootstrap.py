"""How a worker process starts JAX: its environment, then JAX, its configuration, then
``jax.distributed``. The one place that keeps that order.

JAX reads ``JAX_PLATFORMS`` and ``XLA_FLAGS`` once, when its backend starts; ``jax.config``
options must be set before the first compilation; ``jax.distributed.initialize`` must come before
any device is touched. The driver computes a member's environment (``worker_env``: plain strings,
no JAX); the member applies it in its own process (``start_jax``: environment, import, config),
then joins its group (``join_group``).

What a worker runs with:

* CPU: the job's instruction-set level (``tracer.runtime.xla_flags``: the same bits on any device count,
  host count or x86 CPU of that level; a host below it refuses to start) and one XLA device per
  core unless the group names a count (``tracer.runtime.cpu``: XLA runs a device's kernels on one core at
  a time), at least ``tracer.runtime.cpu.MIN_CPU_DEVICES`` (``tracer.runtime.cpu.device_count``); gloo collectives.
* GPU / TPU: ``JAX_PLATFORMS`` names the platform; nothing else.
* Every platform: JAX's persistent compilation cache in ``cache_dir()``, so that a second run of a
  job (a resume, a refine, the next job on the same scene) loads its programs instead of
  compiling them. Executables that call Embree (an XLA custom call, registered when a scene is
  built) or back into Python (Warp) are cached too: JAX serializes callbacks with their
  descriptors and reconnects them on load (measured: ``scripts/bench_vs_mitsuba.py``). The
  driver's preflight child (``cluster.preflight``) starts JAX here too, so that what it compiles
  ahead is what the members look up.
"""
import os
import sys
import types
from collections.abc import Mapping

from tracer.runtime import compilation_cache
from tracer.runtime.compilation_cache import CACHE_ENV, cache_dir
from tracer.runtime.xla_flags import check_host, named_isa, with_flags

__all__ = ["CACHE_ENV", "cache_dir", "worker_env", "local_devices_per_member", "start_jax", "enable_compilation_cache", "join_group",
           "compile_stats"]

_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # a compilation, or a load from the cache
_stats: dict[str, float] = {"programs": 0, "seconds": 0.0}
_hits_before: list[int] = []  # the cache's loads counted before this process listened
_listening = False
_PLATFORM_NAMES = {"cpu": "cpu", "gpu": "cuda", "tpu": "tpu"}  # GroupShape's name -> JAX_PLATFORMS
_DEVICE_COUNT = "--xla_force_host_platform_device_count"


def worker_env(platform: str, devices_per_host: int | None = None, environ: Mapping[str, str] | None = None,
               isa: str | None = None) -> dict[str, str]:
    """Environment variables of a member process (driver side; ``environ``: the driver's);
    ``isa``: the CPU arithmetic's instruction-set level (default: the driver's host's).

    The driver's own XLA_FLAGS pass through (less the flags set here). The cache folder is
    passed only when the driver names one: otherwise each host takes its own user's default.
    """
    environ = os.environ if environ is None else environ
    env = {"JAX_PLATFORMS": _PLATFORM_NAMES[platform]}
    if platform == "cpu":
        env["XLA_FLAGS"] = with_flags(environ.get("XLA_FLAGS", ""), devices_per_host, isa=isa)
    if CACHE_ENV in environ:
        env[CACHE_ENV] = environ[CACHE_ENV]
    return env


def local_devices_per_member(members: int) -> int:
    """CPU devices for each of ``members`` worker processes that share this machine's cores: a
    device per core, the cores split evenly (``tracer.runtime.cpu``: XLA runs a device on one core)."""
    from tracer.runtime.cpu import cores  # (no JAX there)

    return max(1, cores() // members)


def _one_device_per_core(flags: str) -> str:
    """A CPU member given no device count takes one per core it may run on."""
    from tracer.runtime.cpu import device_count

    return flags if _DEVICE_COUNT in flags else f"{flags} {_DEVICE_COUNT}={device_count()}".strip()


def start_jax(env: Mapping[str, str]) -> types.ModuleType:
    """Member side: put ``env`` (``worker_env``) in this process's environment, import JAX and
    configure it; returns the ``jax`` module. Refuses a process whose JAX already started with
    other settings (its flags can no longer change)."""
    env = dict(env)
    if env.get("JAX_PLATFORMS") == "cpu":
        env["XLA_FLAGS"] = _one_device_per_core(env.get("XLA_FLAGS", ""))
        isa = named_isa(env["XLA_FLAGS"])
        if isa is not None:
            check_host(isa)
    if "jax" in sys.modules:
        from tracer.runtime.jax_private import backends_are_initialized

        stale = {k: v for k, v in env.items() if os.environ.get(k) != v}
        if stale and backends_are_initialized():
            raise RuntimeError(f"JAX already started in process {os.getpid()} with other settings "
                               f"({', '.join(sorted(stale))})")
    os.environ.update(env)
    import jax

    if env.get("JAX_PLATFORMS") == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    enable_compilation_cache(cache_dir())
    return jax


def enable_compilation_cache(directory: str | None) -> None:
    """JAX's persistent compilation cache in ``directory`` (None: off), for every program
    (``tracer.runtime.compilation_cache.enable``), this process's compilations counted."""
    _listen()
    compilation_cache.enable(directory)


def join_group(coordinator: str | None, size: int, rank: int, timeout_s: float, heartbeat_s: float) -> None:
    """Join the group's JAX program (``jax.distributed``); a one-member group needs none."""
    import jax

    if size > 1:
        jax.distributed.initialize(coordinator, num_processes=size, process_id=rank,
                                   initialization_timeout=int(timeout_s), heartbeat_timeout_seconds=int(heartbeat_s),
                                   shutdown_timeout_seconds=5)


def _listen() -> None:
    """Count this process's compilations through JAX's monitoring events (once per process)."""
    global _listening
    if _listening:
        return
    from jax import monitoring

    _hits_before[:] = [compilation_cache.cache_hits()]  # (its count of the cache's loads, from here)

    def on_duration(event: str, duration_secs: float, **_: str | int) -> None:
        if event == _BACKEND_COMPILE:
            _stats["programs"] += 1
            _stats["seconds"] += duration_secs

    monitoring.register_event_duration_secs_listener(on_duration)
    _listening = True


def compile_stats() -> dict[str, float]:
    """This process's XLA programs so far: ``programs`` made, ``cache_hits`` of them loaded from the
    persistent cache (the rest were compiled), ``seconds`` spent making them (loads included)."""
    hits = compilation_cache.cache_hits() - _hits_before[0] if _hits_before else 0
    return dict(_stats, cache_hits=hits, compiled=_stats["programs"] - hits)
