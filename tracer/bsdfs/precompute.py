"""Host-side (numpy, float64) tables of Mitsuba 3's ``roughplastic`` plugin.

Mitsuba integrates the rough coating's transmittance at load time (``eval_transmittance`` and
``eval_reflectance`` in ``render/microfacet.h``): visible normals are drawn at Gauss-Legendre
nodes of the unit square (32^2 when the relative IOR exceeds 1, else 128^2), for 64 incident
cosines. This module repeats that quadrature node for node, so the tables agree with Mitsuba's
to float32 rounding.
"""
from typing import SupportsFloat

import numpy as np

__all__ = ["RES", "rough_transmittance"]

RES = 64  # MI_ROUGH_TRANSMITTANCE_RES

# Dr.Jit's erf fits (double precision): a polynomial in x^2 on [0, 1], exp2 of a rational in |x| above.
_ERF_C0 = [float.fromhex(h) for h in (
    "0x1.20dd750429b6dp+0", "-0x1.812746b0379bcp-2", "0x1.ce2f21a040d12p-4", "-0x1.b82ce311fa924p-6",
    "0x1.565bccf92b298p-8", "-0x1.c02db03dd71b8p-11", "0x1.f9a2baa8fee07p-14", "-0x1.f4ca4d6f3e31bp-17",
    "0x1.b97fd3d992af4p-20", "-0x1.5c0726f04e805p-23", "0x1.d71b0f1b15b0ap-27", "-0x1.abae491c540bp-31")]
_ERF_NUM = [float.fromhex(h) for h in (
    "-0x1.a0be83b09c3d7p+0", "-0x1.8bb29648c7afep+1", "-0x1.639eb89a5975p+1", "-0x1.7b48b8cd14d9fp+0",
    "-0x1.fb25a03ddc781p-2", "-0x1.9cdb7dcacdfb3p-4", "-0x1.64f7fbe544f07p-7", "-0x1.9a3c3874b3919p-12")]
_ERF_DEN = [float.fromhex(h) for h in (
    "0x1p+0", "0x1.55b5d06f1c2dep+0", "0x1.b998ffae5528ep-1", "0x1.46884d56cb49bp-2",
    "0x1.18e8848a2cc38p-4", "0x1.ee7f90e8d480cp-8", "0x1.1c6a194029df4p-12", "-0x1.03d1306b29028p-31")]
# Giles 2010, "Approximating the erfinv function" (single precision), as Dr.Jit's erfinv.
_ERFINV_1 = [1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087, -4.39150654e-06,
             -3.5233877e-06, 3.43273939e-07, 2.81022636e-08]
_ERFINV_2 = [2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844,
             0.00134934322, 0.000100950558, -0.000200214257]
_INV_SQRT_PI = 1.0 / np.sqrt(np.pi)


def _poly(x, coeffs):
    return np.polynomial.polynomial.polyval(x, coeffs)


def erf(x):
    xa = np.abs(x)
    tail = 1.0 - np.exp2(_poly(xa, _ERF_NUM) / _poly(xa, _ERF_DEN) * xa)
    tail = np.where(np.isfinite(tail), tail, 1.0)
    return np.where(xa < 1.0, x * _poly(x * x, _ERF_C0), np.copysign(tail, x))


def erfinv(x):
    w = -np.log((1.0 - x) * (1.0 + x))
    p1 = _poly(w - 2.5, _ERFINV_1)
    p2 = _poly(np.sqrt(w) - 3.0, _ERFINV_2)
    return np.where(w < 5.0, p1, p2) * x


def _safe_sqrt(x):
    return np.sqrt(np.maximum(x, 0.0))


def _visible_11(cos_theta_i, u0, u1, ggx):
    """Slopes of visible normals for alpha = 1 (microfacet.h's ``sample_visible_11``)."""
    if ggx:
        x, y = 2.0 * u0 - 1.0, 2.0 * u1 - 1.0
        first = np.abs(x) >= np.abs(y)
        r = np.where(first, x, y)
        phi = np.where(first, 0.25 * np.pi * y / x, 0.5 * np.pi - 0.25 * np.pi * x / y)
        phi = np.where((x == 0) & (y == 0), 0.0, phi)
        px, py = r * np.cos(phi), r * np.sin(phi)
        s = 0.5 * (1.0 + cos_theta_i)
        py = _safe_sqrt(1.0 - px * px) * (1.0 - s) + py * s
        pz = _safe_sqrt(1.0 - px * px - py * py)
        sin_theta_i = _safe_sqrt(1.0 - cos_theta_i * cos_theta_i)
        norm = 1.0 / (sin_theta_i * py + cos_theta_i * pz)
        return (cos_theta_i * py - sin_theta_i * pz) * norm, px * norm
    tan_theta_i = _safe_sqrt(1.0 - cos_theta_i * cos_theta_i) / cos_theta_i
    cot_theta_i = 1.0 / tan_theta_i
    maxval = erf(cot_theta_i)
    u0 = np.clip(u0, 1e-6, 1.0 - 1e-6)
    u1 = np.clip(u1, 1e-6, 1.0 - 1e-6)
    x = maxval - (maxval + 1.0) * erf(np.sqrt(-np.log(u0)))
    target = u0 * (1.0 + maxval + _INV_SQRT_PI * tan_theta_i * np.exp(-cot_theta_i * cot_theta_i))
    for _ in range(3):
        slope = erfinv(x)
        value = 1.0 + x + _INV_SQRT_PI * tan_theta_i * np.exp(-slope * slope) - target
        x = x - value / (1.0 - slope * tan_theta_i)
    return erfinv(x), erfinv(2.0 * u1 - 1.0)


def _smith_g1(v, m, alpha, ggx):
    xy_alpha_2 = alpha * alpha * (v[0] ** 2 + v[1] ** 2)
    tan_2 = xy_alpha_2 / (v[2] * v[2])
    if ggx:
        result = 2.0 / (1.0 + np.sqrt(1.0 + tan_2))
    else:
        a = 1.0 / np.sqrt(tan_2)
        result = np.where(a >= 1.6, 1.0, (3.535 * a + 2.181 * a * a) / (1.0 + 2.276 * a + 2.577 * a * a))
    result = np.where(xy_alpha_2 == 0, 1.0, result)
    return np.where((v * m).sum(0) * v[2] <= 0, 0.0, result)


def _fresnel(cos_theta_i, eta):
    """(F, cos_theta_t, eta_ti) of ``fresnel.dielectric`` in float64."""
    outside = cos_theta_i >= 0
    eta_it = np.where(outside, eta, 1.0 / eta)
    eta_ti = 1.0 / eta_it
    cos_t = _safe_sqrt(1.0 - (1.0 - cos_theta_i ** 2) * eta_ti ** 2)
    cos_i = np.abs(cos_theta_i)
    a_s = (cos_i - eta_it * cos_t) / (cos_i + eta_it * cos_t)
    a_p = (cos_t - eta_it * cos_i) / (cos_t + eta_it * cos_i)
    r = np.where(cos_i == 0, 1.0, 0.5 * (a_s ** 2 + a_p ** 2))
    return r, np.where(outside, -cos_t, cos_t), eta_ti


def _quadrature(wi, alpha, ggx, eta, transmit):
    """sum over the visible-normal quadrature of G1(wo) (1 - F) (transmit) or G1(wo) F (reflect)."""
    res = 32 if eta > 1 else 128
    nodes, weights = np.polynomial.legendre.leggauss(res)
    u0, u1 = [a.ravel()[None, :] * 0.5 + 0.5 for a in np.meshgrid(nodes, nodes)]
    w = np.outer(weights, weights).ravel()[None, :] * 0.25
    wi = [c[:, None] for c in wi]
    # Stretch (isotropic roughness, wi in the xz-plane: no rotation), sample, unstretch.
    stretched = np.sqrt((alpha * wi[0]) ** 2 + wi[2] ** 2)
    sx, sy = _visible_11(wi[2] / stretched, u0, u1, ggx)
    m = np.stack(np.broadcast_arrays(-alpha * sx, -alpha * sy, np.ones_like(sx)))
    m = m / np.sqrt((m * m).sum(0))
    wi = np.stack(np.broadcast_arrays(*wi))
    dot_wi_m = (wi * m).sum(0)
    f, cos_t, eta_ti = _fresnel(dot_wi_m, eta)
    if transmit:
        wo = m * (dot_wi_m * eta_ti + cos_t) - wi * eta_ti
        value = np.where(wo[2] * wi[2] >= 0, 0.0, _smith_g1(wo, m, alpha, ggx) * (1.0 - f))
    else:
        wo = 2.0 * dot_wi_m * m - wi
        value = np.where((wo[2] <= 0) | (wi[2] <= 0), 0.0, _smith_g1(wo, m, alpha, ggx) * f)
    return (value * w).sum(1)


def rough_transmittance(alpha: SupportsFloat, eta: SupportsFloat, ggx: bool) -> tuple[np.ndarray, float]:
    """(table (RES,), internal reflectance): the coating's external transmittance at cos(theta) =
    linspace(0, 1, RES) and its cosine-weighted internal diffuse reflectance."""
    with np.errstate(all="ignore"):  # grazing and normal incidence divide by zero on purpose
        return _rough_transmittance(alpha, eta, ggx)


def _rough_transmittance(alpha: SupportsFloat, eta: SupportsFloat, ggx: bool) -> tuple[np.ndarray, float]:
    alpha = max(float(alpha), 1e-4)
    eta = float(eta)
    mu = np.maximum(1e-6, np.linspace(0.0, 1.0, RES))
    wi = (np.sqrt(1.0 - mu * mu), np.zeros(RES), mu)
    table = _quadrature(wi, alpha, ggx, eta, transmit=True)
    internal = 2.0 * np.mean(_quadrature(wi, alpha, ggx, 1.0 / eta, transmit=False) * mu)
    return table, internal
