"""Warps from the unit square, each with its pdf (and inverse where it is used).

Inputs are (2, N) uniforms, outputs (2, N) or (3, N) points; pdfs are (N,) with respect to
area on the target domain (solid angle for directions). Follows Mitsuba 3's ``warp`` module
(and PBRT-v4 section A.5) so that both renderers spend their samples alike.
"""
import jax
import jax.numpy as jnp
import numpy as np

from tracer import elementary, lanes
from tracer import vecmath as vm
from tracer.constants import INV_FOUR_PI, INV_PI, PI

__all__ = [
    "square_to_uniform_disk_concentric",
    "square_to_cosine_hemisphere", "square_to_cosine_hemisphere_pdf",
    "square_to_uniform_sphere", "square_to_uniform_sphere_pdf",
    "square_to_uniform_triangle", "sample_discrete", "power_heuristic",
]



def square_to_uniform_disk_concentric(u: jax.Array) -> jax.Array:
    """Shirley-Chiu concentric map of [0,1)^2 onto the unit disk (pdf 1/pi)."""
    x = 2.0 * u[0] - 1.0
    y = 2.0 * u[1] - 1.0
    first = jnp.abs(x) > jnp.abs(y)
    safe_x = jnp.where(x == 0, 1.0, x)
    safe_y = jnp.where(y == 0, 1.0, y)
    r = jnp.where(first, x, y)
    phi = jnp.where(first, (PI / 4) * (y / safe_x), (PI / 2) - (PI / 4) * (x / safe_y))
    phi = jnp.where((x == 0) & (y == 0), 0.0, phi)
    sin_phi, cos_phi = elementary.sincos(phi)
    return jnp.stack([r * cos_phi, r * sin_phi])


def square_to_cosine_hemisphere(u: jax.Array) -> jax.Array:
    """Malley's method: project the concentric disk up onto the +z hemisphere."""
    p = square_to_uniform_disk_concentric(u)
    z = vm.safe_sqrt(1.0 - p[0] * p[0] - p[1] * p[1])
    # Materialized before stacking: XLA's concatenate fusions evaluate each output row from
    # scratch, so every consumer row would redo the sine and cosine (6 per ray instead of 2).
    return jnp.stack(jax.lax.optimization_barrier((p[0], p[1], z)))


def square_to_cosine_hemisphere_pdf(v: jax.Array) -> jax.Array:
    return INV_PI * jnp.maximum(v[2], 0.0)


def square_to_uniform_sphere(u: jax.Array) -> jax.Array:
    z = 1.0 - 2.0 * u[1]
    r = vm.safe_sqrt(1.0 - z * z)
    phi = 2.0 * PI * u[0]
    sin_phi, cos_phi = elementary.sincos(phi)
    return jnp.stack([r * cos_phi, r * sin_phi, z])


def square_to_uniform_sphere_pdf(v: jax.Array) -> jax.Array:
    return jnp.full(v.shape[1:], INV_FOUR_PI)


def square_to_uniform_triangle(u: jax.Array) -> jax.Array:
    """Barycentrics (b1, b2) uniform over the triangle (Mitsuba's square-root warp)."""
    t = vm.safe_sqrt(1.0 - u[0])
    return jnp.stack([1.0 - t, t * u[1]])


def sample_discrete(cdf: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Index i with cdf[i-1] <= u < cdf[i] for an inclusive, increasing cdf (M,); u (N,) in [0, 1).

    Returns (index, u rescaled to [0, 1) inside the chosen bin) so the same uniform can be reused.
    """
    if cdf.shape[0] <= lanes.SELECT_COLUMNS:
        # A few bins (a scene's emitters): the count of entries at or below u, as searchsorted
        # counts them, by comparisons that fuse with their readers; XLA's searchsorted is a loop
        # of its own (ten kernels).
        idx = sum((cdf[i] <= u).astype(jnp.int32) for i in range(cdf.shape[0]))
    else:
        idx = jnp.searchsorted(cdf, u, side="right")
    idx = jnp.minimum(idx, cdf.shape[0] - 1)
    lo = jnp.where(idx > 0, lanes.take(cdf, jnp.maximum(idx - 1, 0)), 0.0)
    hi = lanes.take(cdf, idx)
    u_reused = jnp.clip((u - lo) / jnp.maximum(hi - lo, 1e-30), 0.0, np.float32(1.0 - 2**-24))
    return idx, u_reused


def power_heuristic(pdf_a: jax.Array, pdf_b: jax.Array) -> jax.Array:
    """Veach's power heuristic with beta = 2, as Mitsuba's path integrator uses it."""
    a2 = pdf_a * pdf_a
    b2 = pdf_b * pdf_b
    w = a2 / (a2 + b2)
    return jnp.where(jnp.isfinite(w) & (a2 + b2 > 0), w, 0.0)
