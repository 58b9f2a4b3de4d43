"""Workers write their own results; the driver commits records, not pixels.

A store that the workers can reach (a local POSIX path, shared by every host) has a dispatch
area next to its arrays::

    dispatch/state/      float32 (2**62, tile, tile, 10 + K): one Zarr chunk per dispatch, a tile's
                         new running state (a complete chunk folded onto the committed state)
    dispatch/tail/       float32 (2**62, tile, tile, 4 + K): one Zarr chunk per dispatch, a tile's tail

Both are encoded as ``state/`` and ``tail/`` are (same chunk shape, same codecs), so a dispatch's
chunk file *is* the tile's chunk of ``state/`` or ``tail/`` once renamed into place. Their chunk
keys are flat (``c.INDEX.0.0.0``, all in one folder): a dispatch makes no folders.

Every sending of a task gets a ``Slot``: the tile, the kind of result, and a dispatch index
unique in the store (the driver's lease epoch, or a random run number without a lease, times
2**32, plus a serial). The member renders, then ``Slot.write``: reads the committed state it
folds onto (CRC-checked against the record the driver saw), folds (``farm.tree.fold``), writes
the chunk at the slot's index, makes it durable (fsync of the file) and makes the folder the
chunk lands in once committed, before it answers with the block's CRC. The slot is plain data pickled with the task: the worker imports
``farm.tree`` and ``farm.results`` when it runs it (no JAX there, and no Zarr where it writes the
chunk files itself: the slot names its dispatch key), so ``cluster`` stays below ``farm``.

The driver commits in batches (``Commits.flush``): one lease check; the records naming the CRCs
about to land where a tile has folded chunks already (``next_crc``: ``farm.store``'s protocol,
so a kill anywhere leaves a store that ``verified_records`` reads right); the renames (fsync of
the folders they land in); the records of the new counts. A tile's next chunk is sent only once its previous one is committed (the
state it folds onto must exist), so each tile has at most one dispatch in flight.

Orphans: a dispatch that wrote and was never committed (its member died before answering, its
answer was fenced, its driver died or was fenced) leaves a chunk in ``dispatch/`` that no record
names. Nothing reads them; the driver deletes the whole area when a run starts (before it sends
anything) and when it ends. A fenced or dead driver's workers write only at indexes of its own
epoch, which the live driver never renames: their writes can never become committed.
"""
from __future__ import annotations

import dataclasses
import os
import random
import shutil
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
from numcodecs import Zstd
from numpy.typing import ArrayLike

from farm.records import FIELD_COUNT, TileRecord
from farm.tree import fold, split_tail, state_channels, tail_block, tail_channels

if TYPE_CHECKING:
    import zarr

    from farm.planner import Task
    from farm.store import FrameStore

# A member imports no Zarr (0.4 s of its first task) where it writes chunk files itself (``ChunkFile``):
# this module's Zarr is the driver's, and a member's only where the store's codecs are others.

__all__ = ["Slot", "Commits", "shared_root", "DispatchError"]

_AREA = "dispatch"
_INDEXES = 2 ** 62
_arrays: dict[tuple[str, int], zarr.Array] = {}  # (folder, run) -> zarr.Array: a member opens each array once a run


class DispatchError(Exception):
    """A member could not read what its task folds onto (missing or failing its CRC)."""


def shared_root(store: FrameStore) -> str | None:
    """The store's folder where workers can write to it (a local filesystem store), else None."""
    from zarr.storage import LocalStore

    return store.group.store.root.as_posix() if isinstance(store.group.store, LocalStore) else None


def _crc(block: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(block, np.float32).tobytes()) & 0xFFFFFFFF


def _array(folder: str, run: int) -> zarr.Array:
    """The Zarr array at ``folder``, opened once per run (a run does not reshape the store)."""
    if (folder, run) not in _arrays:
        import zarr

        from farm.store import writing_empty_chunks
        _arrays[(folder, run)] = writing_empty_chunks(zarr.open_array(folder, mode="r+"))
    return _arrays[(folder, run)]


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclasses.dataclass(frozen=True)
class ChunkFile:
    """A chunk's file of ``state/`` or ``tail/`` (and of the dispatch area): float32, little
    endian, compressed by Zstd alone, zarr's default codecs (``ZstdCodec`` is numcodecs' ``Zstd``).
    A member writes and reads those files itself: a tenth of the CPU of going through zarr's
    event loop, which 32 groups sharing a process queue on. ``of`` an array with other codecs
    is None: members go through zarr."""

    shape: tuple[int, int, int]  # (tile, tile, channels): a chunk, its first dimension (one frame) dropped
    level: int
    checksum: bool

    @classmethod
    def of(cls, array):
        from zarr.codecs import BytesCodec, ZstdCodec

        codecs = array.metadata.codecs
        if not (len(codecs) == 2 and isinstance(codecs[0], BytesCodec) and isinstance(codecs[1], ZstdCodec)
                and str(getattr(codecs[0].endian, "value", codecs[0].endian)) == "little"):
            return None
        return cls(tuple(array.chunks[1:]), codecs[1].level, codecs[1].checksum)

    def encode(self, block: np.ndarray) -> bytes:
        """The file of the chunk whose top-left corner is ``block`` (h, w, channels); zeros past it."""
        chunk = np.zeros(self.shape, "<f4")
        chunk[:block.shape[0], :block.shape[1]] = block
        return Zstd(level=self.level, checksum=self.checksum).encode(chunk.tobytes())

    def decode(self, data: bytes) -> np.ndarray:
        """The chunk (tile, tile, channels) float32 of a file's bytes."""
        raw = Zstd(level=self.level, checksum=self.checksum).decode(data)
        return np.frombuffer(raw, "<f4").reshape(self.shape).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one dispatch writes, and what it builds on (plain data, pickled with the task).

    kind: 'state' (a complete chunk folded onto the committed state ``base_crc`` of ``folded``
    chunks; 0 chunks: zeros) or 'tail' (the chunk's sums as they stand). ``start_crc``: the
    committed tail the task continues from (None: from zeros).
    """

    root: str
    kind: str
    index: int
    key: tuple[int, int, int]  # (frame index, tile row, tile column)
    box: tuple[int, int, int, int]  # (y0, y1, x0, x1) of the tile in the film
    folded: int
    base_crc: int
    start_crc: int | None = None
    aovs: int = 0       # the job's AOV channels, after the RGB (``tracer.io.aovs``)
    chunk_key: str | None = None  # the tile's chunk key in ``kind``'s array (``state/`` and ``tail/`` alike)
    files: tuple[ChunkFile, ChunkFile] | None = None  # (state's, tail's) ``ChunkFile``, or None: through zarr
    dispatch_key: str | None = None  # the chunk key of ``index`` in the dispatch area

    @property
    def path(self) -> str:
        """The chunk file this dispatch writes."""
        assert self.dispatch_key is not None  # (Commits.slot names it)
        return os.path.join(self._area, self.dispatch_key)

    @property
    def _area(self) -> str:
        return os.path.join(self.root, _AREA, self.kind)

    @property
    def _dispatch(self) -> zarr.Array:
        return _array(self._area, self.index >> 32)

    def _read(self, kind, crc):
        f, _, _ = self.key
        y0, y1, x0, x1 = self.box
        if self.files is None:
            block = _array(os.path.join(self.root, kind), self.index >> 32)[f, y0:y1, x0:x1, :]
        else:
            try:
                with open(os.path.join(self.root, kind, self.chunk_key), "rb") as file:
                    block = self._file(kind).decode(file.read())[:y1 - y0, :x1 - x0]
            except (OSError, RuntimeError, ValueError):  # missing, or does not decode
                block = None
        if block is None or _crc(block) != crc:
            raise DispatchError(f"tile {self.key}: its committed {kind} does not match its record's CRC")
        return block

    def _file(self, kind):
        return self.files[0] if kind == "state" else self.files[1]

    def start(self, tile_h: int, tile_w: int) -> tuple[np.ndarray, np.ndarray]:
        """(value (tile_h, tile_w, 3 + aovs), weight (tile_h, tile_w)) the task adds its passes to."""
        start = np.zeros((tile_h, tile_w, tail_channels(self.aovs)), np.float32)
        if self.start_crc is not None:
            tail = self._read("tail", self.start_crc)
            start[:tail.shape[0], :tail.shape[1]] = tail
        return split_tail(start)

    def write(self, value: ArrayLike, weight: ArrayLike) -> int:
        """Write the task's result (value (th, tw, 3 + aovs), weight (th, tw), the tile's full size)
        at this slot, durably; returns the CRC-32 of the block written (cropped to the film)."""
        y0, y1, x0, x1 = self.box
        h, w = y1 - y0, x1 - x0
        value, weight = np.asarray(value, np.float32)[:h, :w], np.asarray(weight, np.float32)[:h, :w]
        if self.kind == "state":
            base = (self._read("state", self.base_crc) if self.folded
                    else np.zeros((h, w, state_channels(self.aovs)), np.float32))
            block = fold(base, value, weight)
        else:
            block = tail_block(value, weight)
        block = np.ascontiguousarray(block, np.float32)
        path = self.path
        if self.files is None:
            self._dispatch[self.index, :h, :w, :] = block
            _fsync(path)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, self._file(self.kind).encode(block))
                os.fsync(fd)
            finally:
                os.close(fd)
        # The folder needs no fsync: the driver renames the file out of it and makes the folder
        # it lands in durable before any record names it. That folder is made here, so that the
        # driver only renames (an empty folder names nothing).
        assert self.chunk_key is not None  # (Commits.slot names it)
        os.makedirs(os.path.dirname(os.path.join(self.root, self.kind, self.chunk_key)), exist_ok=True)
        return _crc(block)


@dataclasses.dataclass
class _Written:
    task: Task
    slot: Slot
    crc: int


class Commits:
    """The driver's side: slots for the tasks it sends, and the commits of their answers.

    ``records`` (F, TY, TX) of ``farm.records.RECORD`` are the store's, verified; they are kept
    here as the run changes them (the driver reads no record back while it runs).
    """

    def __init__(self, store: FrameStore, records: np.ndarray, spp: int, root: str):
        self.store, self.records, self.spp, self.root = store, records, spp, root
        lease = store.lease
        run = lease.holder.epoch if lease is not None else random.getrandbits(29) | 2 ** 29
        self.next_index = run * 2 ** 32
        self.pending: list[_Written] = []  # _Written answers not yet committed
        self.pool = ThreadPoolExecutor(64)  # fsyncs of the folders renames land in, side by side
        self._areas = {kind: self._make_area(kind) for kind in ("state", "tail")}
        self._arrays = {kind: getattr(store, kind) for kind in ("state", "tail")}
        files = tuple(ChunkFile.of(self._arrays[kind]) for kind in ("state", "tail"))
        same_keys = (self._arrays["state"].metadata.chunk_key_encoding
                     == self._arrays["tail"].metadata.chunk_key_encoding)
        self.files = files if None not in files and same_keys else None

    def _make_area(self, kind):
        """The dispatch array of ``kind``, made anew, empty (any chunk there is an orphan: nothing
        of this run has been sent yet)."""
        like = getattr(self.store, kind)
        area = self.store.group.require_group(_AREA)
        if kind in area:
            shutil.rmtree(os.path.join(self.root, _AREA, kind), ignore_errors=True)
        t = self.store.tile
        return area.create_array(kind, shape=(_INDEXES, t, t, like.shape[-1]), chunks=(1, t, t, like.shape[-1]),
                                 dtype="float32", fill_value=0.0, compressors=like.compressors,
                                 serializer=like.serializer, overwrite=True,
                                 chunk_key_encoding={"name": "default", "separator": "."})

    # -- sending ---------------------------------------------------------------------------

    def may_start(self, task: Task) -> bool:
        """A tile's chunk is sent once the chunks before it are committed."""
        return task.chunk == int(self.records["folded"][task.line])

    def slot(self, task: Task) -> Slot:
        """A new slot for a dispatch of ``task`` (its tile's earlier chunks committed)."""
        record = TileRecord.of(self.records[task.line])
        self.next_index += 1
        start = record.tail_crc if task.continues else None
        kind = "tail" if task.tail else "state"
        return Slot(root=self.root, kind=kind, index=self.next_index, key=task.line,
                    box=self.store.tile_box(*task.line[1:]), folded=record.folded,
                    base_crc=record.state_crc, start_crc=start, aovs=self.store.channels - 3,
                    chunk_key=self._chunk_key(kind, task.line), files=self.files,
                    dispatch_key=self._areas[kind].metadata.encode_chunk_key((self.next_index, 0, 0, 0)))

    def _chunk_key(self, kind: str, line: tuple[int, int, int]) -> str:
        """The tile's chunk key in ``kind``'s array."""
        return self._arrays[kind].metadata.encode_chunk_key((*line, 0))

    # -- committing ------------------------------------------------------------------------

    def accept(self, task: Task, slot: Slot, crc: int) -> None:
        """A live dispatch's answer: its slot holds a block of CRC ``crc``; committed by ``flush``."""
        self.pending.append(_Written(task, slot, crc))

    def drop(self, slot: Slot) -> None:
        """Delete what a dispatch that will never be committed wrote (a fenced answer)."""
        try:
            os.remove(slot.path)
        except FileNotFoundError:
            pass

    def flush(self) -> list[tuple[int, int, int]]:
        """Commit the answers accepted since the last flush; returns the tiles that advanced."""
        if not self.pending:
            return []
        batch, self.pending = self.pending, []
        self.store._check_lease()
        keys = [w.task.line for w in batch]
        before = [TileRecord.of(self.records[k]) for k in keys]
        marked: list[tuple[tuple[int, int, int], TileRecord]] = []
        for w, record in zip(batch, before):
            # The CRC about to land, so that a kill after the rename still counts the tile's
            # earlier chunks; a first fold needs none (a kill then loses that chunk alone).
            if w.slot.kind == "state" and record.folded:
                marked.append((w.task.line, record.without_tail()._replace(next_crc=w.crc)))
        if marked:
            self._put(*zip(*marked))
        folders: set[str] = set()
        for w in batch:
            assert w.slot.chunk_key is not None  # (Commits.slot names it)
            target = os.path.join(self.root, w.slot.kind, w.slot.chunk_key)
            try:
                os.rename(w.slot.path, target)
            except FileNotFoundError:  # its folder is gone (its member made it)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.rename(w.slot.path, target)
            folders.add(os.path.dirname(target))
        list(self.pool.map(_fsync, folders))
        done: list[TileRecord] = []
        for w, record in zip(batch, before):
            if w.slot.kind == "state":
                new = TileRecord(folded=record.folded + 1, state_crc=w.crc)
            else:
                new = record._replace(next_crc=0, tail_passes=w.task.chunk_end, tail_spp=self.spp, tail_crc=w.crc)
            self.records[w.task.line] = new
            done.append(new)
        self._put(keys, done)
        return keys

    def _put(self, keys: Sequence[tuple[int, int, int]], records: Sequence[TileRecord]) -> None:
        """Write the records of ``keys`` in one batch (the lease was checked by ``flush``)."""
        f, ty, tx = (np.array(k)[:, None] for k in zip(*keys))
        fields = np.array(records, np.uint32)  # (n, 6): TileRecord's fields in the stored order
        self.store.records.vindex[f, ty, tx, np.arange(FIELD_COUNT)[None, :]] = fields

    def close(self) -> None:
        """Delete the dispatch area's chunks (orphans only: everything answered is committed)."""
        self.pool.shutdown()
        for kind in ("state", "tail"):
            folder = os.path.join(self.root, _AREA, kind)
            for name in os.listdir(folder) if os.path.isdir(folder) else ():
                if name.startswith("c."):
                    os.remove(os.path.join(folder, name))
