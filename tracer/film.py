"""Image reconstruction: Mitsuba's ``hdrfilm`` and its reconstruction filters.

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

from tracer import filters
from tracer.kinds import FilterKind
from tracer.pytree import pytree_dataclass, static

__all__ = ["Film", "make_film", "filter_weights", "splat_tile", "FILTER_RESOLUTION"]

BOX, TENT, GAUSSIAN = FilterKind.BOX, FilterKind.TENT, FilterKind.GAUSSIAN


@pytree_dataclass
class Film:
    width: int = static()
    height: int = static()
    rfilter: filters.Filter = static()

    @property
    def filter(self):
        return self.rfilter.kind

    @property
    def radius(self):
        return self.rfilter.radius

    @property
    def margin(self):
        """Pixels on each side of a pixel reached by its samples' splats."""
        return self.rfilter.margin


def make_film(width, height, filter="gaussian", **params):
    """A ``width`` x ``height`` film; ``filter`` is a ``tracer.filters.Filter`` or a name with its
    ``params``. Raises ValueError for filter parameters out of their limits (``tracer.filters``)."""
    if width < 1 or height < 1:
        raise ValueError(f"film size must be positive, got {width}x{height}")
    rfilter = filter if isinstance(filter, filters.Filter) else filters.make_filter(filter, **params)
    return Film(width=width, height=height, rfilter=rfilter)


# Mitsuba splats with ``eval_discretized``: the filter read from a table of this many bins over
# [0, radius), each holding the value at its left end.
FILTER_RESOLUTION = filters.RESOLUTION


def filter_weights(film, x, discretized=True):
    """Filter value f(x) for offsets x (any shape) in pixels, as Mitsuba's ImageBlock splats it."""
    f = film.rfilter
    ax = jnp.abs(x)
    if f.kind == BOX:
        return jnp.where(ax <= f.radius, 1.0, 0.0)
    if f.kind in FilterKind.TABULATED:
        if not discretized:
            raise ValueError("a tabulated filter is splatted from its table; tracer.filters.evaluate gives its curve")
        scale = np.float32(FILTER_RESOLUTION) / np.float32(f.radius)
        index = jnp.minimum(jnp.floor(ax * scale), FILTER_RESOLUTION).astype(jnp.int32)
        return jnp.asarray(np.array(f.table, np.float32))[index]
    if discretized:
        bins = jnp.floor(ax * (FILTER_RESOLUTION / f.radius))
        inside = bins < FILTER_RESOLUTION
        ax = bins * np.float32(f.radius / FILTER_RESOLUTION)
    else:
        inside = True
    if f.kind == TENT:
        value = jnp.maximum(0.0, 1.0 - ax / f.radius)
    else:
        alpha = -1.0 / (2.0 * f.stddev * f.stddev)
        bias = np.float32(math.exp(alpha * f.radius * f.radius))
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
