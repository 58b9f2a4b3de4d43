"""Beckmann and GGX microfacet distributions, as Mitsuba 3's ``MicrofacetDistribution``.

Walter et al. 2007, "Microfacet Models for Refraction through Rough Surfaces"; visible-normal
sampling after Heitz & d'Eon 2014 with Jakob's numerically inverted Beckmann routine (2014).
Every ray carries its own roughness and distribution; ``Distribution.present`` (static) names
the distributions that can occur so that an absent one is never traced.
"""
import dataclasses
from collections.abc import Iterable

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import erf

from tracer import elementary, sampling
from tracer import vecmath as vm
from tracer.constants import INV_SQRT_PI, PI
from tracer.kinds import Microfacet
from tracer.pytree import pytree_dataclass, static

__all__ = ["Distribution", "Terms", "make", "scale_alpha", "eval_d", "smith_g1",
           "terms", "sample", "pdf"]

_EPSILON = np.float32(2.0 ** -24)


@pytree_dataclass
class Distribution:
    """Per-ray microfacet distributions (N,)."""

    alpha_u: jnp.ndarray   # roughness along the tangent, clamped to >= 1e-4 as Mitsuba does
    alpha_v: jnp.ndarray   # roughness along the bitangent
    ggx: jnp.ndarray | bool      # bool: GGX, else Beckmann
    visible: jnp.ndarray | bool  # bool: sample the visible normals, else all normals (D cos)
    # The distributions that may occur in the batch.
    present: tuple[int, ...] = static(default=(Microfacet.BECKMANN, Microfacet.GGX))
    all_normals: bool = static(default=True)  # whether ``visible`` may be False


@pytree_dataclass
class Terms:
    """The microfacet factors of one (wi, wo) pair, shared by the rough BSDFs' eval and pdf."""

    m: jnp.ndarray      # (3, N) half vector, in the upper hemisphere
    d: jnp.ndarray      # (N,) D(m)
    g1_i: jnp.ndarray   # (N,) G1(wi, m)
    g1_o: jnp.ndarray   # (N,) G1(wo, m)


def make(alpha_u: jnp.ndarray, alpha_v: jnp.ndarray, ggx: jnp.ndarray | bool, visible: jnp.ndarray | bool,
         present: Iterable[int] = (Microfacet.BECKMANN, Microfacet.GGX), all_normals: bool = True) -> Distribution:
    """A ``Distribution`` with Mitsuba's clamping of alpha to 1e-4."""
    return Distribution(jnp.maximum(alpha_u, 1e-4), jnp.maximum(alpha_v, 1e-4), ggx, visible,
                        tuple(present), bool(all_normals))


def scale_alpha(distr: Distribution, scale: jnp.ndarray) -> Distribution:
    """The distribution with both roughnesses scaled by ``scale`` (N,) (not clamped again)."""
    return dataclasses.replace(distr, alpha_u=distr.alpha_u * scale, alpha_v=distr.alpha_v * scale)


def _by_type(distr, beckmann, ggx):
    """Evaluate only the distributions present (thunks returning arrays or tuples of arrays);
    select per ray when both are."""
    if distr.present == (Microfacet.BECKMANN,):
        return beckmann()
    if distr.present == (Microfacet.GGX,):
        return ggx()
    b, g_ = beckmann(), ggx()
    if isinstance(b, tuple):
        return tuple(jnp.where(distr.ggx, y, x) for x, y in zip(b, g_))
    return jnp.where(distr.ggx, g_, b)


def eval_d(distr: Distribution, m: jnp.ndarray) -> jnp.ndarray:
    """Normal distribution D(m) (N,) of microfacet normals m (3, N)."""
    au, av = distr.alpha_u, distr.alpha_v
    cos2 = m[2] * m[2]
    xy = (m[0] / au) ** 2 + (m[1] / av) ** 2
    result = _by_type(
        distr,
        lambda: jnp.exp(-xy / cos2) / (PI * au * av * cos2 * cos2),
        lambda: 1.0 / (PI * au * av * (xy + cos2) ** 2))
    # As Mitsuba: drop vanishing values that would cause trouble downstream.
    return jnp.where(result * m[2] > 1e-20, result, 0.0)


def smith_g1(distr: Distribution, v: jnp.ndarray, m: jnp.ndarray) -> jnp.ndarray:
    """Smith's shadowing-masking term for one direction v (3, N) and normal m (3, N)."""
    xy_alpha_2 = (distr.alpha_u * v[0]) ** 2 + (distr.alpha_v * v[1]) ** 2
    tan_theta_alpha_2 = xy_alpha_2 / (v[2] * v[2])

    def beckmann():
        a = lax.rsqrt(tan_theta_alpha_2)
        # Mitsuba's rational fit of the Beckmann G1 (< 0.35% relative error).
        fit = (3.535 * a + 2.181 * a * a) / (1.0 + 2.276 * a + 2.577 * a * a)
        return jnp.where(a >= 1.6, 1.0, fit)

    result = _by_type(distr, beckmann, lambda: 2.0 / (1.0 + jnp.sqrt(1.0 + tan_theta_alpha_2)))
    result = jnp.where(xy_alpha_2 == 0, 1.0, result)
    # A facet cannot be seen from its back side.
    return jnp.where(vm.dot(v, m) * v[2] <= 0, 0.0, result)


def terms(distr: Distribution, wi: jnp.ndarray, wo: jnp.ndarray, m: jnp.ndarray) -> Terms:
    return Terms(m, eval_d(distr, m), smith_g1(distr, wi, m), smith_g1(distr, wo, m))


def pdf(distr: Distribution, wi: jnp.ndarray, m: jnp.ndarray) -> jnp.ndarray:
    """Density (N,) of ``sample`` choosing normal m, per unit solid angle of m."""
    d = eval_d(distr, m)
    visible = smith_g1(distr, wi, m) * jnp.abs(vm.dot(wi, m)) / wi[2]
    if not distr.all_normals:
        return d * visible
    return d * jnp.where(distr.visible, visible, m[2])


def sample(distr: Distribution, wi: jnp.ndarray, u: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Sample a microfacet normal for directions wi (3, N) from uniforms u (2, N).

    Returns (m (3, N), pdf (N,)); wi must lie in the upper hemisphere.
    """
    m, density = _sample_visible(distr, wi, u)
    if distr.all_normals:
        m_all, density_all = _sample_all(distr, u)
        m = vm.select(distr.visible, m, m_all)
        density = jnp.where(distr.visible, density, density_all)
    return m, density


def _sample_all(distr: Distribution, u: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Sample D(m) cos(theta_m) directly (Walter et al. 2007)."""
    au, av = distr.alpha_u, distr.alpha_v
    phi = (2.0 * PI) * u[1]
    s, c = elementary.sincos(phi)
    # Mitsuba's anisotropic azimuth atan(av/au tan(phi)), in the quadrant of phi; au == av gives phi.
    ratio = av / au
    inv_len = lax.rsqrt(c * c + (ratio * s) ** 2)
    cos_phi, sin_phi = c * inv_len, ratio * s * inv_len
    alpha_2 = 1.0 / ((cos_phi / au) ** 2 + (sin_phi / av) ** 2)

    def beckmann():
        cos_theta = lax.rsqrt(1.0 - alpha_2 * jnp.log(1.0 - u[0]))
        cos3 = jnp.maximum(cos_theta ** 3, 1e-20)
        return cos_theta, (1.0 - u[0]) / (PI * au * av * cos3)

    def ggx():
        tan_2 = alpha_2 * u[0] / (1.0 - u[0])
        cos_theta = lax.rsqrt(1.0 + tan_2)
        temp = 1.0 + tan_2 / alpha_2
        cos3 = jnp.maximum(cos_theta ** 3, 1e-20)
        return cos_theta, 1.0 / (PI * au * av * cos3 * temp * temp)

    cos_theta, density = _by_type(distr, beckmann, ggx)
    sin_theta = vm.safe_sqrt(1.0 - cos_theta * cos_theta)
    return jnp.stack([cos_phi * sin_theta, sin_phi * sin_theta, cos_theta]), density


def _sample_visible(distr: Distribution, wi: jnp.ndarray, u: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Heitz & d'Eon 2014: stretch, sample the slopes of the alpha = 1 case, unstretch."""
    au, av = distr.alpha_u, distr.alpha_v
    wi_p = vm.normalize(jnp.stack([au * wi[0], av * wi[1], wi[2]]))
    sin2 = wi_p[0] * wi_p[0] + wi_p[1] * wi_p[1]
    inv_sin = lax.rsqrt(sin2)
    degenerate = jnp.abs(sin2) <= 4.0 * _EPSILON
    cos_phi = jnp.where(degenerate, 1.0, jnp.clip(wi_p[0] * inv_sin, -1.0, 1.0))
    sin_phi = jnp.where(degenerate, 0.0, jnp.clip(wi_p[1] * inv_sin, -1.0, 1.0))
    sx, sy = _by_type(distr, lambda: _visible_11_beckmann(wi_p[2], u), lambda: _visible_11_ggx(wi_p[2], u))
    sx, sy = (cos_phi * sx - sin_phi * sy) * au, (sin_phi * sx + cos_phi * sy) * av
    m = vm.normalize(jnp.stack([-sx, -sy, jnp.ones_like(sx)]))
    density = eval_d(distr, m) * smith_g1(distr, wi, m) * jnp.abs(vm.dot(wi, m)) / wi[2]
    return m, density


def _visible_11_beckmann(cos_theta_i: jnp.ndarray, u: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Slopes of visible Beckmann normals for alpha = 1, by Newton inversion (Jakob 2014)."""
    tan_theta_i = vm.safe_sqrt(1.0 - cos_theta_i * cos_theta_i) / cos_theta_i
    cot_theta_i = 1.0 / tan_theta_i
    maxval = erf(cot_theta_i)
    u = jnp.clip(u, 1e-6, 1.0 - 1e-6)
    # Initial guess: the analytic solution at grazing incidence, the most nonlinear case.
    x = maxval - (maxval + 1.0) * erf(jnp.sqrt(-jnp.log(u[0])))
    target = u[0] * (1.0 + maxval + INV_SQRT_PI * tan_theta_i * jnp.exp(-cot_theta_i * cot_theta_i))
    for _ in range(3):
        slope = lax.erf_inv(x)
        value = 1.0 + x + INV_SQRT_PI * tan_theta_i * jnp.exp(-slope * slope) - target
        x = x - value / (1.0 - slope * tan_theta_i)
    return lax.erf_inv(x), lax.erf_inv(2.0 * u[1] - 1.0)


def _visible_11_ggx(cos_theta_i: jnp.ndarray, u: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Slopes of visible GGX normals for alpha = 1 (Heitz & d'Eon 2014, Mitsuba's form)."""
    p = sampling.square_to_uniform_disk_concentric(u)
    s = 0.5 * (1.0 + cos_theta_i)
    px = p[0]
    py = vm.safe_sqrt(1.0 - px * px) * (1.0 - s) + p[1] * s
    pz = vm.safe_sqrt(1.0 - px * px - py * py)
    sin_theta_i = vm.safe_sqrt(1.0 - cos_theta_i * cos_theta_i)
    norm = 1.0 / (sin_theta_i * py + cos_theta_i * pz)
    return (cos_theta_i * py - sin_theta_i * pz) * norm, px * norm
