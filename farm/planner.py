"""A job as tasks: (frame, chunk of sample passes, tile), and what of it the store already has.

The reduction tree is ``farm.tree``'s: passes of ``pass_size`` samples, chunks of
``chunk_passes`` passes, neither chosen from the spp. Each task renders one chunk of one tile
(or the rest of it, continuing the stored tail); the scheduler folds complete chunks into the
tile's running state in chunk order, and keeps the partial last chunk as the tile's tail. A
65536-spp still is one frame of 1024 chunks per tile, a 240-frame animation many frames of one:
either way there are many tasks to spread.

A plan is made frame by frame from the records, and its tasks are made when they are asked for
(``Plan.tasks``): a frame the store has nothing of, or all of, is decided from its records at
once (numpy), so planning a 10,000-frame job costs next to nothing, and its 640,000 ``Task``
records are made as the scheduler sends them.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from farm.records import TileRecord

if TYPE_CHECKING:
    from farm.spec import JobSpec

__all__ = ["Plan", "Task", "plan", "tile_tasks"]


@dataclasses.dataclass(frozen=True)
class Task:
    key: tuple[int, int, int, int]  # (frame index, chunk, tile row, tile column)
    frame: int          # frame number
    first_pass: int
    n_passes: int
    continues: bool     # start from the stored tail (the chunk's earlier passes)
    chunk_end: int      # passes of the chunk once this task is done (counted from the chunk's start)
    tail: bool = False  # the partial last chunk: kept as the tile's tail, not folded

    @property
    def chunk(self) -> int:
        return self.key[1]

    @property
    def line(self) -> tuple[int, int, int]:
        """(frame index, tile row, tile column): the tile whose chunks fold in order."""
        f, _, ty, tx = self.key
        return f, ty, tx


@dataclasses.dataclass(frozen=True)
class Plan:
    """What is left of a job: per frame index with work, its tasks (None: every chunk of every
    tile, nothing stored), frame by frame, chunk by chunk, tile by tile."""

    frames: tuple[tuple[int, tuple[Task, ...] | None], ...]  # (frame index, tuple of Task or None),
                                                             # frame index ascending
    first_frame: int    # the frame number of frame index 0
    chunks: tuple[tuple[int, int, int, bool], ...]  # (chunk, first_pass, n_passes, tail) of a tile with nothing stored
    tiles: tuple[tuple[int, int], ...]  # (tile row, tile column), row by row
    n_chunks: int
    total_units: int    # samples x tile pixels of the whole job, for progress
    done_units: int     # of which the store has
    stats: dict[str, Any] | None = None  # filled in by the scheduler after a run

    def tasks(self) -> Iterator[Task]:
        """The tasks, made as they are asked for."""
        for f, tasks in self.frames:
            yield from self._fresh(f) if tasks is None else tasks

    def _fresh(self, f: int) -> list[Task]:
        frame = self.first_frame + f
        return [Task((f, c, ty, tx), frame, first, n, False, n, tail)  # a whole chunk: it ends where it starts + n
                for c, first, n, tail in self.chunks for ty, tx in self.tiles]

    @functools.cached_property
    def todo(self) -> list[Task]:
        """Every task, as a list."""
        return list(self.tasks())

    def frame_tasks(self) -> collections.Counter[int]:
        """Tasks per frame index with any: a Counter."""
        fresh = len(self.chunks) * len(self.tiles)
        return collections.Counter({f: fresh if tasks is None else len(tasks) for f, tasks in self.frames})


def plan(spec: JobSpec, records: np.ndarray, tiles_y: int, tiles_x: int, tile_pixels: Callable[[int, int], int],
         spp: ArrayLike | None = None) -> Plan:
    """What is left of ``spec`` (planned) given the store's records (F, TY, TX) of ``farm.records.RECORD``.

    ``spp`` (F, TY, TX) ints: what each tile is to hold now (a noise target's, ``farm.adaptive``;
    a multiple of the chunk size, or the job's spp); default the job's spp for every tile."""
    tree, n = spec.tree, spec.n_frames
    g, full, tail = spec.chunk_passes, tree.complete(spec.spp), tree.tail_passes(spec.spp)  # (in frame_states too)
    assert g is not None and spec.pass_size is not None  # (planned)
    tiles = tuple((ty, tx) for ty in range(tiles_y) for tx in range(tiles_x))
    pixels = np.array([[tile_pixels(ty, tx) for tx in range(tiles_x)] for ty in range(tiles_y)], np.int64)
    goals = np.full((n, tiles_y, tiles_x), spec.spp, np.int64) if spp is None else np.asarray(spp, np.int64)[:n]
    records = records[:n]
    uniform = spp is None
    fresh_frame, whole_frame = frame_states(spec, records)
    fresh_frame, whole_frame = fresh_frame & uniform, whole_frame & uniform
    frames: list[tuple[int, tuple[Task, ...] | None]]
    frames, done = [], int((pixels * spec.spp).sum()) * int(whole_frame.sum())
    for f in range(n):
        if fresh_frame[f]:
            frames.append((f, None))
        elif not whole_frame[f]:
            # Records of plain ints (tolist), not numpy scalars: a tenth of the time.
            rows = [list(map(TileRecord._make, row)) for row in records[f].tolist()]
            tasks, samples = _frame_tasks(spec, f, tiles, rows, goals[f].tolist(), pixels.tolist())
            done += samples
            if tasks:
                frames.append((f, tuple(tasks)))
    chunks = tuple((c, c * g, g if c < full else tail, c == full) for c in range(full + (1 if tail else 0)))
    return Plan(frames=tuple(frames), first_frame=spec.frames[0], chunks=chunks, tiles=tiles,
                n_chunks=tree.n_chunks(spec.spp), total_units=int((goals * pixels).sum()), done_units=done)


def frame_states(spec: JobSpec, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fresh, whole): per frame index of ``records`` (F, TY, TX) of ``farm.records.RECORD``,
    bool arrays: nothing stored (every chunk to do), and the job's spp reached in every tile
    (nothing to do; a tail counts only if cut where the job's spp cuts it now). For a job of a
    uniform spp (no noise target)."""
    tree = spec.tree
    full, tail = tree.complete(spec.spp), tree.tail_passes(spec.spp)
    assert spec.pass_size is not None  # (planned)
    busy = (records["folded"] != 0) | (records["tail_passes"] != 0)
    end = full * tree.chunk_samples + tail * spec.pass_size
    whole = ((records["folded"] == full) & (records["tail_passes"] == tail)
             & ((tail == 0) | (np.minimum(records["tail_spp"], end) == min(spec.spp, end))))
    return ~busy.any(axis=(1, 2)), whole.all(axis=(1, 2))


def _frame_tasks(spec: JobSpec, f: int, tiles: Sequence[tuple[int, int]], rows: list[list[TileRecord]],
                 goals: list[list[int]], pixels: list[list[int]]) -> tuple[list[Task], int]:
    """(frame index ``f``'s tasks, chunk by chunk, tile by tile; the pixel samples it holds)."""
    per_chunk: collections.defaultdict[int, list[Task]] = collections.defaultdict(list)
    done = 0
    for ty, tx in tiles:
        tasks, samples = tile_tasks(spec, (f, ty, tx), rows[ty][tx], goals[ty][tx])
        done += samples * pixels[ty][tx]
        for task in tasks:
            per_chunk[task.chunk].append(task)
    return [t for c in sorted(per_chunk) for t in per_chunk[c]], done


def tile_tasks(spec: JobSpec, line: tuple[int, int, int], record: TileRecord, spp: int) -> tuple[list[Task], int]:
    """(the tasks that bring the tile ``line`` (frame index, tile row, tile column) to ``spp``,
    the samples per pixel the store has of it): ``spp`` is the job's, or a multiple of the chunk
    size below it (then no tail: samples past the job's spp are the only ones ever masked)."""
    tree, (f, ty, tx) = spec.tree, line
    full, tail = tree.complete(spp), tree.tail_passes(spp)
    folded, kept, cut = record.folded, record.tail_passes, record.tail_spp
    g, frame = spec.chunk_passes, spec.frames[0] + f
    assert g is not None  # (planned)
    if folded > full or (folded == full and kept > tail):
        folded, kept = 0, 0  # more than the job asks: not this job's (planning never gets here)
    # The stored tail counts where its passes hold the samples the job asks of them now: a pass
    # cut short by an earlier spp would differ from the same pass rendered now.
    if kept and tree.covered(folded, kept, cut) != tree.covered(folded, kept, spp):
        kept = 0
    samples = folded * tree.chunk_samples + tree.covered(folded, kept, spp)
    tasks = []
    for c in range(folded, full + (1 if tail else 0)):
        end = g if c < full else tail
        start = kept if c == folded else 0
        if start < end:
            tasks.append(Task((f, c, ty, tx), frame, c * g + start, end - start, start > 0, end, c == full))
    return tasks, samples
