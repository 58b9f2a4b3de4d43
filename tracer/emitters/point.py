"""Point and spot lights: delta positions, sampled deterministically (Mitsuba's ``point``, ``spot``).

The weight of a sample is the intensity times falloff over the squared distance; the pdf is 1
(a delta, as Mitsuba's ``ds.pdf = 1``). The spot light points along its local +z axis; its
intensity is full inside ``beam_width``, falls linearly in angle to zero at ``cutoff_angle``
and is optionally modulated by a texture projected over the cutoff cone.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from tracer import elementary
from tracer import textures as tex
from tracer import lanes
from tracer import vecmath as vm

if TYPE_CHECKING:
    from tracer.emitters.table import Emitters

__all__ = ["sample_point", "sample_spot", "spot_falloff"]


def _toward(em: Emitters, e: jax.Array, ref: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    p = lanes.take(em.to_world[:, 3], e)
    d = p - ref
    dist = vm.norm(d)
    d = d / jnp.where(dist > 0, dist, 1.0)
    inv_dist2 = jnp.where(dist > 0, 1.0 / (dist * dist), 0.0)
    return p, d, dist, inv_dist2


def sample_point(em: Emitters, textures: tex.Textures, e: jax.Array, ref: jax.Array,
                 u: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(p, n, d, dist, pdf, weight) for point lights ``e`` seen from ref (3, N)."""
    p, d, dist, inv_dist2 = _toward(em, e, ref)
    weight = lanes.take(em.radiance, e) * inv_dist2
    return p, jnp.zeros_like(p), d, dist, jnp.ones_like(dist), weight


def spot_falloff(em: Emitters, e: jax.Array, local: jax.Array) -> jax.Array:
    """Falloff in [0, 1] (N,) along local emission directions (3, N) (``SpotLight::falloff_curve``)."""
    cos_theta = vm.normalize(local)[2]
    ramp = (em.spot_cutoff[e] - elementary.acos(jnp.clip(cos_theta, -1.0, 1.0))) * em.spot_inv_transition[e]
    beam = jnp.where(cos_theta >= em.spot_cos_beam[e], 1.0, ramp)
    return jnp.where(cos_theta > em.spot_cos_cutoff[e], beam, 0.0)


def sample_spot(em: Emitters, textures: tex.Textures, e: jax.Array, ref: jax.Array,
                u: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(p, n, d, dist, pdf, weight) for spot lights ``e`` seen from ref (3, N)."""
    p, d, dist, inv_dist2 = _toward(em, e, ref)
    local = vm.transform_vector(lanes.take(em.to_local, e), -d)
    falloff = spot_falloff(em, e, local)
    intensity = lanes.take(em.radiance, e)
    tid = em.texture[e]
    if em.textured:
        scale = 0.5 / (local[2] * em.spot_uv_factor[e])
        uv = jnp.stack([0.5 + local[0] * scale, 0.5 + local[1] * scale])
        projected = tex.eval_rgb(textures, jnp.maximum(tid, 0), uv)
        intensity = jnp.where((tid >= 0) & (falloff > 0), intensity * projected, intensity)
    weight = jnp.where(falloff > 0, intensity * (falloff * inv_dist2), 0.0)
    return p, jnp.zeros_like(p), d, dist, jnp.ones_like(dist), weight
