"""What Mitsuba 3's ``principled`` and ``principledthin`` BSDFs share (its ``principledhelpers.h``):
their per-ray parameters, Schlick's Fresnel approximation and the tinted Fresnel blends, the
roughness mapping, the clearcoat's GTR1 distribution and separable GGX shadowing, and the diffuse
and sheen terms.

Burley, "Physically Based Shading at Disney" (SIGGRAPH 2012 course) and "Extending the Disney
BRDF to a BSDF with Integrated Subsurface Scattering" (2015). Directions are local (3, N).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, overload

import jax.numpy as jnp

from tracer import elementary
from tracer import textures as tx
from tracer import lanes
from tracer import vecmath as vm
from tracer.bsdfs import microfacet
from tracer.constants import PI
from tracer.kinds import BsdfKind, Microfacet

if TYPE_CHECKING:
    from tracer.bsdfs.table import Materials

__all__ = ["Params", "gather", "lerp", "schlick_weight", "schlick", "schlick_r0", "tint", "distribution",
           "compatible", "gtr1_eval", "gtr1_pdf", "gtr1_sample", "smith_ggx1", "diffuse", "sheen"]


class Params(NamedTuple):
    """Per-ray parameters (N,) of the principled kinds; a feature no material has is the scalar 0."""

    base_color: jnp.ndarray       # (3, N)
    roughness: jnp.ndarray
    anisotropic: jnp.ndarray | float
    metallic: jnp.ndarray | float
    spec_trans: jnp.ndarray | float
    spec_tint: jnp.ndarray | float
    sheen: jnp.ndarray | float
    sheen_tint: jnp.ndarray | float
    flatness: jnp.ndarray | float
    clearcoat: jnp.ndarray | float
    clearcoat_gloss: jnp.ndarray | float
    diff_trans: jnp.ndarray | float  # Mitsuba's range 0-2 (principledthin halves it)
    eta: jnp.ndarray              # principled: int / ext IOR; principledthin: the sheet's IOR
    rates: jnp.ndarray            # (Rate.COUNT, N) lobe sampling rates
    has_spec_trans: jnp.ndarray   # (N,) bool principled's flag
    features: frozenset[str]      # static: the PRINCIPLED_FEATURES some material has

    def has(self, feature: str) -> bool:
        return feature in self.features


def gather(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
           base_color: jnp.ndarray) -> Params:
    """``Params`` of materials ``mat`` (N,) at uv (2, N); base_color (3, N) evaluated by the caller."""
    table = materials.principled
    assert table is not None  # the principled kinds' table, present with them
    present = set(materials.kinds_present)
    features = frozenset(table.features)
    value = lambda field: tx.eval_float(textures, getattr(table, field)[mat], uv, constant=field not in table.textured,
                                        checker_mean=True)
    optional = lambda field, feature: value(field) if feature in features else 0.0
    eta = None
    if BsdfKind.PRINCIPLEDTHIN in present:
        eta = value("eta")
    if BsdfKind.PRINCIPLED in present:
        own = materials.eta[0, mat]
        eta = own if eta is None else jnp.where(materials.kind[mat] == BsdfKind.PRINCIPLED, own, eta)
    assert eta is not None  # one of the principled kinds is present
    names = ("anisotropic", "metallic", "spec_trans", "spec_tint", "sheen", "sheen_tint", "flatness", "clearcoat",
             "diff_trans")
    return Params(base_color=base_color, roughness=value("roughness"),
                  **{name: optional(name, name) for name in names},
                  clearcoat_gloss=optional("clearcoat_gloss", "clearcoat"), eta=eta, rates=lanes.take(table.rates, mat),
                  has_spec_trans=table.has_spec_trans[mat], features=features)


@overload
def lerp(a: jnp.ndarray, b: jnp.ndarray | float, t: jnp.ndarray | float) -> jnp.ndarray: ...
@overload
def lerp(a: jnp.ndarray | float, b: jnp.ndarray, t: jnp.ndarray | float) -> jnp.ndarray: ...
@overload
def lerp(a: jnp.ndarray | float, b: jnp.ndarray | float, t: jnp.ndarray) -> jnp.ndarray: ...
@overload
def lerp(a: float, b: float, t: float) -> float: ...
def lerp(a: jnp.ndarray | float, b: jnp.ndarray | float, t: jnp.ndarray | float) -> jnp.ndarray | float:
    """Dr.Jit's ``lerp``: a (1 - t) + b t, in its order of operations."""
    return b * t + (a - a * t)


def schlick_weight(cos_theta: jnp.ndarray) -> jnp.ndarray:
    """(1 - cos)^5, with the cosine clamped to [0, 1]."""
    m = jnp.clip(1.0 - cos_theta, 0.0, 1.0)
    m2 = m * m
    return m2 * m2 * m


def schlick(r0: jnp.ndarray | float, cos_theta_i: jnp.ndarray, eta: jnp.ndarray) -> jnp.ndarray:
    """Schlick's Fresnel approximation R0 + (1 - R0)(1 - cos)^5 (``calc_schlick``), r0 (N,) or
    (3, N): from the denser side the cosine is the refracted one (0 under total internal reflection)."""
    outside = cos_theta_i >= 0
    rcp_eta = 1.0 / eta
    eta_it = jnp.where(outside, eta, rcp_eta)
    eta_ti = jnp.where(outside, rcp_eta, eta)
    cos_theta_t = vm.safe_sqrt(1.0 - (1.0 - cos_theta_i * cos_theta_i) * (eta_ti * eta_ti))
    weight = jnp.where(eta_it > 1.0, schlick_weight(jnp.abs(cos_theta_i)), schlick_weight(cos_theta_t))
    return lerp(weight, 1.0, r0)


def schlick_r0(eta: jnp.ndarray) -> jnp.ndarray:
    """Normal-incidence reflectance ((eta - 1) / (eta + 1))^2."""
    r = (eta - 1.0) / (eta + 1.0)
    return r * r


def tint(base_color: jnp.ndarray, lum: jnp.ndarray) -> jnp.ndarray:
    """The base color normalized by its luminance (white where that is zero)."""
    return jnp.where(lum > 0.0, base_color / jnp.where(lum > 0.0, lum, 1.0), 1.0)


def distribution(anisotropic: jnp.ndarray | float, roughness: jnp.ndarray, params: Params) -> microfacet.Distribution:
    """The GGX distribution (visible normals) of the main specular lobes: alpha = roughness^2, stretched
    by sqrt(1 - 0.9 anisotropic) along the tangent when a material has 'anisotropic' (``calc_dist_params``)."""
    r2 = roughness * roughness
    if params.has("anisotropic"):
        aspect = jnp.sqrt(1.0 - 0.9 * anisotropic)
        au, av = jnp.maximum(0.001, r2 / aspect), jnp.maximum(0.001, r2 * aspect)
    else:
        au = av = jnp.maximum(0.001, r2)
    return microfacet.make(au, av, True, True, present=(Microfacet.GGX,), all_normals=False)


def compatible(m: jnp.ndarray, wi: jnp.ndarray, wo: jnp.ndarray, cos_theta_i: jnp.ndarray,
               reflection: bool) -> jnp.ndarray:
    """``mac_mic_compatibility``: wi on the side of the normal m turned to wi's side of the surface,
    wo on that side for reflection, on the other for transmission."""
    m = jnp.where(jnp.signbit(cos_theta_i), -m, m)
    return (vm.dot(wi, m) > 0) & ((vm.dot(wo, m) > 0) if reflection else (vm.dot(wo, m) < 0))


def gtr1_eval(alpha: jnp.ndarray, m: jnp.ndarray) -> jnp.ndarray:
    """Burley's GTR1 (Berry) distribution of the clearcoat normals m (3, N)."""
    cos2 = m[2] * m[2]
    a2 = alpha * alpha
    result = (a2 - 1.0) / (PI * jnp.log(a2) * (1.0 + (a2 - 1.0) * cos2))
    return jnp.where(result * m[2] > 1e-20, result, 0.0)


def gtr1_pdf(alpha: jnp.ndarray, m: jnp.ndarray) -> jnp.ndarray:
    """Density of ``gtr1_sample``: D(m) cos(theta_m)."""
    return jnp.where(m[2] < 0.0, 0.0, m[2] * gtr1_eval(alpha, m))


def gtr1_sample(alpha: jnp.ndarray, u: jnp.ndarray) -> jnp.ndarray:
    """A GTR1 normal (3, N) from uniforms u (2, N), sampling D cos (no visible-normal sampling)."""
    sin_phi, cos_phi = elementary.sincos((2.0 * PI) * u[0])
    a2 = alpha * alpha
    cos2 = (1.0 - jnp.power(a2, 1.0 - u[1])) / (1.0 - a2)
    sin_theta = jnp.sqrt(jnp.maximum(0.0, 1.0 - cos2))
    cos_theta = jnp.sqrt(jnp.maximum(0.0, cos2))
    return jnp.stack([cos_phi * sin_theta, sin_phi * sin_theta, cos_theta])


def smith_ggx1(v: jnp.ndarray, m: jnp.ndarray, alpha: jnp.ndarray | float) -> jnp.ndarray:
    """Isotropic GGX Smith G1 of direction v (3, N) and normal m, as the clearcoat uses it."""
    cos2 = v[2] * v[2]
    tan2 = (1.0 - cos2) / cos2
    result = 2.0 / (1.0 + jnp.sqrt(1.0 + alpha * alpha * tan2))
    result = jnp.where(v[2] == 1.0, 1.0, result)
    return jnp.where(vm.dot(v, m) * v[2] <= 0.0, 0.0, result)


def diffuse(params: Params, cos_i: jnp.ndarray, cos_o: jnp.ndarray, cos_d: jnp.ndarray) -> jnp.ndarray:
    """Burley's diffuse and retro-reflection factor, blended with the Hanrahan-Krueger fake
    subsurface by 'flatness'; cos_i, cos_o the absolute cosines, cos_d = wh . wo. Times
    base_color / pi, it is the diffuse BRDF."""
    fo, fi = schlick_weight(cos_o), schlick_weight(cos_i)
    f_diff = (1.0 - 0.5 * fi) * (1.0 - 0.5 * fo)
    rr = 2.0 * params.roughness * (cos_d * cos_d)
    f_retro = rr * (fo + fi + fo * fi * (rr - 1.0))
    if not params.has("flatness"):
        return f_diff + f_retro
    fss90 = rr / 2.0
    fss = lerp(1.0, fss90, fo) * lerp(1.0, fss90, fi)
    f_ss = 1.25 * (fss * (1.0 / (cos_o + cos_i) - 0.5) + 0.5)
    return lerp(f_diff + f_retro, f_ss, params.flatness)


def sheen(params: Params, cos_d: jnp.ndarray) -> jnp.ndarray:
    """The sheen color (3, N) before its weights: Schlick's weight of wh . wo, tinted towards the
    base color by 'sheen_tint'."""
    fd = schlick_weight(jnp.abs(cos_d))
    if not params.has("sheen_tint"):
        return jnp.broadcast_to(fd, params.base_color.shape)
    c_sheen = lerp(1.0, tint(params.base_color, vm.luminance(params.base_color)), params.sheen_tint)
    return fd * c_sheen
