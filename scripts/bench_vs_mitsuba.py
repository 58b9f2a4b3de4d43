"""`farm render` of a small animation end to end, against Mitsuba 3 rendering the same frames.

    python scripts/bench_vs_mitsuba.py [--scene examples/orbit.xml] [--frames 8] [--res 160x120]
                                       [--spp 64] [--param angle --step 6] [--variant llvm_ad_rgb]
    python scripts/bench_vs_mitsuba.py --equal-error [--noise 0.05] [--max-spp 4096] [--ref-spp 4096]
                                       [--mitsuba-max-spp 1024] [same scene options]

In one run, each in a fresh process:

1. ``farm render`` of the job into a new store with an empty compilation cache (cold);
2. the same job refined to twice the samples on that store: the same amount of new work, with
   the programs the first run put in the cache (warm; it should compile nothing);
3. Mitsuba (``llvm_ad_rgb`` if it loads, else ``scalar_rgb``) loading and rendering every frame in
   a loop in one process.

Printed for each farm run: wall time from the process's start, start-up to the first dispatched
task (a group's, or the preflight child's where it renders; and where it went: imports, the scene
check, ``ray.init``, forming the group, waiting for the preflight's compilation ahead of the
members), the job's XLA programs (compiled or loaded from the cache, and their seconds), and the steady state per
frame (the time between the first and the last task's results, per frame rendered in it). For
Mitsuba: wall time, the first frame (its JIT compile included) and the steady state per frame.
Ratios are Mitsuba's time over ours (1.0: as fast as Mitsuba).

``--equal-error`` measures instead the figure a user pays for: the time each needs to reach the
same error on the shot. Both render a variant of the scene with a box filter (Mitsuba's JIT
variants weigh samples by the filter in closed form, ours and its scalar variant from a table;
for a box the two agree), written beside the run's files with its mesh and texture paths made
absolute:

1. the reference: Mitsuba ``--variant`` with its ``independent`` sampler at ``--ref-spp``;
2. ours: ``farm render --noise N --spp MAX`` with our best sampler (``ldsampler`` in the file:
   our Owen-scrambled Sobol sequence), once with an empty compilation cache and once with the
   cache the first run left (a second store: the same bits, so the same error); its error is the
   frames' mean relative MSE against the reference, its samples those the store says it spent;
3. Mitsuba with each of its samplers (``independent``, ``stratified``, ``multijitter``,
   ``ldsampler``) at uniform sample counts 4, 16, 64, ... up to ``--mitsuba-max-spp``, each count
   a loop over the frames in a process of its own (its JIT compile included, as in the default
   mode); the time it needs for our error is interpolated between the two counts around it (log
   time against log error), and the best sampler's is the one compared.

Printed: each run's error, time and samples per second, and the ratio Mitsuba's time at equal
error over ours, cold and warm.
"""
import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as XmlTree

import defusedxml.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"


def after_import(hooks):
    """Call ``hooks[name](module)`` once, as soon as the module ``name`` has been imported."""
    import builtins
    importing = builtins.__import__

    def hooked(*args, **kwargs):
        module = importing(*args, **kwargs)
        done = lambda n: n in sys.modules and not getattr(sys.modules[n].__spec__, "_initializing", False)
        for name in [n for n in hooks if done(n)]:
            hooks.pop(name)(sys.modules[name])
        return module
    builtins.__import__ = hooked


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

    sys.path.insert(0, str(ROOT))
    from farm import cli, scene_check

    stamp("imports")
    task_times = []

    def answered(answer):
        ended, out = answer
        if ended and out is not None:
            task_times.append(time.monotonic() - t0)

    def wrap_ray(ray):
        wrap(ray, "init", before="ray.init", after="ray ready")

    def wrap_group(group):
        wrap(group.WorkerGroup, "start", after="group formed")
        wrap(group.WorkerGroup, "submit", before="first dispatch")
        result = group.WorkerGroup.result
        group.WorkerGroup.result = lambda self, h: task_times.append(time.monotonic() - t0) or result(self, h)

    # Ray and the groups' module are wrapped as the driver imports them, not imported here first:
    # the driver starts its preflight child before it imports them (farm.cli).
    after_import({"ray": wrap_ray, "cluster.group": wrap_group,
                  "farm.scheduler": lambda scheduler: wrap(scheduler, "run_job", keep=True)})
    wrap(scene_check.Preflight, "checked", after="scene checked")
    compiled = scene_check.Preflight.compiled_within  # (the child's word that it has the program)
    scene_check.Preflight.compiled_within = lambda self, t: (
        lambda c: (c and stamp("compiled ahead")) or c)(compiled(self, t))
    wrap(scene_check.Preflight, "send", before="first dispatch")  # (the child's first task, where it renders)
    answer = scene_check.Preflight.answer
    scene_check.Preflight.answer = lambda self, timeout_s: (lambda a: answered(a) or a)(answer(self, timeout_s))
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


MITSUBA_SAMPLERS = ("independent", "stratified", "multijitter", "ldsampler")


def scene_variant(scene, sampler, out):
    """``scene`` with a box filter and ``sampler`` (keeping its sample count), written to ``out``
    with its files' relative paths made absolute (they were relative to the scene's folder)."""
    tree = ET.parse(scene)
    root, folder = tree.getroot(), pathlib.Path(scene).resolve().parent
    for string in root.iter("string"):
        if string.get("name") == "filename" and not os.path.isabs(string.get("value", "")):
            string.set("value", str(folder / string.get("value")))
    for sensor in root.iter("sensor"):
        for film in sensor.iter("film"):
            for old in film.findall("rfilter"):
                film.remove(old)
            XmlTree.SubElement(film, "rfilter", type="box")
        for old in sensor.findall("sampler"):
            old.set("type", sampler)
    XmlTree.ElementTree(root).write(out)
    return out


def mitsuba_spp_worker(args):
    """Runs in its own process: Mitsuba renders every frame of the ``--scene`` variant at
    ``--spp`` into ``--images`` (npy), timing the loop."""
    t0 = time.monotonic()
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", DEFAULT_LLVM)
    import mitsuba as mi
    import numpy as np

    mi.set_variant(args.variant)
    width, height = map(int, args.res.split("x"))
    out = pathlib.Path(args.images)
    for f in range(args.frames):
        scene = mi.load_file(args.scene, width=width, height=height, **{args.param: str(f * args.step)})
        np.save(out / f"frame_{f:04d}.npy", np.asarray(mi.render(scene, spp=args.spp, seed=f + args.seed), np.float32))
    print(json.dumps({"seconds": time.monotonic() - t0}))


def _mean_error(folder, refs):
    import numpy as np
    sys.path.insert(0, str(ROOT))
    from tests.helpers.image_metrics import relative_mse
    return float(np.mean([relative_mse(np.load(folder / f"frame_{f:04d}.npy")[..., :3], ref)
                          for f, ref in enumerate(refs)]))


def _at_error(points, target):
    """Seconds at ``target`` error, interpolated in log-log between the measured (error, seconds)
    around it; None where the target lies outside them."""
    points = sorted(points, key=lambda p: -p[0])
    for (e0, t0), (e1, t1) in zip(points, points[1:]):
        if e1 <= target <= e0 and e0 > e1:
            w = (math.log(e0) - math.log(target)) / (math.log(e0) - math.log(e1))
            return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))
    return None


def equal_error(args, tmp, env):
    """The ``--equal-error`` mode (see the module's docstring)."""
    import numpy as np
    width, height = map(int, args.res.split("x"))
    last = args.frames - 1
    ours_scene = scene_variant(args.scene, "ldsampler", tmp / "ours.xml")
    mitsuba_args = ["--frames", str(args.frames), "--res", args.res, "--param", args.param, "--step", str(args.step),
                    "--variant", args.variant]

    def mitsuba(sampler, spp, seed=0):
        folder = tmp / f"mitsuba_{sampler}_{spp}_{seed}"
        folder.mkdir()
        scene = scene_variant(args.scene, sampler, tmp / f"{sampler}.xml")
        r, _ = child([__file__, "--mitsuba-spp-worker", "--scene", str(scene), "--spp", str(spp), "--images", str(folder),
                      "--seed", str(seed), *mitsuba_args], env)
        return folder, r["seconds"]

    print(f"{args.scene}: {args.frames} frames at {args.res}, box filter; reference {args.variant} at {args.ref_spp} "
          f"spp ...", file=sys.stderr, flush=True)
    ref_folder, ref_s = mitsuba("independent", args.ref_spp, seed=1 << 20)
    refs = [np.load(ref_folder / f"frame_{f:04d}.npy") for f in range(args.frames)]

    job = [str(ours_scene), "--frames", f"0-{last}", "--res", args.res, "--set", f"{args.param}=0:0,{last}:{last * args.step}",
           "--noise", str(args.noise), "--spp", str(args.max_spp), "--no-progress"]
    ours = {}
    for name in ("cold", "warm"):
        store = tmp / f"ours_{name}.zarr"
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "farm.cli", "render", *job, "--out", str(store)], env=env, check=True,
                       capture_output=True)
        seconds = time.monotonic() - t0
        status = json.loads(subprocess.run([sys.executable, "-m", "farm.cli", "status", str(store), "--json"], env=env,
                                           check=True, capture_output=True, text=True).stdout)
        folder = tmp / f"ours_{name}_npy"
        subprocess.run([sys.executable, "-m", "farm.cli", "export", str(store), "--format", "npy", "--out", str(folder)],
                       env=env, check=True, capture_output=True)
        spp = [frame["spp"] for frame in status["per_frame"]]
        ours[name] = dict(seconds=seconds, error=_mean_error(folder, refs), samples=sum(spp) * width * height,
                          spp=float(np.mean(spp)))
    target = ours["cold"]["error"]
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) at the end of ours")
    print(f"\nreference: {args.variant}, independent, {args.ref_spp} spp ({ref_s:.1f} s)")
    for name, r in ours.items():
        print(f"ours ({name} cache): noise target {args.noise}, mean {r['spp']:.0f} spp a frame, rel MSE {r['error']:.3g}, "
              f"{r['seconds']:.1f} s, {r['samples'] / r['seconds'] / 1e6:.2f} Msamples/s")
    best = None
    for sampler in MITSUBA_SAMPLERS:
        points, spp = [], 4
        while spp <= args.mitsuba_max_spp:
            folder, seconds = mitsuba(sampler, spp)
            error = _mean_error(folder, refs)
            points.append((error, seconds))
            print(f"Mitsuba {sampler} {spp} spp: rel MSE {error:.3g}, {seconds:.1f} s, "
                  f"{spp * width * height * args.frames / seconds / 1e6:.2f} Msamples/s", flush=True)
            if error < target:
                break
            spp *= 4
        at = _at_error(points, target)
        print(f"Mitsuba {sampler} at rel MSE {target:.3g}: " + (f"{at:.1f} s" if at else "not bracketed"))
        if at is not None and (best is None or at < best[1]):
            best = (sampler, at)
    if best is None:
        print("no Mitsuba sampler bracketed our error: raise --mitsuba-max-spp or --noise")
        return 1
    for name, r in ours.items():
        print(f"equal error, {name} cache: Mitsuba ({best[0]}) {best[1]:.1f} s against ours {r['seconds']:.1f} s: "
              f"ratio {best[1] / r['seconds']:.3f}")
    return 0


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
    ap.add_argument("--equal-error", action="store_true", help="Time to equal error instead (see above).")
    ap.add_argument("--noise", type=float, default=0.05, help="--equal-error: our noise target.")
    ap.add_argument("--max-spp", type=int, default=4096, help="--equal-error: our most samples per pixel.")
    ap.add_argument("--ref-spp", type=int, default=4096, help="--equal-error: the reference's samples per pixel.")
    ap.add_argument("--mitsuba-max-spp", type=int, default=4096, help="--equal-error: Mitsuba's most samples per pixel.")
    ap.add_argument("--farm-worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    ap.add_argument("--mitsuba-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mitsuba-spp-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--images", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.farm_worker is not None:
        return farm_worker(args.farm_worker)
    if args.mitsuba_worker:
        return mitsuba_worker(args)
    if args.mitsuba_spp_worker:
        return mitsuba_spp_worker(args)

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-vs-mitsuba-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               JAXFARM_XLA_CACHE=str(tmp / "xla"), FARM_REGISTRY=str(tmp / "registry"))
    if args.equal_error:
        return equal_error(args, tmp, env)
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
