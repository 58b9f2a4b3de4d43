"""Direct illumination with multiple importance sampling, as Mitsuba 3's ``direct`` integrator.

Each camera ray adds the emission it sees (unless ``hide_emitters``), then, at its first hit,
``emitter_samples`` light samples and ``bsdf_samples`` BSDF samples whose rays count only if
they reach an emitter. The two strategies are combined with the power heuristic over pdfs
scaled by each strategy's share of the samples, and each is averaged over its count (Veach
1997, section 9.2). As in Mitsuba's ``direct.cpp``, a delta light's sample is added whole for
every emitter sample, not averaged.

The stages are the path integrator's (``tracer.integrators.path``): a BSDF sample here is a path of
one more segment whose emission is weighted against the light-sampling strategy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from tracer import bsdfs

from tracer.shapes import geometry
from tracer import textures as tx
from tracer import vecmath as vm
from tracer.integrators.path import (PathState, add_emission, add_next_event, bounce_uniforms, find_surfaces,
                                     fresh_paths, material_and_frame)
from tracer.rng import Dims

if TYPE_CHECKING:
    from tracer.rng import SampleKeys
    from tracer.scene import Scene

__all__ = ["trace_direct"]


def trace_direct(scene: Scene, keys: SampleKeys, origin: jax.Array, direction: jax.Array, t_max: jax.Array,
                 active: jax.Array) -> jax.Array:
    """Radiance (3, N) arriving along camera rays; ``keys`` (``rng.SampleKeys``) address each ray's randomness.

    Light sample i draws its numbers from the path integrator's bounce block i, BSDF sample i
    from the same block's BSDF dimensions.
    """
    settings = scene.settings
    n_light, n_bsdf = settings.emitter_samples, settings.bsdf_samples
    light_share, bsdf_share = n_light / (n_light + n_bsdf), n_bsdf / (n_light + n_bsdf)
    camera = fresh_paths(origin, direction, t_max, active)
    surface = find_surfaces(scene, camera, skip_hidden_emitters=False)
    radiance = add_emission(scene, camera, surface, jnp.zeros_like(origin))
    mat, frame = material_and_frame(scene, surface)
    wi = vm.to_local(frame, -direction)
    for i in range(max(n_light, n_bsdf)):
        uniforms = bounce_uniforms(keys, jnp.full_like(camera.depth, i))
        if i < n_light:
            radiance = add_next_event(scene, camera, surface, mat, frame, wi, surface.valid, uniforms, radiance,
                                      shares=(light_share, bsdf_share, 1.0 / n_light))
        if i < n_bsdf:
            radiance = _add_bsdf_sample(scene, camera, surface, mat, frame, wi, uniforms, radiance,
                                        light_share, bsdf_share, 1.0 / n_bsdf)
    return radiance


def _add_bsdf_sample(scene, camera, surface, mat, frame, wi, uniforms, radiance, light_share, bsdf_share, weight):
    """One BSDF sample: the emission its ray reaches, weighted against light sampling."""
    si = surface.si
    bs, bsdf_weight = bsdfs.sample(scene.materials, scene.textures, mat, tx.texture_point(si.uv, si.attributes), wi,
                                   uniforms[Dims.BSDF_COMPONENT], uniforms[Dims.BSDF_DIRECTION:Dims.BSDF_DIRECTION + 2],
                                   surface.tangents)
    wo_world = vm.to_world(frame, bs.wo)
    throughput = jnp.where(surface.valid, bsdf_weight, 0.0)
    ray = PathState(
        depth=camera.depth + 1, origin=geometry.spawn_ray(si.p, surface.ng, wo_world), direction=wo_world,
        t_max=jnp.full_like(camera.t_max, jnp.inf), throughput=throughput, radiance=jnp.zeros_like(radiance),
        eta=camera.eta, active=surface.valid & jnp.any(throughput != 0, axis=0), prev_p=si.p,
        prev_bsdf_pdf=bs.pdf * bsdf_share, prev_bsdf_delta=bs.is_delta)
    reached = find_surfaces(scene, ray)
    return radiance + add_emission(scene, ray, reached, ray.radiance, light_share=light_share) * weight
