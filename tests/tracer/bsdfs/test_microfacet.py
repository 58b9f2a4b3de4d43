"""Microfacet normal sampling by chi-square against its pdf, as Mitsuba 3 tests its
``MicrofacetDistribution`` (``src/render/tests/test_microfacet.py``).

For each case (Beckmann or GGX, visible or all normals, isotropic or not, a fixed wi) the normals
``sample`` draws must follow ``pdf`` (per unit solid angle of m), and the density ``sample``
returns with each normal must be ``pdf`` of it. The sampling routines have no inverse, so there
is no round trip to test.

Normals crowd around the pole, where the (phi, cos theta) cells of ``chi2.SphericalDomain`` are
a poor place to integrate a density: one smooth in m has an infinite slope in cos theta there,
and the trapezoid rule converges slowly (with 24 sub-points a cell it failed a correct sampler
at 250k samples). The hemisphere is binned over (phi, theta) instead, with the Jacobian sin theta.
"""
import math

import jax
import numpy as np
import pytest

from tests.helpers import chi2
from tracer.bsdfs import microfacet

SAMPLES = 250_000

sample = jax.jit(microfacet.sample)
pdf = jax.jit(microfacet.pdf)


def _unit(*v):
    v = np.asarray(v, np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


# (ggx, visible, alpha_u, alpha_v, wi)
CASES = [
    (False, True, 0.3, 0.3, _unit(0.5, 0.1, 0.6)),
    (True, True, 0.3, 0.3, _unit(0.5, 0.1, 0.6)),
    (False, True, 0.2, 0.5, _unit(-0.7, 0.4, 0.1)),   # anisotropic, near grazing
    (True, True, 0.6, 0.25, _unit(0.2, -0.9, 0.15)),
    (True, True, 1.0, 1.0, _unit(0.3, 0.3, 0.9)),
    (False, False, 0.35, 0.35, _unit(0.0, 0.0, 1.0)),
    (False, False, 0.2, 0.5, _unit(0.6, 0.2, 0.3)),
    (True, False, 0.5, 0.15, _unit(-0.3, 0.4, 0.8)),
]
IDS = [f"{'ggx' if g else 'beckmann'}-{'visible' if v else 'all'}-{au}x{av}-{i}"
       for i, (g, v, au, av, _) in enumerate(CASES)]


class HemisphereDomain:
    """The upper hemisphere parameterized by (phi, theta) in [-pi, pi] x [0, pi/2]: the area
    element is sin theta dphi dtheta, so a solid-angle density passed with it carries sin theta."""

    bounds = ((-math.pi, 0.0), (math.pi, math.pi / 2))
    aspect = 4.0

    @staticmethod
    def to_params(v):
        v = np.asarray(v, np.float64)
        return np.stack([np.arctan2(v[1], v[0]), np.arccos(np.clip(v[2], -1.0, 1.0))])

    @staticmethod
    def from_params(p):
        sin_theta = np.sin(p[1])
        return np.stack([sin_theta * np.cos(p[0]), sin_theta * np.sin(p[0]), np.cos(p[1])])


def _distribution(ggx, visible, alpha_u, alpha_v, n):
    full = lambda x, dtype=np.float32: np.full(n, x, dtype)
    return microfacet.make(full(alpha_u), full(alpha_v), full(ggx, bool), full(visible, bool))


def _sampled(case, seed):
    ggx, visible, au, av, wi = case
    u = np.random.default_rng(seed).random((2, SAMPLES), np.float32)
    wi_n = np.broadcast_to(wi[:, None], (3, SAMPLES))
    m, density = sample(_distribution(ggx, visible, au, av, SAMPLES), wi_n, u)
    return np.asarray(m), np.asarray(density)


def _density(case, visible=None):
    """``pdf`` of the case's distribution (``visible`` overrides its choice) at normals (3, P)."""
    ggx, own, au, av, wi = case
    visible = own if visible is None else visible

    def density(m):
        n = m.shape[1]
        m32 = np.asarray(m, np.float32)
        values = pdf(_distribution(ggx, visible, au, av, n), np.broadcast_to(wi[:, None], (3, n)), m32)
        return np.asarray(values, np.float64)
    return density


def _per_parameter_area(density):
    """A solid-angle density as a density per unit (phi, theta) area of ``HemisphereDomain``."""
    return lambda m: density(m) * np.sqrt(np.maximum(1.0 - np.asarray(m[2], np.float64) ** 2, 0.0))


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_normals_follow_the_pdf(i):
    case = CASES[i]
    m, density = _sampled(case, seed=i + 1)
    ok = density > 0
    assert ok.mean() > 0.999
    np.testing.assert_allclose(np.linalg.norm(m[:, ok], axis=0), 1.0, atol=1e-5)
    assert np.all(m[2, ok] >= 0)
    result = chi2.chi2_test(m[:, ok], _per_parameter_area(_density(case)), SAMPLES, HemisphereDomain(), res=20,
                            ires=8, test_count=len(CASES))
    assert result.passed, result.message


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_sampled_density_is_the_pdf(i):
    case = CASES[i]
    m, density = _sampled(case, seed=100)
    ok = density > 0
    np.testing.assert_allclose(density[ok], _density(case)(m[:, ok]), rtol=1e-4)


def test_chi2_rejects_a_wrong_density():
    """Power: visible normals seen from near grazing are not distributed as all normals are."""
    case = CASES[2]
    m, density = _sampled(case, seed=7)
    ok = density > 0
    wrong = _per_parameter_area(_density(case, visible=False))
    assert not chi2.chi2_test(m[:, ok], wrong, SAMPLES, HemisphereDomain(), res=20, ires=8).passed
