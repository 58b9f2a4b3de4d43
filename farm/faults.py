"""The environment's faults named as such, not reported as ours: a full disk, a read-only file
system, a folder the driver may not write, on the store (exit 3) or elsewhere (HOME, Ray's temp
folder, the compilation cache: exit 1), each one line naming the path and what is wrong.

``check_environment`` looks at the folders a run writes outside the store before Ray starts
(Ray's own failures there come after a minute, naming none of them); ``named`` turns such an
``OSError`` met later into a ``StoreFault`` or an ``EnvironmentFault``.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable

from farm.errors import FarmError
from farm.store import StoreError

__all__ = ["StoreFault", "EnvironmentFault", "FAULTS", "fault_text", "named", "check_environment",
           "ray_temp_dir", "RAY_TEMP_MIN_FREE"]

# What each errno says of its path: the environment's faults (a bug of ours raises none of these).
FAULTS: dict[int, Callable[[str], str]] = {
    errno.ENOSPC: lambda p: f"no space left on {p}",
    errno.EDQUOT: lambda p: f"disk quota exceeded on {p}",
    errno.EROFS: lambda p: f"{p} is on a read-only file system",
    errno.EACCES: lambda p: f"permission denied on {p}",
    errno.EPERM: lambda p: f"operation not permitted on {p}",
    errno.EIO: lambda p: f"input/output error on {p}",
}
RAY_TEMP_MIN_FREE = 64 << 20  # bytes Ray's temp folder must have free: its sockets, logs and session files


class StoreFault(StoreError):
    """The store's file system refused a write (full, read-only, not permitted): exit 3."""


class EnvironmentFault(FarmError):
    """A folder the run needs outside the store is full, read-only or not permitted: exit 1."""


def fault_text(error: BaseException, path: str | None = None) -> str | None:
    """"no space left on PATH" (``path``, else the error's file) for an environment fault, else None."""
    if not isinstance(error, OSError) or error.errno not in FAULTS:
        return None
    return FAULTS[error.errno](path or error.filename or "the disk")


def named(error: BaseException, store: str | None = None) -> FarmError | None:
    """``error`` (or, from a Ray task, its cause) as a one-line fault: a ``StoreFault`` naming
    ``store`` when its file is in the store (or names none), else an ``EnvironmentFault``
    naming its file; None when it is not an environment fault."""
    error = getattr(error, "cause", None) or error
    if not isinstance(error, OSError) or error.errno not in FAULTS:
        return None
    file = os.fsdecode(error.filename) if error.filename is not None else None
    root = store if store is not None else _store_of(file)
    if root is not None and (file is None or _inside(file, root)):
        where = f" (writing {os.path.relpath(file, root)})" if file and "://" not in root else ""
        return StoreFault(f"{fault_text(error, root)}{where}")
    return EnvironmentFault(fault_text(error, file))


def _inside(file: str, root: str) -> bool:
    if "://" in root:
        return False
    root = os.path.abspath(root)
    return os.path.commonpath([os.path.abspath(file), root]) == root


def _store_of(file: str | None) -> str | None:
    """The frame store (a folder with a zarr.json, the highest) that ``file`` is in, or None."""
    found, folder = None, os.path.dirname(os.path.abspath(file)) if file else None
    while folder and folder != os.path.dirname(folder):
        if os.path.isfile(os.path.join(folder, "zarr.json")):
            found = folder
        folder = os.path.dirname(folder)
    return found


def ray_temp_dir() -> str:
    """The folder an embedded Ray writes its session to, as Ray picks it."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, "ray")


def check_environment(local: bool) -> None:
    """Raise ``EnvironmentFault`` naming the first folder the run would fail on: the compilation
    cache (``JAXFARM_XLA_CACHE``; one that exists but cannot be written only goes unfilled, as
    JAX does), and for an embedded Ray its temp folder and ``$HOME/.ray`` (its token)."""
    from cluster.bootstrap import CACHE_ENV, cache_dir
    cache = cache_dir()
    if cache is not None:
        _check_folder(cache, f"the compilation cache ({CACHE_ENV})", write=False)
    if local:
        temp = ray_temp_dir()
        _check_folder(temp, "Ray's temp folder (RAY_TMPDIR)", RAY_TEMP_MIN_FREE)
        _check_folder(os.path.join(os.path.expanduser("~"), ".ray"), "Ray's folder in HOME")


def _check_folder(path: str, what: str, min_free: int = 0, write: bool = True) -> None:
    """``path`` is a folder (made if missing) and, with ``write``, one this process can write a
    file in, with ``min_free`` bytes free."""
    try:
        os.makedirs(path, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # it, or a folder above it, is a file
        file = path
        while os.path.dirname(file) != file and not os.path.lexists(file):
            file = os.path.dirname(file)
        raise EnvironmentFault(f"{what}: {file} is not a folder") from None
    except OSError as e:
        raise EnvironmentFault(f"{what}: {fault_text(e, path) or f'cannot make {path}: {e.strerror}'}") from None
    if not os.path.isdir(path):
        raise EnvironmentFault(f"{what}: {path} is not a folder")
    if not write:
        return
    try:
        with tempfile.TemporaryFile(dir=path) as f:
            f.write(b"\0")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise EnvironmentFault(f"{what}: {fault_text(e, path) or f'cannot write in {path}: {e.strerror}'}") from None
    free = shutil.disk_usage(path).free
    if free < min_free:
        raise EnvironmentFault(f"{what}: no space left on {path} ({free >> 20} MiB free; Ray needs "
                               f"{min_free >> 20} MiB)")
