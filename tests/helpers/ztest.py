"""Mitsuba 3's statistical render test: a per-pixel z-test against a reference and its variance.

As ``src/render/tests/test_renders.py`` of Mitsuba 3 runs it on its regression scenes
(``tests/scenes/*/*.xml`` of mitsuba-data, each with ``refs/<name>_ref_rgb.exr`` and
``refs/<name>_ref_rgb_var.exr``): a render of ``spp = SAMPLE_BUDGET // pixels`` samples per pixel
is compared, pixel-channel by pixel-channel, with the reference ``ref`` and the per-sample variance
``var`` of the renderer that made it,

    z = |img - ref| * sqrt(spp / max(var, MIN_VARIANCE)),    p = 2 (1 - Phi(z)) = erfc(z / sqrt 2),

and a pixel-channel passes when ``p > alpha``, with ``alpha`` Sidak's correction of a 1% level for
``pixels`` tests: ``1 - (1 - 0.01) ** (1 / pixels)``. The render passes when at least 99.75% of
the pixels' worth of channels pass (``passed / 3 >= 0.9975 * pixels``).

All three images are compared in CIE XYZ, as Mitsuba's test does: the references were rendered
in XYZ and written as RGB, variance included, through the same linear matrix, so their variance is
only meaningful after converting back (measured: in RGB, Mitsuba's own renders fail 19 of its 29
surface scenes; in XYZ they pass 29 of 29). The variance image is converted with the same matrix as
the others, exactly as Mitsuba's test converts it (not as a variance would propagate).
"""
import dataclasses
import math

import numpy as np
from scipy.special import erfc

SAMPLE_BUDGET = 2_000_000   # samples per image: spp = SAMPLE_BUDGET // pixels
SIGNIFICANCE = 0.01         # family-wise level, split over the pixels by Sidak's correction
PASS_FRACTION = 0.9975      # of the pixels' channels that must pass
MIN_VARIANCE = 1e-4         # floor on the reference variance (Mitsuba's sanitization)
# Linear sRGB (Rec. 709 primaries, D65) -> CIE XYZ, Mitsuba's Bitmap.convert(RGB -> XYZ).
RGB_TO_XYZ = np.array([[0.412453, 0.357580, 0.180423],
                       [0.212671, 0.715160, 0.072169],
                       [0.019334, 0.119193, 0.950227]])


@dataclasses.dataclass(frozen=True)
class ZTest:
    """The outcome of one render's z-test."""

    passed: bool          # at least PASS_FRACTION of the pixel-channels passed
    pass_fraction: float  # passing pixel-channels / all pixel-channels
    min_pvalue: float     # smallest p-value over the image
    alpha: float          # the Sidak-corrected per-test level


def spp_for(width, height):
    """The test's samples per pixel for an image of ``width`` x ``height`` pixels."""
    return SAMPLE_BUDGET // (width * height)


def rgb_to_xyz(img):
    """(..., 3) linear sRGB -> (..., 3) CIE XYZ, float64."""
    return np.asarray(img, np.float64) @ RGB_TO_XYZ.T


def sidak_alpha(n_tests, significance=SIGNIFICANCE):
    """Per-test level that keeps the chance of any false rejection among ``n_tests`` at ``significance``."""
    return 1.0 - (1.0 - significance) ** (1.0 / n_tests)


def z_test(img, spp, ref, ref_var):
    """Mitsuba's test of an (H, W, 3) RGB render at ``spp`` against an RGB reference and variance."""
    img, ref, var = (rgb_to_xyz(a) for a in (img, ref, ref_var))
    if img.shape != ref.shape:
        raise ValueError(f"image shape {img.shape} differs from reference shape {ref.shape}")
    z = np.abs(img - ref) * np.sqrt(spp / np.maximum(var, MIN_VARIANCE))
    pvalue = erfc(z / math.sqrt(2.0))
    pixels = img.shape[0] * img.shape[1]
    alpha = sidak_alpha(pixels)
    n_pass = int(np.count_nonzero(pvalue > alpha))  # NaN radiance fails
    return ZTest(passed=n_pass / 3 >= PASS_FRACTION * pixels, pass_fraction=n_pass / pvalue.size,
                 min_pvalue=float(np.nanmin(pvalue)) if np.isfinite(pvalue).any() else float("nan"),
                 alpha=alpha)
