"""The polynomial sin, cos, atan2, asin, acos against numpy's float64 values."""
import jax
import numpy as np
import pytest

from tracer import elementary


def _ulps(got, want):
    """|got - want| in units of float32 spacing at want."""
    want = np.asarray(want, np.float64)
    spacing = np.spacing(np.maximum(np.abs(want), np.finfo(np.float32).tiny).astype(np.float32)).astype(np.float64)
    return np.abs(np.asarray(got, np.float64) - want) / spacing


@pytest.mark.parametrize("span", [7.0, 1000.0])
def test_sincos_is_within_two_ulps_or_1e7_absolute(span):
    x = np.linspace(-span, span, 400_001, dtype=np.float32)
    s, c = jax.jit(elementary.sincos)(x)
    for got, want in ((s, np.sin(x.astype(np.float64))), (c, np.cos(x.astype(np.float64)))):
        # Relative accuracy holds away from the zeros; near them the error is absolute.
        err = np.minimum(_ulps(got, want), np.abs(np.asarray(got, np.float64) - want) / 1e-7)
        assert err.max() <= 2.0
    assert np.all(np.abs(np.asarray(s) ** 2 + np.asarray(c) ** 2 - 1) < 1e-6)


def test_atan2_covers_every_octant_and_signed_zeros():
    rng = np.random.default_rng(1)
    y, x = rng.normal(size=(2, 200_000)).astype(np.float32)
    y[:8] = x[:8] = 0.0
    x[:4], y[4:8] = [1.0, -1.0, 1.0, -1.0], [0.0, -0.0, 0.0, -0.0]
    y[:4] = [0.0, 0.0, -0.0, -0.0]
    x[4:8] = [0.0, 0.0, -0.0, -0.0]
    got = np.asarray(jax.jit(elementary.atan2)(y, x))
    want = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    assert _ulps(got, want).max() <= 4.0
    assert np.array_equal(np.signbit(got), np.signbit(np.arctan2(y, x)))  # -0.0 and -pi where numpy has them


def test_asin_acos_are_accurate_up_to_the_ends_and_nan_outside():
    u = np.concatenate([np.linspace(-1, 1, 400_001, dtype=np.float32),
                        np.float32(1) - np.float32(2.0) ** -np.arange(1, 24, dtype=np.float32)])
    assert _ulps(jax.jit(elementary.asin)(u), np.arcsin(u.astype(np.float64))).max() <= 3.0
    # acos near 1 is a small angle: relative accuracy there is what the polar angle code needs.
    assert _ulps(jax.jit(elementary.acos)(u), np.arccos(u.astype(np.float64))).max() <= 2.0
    outside = np.array([1.0001, -1.5], np.float32)
    assert np.all(np.isnan(jax.jit(elementary.asin)(outside))) and np.all(np.isnan(jax.jit(elementary.acos)(outside)))
