"""Intersection throughput: brute force on a Cornell-like box, the BVH on 4k and 100k triangles.

    python scripts/bench_intersect.py [--rays 65536] [--devices 1,2] [--repeats 5] [--big]
                                      [--no-embree] [--no-build]

Rays are incoherent: origins uniform in the scene's box, directions uniform on the sphere;
shadow rays get t_max uniform in (0, scene size). Each device count runs in its own process
(``XLA_FLAGS=--xla_force_host_platform_device_count=D``); with D > 1 the batch is split with
``shard_map`` and every device traverses its share, as the renderer shards its wavefront.
Times are the fastest of ``--repeats`` calls after a first (compiling) one; Mrays/s = rays / s.
For reference the same rays go through Embree (embreex, its own threads) when it is installed,
and ``--no-build`` skips timing the BVH build of a million triangles.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def box_scene():
    """36 triangles: a closed room with two boxes in it (the Cornell box has 34)."""
    import trimesh
    parts = [trimesh.creation.box(extents=(2, 2, 2))]
    for center, ext in (((0.3, -0.6, 0.2), (0.6, 0.8, 0.6)), ((-0.4, -0.4, -0.3), (0.6, 1.2, 0.6))):
        b = trimesh.creation.box(extents=ext)
        b.apply_translation(center)
        parts.append(b)
    return trimesh.util.concatenate(parts), 0.95


def cases(big):
    import trimesh
    out = [("box 36 tris (brute)", *box_scene(), "brute"),
           ("torus 4k tris (bvh)", trimesh.creation.torus(1.0, 0.35, 64, 32), 1.5, "bvh"),
           ("torus 100k tris (bvh)", trimesh.creation.torus(1.0, 0.35, 400, 128), 1.5, "bvh")]
    if big:
        out.append(("sphere 328k tris (bvh)", trimesh.creation.icosphere(7), 1.5, "bvh"))
    return out


def rays(n, extent, seed=0):
    rng = np.random.default_rng(seed)
    o = rng.uniform(-extent, extent, (3, n)).astype(np.float32)
    d = rng.normal(size=(3, n))
    d = (d / np.linalg.norm(d, axis=0)).astype(np.float32)
    t_max = rng.uniform(0, 2 * extent, n).astype(np.float32)
    return o, d, t_max


def fastest(fn, repeats):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return first, best


def worker(n_rays, repeats, big):
    import jax
    from jax.sharding import Mesh, PartitionSpec as P

    from tracer import geometry

    devices = jax.local_devices()
    mesh = Mesh(np.array(devices), ("rays",))

    def sharded(fn):
        if len(devices) == 1:
            return jax.jit(fn)
        spec_v, spec_s = P(None, "rays"), P("rays")
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=(P(), spec_v, spec_v, spec_s), out_specs=spec_s))

    closest = sharded(lambda g, o, d, t: geometry.closest_hit(g, o, d, t).t)
    occluded = sharded(geometry.occluded)
    results = []
    for name, m, extent, accel in cases(big):
        geo = geometry.build_geometry([(m.vertices, m.faces, None, None, 0)], [], accel=accel)
        o, d, t_max = rays(n_rays, extent)
        inf = np.full(n_rays, np.inf, np.float32)
        row = {"case": name, "triangles": int(len(m.faces)), "devices": len(devices)}
        for query, fn, t in (("closest", closest, inf), ("occluded", occluded, t_max)):
            first, best = fastest(lambda: jax.block_until_ready(fn(geo, o, d, t)), repeats)
            row[query] = n_rays / best / 1e6
            row[query + " compile s"] = first - best
        results.append(row)
    print(json.dumps(results))


def embree(n_rays, repeats, big):
    try:
        from embreex import rtcore_scene
        from embreex.mesh_construction import TriangleMesh
    except ImportError:
        return []
    out = []
    for name, m, extent, _ in cases(big):
        scene = rtcore_scene.EmbreeScene()
        TriangleMesh(scene, m.vertices.astype(np.float32)[m.faces])
        o, d, _ = rays(n_rays, extent)
        o, d = np.ascontiguousarray(o.T), np.ascontiguousarray(d.T)
        _, best = fastest(lambda: scene.run(o, d, output=1), repeats)
        out.append({"case": name, "embree closest": n_rays / best / 1e6})
    return out


def build_time():
    from tracer import bvh, bvh_build
    rng = np.random.default_rng(0)
    n = 1_000_000
    c = rng.random((3, n)).astype(np.float32)
    p = [c + rng.normal(0, 0.002, (3, n)).astype(np.float32) for _ in range(3)]
    lo, hi = np.minimum(np.minimum(p[0], p[1]), p[2]), np.maximum(np.maximum(p[0], p[1]), p[2])
    t0 = time.perf_counter()
    tree = bvh_build.build_bvh(lo, hi, max_leaf=bvh.LEAF_SIZE)
    t1 = time.perf_counter()
    threaded = bvh_build.thread(tree)
    t2 = time.perf_counter()
    empty = (np.zeros(0, np.int32), np.zeros((3, 4, 0), np.float32), np.zeros((3, 4, 0), np.float32))
    bvh.make_arrays(threaded, tuple(p), empty)
    t3 = time.perf_counter()
    return {"build s": t1 - t0, "thread s": t2 - t1, "pack s": t3 - t2, "nodes": int(tree.left.size)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rays", type=int, default=65536)
    ap.add_argument("--devices", default="1,2")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--big", action="store_true", help="also a 327,680-triangle sphere")
    ap.add_argument("--no-embree", action="store_true")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.rays, args.repeats, args.big)

    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {args.rays} incoherent rays")
    rows = {}
    for dev in args.devices.split(","):
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={dev}",
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, __file__, "--worker", "--rays", str(args.rays), "--repeats", str(args.repeats)]
        out = subprocess.run(cmd + (["--big"] if args.big else []), env=env, check=True, capture_output=True, text=True)
        for row in json.loads(out.stdout.strip().splitlines()[-1]):
            rows.setdefault(row["case"], {})[dev] = row
    peers = {} if args.no_embree else {r["case"]: r["embree closest"] for r in embree(args.rays, args.repeats, args.big)}
    print(f"{'case':24s} {'devices':>7s} {'closest Mrays/s':>16s} {'occluded Mrays/s':>17s} {'compile s':>10s}")
    for case, by_dev in rows.items():
        for dev, r in by_dev.items():
            print(f"{case:24s} {dev:>7s} {r['closest']:16.2f} {r['occluded']:17.2f} {r['closest compile s']:10.1f}")
        if case in peers:
            print(f"{case:24s} {'embree':>7s} {peers[case]:16.2f}")
    if not args.no_build:
        b = build_time()
        print(f"BVH of 1,000,000 triangles: build {b['build s']:.2f} s, thread {b['thread s']:.2f} s, "
              f"pack {b['pack s']:.2f} s ({b['nodes']} nodes)")


if __name__ == "__main__":
    main()
