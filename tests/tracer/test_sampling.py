"""Every warp of ``tracer.sampling`` by chi-square against its density, as Mitsuba 3 tests its own
(``src/core/tests/test_warp.py``), and round trips where a warp has an inverse.

Each warp's samples must land in its domain and follow its pdf: the module's pdf function where it
has one, else the density its docstring states (the concentric disk: 1/pi; the triangle: uniform).
Only ``sample_discrete`` has an inverse to round-trip (its rescaled uniform maps back to u); the
other warps come without one.
Planar domains are parameterized so that their cells are rectangles (the chi-square helper
integrates the density over cells with a trapezoid rule, which a cell cut by the disk's rim or the
triangle's hypotenuse would defeat). Each test has power: a wrong density is rejected.
"""
import math

import jax
import numpy as np
import pytest

from tests.helpers import chi2
from tracer import sampling

SAMPLES = 400_000
CHI2_TESTS = 5  # chi-square tests of correct densities in this module (Sidak correction)
EDGE = np.float32(1.0 - 2.0**-24)  # the largest float32 uniform below 1

disk = jax.jit(sampling.square_to_uniform_disk_concentric)
cosine = jax.jit(sampling.square_to_cosine_hemisphere)
cosine_pdf = jax.jit(sampling.square_to_cosine_hemisphere_pdf)
sphere = jax.jit(sampling.square_to_uniform_sphere)
sphere_pdf = jax.jit(sampling.square_to_uniform_sphere_pdf)
triangle = jax.jit(sampling.square_to_uniform_triangle)
discrete = jax.jit(sampling.sample_discrete)


def _uniforms(seed, n=SAMPLES):
    return np.random.default_rng(seed).random((2, n), np.float32)


def _corners():
    """The unit square's corners and edge midpoints, as the warps meet them (u < 1)."""
    v = np.float32([0.0, 0.5, EDGE])
    return np.stack(np.meshgrid(v, v)).reshape(2, -1)


class DiskDomain:
    """The unit disk, parameterized by (phi, r^2 / 2) in [-pi, pi] x [0, 1/2]: area-preserving
    (dA = r dr dphi = d(r^2/2) dphi), so an area density needs no Jacobian."""

    bounds = ((-math.pi, 0.0), (math.pi, 0.5))
    aspect = 2.0

    @staticmethod
    def to_params(p):
        p = np.asarray(p, np.float64)
        return np.stack([np.arctan2(p[1], p[0]), 0.5 * (p[0] ** 2 + p[1] ** 2)])

    @staticmethod
    def from_params(q):
        r = np.sqrt(2.0 * q[1])
        return np.stack([r * np.cos(q[0]), r * np.sin(q[0])])


class TriangleDomain:
    """Barycentrics (b1, b2), b1 + b2 <= 1, parameterized by (b1, s = b2 / (1 - b1)) in [0, 1]^2.
    The area element is (1 - b1) db1 ds: a density per unit parameter area is the density per
    unit (b1, b2) area times (1 - b1)."""

    bounds = ((0.0, 0.0), (1.0, 1.0))
    aspect = 1.0

    @staticmethod
    def to_params(b):
        b = np.asarray(b, np.float64)
        return np.stack([b[0], b[1] / np.maximum(1.0 - b[0], 1e-300)])

    @staticmethod
    def from_params(q):
        return np.stack([q[0], q[1] * (1.0 - q[0])])


# ---------------------------------------------------------------- the concentric disk
def test_disk_samples_are_uniform_on_the_unit_disk():
    p = np.asarray(disk(_uniforms(1)))
    assert p.shape == (2, SAMPLES) and np.all(p[0] ** 2 + p[1] ** 2 <= 1.0 + 1e-6)
    result = chi2.chi2_test(p, lambda q: np.full(q.shape[1], 1.0 / np.pi), SAMPLES, DiskDomain(), res=40,
                            ires=4, test_count=CHI2_TESTS)
    assert result.passed, result.message


def test_disk_maps_the_square_onto_the_disk_continuously():
    """Corners go to the rim, the center to the origin; the square's boundary to the unit circle."""
    c = np.asarray(disk(_corners()))
    r = np.hypot(c[0], c[1]).reshape(3, 3)
    assert r[1, 1] == 0.0
    np.testing.assert_allclose(np.delete(r.ravel(), 4), 1.0, atol=1e-6)
    t = np.linspace(0, EDGE, 101, dtype=np.float32)
    zero, one = np.zeros_like(t), np.full_like(t, EDGE)
    edges = np.concatenate([np.stack([t, zero]), np.stack([one, t]), np.stack([t, one]), np.stack([zero, t])], axis=1)
    rim = np.asarray(disk(edges))
    np.testing.assert_allclose(np.hypot(rim[0], rim[1]), 1.0, atol=1e-6)


def test_disk_chi2_rejects_a_wrong_density():
    """Power: the polar map r = u0 puts too many samples near the center to pass as uniform."""
    u = _uniforms(2)
    r, phi = u[0], 2 * np.pi * u[1]
    wrong = np.stack([r * np.cos(phi), r * np.sin(phi)])
    assert not chi2.chi2_test(wrong, lambda q: np.full(q.shape[1], 1.0 / np.pi), SAMPLES, DiskDomain(),
                              res=40, ires=4).passed


# ---------------------------------------------------------------- directions
@pytest.mark.parametrize("warp, pdf, upper", [(cosine, cosine_pdf, True), (sphere, sphere_pdf, False)],
                         ids=["cosine_hemisphere", "uniform_sphere"])
def test_directions_follow_their_pdf(warp, pdf, upper):
    d = np.asarray(warp(_uniforms(3)))
    np.testing.assert_allclose(np.linalg.norm(d, axis=0), 1.0, atol=2e-6)
    if upper:
        assert np.all(d[2] >= 0)
    density = lambda v: np.asarray(pdf(np.asarray(v, np.float32)), np.float64)
    result = chi2.chi2_test(d, density, SAMPLES, res=40, ires=6, test_count=CHI2_TESTS)
    assert result.passed, result.message


@pytest.mark.parametrize("pdf, expected", [
    (cosine_pdf, lambda d: np.maximum(d[2], 0.0) / np.pi),
    (sphere_pdf, lambda d: np.full(d.shape[1], 0.25 / np.pi)),
], ids=["cosine_hemisphere", "uniform_sphere"])
def test_direction_pdfs_are_the_analytic_densities(pdf, expected):
    d = np.random.default_rng(4).normal(size=(3, 1000))
    d = (d / np.linalg.norm(d, axis=0)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(pdf(d)), expected(d), rtol=1e-6)


@pytest.mark.parametrize("warp", [cosine, sphere, disk, triangle], ids=["cosine", "sphere", "disk", "triangle"])
def test_warps_are_finite_on_the_square_boundary(warp):
    assert np.all(np.isfinite(np.asarray(warp(_corners()))))


def test_direction_chi2_rejects_a_wrong_density():
    """Power: uniform-sphere samples are not cosine-distributed."""
    d = np.array(sphere(_uniforms(5)))
    d[2] = np.abs(d[2])
    assert not chi2.chi2_test(d, lambda v: np.asarray(cosine_pdf(np.asarray(v, np.float32)), np.float64),
                              SAMPLES, res=40, ires=6).passed


# ---------------------------------------------------------------- the triangle
def _uniform_triangle(b):
    """The uniform density on the triangle (2 per unit (b1, b2) area) per unit TriangleDomain area."""
    return 2.0 * (1.0 - b[0])


def test_triangle_barycentrics_are_uniform():
    b = np.asarray(triangle(_uniforms(6)))
    assert np.all(b >= 0) and np.all(b[0] + b[1] <= 1.0 + 1e-6)
    result = chi2.chi2_test(b, _uniform_triangle, SAMPLES, TriangleDomain(), res=40, ires=4, test_count=CHI2_TESTS)
    assert result.passed, result.message


def test_triangle_chi2_rejects_a_wrong_density():
    """Power: b1 = 1 - u0 (no square root) crowds the samples towards the b1 = 1 corner."""
    u = _uniforms(7)
    wrong = np.stack([1.0 - u[0], u[0] * u[1]])
    assert not chi2.chi2_test(wrong, _uniform_triangle, SAMPLES, TriangleDomain(), res=40, ires=4).passed


# ---------------------------------------------------------------- discrete
CDF = np.cumsum(np.float32([0.05, 0.0, 0.3, 0.15, 0.2, 0.0, 0.1, 0.2])).astype(np.float32)
CDF[-1] = 1.0


def test_discrete_index_brackets_u_and_the_reused_uniform_round_trips():
    """``sample_discrete`` picks i with cdf[i-1] <= u < cdf[i] (never a bin of zero mass), and its
    rescaled uniform maps back to u: cdf[i-1] + u' (cdf[i] - cdf[i-1]) = u."""
    u = _uniforms(8)[0]
    u[:4] = [0.0, CDF[0], CDF[2], EDGE]  # bin edges: the next non-empty bin
    idx, reused = (np.asarray(x) for x in discrete(CDF, u))
    lo = np.where(idx > 0, CDF[np.maximum(idx - 1, 0)], 0.0)
    hi = CDF[idx]
    assert np.all((lo <= u) & (u < hi))
    assert np.all((reused >= 0) & (reused < 1))
    np.testing.assert_allclose(lo + reused * (hi - lo), u, atol=2e-7)


def test_discrete_frequencies_follow_the_pmf():
    u = _uniforms(9)[0]
    idx, _ = discrete(CDF, u)
    observed = np.bincount(np.asarray(idx), minlength=CDF.size)
    expected = np.diff(CDF, prepend=0.0).astype(np.float64) * SAMPLES
    assert np.all(observed[expected == 0] == 0)
    keep = expected > 0
    statistic = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    level = 1.0 - 0.99 ** (1.0 / CHI2_TESTS)
    assert chi2.chi2_upper_tail(statistic, int(keep.sum()) - 1) >= level, statistic
