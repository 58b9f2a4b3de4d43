"""A noise target for a shot against uniform sampling: the same worst-frame error for fewer samples?

    python scripts/bench_adaptive.py [--frames 8] [--hold 4] [--res 32] [--tile 16] [--uniform-spp 2048]
                                     [--max-spp 16384] [--min-spp N] [--ref-spp 32768] [--noise E]
                                     [--seeds 0,1,2] [--out DIR]

The shot is ``examples/lamp.xml``: a room lit by a small lamp, its shade beside the lamp (``shade``
0.65) up to frame ``--hold``, then sliding linearly to under it (0) at the last frame: the issue's
lamp, whose frames differ several times in the samples they need. The lamp is covered from below
wherever the shade is within 0.4 of it: with the defaults the last two of eight frames, with
``--hold 0`` (the shade sliding over the whole shot) the last five, where no allocation over
frames can save 2x (printed: "at best").
Three renders of every frame:

1. the reference: Mitsuba 3 ``scalar_rgb`` at ``--ref-spp`` (kept in ``--out`` and reused). Not
   ``llvm_ad_rgb``, though it is several times faster: Mitsuba's JIT variants weigh a sample by the
   reconstruction filter in closed form, its scalar variant (and so our tracer, ``tracer.filters``)
   by the filter's table of 32 values. With the lamp's gaussian the two differ by about 2e-4
   relative MSE at 16x16 (most around the lamp), more than the error measured here;
2. uniform: ``farm render --spp U`` (every tile of every frame at U);
3. with a noise target: ``farm render --noise E --spp MAX`` (default E: the uniform store's own
   estimate of its worst frame's noise, ``farm status --json``: what a user asking for "the
   uniform render's worst frame, everywhere" would ask).

Printed per frame: samples per pixel spent and the real relative MSE against the reference
(``tests/helpers/image_metrics.relative_mse``), for both, and the estimate (noise^2) each store
gives; then the totals and the ratio of samples spent. With ``--seeds``, both runs for each job
seed, and the frames' means over the seeds: a frame's real error is itself a random draw (on an
easy frame most of it lies in the few pixels beside the lamp, hit or missed), and the mean over
seeds compares the errors one expects rather than one draw of each. Target: the adaptive run's worst frame at
or below the uniform run's, with at least 2x fewer samples.

Also printed, the most any target on frames' errors could save on this shot: a frame whose real
error at U spp is r needs U r / r_max spp to match the worst frame's r_max (error falls as 1/spp),
so at best the shot costs U sum(max(r / r_max, m / U)) against uniform's U F, with m the least
spp a frame gets (``--min-spp``; 256 by default). A per-tile target matches the worst frame's error
with a frame's mean spp no lower than that (a tile's spp goes as its own error, so a frame's mean
as its mean error), plus up to an eighth more where a tile stops at the next checkpoint.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCENE = ROOT / "examples" / "lamp.xml"


def shade_curve(frames, hold):
    from farm.curves import Curve
    keys = ((0, 0.65), (hold, 0.65), (frames - 1, 0.0)) if hold else ((0, 0.65), (frames - 1, 0.0))
    return Curve("shade", keys)


def references(args, out):
    """Mitsuba's (``scalar_rgb``) frames at ``--ref-spp`` (cached as npy under ``out``)."""
    import mitsuba as mi
    mi.set_variant("scalar_rgb")
    curve, refs = shade_curve(args.frames, args.hold), []
    for f in range(args.frames):
        shade = float(curve.at(f))
        path = out / f"ref_scalar_{args.res}_{args.ref_spp}_shade{shade:.6f}.npy"
        if not path.exists():
            t0 = time.perf_counter()
            scene = mi.load_file(str(SCENE), res=args.res, shade=repr(shade))
            np.save(path, np.asarray(mi.render(scene, spp=args.ref_spp, seed=12345), np.float32))
            print(f"reference frame {f}: {time.perf_counter() - t0:.1f} s", flush=True)
        refs.append(np.load(path))
    return refs


def farm(*args):
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "farm.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                            text=True)
    if result.returncode:
        sys.exit(f"farm {' '.join(map(str, args))} failed: {result.stderr[-2000:]}")
    return result.stdout, time.perf_counter() - t0


def render(args, store, *extra):
    """Render the shot into ``store``; (frames as float32 (H, W, 3), status per frame, seconds)."""
    keys = ",".join(f"{f}:{v}" for f, v in shade_curve(args.frames, args.hold).keys)
    _, seconds = farm("render", SCENE, "--frames", f"0-{args.frames - 1}", "--res", f"{args.res}x{args.res}",
                      "--tile", args.tile, "--set", f"shade={keys}", "--out", store,
                      "--no-progress", *extra)
    status = json.loads(farm("status", store, "--json")[0])["per_frame"]
    folder = pathlib.Path(str(store) + "-npy")
    farm("export", store, "--format", "npy", "--out", folder)
    frames = [np.load(folder / f"frame_{f:04d}.npy") for f in range(args.frames)]
    return frames, status, seconds


def run_seed(args, out, seed):
    """(uniform, adaptive, target) of one job seed: each a ``render`` tuple; the uniform store is kept."""
    tag = f"{args.res}_{args.tile}_{args.frames}_{args.hold}" + (f"_s{seed}" if seed else "")
    uniform = render(args, out / f"uniform_{tag}_{args.uniform_spp}.zarr", "--spp", args.uniform_spp, "--seed", seed)
    target = args.noise or max(s["noise"] for s in uniform[1])
    extra = ["--noise", target, "--spp", args.max_spp, "--seed", seed, "--replace"]
    if args.min_spp:
        extra += ["--min-spp", args.min_spp]
    return uniform, render(args, out / f"adaptive_{tag}.zarr", *extra), target


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--hold", type=int, default=4,
                    help="The last frame with the shade beside the lamp (0: it slides from the first).")
    ap.add_argument("--res", type=int, default=32)
    ap.add_argument("--tile", type=int, default=16)
    ap.add_argument("--uniform-spp", type=int, default=2048)
    ap.add_argument("--max-spp", type=int, default=16384)
    ap.add_argument("--min-spp", type=int, default=None)
    ap.add_argument("--ref-spp", type=int, default=32768)
    ap.add_argument("--noise", type=float, default=None, help="The target (default: the uniform run's worst frame's).")
    ap.add_argument("--seeds", default="0,1,2", help="Job seeds, comma-separated: each a uniform and an adaptive run.")
    ap.add_argument("--out", default="/tmp/bench_adaptive")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    refs, seeds = references(args, out), [int(s) for s in args.seeds.split(",")]
    report(args, refs, seeds, [run_seed(args, out, seed) for seed in seeds])


def report(args, refs, seeds, runs):
    """Print the table of ``runs`` (``run_seed``'s, one per seed) against the references."""
    from farm.adaptive import DEFAULT_MIN_SPP
    from tests.helpers.image_metrics import relative_mse

    # errors[i][f][k]: the real relative MSE of run i (0 uniform, 1 adaptive), frame f, seed k; spp, est alike
    errors = [[[relative_mse(r[i][0][f], refs[f]) for r in runs] for f in range(args.frames)] for i in (0, 1)]
    spp = [[[r[i][1][f]["spp"] for r in runs] for f in range(args.frames)] for i in (0, 1)]
    est = [[[r[i][1][f]["noise"] ** 2 for r in runs] for f in range(args.frames)] for i in (0, 1)]
    mean = lambda xs: sum(xs) / len(xs)
    print(f"\n{args.frames} frames of {SCENE.name} at {args.res}x{args.res}, tiles of {args.tile}; reference: "
          f"Mitsuba at {args.ref_spp} spp; noise target {mean([r[2] for r in runs]):.4f} (rel MSE "
          f"{mean([r[2] ** 2 for r in runs]):.2e}), at most {args.max_spp} spp; job seeds {args.seeds} "
          f"(means over them)\n")
    print("| frame | shade | uniform spp | uniform rel MSE (est.) | adaptive spp | adaptive rel MSE (est.) |")
    print("|---|---|---|---|---|---|")
    curve = shade_curve(args.frames, args.hold)
    for f in range(args.frames):
        print(f"| {f} | {curve.at(f):.3f} | {mean(spp[0][f]):.0f} | {mean(errors[0][f]):.2e} ({mean(est[0][f]):.2e}) | "
              f"{mean(spp[1][f]):.0f} | {mean(errors[1][f]):.2e} ({mean(est[1][f]):.2e}) |")
    for k, seed in enumerate(seeds):
        worst = [max(errors[i][f][k] for f in range(args.frames)) for i in (0, 1)]
        spent = [sum(spp[i][f][k] for f in range(args.frames)) for i in (0, 1)]
        print(f"seed {seed}: worst frame uniform {worst[0]:.2e}, adaptive {worst[1]:.2e} ({worst[1] / worst[0]:.2f}x); "
              f"samples per pixel over the shot: uniform {spent[0]:.0f}, adaptive {spent[1]:.0f}: "
              f"{spent[0] / spent[1]:.2f}x fewer; wall time: uniform {runs[k][0][2]:.0f} s, "
              f"adaptive {runs[k][1][2]:.0f} s")
    worst = [max(mean(errors[i][f]) for f in range(args.frames)) for i in (0, 1)]
    spent = [sum(mean(spp[i][f]) for f in range(args.frames)) for i in (0, 1)]
    print(f"\nworst frame (of the mean errors): uniform {worst[0]:.2e}, adaptive {worst[1]:.2e} "
          f"({worst[1] / worst[0]:.2f}x); samples per pixel over the shot: uniform {spent[0]:.0f}, adaptive "
          f"{spent[1]:.0f}: {spent[0] / spent[1]:.2f}x fewer")
    least = min(args.min_spp or DEFAULT_MIN_SPP, args.uniform_spp) / args.uniform_spp
    best = sum(max(mean(errors[0][f]) / worst[0], least) for f in range(args.frames))
    print(f"at best (each frame at the spp that gives the worst frame's error, at least "
          f"{least * args.uniform_spp:.0f}): {args.uniform_spp * best:.0f} spp over the shot, "
          f"{args.frames / best:.2f}x fewer")

if __name__ == "__main__":
    main()
