"""Volumetric path tracing with spectral MIS, as Mitsuba 3's ``volpathmis`` (Miller et al. 2019,
"A null-scattering path integral formulation of light transport", section 6).

The same wavefront and events as ``tracer.integrators.volpath`` (a path samples its free flights
with one colour channel drawn once per path), but instead of a throughput each path carries
Mitsuba's ratio matrices: ``p_over_f[i, j]`` is the pdf of the path so far had channel j sampled
it, over its contribution in channel i (Mitsuba's ``WeightMatrix`` with ``use_spectral_mis``).
A channel's weight is the one-sample balance heuristic over the three channels' pdfs,
3 / sum_j p_over_f[i, j] (``mis_weight``), which tames the heavy tail volpath has where a
medium's extinction has a colour. ``p_over_f_nee`` is the same for the path that next-event
estimation would have made from the last real scatter; emission found by a phase or BSDF sample
and light samples are weighted by the balance heuristic over both matrices (not the power
heuristic of ``path`` and ``volpath``). The order of events, the zero and non-finite ratio rules
and roulette (not after a null collision) follow volpathmis.cpp line by line.

A light sample's transmittance: ratio tracking through heterogeneous media as Mitsuba's (each
tentative collision multiplies the NEE matrix by majorant / sigma_n and the unidirectional one by
the chance of a null collision too); through a homogeneous medium, where Mitsuba's tracked
estimate keeps the sample only when the path's channel draws no collision (its sigma_n is 0) and
then weights it by the channels' transmittance ratios, the sample is weighted by that channel's
transmittance instead: the same expectation, less noise.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from tracer import bsdfs, emitters, media, rng
from tracer import textures as tx
from tracer import vecmath as vm
from tracer.integrators import path, volpath
from tracer.integrators.volpath import MAX_COLLISIONS, MAX_CROSSINGS, PHASE_CHOICE_DIMS, SHADOW_DIMS
from tracer.media import MediumKind
from tracer.pytree import pytree_dataclass
from tracer.rng import Dims
from tracer.shapes import geometry

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["MisState", "start", "step", "mis_weight", "update_weights"]


@pytree_dataclass
class MisState:
    """A pool of volumetric paths. ``path`` holds the ray, depth, radiance, eta and activity as
    ``path.PathState`` does; its ``prev_p`` is the last real scatter (Mitsuba's
    ``last_scatter_event``) and ``prev_bsdf_delta`` Mitsuba's ``specular_chain`` (emission there
    counts in full); its ``throughput`` and ``prev_bsdf_pdf`` are unused (the matrices say it)."""

    path: path.PathState
    p_over_f: jnp.ndarray      # (3, 3, N) [i, j]: pdf with channel j over contribution in channel i
    p_over_f_nee: jnp.ndarray  # (3, 3, N) the same for the light-sampled path from the last scatter
    last_null: jnp.ndarray     # (N,) bool: the last event was a null collision (no roulette next)
    medium: jnp.ndarray        # (N,) int32 the medium the ray travels in, -1 for vacuum
    channel: jnp.ndarray       # (N,) int32 the colour channel free flights are sampled with
    step: jnp.ndarray          # (N,) int32 events so far: the block of random numbers the next one draws
    along: volpath.Along       # how far the ray got through null collisions, and its hit

    @property
    def active(self) -> jax.Array:
        return self.path.active

    @property
    def radiance(self) -> jax.Array:
        return self.path.radiance


def ratios(p: jax.Array, f: jax.Array) -> jax.Array:
    """(3, 3, N) [i, j] = p_j / f_i of a pdf p and a contribution f ((3, N), or (N,) for every channel)."""
    p, f = jnp.broadcast_to(p, (3, *p.shape[-1:])), jnp.broadcast_to(f, (3, *f.shape[-1:]))
    return p[None, :, :] / f[:, None, :]


def update_weights(m: jax.Array, ratio: jax.Array, active: jax.Array) -> jax.Array:
    """Mitsuba's ``update_weights``: m (3, 3, N) times ``ratio`` (``ratios``) where ``active``; a
    ratio that is not finite counts 0, and so does a NaN product."""
    product = jnp.where(jnp.isfinite(ratio), ratio, 0.0) * m
    return jnp.where(active, jnp.where(jnp.isnan(product), 0.0, product), m)


def mis_weight(a: jax.Array, b: jax.Array | None = None) -> jax.Array:
    """(3, N) each channel's balance-heuristic weight, 3 / sum_j (a + b)[i, j] (0 where that sum is 0)."""
    m = a if b is None else a + b
    total = m[:, 0] + m[:, 1] + m[:, 2]  # in one order (media.channel_mean says why)
    return jnp.where(total == 0, 0.0, 3.0 / jnp.where(total == 0, 1.0, total))


def _safe_div(a, b):
    return a / jnp.where(b > 0, b, 1.0)


def start(scene: Scene, keys: rng.SampleKeys, origin: jax.Array, direction: jax.Array, t_max: jax.Array,
          active: jax.Array) -> MisState:
    """Paths at their camera rays, in the sensor's medium."""
    base = volpath.start(scene, keys, origin, direction, t_max, active)
    ones = jnp.ones((3, 3, *t_max.shape), jnp.float32)
    return MisState(path=base.path, p_over_f=ones, p_over_f_nee=ones, last_null=jnp.zeros_like(active),
                    medium=base.medium, channel=base.channel, step=base.step, along=base.along)


def _flight_ratio(combined, t, collided):
    """(3, 3, N) Mitsuba's transmittance_eval_pdf as ratios pdf_j / tr_i over a free flight of t:
    exp(-(c_j - c_i) t), times c_j for a collision (no underflow to 0 / 0); 0 for an endless one
    (exp(-c inf) makes Mitsuba's ratios 0 / 0 or x / 0, which count 0)."""
    diff = combined[None, :, :] - combined[:, None, :]
    finite = jnp.isfinite(t)
    ratio = jnp.exp(-diff * jnp.where(finite, t, 0.0)) * jnp.where(collided, combined[None, :, :], 1.0)
    return jnp.where(finite, ratio, 0.0)


def step(scene: Scene, keys: rng.SampleKeys, state: MisState) -> MisState:
    """One event of every path: roulette, then a medium collision or a surface (null collisions in
    a heterogeneous medium along a ray whose hit is known first, in a loop of their own, as
    ``volpath.step``'s)."""
    if MediumKind.HETEROGENEOUS in scene.media.kinds_present and not scene.settings.hide_emitters:
        state = _skip_nulls(scene, keys, state)
    return _event(scene, keys, state)


def _skip_nulls(scene: Scene, keys: rng.SampleKeys, state: MisState) -> MisState:
    """``state`` after the null collisions its paths meet next, each as ``_event`` makes it (the
    same random numbers, roulette and MIS ratios), in a loop that does nothing else (see
    ``volpath._skip_nulls``). Paths whose ray's hit is not yet known, and paths whose next event
    is not a null collision, stop."""
    md, settings = scene.media, scene.settings

    def null_collision(s: MisState) -> tuple[jax.Array, MisState]:
        p = s.path
        u, u_free = volpath.event_uniforms(keys, s.step)
        active, pof = _roulette(settings, s, u)
        combined, mint, flight, collide = volpath.flight_to_known_hit(scene, s, active, u_free)
        spectral = collide & media.pick(md, s.medium, md.spectral)
        tr = _flight_ratio(combined, flight - mint, collide)
        pof = update_weights(pof, tr, spectral)
        nee = update_weights(s.p_over_f_nee, tr, spectral)
        c = volpath.collision(md, s.medium, p, combined, flight, collide, u)
        sigma_n, null_chance, null = c.sigma_n, c.null_chance, c.null
        plain = ~spectral
        pof = update_weights(pof, ratios(null_chance, sigma_n), null & spectral)
        nee = update_weights(nee, ratios(jnp.ones_like(null_chance), sigma_n), null & spectral)
        pof = update_weights(pof, ratios(sigma_n, sigma_n), null & plain)
        nee = update_weights(nee, ratios(jnp.ones_like(null_chance), null_chance), null & plain)
        passed = dataclasses.replace(s, p_over_f=pof, p_over_f_nee=nee, last_null=null, step=s.step + 1,
                                     along=dataclasses.replace(s.along, t_start=flight))
        return null, passed

    return volpath.while_null(null_collision, state, state.path.active)


def _roulette(settings, state: MisState, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(active, p_over_f) after roulette on the MIS throughput (not right after a null collision),
    max_depth, and paths with nothing left, at the start of every event."""
    p = state.path
    q = jnp.minimum(vm.max_component(mis_weight(state.p_over_f)) * p.eta * p.eta, 0.95)
    roulette = p.active & ~state.last_null & (p.depth > settings.rr_depth)
    active = p.active & ~(roulette & (u[Dims.ROULETTE] >= q))
    pof = update_weights(state.p_over_f, ratios(q, jnp.ones_like(q)), roulette)
    if settings.max_depth >= 0:
        active = active & (p.depth < settings.max_depth)
    return active & jnp.any(mis_weight(pof) != 0, axis=0), pof


def _event(scene: Scene, keys: rng.SampleKeys, state: MisState) -> MisState:
    """One event of every path: roulette, then a medium collision or a surface."""
    settings, md, p = scene.settings, scene.media, state.path
    u, u_free = volpath.event_uniforms(keys, state.step)

    active, pof = _roulette(settings, state, u)

    # A tentative collision in the ray's medium, or the surface its ray hits first.
    in_medium = active & (state.medium >= 0)
    met = volpath.meet(scene, p, state.medium, state.channel, state.along, u_free, active)
    surface, combined, collide, flight = met.surface, met.combined, met.collide, met.flight
    spectral = in_medium & media.pick(md, state.medium, md.spectral)
    tr = _flight_ratio(combined, met.travelled, collide)
    pof = update_weights(pof, tr, spectral)
    nee = update_weights(state.p_over_f_nee, tr, spectral)

    c = volpath.collision(md, state.medium, p, combined, flight, collide, u)
    x, sigma_t, sigma_s, sigma_n, null_chance, null = c.x, c.sigma_t, c.sigma_s, c.sigma_n, c.null_chance, c.null
    real = collide & ~null
    plain = ~spectral
    pof = update_weights(pof, ratios(null_chance, sigma_n), null & spectral)
    nee = update_weights(nee, ratios(jnp.ones_like(null_chance), sigma_n), null & spectral)
    pof = update_weights(pof, ratios(sigma_n, sigma_n), null & plain)
    nee = update_weights(nee, ratios(jnp.ones_like(null_chance), null_chance), null & plain)
    pof = update_weights(pof, ratios(1.0 - null_chance, sigma_s), real & spectral)
    pof = update_weights(pof, ratios(sigma_t, sigma_s), real & plain)

    depth = p.depth + real.astype(jnp.int32)
    if settings.max_depth >= 0:
        active = active & (depth < settings.max_depth)
    scatter = real & active
    p = dataclasses.replace(p, active=active, depth=depth)
    state = dataclasses.replace(state, path=p, p_over_f=pof, p_over_f_nee=nee)
    medium_state = _scatter(scene, keys, state, scatter, x, u)
    surface_state = _surface(scene, keys, state, surface, active & ~collide, u)
    # A null collision: the ray goes on from there.
    passed = dataclasses.replace(state, last_null=null, step=state.step + 1,
                                 along=volpath.Along(t_start=flight, known=met.whole, hit=met.hit))
    out = jax.tree.map(lambda a, b: jnp.where(real, a, b), medium_state, surface_state)
    return jax.tree.map(lambda a, b: jnp.where(null, a, b), passed, out)


def _scatter(scene, keys, state, here, x, u):
    """A real collision at x of lanes ``here``: a light sample weighted by the phase function,
    then the next direction from it."""
    md, p = scene.media, state.path
    wi = -p.direction
    sample_emitters = media.pick(md, state.medium, md.sample_emitters)
    ds, em_weight, nee_here = volpath.light_sample(scene, x, here & sample_emitters, u)
    nee_end, uni_end, emitted = _light_mis(scene, keys, state, x, jnp.zeros_like(x), ds, em_weight,
                                           state.medium, nee_here)
    phase = media.phase_eval(md, state.medium, wi, ds.d, x)
    nee_end = update_weights(nee_end, ratios(jnp.ones_like(phase), phase), nee_here)
    uni_end = update_weights(uni_end, ratios(jnp.where(ds.is_delta, 0.0, phase), phase), nee_here)
    radiance = p.radiance + jnp.where(nee_here, mis_weight(nee_end, uni_end) * emitted, 0.0)

    choice = (rng.draw(keys, np.uint32(PHASE_CHOICE_DIMS) + state.step.astype(jnp.uint32), 1)[0]
              if md.blends_present else jnp.zeros_like(p.t_max))
    wo, phase_pdf = media.phase_sample(md, state.medium, wi, u[Dims.BSDF_DIRECTION:Dims.BSDF_DIRECTION + 2],
                                       choice, x)
    # Every phase function is sampled exactly: its weight is 1, its value its pdf.
    # The NEE matrix starts again from p_over_f at a real scatter.
    pof = update_weights(state.p_over_f, ratios(phase_pdf, phase_pdf), here)
    nee = update_weights(state.p_over_f, ratios(jnp.ones_like(phase_pdf), phase_pdf), here)
    new = dataclasses.replace(p, origin=x, direction=wo, t_max=jnp.full_like(p.t_max, jnp.inf), radiance=radiance,
                              active=here, prev_p=x, prev_bsdf_delta=~sample_emitters)
    return dataclasses.replace(state, path=new, p_over_f=pof, p_over_f_nee=nee, last_null=jnp.zeros_like(here),
                               step=state.step + 1, along=volpath.fresh_along(scene, p.t_max))


def _surface(scene, keys, state, surface, here, u):
    """The surface event of lanes ``here`` (a hit, or an escape): emission, a light sample through
    media and null surfaces, a BSDF sample; crossing into the shape's other medium."""
    settings, p = scene.settings, state.path
    radiance, nee = _emission(scene, state, surface, here)
    hit = here & surface.valid
    mat, frame = path.material_and_frame(scene, surface)
    wi = vm.to_local(frame, -p.direction)
    si, at = surface.si, tx.texture_point(surface.si.uv, surface.si.attributes)
    beyond = lambda d: volpath.beyond(scene.shapes, surface.shape, surface.ng, d, state.medium)

    more = hit if settings.max_depth < 0 else hit & (p.depth + 1 < settings.max_depth)
    ds, em_weight, nee_here = volpath.light_sample(scene, si.p, more & bsdfs.has_nondelta_lobe(scene.materials, mat), u)
    nee_end, uni_end, emitted = _light_mis(scene, keys, state, si.p, surface.ng, ds, em_weight, beyond(ds.d),
                                           nee_here)
    (value, bsdf_pdf), (bs, weight) = bsdfs.eval_and_sample(scene.materials, scene.textures, mat, at, wi,
                                                            vm.to_local(frame, ds.d), u[Dims.BSDF_COMPONENT],
                                                            u[Dims.BSDF_DIRECTION:Dims.BSDF_DIRECTION + 2],
                                                            surface.tangents)
    nee_end = update_weights(nee_end, ratios(jnp.ones_like(bsdf_pdf), value), nee_here)
    uni_end = update_weights(uni_end, ratios(jnp.where(ds.is_delta, 0.0, bsdf_pdf), value), nee_here)
    radiance = radiance + jnp.where(nee_here, mis_weight(nee_end, uni_end) * emitted, 0.0)

    hit = hit & (bs.pdf > 0)
    direction = vm.to_world(frame, bs.wo)
    real = hit & ~bs.null  # a null lobe (null, a thindielectric's transmission): not a bounce
    f = weight * bs.pdf
    nee = jnp.where(real, state.p_over_f, nee)
    pof = update_weights(state.p_over_f, ratios(bs.pdf, f), hit)
    nee = update_weights(nee, ratios(jnp.ones_like(bs.pdf), f), real)
    new = dataclasses.replace(
        p, depth=p.depth + real.astype(jnp.int32), origin=geometry.spawn_ray(si.p, surface.ng, direction),
        direction=direction, t_max=jnp.full_like(p.t_max, jnp.inf), radiance=radiance,
        eta=p.eta * jnp.where(hit, bs.eta, 1.0), active=hit, prev_p=jnp.where(real, si.p, p.prev_p),
        prev_bsdf_delta=jnp.where(real, bs.is_delta, p.prev_bsdf_delta))
    return dataclasses.replace(state, path=new, p_over_f=pof, p_over_f_nee=nee, medium=jnp.where(hit, beyond(direction),
                               state.medium), last_null=jnp.zeros_like(hit), step=state.step + 1,
                               along=volpath.fresh_along(scene, p.t_max))


def _emission(scene, state, surface, here):
    """(radiance, p_over_f_nee): emission found by lanes ``here`` (an area light hit, or the
    environment on an escape), in full from the camera or after a specular chain, else weighted
    against the light sample from the last scatter by the balance heuristic."""
    ems, tex, si, p = scene.emitters, scene.textures, surface.si, state.path
    d = p.direction
    visible = here & ~((p.depth == 0) & scene.settings.hide_emitters)
    emitter = scene.shapes.emitter[surface.shape]
    found = surface.valid & (emitter >= 0)
    le = emitters.eval_surface(ems, tex, jnp.maximum(emitter, 0), surface.ns, d, si.uv)
    em_pdf = emitters.pdf_direction(ems, p.prev_p, jnp.maximum(emitter, 0), si.p, surface.ns, d)
    if ems.environment >= 0:
        escaped = ~si.valid
        env = jnp.full_like(emitter, ems.environment)
        le = jnp.where(escaped, emitters.eval_environment(ems, tex, d), le)
        em_pdf = jnp.where(escaped, emitters.pdf_direction(ems, p.prev_p, env, si.p, surface.ng, d), em_pdf)
        found = found | escaped
    lit = visible & found
    direct = (p.depth == 0) | p.prev_bsdf_delta
    nee = update_weights(state.p_over_f_nee, ratios(em_pdf, jnp.ones_like(em_pdf)), lit & ~direct)
    weight = jnp.where(direct, mis_weight(state.p_over_f), mis_weight(state.p_over_f, nee))
    return p.radiance + jnp.where(lit, weight * le, 0.0), nee


def _light_mis(scene, keys, state, x, n, ds, em_weight, medium, active):
    """(p_over_f_nee, p_over_f_uni, emitted) of light samples ``ds`` from x (geometric normal n;
    zero in a medium) for lanes ``active``, as Mitsuba's ``sample_emitter``: both matrices start
    from the path's, the NEE one takes the light's pdf, and both the ratios of each medium segment
    and null surface on the way (``emitted`` carries a homogeneous segment's transmittance in the
    path's channel); a surface that blocks it zeroes them."""
    md, shapes = scene.media, scene.shapes
    start = update_weights(state.p_over_f, ratios(ds.pdf, jnp.ones_like(ds.pdf)), active)
    emitted = jnp.where(active, em_weight * ds.pdf, 0.0)
    o, d, t_max = geometry.spawn_ray_to(x, n, ds.d, ds.dist)

    def cond(carry):
        return jnp.any(carry[5]) & (carry[6] < MAX_CROSSINGS)

    def body(carry):
        o, remaining, medium, nee, uni, live, crossings, survive = carry
        hit = geometry.closest_hit(scene.geometry, o, d, jnp.where(live, remaining, 0.0))
        crossed = live & (hit.prim >= 0)
        segment = jnp.where(crossed, hit.t, remaining)
        attenuated = live & (medium >= 0)
        combined = media.majorant(md, medium)
        spectral = media.pick(md, medium, md.spectral)
        hetero = jnp.zeros_like(live)
        if MediumKind.HETEROGENEOUS in md.kinds_present:
            hetero = attenuated & (media.pick(md, medium, md.kind) == MediumKind.HETEROGENEOUS)
            nee, uni = _ratio_tracking(md, keys, state.step, crossings, o, d, medium, segment, nee, uni, hetero)
        constant = attenuated & ~hetero
        own = media.channel_value(combined, state.channel)
        survive = jnp.where(constant, survive * media.transmittance(own[None], segment)[0], survive)
        tr = _flight_ratio(combined, segment, jnp.zeros_like(live))
        nee = update_weights(nee, tr, constant & spectral)
        uni = update_weights(uni, tr, constant & spectral)
        si = geometry.surface_interaction(scene.geometry, o, d, hit)
        shape, ng, ns = path.oriented_normals(scene, si)
        cos_d = vm.dot(ns, d)
        mat = jnp.where(cos_d < 0, shapes.bsdf_front[shape], shapes.bsdf_back[shape])
        through = bsdfs.null_transmission(scene.materials, scene.textures, mat,
                                          tx.texture_point(si.uv, si.attributes), cos_d)
        nee = update_weights(nee, ratios(jnp.ones_like(cos_d), through), crossed)
        uni = update_weights(uni, ratios(jnp.ones_like(cos_d), through), crossed)
        passes = jnp.any(through > 0, axis=0)
        medium = jnp.where(crossed & passes, volpath.beyond(shapes, shape, ng, d, medium), medium)
        o = jnp.where(crossed, geometry.spawn_ray(si.p, ng, d), o)
        remaining = jnp.where(crossed, remaining - hit.t, remaining)
        going = crossed & passes & jnp.any(mis_weight(uni) != 0, axis=0) & (survive > 0)
        return o, remaining, medium, nee, uni, going, crossings + 1, survive

    carry = (o, jnp.where(active, t_max, 0.0), medium, start, state.p_over_f, active, jnp.int32(0),
             jnp.ones_like(ds.pdf))
    _, _, _, nee, uni, live, _, survive = jax.lax.while_loop(cond, body, carry)
    # Still crossing after MAX_CROSSINGS: taken as blocked.
    return nee, uni, jnp.where(live, 0.0, survive) * emitted


def _ratio_tracking(md, keys, step, crossing, o, d, medium, segment, nee, uni, active):
    """(p_over_f_nee, p_over_f_uni) after Mitsuba's ratio tracking along rays o, d (3, N) through
    a heterogeneous medium over [0, segment): tentative collisions at the majorant's rate (the
    same in every channel, so each one's free-flight ratio is the majorant), each a null
    collision of both strategies (the unidirectional one also takes its chance). One loop over
    the pool: phases as volpath's (``tracer.lanes.drain_in_place``) compiled 4 s longer here for
    a tenth off the render at 64 spp."""
    combined = media.majorant(md, medium)
    rate = combined[0]
    mint, maxt = media.extent(md, medium, o, d)
    end = jnp.minimum(maxt, segment)
    spectral = media.pick(md, medium, md.spectral)

    def cond(carry):
        return jnp.any(carry[3]) & (carry[4] < MAX_COLLISIONS)

    def body(carry):
        t, nee, uni, live, k = carry
        dim = (np.uint32(SHADOW_DIMS) + (step.astype(jnp.uint32) * np.uint32(MAX_CROSSINGS) + jnp.uint32(crossing))
               * np.uint32(MAX_COLLISIONS) + jnp.uint32(k))
        t = t - jnp.log1p(-rng.draw(keys, dim, 1)[0]) / jnp.where(rate > 0, rate, 1.0)
        inside = live & (t < end)
        sigma_t, _ = media.coefficients(md, medium, o + t * d)
        sigma_n = combined - sigma_t
        chance = media.channel_mean(_safe_div(sigma_n, combined))
        nee = update_weights(nee, ratios(combined, sigma_n), inside)  # (spectral or not: c / sigma_n)
        uni = update_weights(uni, ratios(combined * chance, sigma_n), inside & spectral)
        uni = update_weights(uni, ratios(sigma_n, sigma_n), inside & ~spectral)
        return t, nee, uni, inside & jnp.any(mis_weight(uni) != 0, axis=0), k + 1

    live = active & (mint < end) & (rate > 0)
    _, nee, uni, live, _ = jax.lax.while_loop(cond, body, (mint, nee, uni, live, jnp.int32(0)))
    zero = jnp.zeros_like(nee)
    return jnp.where(live, zero, nee), jnp.where(live, zero, uni)  # still tracking after MAX_COLLISIONS: blocked
