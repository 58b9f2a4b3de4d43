"""What a shape reports where a ray meets it: ``SurfacePoint``.

Each kind of primitive computes one (triangles and the sphere, disk and cylinder in
``tracer.shapes.geometry``, curves in ``tracer.shapes.curves``); ``geometry.surface_interaction``
keeps, for each ray, the one of the primitive it hit (``select_point``) and adds what the scene's
tables know (shape, attributes) to make its ``SurfaceInteraction``. Its own module so that the
curves, which the intersection code imports, can return one too.
"""
from typing import NamedTuple

import jax

from tracer import vecmath as vm

__all__ = ["SurfacePoint", "select_point"]


class SurfacePoint(NamedTuple):
    """Surface data of N hits, each field (3, N) but uv (2, N); a pytree."""
    p: jax.Array      # position
    ng: jax.Array     # geometric normal (not flipped toward the ray)
    ns: jax.Array     # shading normal
    uv: jax.Array     # surface uv
    dp_du: jax.Array  # position partials along the surface uv (Mitsuba's dp_du, dp_dv)
    dp_dv: jax.Array


def select_point(mask: jax.Array, a: SurfacePoint, b: SurfacePoint) -> SurfacePoint:
    """``a`` where ``mask`` (N,), else ``b``, field by field."""
    return SurfacePoint._make(vm.select(mask, x, y) for x, y in zip(a, b))
