"""Sampling from one of many discrete distributions packed into a flat CDF array.

Distribution k occupies ``cdf[offset_k : offset_k + count_k]``, an inclusive CDF ending at
exactly 1. A per-lane binary search with a static number of steps finds the bin, so the
compiled program does not depend on how many distributions there are or which lane reads which.
"""
import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

__all__ = ["search", "sample_reuse", "inclusive_cdf", "steps_for"]

ONE_MINUS_EPS = np.float32(1.0 - 2.0**-24)


def search(cdf: jax.Array, offset: jax.Array, count: jax.Array | int, u: jax.Array, steps: int) -> jax.Array:
    """First index i in [offset, offset + count) with cdf[i] > u; (N,) int32.

    ``steps`` must be at least ceil(log2(max count)) + 1.
    """
    lo = offset
    hi = offset + jnp.maximum(count, 1) - 1

    def step(_, bounds):
        lo, hi = bounds
        mid = (lo + hi) // 2
        right = cdf[mid] <= u
        return jnp.where(right, jnp.minimum(mid + 1, hi), lo), jnp.where(right, hi, mid)

    lo, _ = jax.lax.fori_loop(0, steps, step, (lo, hi))
    return lo


def sample_reuse(cdf: jax.Array, offset: jax.Array, count: jax.Array | int, u: jax.Array,
                 steps: int) -> tuple[jax.Array, jax.Array]:
    """(index, u rescaled to [0, 1) inside the chosen bin), as Mitsuba's ``sample_reuse``."""
    i = search(cdf, offset, count, u, steps)
    below = jnp.where(i > offset, cdf[jnp.maximum(i - 1, 0)], 0.0)
    width = cdf[i] - below
    u_reused = jnp.clip((u - below) / jnp.where(width > 0, width, 1.0), 0.0, ONE_MINUS_EPS)
    return i, u_reused


def inclusive_cdf(weights: ArrayLike) -> np.ndarray:
    """Host: float32 inclusive CDF of non-negative weights (M,), summed in float64, last entry 1.

    All-zero weights give the uniform distribution.
    """
    w = np.asarray(weights, np.float64)
    total = w.sum()
    if not total > 0:
        w = np.ones_like(w)
        total = w.sum()
    cdf = np.cumsum(w) / total
    cdf[-1] = 1.0
    return cdf.astype(np.float32)


def steps_for(count: int) -> int:
    """Binary-search steps enough for a distribution of ``count`` bins."""
    return max(int(count - 1).bit_length(), 0) + 1
