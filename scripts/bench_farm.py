"""The farm's overhead: a 24-frame job through `farm render` against a plain loop of tracer calls.

    python scripts/bench_farm.py [--frames 24] [--res 320x240] [--spp 16] [--scene examples/orbit.xml]

Both sides render the same frames with the same reduction tree (tile, pass and chunk sizes), each
in a fresh process: the farm on its embedded local Ray with one worker group (Ray start-up, the
store, the scheduler and the group's start-up included), twice: cold (a compilation cache of the
run's own, empty) and warm (a second job, another store, on that cache); the loop as
``tracer.load_scene`` then ``tracer.render`` per frame, as a user's script runs it, twice too:
cold (its compile included, into a cache of its own) and warm (on that cache). Printed: wall time
of each, from the process's start to its exit for both (the interpreter's start-up and exit are
the loop's too), the farm's over the loop's (its overhead), and the time to the first finished
frame (for the farm: until every task of some frame is recorded in the store). The final images
are compared bit for bit.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def loop_worker(args):
    """Runs in its own process: the plain loop. Prints JSON: when it finished its first frame (``time.time()``)."""
    import tracer
    from farm.spec import JobSpec
    spec = JobSpec.from_json(json.loads(pathlib.Path(args.spec).read_text()))
    first = None
    out = pathlib.Path(args.out)
    for frame in range(spec.frames[0], spec.frames[1] + 1):
        scene = tracer.load_scene(spec.scene, resolution=spec.resolution, **dict(spec.params_at(frame)))
        image = tracer.render(scene, spp=spec.spp, seed=spec.seed, frame=frame, tile=spec.tile,
                              pass_size=spec.pass_size, chunk_passes=spec.chunk_passes)
        np.save(out / f"frame_{frame:04d}.npy", image)
        if first is None:
            first = time.time()
    print(json.dumps({"first_at": first}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scene", default=str(ROOT / "examples" / "orbit.xml"))
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--res", default="320x240")
    ap.add_argument("--spp", type=int, default=16)
    ap.add_argument("--loop-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.loop_worker:
        return loop_worker(args)

    from farm.export import export_frames
    from farm.job import open_store
    from farm.store import FrameStore
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_farm_"))
    store = tmp / "job.zarr"
    last = args.frames - 1
    farm_cmd = [sys.executable, "-m", "farm.cli", "render", args.scene, "--frames", f"0-{last}", "--spp",
                str(args.spp), "--res", args.res, "--set", f"angle=0:0,{last}:{15 * last}", "--out"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    print(f"{os.cpu_count()} cores; {args.frames} frames of {args.scene} at {args.res}, {args.spp} spp", flush=True)

    def run_farm(store):
        """(wall seconds, seconds to the first finished frame) of ``farm render`` into ``store``."""
        t0 = time.perf_counter()
        cmd = [*farm_cmd, str(store), "--no-progress"]  # (farm_cmd ends with --out)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        first_frame = None
        while proc.poll() is None:
            if first_frame is None and FrameStore.exists(str(store)):
                records = FrameStore.open(str(store), mode="r").all_records()
                if np.any(np.all(records["folded"].reshape(records.shape[0], -1) > 0, axis=1)):
                    first_frame = time.perf_counter() - t0
            try:  # polling the store costs the farm CPU time: not too often (its end is seen at once)
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        if proc.returncode != 0:
            raise SystemExit(f"farm failed: {proc.stderr.read()[-2000:]}")
        return time.perf_counter() - t0, first_frame

    # Cold: a compilation cache of the run's own, empty; warm: a second job (another store) on it.
    env["JAXFARM_XLA_CACHE"] = str(tmp / "xla-cache")
    farm_s, first_frame = run_farm(store)
    warm_s, warm_first = run_farm(tmp / "warm.zarr")
    spec, fs = open_store(str(store))
    farm_images = [np.load(path) for _, path, _ in export_frames(spec, fs, None, "npy", str(tmp / "farm"))]

    spec_path = tmp / "spec.json"
    spec_path.write_text(json.dumps(fs.spec_json))
    (tmp / "loop").mkdir()
    # The loop runs with the farm workers' deterministic CPU flags, so that the bits can be compared.
    from tracer.runtime.xla_flags import with_flags
    # As the farm's runs: a compilation cache of the loop's own, empty (cold), then again on it (warm).
    loop_env = dict(env, XLA_FLAGS=with_flags(os.environ.get("XLA_FLAGS", ""), devices=1),
                    JAXFARM_XLA_CACHE=str(tmp / "loop-cache"))
    loops = []
    for _ in range(2):  # timed as the farm's runs are: from the process's start to its exit
        started, t0 = time.time(), time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--loop-worker", "--spec", str(spec_path), "--out", str(tmp / "loop")],
                             cwd=ROOT, env=loop_env, capture_output=True, text=True, check=True)
        total = time.perf_counter() - t0
        loops.append({"total_s": total, "first_s": json.loads(out.stdout.strip().splitlines()[-1])["first_at"] - started})
    loop_images = [np.load(tmp / "loop" / f"frame_{f:04d}.npy") for f in range(args.frames)]
    same = all(np.array_equal(a, b) for a, b in zip(farm_images, loop_images))

    cold, warm = loops
    print(f"{'':24s}{'farm':>8s}{'loop':>8s}{'farm/loop':>11s}   (issue 32's targets: 1.25 cold, 1.1 warm)")
    for name, farm, loop in (("cold", farm_s, cold["total_s"]), ("warm", warm_s, warm["total_s"])):
        print(f"{'wall time, ' + name + ', s':24s}{farm:8.1f}{loop:8.1f}{farm / loop:11.2f}")
    for name, farm, loop in (("cold", first_frame, cold["first_s"]), ("warm", warm_first, warm["first_s"])):
        print(f"{'first frame, ' + name + ', s':24s}{farm or float('nan'):8.1f}{loop:8.1f}")
    print(f"images bit-identical: {same}")


if __name__ == "__main__":
    main()
