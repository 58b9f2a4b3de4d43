"""Unidirectional path tracing with next-event estimation and MIS, as Mitsuba 3's ``path``.

A pool of paths advances one bounce per iteration of a ``lax.while_loop`` (a wavefront):
every ray intersects, gathers its surface data and material, samples a light and the BSDF.
A lane whose path ends takes the next camera ray of the batch (path regeneration), so the
pool stays full until the batch runs out; then the last paths drain in shrinking phases.
The structure follows Mitsuba's path integrator line by line (its PRB twin in
``mitsuba/python/ad/integrators``): emission is weighted by the power heuristic against the
previous BSDF sample, the light sample against the BSDF's pdf, and Russian roulette starts at
``rr_depth`` with survival probability min(max(throughput) * eta^2, 0.95).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tracer import bsdfs, emitters, lanes, rng
from tracer import textures as tx
from tracer import vecmath as vm
from tracer.kinds import Perturbation
from tracer.pytree import pytree_dataclass
from tracer.rng import Dims
from tracer.runtime import cpu
from tracer.sampling import power_heuristic
from tracer.shapes import geometry

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["PathState", "Surface", "Vertex", "locate", "shade", "trace_paths", "pool_size", "DEFAULT_POOL", "drain_phases",
           "DRAIN_PHASES", "fresh_paths", "bounce_uniforms", "find_surfaces", "surface_at", "add_emission",
           "material_and_frame", "add_next_event", "oriented_normals"]

# Each stage's results pass an optimization barrier: XLA's CPU fusion otherwise inlines a stage
# into every consumer of its outputs and recomputes it there (measured 6x slower on a scene with
# every BSDF kind). The barriers make each stage run once per bounce.
_stage = jax.lax.optimization_barrier
# Lanes in flight per CPU device, sized so that their arrays stay in the caches. With a core
# per device (tracer.runtime.cpu): 4k lanes (Cornell box, 2 devices on 2 cores: 1.64 Msamples/s at 4k,
# 1.56 at 8k; Embree called from XLA, November 28: orbit.xml at 240x240 1.57 s a frame at 4k,
# 1.82 at 8k; mesh.xml 1.86 against 2.0), 8k when Warp answers the rays through a host callback,
# whose calls cost more (medians of 6 renders in one process, November 25, Embree then behind the
# callback too: mesh.xml at 256x256 0.88 s a frame at 8k and 4k, 1.00 at 32k; orbit.xml 0.47 s
# at 8k, 0.50 at 4k, 0.58 at 32k, and 1.95 against 2.23 s at 320x240). A
# device over several cores: 65k (Cornell box, 1 device on 2 cores: a bounce costs 220 ns a lane
# at 65k lanes, 370 ns at 262k).
DEFAULT_POOL = _POOL = 65536
_POOL_PER_CORE = 4096
_POOL_PER_CORE_HOST = 8192
# The last paths of a batch drain over P lanes, then, in programs that trace enough samples to
# repay the compile, over P / 2 and P / 4. Each pool shape compiles its own bounce (XLA shares
# kernels between loop bodies of one shape only). Measured on orbit.xml (160x120, 64 spp, 2 cores;
# medians of 8 renders in one process): the P / 2 phase cost 3.0 s of compiling and saved 4.5% of
# a frame, the P / 4 one 4.6 s and 5%: about 20 ms a million samples each, so they pay from some
# 150M and 230M samples. (mesh.xml compiled in 6.8-7.7 s with two phases, 10.5 s with three.)
# Those were 32k-lane pools. A phase is made only over at least _MIN_PHASE lanes, so the pools of
# one device a core (4k, 8k) drain in one phase whatever the job: the rule applies to devices
# over several cores (65k) and, fixed at three, to GPUs and TPUs.
PHASE_SAMPLES = (1 << 27, 1 << 28)  # the samples from which a second and a third phase are made
DRAIN_PHASES = 2  # what a program made without knowing how much it will trace gets
# On GPUs and TPUs a batch's paths all start at once (the pool is the batch) and drain from the
# first bounce: three phases, as measured there (README, "Figures on a GPU"); not tuned by size.
_ACCELERATOR_DRAIN_PHASES = 3
_SHRINK = 2
_MIN_PHASE = 8192  # smaller batches are not worth another compiled body (a second or more each)


@pytree_dataclass
class PathState:
    """What evolves along a pool of N paths (the scene is what stays fixed)."""

    depth: jnp.ndarray            # (N,) int32 bounce index of each path
    origin: jnp.ndarray           # (3, N) next ray's origin
    direction: jnp.ndarray        # (3, N) next ray's unit direction
    t_max: jnp.ndarray            # (N,) next ray's extent
    throughput: jnp.ndarray       # (3, N) path weight so far
    radiance: jnp.ndarray         # (3, N) radiance gathered so far
    eta: jnp.ndarray              # (N,) product of relative IORs crossed (for roulette)
    active: jnp.ndarray           # (N,) bool: the path continues
    prev_p: jnp.ndarray           # (3, N) previous vertex, for the light pdf of emission hits
    prev_bsdf_pdf: jnp.ndarray    # (N,) pdf of the BSDF sample that made this ray
    prev_bsdf_delta: jnp.ndarray  # (N,) bool: that sample came from a delta lobe


def _skip_emitters(scene, origin, direction, t_max, hit, camera_ray):
    """Mitsuba's ``hide_emitters``: camera rays pass through area emitters."""
    def on_emitter(h):
        shape = geometry.primitive_shape(scene.geometry, h.prim)
        return camera_ray & (h.prim >= 0) & (scene.shapes.emitter[jnp.maximum(shape, 0)] >= 0)

    def cond(carry):
        _, _, h, n = carry
        return jnp.any(on_emitter(h)) & (n < 16)

    def body(carry):
        o, tm, h, n = carry
        skip = on_emitter(h)
        si = geometry.surface_interaction(scene.geometry, o, direction, h)
        o2 = geometry.spawn_ray(si.p, si.ng, direction)
        tm2 = tm - h.t
        # Only the lanes that skip ask (t_max 0 for the rest: backends pass over them cheaply).
        h2 = geometry.closest_hit(scene.geometry, o2, direction, jnp.where(skip, tm2, 0.0))
        o = vm.select(skip, o2, o)
        tm = jnp.where(skip, tm2, tm)
        h = jax.tree.map(lambda a, b: jnp.where(skip, a, b), h2, h)
        return o, tm, h, n + 1

    o, _, hit, _ = jax.lax.while_loop(cond, body, (origin, t_max, hit, jnp.int32(0)))
    return o, hit


@pytree_dataclass
class Surface:
    """Where a bounce's rays landed, oriented as the shape's ``flip_normals`` says."""

    si: geometry.SurfaceInteraction
    valid: jnp.ndarray   # (N,) bool: a live path hit something
    shape: jnp.ndarray   # (N,) int32 shape index (0 for misses: mask with ``valid``)
    ng: jnp.ndarray      # (3, N) geometric normal
    ns: jnp.ndarray      # (3, N) shading normal
    front: jnp.ndarray   # (N,) bool: the ray arrives on the side ns points to
    frame: vm.Frame      # (s, t, ns), each (3, N): the shading frame, s along dp/du
    tangents: bsdfs.perturb.Tangents | None  # what bump maps read (None: the scene has none)


@pytree_dataclass
class Vertex:
    """Where a bounce's rays landed and what the bounce draws there: what depends on the geometry
    and the randomness only, not on the scene's differentiable values (``tracer.scene_parameters``)."""

    uniforms: jnp.ndarray  # (Dims.SPARE, N) the bounce's random numbers
    surface: Surface
    more: jnp.ndarray      # (N,) bool: the path may take one more segment (a hit, under max_depth)
    mat: jnp.ndarray       # (N,) int32 the material on the side the ray arrives from
    frame: vm.Frame        # its shading frame
    wi: jnp.ndarray        # (3, N) the direction back along the ray, in that frame


def _bounce(scene, keys, state):
    """One step of every path: intersect, add emission, sample a light and the BSDF, roulette.
    ``locate`` then ``shade`` (path replay's halves) in the order this step always made them."""
    uniforms = bounce_uniforms(keys, state.depth)
    surface = find_surfaces(scene, state)
    radiance = add_emission(scene, state, surface, state.radiance)
    vertex = _vertex(scene, state, uniforms, surface)
    return _shaded(scene, state, vertex, radiance)


def locate(scene: Scene, keys: rng.SampleKeys, state: PathState) -> Vertex:
    """The first half of a bounce: intersect, and draw the bounce's random numbers."""
    return _vertex(scene, state, bounce_uniforms(keys, state.depth), find_surfaces(scene, state))


def _vertex(scene, state, uniforms, surface):
    more = surface.valid
    if scene.settings.max_depth >= 0:
        more = more & (state.depth + 1 < scene.settings.max_depth)
    # Materialized: each (3, N) consumer fused with it looked the material up again for each row.
    mat, frame = _stage(material_and_frame(scene, surface))
    return Vertex(uniforms=uniforms, surface=surface, more=more, mat=mat, frame=frame,
                  wi=vm.to_local(frame, -state.direction))


def shade(scene: Scene, state: PathState, vertex: Vertex, radiance: jax.Array) -> PathState:
    """The second half: add emission and a light sample to ``radiance``, sample the BSDF for the
    next ray, roulette. Path replay differentiates this half in the scene's values: here the BSDF
    is evaluated and sampled in two calls (the same bits as one), so that the sample, which the
    replay does not differentiate, stays out of its adjoint (one call's window loop would carry
    zero cotangents into the sample's code, and zero times a NaN partial there is NaN)."""
    return _shaded(scene, state, vertex, add_emission(scene, state, vertex.surface, radiance), together=False)


def _shaded(scene, state, v, radiance, together=True):
    """The light sample, the BSDF sample and roulette, after the emission. ``together``: the BSDF
    is evaluated for the light sample and sampled for the next ray in one call (one sort by kind
    a bounce, not two)."""
    light = _sample_light(scene, v.surface, v.mat, v.more, v.uniforms)
    wo = _stage(vm.to_local(v.frame, light.ds.d))
    si = v.surface.si
    at = tx.texture_point(si.uv, si.attributes)
    u1, u2 = v.uniforms[Dims.BSDF_COMPONENT], v.uniforms[Dims.BSDF_DIRECTION:Dims.BSDF_DIRECTION + 2]
    if together:
        evaluated, sampled = _stage(bsdfs.eval_and_sample(scene.materials, scene.textures, v.mat, at, v.wi, wo, u1, u2,
                                                          v.surface.tangents))
    else:
        evaluated = _stage(bsdfs.eval_pdf(scene.materials, scene.textures, v.mat, at, v.wi, wo, v.surface.tangents))
        sampled = _stage(bsdfs.sample(scene.materials, scene.textures, v.mat, at, v.wi, u1, u2, v.surface.tangents))
    radiance = _add_light(scene, state, v.surface, light, evaluated, radiance)
    return _continue_path(scene, state, v.surface, v.frame, v.more, v.uniforms, radiance, sampled)


def bounce_uniforms(keys: rng.SampleKeys, depth: jax.Array) -> jax.Array:
    """(Dims.SPARE, N) random numbers of bounce ``depth`` (Dims' per-bounce block), drawn once:
    consumers fused apart would each draw them again."""
    return _stage(rng.draw_bounce(keys, depth))


def find_surfaces(scene: Scene, state: PathState, skip_hidden_emitters: bool = True) -> Surface:
    """The surfaces the paths' next rays hit (finished paths ask for nothing: t_max = 0, which
    every backend skips cheaply). With ``hide_emitters``, camera rays pass through area emitters
    (Mitsuba's path integrator) unless ``skip_hidden_emitters`` is off (its direct integrator)."""
    d = state.direction
    hit = geometry.closest_hit(scene.geometry, state.origin, d, jnp.where(state.active, state.t_max, 0.0))
    origin = state.origin
    if scene.settings.hide_emitters and skip_hidden_emitters:
        origin, hit = _skip_emitters(scene, state.origin, d, state.t_max, hit, state.active & (state.depth == 0))
    return surface_at(scene, state, origin, hit)


def surface_at(scene: Scene, state: PathState, origin: jax.Array, hit: geometry.Hit) -> Surface:
    """The ``Surface`` of closest hits ``hit`` of rays from ``origin`` along the paths' directions."""
    d = state.direction
    si = _stage(geometry.surface_interaction(scene.geometry, origin, d, hit))
    shape, ng, ns = oriented_normals(scene, si)
    # Mitsuba's shading frame: its tangent along dp/du (what orients anisotropic BSDFs).
    frame = vm.tangent_frame(ns, si.dp_du)
    tangents = None
    if scene.materials.perturbation is not None and Perturbation.BUMPMAP in scene.materials.perturbation.kinds_present:
        tangents = bsdfs.perturb.tangents(frame, si.dp_du, si.dp_dv, ng)
    # Mitsuba's BSDFs tell the sides apart in the shading frame.
    frame, tangents, ng, ns, front = _stage((frame, tangents, ng, ns, vm.dot(ns, d) < 0))
    return Surface(si=si, valid=state.active & si.valid, shape=shape, ng=ng, ns=ns, front=front,
                   frame=frame, tangents=tangents)


def oriented_normals(scene: Scene, si: geometry.SurfaceInteraction) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(shape (0 for misses), ng, ns) of hits, the normals turned as the shape's ``flip_normals`` says."""
    shape = jnp.maximum(si.shape, 0)
    flip = lanes.take(scene.shapes.flip_normals, shape)
    return shape, vm.select(flip, -si.ng, si.ng), vm.select(flip, -si.ns, si.ns)


def add_emission(scene: Scene, state: PathState, surface: Surface, radiance: jax.Array,
                 light_share: float | None = None) -> jax.Array:
    """Emission seen by this bounce's rays (area lights, or the environment for escaped rays),
    weighted by the power heuristic against the BSDF sample that made the ray. ``light_share``
    scales the light-sampling pdf in that heuristic (the direct integrator's sample counts)."""
    ems, tex, si, d = scene.emitters, scene.textures, surface.si, state.direction
    visible = state.active & ~((state.depth == 0) & scene.settings.hide_emitters)
    emitter = _stage(lanes.take(scene.shapes.emitter, surface.shape))
    hit_emitter = surface.valid & (emitter >= 0)
    # Mitsuba orients emission and its pdf by the shading normal.
    le, em_pdf = _stage((emitters.eval_surface(ems, tex, jnp.maximum(emitter, 0), surface.ns, d, si.uv),
                         emitters.pdf_direction(ems, state.prev_p, jnp.maximum(emitter, 0), si.p, surface.ns, d)))
    # The weight and the mask once a lane, not once each of radiance's rows.
    mis, seen = _stage((_emission_mis(state, em_pdf, light_share), hit_emitter & visible))
    radiance = radiance + jnp.where(seen, state.throughput * le * mis, 0.0)
    if ems.environment >= 0:
        escaped = state.active & ~si.valid
        env = jnp.full_like(emitter, ems.environment)
        le, em_pdf = _stage((emitters.eval_environment(ems, tex, d),
                             emitters.pdf_direction(ems, state.prev_p, env, si.p, surface.ng, d)))
        mis = _emission_mis(state, em_pdf, light_share)
        radiance = radiance + jnp.where(escaped & visible, state.throughput * le * mis, 0.0)
    return radiance


def _emission_mis(state, em_pdf, light_share):
    em_pdf = em_pdf if light_share is None else em_pdf * light_share
    return jnp.where(state.prev_bsdf_delta, 1.0, power_heuristic(state.prev_bsdf_pdf, em_pdf))


def material_and_frame(scene: Scene, surface: Surface) -> tuple[jax.Array, vm.Frame]:
    """The material on the side the ray arrives from, and its shading frame; reflective
    two-sided BSDFs mirror the frame on the back (its normal negated, as Mitsuba's ``twosided``
    negates the local z)."""
    shapes, shape = scene.shapes, surface.shape
    mat = jnp.where(surface.front, lanes.take(shapes.bsdf_front, shape), lanes.take(shapes.bsdf_back, shape))
    mirror = ~surface.front & lanes.take(shapes.flip_back, shape)
    s, t, n = surface.frame
    return mat, vm.Frame(s, t, vm.select(mirror, -n, n))


class _LightSample(NamedTuple):
    ds: emitters.DirectionSample  # the sampled direction towards a light
    weight: jax.Array             # (3, N) its radiance over its pdf
    wanted: jax.Array             # (N,) bool: the vertex takes a light sample (a non-delta lobe, pdf > 0)


def _sample_light(scene, surface, mat, more, uniforms):
    """The vertex's light sample (``_LightSample``), drawn whether or not it is ``wanted``."""
    ems, tex = scene.emitters, scene.textures
    ds, weight = _stage(emitters.sample_direction(ems, tex, surface.si.p, uniforms[Dims.EMITTER_SELECT],
                                                  uniforms[Dims.EMITTER_POINT:Dims.EMITTER_POINT + 2],
                                                  reuse=rng.REUSES_EMITTER_SELECT[scene.settings.sampler]))
    return _LightSample(ds, weight, more & bsdfs.has_nondelta_lobe(scene.materials, mat) & (ds.pdf > 0))


def _add_light(scene, state, surface, light, evaluated, radiance, shares=None):
    """``radiance`` plus the light sample's contribution, unless blocked; ``evaluated``: the
    BSDF's (value, pdf) towards it."""
    ds, em_weight, do_nee = light
    bsdf_value, bsdf_pdf = evaluated
    if shares is None:
        mis_em = jnp.where(ds.is_delta, 1.0, power_heuristic(ds.pdf, bsdf_pdf))
    else:  # as Mitsuba's direct.cpp, a delta light's sample is not averaged over the count
        light_share, bsdf_share, weight = shares
        mis_em = jnp.where(ds.is_delta, 1.0, power_heuristic(ds.pdf * light_share, bsdf_pdf * bsdf_share) * weight)
    # Materialized: the shadow ray's test and the sum below each read all its rows.
    contribution = _stage(state.throughput * bsdf_value * em_weight * mis_em)
    # A sample that adds exactly nothing lit or not (a light below the surface, a BSDF that
    # reflects none of it towards the light) asks no shadow ray: 32% of orbit.xml's, 38% of
    # mesh.xml's, 15% of the Cornell box's. NaN compares unequal to 0: it still asks, and adds
    # what it did before.
    asks = do_nee & jnp.any(contribution != 0.0, axis=0)
    shadow_o, shadow_d, shadow_t = geometry.spawn_ray_to(surface.si.p, surface.ng, ds.d, ds.dist)
    blocked = geometry.occluded(scene.geometry, shadow_o, shadow_d, jnp.where(asks, shadow_t, 0.0))
    return radiance + jnp.where(asks & ~blocked, contribution, 0.0)


def add_next_event(scene: Scene, state: PathState, surface: Surface, mat: jax.Array, frame: vm.Frame, wi: jax.Array,
                   more: jax.Array, uniforms: jax.Array, radiance: jax.Array,
                   shares: tuple[float, float, float] | None = None) -> jax.Array:
    """Next-event estimation: a light sample, unless blocked, weighted by the power heuristic
    against the BSDF's pdf (delta lights and delta-only materials: no MIS, no sample).
    ``shares`` = (light share, BSDF share, weight): the direct integrator's sample counts, which
    scale the two pdfs in the heuristic and the weight of a non-delta light sample."""
    si = surface.si
    light = _sample_light(scene, surface, mat, more, uniforms)
    wo = _stage(vm.to_local(frame, light.ds.d))
    evaluated = _stage(bsdfs.eval_pdf(scene.materials, scene.textures, mat, tx.texture_point(si.uv, si.attributes),
                                      wi, wo, surface.tangents))
    return _add_light(scene, state, surface, light, evaluated, radiance, shares)


def _continue_path(scene, state, surface, frame, more, uniforms, radiance, sampled):
    """The next ray, from ``sampled`` (the BSDF's sample and weight); Russian roulette as Mitsuba:
    from rr_depth on, a path survives with probability min(max(throughput) eta^2, 0.95)."""
    si = surface.si
    bs, bsdf_weight = sampled
    wo_world = vm.to_world(frame, bs.wo)
    next_origin = geometry.spawn_ray(si.p, surface.ng, wo_world)
    throughput = jnp.where(more, state.throughput * bsdf_weight, 0.0)
    eta = state.eta * jnp.where(more, bs.eta, 1.0)

    beta_max = vm.max_component(throughput)
    more = more & (beta_max != 0)
    rr_prob = jnp.minimum(beta_max * eta * eta, 0.95)
    rr_active = state.depth >= scene.settings.rr_depth
    throughput = jnp.where(rr_active & more, throughput / jnp.where(rr_prob > 0, rr_prob, 1.0), throughput)
    more = more & (~rr_active | (uniforms[Dims.ROULETTE] < rr_prob))

    return PathState(
        depth=state.depth + 1, origin=next_origin, direction=wo_world,
        t_max=jnp.full_like(state.t_max, jnp.inf), throughput=throughput, radiance=radiance, eta=eta,
        active=more, prev_p=si.p, prev_bsdf_pdf=bs.pdf, prev_bsdf_delta=bs.is_delta,
    )


def fresh_paths(origin: jax.Array, direction: jax.Array, t_max: jax.Array, active: jax.Array) -> PathState:
    """Paths at their camera rays; *_like: inside shard_map the carry varies over the ray axis."""
    ones = jnp.ones_like(t_max, jnp.float32)
    return PathState(
        depth=jnp.zeros_like(t_max, jnp.int32), origin=origin, direction=direction, t_max=t_max,
        throughput=jnp.ones_like(origin), radiance=jnp.zeros_like(origin),
        eta=ones, active=active, prev_p=origin,
        prev_bsdf_pdf=ones, prev_bsdf_delta=jnp.ones_like(t_max, bool),
    )


def pool_size(scene: Scene) -> int:
    """Lanes in flight per device for ``scene`` in this process (host side: the pool is a static
    argument of the compiled program, decided when it is made, never while tracing); on GPUs and
    TPUs the whole batch (their width wants every path in flight). Any pool gives the same bits."""
    cores = cpu.cores_per_device()
    if cores is None:
        return np.iinfo(np.int32).max
    if cores > 1:
        return _POOL
    return _POOL_PER_CORE_HOST if scene.geometry.accel == "warp" else _POOL_PER_CORE


def drain_phases(samples: int) -> int:
    """Drain phases (the static ``phases`` of ``trace_paths``) for a program of this process that
    will trace about ``samples`` samples in all (a job's frames x spp x pixels): on CPUs those
    whose saving repays their compile (``PHASE_SAMPLES``), on GPUs and TPUs three. Any count gives
    the same bits."""
    if cpu.cores_per_device() is None:
        return _ACCELERATOR_DRAIN_PHASES
    return 1 + sum(samples >= s for s in PHASE_SAMPLES)


def _store(out, index, radiance):
    """Rows ``out`` (three (N + 1,) arrays) with [index] = radiance (3, P): one scatter a row, as
    a (3, N) scatter made XLA transpose its updates to (P, 3), recomputing the whole radiance
    update in that layout to do so."""
    radiance = _stage(radiance)
    return tuple(row.at[index].set(radiance[k]) for k, row in enumerate(out))


def _start(scene, keys, origin, direction, t_max, active):
    return fresh_paths(origin, direction, t_max, active)


CameraRays = Callable[[jax.Array], tuple[rng.SampleKeys, jax.Array, jax.Array, jax.Array]]


def trace_paths(scene: Scene, camera: CameraRays, active: jax.Array, pool: int = DEFAULT_POOL,
                phases: int = DRAIN_PHASES, start: Callable[..., Any] = _start,
                step: Callable[..., Any] = _bounce) -> jax.Array:
    """Radiance (3, N) arriving along the camera rays of N samples, those where ``active`` (N,).

    ``camera(j)`` (j (P,) int32 sample indices, each in [0, N)) gives those samples' keys
    (``rng.SampleKeys``, which address each path's randomness) and camera rays (origin,
    direction (3, P), t_max (P,)). Lanes make their camera rays as they take them, in the loop,
    never for the whole batch at once: that pass over N samples' arrays cost some 10% of a frame
    on CPUs, and a batch's rays no longer sit in memory. ``pool`` (static): lanes in flight
    (``pool_size``); ``phases`` (static): how many shrinking parts of the pool the last paths
    drain over (``drain_phases``). A path's arithmetic depends only on its own key and ray, never
    on its lane or on which other paths share the pool, so any pool size or schedule gives the
    same bits.
    """
    n = active.shape[0]
    if scene.settings.max_depth == 0:
        return jnp.zeros((3, n), jnp.float32)
    pool = min(n, pool)
    # The live samples in batch order; lanes pull them from here as their paths end.
    queue, count = lanes.stable_partition(active)
    none = jnp.int32(n)  # the sample index of an empty lane: a spare output column

    def pull(position, want):
        """Lanes that ``want`` take the samples at queue ``position``; others get none."""
        take = want & (position < count)
        index = jnp.where(take, queue[jnp.minimum(position, n - 1)], none)
        lane_keys, origin, direction, t_max = camera(jnp.minimum(index, n - 1))
        return index, lane_keys, start(scene, lane_keys, origin, direction, t_max, take)

    # The lanes start empty, their paths ended: the loop's first bounce has them take their first
    # samples. So every camera ray is made by the one loop body's code (XLA's fusion, and with it
    # its FMA contraction, differs between bodies), whatever the pool: the bits stay the pool's
    # and the schedule's own.
    lane = jnp.arange(pool, dtype=jnp.int32)
    shapes = jax.eval_shape(camera, lane)
    empty_keys = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes[0])
    zeros = jnp.zeros((3, pool), jnp.float32)
    index = jnp.full((pool,), n, jnp.int32)
    state = start(scene, empty_keys, zeros, zeros, jnp.zeros(pool, jnp.float32), lane < 0)
    out = tuple(jnp.zeros(n + 1, jnp.float32) for _ in range(3))

    # The one loop body every bounce runs in, regenerating and draining alike: XLA contracts a
    # multiply and an add into an FMA where its fusion puts them together, and fusion differs
    # between loop bodies; one body makes a path's bits independent of the pool and the schedule.
    def advance(lanes_, shared):
        """A bounce of every lane; lanes whose path ended store its radiance and take the next
        sample of the queue (none once it is empty)."""
        (state, lane_keys, index), (head, out) = lanes_, shared
        state = step(scene, lane_keys, state)
        done = ~state.active
        out = _store(out, jnp.where(done, index, none), state.radiance)
        position = head + lanes.prefix_count(done) - 1
        new_index, new_keys, new = pull(position, done)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), new, state)
        head = jnp.minimum(head + jnp.sum(done, dtype=jnp.int32), count)
        lane_keys = jax.tree.map(lambda a, b: jnp.where(done, a, b), new_keys, lane_keys)
        return (state, lane_keys, jnp.where(done, new_index, index)), (head, out)

    # Lanes refill while the queue lasts, then the last paths drain in phases over shrinking
    # parts of the pool; refilling and the first phase are one loop (one compiled body less).
    _, (_, out) = lanes.drain_in_phases((state, empty_keys, index), lambda c: c[0].active, advance,
                                        shared=(jnp.int32(0), out), busy=lambda shared: shared[0] < count,
                                        shrink=_SHRINK, min_phase=_MIN_PHASE, max_phases=phases)
    return jnp.stack(out)[:, :n]
