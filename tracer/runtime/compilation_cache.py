"""JAX's persistent compilation cache: where it is, and turning it on.

A work unit takes seconds to compile (8-18 s for the examples on a 2-core host), and the same
scene compiles to the same program in every process. So, as Mitsuba's Dr.Jit keeps the kernels it
compiled in ``~/.drjit``, the farm and ``tracer.render`` keep theirs in one folder: ``cache_dir()``,
``$JAXFARM_XLA_CACHE`` (``off`` turns it off), else ``~/.cache/jaxfarm/xla``. JAX keys each program
by its HLO, flags, devices and versions, so a stale entry is never used; the folder may be deleted
at any time.

* ``enable(directory)``: every program of this process cached there (a farm worker: JAX's
  thresholds would skip programs that compile in under a second, and small ones).
* ``use_by_default()``: ``tracer.render``'s callers. The folder only, JAX's own thresholds kept
  (what takes a second or more to compile), and nothing where the process chose a cache folder
  of its own or turned this one off. JAX decides whether to use a cache at its first compilation:
  a process that compiled before calling the tracer goes without. In such a process
  ``tracer.render`` also keeps its work units whole beside the cache (``tracer.runtime.compiled``:
  a later process loads them without tracing); ``default_folder()`` says where.
"""
import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["CACHE_ENV", "cache_dir", "enable", "use_by_default", "default_folder", "bypassed", "cache_hits"]

# The persistent compilation cache's folder; empty or "off" turns the cache off.
CACHE_ENV = "JAXFARM_XLA_CACHE"
# JAX's cache file of a key (jax._src.lru_cache: KEY-cache, beside it KEY-atime).
_ENTRY_SUFFIXES = ("-cache", "-atime")
_cache_folder: list[str] = []  # the cache's folder (enable's last)
_by_default: list[str] = []    # the folder use_by_default set, if it did
_bypass = threading.local()    # .on: this thread's compilations read no entries (``bypassed``)
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_hits: list[int] = []          # [programs loaded from the cache], once cache_hits() is first asked


def cache_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """The persistent compilation cache's folder for this process, or None when turned off:
    ``$JAXFARM_XLA_CACHE``, else ``$XDG_CACHE_HOME/jaxfarm/xla`` (``~/.cache/jaxfarm/xla``)."""
    environ = os.environ if environ is None else environ
    if CACHE_ENV in environ:
        value = environ[CACHE_ENV].strip()
        return None if value.lower() in ("", "off", "0", "none") else os.path.expanduser(value)
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxfarm", "xla")


def enable(directory: str | None) -> None:
    """JAX's persistent compilation cache in ``directory`` (None: nothing), for every program:
    JAX's defaults skip programs that compile in under a second, and small ones."""
    import jax

    if directory is None:
        return
    os.makedirs(directory, exist_ok=True)
    _use(directory)
    _by_default.clear()  # chosen by the process: tracer.render keeps no programs of its own there
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def use_by_default() -> None:
    """``cache_dir()`` as this process's cache folder, with JAX's thresholds, unless the process
    named a folder itself or the environment turns the cache off (see the module's docstring). A
    folder that cannot be made leaves the process without a cache."""
    import jax

    directory = cache_dir()
    if directory is None or jax.config.jax_compilation_cache_dir:
        return
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return
    _use(directory)
    _by_default[:] = [directory]


def _use(directory: str) -> None:
    """JAX's cache folder set to ``directory`` (made), its unreadable entries replaced."""
    import jax

    jax.config.update("jax_compilation_cache_dir", directory)
    _cache_folder[:] = [directory]
    _replace_unreadable_entries()


def default_folder() -> str | None:
    """The cache folder ``use_by_default`` gave this process, while the process still uses it;
    None where the process chose its own (a farm worker, a test session) or has none."""
    import jax

    if _by_default and jax.config.jax_compilation_cache_dir == _by_default[0]:
        return _by_default[0]
    return None


def cache_hits() -> int:
    """Programs this process has loaded from the persistent cache since this was first asked
    (JAX's monitoring events, counted from then on)."""
    if not _hits:
        from jax import monitoring

        def on_event(event: str, **_: str | int) -> None:
            if event == _CACHE_HIT:
                _hits[0] += 1

        _hits.append(0)
        monitoring.register_event_listener(on_event)
    return _hits[0]


@contextlib.contextmanager
def bypassed() -> Iterator[None]:
    """Compilations of this thread in the block read nothing from the cache: XLA compiles them
    (and JAX writes what it has not got). For a program to be serialized, which must not be one
    the cache gave (``tracer.runtime.compiled``). Where JAX's reader moved (see
    ``_replace_unreadable_entries``) the cache is read as before."""
    _bypass.on = True
    try:
        yield
    finally:
        _bypass.on = False


def _replace_unreadable_entries() -> None:
    """An entry of the cache that does not read (truncated, corrupt) goes once its read fails, so
    that the program JAX then compiles is written in its place: JAX warns and compiles, but its
    cache never overwrites a key it has, and would compile it in every run. (JAX's cache reads
    through ``jax._src.compilation_cache.get_executable_and_time``; where that moved, entries are
    left as JAX leaves them: ``tests/cluster/test_bootstrap.py`` says so.)"""
    try:
        from jax._src import compilation_cache
    except ImportError:
        return
    read = getattr(compilation_cache, "get_executable_and_time", None)
    if read is None or getattr(read, "replaces_unreadable", False):
        return

    def get_executable_and_time(cache_key: str, *args: Any, **kwargs: Any) -> Any:
        if getattr(_bypass, "on", False):
            return None, None
        try:
            return read(cache_key, *args, **kwargs)
        except Exception:
            for folder in _cache_folder:
                for suffix in _ENTRY_SUFFIXES:
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(folder, cache_key + suffix))
            raise

    get_executable_and_time.replaces_unreadable = True  # type: ignore[attr-defined]
    compilation_cache.get_executable_and_time = get_executable_and_time
