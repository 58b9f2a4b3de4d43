"""Burley's thin-surface BSDF, as Mitsuba 3's ``principledthin`` plugin: a two-sided sheet.

Lobes: specular reflection (GGX, tinted Fresnel) and specular transmission ('spec_trans'; a
microfacet reflection mirrored through the sheet, its roughness scaled by 0.65 eta - 0.35 after
Burley 2015, figure 15), the diffuse base with sheen, and a Lambertian diffuse transmission
('diff_trans', 0-2 in Mitsuba's units). The sheet is symmetric: wi below the surface is mirrored
above, evaluated there and mirrored back. Nothing bends, so the sampled eta is always 1.

``p`` is a ``disney.Params``; values include |cos theta_o|.
"""
from typing import NamedTuple

import jax.numpy as jnp

from tracer import sampling
from tracer import vecmath as vm
from tracer.bsdfs import disney, fresnel, microfacet
from tracer.bsdfs.table import Rate
from tracer.constants import INV_PI

__all__ = ["sample", "eval_pdf"]


class _Probabilities(NamedTuple):
    """Lobe probabilities (N,); the diffuse transmission's is 1 - the others (0 without it)."""

    spec_reflect: jnp.ndarray
    spec_trans: jnp.ndarray
    diff_reflect: jnp.ndarray
    diff_trans: jnp.ndarray


def _probabilities(p, spec_trans, diff_trans):
    spec_reflect = trans = diff_t = 0.0
    if p.has("spec_trans"):
        spec_reflect = spec_trans * p.rates[Rate.SPEC_REFLECT] / 2.0
        trans = spec_trans * p.rates[Rate.SPEC_TRANS] / 2.0
    diff_r = p.rates[Rate.DIFF_REFLECT] * (1.0 - spec_trans) * (1.0 - diff_trans)
    if p.has("diff_trans"):
        diff_t = p.rates[Rate.DIFF_TRANS] * (1.0 - spec_trans) * diff_trans
    rcp_total = 1.0 / (spec_reflect + trans + diff_r + diff_t)
    return _Probabilities(spec_reflect * rcp_total, trans * rcp_total, diff_r * rcp_total, diff_t * rcp_total)


def _distribution(p: disney.Params, scaled: jnp.ndarray) -> microfacet.Distribution:
    """The reflection's GGX distribution, or where ``scaled`` (N,) the transmission's (its roughness
    scaled by 0.65 eta - 0.35)."""
    roughness = p.roughness
    if p.has("spec_trans"):
        roughness = jnp.where(scaled, (0.65 * p.eta - 0.35) * p.roughness, roughness)
    return disney.distribution(p.anisotropic, roughness, p)


def _flip(v: jnp.ndarray, cos_theta_i: jnp.ndarray) -> jnp.ndarray:
    """v mirrored through the sheet where wi is below it (Dr.Jit's mulsign)."""
    return jnp.where(jnp.signbit(cos_theta_i), -v, v)


def eval_pdf(wi: jnp.ndarray, wo: jnp.ndarray, p: disney.Params) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(f(wi, wo) |cos theta_o| (3, N), pdf (N,)) of Mitsuba's eval and pdf."""
    active = wi[2] != 0.0
    spec_trans, diff_trans = p.spec_trans, p.diff_trans / 2.0
    wi, wo = _flip(wi, wi[2]), _flip(wo, wi[2])
    cos_i, cos_o = wi[2], wo[2]
    reflect, refract = cos_o > 0.0, cos_o < 0.0
    wo_r = jnp.stack([wo[0], wo[1], jnp.abs(wo[2])])  # transmission: its mirror image above
    wh = vm.normalize(wi + wo_r)
    reflect_ok = disney.compatible(wh, wi, wo, cos_i, True) & reflect
    refract_ok = disney.compatible(wh, wi, wo, cos_i, False) & refract
    prob = _probabilities(p, spec_trans, diff_trans)
    cos_d = vm.dot(wh, wo)
    value = jnp.zeros_like(wo)
    pdf = jnp.zeros_like(cos_o)
    if p.has("spec_trans"):
        # One distribution per ray: the reflection's above the sheet, the transmission's below.
        distr = _distribution(p, refract)
        d = microfacet.eval_d(distr, wh)
        g1_i = microfacet.smith_g1(distr, wi, wh)
        dg = d * g1_i * microfacet.smith_g1(distr, wo, wh) / (4.0 * cos_i)
        f = fresnel.dielectric(vm.dot(wi, wh), p.eta)[0]
        f_thin = f
        if p.has("spec_tint"):
            r0 = disney.tint(p.base_color, vm.luminance(p.base_color)) * disney.schlick_r0(p.eta)
            f_thin = disney.lerp(f, disney.schlick(r0, vm.dot(wi, wh), p.eta), p.spec_tint)
        spec = vm.select(reflect, f_thin, p.base_color * (1.0 - f)) * (spec_trans * dg)
        value = vm.select((spec_trans > 0.0) & (reflect_ok | refract_ok), spec, value)
        pdf_m = d * g1_i * jnp.abs(vm.dot(wi, wh)) / cos_i
        dwh_dwo = jnp.abs(1.0 / (4.0 * vm.dot(wo_r, wh)))
        pdf = jnp.where(reflect_ok, prob.spec_reflect * pdf_m * dwh_dwo, pdf)
        pdf = jnp.where(refract_ok, prob.spec_trans * pdf_m * dwh_dwo, pdf)

    base = p.base_color * ((1.0 - spec_trans) * cos_o * INV_PI * (1.0 - diff_trans)
                           * disney.diffuse(p, cos_i, jnp.abs(cos_o), cos_d))
    if p.has("sheen"):
        base = base + disney.sheen(p, cos_d) * (p.sheen * (1.0 - spec_trans) * (1.0 - diff_trans) * jnp.abs(cos_o))
    value = value + vm.select(reflect & (spec_trans < 1.0) & (diff_trans < 1.0), base, 0.0)
    pdf = pdf + jnp.where(reflect, prob.diff_reflect * (INV_PI * cos_o), 0.0)
    if p.has("diff_trans"):
        lambert = p.base_color * ((1.0 - spec_trans) * diff_trans * INV_PI * jnp.abs(cos_o))
        value = value + vm.select(refract & (spec_trans < 1.0) & (diff_trans > 0.0), lambert, 0.0)
        pdf = pdf + jnp.where(refract, prob.diff_trans * (INV_PI * -cos_o), 0.0)
    return vm.select(active, value, 0.0), jnp.where(active, pdf, 0.0)


def sample(wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray,
           p: disney.Params) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Pick a lobe with u1 (N,), sample it with u2 (2, N). Returns (wo, pdf, weight (3, N))."""
    cos_theta_i = wi[2]
    wi_up = _flip(wi, cos_theta_i)
    prob = _probabilities(p, p.spec_trans, p.diff_trans / 2.0)
    # Lobes in Mitsuba's order along u1: specular reflection and transmission, diffuse reflection
    # and transmission; a u1 that rounding leaves beyond the last lobe samples nothing.
    spec_reflect = u1 < prob.spec_reflect
    start = prob.spec_reflect + prob.spec_trans
    spec_trans = ~spec_reflect & (u1 < start)
    diff_reflect = ~spec_reflect & ~spec_trans & (u1 < start + prob.diff_reflect)
    diff_trans = ~spec_reflect & ~spec_trans & ~diff_reflect & p.has("diff_trans")

    wo_d = sampling.square_to_cosine_hemisphere(u2)
    wo = vm.select(diff_trans, -wo_d, vm.select(diff_reflect, wo_d, 0.0))
    ok = jnp.ones_like(u1, dtype=bool)
    if p.has("spec_trans"):
        m = microfacet.sample(_distribution(p, spec_trans), wi_up, u2)[0]
        wo_s = fresnel.reflect_about(wi_up, m)
        wo_s = jnp.stack([wo_s[0], wo_s[1], jnp.where(spec_trans, -wo_s[2], wo_s[2])])
        ok_r = disney.compatible(m, wi_up, wo_s, wi_up[2], True) & (wo_s[2] > 0.0)
        ok_t = disney.compatible(m, wi_up, wo_s, wi_up[2], False) & (wo_s[2] < 0.0)
        wo = vm.select(spec_reflect | spec_trans, wo_s, wo)
        ok = jnp.where(spec_reflect, ok_r, jnp.where(spec_trans, ok_t, ok))
    wo = _flip(wo, cos_theta_i)

    value, pdf = eval_pdf(wi, wo, p)
    ok = ok & (cos_theta_i != 0.0) & (pdf > 0.0)
    weight = vm.select(ok, value / jnp.where(ok, pdf, 1.0), 0.0)
    return wo, jnp.where(ok, pdf, 0.0), weight
