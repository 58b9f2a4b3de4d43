"""Render Mitsuba 3 reference images and noise baselines for the image tests.

For every scene in ``tests/data/references/manifest.json`` this renders, with Mitsuba 3
(``llvm_ad_rgb``, else ``scalar_rgb``):

* a high-spp reference image, ``tests/data/references/<name>.exr`` (``ref_spp`` samples per pixel,
  rendered in passes of at most ~2.5 M samples, each pass with its own seed, then averaged);
* Mitsuba's own relative MSE against that reference at the test's sample count, averaged over
  ``mitsuba_seeds`` independent seeds (``mi.render(scene, spp=test_spp, seed=k)``): the noise
  level our tracer must reach (the test allows 1.5x);
* how far the average of ``test_seeds`` such renders lands from the reference mean, and its
  standard error: a check that the test's 1% mean-radiance tolerance is wide enough.

The manifest's inputs per scene are ``name, scene, params, test_spp, test_seeds, ref_spp``; the
script fills in the rest and rewrites the file.

    DRJIT_LIBLLVM_PATH=/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1 \\
        python scripts/make_references.py [--only cbox --only dof] [--ref-spp 4096]
"""
import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers import image_metrics as im  # noqa: E402

DEFAULT_LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"
PASS_SAMPLES = 2_500_000      # samples per reference pass, to bound Dr.Jit's wavefront memory
REF_SEED_BASE = 1_000_000     # reference passes use seeds far from the test seeds 0, 1, 2, ...
MITSUBA_SEEDS = 64            # seeds for Mitsuba's own rel. MSE baseline
# Assumed speed of our tracer on the test machine, only to record an expected test cost.
OUR_SAMPLES_PER_S, OUR_COMPILE_S = 0.5e6, 20.0


def import_mitsuba(variant):
    if variant.startswith("llvm") and os.path.exists(DEFAULT_LLVM):
        os.environ.setdefault("DRJIT_LIBLLVM_PATH", DEFAULT_LLVM)
    import mitsuba as mi
    for name in (variant, "scalar_rgb"):
        try:
            mi.set_variant(name)
            return mi
        except Exception as err:  # a missing LLVM shows up here, at variant selection
            print(f"variant {name} unavailable ({err}); trying the next", file=sys.stderr)
    raise SystemExit("no usable Mitsuba variant")


def render(mi, scene, spp, seed):
    return np.asarray(mi.render(scene, spp=spp, seed=seed), np.float32)[..., :3]


def render_reference(mi, scene, spp, n_pixels):
    n_passes = -(-spp // max(1, PASS_SAMPLES // n_pixels))
    pass_spp = -(-spp // n_passes)  # rounds the total up by less than n_passes samples
    acc = 0.0
    for p in range(n_passes):
        acc = acc + render(mi, scene, pass_spp, REF_SEED_BASE + p).astype(np.float64)
    return (acc / n_passes).astype(np.float32), pass_spp * n_passes


def make_reference(mi, entry, out_dir, mitsuba_seeds):
    """Render one manifest entry's reference and baselines; returns the filled-in entry."""
    scene = mi.load_file(str(ROOT / entry["scene"]), **entry["params"])
    width, height = (int(x) for x in scene.sensors()[0].film().crop_size())
    n_pixels = width * height
    t0 = time.perf_counter()
    ref, ref_spp = render_reference(mi, scene, entry["ref_spp"], n_pixels)
    ref_seconds = time.perf_counter() - t0
    if not np.all(np.isfinite(ref)):
        raise RuntimeError(f"{entry['name']}: reference has non-finite pixels")
    im.write_exr(out_dir / f"{entry['name']}.exr", ref)
    ref_mean = im.channel_means(ref)

    test_spp, test_seeds = entry["test_spp"], entry["test_seeds"]
    t0 = time.perf_counter()
    rel_mse, means, test_sum = [], [], 0.0
    for seed in range(max(mitsuba_seeds, test_seeds)):
        img = render(mi, scene, test_spp, seed)
        rel_mse.append(im.relative_mse(img, ref))
        if seed < test_seeds:
            means.append(im.channel_means(img))
            test_sum = test_sum + img.astype(np.float64)
    test_seconds = time.perf_counter() - t0
    rel_mse, means = np.array(rel_mse), np.array(means)
    mean_sigma = means.std(axis=0, ddof=1) / np.sqrt(test_seeds) / ref_mean
    test_samples = n_pixels * test_spp * test_seeds
    entry.update(
        width=width, height=height, reference=f"{entry['name']}.exr", ref_spp=ref_spp,
        ref_mean=[round(float(m), 6) for m in ref_mean],
        mitsuba_seeds=len(rel_mse),
        mitsuba_rel_mse=float(f"{rel_mse.mean():.6g}"),
        mitsuba_rel_mse_stderr=float(f"{rel_mse.std(ddof=1) / np.sqrt(len(rel_mse)):.3g}"),
        mitsuba_rel_mse_seed_range=[float(f"{rel_mse.min():.4g}"), float(f"{rel_mse.max():.4g}")],
        mitsuba_mean_error=float(f"{im.mean_relative_error(test_sum / test_seeds, ref_mean).max():.3g}"),
        mean_sigma=float(f"{mean_sigma.max():.3g}"),
        ref_seconds=round(ref_seconds, 1),
        mitsuba_baseline_seconds=round(test_seconds, 1),
        test_samples=test_samples,
        expected_test_seconds=round(OUR_COMPILE_S + test_samples / OUR_SAMPLES_PER_S, 1),
    )
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=pathlib.Path, default=im.MANIFEST)
    parser.add_argument("--only", action="append", help="scene name to redo (repeatable)")
    parser.add_argument("--ref-spp", type=int, help="override every entry's ref_spp")
    parser.add_argument("--mitsuba-seeds", type=int, default=MITSUBA_SEEDS)
    parser.add_argument("--variant", default="llvm_ad_rgb")
    args = parser.parse_args()

    mi = import_mitsuba(args.variant)
    manifest = json.loads(args.manifest.read_text())
    manifest["mitsuba"] = {"version": mi.__version__, "variant": mi.variant()}
    total = time.perf_counter()
    for entry in manifest["scenes"]:
        if args.only and entry["name"] not in args.only:
            continue
        if args.ref_spp:
            entry["ref_spp"] = args.ref_spp
        make_reference(mi, entry, args.manifest.parent, args.mitsuba_seeds)
        print(f"{entry['name']:>10}: {entry['width']}x{entry['height']}  ref {entry['ref_spp']} spp "
              f"in {entry['ref_seconds']:.1f}s  rel.MSE@{entry['test_spp']}spp "
              f"{entry['mitsuba_rel_mse']:.4g} +- {entry['mitsuba_rel_mse_stderr']:.2g}  "
              f"mean err {entry['mitsuba_mean_error']:.2%} (sigma {entry['mean_sigma']:.2%})",
              flush=True)
    manifest["total_seconds_last_run"] = round(time.perf_counter() - total, 1)
    args.manifest.write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()
