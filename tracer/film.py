"""Image reconstruction: Mitsuba's ``hdrfilm`` with box, tent and gaussian filters.

Each sample at continuous film position x (pixel units) in pixel q is splatted, like Mitsuba's
``ImageBlock::put``, into every pixel p with |x - (p + 1/2)| < radius, weighted by the
separable filter f(x - (p + 1/2)); a pixel's value is sum(f L) / sum(f). A work unit that owns
an output tile therefore renders the samples of the tile grown by ``margin`` pixels on each side
(clipped to the film): overlapping neighbours recompute those samples bit for bit (they are
addressed by pixel and sample index), so tiles never write into each other.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np

from tracer.pytree import pytree_dataclass, static

__all__ = ["Film", "make_film", "filter_weights", "splat_tile"]

BOX, TENT, GAUSSIAN = 0, 1, 2


@pytree_dataclass
class Film:
    width: int = static()
    height: int = static()
    filter: int = static()          # BOX, TENT or GAUSSIAN
    radius: float = static()
    stddev: float = static()

    @property
    def margin(self):
        """Pixels on each side of a pixel reached by its samples' splats."""
        return max(0, math.ceil(self.radius - 0.5))


def make_film(width, height, filter="gaussian", radius=None, stddev=0.5):
    if width < 1 or height < 1:
        raise ValueError(f"film size must be positive, got {width}x{height}")
    if filter == "box":
        return Film(width, height, BOX, 0.5 if radius is None else float(radius), 0.0)
    if filter == "tent":
        return Film(width, height, TENT, 1.0 if radius is None else float(radius), 0.0)
    if filter == "gaussian":
        return Film(width, height, GAUSSIAN, 4.0 * stddev, float(stddev))
    raise ValueError(f"unknown reconstruction filter {filter!r} (expected box, tent or gaussian)")


# Mitsuba splats with ``eval_discretized``: the filter read from a table of this many bins over
# [0, radius), each holding the value at its left end.
FILTER_RESOLUTION = 31


def filter_weights(film, x, discretized=True):
    """Filter value f(x) for offsets x (any shape) in pixels, as Mitsuba's ImageBlock splats it."""
    ax = jnp.abs(x)
    if film.filter == BOX:
        return jnp.where(ax <= film.radius, 1.0, 0.0)
    if discretized:
        bins = jnp.floor(ax * (FILTER_RESOLUTION / film.radius))
        inside = bins < FILTER_RESOLUTION
        ax = bins * np.float32(film.radius / FILTER_RESOLUTION)
    else:
        inside = True
    if film.filter == TENT:
        value = jnp.maximum(0.0, 1.0 - ax / film.radius)
    else:
        alpha = -1.0 / (2.0 * film.stddev * film.stddev)
        bias = np.float32(math.exp(alpha * film.radius * film.radius))
        value = jnp.maximum(0.0, jnp.exp(alpha * ax * ax) - bias)
    return jnp.where(inside, value, 0.0)


def splat_tile(film, offset_in_pixel, radiance, valid, tile_h, tile_w):
    """Reduce the samples of one tile's source grid to the tile's sums.

    offset_in_pixel: (2, S, GH, GW) sample position inside its source pixel, in [0, 1)^2
    radiance: (3, S, GH, GW); valid: (S, GH, GW) bool -- the source grid is the tile grown by
    ``film.margin`` on every side. Returns (sum of f*L (tile_h, tile_w, 3), sum of f (tile_h, tile_w)).
    Sums over samples run in sample order; the offsets are added in a fixed order, so the
    result does not depend on how the samples were batched or sharded.
    """
    m = film.margin
    ks = range(-m, m + 1)
    # f(x - (p + 1/2)) for p = q + k, with x = q + offset: the pixel index q cancels.
    wx = jnp.stack([filter_weights(film, offset_in_pixel[0] - (k + 0.5)) for k in ks])  # (K, S, GH, GW)
    wy = jnp.stack([filter_weights(film, offset_in_pixel[1] - (k + 0.5)) for k in ks])
    wx = jnp.where(valid, wx, 0.0)
    radiance = jnp.where(valid, radiance, 0.0)
    k = len(ks)
    grid = offset_in_pixel.shape[2:]

    # Sum over samples with elementwise adds in sample order (a dot product's blocking could
    # change with how XLA partitions it, and with it the rounding).
    def add_sample(s, acc):
        w = wy[:, s][:, None] * wx[:, s][None, :]                      # (K, K, GH, GW)
        return acc[0] + w[..., None] * jnp.moveaxis(radiance[:, s], 0, -1)[None, None], acc[1] + w

    zeros = (jnp.zeros((k, k, *grid, 3), jnp.float32), jnp.zeros((k, k, *grid), jnp.float32))
    weighted, weights = jax.lax.fori_loop(0, offset_in_pixel.shape[1], add_sample, zeros)
    value = jnp.zeros((tile_h, tile_w, 3), jnp.float32)
    weight = jnp.zeros((tile_h, tile_w), jnp.float32)
    for j, ky in enumerate(ks):
        for i, kx in enumerate(ks):
            # Output pixel (y, x) receives from source pixel (y - ky, x - kx) = grid (y - ky + m, x - kx + m).
            value = value + weighted[j, i, m - ky:m - ky + tile_h, m - kx:m - kx + tile_w]
            weight = weight + weights[j, i, m - ky:m - ky + tile_h, m - kx:m - kx + tile_w]
    return value, weight
