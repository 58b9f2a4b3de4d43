"""A job as tasks: (frame, chunk of sample passes, tile), and what of it the store already has.

The reduction tree is fixed by the spec: passes of ``pass_size`` samples, ``chunk_passes``
passes per chunk, each chunk summed from zero in pass order (one task per tile), a frame the
sum of its chunks in chunk order. A 240-frame animation is many frames of one chunk; a
65536-spp still is one frame of up to 64 chunks: either way there are many tasks to spread.
"""
import dataclasses

__all__ = ["Plan", "Task", "plan", "covered"]


@dataclasses.dataclass(frozen=True)
class Task:
    key: tuple          # (frame index, chunk, tile row, tile column) in the store
    frame: int          # frame number
    first_pass: int
    n_passes: int
    continues: bool     # start from the stored sums of the chunk's earlier passes
    chunk_end: int      # passes of the chunk once this task is done (counted from the chunk's start)

    @property
    def chunk(self):
        return self.key[1]


@dataclasses.dataclass(frozen=True)
class Plan:
    todo: list          # Task, frame by frame, chunk by chunk, tile by tile
    n_chunks: int
    total_units: int    # sample-passes x tile pixels of the whole job, for progress
    done_units: int     # of which the store has
    stats: dict = None  # filled in by the scheduler after a run


def covered(first_pass, passes, spp, pass_size):
    """Samples per pixel that passes [first_pass, first_pass + passes) hold at this spp."""
    return max(0, min(spp, (first_pass + passes) * pass_size) - first_pass * pass_size)


def plan(spec, records, tiles_y, tiles_x, tile_pixels):
    """What is left of ``spec`` (planned) given the store's records (F, C', TY, TX, 3)."""
    p, g = spec.pass_size, spec.chunk_passes
    n_passes = -(-spec.spp // p)
    n_chunks = -(-n_passes // g)
    todo, total, done = [], 0, 0
    for f in range(spec.n_frames):
        for c in range(n_chunks):
            start = c * g
            length = min(start + g, n_passes) - start
            want = covered(start, length, spec.spp, p)
            for ty in range(tiles_y):
                for tx in range(tiles_x):
                    units = want * tile_pixels(ty, tx)
                    total += units
                    rec = records[f, c, ty, tx] if c < records.shape[1] else (0, 0, 0)
                    passes_done, spp_cut = int(rec[0]), int(rec[1])
                    have = covered(start, passes_done, spp_cut, p)
                    key = (f, c, ty, tx)
                    if passes_done == length and have == want:
                        done += units
                        continue
                    # Continue a chunk only where its done passes were whole: a pass cut short by
                    # the old spp would differ from the same pass rendered now.
                    if 0 < passes_done < length and have == passes_done * p:
                        done += have * tile_pixels(ty, tx)
                        todo.append(Task(key, spec.frames[0] + f, start + passes_done, length - passes_done, True, length))
                    else:
                        todo.append(Task(key, spec.frames[0] + f, start, length, False, length))
    return Plan(todo=todo, n_chunks=n_chunks, total_units=total, done_units=done)
