"""Smooth, rough and thin dielectrics, as Mitsuba 3's ``dielectric``, ``roughdielectric`` and
``thindielectric`` plugins. They are two-sided: wi may lie on either side (z < 0 is inside).

``eta`` (N,) is the relative IOR interior / exterior; ``spec_r`` and ``spec_t`` (3, N) the
``specular_reflectance`` / ``specular_transmittance`` factors. Radiance transport: refracted
weights carry the (eta_t / eta_i)^-2 solid-angle compression factor.
"""
import jax
import jax.numpy as jnp

from tracer import vecmath as vm
from tracer.bsdfs import fresnel, microfacet

__all__ = ["smooth_sample", "thin_sample", "half_vector", "sampling_distribution", "rough_sample",
           "rough_eval_pdf"]


def smooth_sample(wi: jax.Array, u1: jax.Array, eta: jax.Array, spec_r: jax.Array,
                  spec_t: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Choose reflection with probability F, else refraction.

    Returns (wo, pdf, weight (3, N), eta_sampled, reflected); the pdf is the lobe probability.
    """
    r, cos_t, eta_it, eta_ti = fresnel.dielectric(wi[2], eta)
    reflected = u1 <= r
    refracted = jnp.stack([-eta_ti * wi[0], -eta_ti * wi[1], cos_t])
    wo = vm.select(reflected, vm.reflect(wi), refracted)
    pdf = jnp.where(reflected, r, 1.0 - r)
    weight = vm.select(reflected, spec_r, spec_t * (eta_ti * eta_ti))
    return wo, pdf, weight, jnp.where(reflected, 1.0, eta_it), reflected


def thin_sample(wi: jax.Array, u1: jax.Array, eta: jax.Array, spec_r: jax.Array,
                spec_t: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A thin slab: reflection with the summed inter-reflections R' = 2R / (1 + R), else straight
    through (Mitsuba's null transmission). Returns (wo, pdf, weight (3, N))."""
    r = fresnel.dielectric(jnp.abs(wi[2]), eta)[0]
    r = r * 2.0 / (1.0 + r)
    reflected = u1 <= r
    wo = vm.select(reflected, vm.reflect(wi), -wi)
    return wo, jnp.where(reflected, r, 1.0 - r), vm.select(reflected, spec_r, spec_t)


def half_vector(wi: jax.Array, wo: jax.Array, eta: jax.Array) -> jax.Array:
    """Generalized half vector (Walter et al. 2007, eq. 16), turned into the upper hemisphere."""
    cos_i = wi[2]
    reflect = cos_i * wo[2] > 0
    eta_ = jnp.where(cos_i > 0, eta, 1.0 / eta)
    m = vm.normalize(wi + wo * jnp.where(reflect, 1.0, eta_))
    return m * jnp.where(m[2] >= 0, 1.0, -1.0)


def sampling_distribution(distr: microfacet.Distribution, wi: jax.Array) -> microfacet.Distribution:
    """The distribution ``rough_sample`` draws normals from: Walter et al.'s roughness widening
    (1.2 - 0.2 sqrt|cos_i|) when all normals are sampled; the visible normals need none."""
    if not distr.all_normals:
        return distr
    scale = jnp.where(distr.visible, 1.0, 1.2 - 0.2 * jnp.sqrt(jnp.abs(wi[2])))
    return microfacet.scale_alpha(distr, scale)


def rough_sample(wi: jax.Array, u1: jax.Array, m: jax.Array, pdf_m: jax.Array, eta: jax.Array, spec_r: jax.Array,
                 spec_t: jax.Array,
                 distr: microfacet.Distribution) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Reflect or refract about the normal m drawn by
    ``microfacet.sample(sampling_distribution(distr, wi), wi flipped up, u2)`` (density pdf_m);
    reflection with probability F(wi.m).

    Returns (wo, pdf, weight (3, N), eta_sampled, reflected), weights as Mitsuba's.
    """
    cos_i = wi[2]
    dot_wi_m = vm.dot(wi, m)
    f, cos_t, eta_it, eta_ti = fresnel.dielectric(dot_wi_m, eta)
    ok = (cos_i != 0) & (pdf_m != 0)
    reflected = (u1 <= f) & ok
    eta_out = jnp.where(reflected, 1.0, eta_it)
    wo = vm.select(reflected, fresnel.reflect_about(wi, m), fresnel.refract(wi, m, cos_t, eta_ti))
    dot_wo_m = vm.dot(wo, m)
    weight = vm.select(reflected, spec_r, spec_t * (eta_ti * eta_ti))
    dwh_dwo = jnp.where(reflected, 1.0 / (4.0 * dot_wo_m),
                        (eta_out * eta_out * dot_wo_m) / (dot_wi_m + eta_out * dot_wo_m) ** 2)
    g1_o = microfacet.smith_g1(distr, wo, m)
    shadowing = g1_o
    if distr.all_normals:
        # Mitsuba 3 omits D / D_widened here, so its all-normals weights are slightly biased;
        # kept so that images match.
        g_all = microfacet.smith_g1(distr, wi, m) * g1_o * dot_wi_m / (cos_i * m[2])
        shadowing = jnp.where(distr.visible, g1_o, g_all)
    pdf = pdf_m * jnp.where(reflected, f, 1.0 - f) * jnp.abs(dwh_dwo)
    return wo, jnp.where(ok, pdf, 0.0), vm.select(ok, weight * shadowing, 0.0), eta_out, reflected


def rough_eval_pdf(wi: jax.Array, wo: jax.Array, terms: microfacet.Terms, eta: jax.Array, spec_r: jax.Array,
                   spec_t: jax.Array, distr: microfacet.Distribution) -> tuple[jax.Array, jax.Array]:
    """Walter et al.'s rough dielectric BSDF (cosine included) and the pdf of ``rough_sample``.

    ``terms``: ``microfacet.terms(distr, wi, wo, half_vector(wi, wo, eta))``.
    """
    cos_i, cos_o = wi[2], wo[2]
    m, d = terms.m, terms.d
    reflect = cos_i * cos_o > 0
    eta_ = jnp.where(cos_i > 0, eta, 1.0 / eta)
    dot_wi_m, dot_wo_m = vm.dot(wi, m), vm.dot(wo, m)
    ok = (cos_i != 0) & (dot_wi_m * cos_i > 0) & (dot_wo_m * cos_o > 0)
    f = fresnel.dielectric(dot_wi_m, eta)[0]
    dg = d * terms.g1_i * terms.g1_o
    value_r = f * dg / (4.0 * jnp.abs(cos_i))
    # The (eta_o / eta_i)^2 radiance scale cancels the eta^2 of the half-vector Jacobian.
    denom = dot_wi_m + eta_ * dot_wo_m
    value_t = jnp.abs((1.0 - f) * dg * dot_wi_m * dot_wo_m / (cos_i * denom * denom))
    value = vm.select(reflect, spec_r * value_r, spec_t * value_t)

    wi_up = vm.upper_hemisphere(wi)
    if distr.all_normals:
        sample_distr = sampling_distribution(distr, wi)
        prob = microfacet.pdf(sample_distr, wi_up, m)
    else:
        prob = d * terms.g1_i * jnp.abs(vm.dot(wi_up, m)) / wi_up[2]
    prob = prob * jnp.where(reflect, f, 1.0 - f)
    dwh_dwo = jnp.where(reflect, 1.0 / (4.0 * dot_wo_m), (eta_ * eta_ * dot_wo_m) / (denom * denom))
    return vm.select(ok, value, 0.0), jnp.where(ok, prob * jnp.abs(dwh_dwo), 0.0)
