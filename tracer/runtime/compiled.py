"""A host's compiled work units on disk, so that a process starting a job runs its work unit
without tracing it again.

JAX's persistent compilation cache keys a program by its HLO, so every new process still traces
the work unit and lowers it before the cache can find the compiled program: on orbit.xml that
was most of a warm member's start (November 28: trace and lowering 2.9 + 2.3 s, the cache's read
2.1 s, on a loaded 2-core machine). Here the compiled program itself is saved
(``jax.experimental.serialize_executable``) under a key computed before any tracing, from
everything that decides what tracing makes: the tracer's code (every file of the package), the
versions of Python, JAX, jaxlib and numpy, JAX's configuration, XLA_FLAGS and JAX's environment,
the devices, and the arguments' structure (static fields included), shapes, dtypes and shardings
(``KeptPrograms.signature``). Whatever differs gives another key: a miss, never a wrong program.
The program loaded is the one XLA compiled from the same HLO, so its bits are the same.

The driver's preflight saves the job's work unit as it compiles it (``cluster.preflight``; one
already saved it leaves there unloaded), the job's members wait for it meanwhile (``awaiting``), and a
member that compiles one saves it for the host's other members; ``tracer.render`` saves and loads
its own where its process uses the default cache (``tracer.runtime.compilation_cache``). Single-process
programs only: a group over several hosts compiles its program together, and traces as before. The folder is
beside JAX's own cache (``tracer.runtime.compilation_cache.cache_dir``), the ``KEEP`` newest programs kept;
like JAX's cache it holds machine code this host runs, so it must be writable by this user only.
An entry that does not load is removed and the program traced and compiled again.

Only a program XLA compiled here is saved, never one JAX's cache gave: XLA's CPU executable,
once loaded from a serialization, serializes again without some of its kernels, and the copy
fails where it runs ("Function pad_bitcast_fusion.1 not found", jax 0.12). So ``tracer.render``
and the driver's preflight compile a program to be saved past JAX's entries
(``compilation_cache.bypassed``): where JAX's cache has it and this folder not (pruned, or the
tracer's code changed but not the program), that compile takes the full time once, and later
processes load the program whole. A group's members, which compile side by side, take JAX's
entry (seconds) and save nothing; so does any process where the cache gave it all the same
(JAX's reader moved).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jax

    from tracer.runtime.programs import KeptPrograms

__all__ = ["FOLDER", "KEEP", "SHARED_ACCELS", "code_digest", "key", "load", "save", "program"]

FOLDER = "jaxfarm-programs"  # under JAX's cache folder
KEEP = 32                    # programs kept (each some MB: orbit.xml's work unit 2.5 MB)
# Intersection backends whose programs are shared: not Warp's, whose rays a Python callback
# answers (a callback's pickled function is not known to load right in another process).
SHARED_ACCELS = ("brute", "bvh", "embree")
_SUFFIX = ".program"
_code: list[str] = []        # the tracer's code digest, once a process
# Part of every key: entries of earlier formats are never loaded (1: saved from JAX's cache too).
_FORMAT = 2


def code_digest() -> str:
    """sha256 over every file of the tracer package (its Python and its native extension)."""
    if not _code:
        import tracer

        root = pathlib.Path(tracer.__file__).resolve().parent
        digest = hashlib.sha256()
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".so")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _code.append(digest.hexdigest())
    return _code[0]


def key(kept: KeptPrograms, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The key of the program ``kept`` would make for these arguments in this process; None in a
    process of a multi-process JAX program (not shared)."""
    import jax
    import jaxlib
    import numpy as np

    if jax.process_count() != 1:
        return None
    environment = sorted((k, v) for k, v in os.environ.items() if k == "XLA_FLAGS" or k.startswith(("JAX_", "XLA_")))
    devices = [(d.id, d.platform, d.device_kind, d.process_index) for d in jax.devices()]
    parts = (_FORMAT, code_digest(), sys.version, jax.__version__, jaxlib.__version__, np.__version__,
             sorted((k, repr(v)) for k, v in jax.config.values.items()), environment, devices,
             kept.signature(args, kwargs))
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _path(folder: str, digest: str) -> pathlib.Path:
    return pathlib.Path(folder) / FOLDER / (digest + _SUFFIX)


def load(folder: str | None, digest: str | None) -> jax.stages.Compiled | None:
    """The program saved under ``digest``, loaded; None where there is none, or where it does not
    load (the entry is then removed)."""
    if folder is None or digest is None:
        return None
    path = _path(folder, digest)
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    from jax.experimental import serialize_executable

    try:
        payload, in_tree, out_tree = pickle.loads(blob)
        return serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    except Exception:  # noqa: BLE001 (a truncated or foreign entry: compiled again, and replaced)
        path.unlink(missing_ok=True)
        return None


def _saved(folder: str | None, digest: str | None) -> bool:
    """Whether ``folder`` holds the program ``digest``; it is then made the newest (kept longest)."""
    if folder is None or digest is None:
        return False
    try:
        os.utime(_path(folder, digest))
        return True
    except OSError:
        return False


def _wait_saved(folder: str | None, digest: str | None, awaiting: Callable[[], bool], poll_s: float = 0.05) -> None:
    """Return once ``folder`` holds the program ``digest``, or ``awaiting()`` is False."""
    if folder is None or digest is None:
        return
    path = _path(folder, digest)
    while not path.exists() and awaiting():
        time.sleep(poll_s)


def save(folder: str | None, digest: str | None, compiled: jax.stages.Compiled) -> None:
    """Save ``compiled`` under ``digest`` (a new file renamed into place: a reader never sees
    half of it), then keep the ``KEEP`` newest. A program that cannot be saved is not: the next
    process traces it, as it would without this."""
    if folder is None or digest is None:
        return
    from jax.experimental import serialize_executable

    target = _path(folder, digest)
    try:
        blob = pickle.dumps(serialize_executable.serialize(compiled))
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, target)
        except BaseException:
            pathlib.Path(tmp).unlink(missing_ok=True)
            raise
        entries = sorted(target.parent.glob("*" + _SUFFIX), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 (not serializable, or not writable: the next process traces it)
        return


def program(kept: KeptPrograms, folder: str | None, args: tuple[Any, ...], kwargs: dict[str, Any],
            past_cache: bool = True, for_others: bool = False,
            awaiting: Callable[[], bool] | None = None) -> str:
    """Make sure ``kept`` has its program for these arguments: in this process already, else
    loaded from ``folder``, else compiled here by XLA and saved for the host's other processes.
    ``past_cache=False`` (a group's members, which compile side by side): where JAX's cache has
    the program it is loaded from there, in seconds, and not saved. ``for_others`` (the driver's
    preflight, which compiles for the members and runs nothing): a program ``folder`` has already
    is left there, not loaded (its load took a third of a second of the cores Ray was starting
    on). ``awaiting``: while it answers True and ``folder`` lacks the program, another process
    is making it (a member waiting for the preflight): wait for it rather than compile. Returns
    which: "kept", "saved" (``for_others``), "loaded" or "compiled"."""
    if kept.has_program(args, kwargs):
        return "kept"
    digest = key(kept, args, kwargs)
    if for_others and _saved(folder, digest):
        return "saved"
    if awaiting is not None:
        _wait_saved(folder, digest, awaiting)
    compiled = load(folder, digest)
    if compiled is not None:
        kept.adopt(compiled, args, kwargs)
        return "loaded"
    if folder is None or digest is None:  # nothing to save: JAX's cache as for any program
        kept.compile(*args, **kwargs)
        return "compiled"
    from tracer.runtime import compilation_cache

    hits = compilation_cache.cache_hits()
    with compilation_cache.bypassed() if past_cache else contextlib.nullcontext():
        made = kept.compile(*args, **kwargs)
    if compilation_cache.cache_hits() == hits:  # (another thread's hit meanwhile only skips a save)
        save(folder, digest, made)
    return "compiled"
