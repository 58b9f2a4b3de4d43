"""Render a folder of Mitsuba 3 scenes with our tracer and with Mitsuba 3; say, scene by scene, whether they agree.

    python scripts/mitsuba_gallery.py DIR [--res 64] [--spp 64] [--seeds 4] [--ref-spp 1024]
        [--timeout 600] [--only PATTERN ...] [--jobs 1] [--mode auto|gallery|regression]
        [--variant llvm_ad_rgb] [--self-check]

The scenes are ``DIR/*.xml`` (mitsuba-data's ``docs/scenes``) or, where there are none,
``DIR/*/*.xml`` (its ``tests/scenes``). Each scene is judged in one of two modes; ``auto`` takes
regression mode where Mitsuba's test reference exists (``refs/<name>_ref_rgb.exr`` and its
``_var.exr`` beside the scene, ``<name>`` the file name less its ``_<integrator>`` suffix).

* Gallery mode. Both renderers load the scene with ``spp=--spp`` where it names ``$spp`` (as
  Mitsuba's ``render_documentation_images.py`` loads its documentation scenes) and render it
  at ``--res`` pixels wide (height keeping the film's aspect) and ``--spp`` as Mitsuba's sampler
  rounds it (an ``orthogonal`` sampler takes 121 for 64, both renderers render 121): ours ``--seeds``
  times, Mitsuba 8 times or more, plus a reference of ``--ref-spp``. They agree when, as in
  ``tests/tracer/test_images.py``, (1) the per-channel mean of our averaged renders is within
  ``MEAN_TOLERANCE`` (1%) of the reference's, widened to 4 standard errors where the sample count
  is too small for 1% (the error is estimated from Mitsuba's seed-to-seed spread, for our average
  and the reference's own noise); and (2) our relative MSE against the reference, averaged over
  the seeds, is at most ``REL_MSE_FACTOR`` (1.5) times Mitsuba's own at the same spp.
* Regression mode: Mitsuba's own statistical test (``tests/helpers/ztest.py``, after its
  ``src/render/tests/test_renders.py``): the scene loaded as that test loads it (``spp`` and
  ``integrator`` given as parameters), one render at ``2e6 / pixels`` spp, a per-pixel z-test in
  XYZ against the reference and its variance, Sidak-corrected at 1%; 99.75% of the pixel-channels
  must pass. Mitsuba's own render of the same scene is put through the same test, in every run,
  as the check that the test, the references and this harness agree.

``--self-check`` puts Mitsuba (other seeds) in our tracer's place: every scene it renders should
then agree, which checks the criteria, not our tracer.

Every render runs in a subprocess of its own with a ``--timeout``. Statuses: ``agree``;
``differ`` (with the figures); ``refused`` (our loader's ``SceneError``, first line);
``crashed`` (ours raised anything else); ``timeout``; ``mitsuba cannot`` (its RGB variant fails to
load or render 1 spp of the scene: spectral-only or polarized plugins, missing files), left out of
the count. Scenes with participating media (a ``<medium>`` or a ``volpath`` integrator) are counted
apart. The summary ends with the refusals grouped by message: what to implement next.

Mitsuba runs as ``--variant`` (``llvm_ad_rgb``) when Debian's ``libllvm19`` is installed, else as
``scalar_rgb``: Dr.Jit is only ever pointed at LLVM 19 (older libLLVMs here abort it).
"""
import argparse
import collections
import concurrent.futures
import dataclasses
import fnmatch
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.helpers import image_metrics as im  # noqa: E402
from tests.helpers import ztest  # noqa: E402

DEFAULT_LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"
MITSUBA_SEEDS = 8   # Mitsuba's renders at the test spp: its relative MSE and its mean's spread
MEAN_SIGMAS = 4.0   # the mean tolerance is at least this many standard errors
SELF_CHECK_SEEDS = 500_000  # --self-check: Mitsuba's seeds in our place (its references use 1e6 + k)
MEDIA = re.compile(r"<medium\b|volpath")  # a medium, or an integrator (or its default) for them
INCLUDE = re.compile(r"<include\s[^>]*filename=[\"']([^\"']+)")
LOCATION = re.compile(r"^\S+?:\d+: ")  # "file.xml:12: " in front of a SceneError


@dataclasses.dataclass(frozen=True)
class Case:
    """One scene file and how it is judged."""

    path: pathlib.Path
    name: str                        # path relative to DIR, for the table
    media: bool                      # has participating media (counted apart)
    uses_spp: bool                   # names $spp: loaded with spp=... (Mitsuba refuses unused parameters)
    refs: tuple | None               # regression mode: (reference, variance) EXR paths
    integrator: str | None           # regression mode: the integrator its file name ends with


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table."""

    case: Case
    status: str                      # agree, differ, refused, crashed, timeout, mitsuba cannot
    detail: str                      # figures, or the error
    error: str | None = None         # refused: the first line of our SceneError, less file:line
    mitsuba_self: bool | None = None  # regression mode: Mitsuba's own render passed the test


# ------------------------------------------------------------------------------------ scenes
def find_cases(folder, mode, only):
    """The scenes of ``folder`` (``*.xml``, else ``*/*.xml``) selected by ``only``, sorted."""
    paths = sorted(folder.glob("*.xml")) or sorted(folder.glob("*/*.xml"))
    cases = []
    for path in paths:
        name = str(path.relative_to(folder))
        if only and not any(fnmatch.fnmatch(name, p) or p in name for p in only):
            continue
        stem, _, integrator = path.stem.rpartition("_")
        ref = path.parent / "refs" / f"{stem}_ref_rgb.exr"
        var = ref.with_name(f"{stem}_ref_rgb_var.exr")
        regression = mode == "regression" or (mode == "auto" and ref.exists() and var.exists())
        text = scene_text(path)
        cases.append(Case(path, name, bool(MEDIA.search(text)), "$spp" in text,
                          (ref, var) if regression else None, integrator if regression else None))
    return cases


def scene_text(path, depth=0):
    """A scene file's text and that of the files it includes, recursively (for a quick look only)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    if depth >= 8:
        return text
    return "\n".join([text] + [scene_text(path.parent / f, depth + 1) for f in INCLUDE.findall(text)])


# ----------------------------------------------------------------------------------- workers
def import_mitsuba(variant):
    """Mitsuba set to ``variant``; an LLVM variant only where Dr.Jit can be given LLVM 19."""
    if variant.startswith("llvm") and "DRJIT_LIBLLVM_PATH" not in os.environ:
        if os.path.exists(DEFAULT_LLVM):
            os.environ["DRJIT_LIBLLVM_PATH"] = DEFAULT_LLVM
        else:
            variant = "scalar_rgb"
    import mitsuba as mi
    try:
        mi.set_variant(variant)
    except Exception as err:  # a variant not built, or an LLVM that does not load
        print(f"variant {variant} unavailable ({first_line(err)}); using scalar_rgb", file=sys.stderr)
        mi.set_variant("scalar_rgb")
    return mi


def resize_film(mi, scene, width):
    """Set the first sensor's film to ``width`` pixels wide, keeping its aspect (and crop window)."""
    sensor = scene.sensors()[0]
    film = sensor.film()
    (w, h), (cw, ch), (ox, oy) = film.size(), film.crop_size(), film.crop_offset()
    scale = width / w
    params = mi.traverse(sensor)
    params["film.size"] = mi.ScalarVector2u(width, max(1, round(h * scale)))
    params["film.crop_size"] = mi.ScalarVector2u(max(1, round(cw * scale)), max(1, round(ch * scale)))
    params["film.crop_offset"] = mi.ScalarPoint2u(round(ox * scale), round(oy * scale))
    params.update()


def as_rgb(img):
    """The first three channels of a render (RGB; a one-channel film repeated), float32."""
    img = np.asarray(img, np.float32)
    return np.repeat(img, 3, axis=-1) if img.shape[-1] == 1 else img[..., :3]


def mitsuba_worker(job, out):
    """Mitsuba's renders of one scene: ``job["seeds"]`` at ``job["spp"]``, and a reference."""
    from scripts import make_references as mr
    mi = import_mitsuba(job["variant"])
    info = {"variant": mi.variant(), "version": mi.__version__}
    t0 = time.perf_counter()
    try:
        scene = mi.load_file(job["path"], **job["params"])
        info["taken_spp"] = taken_spp(scene, job.get("spp_asked", job["spp"]))
        if job["width"]:
            resize_film(mi, scene, job["width"])
        load_s, times, seeds = time.perf_counter() - t0, [], []
        for seed in job["seeds"]:
            t0 = time.perf_counter()
            seeds.append(as_rgb(mr.render(mi, scene, job["spp"], seed)))
            times.append(time.perf_counter() - t0)
        t0, images = time.perf_counter(), {"seeds": np.stack(seeds)}
        if job["ref_spp"]:
            n_pixels = seeds[0].shape[0] * seeds[0].shape[1]
            images["ref"] = as_rgb(mr.render_reference(mi, scene, job["ref_spp"], n_pixels)[0])
    except Exception as err:  # whatever the RGB variant cannot do
        return {**info, "status": "cannot", "error": first_line(err)}
    np.savez(out / "images.npz", **images)
    return {**info, "status": "rendered", "load_s": load_s, "first_s": times[0], "render_s": min(times),
            "ref_s": time.perf_counter() - t0}


def taken_spp(scene, spp):
    """The samples per pixel that Mitsuba's ``render(spp=spp)`` takes: its sampler rounds the count
    (an ``orthogonal`` sampler asked for 64 takes 121, the square of a prime)."""
    sampler = scene.sensors()[0].sampler().fork()
    sampler.set_sample_count(spp)
    return int(sampler.sample_count())


def variant_worker(job, _out):
    """The Mitsuba version and variant that ``job["variant"]`` gets here."""
    mi = import_mitsuba(job["variant"])
    return {"status": "ok", "variant": mi.variant(), "version": mi.__version__}


def ours_worker(job, out):
    """Our tracer's renders of one scene: ``job["seeds"]`` at ``job["spp"]``."""
    import tracer
    t0 = time.perf_counter()
    try:
        scene = tracer.load_scene(job["path"], resolution=job["resolution"] and tuple(job["resolution"]),
                                  **job["params"])
    except tracer.SceneError as err:
        return {"status": "refused", "error": first_line(err)}
    load_s, times, images = time.perf_counter() - t0, [], []
    for seed in job["seeds"]:
        t0 = time.perf_counter()
        # The RGB, as of Mitsuba's render (an aov integrator's channels: tests/tracer/test_aov.py).
        images.append(as_rgb(tracer.render(scene, spp=job["spp"], seed=seed)))
        times.append(time.perf_counter() - t0)
    np.savez(out / "images.npz", seeds=np.stack(images))
    return {"status": "rendered", "load_s": load_s, "first_s": times[0], "render_s": min(times)}


def worker_main(role, job_json, out_dir):
    """Entry point of a worker process: runs one job and writes ``result.json`` (and images)."""
    out = pathlib.Path(out_dir)
    job = json.loads(job_json)
    try:
        result = {"mitsuba": mitsuba_worker, "ours": ours_worker, "variant": variant_worker}[role](job, out)
    except Exception as err:  # a bug, not a refusal: reported as such
        result = {"status": "crashed", "error": f"{type(err).__name__}: {first_line(err)}"}
    (out / "result.json").write_text(json.dumps(result))


def run_worker(role, job, timeout):
    """Run one job in a subprocess; its result, with the images loaded (``seeds``, ``ref``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="mitsuba_gallery_") as tmp:
        cmd = [sys.executable, __file__, "--worker", role, json.dumps(job), tmp]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "error": f"{role} took over {timeout:.0f}s"}
        result_path = pathlib.Path(tmp) / "result.json"
        if not result_path.exists():  # killed, or aborted in native code
            tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            return {"status": "crashed", "error": f"{role} process died: {tail}"}
        result = json.loads(result_path.read_text())
        result["wall_s"] = time.perf_counter() - t0
        if (pathlib.Path(tmp) / "images.npz").exists():
            with np.load(pathlib.Path(tmp) / "images.npz") as data:
                result.update({k: data[k] for k in data.files})
        return result


def first_line(err):
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


# ----------------------------------------------------------------------------------- judging
def judge_gallery(ours, theirs, ref, spp, ref_spp):
    """(agree, figures) of our renders (n, H, W, 3) against Mitsuba's at the same spp and its reference."""
    if ours.shape[1:] != ref.shape:
        return False, f"image {ours.shape[1:]} vs Mitsuba's {ref.shape}"
    if not np.all(np.isfinite(ours)):
        return False, "non-finite pixels"
    ref_means = im.channel_means(ref)
    scale = np.maximum(ref_means, max(1e-3 * ref_means.max(), 1e-12))  # black channels: vs the others
    signed = (im.channel_means(ours.mean(axis=0)) - ref_means) / scale
    error = np.abs(signed)
    spread = np.array([im.channel_means(t) for t in theirs]).std(axis=0, ddof=1)
    sigma = spread * np.sqrt(1.0 / len(ours) + spp / ref_spp) / scale
    tolerance = np.maximum(im.MEAN_TOLERANCE, MEAN_SIGMAS * sigma)
    ours_mse = np.mean([im.relative_mse(x, ref) for x in ours])
    their_mse = np.mean([im.relative_mse(x, ref) for x in theirs])
    ratio = ours_mse / their_mse if their_mse > 0 else (1.0 if ours_mse == 0 else np.inf)
    worst = int(np.argmax(error / tolerance))
    agree = bool(np.all(error <= tolerance) and ratio <= im.REL_MSE_FACTOR)
    return agree, (f"mean {signed[worst]:+.2%} (tol {tolerance[worst]:.2%}), "
                   f"rel.MSE {ratio:.2f}x Mitsuba's ({ours_mse:.3g} vs {their_mse:.3g})")


def describe_z(test):
    verdict = "pass" if test.passed else "FAIL"
    return f"{verdict} {test.pass_fraction:.2%} (min p {test.min_pvalue:.1e}, alpha {test.alpha:.1e})"


# ------------------------------------------------------------------------------------ cases
def failed_row(case, result, note=None, mitsuba_self=None):
    """The row of a scene that one of the renderers could not render."""
    status = {"cannot": "mitsuba cannot"}.get(result["status"], result["status"])
    error = result.get("error", "")
    return Row(case, status, f"{error}  [{note}]" if note else error,
               LOCATION.sub("", error) if status == "refused" else None, mitsuba_self)


def run_gallery(case, args):
    params = {"spp": args.spp} if case.uses_spp else {}  # as Mitsuba's own documentation renders
    base = {"path": str(case.path), "params": params, "variant": args.variant}
    probe = run_worker("mitsuba", {**base, "width": args.res, "spp": 1, "spp_asked": args.spp, "seeds": [0],
                                   "ref_spp": 0}, args.timeout)
    if probe["status"] != "rendered":
        return failed_row(case, probe)
    spp = probe["taken_spp"]  # ours renders the samples Mitsuba's render takes: equal spp
    if args.self_check:  # Mitsuba in our place, with seeds that its other renders never use
        ours = run_worker("mitsuba", {**base, "width": args.res, "spp": args.spp, "ref_spp": 0,
                                      "seeds": [SELF_CHECK_SEEDS + s for s in range(args.seeds)]}, args.timeout)
    else:
        ours = run_worker("ours", {**base, "resolution": list(probe["seeds"].shape[2:0:-1]), "spp": spp,
                                   "seeds": list(range(args.seeds))}, args.timeout)
    if ours["status"] != "rendered":
        return failed_row(case, ours)
    theirs = run_worker("mitsuba", {**base, "width": args.res, "spp": args.spp, "ref_spp": args.ref_spp,
                                    "seeds": list(range(max(MITSUBA_SEEDS, args.seeds)))}, args.timeout)
    if theirs["status"] != "rendered":
        return failed_row(case, theirs)
    agree, figures = judge_gallery(ours["seeds"], theirs["seeds"], theirs["ref"], spp, args.ref_spp)
    if spp != args.spp:
        figures = f"{figures} at {spp} spp (as Mitsuba's sampler takes {args.spp})"
    times = (f"ours {ours['first_s']:.1f}s first render, then {ours['render_s']:.1f}s; "
             f"Mitsuba {theirs['render_s']:.1f}s")
    return Row(case, "agree" if agree else "differ", f"{figures}; {times}")


def run_regression(case, args):
    ref, var = (im.read_exr(p) for p in case.refs)
    spp = ztest.spp_for(ref.shape[1], ref.shape[0])
    base = {"path": str(case.path), "params": {"spp": spp, "integrator": case.integrator},
            "spp": spp, "seeds": [0]}
    theirs = run_worker("mitsuba", {**base, "variant": args.variant, "width": 0, "ref_spp": 0}, args.timeout)
    if theirs["status"] != "rendered":
        return failed_row(case, theirs)
    mitsuba_test = ztest.z_test(theirs["seeds"][0], spp, ref, var)
    mitsuba_note = f"Mitsuba {describe_z(mitsuba_test)} in {theirs['render_s']:.1f}s with JIT"
    if args.self_check:
        return Row(case, "agree" if mitsuba_test.passed else "differ", f"{spp} spp: {mitsuba_note}",
                   mitsuba_self=mitsuba_test.passed)
    ours = run_worker("ours", {**base, "resolution": None}, args.timeout)
    if ours["status"] != "rendered":
        return failed_row(case, ours, mitsuba_note, mitsuba_test.passed)
    if ours["seeds"].shape[1:] != ref.shape:
        return Row(case, "differ", f"image {ours['seeds'].shape[1:]} vs reference {ref.shape}; {mitsuba_note}",
                   mitsuba_self=mitsuba_test.passed)
    our_test = ztest.z_test(ours["seeds"][0], spp, ref, var)
    return Row(case, "agree" if our_test.passed else "differ",
               f"{spp} spp: ours {describe_z(our_test)} in {ours['first_s']:.1f}s with compile; {mitsuba_note}",
               mitsuba_self=mitsuba_test.passed)


def run_case(case, args):
    try:
        return run_regression(case, args) if case.refs else run_gallery(case, args)
    except Exception as err:  # a bug of this script must not stop the table
        return Row(case, "crashed", f"harness: {type(err).__name__}: {first_line(err)}")


# ------------------------------------------------------------------------------------ report
def summarize(rows):
    """The summary lines: agreement per group, Mitsuba's self-check, first errors grouped."""
    lines = []
    for label, group in (("surface", [r for r in rows if not r.case.media]),
                         ("with media (a later issue)", [r for r in rows if r.case.media])):
        if not group:
            continue
        counts = collections.Counter(r.status for r in group)
        judged = len(group) - counts["mitsuba cannot"]
        others = "".join(f", {k} {v}" for k, v in sorted(counts.items()) if k != "agree")
        lines.append(f"{label}: agree {counts['agree']} of {judged} that Mitsuba renders{others}")
    for label, media in (("surface scenes", False), ("scenes with media", True)):
        checked = [r.mitsuba_self for r in rows if r.mitsuba_self is not None and r.case.media == media]
        if checked:
            lines.append(f"Mitsuba's own renders pass its z-test on {sum(checked)} of {len(checked)} {label}")
    for label, group in (("surface", [r for r in rows if not r.case.media]),
                         ("media", [r for r in rows if r.case.media])):
        errors = collections.Counter(r.error for r in group if r.status == "refused")
        if errors:
            lines.append(f"first errors of the refused {label} scenes ({sum(errors.values())}):")
            lines += [f"  {n:4d}  {message}" for message, n in errors.most_common()]
    return lines


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path, help="a folder of Mitsuba 3 scenes")
    parser.add_argument("--res", type=int, default=64, help="gallery mode: image width in pixels")
    parser.add_argument("--spp", type=int, default=64, help="gallery mode: samples per pixel of each render")
    parser.add_argument("--seeds", type=int, default=4, help="gallery mode: our renders per scene")
    parser.add_argument("--ref-spp", type=int, default=1024, help="gallery mode: Mitsuba's reference spp")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per render process")
    parser.add_argument("--only", action="append", help="scenes whose relative path matches (glob or substring)")
    parser.add_argument("--jobs", type=int, default=1, help="scenes judged at once")
    parser.add_argument("--mode", choices=("auto", "gallery", "regression"), default="auto")
    parser.add_argument("--variant", default="llvm_ad_rgb", help="Mitsuba variant (scalar_rgb without LLVM 19)")
    parser.add_argument("--self-check", action="store_true",
                        help="judge Mitsuba's own renders (other seeds) in our tracer's place: checks the criteria")
    return parser.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(*argv[1:])
    args = parse_args(argv)
    cases = find_cases(args.dir, args.mode, args.only)
    if not cases:
        raise SystemExit(f"{args.dir}: no scenes")
    width = max(len(c.name) for c in cases)
    mitsuba = run_worker("variant", {"variant": args.variant}, args.timeout)
    print(f"{len(cases)} scenes in {args.dir}; Mitsuba {mitsuba.get('version')} {mitsuba.get('variant')}"
          f"{'; Mitsuba in our place (--self-check)' if args.self_check else ''}", flush=True)
    rows, t0 = [], time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for row in pool.map(lambda c: run_case(c, args), cases):
            mode = "regr" if row.case.refs else "gall"
            media = " media" if row.case.media else ""
            detail = row.detail.replace(f"{args.dir.resolve()}/", "")  # paths relative to DIR
            print(f"{row.case.name:<{width}}  {mode}{media:6}  {row.status:<14}  {detail}", flush=True)
            rows.append(row)
    print(f"-- {time.perf_counter() - t0:.0f}s")
    print("\n".join(summarize(rows)))


if __name__ == "__main__":
    main()
