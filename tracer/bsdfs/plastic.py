"""Smooth and rough plastic, as Mitsuba 3's ``plastic`` and ``roughplastic`` plugins (one-sided).

A diffuse base under a dielectric coating (parameters in a ``Coating``). The rough coating's
external transmittance over cos(theta) is column ``column`` (N,) of ``table`` (RES, M), the
materials' tables (``precompute.rough_transmittance``): only the two entries used are gathered.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax.numpy as jnp

from tracer import sampling
from tracer import vecmath as vm
from tracer.bsdfs import fresnel

if TYPE_CHECKING:
    from tracer.bsdfs.microfacet import Distribution, Terms

__all__ = ["Coating", "smooth_sample", "smooth_eval_pdf", "rough_sample", "rough_eval_pdf", "transmittance"]


class Coating(NamedTuple):
    """Per-ray plastic parameters."""

    diffuse: jnp.ndarray    # (3, N) diffuse_reflectance
    specular: jnp.ndarray   # (3, N) specular_reflectance
    eta: jnp.ndarray        # (N,) relative IOR of the coating
    weight_s: jnp.ndarray   # (N,) specular sampling weight s_mean / (d_mean + s_mean), fixed at load time
    internal: jnp.ndarray   # (N,) internal diffuse reflectance: Fdr(1 / eta), or the rough integral
    nonlinear: jnp.ndarray  # (N,) bool: account for the color shift of internal scattering


def _lobe_probability(f_spec: jnp.ndarray, weight_s: jnp.ndarray) -> jnp.ndarray:
    """Probability of the specular lobe: its share of energy times the sampling weight."""
    p_s = f_spec * weight_s
    p_d = (1.0 - f_spec) * (1.0 - weight_s)
    return p_s / (p_s + p_d)


def _base(c: Coating) -> jnp.ndarray:
    """The diffuse base's outgoing albedo after internal inter-reflections, divided by eta^2."""
    denom = 1.0 - jnp.where(c.nonlinear, c.diffuse * c.internal, c.internal)
    return c.diffuse / denom / (c.eta * c.eta)


def smooth_sample(wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray,
                  c: Coating) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Specular reflection with probability ~ F weight_s, else the cosine-weighted diffuse base.

    Returns (wo, pdf, weight (3, N), specular_chosen).
    """
    cos_i = wi[2]
    f_i = fresnel.dielectric(cos_i, c.eta)[0]
    p_spec = _lobe_probability(f_i, c.weight_s)
    p_diff = 1.0 - p_spec
    chose_spec = u1 < p_spec
    wo_d = sampling.square_to_cosine_hemisphere(u2)
    f_o = fresnel.dielectric(wo_d[2], c.eta)[0]
    w_spec = c.specular * (f_i / p_spec)
    w_diff = _base(c) * ((1.0 - f_i) * (1.0 - f_o) / p_diff)
    wo = vm.select(chose_spec, vm.reflect(wi), wo_d)
    pdf = jnp.where(chose_spec, p_spec, p_diff * sampling.INV_PI * wo_d[2])
    ok = cos_i > 0
    # wi below: Mitsuba's sample is all zeros, direction too (tracer.bsdfs: failed samples).
    return (vm.select(ok, wo, 0.0), jnp.where(ok, pdf, 0.0), vm.select(ok, vm.select(chose_spec, w_spec, w_diff), 0.0),
            chose_spec)


def smooth_eval_pdf(wi: jnp.ndarray, wo: jnp.ndarray, c: Coating) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The diffuse lobe (the specular one is a delta) and its sampling pdf."""
    cos_i, cos_o = wi[2], wo[2]
    f_i = fresnel.dielectric(cos_i, c.eta)[0]
    f_o = fresnel.dielectric(cos_o, c.eta)[0]
    cos_pdf = sampling.INV_PI * cos_o
    value = _base(c) * (cos_pdf * (1.0 - f_i) * (1.0 - f_o))
    pdf = cos_pdf * (1.0 - _lobe_probability(f_i, c.weight_s))
    ok = (cos_i > 0) & (cos_o > 0)
    return vm.select(ok, value, 0.0), jnp.where(ok, pdf, 0.0)


def transmittance(table: jnp.ndarray, column: jnp.ndarray, cos_theta: jnp.ndarray) -> jnp.ndarray:
    """Column ``column`` (N,) of the (RES, M) table, linearly interpolated at cos_theta (N,) in
    [0, 1] as Mitsuba's ``lerp_gather``."""
    res = table.shape[0]
    x = cos_theta * (res - 1)
    index = jnp.minimum(jnp.maximum(x, 0.0).astype(jnp.int32), res - 2)
    # One flat index into the column-major table: XLA turns a gather at (row, column) pairs into
    # an index concatenation and a slow 2-D gather (4% of a rough-plastic render).
    flat = table.T.reshape(-1)
    at = column * res + index
    v0, v1 = flat[at], flat[at + 1]
    t = x - index.astype(x.dtype)
    return v0 + (v1 - v0) * t


def rough_sample(wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray, m: jnp.ndarray,
                 terms_fn: Callable[[jnp.ndarray], Terms], c: Coating, table: jnp.ndarray, column: jnp.ndarray,
                 distr: Distribution) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Choose the lobe, sample it, and weigh by the full eval / pdf as Mitsuba does.

    m: the normal drawn by ``microfacet.sample(distr, wi, u2)``; ``terms_fn(wo)`` returns the
    microfacet terms at wo's half vector. Returns (wo, pdf, weight (3, N)).
    """
    t_i = transmittance(table, column, wi[2])
    p_spec = _lobe_probability(1.0 - t_i, c.weight_s)
    chose_spec = u1 < p_spec
    wo = vm.select(chose_spec, fresnel.reflect_about(wi, m), sampling.square_to_cosine_hemisphere(u2))
    value, pdf = rough_eval_pdf(wi, wo, terms_fn(wo), c, table, column, distr)
    ok = pdf > 0
    # wi below: Mitsuba's direction stays zero (tracer.bsdfs: failed samples).
    return vm.select(wi[2] > 0, wo, 0.0), pdf, vm.select(ok, value / jnp.where(ok, pdf, 1.0), 0.0)


def rough_eval_pdf(wi: jnp.ndarray, wo: jnp.ndarray, terms: Terms, c: Coating, table: jnp.ndarray, column: jnp.ndarray,
                   distr: Distribution) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Rough specular coating plus the attenuated diffuse base (cosine included), and the pdf.

    ``terms``: ``microfacet.terms(distr, wi, wo, normalize(wi + wo))``.
    """
    cos_i, cos_o = wi[2], wo[2]
    h, d = terms.m, terms.d
    t_i = transmittance(table, column, cos_i)
    t_o = transmittance(table, column, cos_o)
    p_spec = _lobe_probability(1.0 - t_i, c.weight_s)
    pdf_spec = d * terms.g1_i / (4.0 * cos_i)
    if distr.all_normals:
        pdf_spec = jnp.where(distr.visible, pdf_spec, d * h[2] / (4.0 * vm.dot(wo, h)))
    pdf = p_spec * pdf_spec + (1.0 - p_spec) * sampling.INV_PI * cos_o
    f = fresnel.dielectric(vm.dot(wi, h), c.eta)[0]
    spec = c.specular * (f * d * terms.g1_i * terms.g1_o / (4.0 * cos_i))
    base = _base(c) * (sampling.INV_PI * cos_o * t_i * t_o)
    ok = (cos_i > 0) & (cos_o > 0)
    return vm.select(ok, spec + base, 0.0), jnp.where(ok, pdf, 0.0)
