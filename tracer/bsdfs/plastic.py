"""Smooth and rough plastic, as Mitsuba 3's ``plastic`` and ``roughplastic`` plugins (one-sided).

A diffuse base under a dielectric coating. ``diffuse`` and ``specular`` (3, N) are the
``diffuse_reflectance`` / ``specular_reflectance`` values, ``eta`` (N,) the coating's relative
IOR, ``weight_s`` (N,) the specular sampling weight s_mean / (d_mean + s_mean) fixed at load
time, ``internal`` (N,) the internal diffuse reflectance (Fdr for ``plastic``, the integrated
rough reflectance for ``roughplastic``), ``nonlinear`` (N,) bool. The rough coating's external
transmittance over cos(theta) is column ``column`` (N,) of ``table`` (RES, M), the materials'
tables (``precompute.rough_transmittance``), so that only the two entries used are gathered.
"""
import jax.numpy as jnp

from tracer import sampling
from tracer import vecmath as vm
from tracer.bsdfs import fresnel, microfacet

__all__ = ["smooth_sample", "smooth_eval_pdf", "rough_sample", "rough_eval_pdf", "transmittance"]


def _lobe_probability(f_spec, weight_s):
    """Probability of the specular lobe: its share of energy times the sampling weight."""
    p_s = f_spec * weight_s
    p_d = (1.0 - f_spec) * (1.0 - weight_s)
    return p_s / (p_s + p_d)


def _base(diffuse, internal, nonlinear, eta):
    """The diffuse base's outgoing albedo after internal inter-reflections, divided by eta^2."""
    denom = 1.0 - jnp.where(nonlinear, diffuse * internal, internal)
    return diffuse / denom / (eta * eta)


def smooth_sample(wi, u1, u2, diffuse, specular, eta, weight_s, internal, nonlinear):
    """Returns (wo, pdf, weight (3, N), specular_chosen)."""
    cos_i = wi[2]
    f_i = fresnel.dielectric(cos_i, eta)[0]
    p_spec = _lobe_probability(f_i, weight_s)
    p_diff = 1.0 - p_spec
    chose_spec = u1 < p_spec
    wo_d = sampling.square_to_cosine_hemisphere(u2)
    f_o = fresnel.dielectric(wo_d[2], eta)[0]
    w_spec = specular * (f_i / p_spec)
    w_diff = _base(diffuse, internal, nonlinear, eta) * ((1.0 - f_i) * (1.0 - f_o) / p_diff)
    wo = vm.select(chose_spec, vm.reflect(wi), wo_d)
    pdf = jnp.where(chose_spec, p_spec, p_diff * sampling.INV_PI * wo_d[2])
    ok = cos_i > 0
    return wo, jnp.where(ok, pdf, 0.0), vm.select(ok, vm.select(chose_spec, w_spec, w_diff), 0.0), chose_spec


def smooth_eval_pdf(wi, wo, diffuse, eta, weight_s, internal, nonlinear):
    """The diffuse lobe (the specular one is a delta) and its sampling pdf."""
    cos_i, cos_o = wi[2], wo[2]
    f_i = fresnel.dielectric(cos_i, eta)[0]
    f_o = fresnel.dielectric(cos_o, eta)[0]
    cos_pdf = sampling.INV_PI * cos_o
    value = _base(diffuse, internal, nonlinear, eta) * (cos_pdf * (1.0 - f_i) * (1.0 - f_o))
    pdf = cos_pdf * (1.0 - _lobe_probability(f_i, weight_s))
    ok = (cos_i > 0) & (cos_o > 0)
    return vm.select(ok, value, 0.0), jnp.where(ok, pdf, 0.0)


def transmittance(table, column, cos_theta):
    """Column ``column`` (N,) of the (RES, M) table, linearly interpolated at cos_theta (N,) in
    [0, 1] as Mitsuba's ``lerp_gather``."""
    res = table.shape[0]
    x = cos_theta * (res - 1)
    index = jnp.minimum(jnp.maximum(x, 0.0).astype(jnp.int32), res - 2)
    v0, v1 = table[index, column], table[index + 1, column]
    t = x - index.astype(x.dtype)
    return v0 + (v1 - v0) * t


def rough_sample(wi, u1, u2, m, terms_fn, diffuse, specular, eta, weight_s, internal, nonlinear,
                 table, column, distr):
    """Choose the lobe, sample it, and weigh by the full eval / pdf as Mitsuba does.

    m: the normal drawn by ``microfacet.sample(distr, wi, u2)``; ``terms_fn(wo)`` returns the
    microfacet terms at wo's half vector. Returns (wo, pdf, weight (3, N)).
    """
    t_i = transmittance(table, column, wi[2])
    p_spec = _lobe_probability(1.0 - t_i, weight_s)
    chose_spec = u1 < p_spec
    wo = vm.select(chose_spec, fresnel.reflect_about(wi, m), sampling.square_to_cosine_hemisphere(u2))
    value, pdf = rough_eval_pdf(wi, wo, terms_fn(wo), diffuse, specular, eta, weight_s, internal,
                                nonlinear, table, column, distr)
    ok = pdf > 0
    return wo, pdf, vm.select(ok, value / jnp.where(ok, pdf, 1.0), 0.0)


def rough_eval_pdf(wi, wo, terms, diffuse, specular, eta, weight_s, internal, nonlinear, table, column,
                   distr):
    """Rough specular coating plus the attenuated diffuse base (cosine included), and the pdf.

    ``terms``: ``microfacet.terms(distr, wi, wo, normalize(wi + wo))``.
    """
    cos_i, cos_o = wi[2], wo[2]
    h, d = terms.m, terms.d
    t_i = transmittance(table, column, cos_i)
    t_o = transmittance(table, column, cos_o)
    p_spec = _lobe_probability(1.0 - t_i, weight_s)
    pdf_spec = d * terms.g1_i / (4.0 * cos_i)
    if distr.all_normals:
        pdf_spec = jnp.where(distr.visible, pdf_spec, d * h[2] / (4.0 * vm.dot(wo, h)))
    pdf = p_spec * pdf_spec + (1.0 - p_spec) * sampling.INV_PI * cos_o
    f = fresnel.dielectric(vm.dot(wi, h), eta)[0]
    spec = specular * (f * d * terms.g1_i * terms.g1_o / (4.0 * cos_i))
    base = _base(diffuse, internal, nonlinear, eta) * (sampling.INV_PI * cos_o * t_i * t_o)
    ok = (cos_i > 0) & (cos_o > 0)
    return vm.select(ok, spec + base, 0.0), jnp.where(ok, pdf, 0.0)
