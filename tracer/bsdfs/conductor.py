"""Smooth and rough conductors, as Mitsuba 3's ``conductor`` and ``roughconductor`` (one-sided).

``eta`` and ``k`` (3, N) are the complex IOR per RGB channel; ``specular`` (3, N) the
``specular_reflectance`` factor; ``distr`` a ``microfacet.Distribution``. The rough model's
microfacet normal (sampling) and microfacet terms (evaluation) come in precomputed, so that all
rough BSDFs of a batch share them.
"""
import jax
import jax.numpy as jnp

from tracer import vecmath as vm
from tracer.bsdfs import fresnel, microfacet

__all__ = ["smooth_sample", "rough_sample", "rough_eval_pdf"]


def smooth_sample(wi: jax.Array, eta: jax.Array, k: jax.Array,
                  specular: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Mirror reflection. Returns (wo, pdf = 1, weight = specular F (3, N)); wi below fails the
    sample (weight 0), its direction and pdf kept as Mitsuba's (``tracer.bsdfs``: failed samples)."""
    ok = wi[2] > 0
    weight = specular * fresnel.conductor(wi[2], eta, k)
    return vm.reflect(wi), jnp.ones_like(wi[2]), vm.select(ok, weight, 0.0)


def rough_sample(wi: jax.Array, m: jax.Array, pdf_m: jax.Array, eta: jax.Array, k: jax.Array, specular: jax.Array,
                 distr: microfacet.Distribution) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Reflect wi about the normal m sampled by ``microfacet.sample(distr, wi, u2)`` (density pdf_m).

    Returns (wo, pdf, weight (3, N)) with Mitsuba's weights: F G1(wo) for visible-normal
    sampling, F G (wi.m) / (cos_i cos_m) otherwise. A failed sample (weight 0) keeps its pdf, as
    Mitsuba's does (``tracer.bsdfs``: failed samples).
    """
    wo = fresnel.reflect_about(wi, m)
    dot_wi_m = vm.dot(wi, m)
    g1_o = microfacet.smith_g1(distr, wo, m)
    weight = g1_o
    if distr.all_normals:
        g_all = microfacet.smith_g1(distr, wi, m) * g1_o * dot_wi_m / (wi[2] * m[2])
        weight = jnp.where(distr.visible, g1_o, g_all)
    ok = (wi[2] > 0) & (pdf_m != 0) & (wo[2] > 0)
    pdf = pdf_m / (4.0 * vm.dot(wo, m))  # Jacobian of the half-vector map
    f = fresnel.conductor(dot_wi_m, eta, k)
    return wo, jnp.where(jnp.isfinite(pdf), pdf, 0.0), vm.select(ok, f * weight * specular, 0.0)


def rough_eval_pdf(wi: jax.Array, wo: jax.Array, terms: microfacet.Terms, eta: jax.Array, k: jax.Array,
                   specular: jax.Array, distr: microfacet.Distribution) -> tuple[jax.Array, jax.Array]:
    """Torrance-Sparrow F D G / (4 cos_i) (cosine included) and the pdf of ``rough_sample``.

    ``terms``: ``microfacet.terms(distr, wi, wo, normalize(wi + wo))``.
    """
    h, d = terms.m, terms.d
    dot_wi_h, dot_wo_h = vm.dot(wi, h), vm.dot(wo, h)
    ok = (wi[2] > 0) & (wo[2] > 0) & (dot_wi_h > 0) & (dot_wo_h > 0)
    value = d * terms.g1_i * terms.g1_o / (4.0 * wi[2])
    f = fresnel.conductor(dot_wi_h, eta, k)
    pdf = d * terms.g1_i / (4.0 * wi[2])
    if distr.all_normals:
        pdf = jnp.where(distr.visible, pdf, d * h[2] / (4.0 * dot_wo_h))
    return vm.select(ok & (d != 0), f * value * specular, 0.0), jnp.where(ok, pdf, 0.0)
