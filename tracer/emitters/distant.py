"""Lights at infinity without an image: directional (a delta direction) and constant environment.

Both place their sample point beyond the scene at twice the radius of its bounding sphere (or
of the sphere through the reference point, when that is larger), as Mitsuba's ``directional``
and ``constant``; the reported distance is infinite, since nothing lies beyond that point.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from tracer import sampling
from tracer import lanes
from tracer import vecmath as vm
from tracer.constants import FOUR_PI

if TYPE_CHECKING:
    from tracer.emitters.table import Emitters
    from tracer.textures import Textures

__all__ = ["far_distance", "sample_directional", "sample_constant"]


def far_distance(em: Emitters, ref: jax.Array) -> jax.Array:
    """2 max(r, |ref - c|) (N,): a point this far along any direction lies outside the scene."""
    return 2.0 * jnp.maximum(em.sphere_radius, vm.norm(ref - em.sphere_center[:, None]))


def sample_directional(em: Emitters, textures: Textures, e: jax.Array, ref: jax.Array,
                       u: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(p, n, d, dist, pdf, weight): irradiance arriving against the light's +z axis."""
    w = vm.normalize(lanes.take(em.to_world[:, 2], e))
    p = ref - w * far_distance(em, ref)
    dist = jnp.full(ref.shape[1:], jnp.inf, jnp.float32)
    return p, w, -w, dist, jnp.ones_like(dist), lanes.take(em.radiance, e)


def sample_constant(em: Emitters, textures: Textures, e: jax.Array, ref: jax.Array,
                    u: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(p, n, d, dist, pdf, weight): a uniform direction on the sphere, pdf 1 / (4 pi)."""
    d = sampling.square_to_uniform_sphere(u)
    p = ref + d * far_distance(em, ref)
    dist = jnp.full(ref.shape[1:], jnp.inf, jnp.float32)
    pdf = sampling.square_to_uniform_sphere_pdf(d)
    return p, -d, d, dist, pdf, lanes.take(em.radiance, e) * FOUR_PI
