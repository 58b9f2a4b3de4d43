"""Mitsuba's statistical render test as ``tests.helpers.ztest`` runs it: its colour conversion is
Mitsuba's, it accepts renders drawn from the reference's own distribution and rejects a 2% bias."""
import numpy as np
import pytest

from tests.helpers import ztest

SIZE, SPP = 48, 868  # Mitsuba's bsdf_spheres scenes: 48x48, 2e6 // 2304 spp


def _reference(rng):
    """An RGB reference and per-sample variance whose XYZ values are positive and well lit."""
    xyz_ref = rng.uniform(0.5, 1.0, (SIZE, SIZE, 3))
    xyz_var = rng.uniform(0.01, 0.1, (SIZE, SIZE, 3))
    to_rgb = np.linalg.inv(ztest.RGB_TO_XYZ).T
    return xyz_ref, xyz_var, xyz_ref @ to_rgb, xyz_var @ to_rgb


def _render(rng, xyz_ref, xyz_var, bias=1.0):
    """An RGB render at SPP whose XYZ values are normal about ``bias`` times the reference."""
    xyz = bias * xyz_ref + rng.standard_normal(xyz_ref.shape) * np.sqrt(xyz_var / SPP)
    return xyz @ np.linalg.inv(ztest.RGB_TO_XYZ).T


def test_rgb_to_xyz_is_mitsubas_bitmap_conversion():
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    rgb = np.random.default_rng(0).uniform(0.0, 2.0, (4, 5, 3)).astype(np.float32)
    bitmap = mi.Bitmap(rgb, mi.Bitmap.PixelFormat.RGB)
    theirs = np.array(bitmap.convert(mi.Bitmap.PixelFormat.XYZ, mi.Struct.Type.Float32, False))
    np.testing.assert_allclose(ztest.rgb_to_xyz(rgb), theirs, rtol=1e-6, atol=1e-6)


def test_spp_and_sidak_level_are_mitsubas():
    assert ztest.spp_for(SIZE, SIZE) == SPP
    alpha = ztest.sidak_alpha(SIZE * SIZE)
    assert 1.0 - (1.0 - alpha) ** (SIZE * SIZE) == pytest.approx(ztest.SIGNIFICANCE)


def test_accepts_the_reference_distribution_and_rejects_a_two_percent_bias():
    rng = np.random.default_rng(1)
    xyz_ref, xyz_var, ref, var = _reference(rng)
    unbiased = [ztest.z_test(_render(rng, xyz_ref, xyz_var), SPP, ref, var) for _ in range(5)]
    assert all(t.passed for t in unbiased), [t.pass_fraction for t in unbiased]
    dark = ztest.z_test(_render(rng, xyz_ref, xyz_var, bias=0.98), SPP, ref, var)
    assert not dark.passed, dark.pass_fraction


def test_non_finite_pixels_fail():
    rng = np.random.default_rng(2)
    xyz_ref, xyz_var, ref, var = _reference(rng)
    img = _render(rng, xyz_ref, xyz_var)
    img[: SIZE // 4] = np.nan
    assert not ztest.z_test(img, SPP, ref, var).passed
