"""A noise target for a whole shot: samples go to the tiles, and so the frames, where the noise is.

With ``noise = E`` a job's spp is the most a tile gets. Every tile is rendered to at least
``min_spp`` (default 256; rounded up to whole chunks, at least two: the variance needs two
estimates), and a tile above E gets more chunks until it is at or below E or at the spp. A job
made with a target has chunks of ``farm.tree.NOISE_CHUNK_SPP`` samples (16, one pass), not 64:
the estimate's degrees of freedom are its chunks' (below), 15 per pixel at 256 spp, not 3.

**The estimator.** The complete chunks of a tile hold disjoint samples, so each chunk's own
estimate of a pixel is an independent draw and their spread measures the pixel's noise
(``farm.tree.variance``: var = s^2 / n over the n chunks' estimates, the variance of the mean of
n chunks). A tile's noise is the estimated root relative MSE of its pixels::

    noise = sqrt(mean over pixels and channels of var / (value^2 + 0.01))

with ``value`` the pixel's estimate: the relative MSE of ``tests/helpers/image_metrics.py`` (and
of Mitsuba's render tests), with the estimate in place of the unknown reference, the 0.01 keeping
dark pixels from dominating. A frame's noise pools its tiles (the root of the pixel-weighted mean
of their squared noise). Where a tile holds a tail (a partial chunk past its complete ones), its
variance is scaled by complete samples / all samples (it falls as 1/spp). Fewer than two complete
chunks: unknown (None).

**The decisions.** They are made at *checkpoints*, fixed chunk counts that do not depend on the
samples: the first is ``min_spp``'s chunks, and each next one an eighth more (at least one chunk
more), up to the job's spp: a tile overshoots its need by up to a step (steps of a quarter
saved 1.57x the samples of uniform sampling on scripts/bench_adaptive.py's --hold 0 shot, an eighth 1.64x,
at the same worst-frame error). A tile whose state reaches a checkpoint is estimated there: at or
below E it stops, else it is given the chunks up to the next checkpoint (rendered side by side, a
batch). So the spp a tile gets is a function of its stored samples alone, which resume, repeat
and any group or device count reproduce bit for bit: the state at a checkpoint is the tree's
(``farm.tree``), and the decision is exact arithmetic on it (``math.fsum``: no summation order of
a vectorized library can move a tile across the target). Nothing but the state and its records
is stored: the driver decides again from them on resume. A tile stopped at s spp holds exactly
the chunks of a uniform render at s spp. A store first rendered otherwise (uniform, or another
target) keeps what it holds: a tile past the next checkpoint is decided where it stands, one
between checkpoints goes on to the next, and one with a tail is never stopped short of it.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from farm.planner import tile_tasks
from farm.records import TileRecord
from farm.tree import tile_sums, variance
from tracer.shared import resolve

if TYPE_CHECKING:
    from farm.planner import Task
    from farm.spec import JobSpec
    from farm.store import FrameStore
    from farm.tree import Tree

__all__ = ["Shot", "DEFAULT_MIN_SPP", "EPSILON", "relative_noise", "tile_noise", "stored_noise", "frame_noise",
           "shot_noise", "FrameNoise"]

DEFAULT_MIN_SPP = 256   # what every tile gets by default: 16 chunks of a noise job's 16 samples
EPSILON = 1e-2          # keeps dark pixels from dominating (tests/helpers/image_metrics.py's)
_GROWTH = 8             # each checkpoint 1/_GROWTH more chunks than the one before


def relative_noise(value: ArrayLike, var: ArrayLike) -> float:
    """sqrt(mean(var / (value^2 + EPSILON))) over all elements of ``value`` and ``var`` (same
    shape), summed exactly (``math.fsum``): a float, the same on any machine."""
    value, var = np.asarray(value, np.float64), np.asarray(var, np.float64)
    terms = var / (value * value + EPSILON)
    return math.sqrt(math.fsum(terms.ravel()) / max(terms.size, 1))


def tile_noise(state: np.ndarray, chunks: int, samples: tuple[int, int] | None = None,
               tail: np.ndarray | None = None) -> float | None:
    """The noise of a tile whose ``state`` (h, w, STATE_CHANNELS) holds ``chunks`` complete chunks
    (None below two); ``tail`` (h, w, 4): its partial chunk's sums, if it has one, and ``samples``
    (its complete chunks' samples, all its samples) per pixel, the ratio its variance falls by."""
    if chunks < 2:
        return None
    var = variance(state, chunks)
    if samples is not None and samples[1] > samples[0]:
        var = var * np.float32(samples[0] / samples[1])
    return relative_noise(resolve(*tile_sums(state, tail))[..., :3], var)  # (RGB: a tile's AOVs follow it)


def _checkpoints(first: int, last: int) -> Iterator[int]:
    """The chunk counts where tiles are estimated: ``first``, then an eighth more each, then ``last``."""
    k = first
    while k < last:
        yield k
        k += max(1, k // _GROWTH)
    yield last


@dataclasses.dataclass(frozen=True)
class FrameNoise:
    frame: int            # frame number
    spp: float            # samples per pixel the frame holds, on average over its pixels
    noise: float | None   # its estimated noise (None: a tile with fewer than two complete chunks)


class Shot:
    """A job's noise target (``spec.noise``; inactive without one) over its store: each tile's
    decided spp, and the tasks a decision adds."""

    def __init__(self, spec: JobSpec, store: FrameStore):
        self.spec, self.store = spec, store
        tree = spec.tree
        self.chunk = tree.chunk_samples
        self.last = tree.n_chunks(spec.spp)  # chunks at the job's spp, its tail included
        self.active = spec.noise is not None and self.last > 2
        if self.active:
            first = max(2, -(-(spec.min_spp or DEFAULT_MIN_SPP) // self.chunk))
            self.checkpoints = list(_checkpoints(min(first, self.last), self.last))
            self.full = tree.complete(spec.spp)  # complete chunks at the job's spp
        # tile -> the chunks it is to hold (a checkpoint): decided by this run
        self.goal: dict[tuple[int, ...], int] = {}

    @property
    def least(self) -> int:
        """The spp every tile gets at least (the first checkpoint's)."""
        return self.spp_of(self.checkpoints[0]) if self.active else self.spec.spp

    def spp_of(self, chunks: int) -> int:
        """The spp of ``chunks`` chunks: the job's at the last, else a whole number of chunks."""
        return self.spec.spp if chunks >= self.last else chunks * self.chunk

    def tile_spp(self, records: np.ndarray, frames: Sequence[int] | None = None) -> np.ndarray | None:
        """(F, TY, TX) ints: the spp each tile of ``records`` (F, TY, TX) is to hold now, decided
        from the stored state where a tile stands at a checkpoint; None without a target (every
        tile: the job's spp). With ``frames`` (frame indexes), of those frames alone."""
        if not self.active:
            return None
        frames = range(records.shape[0]) if frames is None else frames
        out = np.empty((len(frames), *records.shape[1:3]), np.int64)
        for i, f in enumerate(frames):
            for ty, tx in np.ndindex(out.shape[1:]):
                key = (f, ty, tx)
                self.goal[key] = self._decide(key, TileRecord.of(records[key]))
                out[i, ty, tx] = self.spp_of(self.goal[key])
        return out

    def frame_totals(self, records: np.ndarray, spp: np.ndarray | None = None) -> list[int]:
        """Per frame of ``records`` (F, TY, TX): the pixel samples it is to hold (with a target:
        as decided so far; ``spp``: ``tile_spp``'s answer, if it was asked already)."""
        pixels = np.array([[self.store.tile_pixels(ty, tx) for tx in range(records.shape[2])]
                           for ty in range(records.shape[1])], np.int64)
        spp = self.tile_spp(records) if spp is None else spp
        if spp is None:
            return [int(pixels.sum()) * self.spec.spp] * records.shape[0]
        return [int((spp[f] * pixels).sum()) for f in range(spp.shape[0])]

    def more(self, line: tuple[int, int, int], record: TileRecord) -> list[Task]:
        """The tasks a tile gets once a chunk has folded (``record``: its new record): none unless
        it has reached its goal, a checkpoint, and is above the target there."""
        if not self.active or record.folded != self.goal.get(line):
            return []
        self.goal[line] = self._decide(line, record)
        return tile_tasks(self.spec, line, record, self.spp_of(self.goal[line]))[0]

    def _decide(self, key, record):
        """The chunks the tile is to hold (a checkpoint), given what it holds."""
        k, points = record.folded, self.checkpoints
        if k < points[0]:
            return points[0]
        if k >= self.full:
            return self.last  # (only its tail is left, if any)
        after = next(c for c in points if c > k)
        if record.tail_passes or k not in points:
            return after  # (a tail or a count between checkpoints: only a store rendered otherwise)
        noise = stored_noise(self.store, self.spec.tree, key, record)
        return k if noise is not None and noise <= self.spec.noise else after


# -- what a frame holds, for `farm status` and the monitor --------------------------------------

# (store url, tile, its record) -> its noise: a record names its data's CRCs
_noise_seen: dict[tuple[str, tuple[int, int, int], TileRecord], float | None] = {}


def stored_noise(store: FrameStore, tree: Tree, key: tuple[int, int, int], record: TileRecord) -> float | None:
    """``tile_noise`` of the tile ``key`` as the store holds it (``record``: its record); None
    below two complete chunks or where its data does not read. Kept by the record: a tile whose
    record did not change is not read again."""
    k, kept, cut = record.folded, record.tail_passes, record.tail_spp
    if k < 2:
        return None
    seen = (store.url, key, record)
    if seen not in _noise_seen:
        if len(_noise_seen) > 1 << 16:
            _noise_seen.clear()
        state, tail = store.read_state(key), store.read_tail(key) if kept else None
        complete = k * tree.chunk_samples
        held = (complete, complete + (tree.covered(k, kept, cut) if kept else 0))
        _noise_seen[seen] = None if state is None or (kept and tail is None) else tile_noise(state, k, held, tail)
    return _noise_seen[seen]


def frame_noise(store: FrameStore, spec: JobSpec, records: np.ndarray, f: int) -> FrameNoise:
    """``FrameNoise`` of frame index ``f`` from its tiles' ``records`` (TY, TX) of
    ``farm.records.RECORD``, which should be verified (``FrameStore.verified_records``)."""
    tree, pixels, samples, squares, unknown = spec.tree, 0, 0.0, 0.0, False
    for ty, tx in np.ndindex(records.shape[:2]):
        record, n = TileRecord.of(records[ty, tx]), store.tile_pixels(ty, tx)
        k, kept, cut = record.folded, record.tail_passes, record.tail_spp
        noise = stored_noise(store, tree, (f, ty, tx), record)
        pixels += n
        samples += (k * tree.chunk_samples + (tree.covered(k, kept, cut) if kept else 0)) * n
        unknown = unknown or noise is None
        squares += 0.0 if noise is None else noise * noise * n
    noise = None if unknown or not pixels else math.sqrt(squares / pixels)
    return FrameNoise(frame=spec.frames[0] + f, spp=samples / max(pixels, 1), noise=noise)


def shot_noise(store: FrameStore, spec: JobSpec, records: np.ndarray,
               frames: Sequence[int] | None = None) -> list[FrameNoise]:
    """``frame_noise`` of every frame of the job, or of the frame indexes ``frames`` (at once
    for frames with nothing stored)."""
    stored = ((records["folded"] != 0) | (records["tail_passes"] != 0)).any(axis=(1, 2))
    return [frame_noise(store, spec, records[f], f) if stored[f] else FrameNoise(spec.frames[0] + f, 0.0, None)
            for f in (range(spec.n_frames) if frames is None else frames)]
