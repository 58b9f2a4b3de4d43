"""Participating media as Mitsuba 3's ``homogeneous`` and ``heterogeneous`` media, with their
phase functions (``isotropic``, ``hg``, ``rayleigh``, a ``blendphase`` of two of them): the table
the scene carries, free-flight sampling against a majorant, the media's coefficients at points,
transmittance, and the phase functions.

A medium fills the inside or outside of shapes (their ``interior``/``exterior``) or surrounds the
camera (the sensor's ``medium``); paths are traced through them by ``tracer.integrators.volpath``.
Media are addressed by their row in ``Media``; -1 is vacuum. As in Mitsuba's RGB variants, a path
samples its free-flight distances with the extinction of one colour channel, drawn once per path,
and weights the three channels by transmittance over that channel's pdf (Mitsuba's
``has_spectral_extinction``, on by default; off: weighted by the albedo, as Mitsuba does).

A homogeneous medium fills all space with its constant coefficients, which are their own
majorant. A heterogeneous one lives in the world box of its ``sigma_t`` volume (as Mitsuba's, the
box of the transformed unit cube); its majorant is ``scale`` times the largest value of that
volume, and collisions with what is missing below it are null (delta tracking).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tracer import elementary, lanes
from tracer import vecmath as vm
from tracer import volumes as vol
from tracer.constants import INV_FOUR_PI, INV_PI, TWO_PI
from tracer.pytree import pytree_dataclass, static
from tracer.table_rows import on_device

__all__ = ["Phase", "MediumKind", "Media", "no_media", "pick", "channel_value", "channel_mean", "majorant", "extent", "free_flight",
           "coefficients", "transmittance", "phase_eval", "phase_sample"]


class Phase:
    """Mitsuba's phase function plugins."""

    ISOTROPIC, HG, RAYLEIGH = range(3)
    NAMES = ("isotropic", "hg", "rayleigh")


class MediumKind:
    HOMOGENEOUS, HETEROGENEOUS = range(2)
    NAMES = ("homogeneous", "heterogeneous")


@pytree_dataclass
class Media:
    """M media, components first."""

    sigma_t: jnp.ndarray          # (3, M) extinction per unit length (Mitsuba's sigma_t times scale),
                                  # or what multiplies the medium's sigma_t volume
    albedo: jnp.ndarray           # (3, M) single-scattering albedo, or what multiplies its albedo volume
    g: jnp.ndarray                # (M,) Henyey-Greenstein asymmetry (0 for isotropic)
    phase: jnp.ndarray            # (M,) int32 Phase kind
    # A blendphase's second phase function (Mitsuba's phase_1; the first is phase and g) and the
    # chance of it, a constant or a grid (blend_volume >= 0) clipped to [0, 1]; 0 for no blend.
    g_b: jnp.ndarray              # (M,)
    phase_b: jnp.ndarray          # (M,) int32
    blend: jnp.ndarray            # (M,)
    blend_volume: jnp.ndarray     # (M,) int32, -1: the constant
    spectral: jnp.ndarray         # (M,) bool: Mitsuba's has_spectral_extinction
    sample_emitters: jnp.ndarray  # (M,) bool: next-event estimation from points in the medium
    sensor: jnp.ndarray           # () int32: the medium around the camera, -1 for none
    kind: jnp.ndarray             # (M,) int32 MediumKind
    sigma_t_volume: jnp.ndarray   # (M,) int32 the grid sigma_t is read from (tracer.volumes), -1: constant
    albedo_volume: jnp.ndarray    # (M,) int32 the grid the albedo is read from, -1: constant
    majorant: jnp.ndarray         # (M,) a heterogeneous medium's majorant (scale times its sigma_t's largest value)
    lo: jnp.ndarray               # (3, M) a heterogeneous medium's world box
    hi: jnp.ndarray               # (3, M)
    volumes: vol.Volumes
    count: int = static(default=0)
    phases_present: tuple[int, ...] = static(default=())  # of both phase columns
    blends_present: bool = static(default=False)
    kinds_present: tuple[int, ...] = static(default=())


def no_media() -> Media:
    """The table of a scene without media."""
    zeros = on_device(np.zeros((3, 0), np.float32))
    none = on_device(np.zeros(0, np.int32))
    no_floats, no_flags = on_device(np.zeros(0, np.float32)), on_device(np.zeros(0, bool))
    return Media(sigma_t=zeros, albedo=zeros, g=no_floats, phase=none, g_b=no_floats,
                 phase_b=none, blend=no_floats, blend_volume=none, spectral=no_flags,
                 sample_emitters=no_flags, sensor=on_device(-1, np.int32), kind=none, sigma_t_volume=none,
                 albedo_volume=none, majorant=no_floats, lo=zeros, hi=zeros,
                 volumes=vol.no_volumes())


def pick(media: Media, medium: jax.Array, field: jax.Array) -> jax.Array:
    """Each lane's column of a (..., M) ``field`` for its ``medium`` (N,), vacuum reading row 0."""
    return lanes.take(field, jnp.clip(medium, 0, max(media.count - 1, 0)))


def channel_value(rgb: jax.Array, channel: jax.Array) -> jax.Array:
    """(N,) the ``channel`` (N,) component of (3, N) values (Mitsuba's ``index_spectrum``)."""
    return jnp.where(channel == 0, rgb[0], jnp.where(channel == 1, rgb[1], rgb[2]))


def channel_mean(rgb: jax.Array) -> jax.Array:
    """(N,) the mean of (3, ...) values over their channels, added in one order: XLA's reduction
    of a short axis rounds by the shape of the rest (a pool's phases have several), and a lane's
    bits must not depend on the lanes beside it."""
    return (rgb[0] + rgb[1] + rgb[2]) / 3.0


def _heterogeneous(media: Media, medium: jax.Array) -> jax.Array:
    if MediumKind.HETEROGENEOUS not in media.kinds_present:
        return jnp.zeros(medium.shape, bool)
    return pick(media, medium, media.kind) == MediumKind.HETEROGENEOUS


def majorant(media: Media, medium: jax.Array) -> jax.Array:
    """(3, N) the extinction free flights are sampled with (Mitsuba's ``combined_extinction``): a
    homogeneous medium's own, a heterogeneous one's majorant in every channel."""
    constant = pick(media, medium, media.sigma_t)
    if MediumKind.HETEROGENEOUS not in media.kinds_present:
        return constant
    return jnp.where(_heterogeneous(media, medium), pick(media, medium, media.majorant), constant)


def extent(media: Media, medium: jax.Array, o: jax.Array, d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """((N,), (N,)) the stretch [mint, maxt] of rays o, d (3, N) inside their medium: everywhere
    for a homogeneous one, its world box for a heterogeneous one (mint > maxt: missed), as
    Mitsuba's ``intersect_aabb``."""
    zero, inf = jnp.zeros_like(o[0]), jnp.full_like(o[0], jnp.inf)
    if MediumKind.HETEROGENEOUS not in media.kinds_present:
        return zero, inf
    lo, hi = pick(media, medium, media.lo), pick(media, medium, media.hi)
    inv = 1.0 / jnp.where(d != 0, d, np.float32(1e-30))
    t0, t1 = (lo - o) * inv, (hi - o) * inv
    near = jnp.maximum(jnp.max(jnp.minimum(t0, t1), axis=0), 0.0)
    far = jnp.min(jnp.maximum(t0, t1), axis=0)
    hetero = _heterogeneous(media, medium)
    return jnp.where(hetero, near, zero), jnp.where(hetero, far, inf)


def free_flight(combined: jax.Array, channel: jax.Array, u: jax.Array, mint: jax.Array | float = 0.0,
                maxt: jax.Array | float = np.inf) -> jax.Array:
    """(N,) distance to the next (tentative) collision, sampled with the ``combined`` extinction
    (3, N) of ``channel`` from ``mint`` on; inf where that is 0 or the sample lies past ``maxt``,
    as Mitsuba's ``Medium::sample_interaction``."""
    m = channel_value(combined, channel)
    t = mint + -jnp.log1p(-u) / jnp.where(m > 0, m, 1.0)
    return jnp.where((m > 0) & (t <= maxt), t, jnp.inf)


def coefficients(media: Media, medium: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """((3, N), (3, N)) the extinction and albedo of each lane's medium at points x (3, N)."""
    sigma_t, albedo = pick(media, medium, media.sigma_t), pick(media, medium, media.albedo)
    if media.volumes.count:
        for field, rows in (("sigma_t", media.sigma_t_volume), ("albedo", media.albedo_volume)):
            volume = pick(media, medium, rows)
            value = vol.eval_rgb(media.volumes, volume, x)
            if field == "sigma_t":
                sigma_t = jnp.where(volume >= 0, sigma_t * value, sigma_t)
            else:
                albedo = jnp.where(volume >= 0, albedo * value, albedo)
    return sigma_t, albedo


def flight_weight(combined: jax.Array, channel: jax.Array, distance: jax.Array, collided: jax.Array) -> jax.Array:
    """(3, N) transmittance over the sampled channel's pdf of a free flight of ``distance`` that
    ``collided`` or passed: Mitsuba's tr / tr_pdf, as exp(-(sigma - sigma_c) d) (over sigma_c
    for a collision), which neither underflows to 0 / 0 nor makes 0 * inf."""
    own = channel_value(combined, channel)
    ratio = jnp.where(combined == own, 1.0, jnp.exp(-(combined - own) * jnp.where(combined == own, 0.0, distance)))
    return jnp.where(collided, ratio / jnp.where(own > 0, own, 1.0), ratio)


def transmittance(sigma_t: jax.Array, distance: jax.Array) -> jax.Array:
    """(3, N) exp(-sigma_t distance), 1 where nothing attenuates (no 0 * inf)."""
    return jnp.where(sigma_t > 0, jnp.exp(-sigma_t * jnp.where(sigma_t > 0, distance, 0.0)), 1.0)


def _hg(g: jax.Array, cos_theta: jax.Array) -> jax.Array:
    temp = 1.0 + g * g + 2.0 * g * cos_theta
    return INV_FOUR_PI * (1.0 - g * g) / (temp * jnp.sqrt(temp))


def _rayleigh(cos_theta: jax.Array) -> jax.Array:
    return (3.0 / 16.0) * INV_PI * (1.0 + cos_theta * cos_theta)


def _leaf_eval(media: Media, kind: jax.Array, g: jax.Array, cos_theta: jax.Array) -> jax.Array:
    """(N,) the value (and pdf) of phase functions ``kind`` (N,) with asymmetry ``g`` at cos_theta = wo . wi."""
    value = jnp.full(cos_theta.shape, np.float32(INV_FOUR_PI))
    if Phase.HG in media.phases_present:
        value = jnp.where(kind == Phase.HG, _hg(g, cos_theta), value)
    if Phase.RAYLEIGH in media.phases_present:
        value = jnp.where(kind == Phase.RAYLEIGH, _rayleigh(cos_theta), value)
    return value


def _blend_weight(media: Media, medium: jax.Array, x: jax.Array) -> jax.Array:
    """(N,) a blendphase's chance of its second phase function at points x (3, N), clipped to [0, 1]
    (Mitsuba's eval_weight)."""
    weight = pick(media, medium, media.blend)
    if media.volumes.count:
        volume = pick(media, medium, media.blend_volume)
        weight = jnp.where(volume >= 0, vol.eval_rgb(media.volumes, volume, x)[0], weight)
    return jnp.clip(weight, 0.0, 1.0)


def phase_eval(media: Media, medium: jax.Array, wi: jax.Array, wo: jax.Array, x: jax.Array) -> jax.Array:
    """(N,) the phase function's value, which is also its pdf, for wi (towards where the path came
    from, Mitsuba's ``mi.wi``) and wo (3, N), at points x (3, N) (where a blend's weight is read)."""
    cos_theta = vm.dot(wo, wi)
    value = _leaf_eval(media, pick(media, medium, media.phase), pick(media, medium, media.g), cos_theta)
    if not media.blends_present:
        return value
    second = _leaf_eval(media, pick(media, medium, media.phase_b), pick(media, medium, media.g_b), cos_theta)
    weight = _blend_weight(media, medium, x)
    return value + (second - value) * weight  # (Dr.Jit's lerp)


def phase_sample(media: Media, medium: jax.Array, wi: jax.Array, u: jax.Array, choice: jax.Array,
                 x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(wo (3, N), pdf (N,)) sampled from the phase function with u (2, N) at points x (3, N);
    ``choice`` (N,), a blend's pick of its second function (below its weight) or its first. The
    weight is 1: each function is sampled exactly, as Mitsuba's ``isotropic``, ``hg`` and
    ``rayleigh`` are (the last two to Mitsuba's directions; isotropic by another map of u), and
    a blend's pdf is the mixture of both (its weight, Mitsuba's (w eval_1 + (1 - w) pdf_0) / pdf,
    is 1 but for rounding)."""
    kind, g = pick(media, medium, media.phase), pick(media, medium, media.g)
    if media.blends_present:
        second = choice <= _blend_weight(media, medium, x)
        kind = jnp.where(second, pick(media, medium, media.phase_b), kind)
        g = jnp.where(second, pick(media, medium, media.g_b), g)
    cos_theta = 1.0 - 2.0 * u[0]  # isotropic: the sphere uniformly (hg's fallback at g = 0 too)
    if Phase.HG in media.phases_present:
        is_hg = (kind == Phase.HG) & (jnp.abs(g) >= np.finfo(np.float32).eps)
        safe_g = jnp.where(is_hg, g, 0.5)
        sqr_term = (1.0 - safe_g * safe_g) / (1.0 - safe_g + 2.0 * safe_g * u[0])
        hg_cos = (1.0 + safe_g * safe_g - sqr_term * sqr_term) / (2.0 * safe_g)
        cos_theta = jnp.where(is_hg, hg_cos, cos_theta)
    if Phase.RAYLEIGH in media.phases_present:
        # Mitsuba's inversion of the cubic CDF; it turns its cosine towards wi (not against it).
        z = 2.0 * (2.0 * u[0] - 1.0)
        root = jnp.sqrt(z * z + 1.0)
        cos_theta = jnp.where(kind == Phase.RAYLEIGH, -(jnp.cbrt(z + root) + jnp.cbrt(z - root)), cos_theta)
    sin_theta = vm.safe_sqrt(1.0 - cos_theta * cos_theta)
    sin_phi, cos_phi = elementary.sincos(TWO_PI * u[1])
    # Mitsuba samples in the frame of wi, against it: cos_theta measures the turn from the ray.
    s, t = vm.coordinate_system(wi)
    wo = vm.to_world(vm.Frame(s, t, wi), jnp.stack([sin_theta * cos_phi, sin_theta * sin_phi, -cos_theta]))
    return wo, phase_eval(media, medium, wi, wo, x)
