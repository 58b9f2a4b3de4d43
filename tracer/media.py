"""Participating media as Mitsuba 3's ``homogeneous`` medium, with its phase functions
(``isotropic``, ``hg``): the table the scene carries, free-flight sampling, transmittance, and
the phase functions' evaluation and sampling.

A medium fills the inside or outside of shapes (their ``interior``/``exterior``) or surrounds the
camera (the sensor's ``medium``); paths are traced through them by ``tracer.integrators.volpath``.
Media are addressed by their row in ``Media``; -1 is vacuum. As in Mitsuba's RGB variants, a path
samples its free-flight distances with the extinction of one colour channel, drawn once per path,
and weights the three channels by transmittance over that channel's pdf (Mitsuba's
``has_spectral_extinction``, on by default; off: weighted by the albedo, as Mitsuba does).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tracer import elementary, lanes
from tracer import vecmath as vm
from tracer.constants import INV_FOUR_PI, TWO_PI
from tracer.pytree import pytree_dataclass, static

__all__ = ["Phase", "Media", "no_media", "pick", "channel_value", "free_flight", "transmittance", "phase_eval",
           "phase_sample"]


class Phase:
    """Mitsuba's phase function plugins."""

    ISOTROPIC, HG = range(2)
    NAMES = ("isotropic", "hg")


@pytree_dataclass
class Media:
    """M media, components first."""

    sigma_t: jnp.ndarray          # (3, M) extinction (Mitsuba's sigma_t times scale), per unit length
    albedo: jnp.ndarray           # (3, M) single-scattering albedo
    g: jnp.ndarray                # (M,) Henyey-Greenstein asymmetry (0 for isotropic)
    phase: jnp.ndarray            # (M,) int32 Phase kind
    spectral: jnp.ndarray         # (M,) bool: Mitsuba's has_spectral_extinction
    sample_emitters: jnp.ndarray  # (M,) bool: next-event estimation from points in the medium
    sensor: jnp.ndarray           # () int32: the medium around the camera, -1 for none
    count: int = static(default=0)
    phases_present: tuple[int, ...] = static(default=())


def no_media() -> Media:
    """The table of a scene without media."""
    zeros = jnp.zeros((3, 0), jnp.float32)
    return Media(sigma_t=zeros, albedo=zeros, g=jnp.zeros(0, jnp.float32), phase=jnp.zeros(0, jnp.int32),
                 spectral=jnp.zeros(0, bool), sample_emitters=jnp.zeros(0, bool), sensor=jnp.int32(-1))


def pick(media: Media, medium: jax.Array, field: jax.Array) -> jax.Array:
    """Each lane's column of a (..., M) ``field`` for its ``medium`` (N,), vacuum reading row 0."""
    return lanes.take(field, jnp.clip(medium, 0, max(media.count - 1, 0)))


def channel_value(rgb: jax.Array, channel: jax.Array) -> jax.Array:
    """(N,) the ``channel`` (N,) component of (3, N) values (Mitsuba's ``index_spectrum``)."""
    return jnp.where(channel == 0, rgb[0], jnp.where(channel == 1, rgb[1], rgb[2]))


def free_flight(sigma_t: jax.Array, channel: jax.Array, u: jax.Array) -> jax.Array:
    """(N,) distance to the next collision, sampled with the extinction of ``channel`` (inf where
    that is 0), as Mitsuba's ``Medium::sample_interaction``."""
    m = channel_value(sigma_t, channel)
    return jnp.where(m > 0, -jnp.log1p(-u) / jnp.where(m > 0, m, 1.0), jnp.inf)


def transmittance(sigma_t: jax.Array, distance: jax.Array) -> jax.Array:
    """(3, N) exp(-sigma_t distance), 1 where nothing attenuates (no 0 * inf)."""
    return jnp.where(sigma_t > 0, jnp.exp(-sigma_t * jnp.where(sigma_t > 0, distance, 0.0)), 1.0)


def _hg(g: jax.Array, cos_theta: jax.Array) -> jax.Array:
    temp = 1.0 + g * g + 2.0 * g * cos_theta
    return INV_FOUR_PI * (1.0 - g * g) / (temp * jnp.sqrt(temp))


def phase_eval(media: Media, medium: jax.Array, wi: jax.Array, wo: jax.Array) -> jax.Array:
    """(N,) the phase function's value, which is also its pdf, for wi (towards where the path came
    from, Mitsuba's ``mi.wi``) and wo (3, N)."""
    value = jnp.full(wi.shape[1:], np.float32(INV_FOUR_PI))
    if Phase.HG in media.phases_present:
        hg = _hg(pick(media, medium, media.g), vm.dot(wo, wi))
        value = jnp.where(pick(media, medium, media.phase) == Phase.HG, hg, value)
    return value


def phase_sample(media: Media, medium: jax.Array, wi: jax.Array, u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(wo (3, N), pdf (N,)) sampled from the phase function with u (2, N); the weight is 1 (both
    functions are sampled exactly), as Mitsuba's ``isotropic`` and ``hg``."""
    cos_theta = 1.0 - 2.0 * u[0]  # isotropic: the sphere uniformly (hg's fallback at g = 0 too)
    if Phase.HG in media.phases_present:
        g = pick(media, medium, media.g)
        is_hg = (pick(media, medium, media.phase) == Phase.HG) & (jnp.abs(g) >= np.finfo(np.float32).eps)
        safe_g = jnp.where(is_hg, g, 0.5)
        sqr_term = (1.0 - safe_g * safe_g) / (1.0 - safe_g + 2.0 * safe_g * u[0])
        hg_cos = (1.0 + safe_g * safe_g - sqr_term * sqr_term) / (2.0 * safe_g)
        cos_theta = jnp.where(is_hg, hg_cos, cos_theta)
    sin_theta = vm.safe_sqrt(1.0 - cos_theta * cos_theta)
    sin_phi, cos_phi = elementary.sincos(TWO_PI * u[1])
    # Mitsuba samples in the frame of wi, against it: cos_theta measures the turn from the ray.
    s, t = vm.coordinate_system(wi)
    wo = vm.to_world(vm.Frame(s, t, wi), jnp.stack([sin_theta * cos_phi, sin_theta * sin_phi, -cos_theta]))
    return wo, phase_eval(media, medium, wi, wo)
