"""The canonical reduction tree: how a tile's samples are cut and added up, whatever the spp.

A frame's bits are a function of the job without its spp (scene, seed, tile, pass and chunk
sizes) and of its final spp alone: refined in one step or five, interrupted or not, on any
number of groups and devices. The tree is fixed when the job is created and never depends on
the spp:

- a *pass* is ``pass_size`` consecutive sample indices, summed by the work unit
  (``tracer.rendering.render_tile``); samples at or past the spp are masked out;
- a *chunk* is ``chunk_passes`` consecutive passes, summed from zero in pass order;
- at spp S a tile has ``S // K`` *complete* chunks (K = ``chunk_passes * pass_size`` samples)
  and, when K does not divide S, one *tail*: the partial chunk of the remaining passes, its last
  pass cut at S.

Complete chunks are *folded* into the tile's running state in chunk order, and then dropped::

    sums_{n+1}    = sums_n + chunk_n                   value RGB and weight, float32
    means_{n+1}   = means_n + m_n                      m_n = resolve(chunk_n), RGB
    squares_{n+1} = squares_n + m_n * m_n

and the tile's sums at S are ``sums_{S // K} + tail``: the tail is kept apart and added last,
at read time, never folded (a later raise of the spp continues the tail, or renders its chunk
again where its last pass was cut short, and folds it once it is complete). These are the
additions ``tracer.render(..., chunk_passes=)`` makes, in the same order, in float32 numpy: a
chunk's sums from zero, the chunks added to a zero accumulator in chunk order.

The means and squares of the chunks' own estimates are what noise estimation needs: complete
chunks hold disjoint samples, so their spread estimates the variance of the pixel (``variance``).
"""
import dataclasses

import numpy as np
from numpy.typing import ArrayLike

from tracer.shared import resolve

__all__ = ["Tree", "STATE_CHANNELS", "TAIL_CHANNELS", "state_channels", "tail_channels", "fold", "tile_sums",
           "tail_block", "split_tail", "variance", "CHUNK_SPP",
           "NOISE_CHUNK_SPP"]

# Samples per chunk by default: a task renders one chunk of one tile. Fixed (not chosen from the
# spp): the tree must not change when a job's spp is raised.
CHUNK_SPP = 64
# Samples per chunk of a job created with a noise target (``farm.adaptive``): its chunks' spread is
# its noise estimate, so smaller chunks give it more degrees of freedom at the same spp (15 at
# 256 spp, not 3), for four times the tasks.
NOISE_CHUNK_SPP = 16
# The running state of a tile, per pixel: sums (value RGB, weight), then the sums of the chunks'
# estimates (RGB) and of their squares (RGB), then the sums of the job's K AOV channels (the
# scene's ``aov`` integrator: ``tracer.io.aovs``), which fold like the RGB sums.
STATE_CHANNELS = 10
SUMS, MEANS, SQUARES, AOVS = slice(0, 4), slice(4, 7), slice(7, 10), slice(10, None)
# A tail, per pixel: value RGB, weight, then the K AOV sums.
TAIL_CHANNELS = 4


def state_channels(k: int) -> int:
    """Channels of a tile's state with ``k`` AOV channels."""
    return STATE_CHANNELS + k


def tail_channels(k: int) -> int:
    """Channels of a tile's tail with ``k`` AOV channels."""
    return TAIL_CHANNELS + k


@dataclasses.dataclass(frozen=True)
class Tree:
    """A job's pass and chunk sizes (``JobSpec.planned``)."""

    pass_size: int
    chunk_passes: int

    @property
    def chunk_samples(self) -> int:
        return self.pass_size * self.chunk_passes

    def complete(self, spp: int) -> int:
        """Complete chunks at ``spp``."""
        return spp // self.chunk_samples

    def tail_passes(self, spp: int) -> int:
        """Passes of the partial last chunk at ``spp`` (0: none)."""
        return -(-(spp % self.chunk_samples) // self.pass_size)

    def n_chunks(self, spp: int) -> int:
        """Chunks at ``spp``, the tail included."""
        return self.complete(spp) + (1 if self.tail_passes(spp) else 0)

    def covered(self, chunk: int, passes: int, spp: int) -> int:
        """Samples per pixel that the first ``passes`` passes of ``chunk`` hold at ``spp``."""
        first = chunk * self.chunk_samples
        return max(0, min(spp, first + passes * self.pass_size) - first)


def fold(state: np.ndarray, value: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The running state (h, w, STATE_CHANNELS + K) float32 with one more complete chunk, whose
    sums are value (h, w, 3 + K) and weight (h, w); a new array (numpy, in the order the module
    gives)."""
    chunk = tail_block(value, weight)
    m = resolve(value[..., :3].astype(np.float32), weight.astype(np.float32))
    out = np.empty_like(state, dtype=np.float32)
    out[..., SUMS] = state[..., SUMS] + chunk[..., :TAIL_CHANNELS]
    out[..., MEANS] = state[..., MEANS] + m
    out[..., SQUARES] = state[..., SQUARES] + m * m
    out[..., AOVS] = state[..., AOVS] + chunk[..., TAIL_CHANNELS:]
    return out


def tile_sums(state: np.ndarray, tail: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(value (..., 3 + K), weight (...)): the folded sums, plus the tail's (..., 4 + K) when there
    is one."""
    sums = np.concatenate([state[..., SUMS], state[..., AOVS]], axis=-1)
    if tail is not None:
        sums = sums + tail
    return split_tail(sums)


def tail_block(value: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """A tail's (or a chunk's) channels (..., 4 + K) from value (..., 3 + K) and weight (...)."""
    return np.concatenate([value[..., :3], weight[..., None], value[..., 3:]], axis=-1).astype(np.float32)


def split_tail(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value (..., 3 + K), weight (...)) of a tail's channels (``tail_block``)."""
    return np.concatenate([block[..., :3], block[..., TAIL_CHANNELS:]], axis=-1), block[..., 3]


def variance(state: np.ndarray, n: ArrayLike) -> np.ndarray:
    """Per-pixel variance (..., 3) of the estimate of ``n`` complete chunks (an int or an array
    broadcasting over the pixels; at least 2), from the spread of the chunks' own estimates:
    s^2 = (sum m^2 - (sum m)^2 / n) / (n - 1), and the mean of n chunks has variance s^2 / n."""
    n = np.asarray(n, np.float64)[..., None]
    means, squares = state[..., MEANS].astype(np.float64), state[..., SQUARES].astype(np.float64)
    spread = np.maximum(squares - means * means / n, 0.0) / (n - 1)
    return (spread / n).astype(np.float32)
