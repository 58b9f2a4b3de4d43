"""Surface uv of the analytic shapes at a point, as Mitsuba 3's shapes report it.

One definition for the two places that need it: a ray hit (``tracer.shapes.geometry``) and a point an
area light samples (``tracer.emitters.area``, whose textured radiance is read at that uv).
Points are world space (3, N); ``to_local`` (3, 4) maps the shape's world to its object frame
(the unit sphere, the unit tube, the unit disk).
"""
import jax
import jax.numpy as jnp

from tracer import elementary
from tracer.constants import INV_PI, INV_TWO_PI, PI, TWO_PI

__all__ = ["azimuth", "cylinder_uv", "disk_uv", "sphere_uv", "unit_angle_z"]


def unit_angle_z(v: jax.Array) -> jax.Array:
    """Drjit's ``unit_angle_z``: the polar angle of unit v (3, N), accurate near the poles."""
    s = jnp.where(v[2] >= 0, 1.0, -1.0)
    half = 0.5 * jnp.sqrt(v[0] * v[0] + v[1] * v[1] + (v[2] - s) ** 2)
    temp = 2.0 * elementary.asin(jnp.clip(half, -1.0, 1.0))
    return jnp.where(v[2] >= 0, temp, PI - temp)


def azimuth(x: jax.Array, y: jax.Array) -> jax.Array:
    """atan2(y, x) in [0, 2 pi) (N,)."""
    phi = elementary.atan2(y, x)
    return jnp.where(phi < 0, phi + TWO_PI, phi)


def sphere_uv(local: jax.Array) -> jax.Array:
    """(phi / 2 pi, theta / pi) (2, N) of a point ``local`` (3, N) on the unit sphere (sphere.cpp)."""
    return jnp.stack([azimuth(local[0], local[1]) * INV_TWO_PI, unit_angle_z(local) * INV_PI])


def cylinder_uv(local: jax.Array) -> jax.Array:
    """(phi / 2 pi, z) (2, N) of a point ``local`` (3, N) of the unit tube (cylinder.cpp)."""
    return jnp.stack([azimuth(local[0], local[1]) * INV_TWO_PI, local[2]])


def disk_uv(x: jax.Array, y: jax.Array) -> jax.Array:
    """(r, phi / 2 pi) (2, N) of the point (x, y) (N,) of the unit disk (disk.cpp)."""
    ang = elementary.atan2(y, x) * INV_TWO_PI
    return jnp.stack([jnp.sqrt(x * x + y * y), jnp.where(ang < 0, ang + 1.0, ang)])
