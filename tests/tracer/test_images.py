"""Our renders against Mitsuba 3 reference images, statistically.

The references, and Mitsuba's own noise at the test's sample count, come from
``scripts/make_references.py`` and are listed in ``tests/data/references/manifest.json``. For each
scene there, ``test_seeds`` images are rendered at ``test_spp`` with seeds 0, 1, ... (one compiled
program per scene), and two things are checked, as in Mitsuba's own ``test_renders.py``:

* ``test_mean_radiance[<scene>]``: the average of those images (``test_spp * test_seeds`` samples
  per pixel; the manifest's ``mean_sigma`` is the standard error Mitsuba gets there, at most
  0.2%) has a per-channel mean within 1% of the reference's.
* ``test_relative_mse[<scene>]``: the relative MSE against the reference, averaged over the
  seeds, is at most 1.5x Mitsuba's own at the same sample count (``mitsuba_rel_mse``).

Cost: ``test_samples`` per scene in the manifest (about 4.7 M), i.e. some 10-20 s of rendering
plus one compile per scene on 2 CPU cores. Set ``IMAGE_TEST_OUT=<dir>`` to keep our averaged
images next to the references as EXR files for a look.
"""
import functools
import json
import os
import pathlib

import numpy as np
import pytest

from tests.helpers import image_metrics as im

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENES = {e["name"]: e for e in json.loads(im.MANIFEST.read_text())["scenes"]}
MEAN_TOLERANCE = im.MEAN_TOLERANCE
REL_MSE_FACTOR = im.REL_MSE_FACTOR


@functools.cache
def reference(name):
    return im.read_exr(im.MANIFEST.parent / SCENES[name]["reference"])


@functools.cache
def our_renders(name):
    """(average image, per-seed relative MSEs) of our renders of one manifest scene."""
    import tracer

    entry = SCENES[name]
    scene = tracer.load_scene(str(ROOT / entry["scene"]), **entry["params"])
    ref = reference(name)
    total, rel_mse = np.zeros(ref.shape, np.float64), []
    for seed in range(entry["test_seeds"]):
        img = np.asarray(tracer.render(scene, spp=entry["test_spp"], seed=seed))
        assert img.shape == ref.shape, f"{name}: rendered {img.shape}, reference is {ref.shape}"
        assert img.dtype == np.float32, f"{name}: rendered dtype {img.dtype}"
        assert np.all(np.isfinite(img)), f"{name}: seed {seed} has non-finite pixels"
        total += img
        rel_mse.append(im.relative_mse(img, ref))
    mean_img = (total / entry["test_seeds"]).astype(np.float32)
    if out := os.environ.get("IMAGE_TEST_OUT"):
        pathlib.Path(out).mkdir(parents=True, exist_ok=True)
        im.write_exr(pathlib.Path(out) / f"{name}_ours.exr", mean_img)
        im.write_exr(pathlib.Path(out) / f"{name}_mitsuba.exr", ref)
    return mean_img, np.array(rel_mse)


@pytest.mark.parametrize("name", SCENES)
def test_mean_radiance(name):
    entry = SCENES[name]
    mean_img, _ = our_renders(name)
    ours, theirs = im.channel_means(mean_img), np.asarray(entry["ref_mean"])
    error = im.mean_relative_error(mean_img, theirs)
    assert np.all(error <= MEAN_TOLERANCE), (
        f"{name}: mean radiance {np.round(ours, 5)} vs Mitsuba {np.round(theirs, 5)}, relative "
        f"error {np.round(error * 100, 2)}% > {MEAN_TOLERANCE:.0%} "
        f"(noise sigma at this sample count ~{entry['mean_sigma']:.2%})")


@pytest.mark.parametrize("name", SCENES)
def test_relative_mse(name):
    entry = SCENES[name]
    _, rel_mse = our_renders(name)
    ours, theirs = rel_mse.mean(), entry["mitsuba_rel_mse"]
    assert ours <= REL_MSE_FACTOR * theirs, (
        f"{name}: relative MSE at {entry['test_spp']} spp is {ours:.4g} "
        f"(+- {rel_mse.std(ddof=1) / np.sqrt(len(rel_mse)):.2g}), Mitsuba's is {theirs:.4g}: "
        f"ratio {ours / theirs:.2f} > {REL_MSE_FACTOR}")
