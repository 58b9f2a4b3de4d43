"""Mitsuba 3's ``pplastic`` (polarized plastic) as its RGB variants render it (one-sided).

Baek et al. 2018's pBRDF without the Mueller calculus: a rough microfacet reflection added to a
Lambertian base attenuated by two smooth refractions (in and out), and not coupled to it
(``src/bsdfs/pplastic.cpp``, its non-polarized branch):

    f cos = s F(wi.h) D G / (4 cos_i) + d (1 - F(cos_i)) (1 - F(cos_o)) cos_o / pi

The specular lobe is sampled with the fixed probability ``weight_s`` = s_mean / (d_mean + s_mean)
(not Fresnel-weighted as ``plastic``), the diffuse one by the cosine; the weight of a sample
is the full eval over the full pdf.
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

__all__ = ["Params", "sample", "eval_pdf"]


class Params(NamedTuple):
    """Per-ray pplastic parameters."""

    diffuse: jnp.ndarray   # (3, N) diffuse_reflectance
    specular: jnp.ndarray  # (3, N) specular_reflectance
    eta: jnp.ndarray       # (N,) relative IOR
    weight_s: jnp.ndarray  # (N,) probability of sampling the specular lobe


def eval_pdf(wi: jnp.ndarray, wo: jnp.ndarray, terms: Terms, p: Params,
             distr: Distribution) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(f cos (3, N), pdf (N,)) for ``terms`` = ``microfacet.terms(distr, wi, wo, normalize(wi + wo))``."""
    cos_i, cos_o = wi[2], wo[2]
    h, d = terms.m, terms.d
    f = fresnel.dielectric(vm.dot(wi, h), p.eta)[0]
    spec = p.specular * (f * d * terms.g1_i * terms.g1_o / (4.0 * cos_i))
    r_i = fresnel.dielectric(cos_i, p.eta)[0]
    r_o = fresnel.dielectric(cos_o, p.eta)[0]
    base = p.diffuse * ((1.0 - r_o) * (1.0 - r_i) * sampling.INV_PI * cos_o)
    pdf_spec = d * terms.g1_i / (4.0 * cos_i)
    if distr.all_normals:
        pdf_spec = jnp.where(distr.visible, pdf_spec, d * h[2] / (4.0 * vm.dot(wo, h)))
    pdf_spec = jnp.where((vm.dot(wi, h) <= 0) | (vm.dot(wo, h) <= 0), 0.0, pdf_spec)
    pdf = p.weight_s * pdf_spec + (1.0 - p.weight_s) * sampling.INV_PI * cos_o
    ok = (cos_i > 0) & (cos_o > 0)
    return vm.select(ok, spec + base, 0.0), jnp.where(ok, pdf, 0.0)


def sample(wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray, m: jnp.ndarray, terms_fn: Callable[[jnp.ndarray], Terms],
           p: Params, distr: Distribution) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """The specular lobe (reflection about m, drawn by ``microfacet.sample(distr, wi, u2)``) for
    u1 < weight_s, else the cosine-weighted diffuse one. ``terms_fn(wo)``: the microfacet terms at
    wo's half vector. Returns (wo, pdf, weight (3, N))."""
    chose_spec = u1 < p.weight_s
    wo = vm.select(chose_spec, fresnel.reflect_about(wi, m), sampling.square_to_cosine_hemisphere(u2))
    value, pdf = eval_pdf(wi, wo, terms_fn(wo), p, distr)
    ok = pdf > 0
    # wi below: Mitsuba's direction stays zero (tracer.bsdfs: failed samples).
    return vm.select(wi[2] > 0, wo, 0.0), pdf, vm.select(ok, value / jnp.where(ok, pdf, 1.0), 0.0)
