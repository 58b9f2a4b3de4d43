"""Burley's principled BSDF, as Mitsuba 3's ``principled`` plugin.

Four lobes: a diffuse base (Burley's diffuse, retro-reflection, fake subsurface and sheen), a GGX
specular reflection whose Fresnel term blends the dielectric one with Schlick's for the metallic
and tinted parts, a GGX specular transmission ('spec_trans', the only lobe seen from inside
besides the reflection), and a GTR1 clearcoat. ``sample`` picks a lobe in proportion to its
rough share of energy and Mitsuba's sampling rates, and weighs by the full eval / pdf.

``p`` is a ``disney.Params``; wi may lie on either side (z < 0 is inside the object). Values
include |cos theta_o| and, for refraction, the radiance compression (eta_i / eta_t)^2.
"""
from typing import NamedTuple

import jax.numpy as jnp

from tracer import sampling
from tracer import vecmath as vm
from tracer.bsdfs import disney, fresnel, microfacet
from tracer.bsdfs.table import Rate
from tracer.constants import INV_PI

__all__ = ["sample", "eval_pdf"]


class _Weights(NamedTuple):
    """The lobes' weights and sampling probabilities of one (wi, microfacet normal) pair."""

    brdf: jnp.ndarray      # (1 - metallic)(1 - spec_trans): the diffuse base
    bsdf: jnp.ndarray      # (1 - metallic) spec_trans: the transmission
    reflect: jnp.ndarray   # probabilities of the main specular reflection,
    trans: jnp.ndarray     # its transmission,
    clearcoat: jnp.ndarray
    diffuse: jnp.ndarray   # and the cosine-weighted diffuse lobe


def _weights(p, front, f):
    """Lobe probabilities from the dielectric Fresnel term f of the specular normal; from inside,
    only the specular reflection and (with 'spec_trans') transmission, in proportion to f and 1 - f."""
    brdf = (1.0 - p.metallic) * (1.0 - p.spec_trans)
    bsdf = (1.0 - p.metallic) * p.spec_trans
    rate = p.rates[Rate.SPECULAR]
    reflect = jnp.where(front, rate * (1.0 - bsdf * (1.0 - f)), f)
    trans = clearcoat = 0.0
    if p.has("spec_trans"):
        trans = jnp.where(p.has_spec_trans, jnp.where(front, rate * bsdf * (1.0 - f), 1.0 - f), 0.0)
    if p.has("clearcoat"):
        clearcoat = jnp.where(front, 0.25 * p.clearcoat * p.rates[Rate.CLEARCOAT], 0.0)
    diffuse = jnp.where(front, brdf * p.rates[Rate.DIFFUSE], 0.0)
    rcp_total = 1.0 / (reflect + trans + clearcoat + diffuse)
    return _Weights(brdf, bsdf, reflect * rcp_total, trans * rcp_total, clearcoat * rcp_total, diffuse * rcp_total)


def _clearcoat_alpha(p):
    """GTR1 roughness: 0.1 for clearcoat_gloss 0 down to 0.001 for 1."""
    return disney.lerp(0.1, 0.001, p.clearcoat_gloss)


def _fresnel(p, f_dielectric, cos_theta_h, front, bsdf):
    """``principled_fresnel``: from outside, the dielectric term blended with Schlick's for the
    metallic part (R0 = base_color) and the tinted part (R0 = tint R0(eta)); from inside, bsdf F."""
    outside = cos_theta_h >= 0.0
    eta_it = jnp.where(outside, p.eta, 1.0 / p.eta)
    f_schlick = 0.0
    if p.has("metallic"):
        f_schlick = f_schlick + p.metallic * disney.schlick(p.base_color, cos_theta_h, p.eta)
    if p.has("spec_tint"):
        r0 = disney.tint(p.base_color, vm.luminance(p.base_color)) * disney.schlick_r0(eta_it)
        f_schlick = f_schlick + (1.0 - p.metallic) * p.spec_tint * disney.schlick(r0, cos_theta_h, p.eta)
    f_front = (1.0 - p.metallic) * (1.0 - p.spec_tint) * f_dielectric + f_schlick
    return vm.select(front, f_front, bsdf * f_dielectric)


def eval_pdf(wi: jnp.ndarray, wo: jnp.ndarray, p: disney.Params) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(f(wi, wo) |cos theta_o| (3, N), pdf (N,)) of Mitsuba's eval and pdf."""
    cos_i, cos_o = wi[2], wo[2]
    active = cos_i != 0.0
    front = cos_i > 0.0
    reflect, refract = cos_i * cos_o > 0.0, cos_i * cos_o < 0.0
    inv_eta = 1.0 / p.eta
    eta_path = jnp.where(front, p.eta, inv_eta)
    wh = vm.normalize(wi + wo * jnp.where(reflect, 1.0, eta_path))
    wh = vm.upper_hemisphere(wh)
    dot_wi_h, dot_wo_h = vm.dot(wi, wh), vm.dot(wo, wh)
    f = fresnel.dielectric(dot_wi_h, p.eta)[0]
    reflect_ok = disney.compatible(wh, wi, wo, cos_i, True) & reflect
    refract_ok = disney.compatible(wh, wi, wo, cos_i, False) & refract
    distr = disney.distribution(p.anisotropic, p.roughness, p)
    d = microfacet.eval_d(distr, wh)
    g1_i = microfacet.smith_g1(distr, wi, wh)
    g = g1_i * microfacet.smith_g1(distr, wo, wh)
    w = _weights(p, front, f)

    spec = _fresnel(p, f, dot_wi_h, front, w.bsdf) * (d * g / (4.0 * jnp.abs(cos_i)))
    value = vm.select(reflect_ok & (f > 0.0), spec, 0.0)
    if p.has("spec_trans"):
        inv_eta_path = jnp.where(front, inv_eta, p.eta)
        denom = dot_wi_h + eta_path * dot_wo_h
        trans = jnp.abs((inv_eta_path * inv_eta_path) * (1.0 - f) * d * g * eta_path * eta_path * dot_wi_h
                        * dot_wo_h / (cos_i * (denom * denom)))
        trans_active = (w.bsdf > 0.0) & refract_ok & (f < 1.0)
        value = value + vm.select(trans_active, jnp.sqrt(p.base_color) * (w.bsdf * trans), 0.0)
    if p.has("clearcoat"):
        f_cc = disney.schlick(0.04, dot_wi_h, p.eta)
        d_cc = disney.gtr1_eval(_clearcoat_alpha(p), wh)
        g_cc = disney.smith_ggx1(wi, wh, 0.25) * disney.smith_ggx1(wo, wh, 0.25)
        cc = (p.clearcoat * 0.25) * f_cc * d_cc * g_cc * jnp.abs(cos_o)
        value = value + jnp.where((p.clearcoat > 0.0) & reflect_ok & front, cc, 0.0)
    value = value + _diffuse_sheen(p, w, wh, wo, cos_i, cos_o, reflect & front)

    # The density of ``sample``: each lobe's, through the Jacobian of its half-vector map.
    if p.has("spec_trans"):
        dwh_dwo = jnp.abs(jnp.where(reflect, 1.0 / (4.0 * dot_wo_h),
                                    (eta_path * eta_path * dot_wo_h) / (dot_wi_h + eta_path * dot_wo_h) ** 2))
    else:
        dwh_dwo = jnp.abs(1.0 / (4.0 * dot_wo_h))
    pdf_m = d * g1_i * jnp.abs(dot_wi_h) / jnp.abs(cos_i)  # visible normals seen from wi turned up
    pdf = jnp.where(reflect_ok, w.reflect * pdf_m * dwh_dwo, 0.0)
    pdf = pdf + jnp.where(reflect, w.diffuse * (INV_PI * cos_o), 0.0)
    if p.has("spec_trans"):
        pdf = pdf + jnp.where(refract_ok, w.trans * pdf_m * dwh_dwo, 0.0)
    if p.has("clearcoat"):
        pdf = pdf + jnp.where(reflect_ok, w.clearcoat * disney.gtr1_pdf(_clearcoat_alpha(p), wh) * dwh_dwo, 0.0)
    return vm.select(active, value, 0.0), jnp.where(active, pdf, 0.0)


def _diffuse_sheen(p, w, wh, wo, cos_i, cos_o, front_reflect):
    """The diffuse base and the sheen, where wo is reflected on the outside."""
    cos_d = vm.dot(wh, wo)
    abs_o = jnp.abs(cos_o)
    base = p.base_color * (w.brdf * abs_o * INV_PI * disney.diffuse(p, jnp.abs(cos_i), abs_o, cos_d))
    value = vm.select(front_reflect & (w.brdf > 0.0), base, 0.0)
    if p.has("sheen"):
        # Mitsuba's vectorized variants add the sheen wherever it is active, also where the diffuse
        # base is not (brdf = 0: spec_trans = 1); its scalar variant only where both are.
        sheen = disney.sheen(p, cos_d) * (p.sheen * (1.0 - p.metallic) * abs_o)
        value = value + vm.select(front_reflect & (p.sheen > 0.0) & (1.0 - p.metallic > 0.0), sheen, 0.0)
    return value


def sample(wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray,
           p: disney.Params) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Pick a lobe with u1 (N,), sample it with u2 (2, N). Returns (wo, pdf, weight (3, N), eta);
    eta is the relative IOR crossed (1 unless transmitted)."""
    cos_i = wi[2]
    front = cos_i > 0.0
    distr = disney.distribution(p.anisotropic, p.roughness, p)
    m = microfacet.sample(distr, vm.upper_hemisphere(wi), u2)[0]
    f, cos_t, eta_it, eta_ti = fresnel.dielectric(vm.dot(wi, m), p.eta)
    w = _weights(p, front, f)
    active = (cos_i != 0.0) & (front | (w.bsdf > 0.0))

    # Lobes in Mitsuba's order along u1: diffuse, clearcoat, transmission, reflection.
    diffuse = u1 < w.diffuse
    start = w.diffuse + w.clearcoat
    clearcoat = ~diffuse & (u1 < start)
    trans = ~diffuse & ~clearcoat & (u1 < start + w.trans)
    wo = fresnel.reflect_about(wi, m)
    ok = disney.compatible(m, wi, wo, cos_i, True) & (cos_i * wo[2] > 0.0)
    if p.has("spec_trans"):
        wo_t = fresnel.refract(wi, m, cos_t, eta_ti)
        wo = vm.select(trans, wo_t, wo)
        ok_t = disney.compatible(m, wi, wo_t, cos_i, False) & (cos_i * wo_t[2] < 0.0)
        ok = jnp.where(trans, ok_t, ok)
    if p.has("clearcoat"):
        m_cc = disney.gtr1_sample(_clearcoat_alpha(p), u2)
        wo_cc = fresnel.reflect_about(wi, m_cc)
        wo = vm.select(clearcoat, wo_cc, wo)
        ok = jnp.where(clearcoat, disney.compatible(m_cc, wi, wo_cc, cos_i, True) & (cos_i * wo_cc[2] > 0.0), ok)
    wo_d = sampling.square_to_cosine_hemisphere(u2)
    wo = vm.select(diffuse, wo_d, wo)
    ok = jnp.where(diffuse, cos_i * wo_d[2] > 0.0, ok)

    value, pdf = eval_pdf(wi, wo, p)
    ok = active & ok & (pdf > 0.0)
    weight = vm.select(ok, value / jnp.where(ok, pdf, 1.0), 0.0)
    return wo, jnp.where(ok, pdf, 0.0), weight, jnp.where(trans, eta_it, 1.0)
