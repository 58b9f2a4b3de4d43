"""A job as tasks: (frame, chunk of sample passes, tile), and what of it the store already has.

The reduction tree is ``farm.tree``'s: passes of ``pass_size`` samples, chunks of
``chunk_passes`` passes, neither chosen from the spp. Each task renders one chunk of one tile
(or the rest of it, continuing the stored tail); the scheduler folds complete chunks into the
tile's running state in chunk order, and keeps the partial last chunk as the tile's tail. A
65536-spp still is one frame of 1024 chunks per tile, a 240-frame animation many frames of one:
either way there are many tasks to spread.
"""
import dataclasses

from farm.store import FOLDED, TAIL_PASSES, TAIL_SPP

__all__ = ["Plan", "Task", "plan", "tile_tasks"]


@dataclasses.dataclass(frozen=True)
class Task:
    key: tuple          # (frame index, chunk, tile row, tile column)
    frame: int          # frame number
    first_pass: int
    n_passes: int
    continues: bool     # start from the stored tail (the chunk's earlier passes)
    chunk_end: int      # passes of the chunk once this task is done (counted from the chunk's start)
    tail: bool = False  # the partial last chunk: kept as the tile's tail, not folded

    @property
    def chunk(self):
        return self.key[1]

    @property
    def line(self):
        """(frame index, tile row, tile column): the tile whose chunks fold in order."""
        f, _, ty, tx = self.key
        return f, ty, tx


@dataclasses.dataclass(frozen=True)
class Plan:
    todo: list          # Task, frame by frame, chunk by chunk, tile by tile
    n_chunks: int
    total_units: int    # samples x tile pixels of the whole job, for progress
    done_units: int     # of which the store has
    stats: dict = None  # filled in by the scheduler after a run


def plan(spec, records, tiles_y, tiles_x, tile_pixels, spp=None):
    """What is left of ``spec`` (planned) given the store's records (F, TY, TX, fields).

    ``spp`` (F, TY, TX) ints: what each tile is to hold now (a noise target's, ``farm.adaptive``;
    a multiple of the chunk size, or the job's spp); default the job's spp for every tile."""
    tree = spec.tree
    n_chunks = tree.n_chunks(spec.spp)
    per_frame = [[] for _ in range(n_chunks)]  # per chunk: its tasks, tile by tile
    todo, total, done = [], 0, 0
    pixels_of = [[tile_pixels(ty, tx) for tx in range(tiles_x)] for ty in range(tiles_y)]
    rows = records[:spec.n_frames, ..., :TAIL_SPP + 1].tolist()  # plain ints: a tenth of the time
    for f in range(spec.n_frames):
        for ty in range(tiles_y):
            for tx in range(tiles_x):
                pixels = pixels_of[ty][tx]
                goal = spec.spp if spp is None else int(spp[f, ty, tx])
                total += goal * pixels
                tasks, samples = tile_tasks(spec, (f, ty, tx), rows[f][ty][tx], goal)
                done += samples * pixels
                for task in tasks:
                    per_frame[task.chunk].append(task)
        for chunk in per_frame:
            todo.extend(chunk)
            chunk.clear()
    return Plan(todo=todo, n_chunks=n_chunks, total_units=total, done_units=done)


def tile_tasks(spec, line, record, spp):
    """(the tasks that bring the tile ``line`` (frame index, tile row, tile column) to ``spp``,
    the samples per pixel the store has of it): ``spp`` is the job's, or a multiple of the chunk
    size below it (then no tail: samples past the job's spp are the only ones ever masked)."""
    tree, (f, ty, tx) = spec.tree, line
    full, tail = tree.complete(spp), tree.tail_passes(spp)
    folded, kept, cut = int(record[FOLDED]), int(record[TAIL_PASSES]), int(record[TAIL_SPP])
    g, frame = spec.chunk_passes, spec.frames[0] + f
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
