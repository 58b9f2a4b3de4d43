"""Our render of a scene file against Mitsuba 3 rendering the same file live (``scalar_rgb``).

Mitsuba renders a reference at many samples and images at the test's sample count; ours must
have the reference's mean radiance and a relative MSE at most a factor times Mitsuba's own, as
tests/tracer/test_images.py judges against stored references.
"""
import functools

import numpy as np

from tests.helpers import image_metrics as im


@functools.cache
def mitsuba_image(xml_path, spp, seed):
    """Mitsuba's (H, W, 3) render of ``xml_path`` (a path; cached per file, spp and seed)."""
    import mitsuba as mi

    mi.set_variant("scalar_rgb")
    return np.asarray(mi.render(mi.load_file(str(xml_path)), spp=spp, seed=seed), np.float32)[..., :3]


def assert_matches_mitsuba(xml_path, spp=64, reference_spp=4096, seeds=2, mean_tolerance=0.02, mse_factor=1.5,
                           accel="auto"):
    """Render ``xml_path`` with ours (intersection backend ``accel``) and Mitsuba; assert the means
    and relative MSEs agree."""
    import tracer

    reference = mitsuba_image(xml_path, reference_spp, 1000)
    theirs = [im.relative_mse(mitsuba_image(xml_path, spp, seed), reference) for seed in range(seeds)]
    scene = tracer.load_scene(xml_path, accel=accel)
    ours = [np.asarray(tracer.render(scene, spp=spp, seed=seed)) for seed in range(seeds)]
    error = im.mean_relative_error(np.mean(ours, axis=0), im.channel_means(reference))
    assert np.all(error < mean_tolerance), f"{xml_path}: mean radiance off by {np.round(100 * error, 2)}%"
    ratio = np.mean([im.relative_mse(img, reference) for img in ours]) / np.mean(theirs)
    assert ratio < mse_factor, f"{xml_path}: relative MSE {ratio:.2f}x Mitsuba's at {spp} spp"
