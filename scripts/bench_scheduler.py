"""The driver at scale, simulated: the real scheduler and store, a stub work unit, many groups.

    python scripts/bench_scheduler.py [--groups 256] [--per-process 32] [--nodes 4] [--latency 0.25]
                                      [--frames 40] [--plan-frames 10000] [--driver-folds]

A ``ray.cluster_utils.Cluster`` of ``--nodes`` nodes hosts ``--groups`` simulated worker groups
(``cluster.simulated``: deterministic tiles, ``--latency`` seconds a task, ``--per-process``
groups sharing each process). ``run_job`` renders a job of ``--frames`` frames of 64 tiles (the
orbit scene at 128x128, tiles of 16, 64 spp: one chunk a tile) into a local store, where the
members write their results and the driver commits records (``farm.results``);
``--driver-folds`` sends results back to the driver, which folds them itself (the path of
stores the workers cannot reach, and what every store did before), for a before/after figure.

Printed: tasks per second sustained (from the first to the last commit of the middle 80% of
tasks) against the groups' ceiling (``--groups / --latency``: a group renders one task at a time,
its next dispatch waiting in its member), the driver's CPU seconds per task
(``time.process_time``: all its threads) and the whole cluster's (the driver and every process
it started: Ray's and the members'; both barely depend on the machine's load), the load average
over the last minute at the start and at the end, and the time to plan a ``--plan-frames`` x
64-tile job: make its store (``farm.job.prepare``), read and verify the records
(``verified_records``), and ``plan``, as a driver starting it does (wall and CPU seconds), then
the time a task takes to make its ``Task`` record (the scheduler makes them as it sends them).
"""
import argparse
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _spec(store, frames):
    from farm.spec import JobSpec
    return JobSpec(scene=str(ROOT / "examples" / "orbit.xml"), frames=(0, frames - 1), spp=64, store=str(store),
                   resolution=(128, 128), tile=16, pass_size=4)


def throughput(args, folder):
    import ray
    from ray.cluster_utils import Cluster

    import farm.scheduler as scheduler
    from cluster.group import GroupShape
    from cluster.simulated import Hosts
    from farm import job

    cluster = Cluster()
    for _ in range(args.nodes):
        cluster.add_node(num_cpus=4)
    ray.init(address=cluster.address, log_to_driver=False, include_dashboard=False)
    if args.driver_folds:
        scheduler.shared_root = lambda store: None
    try:
        spec, store = job.prepare(_spec(folder / "bench.zarr", args.frames))
        hosts = Hosts(args.groups, per_process=args.per_process, latency_s=args.latency)
        commits = []
        done = scheduler.RunProgress.done
        scheduler.RunProgress.done = lambda self, *a: (commits.append(time.monotonic()), done(self, *a))[1]
        load0, cluster0 = os.getloadavg()[0], _cluster_cpu()
        cpu0, t0 = time.process_time(), time.monotonic()
        plan = scheduler.run_job(spec, store, [GroupShape()] * args.groups, show_progress=False,
                                 make_group=hosts.make_group, log=lambda m: None)
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        every = sum(_cluster_cpu().values()) - sum(cluster0.values())
        hosts.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
    n = len(commits)
    lo, hi = n // 10, n - n // 10 - 1
    rate = (hi - lo) / (commits[hi] - commits[lo])
    print(f"groups {args.groups} on {-(-args.groups // args.per_process)} processes, {args.nodes} nodes; "
          f"latency {args.latency} s; {'driver folds' if args.driver_folds else 'workers write'}")
    print(f"tasks {sum(plan.frame_tasks().values())} in {wall:.1f} s (start-up included); sustained {rate:.0f} tasks/s; "
          f"ceiling of the groups {args.groups / args.latency:.0f} tasks/s")
    print(f"CPU a task: driver {1e3 * cpu / n:.2f} ms, cluster (driver included) {1e3 * every / n:.2f} ms; "
          f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")


def _cluster_cpu():
    """{pid: CPU seconds} of this process and every process it started (Ray's, the members')."""
    import psutil

    out = {}
    me = psutil.Process()
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def planning(args, folder):
    from farm import job
    from farm.planner import plan

    t0, c0 = time.perf_counter(), time.process_time()
    spec, store = job.prepare(_spec(folder / "plan.zarr", args.plan_frames))
    t1 = time.perf_counter()
    records, _ = store.verified_records(repair=True)
    t2 = time.perf_counter()
    job_plan = plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels)
    t3, c3 = time.perf_counter(), time.process_time()
    n = sum(1 for _ in job_plan.tasks())  # made as the scheduler sends them
    t4 = time.perf_counter()
    print(f"planning {args.plan_frames} frames x 64 tiles ({n} tasks): {t3 - t0:.2f} s, CPU {c3 - c0:.2f} s "
          f"(store made {t1 - t0:.2f} s, records read {t2 - t1:.2f} s, plan {t3 - t2:.2f} s); "
          f"making its tasks as they are sent: {1e6 * (t4 - t3) / n:.1f} us a task")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--per-process", type=int, default=32)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.25)
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--plan-frames", type=int, default=10000)
    ap.add_argument("--driver-folds", action="store_true")
    ap.add_argument("--skip-plan", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        throughput(args, pathlib.Path(folder))
        if not args.skip_plan:
            planning(args, pathlib.Path(folder))


if __name__ == "__main__":
    main()
