"""Vector math on structure-of-arrays batches.

Every vector batch has shape (3, N) (components first) and every scalar batch shape (N,):
XLA vectorizes along N, which is five times faster on the CPU than batches of 3-vectors.
"""
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from tracer.constants import LUMINANCE_WEIGHTS

__all__ = [
    "Frame", "dot", "cross", "norm", "normalize", "coordinate_system", "tangent_frame", "to_local", "to_world",
    "reflect", "upper_hemisphere", "luminance", "select", "safe_sqrt", "transform_point", "transform_vector",
    "transform_normal", "max_component", "fold",
]

class Frame(NamedTuple):
    """A shading frame: three orthonormal unit vectors, each (3, N) (a pytree, unpacked as (s, t, n))."""
    s: jax.Array  # the first tangent (along dp/du where the surface has one)
    t: jax.Array  # the second tangent, n x s
    n: jax.Array  # the normal: local +z


def dot(a: jax.Array, b: jax.Array) -> jax.Array:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def cross(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def fold(op: Callable[[jax.Array, jax.Array], jax.Array], a: jax.Array, axis: int = 0) -> jax.Array:
    """``op`` folded over ``a``'s (short, static) ``axis`` from its first entry on, written out.

    What the tracer uses instead of float reductions (``jnp.sum``, ``jnp.max``, ``jnp.prod``):
    XLA's CPU backend hands a reduction over a batch above a few thousand lanes to a library
    kernel that may sum in another order or with FMAs, so the bits would depend on how many
    rays a device holds, i.e. on the device count. Elementwise ops fuse the same at any size.
    """
    a = jnp.moveaxis(a, axis, 0)
    out = a[0]
    for k in range(1, a.shape[0]):
        out = op(out, a[k])
    return out


def max_component(a: jax.Array) -> jax.Array:
    """The largest of the components of a (3, N) vector, (N,)."""
    return jnp.maximum(jnp.maximum(a[0], a[1]), a[2])


def norm(a: jax.Array) -> jax.Array:
    return jnp.sqrt(dot(a, a))


def normalize(a: jax.Array) -> jax.Array:
    return a * jnp.reciprocal(jnp.sqrt(jnp.maximum(dot(a, a), 1e-30)))


def safe_sqrt(x: jax.Array) -> jax.Array:
    return jnp.sqrt(jnp.maximum(x, 0.0))


def select(mask: ArrayLike, a: ArrayLike, b: ArrayLike) -> jax.Array:
    """``jnp.where`` that broadcasts an (N,) mask over (3, N) vectors."""
    return jnp.where(mask, a, b)


def coordinate_system(n: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two tangents (s, t) completing the unit normal n (3, N) to an orthonormal frame.

    Duff et al. 2017, "Building an Orthonormal Basis, Revisited" -- the construction Mitsuba 3 uses,
    so that anisotropic BSDFs see the same tangent frame.
    """
    sign = jnp.where(n[2] >= 0, 1.0, -1.0)
    a = -1.0 / (sign + n[2])
    b = n[0] * n[1] * a
    s = jnp.stack([1.0 + sign * n[0] * n[0] * a, sign * b, -sign * n[0]])
    t = jnp.stack([b, sign + n[1] * n[1] * a, -n[1]])
    return s, t


def tangent_frame(n: jax.Array, tangent: jax.Array) -> Frame:
    """The frame (s, t, n) whose s is ``tangent`` (3, N) made orthogonal to the unit normal n
    (Gram-Schmidt) and t = n x s: Mitsuba's ``SurfaceInteraction::initialize_sh_frame`` with
    tangent = dp/du, so that anisotropic BSDFs are oriented along the surface's parametrisation.
    Where the tangent vanishes (or lies along n), ``coordinate_system(n)`` completes the frame."""
    s = tangent - n * dot(n, tangent)
    length2 = dot(s, s)
    s = select(length2 > 0, s * jnp.reciprocal(jnp.sqrt(jnp.where(length2 > 0, length2, 1.0))), coordinate_system(n)[0])
    return Frame(s, cross(n, s), n)


def to_local(frame: Frame, v: jax.Array) -> jax.Array:
    s, t, n = frame
    return jnp.stack([dot(v, s), dot(v, t), dot(v, n)])


def to_world(frame: Frame, v: jax.Array) -> jax.Array:
    s, t, n = frame
    return s * v[0] + t * v[1] + n * v[2]


def reflect(wi: jax.Array) -> jax.Array:
    """Mirror a local direction about the local z axis (the shading normal)."""
    return jnp.stack([-wi[0], -wi[1], wi[2]])


def upper_hemisphere(v: jax.Array) -> jax.Array:
    """v (3, N) turned to the z >= 0 side of a local frame (negated where v_z < 0)."""
    return v * jnp.where(v[2] >= 0, 1.0, -1.0)


def luminance(rgb: jax.Array) -> jax.Array:
    return LUMINANCE_WEIGHTS[0] * rgb[0] + LUMINANCE_WEIGHTS[1] * rgb[1] + LUMINANCE_WEIGHTS[2] * rgb[2]


def transform_point(m: jax.Array, p: jax.Array) -> jax.Array:
    """Apply affine matrices m (3, 4, N) -- or one (3, 4) -- to points p (3, N)."""
    if m.ndim == 2:
        m = m[:, :, None]
    return m[:, 0] * p[0] + m[:, 1] * p[1] + m[:, 2] * p[2] + m[:, 3]


def transform_vector(m: jax.Array, v: jax.Array) -> jax.Array:
    if m.ndim == 2:
        m = m[:, :, None]
    return m[:, 0] * v[0] + m[:, 1] * v[1] + m[:, 2] * v[2]


def transform_normal(inverse: jax.Array, n: jax.Array) -> jax.Array:
    """Transform normals with the inverse of the affine map (its transpose is applied)."""
    if inverse.ndim == 2:
        inverse = inverse[:, :, None]
    return inverse[0, :3] * n[0] + inverse[1, :3] * n[1] + inverse[2, :3] * n[2]
