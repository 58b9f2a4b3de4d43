"""Every file a scene load reads, with the SHA-256 of the bytes it read (host only).

The loaders read each file's bytes once, through ``read_file``, and decode those bytes; inside
``recording()`` each read is noted as a ``FileRead`` (absolute path, SHA-256 of those bytes).
A farm member loads its scene under ``recording()`` and compares what it read with what its
job's store records (``check_reads``): the hash is of the bytes rendered, not of a path's
state at another time.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

from tracer.errors import SceneError

__all__ = ["FileRead", "SceneChanged", "recording", "read_file", "check_reads"]


class FileRead(NamedTuple):
    """One file read by a scene load."""

    path: str     # absolute
    sha256: str   # hex digest of the bytes read


class SceneChanged(SceneError):
    """A file a scene load read is not the file its job recorded (edited, replaced, or new)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[type[SceneChanged], tuple[str, str]]:  # (it crosses processes: Ray)
        return SceneChanged, (str(self), self.path)


_LOG: contextvars.ContextVar[list[FileRead] | None] = contextvars.ContextVar("tracer_io_reads", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[FileRead]]:
    """Note every ``read_file`` inside the block, in order, in the list it yields."""
    log: list[FileRead] = []
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the file at ``path`` (``OSError`` as ``open`` raises it), noted while recording."""
    with open(path, "rb") as f:
        data = f.read()
    log = _LOG.get()
    if log is not None:
        log.append(FileRead(os.path.abspath(path), hashlib.sha256(data).hexdigest()))
    return data


def check_reads(reads: Sequence[FileRead], recorded: Mapping[str, str]) -> None:
    """Raise ``SceneChanged`` for the first read whose bytes are not those of ``recorded``
    (absolute path -> SHA-256 hex, a job's files as its store records them), or whose file
    ``recorded`` does not list. Nothing is checked against an empty ``recorded``."""
    if not recorded:
        return
    for read in reads:
        expected = recorded.get(read.path)
        if expected is None:
            raise SceneChanged(f"scene file {read.path} is read but not among the job's recorded files "
                               f"(the scene changed since the job started)", read.path)
        if expected != read.sha256:
            raise SceneChanged(f"scene file {read.path} changed since the job started (SHA-256 "
                               f"{read.sha256[:12]}, recorded {expected[:12]})", read.path)
