"""`farm render` of a small animation end to end, against Mitsuba 3 rendering the same frames.

    python scripts/bench_vs_mitsuba.py [--scene examples/orbit.xml] [--frames 8] [--res 160x120]
                                       [--spp 64] [--param angle --step 6] [--variant llvm_ad_rgb]

In one run, each in a fresh process:

1. ``farm render`` of the job into a new store with an empty compilation cache (cold);
2. the same job refined to twice the samples on that store: the same amount of new work, with
   the programs the first run put in the cache (warm; it should compile nothing);
3. Mitsuba (``llvm_ad_rgb`` if it loads, else ``scalar_rgb``) loading and rendering every frame in
   a loop in one process.

Printed for each farm run: wall time from the process's start, start-up to the first dispatched
task (and where it went: imports, the scene check, ``ray.init``, forming the group, waiting for the
preflight's compilation ahead of the members), the members'
XLA programs (compiled or loaded from the cache, and their seconds), and the steady state per
frame (the time between the first and the last task's results, per frame rendered in it). For
Mitsuba: wall time, the first frame (its JIT compile included) and the steady state per frame.
Ratios are Mitsuba's time over ours (1.0: as fast as Mitsuba).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"


def farm_worker(argv):
    """Runs in its own process: ``farm render`` with time stamps at the start-up's steps."""
    t0 = time.monotonic()
    marks, results = {}, []
    stamp = lambda name: marks.setdefault(name, time.monotonic() - t0)

    def wrap(owner, name, before=None, after=None, keep=False):
        original = getattr(owner, name)

        def wrapped(*a, **k):
            if before:
                stamp(before)
            out = original(*a, **k)
            if after:
                stamp(after)
            if keep:
                results.append((time.monotonic() - t0, out))
            return out
        setattr(owner, name, wrapped)

    import ray
    sys.path.insert(0, str(ROOT))
    from cluster import group
    from farm import cli, scene_check, scheduler

    stamp("imports")
    wrap(scene_check.Preflight, "checked", after="scene checked")
    wrap(scene_check.Preflight, "wait", after="compiled ahead")
    wrap(ray, "init", before="ray.init", after="ray ready")
    wrap(group.WorkerGroup, "start", after="group formed")
    wrap(group.WorkerGroup, "submit", before="first dispatch")
    wrap(scheduler, "run_job", keep=True)
    task_times = []
    result = group.WorkerGroup.result
    group.WorkerGroup.result = lambda self, h: task_times.append(time.monotonic() - t0) or result(self, h)
    code = cli.main(argv)
    stamp("end")
    stats = results[-1][1].stats if results else {}
    print(json.dumps({"code": code, "marks": marks, "tasks": task_times, "compile": stats.get("compile")}))


def mitsuba_worker(args):
    """Runs in its own process: Mitsuba renders the frames in a loop."""
    t0 = time.monotonic()
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", DEFAULT_LLVM)
    import mitsuba as mi
    import numpy as np

    try:
        mi.set_variant(args.variant)
    except Exception:
        mi.set_variant("scalar_rgb")
    width, height = map(int, args.res.split("x"))
    times = []
    for f in range(args.frames):
        scene = mi.load_file(args.scene, width=width, height=height, **{args.param: str(f * args.step)})
        np.asarray(mi.render(scene, spp=args.spp, seed=f))
        times.append(time.monotonic() - t0)
    print(json.dumps({"variant": mi.variant(), "times": times}))


def child(argv, env):
    out = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{argv[:3]} failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(lines[-1]), out.stderr


def farm_figures(r, frames):
    m, tasks = r["marks"], r["tasks"]
    per_frame = (tasks[-1] - tasks[0]) / (frames * (len(tasks) - 1) / len(tasks)) if len(tasks) > 1 else None
    # Seconds from the start at each step: Ray starts beside the scene check, so they overlap.
    steps = [f"{name} at {m[name]:.1f}" for name in ("imports", "ray.init", "scene checked", "ray ready",
                                                     "group formed", "compiled ahead", "first dispatch") if name in m]
    return dict(total=m["end"], startup=m["first dispatch"], steps=", ".join(steps), per_frame=per_frame,
                first_result=tasks[0] - m["first dispatch"], compile=r["compile"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", default=str(ROOT / "examples" / "orbit.xml"))
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--res", default="160x120")
    ap.add_argument("--spp", type=int, default=64)
    ap.add_argument("--param", default="angle", help="the scene <default> animated over the frames")
    ap.add_argument("--step", type=float, default=6.0, help="its value at frame f is f * step")
    ap.add_argument("--variant", default="llvm_ad_rgb")
    ap.add_argument("--farm-worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ap.add_argument("--mitsuba-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.farm_worker is not None:
        return farm_worker(args.farm_worker)
    if args.mitsuba_worker:
        return mitsuba_worker(args)

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-vs-mitsuba-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               JAXFARM_XLA_CACHE=str(tmp / "xla"), FARM_REGISTRY=str(tmp / "registry"))
    last = args.frames - 1
    job = [args.scene, "--frames", f"0-{last}", "--res", args.res, "--set", f"{args.param}=0:0,{last}:{last * args.step}",
           "--out", str(tmp / "job.zarr"), "--no-progress"]
    me = [__file__, "--farm-worker", "render"]
    print(f"{args.scene}: {args.frames} frames at {args.res}, {args.spp} spp ...", file=sys.stderr, flush=True)
    cold, _ = child(me + job + ["--spp", str(args.spp)], env)
    warm, _ = child(me + job + ["--spp", str(2 * args.spp)], env)
    base = [__file__, "--mitsuba-worker", "--scene", args.scene, "--frames", str(args.frames), "--res", args.res,
            "--spp", str(args.spp), "--param", args.param, "--step", str(args.step), "--variant", args.variant]
    mitsuba, _ = child(base, env)

    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) at the end")
    mt = mitsuba["times"]
    m_total, m_first = mt[-1], mt[0]
    m_frame = (mt[-1] - mt[0]) / (len(mt) - 1) if len(mt) > 1 else m_total
    print(f"\nMitsuba {mitsuba['variant']}: {m_total:.1f} s ({m_first:.1f} s to the first frame, "
          f"{m_frame:.2f} s a frame after it)")
    for name, r in (("farm, cold cache", cold), ("farm, refined, warm cache", warm)):
        f = farm_figures(r, args.frames)
        c = f["compile"] or {}
        print(f"{name}: {f['total']:.1f} s (ratio {m_total / f['total']:.3f}); start-up to the first dispatch "
              f"{f['startup']:.1f} s ({f['steps']}); first result {f['first_result']:.1f} s after it; "
              f"XLA programs {c.get('programs')}, {c.get('compiled')} compiled, {c.get('cache_hits')} from the cache, "
              f"{c.get('seconds', 0):.1f} s; per frame {f['per_frame']:.2f} s (ratio {m_frame / f['per_frame']:.3f})")


if __name__ == "__main__":
    sys.exit(main())
