"""Volumetric path tracing with next-event estimation, as Mitsuba 3's ``volpath``.

The same wavefront as ``tracer.integrators.path`` (one event of every lane per iteration, lanes
refilled from the batch's camera rays): each iteration a path in a medium samples a (tentative)
collision at its medium's majorant rate in the colour channel drawn once per path, and meets
either the medium (a null collision in a heterogeneous one: the ray goes on; a real one: a light
sample weighted by the phase function, then a phase sample) or the surface its ray hits first
(emission, a light sample, a BSDF sample, as ``path``). The structure follows Mitsuba's
volpath.cpp line by line: Russian roulette at the start of an iteration from depth >
``rr_depth``; null lobes (``null``, a thin dielectric's transmission) neither count as a bounce
nor as the vertex that emission is weighted against; emission is weighted against the last
scatter by the power heuristic unless the path came straight from the camera or through delta
lobes only; a surface's ``interior``/``exterior`` media take over where a path crosses it.

Light samples see through what passes straight through a surface (``bsdfs.null_transmission``)
and through media: exp(-sigma_t d) over a homogeneous segment (the expectation of the tracked
estimate Mitsuba draws), ratio tracking in a heterogeneous one; any other surface blocks them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from tracer import bsdfs, emitters, media, rng
from tracer.lanes import drain_in_place, phase_floor
from tracer import textures as tx
from tracer import vecmath as vm
from tracer.integrators import path
from tracer.media import MediumKind
from tracer.pytree import pytree_dataclass
from tracer.rng import Dims
from tracer.sampling import power_heuristic
from tracer.shapes import geometry
from tracer.shapes import intersect as isect

if TYPE_CHECKING:
    from tracer.scene import Scene, Shapes

__all__ = ["VolumeState", "while_null", "flight_to_known_hit", "event_uniforms", "Collision", "collision", "Along", "Meeting", "fresh_along", "meet", "start", "step", "beyond", "light_sample", "CHANNEL_DIM", "MAX_CROSSINGS", "SHADOW_DIMS",
           "PHASE_CHOICE_DIMS", "MAX_COLLISIONS"]

# The dimension of a path's colour channel: one number per path, outside the per-bounce blocks.
CHANNEL_DIM = 0xC0FFEE
# Surfaces a light sample passes through at most (null boundaries of media); more block it.
MAX_CROSSINGS = 32
# Tentative collisions a light sample's ratio tracking takes in one medium segment at most.
MAX_COLLISIONS = 4096
# A light sample's ratio tracking drains in phases (tracer.lanes.drain_in_place): a quarter of the lanes
# each phase, down to a few hundred (each phase is another compiled copy of its small body; on GPUs
# and TPUs down to tracer.lanes.ACCELERATOR_MIN_PHASE).
TRACK_SHRINK = 4
TRACK_MIN_PHASE = 256
# Where the random numbers of light samples' ratio tracking start (by step, crossing, collision),
# apart from the per-bounce blocks.
SHADOW_DIMS = 0x80000000
# Where a blendphase's pick of its function at each event draws (by step), apart from both.
PHASE_CHOICE_DIMS = 0x40000000


@pytree_dataclass
class Along:
    """How far a path's ray has got: null collisions go on along the same ray (its origin and
    t_max unchanged), so the closest hit found once is kept until the path leaves the ray (as
    Mitsuba keeps ``si`` across them) instead of intersecting the scene at every collision."""

    t_start: jnp.ndarray  # (N,) the distance along the ray already travelled (0 for a new ray)
    known: jnp.ndarray    # (N,) bool: ``hit`` is the ray's closest hit
    hit: geometry.Hit


def fresh_along(scene: Scene, like: jax.Array) -> Along:
    """New rays (N,) = ``like``'s shape: nothing travelled, no hit known."""
    hit = isect.miss(like)
    if scene.geometry.n_instances:
        hit = dataclasses.replace(hit, instance=jnp.full_like(like, -1, jnp.int32))
    return Along(t_start=jnp.zeros_like(like), known=jnp.zeros_like(like, bool), hit=hit)


@pytree_dataclass
class Meeting:
    """Where an event's ray meets its medium (a tentative collision) or a surface."""

    surface: path.Surface
    hit: geometry.Hit        # the ray's hit: its closest one where ``whole``, else one before the flight
    whole: jnp.ndarray       # (N,) bool: ``hit`` was sought along the whole ray (worth keeping)
    combined: jnp.ndarray    # (3, N) the majorant free flights are sampled with
    mint: jnp.ndarray        # (N,) where the flight started (the medium's box, or the last null collision)
    flight: jnp.ndarray      # (N,) the tentative collision's distance along the ray, inf for none
    collide: jnp.ndarray     # (N,) bool: it comes before any surface
    travelled: jnp.ndarray   # (N,) from mint to the collision or the surface (inf: escaped)


def meet(scene: Scene, p: path.PathState, medium: jax.Array, channel: jax.Array, along: Along, u_free: jax.Array,
         active: jax.Array) -> Meeting:
    """A tentative collision in the medium of lanes ``active`` (free flight from where the ray
    got, with ``u_free``), and the surface their rays hit: the kept hit where it is known, else
    one sought up to the flight in a homogeneous medium (every collision there is real: the ray
    ends) and along the whole ray elsewhere (a heterogeneous medium's null collisions keep it)."""
    md = scene.media
    in_medium = active & (medium >= 0)
    combined = media.majorant(md, medium)
    mint, maxt = media.extent(md, medium, p.origin, p.direction)
    mint = jnp.maximum(mint, along.t_start)
    flight = jnp.where(in_medium, media.free_flight(combined, channel, u_free, mint, maxt), jnp.inf)
    whole = ~in_medium
    if MediumKind.HETEROGENEOUS in md.kinds_present:
        whole = whole | (media.pick(md, medium, md.kind) == MediumKind.HETEROGENEOUS)
    probe = dataclasses.replace(p, active=active, t_max=jnp.where(whole, p.t_max, jnp.minimum(p.t_max, flight)))
    if scene.settings.hide_emitters:  # (camera rays skip emitters: found afresh every time, never kept)
        hit, surface = along.hit, path.find_surfaces(scene, probe)
        whole = jnp.zeros_like(whole)
    else:
        fresh = geometry.closest_hit(scene.geometry, p.origin, p.direction,
                                     jnp.where(active & ~along.known, probe.t_max, 0.0))
        hit = jax.tree.map(lambda a, b: jnp.where(along.known, a, b), along.hit, fresh)
        surface = path.surface_at(scene, probe, p.origin, hit)
    hit_t = surface.si.t
    assert hit_t is not None  # (a closest hit's surface carries its distance)
    collide = in_medium & jnp.isfinite(flight) & ~(surface.si.valid & (hit_t < flight))
    travelled = jnp.where(collide, flight, jnp.where(surface.si.valid, hit_t, jnp.inf)) - mint
    return Meeting(surface=surface, hit=hit, whole=whole, combined=combined, mint=mint, flight=flight,
                   collide=collide, travelled=travelled)


@pytree_dataclass
class VolumeState:
    """A pool of volumetric paths: ``path``'s state (``prev_p``, ``prev_bsdf_pdf``: the last real
    scatter and its direction pdf; ``prev_bsdf_delta``: emission there counts in full, Mitsuba's
    ``count_direct``), and where each path is."""

    path: path.PathState
    medium: jnp.ndarray   # (N,) int32 the medium the ray travels in, -1 for vacuum
    channel: jnp.ndarray  # (N,) int32 the colour channel free flights are sampled with
    step: jnp.ndarray     # (N,) int32 events so far: the block of random numbers the next one draws
    along: Along          # how far the ray got through null collisions, and its hit

    @property
    def active(self) -> jax.Array:
        return self.path.active

    @property
    def radiance(self) -> jax.Array:
        return self.path.radiance


def start(scene: Scene, keys: rng.SampleKeys, origin: jax.Array, direction: jax.Array, t_max: jax.Array,
          active: jax.Array) -> VolumeState:
    """Paths at their camera rays, in the sensor's medium."""
    u = rng.draw(keys, CHANNEL_DIM, 1)[0]
    return VolumeState(path=path.fresh_paths(origin, direction, t_max, active),
                       medium=jnp.full_like(t_max, scene.media.sensor, jnp.int32),
                       channel=jnp.minimum((u * 3.0).astype(jnp.int32), 2), step=jnp.zeros_like(t_max, jnp.int32),
                       along=fresh_along(scene, t_max))


def step(scene: Scene, keys: rng.SampleKeys, state: VolumeState) -> VolumeState:
    """One event of every path: roulette, then a medium collision or a surface (null collisions in
    a heterogeneous medium along a ray whose hit is known first, in a loop of their own)."""
    if MediumKind.HETEROGENEOUS in scene.media.kinds_present and not scene.settings.hide_emitters:
        state = _skip_nulls(scene, keys, state)
    return _event(scene, keys, state)


def _skip_nulls(scene: Scene, keys: rng.SampleKeys, state: VolumeState) -> VolumeState:
    """``state`` after the null collisions its paths meet next, each as ``_event`` makes it (the
    same random numbers, roulette and weights), in a loop that does nothing else: a dense
    heterogeneous medium under a loose majorant takes many null collisions a real one, which
    ``_event`` would each pay for with the whole event (the surface's shading, light samples and
    their ratio tracking, all computed and dropped). Paths whose ray's hit is not yet known (a
    new ray: ``_event`` finds it) and paths whose next event is not a null collision stop."""
    md, settings = scene.media, scene.settings

    def null_collision(s: VolumeState) -> tuple[jax.Array, VolumeState]:
        p = s.path
        u, u_free = event_uniforms(keys, s.step)
        active, throughput = _roulette(settings, p, u)
        combined, mint, flight, collide = flight_to_known_hit(scene, s, active, u_free)
        c = collision(md, s.medium, p, combined, flight, collide, u)
        null, sigma_n, null_chance = c.null, c.sigma_n, c.null_chance
        weight = media.flight_weight(combined, s.channel, flight - mint, collide)
        weight = weight * sigma_n / jnp.where(null_chance > 0, null_chance, 1.0)
        spectral = media.pick(md, s.medium, md.spectral)
        p = dataclasses.replace(p, throughput=jnp.where(spectral, throughput * weight, throughput))
        passed = VolumeState(path=p, medium=s.medium, channel=s.channel, step=s.step + 1,
                             along=dataclasses.replace(s.along, t_start=flight))
        return null, passed

    return while_null(null_collision, state, state.path.active)


def event_uniforms(keys: rng.SampleKeys, step: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(the event's per-bounce numbers (Dims.SPARE, N), its free flight's number (N,)) of event
    ``step`` (N,): what an event and a null collision in its place draw alike."""
    return path.bounce_uniforms(keys, step), rng.draw(keys, Dims.bounce(step, Dims.SPARE), 1)[0]


@pytree_dataclass
class Collision:
    """A tentative collision's point and its medium there (``collision``)."""

    x: jnp.ndarray            # (3, N) the point (the ray's origin where there is none)
    sigma_t: jnp.ndarray      # (3, N) extinction there
    sigma_s: jnp.ndarray      # (3, N) scattering there
    sigma_n: jnp.ndarray      # (3, N) the majorant's null part there
    null_chance: jnp.ndarray  # (N,) the chance it is a null collision
    null: jnp.ndarray         # (N,) bool: it is one (a heterogeneous medium's missing density)


def collision(md: media.Media, medium: jax.Array, p: path.PathState, combined: jax.Array, flight: jax.Array,
              collide: jax.Array, u: jax.Array) -> Collision:
    """The tentative collision at ``flight`` of lanes ``collide`` under the majorant ``combined``,
    null or real as ``u[Dims.BSDF_COMPONENT]`` draws it against the null part's share."""
    x = p.origin + jnp.where(collide, flight, 0.0) * p.direction
    sigma_t, albedo = media.coefficients(md, medium, x)
    sigma_s, sigma_n = sigma_t * albedo, combined - sigma_t
    null_chance = media.channel_mean(sigma_n / jnp.where(combined > 0, combined, 1.0))
    null = collide & (u[Dims.BSDF_COMPONENT] < null_chance)
    return Collision(x=x, sigma_t=sigma_t, sigma_s=sigma_s, sigma_n=sigma_n, null_chance=null_chance, null=null)


S = TypeVar("S")  # a pool's state (VolumeState, volpathmis.MisState)


def while_null(null_collision: Callable[[S], tuple[jax.Array, S]], state: S, lanes: jax.Array) -> S:
    """``state`` after ``null_collision`` (state -> ((N,) bool: the lane's next event is a null
    collision, the state after it)) was applied to each lane as long as its next event is one;
    ``lanes``: any (N,) array of the pool (its shape)."""
    def more(carry):
        going, _ = carry
        return jnp.any(going)

    def body(carry):
        going, s = carry
        null, after = null_collision(s)
        null = going & null
        return null, jax.tree.map(lambda a, b: jnp.where(null, a, b), after, s)

    return jax.lax.while_loop(more, body, (jnp.ones_like(lanes, bool), state))[1]


def _roulette(settings, p: path.PathState, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(active, throughput) after Russian roulette as Mitsuba's volpath (from depth > rr_depth) and
    max_depth, at the start of every event."""
    beta_max = vm.max_component(p.throughput)
    active = p.active & (beta_max > 0)
    q = jnp.minimum(beta_max * p.eta * p.eta, 0.95)
    roulette = p.depth > settings.rr_depth
    active = active & ((u[Dims.ROULETTE] < q) | ~roulette)
    throughput = jnp.where(roulette & active, p.throughput / jnp.where(q > 0, q, 1.0), p.throughput)
    if settings.max_depth >= 0:
        active = active & (p.depth < settings.max_depth)
    return active, throughput


def flight_to_known_hit(scene: Scene, s: Any, active: jax.Array,
                        u_free: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(majorant (3, N), flight start, tentative collision distance, whether it comes before the
    kept hit) of lanes ``active`` in a heterogeneous medium whose ray's hit is known (``s``: a
    state with ``path``, ``medium``, ``channel`` and ``along``), as ``meet`` samples it; other
    lanes fly no further (inf, no collision)."""
    md, p = scene.media, s.path
    tracked = (active & s.along.known & (s.medium >= 0)
               & (media.pick(md, s.medium, md.kind) == MediumKind.HETEROGENEOUS))
    combined = media.majorant(md, s.medium)
    mint, maxt = media.extent(md, s.medium, p.origin, p.direction)
    mint = jnp.maximum(mint, s.along.t_start)
    flight = jnp.where(tracked, media.free_flight(combined, s.channel, u_free, mint, maxt), jnp.inf)
    hit = s.along.hit
    collide = tracked & jnp.isfinite(flight) & ~((hit.prim >= 0) & (hit.t < flight))
    return combined, mint, flight, collide


def _event(scene: Scene, keys: rng.SampleKeys, state: VolumeState) -> VolumeState:
    """One event of every path: roulette, then a medium collision or a surface."""
    settings, md, p = scene.settings, scene.media, state.path
    u, u_free = event_uniforms(keys, state.step)

    active, throughput = _roulette(settings, p, u)

    # A (tentative) collision in the ray's medium, or the surface its ray hits first.
    in_medium = active & (state.medium >= 0)
    met = meet(scene, p, state.medium, state.channel, state.along, u_free, active)
    surface, combined, collide, flight = met.surface, met.combined, met.collide, met.flight
    c = collision(md, state.medium, p, combined, flight, collide, u)
    x, sigma_t, sigma_s, sigma_n, null_chance, null = c.x, c.sigma_t, c.sigma_s, c.sigma_n, c.null_chance, c.null
    real = collide & ~null
    # Weights as Mitsuba's volpath: with spectral extinction, transmittance over the channel's pdf,
    # then sigma_s over the chance of a real collision or sigma_n over that of a null one; else
    # the albedo at a real collision.
    travelled = met.travelled
    spectral = media.pick(md, state.medium, md.spectral)
    real_chance = media.channel_mean(sigma_t / jnp.where(combined > 0, combined, 1.0))
    weight = media.flight_weight(combined, state.channel, travelled, collide)
    weight = weight * jnp.where(real, sigma_s / jnp.where(real_chance > 0, real_chance, 1.0), 1.0)
    weight = weight * jnp.where(null, sigma_n / jnp.where(null_chance > 0, null_chance, 1.0), 1.0)
    plain = jnp.where(real, sigma_s / jnp.where(sigma_t > 0, sigma_t, 1.0), 1.0)
    throughput = jnp.where(in_medium, throughput * jnp.where(spectral, weight, plain), throughput)
    p = dataclasses.replace(p, active=active, throughput=throughput)

    # One light sample an event, from the collision or the surface (one ratio-tracked
    # transmittance, not one for each kind of event, every lane tracked by both).
    here = active & ~collide
    mat, frame = path.material_and_frame(scene, surface)
    light = _event_light(scene, keys, state, p, real, x, surface, mat, here, u)
    medium_state = _collide(scene, keys, state, p, real, x, u, light)
    surface_state = _surface(scene, keys, state, p, surface, mat, frame, here, u, light)
    # A null collision: the ray goes on from there, nothing else changes.
    passed = VolumeState(path=p, medium=state.medium, channel=state.channel, step=state.step + 1,
                         along=Along(t_start=flight, known=met.whole, hit=met.hit))
    out = jax.tree.map(lambda a, b: jnp.where(real, a, b), medium_state, surface_state)
    return jax.tree.map(lambda a, b: jnp.where(null, a, b), passed, out)


@pytree_dataclass
class _Light:
    """An event's light sample (``_event_light``): from its collision or its surface."""

    ds: emitters.DirectionSample
    em_weight: jnp.ndarray  # (3, N)
    nee: jnp.ndarray        # (N,) bool: it counts
    seen: jnp.ndarray       # (3, N) the fraction that arrives (``_light_transmittance``)


def _under_max_depth(settings, p, lanes):
    """Lanes whose event (a real collision, a surface hit) is a vertex under max_depth."""
    return lanes if settings.max_depth < 0 else lanes & (p.depth + 1 < settings.max_depth)


def _event_light(scene, keys, state, p, real, x, surface, mat, here, u):
    """The light sample of each lane's event: from its real collision at x (lanes ``real``, where
    the medium samples emitters), else from its surface hit (lanes ``here`` that hit a surface
    with a non-delta lobe), seen through media and null surfaces (the medium beyond the surface
    in the light's direction)."""
    settings, md = scene.settings, scene.media
    sample_emitters = media.pick(md, state.medium, md.sample_emitters)
    at_surface = _under_max_depth(settings, p, here & surface.valid) & bsdfs.has_nondelta_lobe(scene.materials, mat)
    want = jnp.where(real, _under_max_depth(settings, p, real) & sample_emitters, at_surface)
    from_x = vm.select(real, x, surface.si.p)
    normal = vm.select(real, jnp.zeros_like(x), surface.ng)
    ds, em_weight, nee = light_sample(scene, from_x, want, u)
    medium = jnp.where(real, state.medium, beyond(scene.shapes, surface.shape, surface.ng, ds.d, state.medium))
    seen = _light_transmittance(scene, keys, state.step, from_x, normal, ds, medium, nee)
    return _Light(ds=ds, em_weight=em_weight, nee=nee, seen=seen)


def _collide(scene, keys, state, p, collide, x, u, light):
    """A real collision at x: a light sample weighted by the phase function, then the next
    direction from it."""
    settings, md = scene.settings, scene.media
    depth = p.depth + 1
    alive = _under_max_depth(settings, p, collide)
    wi = -p.direction
    radiance = p.radiance
    sample_emitters = media.pick(md, state.medium, md.sample_emitters)
    ds, em_weight, seen = light.ds, light.em_weight, light.seen
    nee = light.nee & collide
    phase = media.phase_eval(md, state.medium, wi, ds.d, x)
    mis = jnp.where(ds.is_delta, 1.0, power_heuristic(ds.pdf, phase))
    radiance = radiance + jnp.where(nee, p.throughput * phase * em_weight * seen * mis, 0.0)
    # A blendphase's pick of one of its two functions: a number of its own (Mitsuba's sample1).
    choice = (rng.draw(keys, np.uint32(PHASE_CHOICE_DIMS) + state.step.astype(jnp.uint32), 1)[0]
              if md.blends_present else jnp.zeros_like(p.t_max))
    wo, phase_pdf = media.phase_sample(md, state.medium, wi, u[Dims.BSDF_DIRECTION:Dims.BSDF_DIRECTION + 2],
                                       choice, x)
    alive = alive & (phase_pdf > 0)
    chain = ~sample_emitters  # no light sample: emission counts in full
    new = path.PathState(depth=depth, origin=x, direction=wo, t_max=jnp.full_like(p.t_max, jnp.inf),
                         throughput=p.throughput, radiance=radiance, eta=p.eta, active=alive, prev_p=x,
                         prev_bsdf_pdf=phase_pdf, prev_bsdf_delta=chain)
    return VolumeState(path=new, medium=state.medium, channel=state.channel, step=state.step + 1,
                       along=fresh_along(scene, p.t_max))


def _surface(scene, keys, state, p, surface, mat, frame, here, u, light):
    """The surface event of lanes ``here`` (a hit, or an escape; ``mat``, ``frame``: its material
    and shading frame): emission, a light sample through media and null surfaces, a BSDF sample;
    crossing into the shape's other medium."""
    looking = dataclasses.replace(p, active=here)
    radiance = path.add_emission(scene, looking, surface, p.radiance)
    hit = here & surface.valid
    wi = vm.to_local(frame, -p.direction)
    si, at = surface.si, tx.texture_point(surface.si.uv, surface.si.attributes)
    past = lambda d: beyond(scene.shapes, surface.shape, surface.ng, d, state.medium)

    ds, em_weight, seen = light.ds, light.em_weight, light.seen
    nee = light.nee & here
    wo = vm.to_local(frame, ds.d)
    (value, bsdf_pdf), (bs, weight) = bsdfs.eval_and_sample(scene.materials, scene.textures, mat, at, wi, wo,
                                                            u[Dims.BSDF_COMPONENT],
                                                            u[Dims.BSDF_DIRECTION:Dims.BSDF_DIRECTION + 2],
                                                            surface.tangents)
    mis = jnp.where(ds.is_delta, 1.0, power_heuristic(ds.pdf, bsdf_pdf))
    radiance = radiance + jnp.where(nee, p.throughput * value * em_weight * seen * mis, 0.0)

    direction = vm.to_world(frame, bs.wo)
    passing = hit & bs.null  # a null lobe (null, a thindielectric's transmission): not a bounce
    real = hit & ~passing
    throughput = jnp.where(hit, p.throughput * weight, 0.0)
    new = path.PathState(
        depth=p.depth + real.astype(jnp.int32), origin=geometry.spawn_ray(si.p, surface.ng, direction),
        direction=direction, t_max=jnp.full_like(p.t_max, jnp.inf), throughput=throughput, radiance=radiance,
        eta=p.eta * jnp.where(hit, bs.eta, 1.0), active=hit & jnp.any(weight != 0, axis=0),
        prev_p=jnp.where(real, si.p, p.prev_p), prev_bsdf_pdf=jnp.where(real, bs.pdf, p.prev_bsdf_pdf),
        prev_bsdf_delta=jnp.where(real, bs.is_delta, p.prev_bsdf_delta))
    medium = jnp.where(hit, past(direction), state.medium)
    return VolumeState(path=new, medium=medium, channel=state.channel, step=state.step + 1,
                       along=fresh_along(scene, p.t_max))


def beyond(shapes: Shapes, shape: jax.Array, ng: jax.Array, d: jax.Array, medium: jax.Array) -> jax.Array:
    """The medium a ray along d is in after crossing the surface of ``shape`` (geometric normal
    ng): the shape's exterior or interior where it bounds media (Mitsuba's ``target_medium``),
    else ``medium``, unchanged."""
    transition = (shapes.interior[shape] >= 0) | (shapes.exterior[shape] >= 0)
    crossed_to = jnp.where(vm.dot(d, ng) > 0, shapes.exterior[shape], shapes.interior[shape])
    return jnp.where(transition, crossed_to, medium)


def light_sample(scene: Scene, x: jax.Array, wanted: jax.Array,
                 u: jax.Array) -> tuple[emitters.DirectionSample, jax.Array, jax.Array]:
    """(DirectionSample, emitter weight (3, N), (N,) where it counts) of a light sample from points
    x for lanes ``wanted`` (what arrives: ``_light_transmittance``)."""
    ds, em_weight = emitters.sample_direction(scene.emitters, scene.textures, x, u[Dims.EMITTER_SELECT],
                                              u[Dims.EMITTER_POINT:Dims.EMITTER_POINT + 2],
                                              reuse=rng.REUSES_EMITTER_SELECT[scene.settings.sampler])
    return ds, em_weight, wanted & (ds.pdf > 0)


def _light_transmittance(scene, keys, step, x, n, ds, medium, active):
    """(3, N) the fraction of a light sample ``ds`` from x (geometric normal n; zero in a medium)
    that arrives: over each medium segment on the way exp(-sigma_t d) (homogeneous) or a ratio-
    tracking estimate of it (heterogeneous, as Mitsuba's), through null surfaces (and into the
    media they bound); 0 where another surface blocks it."""
    md, shapes = scene.media, scene.shapes
    o, d, t_max = geometry.spawn_ray_to(x, n, ds.d, ds.dist)

    def cond(carry):
        _, _, _, _, live, crossings = carry
        return jnp.any(live) & (crossings < MAX_CROSSINGS)

    def body(carry):
        o, remaining, medium, seen, live, crossings = carry
        hit = geometry.closest_hit(scene.geometry, o, d, jnp.where(live, remaining, 0.0))
        crossed = live & (hit.prim >= 0)
        segment = jnp.where(crossed, hit.t, remaining)
        attenuated = live & (medium >= 0)
        hetero = jnp.zeros_like(live)
        if MediumKind.HETEROGENEOUS in md.kinds_present:
            hetero = attenuated & (media.pick(md, medium, md.kind) == MediumKind.HETEROGENEOUS)
            seen = _ratio_tracking(md, keys, step, crossings, o, d, medium, segment, seen, hetero)
        constant = attenuated & ~hetero
        seen = jnp.where(constant, seen * media.transmittance(media.majorant(md, medium), segment), seen)
        si = geometry.surface_interaction(scene.geometry, o, d, hit)
        shape, ng, ns = path.oriented_normals(scene, si)
        cos_d = vm.dot(ns, d)
        mat = jnp.where(cos_d < 0, shapes.bsdf_front[shape], shapes.bsdf_back[shape])
        through = bsdfs.null_transmission(scene.materials, scene.textures, mat,
                                          tx.texture_point(si.uv, si.attributes), cos_d)
        passes = jnp.any(through > 0, axis=0)
        seen = jnp.where(crossed, seen * through, seen)
        medium = jnp.where(crossed & passes, beyond(shapes, shape, ng, d, medium), medium)
        o = jnp.where(crossed, geometry.spawn_ray(si.p, ng, d), o)
        remaining = jnp.where(crossed, remaining - hit.t, remaining)
        return o, remaining, medium, seen, crossed & passes & jnp.any(seen != 0, axis=0), crossings + 1

    seen = jnp.ones_like(o)
    carry = (o, jnp.where(active, t_max, 0.0), medium, seen, active, jnp.int32(0))
    _, _, _, seen, live, _ = jax.lax.while_loop(cond, body, carry)
    return jnp.where(live, 0.0, seen)  # still crossing after MAX_CROSSINGS: taken as blocked


def _ratio_tracking(md, keys, step, crossing, o, d, medium, segment, seen, active):
    """``seen`` times an unbiased estimate of a heterogeneous medium's transmittance along rays
    o, d (3, N) over [0, segment): tentative collisions at the majorant's rate inside the medium's
    box, each keeping the fraction sigma_n / majorant that is not there (ratio tracking). The
    loop drains in phases over the lanes still tracking (``tracer.lanes.drain_in_place``): a lane's
    numbers are its own (its key, this step, crossing and collision), so the bits do not depend
    on where it sits."""
    combined = media.majorant(md, medium)
    rate = combined[0]  # (a heterogeneous medium's majorant is the same in every channel)
    mint, maxt = media.extent(md, medium, o, d)
    end = jnp.minimum(maxt, segment)
    n = rate.shape[0]
    base = (np.uint32(SHADOW_DIMS) + (step.astype(jnp.uint32) * np.uint32(MAX_CROSSINGS) + jnp.uint32(crossing))
            * np.uint32(MAX_COLLISIONS))  # this crossing's first dimension

    def body(c, lane):
        t, seen, live, k = c
        lane_keys, o, d, medium, end, base = lane
        u = rng.draw(lane_keys, base + k.astype(jnp.uint32), 1)[0]
        combined = media.majorant(md, medium)
        rate = combined[0]
        t = t - jnp.log1p(-u) / jnp.where(rate > 0, rate, 1.0)
        inside = live & (t < end)
        sigma_t, _ = media.coefficients(md, medium, o + t * d)
        seen = jnp.where(inside, seen * (combined - sigma_t) / jnp.where(rate > 0, rate, 1.0), seen)
        return t, seen, inside & jnp.any(seen != 0, axis=0), k + 1

    live = active & (mint < end) & (rate > 0)
    carry = (mint, seen, live, jnp.zeros(n, jnp.int32))
    lane = (keys, o, d, medium, end, jnp.broadcast_to(base, (n,)))
    tracking = lambda c: c[2] & (c[3] < MAX_COLLISIONS)  # live, and under the cap
    _, seen, live, _ = drain_in_place(carry, lane, tracking, body, shrink=TRACK_SHRINK,
                                      min_phase=phase_floor(TRACK_MIN_PHASE))
    return jnp.where(live, 0.0, seen)  # still tracking after MAX_COLLISIONS: taken as blocked
