"""Mitsuba 3's ``projector``: a point light that projects its ``irradiance`` texture through a
pinhole (``src/emitters/projector.cpp``).

A reference point p (local coordinates x, y, z = to_local p, the projector looking along +z)
sees the texture at Mitsuba's perspective film coordinates of the texture's resolution W x H,

    u = 1/2 - x cot / (2 z),   v = 1/2 - (W / H) y cot / (2 z),   cot = 1 / tan(x_fov / 2),

and receives irradiance(u, v) pi scale / (z^2 cos), cos = -dot(n, d) with n = to_world's +z
axis (as given, not normalized) and d the unit direction towards the light: what a texture on
the plane z = 1 would deliver. Outside [0, 1]^2 or behind the projector the sample is invalid
(pdf 0). The pdf of a valid sample is 1 (a delta position).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from tracer import textures as tex
from tracer import lanes
from tracer import vecmath as vm
from tracer.constants import PI

if TYPE_CHECKING:
    from tracer.emitters.table import Emitters

__all__ = ["film_uv", "sample"]


def film_uv(em: Emitters, e: jax.Array, local: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(uv (2, N), valid (N,)) of local points (3, N) on the film of projectors ``e`` (N,)."""
    scale = 0.5 * em.proj_cot[e] / local[2]
    uv = jnp.stack([0.5 - local[0] * scale, 0.5 - local[1] * (scale * em.proj_aspect[e])])
    valid = jnp.all((uv >= 0) & (uv <= 1), axis=0) & (local[2] > 0)
    return uv, valid


def sample(em: Emitters, textures: tex.Textures, e: jax.Array, ref: jax.Array,
           u: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(p, n, d, dist, pdf, weight) for projectors ``e`` seen from ref (3, N)."""
    p = lanes.take(em.to_world[:, 3], e)
    d = p - ref
    dist = vm.norm(d)
    d = d / jnp.where(dist > 0, dist, 1.0)
    local = vm.transform_point(lanes.take(em.to_local, e), ref)
    uv, valid = film_uv(em, e, local)
    irradiance = lanes.take(em.radiance, e)
    if em.textured:
        tid = em.texture[e]
        irradiance = jnp.where(tid >= 0, irradiance * tex.eval_rgb(textures, jnp.maximum(tid, 0), uv), irradiance)
    axis = lanes.take(em.to_world[:, 2], e)
    weight = irradiance * (PI / (local[2] * local[2] * -vm.dot(axis, d)))
    valid = valid & jnp.all(jnp.isfinite(weight), axis=0)
    return p, jnp.zeros_like(p), d, dist, jnp.where(valid, 1.0, 0.0), jnp.where(valid, weight, 0.0)
