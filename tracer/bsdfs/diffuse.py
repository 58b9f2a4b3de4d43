"""Lambertian reflection, as Mitsuba 3's ``diffuse`` plugin (one-sided).

All directions are local (3, N) with z along the shading normal; values include cos(theta_o).
"""
import jax
import jax.numpy as jnp

from tracer import sampling
from tracer import vecmath as vm

__all__ = ["sample", "eval_pdf"]


def sample(wi: jax.Array, u2: jax.Array, reflectance: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Cosine-weighted hemisphere sample. Returns (wo, pdf, weight (3, N)); weight = reflectance.
    A sample failed for wi below keeps its direction and pdf, as Mitsuba's: a blend above counts
    them (``tracer.bsdfs``: failed samples)."""
    wo = sampling.square_to_cosine_hemisphere(u2)
    pdf = sampling.INV_PI * wo[2]
    ok = (wi[2] > 0) & (pdf > 0)
    return wo, pdf, vm.select(ok, reflectance, 0.0)


def eval_pdf(wi: jax.Array, wo: jax.Array, reflectance: jax.Array) -> tuple[jax.Array, jax.Array]:
    """f(wi, wo) cos(theta_o) = reflectance cos(theta_o) / pi, and the pdf of ``sample``."""
    ok = (wi[2] > 0) & (wo[2] > 0)
    pdf = jnp.where(ok, sampling.INV_PI * wo[2], 0.0)
    return vm.select(ok, reflectance * pdf, 0.0), pdf
