"""Fresnel equations for unpolarized light, as Mitsuba 3's ``render/fresnel.h``.

Cosines are (N,) or (3, N); ``eta`` is the relative index of refraction inside / outside
(> 1 when the normal points into the less dense medium), broadcast against them.
"""
import jax
import jax.numpy as jnp
import numpy as np

from tracer import vecmath as vm

__all__ = ["dielectric", "conductor", "refract", "reflect_about", "diffuse_reflectance"]


def dielectric(cos_theta_i: jax.Array, eta: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Reflectance at a dielectric interface and the refracted cosine.

    Returns ``(r, cos_theta_t, eta_it, eta_ti)``: r the Fresnel reflectance; cos_theta_t the
    signed cosine of the refracted direction (opposite side to the incident one, 0 under total
    internal reflection); eta_it the relative IOR in the direction of travel and eta_ti its
    reciprocal, the scale of the refracted direction's tangential part.
    """
    outside = cos_theta_i >= 0
    rcp_eta = 1.0 / eta
    eta_it = jnp.where(outside, eta, rcp_eta)
    eta_ti = jnp.where(outside, rcp_eta, eta)
    cos_theta_t_sqr = 1.0 - (1.0 - cos_theta_i * cos_theta_i) * (eta_ti * eta_ti)
    cos_i = jnp.abs(cos_theta_i)
    cos_t = vm.safe_sqrt(cos_theta_t_sqr)
    a_s = (cos_i - eta_it * cos_t) / (cos_i + eta_it * cos_t)
    a_p = (cos_t - eta_it * cos_i) / (cos_t + eta_it * cos_i)
    r = 0.5 * (a_s * a_s + a_p * a_p)
    index_matched = eta == 1.0
    r = jnp.where(index_matched | (cos_i == 0), jnp.where(index_matched, 0.0, 1.0), r)
    cos_theta_t = jnp.where(cos_theta_i >= 0, -cos_t, cos_t)
    return r, cos_theta_t, eta_it, eta_ti


def conductor(cos_theta_i: jax.Array, eta: jax.Array, k: jax.Array) -> jax.Array:
    """Reflectance of a conductor with complex IOR eta + i k (light arriving from outside).

    Moeller, "Optics" (1988), in Mitsuba's form; broadcasts (N,) cosines over (3, N) IORs.
    """
    cos2 = cos_theta_i * cos_theta_i
    sin2 = 1.0 - cos2
    sin4 = sin2 * sin2
    temp1 = eta * eta - k * k - sin2
    a2pb2 = vm.safe_sqrt(temp1 * temp1 + 4.0 * k * k * eta * eta)
    a = vm.safe_sqrt(0.5 * (a2pb2 + temp1))
    term1 = a2pb2 + cos2
    term2 = 2.0 * cos_theta_i * a
    r_s = (term1 - term2) / (term1 + term2)
    term3 = a2pb2 * cos2 + sin4
    term4 = term2 * sin2
    r_p = r_s * (term3 - term4) / (term3 + term4)
    return 0.5 * (r_s + r_p)


def refract(wi: jax.Array, m: jax.Array, cos_theta_t: jax.Array, eta_ti: jax.Array) -> jax.Array:
    """Refract local directions wi (3, N) about normals m (3, N); cosines from ``dielectric``."""
    return m * (vm.dot(wi, m) * eta_ti + cos_theta_t) - wi * eta_ti


def reflect_about(wi: jax.Array, m: jax.Array) -> jax.Array:
    """Mirror wi (3, N) about the unit normals m (3, N)."""
    return m * (2.0 * vm.dot(wi, m)) - wi


def diffuse_reflectance(eta: float) -> float:
    """Fdr: the fraction of diffuse (cosine-weighted) light reflected at a dielectric boundary.

    Host-side numpy, float64. Mitsuba's fits: Egan & Hilgeman (1973) for eta < 1, d'Eon & Irving
    (2011) otherwise.
    """
    eta = np.float64(eta)
    if eta < 1.0:
        return -1.4399 * eta * eta + 0.7099 * eta + 0.6681 + 0.0636 / eta
    inv = 1.0 / eta
    return (0.919317 - 3.4793 * inv + 6.75335 * inv ** 2 - 7.80989 * inv ** 3
            + 4.98554 * inv ** 4 - 1.36881 * inv ** 5)
