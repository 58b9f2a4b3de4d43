"""The environment map: radiance from a latitude-longitude image at infinity (Mitsuba's ``envmap``).

Conventions of Mitsuba 3.9 (``src/emitters/envmap.cpp``), in the emitter's local frame:
a direction d has uv = (atan2(d.x, -d.z) / 2pi, acos(d.y) / pi), so +y is up (v = 0 is the
image's first row) and u = 0 looks along -z; ``to_world`` rotates that frame into the scene.
Radiance is the bilinear interpolation of the image with texel-centred, periodic u and
corner-aligned, clamped v (pixel row y sits at theta = pi y / (H - 1)).

Importance sampling draws uv from the piecewise-bilinear density through the grid of values
luminance * sin(theta) at the W + 1 columns (the first repeated last) and H rows, shifted
half a texel in u -- the density of Mitsuba's ``Hierarchical2D`` warp; we pick the cell by a
marginal/conditional CDF instead of its MIP hierarchy (same density, other mapping of the
uniforms) and warp inside the cell with the same ``square_to_bilinear``. The solid-angle pdf
is pdf(uv) / (2 pi^2 sin(theta)).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from tracer import elementary
from tracer import vecmath as vm
from tracer.constants import INV_PI, INV_TWO_PI, INV_TWO_PI_SQUARED, LUMINANCE_WEIGHTS, PI
from tracer.emitters import discrete

if TYPE_CHECKING:
    from tracer.emitters.table import Emitters

__all__ = ["build_distribution", "sample", "pdf", "eval_radiance"]

EPSILON = np.float32(2.0**-24)  # drjit's Epsilon<float>


def build_distribution(image: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host: (density (H, W+1), row CDF (H-1,), column CDFs ((H-1) W,)) for an (H, W, 3) image."""
    image = np.asarray(image, np.float32)
    h, w = image.shape[:2]
    weights = np.asarray(LUMINANCE_WEIGHTS, np.float32)
    lum = np.maximum(image[..., :3] @ weights, 0.0).astype(np.float32)
    grid = lum[:, np.r_[0:w, 0]]
    theta_scale = np.float32(1.0 / (h - 1)) * PI
    grid = grid * np.sin(np.arange(h, dtype=np.float32) * theta_scale)[:, None]
    cells = 0.25 * (grid[:-1, :-1] + grid[:-1, 1:] + grid[1:, :-1] + grid[1:, 1:]).astype(np.float64)
    if not cells.sum() > 0:  # a black map: any density will do, its radiance is zero
        grid = np.ones_like(grid)
        cells = np.ones_like(cells)
    density = (grid * (w * (h - 1) / cells.sum())).astype(np.float32)
    row_cdf = discrete.inclusive_cdf(cells.sum(axis=1))
    col_cdf = np.concatenate([discrete.inclusive_cdf(row) for row in cells])
    return density, row_cdf, col_cdf


def _lookup(em: Emitters, uv: jax.Array) -> jax.Array:
    """Bilinear radiance (3, N) at uv (Mitsuba's ``eval_spectrum``)."""
    _, h, w = em.env_rgb.shape
    x = (uv[0] - jnp.floor(uv[0])) * w - 0.5
    y = jnp.clip(uv[1], 0.0, 1.0) * (h - 1)
    x0, y0 = jnp.floor(x), jnp.floor(y)
    tx, ty = x - x0, y - y0
    x0, y0 = x0.astype(jnp.int32), y0.astype(jnp.int32)
    xa, xb = jnp.mod(x0, w), jnp.mod(x0 + 1, w)
    ya, yb = jnp.clip(y0, 0, h - 1), jnp.clip(y0 + 1, 0, h - 1)
    rgb = em.env_rgb
    return ((1 - tx) * (1 - ty) * rgb[:, ya, xa] + tx * (1 - ty) * rgb[:, ya, xb]
            + (1 - tx) * ty * rgb[:, yb, xa] + tx * ty * rgb[:, yb, xb])


def _to_uv(v: jax.Array) -> jax.Array:
    return jnp.stack([elementary.atan2(v[0], -v[2]) * INV_TWO_PI, elementary.acos(jnp.clip(v[1], -1.0, 1.0)) * INV_PI])


def _local(em: Emitters, d: jax.Array) -> jax.Array:
    # Not renormalized, as Mitsuba: the same for rotations, Mitsuba's values for anything else.
    return vm.transform_vector(em.to_local[:, :, em.environment], d)


def _interval_to_linear(v0: jax.Array, v1: jax.Array, u: jax.Array) -> jax.Array:
    """Invert the CDF of the linear density from v0 to v1 on [0, 1] (Mitsuba's warp)."""
    steep = jnp.abs(v0 - v1) > 1e-4 * (v0 + v1)
    root = (v0 - vm.safe_sqrt(v0 * v0 + (v1 * v1 - v0 * v0) * u)) / jnp.where(steep, v0 - v1, 1.0)
    return jnp.where(steep, root, u)


def _corners(em: Emitters, col: jax.Array, row: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    dens = em.env_density
    return dens[row, col], dens[row, col + 1], dens[row + 1, col], dens[row + 1, col + 1]


def _density(em: Emitters, uv: jax.Array) -> jax.Array:
    """pdf over the unit uv square (``Hierarchical2D::eval``)."""
    h, w1 = em.env_density.shape
    pos = jnp.clip(uv, 0.0, 1.0) * jnp.array([w1 - 1, h - 1], jnp.float32)[:, None]
    col = jnp.minimum(pos[0].astype(jnp.int32), w1 - 2)
    row = jnp.minimum(pos[1].astype(jnp.int32), h - 2)
    fx, fy = pos[0] - col.astype(jnp.float32), pos[1] - row.astype(jnp.float32)
    v00, v10, v01, v11 = _corners(em, col, row)
    return (1 - fy) * ((1 - fx) * v00 + fx * v10) + fy * ((1 - fx) * v01 + fx * v11)


def sample(em: Emitters, ref: jax.Array, u: jax.Array,
           far: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(p, n, d, dist, pdf, weight) of importance-sampled directions from ref (3, N) with u (2, N)."""
    h, w1 = em.env_density.shape
    w = w1 - 1
    steps = em.search_steps
    row, uy = discrete.sample_reuse(em.env_row_cdf, jnp.zeros_like(u[1], jnp.int32), h - 1, u[1], steps)
    col, ux = discrete.sample_reuse(em.env_col_cdf, row * w, w, u[0], steps)
    col = col - row * w
    v00, v10, v01, v11 = _corners(em, col, row)
    sy = _interval_to_linear(v00 + v10, v01 + v11, uy)
    c0, c1 = v00 + (v01 - v00) * sy, v10 + (v11 - v10) * sy
    sx = _interval_to_linear(c0, c1, ux)
    pdf_uv = c0 + (c1 - c0) * sx
    uv = jnp.stack([(col.astype(jnp.float32) + sx + 0.5) / w, (row.astype(jnp.float32) + sy) / (h - 1)])

    theta, phi = uv[1] * PI, uv[0] * (2 * PI)
    sin_theta, cos_theta = elementary.sincos(theta)
    sin_phi, cos_phi = elementary.sincos(phi)
    local = jnp.stack([sin_phi * sin_theta, cos_theta, -cos_phi * sin_theta])
    pdf = jnp.where(pdf_uv > 0, pdf_uv * INV_TWO_PI_SQUARED / jnp.maximum(sin_theta, EPSILON), 0.0)
    d = vm.normalize(vm.transform_vector(em.to_world[:, :, em.environment], local))
    weight = jnp.where(pdf > 0, _lookup(em, uv) / jnp.where(pdf > 0, pdf, 1.0), 0.0)
    dist = jnp.full_like(pdf, jnp.inf)
    return ref + d * far, -d, d, dist, pdf, weight


def pdf(em: Emitters, d: jax.Array) -> jax.Array:
    """Solid-angle pdf (N,) of ``sample`` producing world direction d (3, N)."""
    v = _local(em, d)
    uv = _to_uv(v)
    w = em.env_density.shape[1] - 1
    u = uv[0] - 0.5 / w
    uv = jnp.stack([u - jnp.floor(u), uv[1]])
    inv_sin = 1.0 / jnp.sqrt(jnp.maximum(v[0] * v[0] + v[2] * v[2], EPSILON * EPSILON))
    return _density(em, uv) * inv_sin * INV_TWO_PI_SQUARED


def eval_radiance(em: Emitters, d: jax.Array) -> jax.Array:
    """Radiance (3, N) arriving along -d, i.e. seen by a ray escaping in world direction d."""
    return _lookup(em, _to_uv(_local(em, d)))
