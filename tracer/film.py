"""Image reconstruction: Mitsuba's ``hdrfilm``, its crop window and reconstruction filters.

Each sample at continuous film position x (pixel units) in pixel q is splatted, like Mitsuba's
``ImageBlock::put``, into every pixel p with |x - (p + 1/2)| < radius, weighted by the
separable filter f(x - (p + 1/2)); a pixel's value is sum(f L) / sum(f). A work unit that owns
an output tile therefore renders the samples of the tile grown by ``margin`` pixels on each side
(clipped to the film): overlapping neighbours recompute those samples bit for bit (they are
addressed by pixel and sample index), so tiles never write into each other.

A crop window (``crop_offset_x/y``, ``crop_width/height``) renders part of the film: the image is
the window's pixels, at their positions in the whole film (camera rays and random numbers are
those of the full film's pixels), and its border pixels take the splats of the film's samples
just outside the window, so a cropped render is, bit for bit, that window of the full render.
(Mitsuba without ``sample_border`` samples only the window's own pixels, so its pixels within
the filter's radius of a window edge that is not a film edge weigh a truncated footprint.)
"""
import math

import jax
import jax.numpy as jnp
import numpy as np

from tracer import filters
from tracer.shared import MAX_FILM_SIZE
from tracer.kinds import FilterKind
from tracer.pytree import pytree_dataclass, static

__all__ = ["Film", "make_film", "filter_weights", "splat_tile", "FILTER_RESOLUTION"]

BOX, TENT, GAUSSIAN = FilterKind.BOX, FilterKind.TENT, FilterKind.GAUSSIAN


@pytree_dataclass
class Film:
    width: int = static()              # the whole film, pixels: rays and pixel addresses span it
    height: int = static()
    rfilter: filters.Filter = static()
    crop_x: int = static(default=0)  # the rendered window: its top-left pixel in the film...
    crop_y: int = static(default=0)
    crop_width: int = static(default=0)  # ...and its size, the rendered image's (H, W) = (crop_height, crop_width)
    crop_height: int = static(default=0)

    @property
    def filter(self) -> int:
        return self.rfilter.kind

    @property
    def radius(self) -> float:
        return self.rfilter.radius

    @property
    def margin(self) -> int:
        """Pixels on each side of a pixel reached by its samples' splats."""
        return self.rfilter.margin


def make_film(width: int, height: int, filter: str | filters.Filter = "gaussian",
              crop: tuple[int, int, int, int] | None = None, **params: float) -> Film:
    """A ``width`` x ``height`` film; ``crop`` (x, y, width, height) is the rendered window (default
    the whole film); ``filter`` is a ``tracer.filters.Filter`` or a name with its ``params``.

    Raises ValueError for a size past ``MAX_FILM_SIZE``, a window outside the film, or filter
    parameters out of their limits (``tracer.filters``).
    """
    for name, value in (("width", width), ("height", height)):
        if not 1 <= value <= MAX_FILM_SIZE:
            raise ValueError(f"film {name} must be between 1 and {MAX_FILM_SIZE}, got {value}")
    x, y, w, h = (0, 0, width, height) if crop is None else crop
    if not (x >= 0 and y >= 0 and w >= 1 and h >= 1 and x + w <= width and y + h <= height):
        raise ValueError(f"crop window ({x}, {y}) + {w}x{h} is not inside the {width}x{height} film")
    rfilter = filter if isinstance(filter, filters.Filter) else filters.make_filter(filter, **params)
    return Film(width=width, height=height, rfilter=rfilter, crop_x=x, crop_y=y, crop_width=w, crop_height=h)


# Mitsuba splats with ``eval_discretized``: the filter read from a table of this many bins over
# [0, radius), each holding the value at its left end.
FILTER_RESOLUTION = filters.RESOLUTION


def filter_weights(film: Film, x: jax.Array, discretized: bool = True) -> jax.Array:
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
        inside: jax.Array | bool = bins < FILTER_RESOLUTION
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


def splat_tile(film: Film, offset_in_pixel: jax.Array, radiance: jax.Array, valid: jax.Array, tile_h: int,
               tile_w: int) -> tuple[jax.Array, jax.Array]:
    """Reduce the samples of one tile's source grid to the tile's sums.

    offset_in_pixel: (2, S, GH, GW) sample position inside its source pixel, in [0, 1)^2
    radiance: (C, S, GH, GW) (RGB, then any AOV channels); valid: (S, GH, GW) bool -- the source
    grid is the tile grown by ``film.margin`` on every side. Returns (sum of f*L (tile_h, tile_w,
    C), sum of f (tile_h, tile_w)).
    Each sample's K x K weighted values go to the output pixels they reach, sample after sample
    in sample order, and within a sample in a fixed order of offsets: a pixel's sum does not
    depend on how the samples were batched or sharded. (The accumulator is the output band
    itself, a few hundred KB that stay in cache; keeping K x K source-grid sums instead and
    adding them at the end moved 25x the memory a sample with the Gaussian filter.)
    """
    m = film.margin
    ks = range(-m, m + 1)
    # f(x - (p + 1/2)) for p = q + k, with x = q + offset: the pixel index q cancels.
    wx = jnp.stack([filter_weights(film, offset_in_pixel[0] - (k + 0.5)) for k in ks])  # (K, S, GH, GW)
    wy = jnp.stack([filter_weights(film, offset_in_pixel[1] - (k + 0.5)) for k in ks])
    wx = jnp.where(valid, wx, 0.0)
    radiance = jnp.where(valid, radiance, 0.0)

    # Elementwise adds, not a dot product: a dot's blocking could change with how XLA
    # partitions it, and with it the rounding.
    def add_sample(s, acc):
        value, weight = acc
        x, y, sample = wx[:, s], wy[:, s], radiance[:, s]
        for j, ky in enumerate(ks):
            for i, kx in enumerate(ks):
                # Output pixel (y, x) receives from source pixel (y - ky, x - kx) = grid (y - ky + m, x - kx + m).
                rows, cols = slice(m - ky, m - ky + tile_h), slice(m - kx, m - kx + tile_w)
                w = y[j, rows, cols] * x[i, rows, cols]
                value = value + w[None] * sample[:, rows, cols]
                weight = weight + w
        return value, weight

    zeros = (jnp.zeros((radiance.shape[0], tile_h, tile_w), jnp.float32), jnp.zeros((tile_h, tile_w), jnp.float32))
    value, weight = jax.lax.fori_loop(0, offset_in_pixel.shape[1], add_sample, zeros)
    return jnp.moveaxis(value, 0, -1), weight
