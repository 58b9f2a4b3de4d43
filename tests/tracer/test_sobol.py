"""The progressive low-discrepancy sampler: Sobol's points, nets at every power-of-two prefix,
uniform per point, less variance than independent sampling, and addressed like the other."""
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import qmc

from tracer import rng, sobol
from tracer.rng import Dims

PIXELS = 64


def _keys(sampler, n, pixels=PIXELS, first=0, seed=5, frame=2):
    """SampleKeys of samples first .. first + n - 1 of ``pixels`` pixels, flattened pixel-major."""
    pixel = jnp.repeat(jnp.arange(pixels, dtype=jnp.uint32), n)
    sample = jnp.tile(jnp.arange(first, first + n, dtype=jnp.uint32), pixels)
    return rng.sample_keys(sampler, seed, frame, pixel, sample)


def _is_net(points, m, t=0):
    """Whether the (n, s) points in [0, 1)^s form a (t, m, s)-net in base 2: every elementary box of
    volume 2^(t - m) holds 2^t of them."""
    s = points.shape[1]
    def splits(total, parts):
        if parts == 1:
            yield (total,)
            return
        for first in range(total + 1):
            for rest in splits(total - first, parts - 1):
                yield (first, *rest)
    for bits in splits(m - t, s):
        cells = np.zeros(len(points), np.int64)
        for d, b in enumerate(bits):
            cells = (cells << b) | np.floor(points[:, d] * (1 << b)).astype(np.int64)
        if np.any(np.bincount(cells, minlength=1 << (m - t)) != 1 << t):
            return False
    return True


def test_unscrambled_points_are_sobols_in_the_three_dimensions():
    """Dimensions 0-2 against scipy's Sobol (Joe-Kuo), which enumerates the points in Gray-code order."""
    k = np.arange(1 << 10)
    ours = np.asarray(sobol.sobol_bits(jnp.asarray(k ^ (k >> 1), jnp.uint32), 3)).T / 2.0**32
    np.testing.assert_array_equal(ours, qmc.Sobol(3, scramble=False, bits=32).random_base2(10))


def test_owen_scrambling_maps_aligned_blocks_onto_aligned_blocks():
    """A nested permutation: an aligned block of 2^m values (every prefix of indices, in
    particular) goes to some aligned block of 2^m values, one to one."""
    x = jnp.arange(3 << 10, 4 << 10, dtype=jnp.uint32) << 20  # the block's digits lead
    for seed in (0, 1, 0xDEADBEEF):
        y = np.asarray(sobol.owen_scramble(x, np.uint32(seed)))
        assert len(np.unique(y >> 20)) == 1 << 10
        assert len(np.unique(y >> 30)) == 1
    # As the index shuffle uses it: the first 2^12 indices (high bits all 0) go to one block.
    y = np.asarray(sobol.owen_scramble(jnp.arange(1 << 12, dtype=jnp.uint32), np.uint32(7)))
    assert len(np.unique(y >> 12)) == 1 and sorted(y & 0xFFF) == list(range(1 << 12))


@pytest.mark.parametrize("first", [0, 1 << 8])
def test_every_power_of_two_block_of_a_pixels_samples_is_a_net(first):
    """Within each pixel, samples [first, first + 2^m) of a 2D group (the pixel position; a light
    sample's point; a BSDF sample's direction) form a (0, m, 2)-net for m = 1 .. 8 (one point per
    elementary interval, at every prefix); the BSDF's lobe choice with either coordinate, and the
    whole 3D group, (1, m, s)-nets; the emitter selection is the light point's first coordinate."""
    n = 1 << 8
    film = np.asarray(rng.draw(_keys("sobol", n, pixels=4, first=first), Dims.FILM)).reshape(2, 4, n)
    bounce = np.asarray(rng.draw_bounce(_keys("sobol", n, pixels=4, first=first), 1)).reshape(Dims.SPARE, 4, n)
    light = bounce[Dims.EMITTER_POINT:Dims.EMITTER_POINT + 2]
    np.testing.assert_array_equal(bounce[Dims.EMITTER_SELECT], light[0])  # reused by the emitter
    bsdf = bounce[[Dims.BSDF_COMPONENT, Dims.BSDF_DIRECTION, Dims.BSDF_DIRECTION + 1]]
    for pixel in range(4):
        for m in range(1, 9):
            size = 1 << m
            assert _is_net(film[:, pixel, :size].T, m)
            assert _is_net(light[:, pixel, :size].T, m)
            points = bsdf[:, pixel, :size].T
            assert _is_net(points[:, 1:], m)
            assert _is_net(points[:, :2], m, t=1) and _is_net(points[:, ::2], m, t=1)
            assert _is_net(points, m, t=1)
            roulette = bounce[Dims.ROULETTE, pixel, :size]
            assert _is_net(roulette[:, None], m)


def test_independent_points_are_not_nets():
    """The check above has power: independent numbers fail it."""
    u = np.asarray(rng.draw(_keys("independent", 64, pixels=1), Dims.FILM)).T
    assert not _is_net(u, 6)


def test_each_sample_is_uniform_over_pixels_and_groups_are_uncorrelated():
    """Sample i of every pixel (Owen scrambling: uniform on [0, 1) per point), histogrammed over
    pixels; and different groups (film against a bounce's BSDF direction) are uncorrelated."""
    pixels = 20_000
    for index in (0, 1, 37):
        keys = _keys("sobol", 1, pixels=pixels, first=index)
        u = np.asarray(rng.draw_bounce(keys, 0))
        counts, _ = np.histogram(u[Dims.BSDF_DIRECTION], bins=40, range=(0, 1))
        chi2 = ((counts - pixels / 40) ** 2 / (pixels / 40)).sum()
        assert chi2 < 80, chi2  # 39 dof: p < 1e-4 above ~78
        film = np.asarray(rng.draw(keys, Dims.FILM))
        for a in (film[0], film[1]):
            for b in (u[Dims.BSDF_DIRECTION], u[Dims.EMITTER_SELECT], u[Dims.ROULETTE]):
                assert abs(np.corrcoef(a, b)[0, 1]) < 0.04


def _integrand(x, y):
    """A smooth function and a discontinuous one (a disk inside the unit square)."""
    return [np.sin(3 * x + 2 * y) ** 2, (x - 0.5) ** 2 + (y - 0.45) ** 2 < 0.16]


def test_variance_of_pixel_estimates_far_below_independent():
    """Estimates of two integrals from 64 samples per pixel, spread over pixels: Owen-scrambled
    Sobol's variance falls as n^-3 (smooth) or n^-1.5 (a disk's edge), independent's as n^-1. Both
    are unbiased (their means agree with the exact integrals)."""
    exact = [0.5 - (np.cos(6) + np.cos(4) - np.cos(10) - 1) / 48, np.pi * 0.16]
    n, pixels = 64, 2000
    variances = {}
    for sampler in rng.SAMPLERS:
        x, y = np.asarray(rng.draw(_keys(sampler, n, pixels=pixels), Dims.APERTURE), np.float64).reshape(2, pixels, n)
        estimates = np.array([f.mean(axis=1) for f in _integrand(x, y)])  # (2 integrands, pixels)
        for e, value in zip(estimates, exact):
            assert abs(e.mean() - value) < 5 * e.std() / np.sqrt(pixels) + 1e-6
        variances[sampler] = estimates.var(axis=1)
    ratio = variances["sobol"] / variances["independent"]
    # Measured 0.020 and 0.146; scipy's scrambled Sobol (LMS + shift) gives 0.022 and 0.154.
    assert ratio[0] < 0.05 and ratio[1] < 0.3, ratio


def test_sample_i_does_not_depend_on_the_batch_or_the_sample_count():
    """Samples 32..63 drawn alone equal samples 32..63 of a batch of 64: refining continues."""
    whole = np.asarray(rng.draw_bounce(_keys("sobol", 64, pixels=8), 2)).reshape(Dims.SPARE, 8, 64)
    part = np.asarray(rng.draw_bounce(_keys("sobol", 32, pixels=8, first=32), 2)).reshape(Dims.SPARE, 8, 32)
    np.testing.assert_array_equal(whole[:, :, 32:], part)
    other_seed = np.asarray(rng.draw_bounce(_keys("sobol", 64, pixels=8, seed=6), 2)).reshape(Dims.SPARE, 8, 64)
    assert np.mean(other_seed == whole) < 0.01


def test_independent_draws_are_the_hash_of_the_address():
    """The independent sampler is today's: uniform(sample_key(...), dimension), unchanged."""
    keys = _keys("independent", 4)
    key = rng.sample_key(5, 2, jnp.repeat(jnp.arange(PIXELS, dtype=jnp.uint32), 4),
                         jnp.tile(jnp.arange(4, dtype=jnp.uint32), PIXELS))
    np.testing.assert_array_equal(np.asarray(rng.draw(keys, Dims.FILM)), np.asarray(rng.uniform2(key, Dims.FILM)))
    depth = jnp.full(key.shape, 3, jnp.int32)
    expected = [rng.uniform(key, Dims.bounce(depth, k)) for k in range(Dims.SPARE)]
    np.testing.assert_array_equal(np.asarray(rng.draw_bounce(keys, depth)), np.asarray(jnp.stack(expected)))


@pytest.mark.parametrize("reuse", [True, False])
def test_emitter_reuses_the_selection_as_the_point_coordinate(reuse):
    """The sobol sampler's emitter selection is its light point's first coordinate; the emitter
    rescales it inside the chosen emitter's share (``reuse``), so the points on each of two equal
    quads stay uniform: their mean is the quad's centroid. Not reused, the same numbers would put
    the points of each quad on part of it only (the test's power)."""
    from tests.helpers import emitter_cases as C
    from tracer import emitters as E

    quads = [[(x, 0.0, 2.0), (x + 1, 0.0, 2.0), (x + 1, 1.0, 2.0), (x, 1.0, 2.0)] for x in (-2.0, 1.0)]
    table = C.table(*(lambda b, q=q, k=k: b.add_area(C.area_node(), k, triangles=C.quad(q), flip_normals=True)
                      for k, q in enumerate(quads)))
    n = 1 << 12
    u = rng.draw_bounce(_keys("sobol", n, pixels=1), 0)
    ds, _ = E.sample_direction(table, C.no_textures(), jnp.zeros((3, n), jnp.float32), u[Dims.EMITTER_SELECT],
                               u[Dims.EMITTER_POINT:Dims.EMITTER_POINT + 2], reuse=reuse)
    p, e = np.asarray(ds.p), np.asarray(ds.emitter)
    errors = [np.abs(p[:2, e == k].mean(axis=1) - np.mean(q, axis=0)[:2]).max() for k, q in enumerate(quads)]
    assert (max(errors) < 0.02) == reuse, errors
