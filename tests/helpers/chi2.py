"""Pearson's chi-square goodness-of-fit test of a sampling routine against its density.

The same test as Mitsuba 3's ``mitsuba/python/chi2.py``: samples are binned on a grid over a
2D parameterization of the target domain; the expected count of each cell is the density
integrated over the cell (trapezoid rule on an ``ires`` x ``ires`` sub-grid) times the number
of samples drawn; cells expecting fewer than 5 samples are pooled; the p-value is the
upper tail of the chi-square distribution. Numpy only, so any test can use it::

    result = chi2_test(directions, pdf, sample_count, SphericalDomain())
    assert result.passed, result.message

``directions`` are the samples that landed in the domain (failed or delta samples left out:
the density then integrates to less than one, and so do the counts).
"""
import dataclasses
import math

import numpy as np

__all__ = ["SphericalDomain", "Chi2Result", "chi2_test", "chi2_upper_tail"]


class SphericalDomain:
    """Unit directions parameterized by (phi, cos theta) in [-pi, pi] x [-1, 1]; this map preserves
    area, so a solid-angle density needs no Jacobian."""

    bounds = ((-math.pi, -1.0), (math.pi, 1.0))
    aspect = 2.0  # cells in phi per cell in cos theta

    @staticmethod
    def to_params(v):
        v = np.asarray(v, np.float64)
        return np.stack([np.arctan2(v[1], v[0]), np.clip(v[2], -1.0, 1.0)])

    @staticmethod
    def from_params(p):
        sin_theta = np.sqrt(np.maximum(1.0 - p[1] * p[1], 0.0))
        return np.stack([sin_theta * np.cos(p[0]), sin_theta * np.sin(p[0]), p[1]])


@dataclasses.dataclass(frozen=True)
class Chi2Result:
    passed: bool
    p_value: float
    statistic: float
    dof: int
    message: str


def _histogram(params, res, bounds):
    (x0, y0), (x1, y1) = bounds
    ix = np.clip(((params[0] - x0) / (x1 - x0) * res[0]).astype(np.int64), 0, res[0] - 1)
    iy = np.clip(((params[1] - y0) / (y1 - y0) * res[1]).astype(np.int64), 0, res[1] - 1)
    return np.bincount(iy * res[0] + ix, minlength=res[0] * res[1]).astype(np.float64)


def _integrate(pdf, domain, res, ires):
    """The density integrated over each cell (trapezoid rule), flattened like the histogram."""
    (x0, y0), (x1, y1) = domain.bounds
    cell = np.array([(x1 - x0) / res[0], (y1 - y0) / res[1]])
    # Sub-grid points slightly inside each cell, as Mitsuba (keeps off discontinuities on edges).
    t = (np.arange(ires) + 1e-4) * (1 - 2e-4) / (ires - 1)
    xs = x0 + (np.arange(res[0])[:, None] + t[None, :]) * cell[0]
    ys = y0 + (np.arange(res[1])[:, None] + t[None, :]) * cell[1]
    px = np.broadcast_to(xs[None, :, None, :], (res[1], res[0], ires, ires))
    py = np.broadcast_to(ys[:, None, :, None], (res[1], res[0], ires, ires))
    values = np.asarray(pdf(domain.from_params(np.stack([px.ravel(), py.ravel()]))), np.float64)
    values = values.reshape(res[1], res[0], ires, ires)
    w = np.ones(ires)
    w[0] = w[-1] = 0.5
    weights = np.outer(w, w) * (cell[0] * cell[1] / (ires - 1) ** 2)
    return (values * weights).sum(axis=(2, 3)).ravel()


def _pooled_statistic(observed, expected, min_expected=5.0):
    """Chi-square statistic and degrees of freedom, pooling low-expectation cells."""
    order = np.argsort(expected, kind="stable")
    observed, expected = observed[order], expected[order]
    chi2, cells = 0.0, 0
    pool_obs = pool_exp = 0.0
    for o, e in zip(observed, expected):
        if e == 0:
            continue
        if e < min_expected:
            pool_obs += o
            pool_exp += e
            if pool_exp >= min_expected:
                chi2 += (pool_obs - pool_exp) ** 2 / pool_exp
                cells += 1
                pool_obs = pool_exp = 0.0
        else:
            chi2 += (o - e) ** 2 / e
            cells += 1
    if pool_exp > 0:
        chi2 += (pool_obs - pool_exp) ** 2 / pool_exp
        cells += 1
    return chi2, cells - 1


def chi2_upper_tail(statistic, dof):
    """P(X >= statistic) for X ~ chi-square(dof): the regularized upper incomplete gamma Q(dof/2, x/2)."""
    a, x = 0.5 * dof, 0.5 * statistic
    if x <= 0:
        return 1.0
    log_prefix = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:  # series for the lower function P
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= x / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    # Lentz's continued fraction for Q.
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(log_prefix) * h


def chi2_test(samples, pdf, sample_count, domain=None, res=64, ires=4, significance=0.01, test_count=1):
    """Test that ``samples`` (3, K) -- the successful ones of ``sample_count`` draws -- follow ``pdf``.

    ``pdf(points (3, P)) -> (P,)`` is the density on the target domain. ``significance`` is
    Šidák-corrected for ``test_count`` tests. Fails on samples in cells of zero density too.
    """
    domain = domain or SphericalDomain()
    grid = (int(res * domain.aspect), res)
    observed = _histogram(domain.to_params(samples), grid, domain.bounds)
    expected = _integrate(pdf, domain, grid, ires) * sample_count
    problems = []
    if np.any(expected < 0):
        problems.append("negative density")
    if expected.sum() > 1.1 * sample_count:
        problems.append(f"density integrates to {expected.sum() / sample_count:.4f} > 1")
    stray = (expected == 0) & (observed > 0)
    if np.any(stray):
        problems.append(f"{int(observed[stray].sum())} samples in {int(stray.sum())} cells of zero density")
    statistic, dof = _pooled_statistic(observed, expected)
    if dof < 1:
        problems.append("too few degrees of freedom")
    p_value = chi2_upper_tail(statistic, dof) if dof >= 1 else 0.0
    level = 1.0 - (1.0 - significance) ** (1.0 / test_count)
    passed = not problems and p_value >= level
    message = (f"chi2 = {statistic:.1f} (dof {dof}), p = {p_value:.4g} vs level {level:.3g}; "
               f"histogram sum {observed.sum() / sample_count:.4f}, pdf sum {expected.sum() / sample_count:.4f}"
               + ("; " + "; ".join(problems) if problems else ""))
    return Chi2Result(passed, p_value, statistic, dof, message)
