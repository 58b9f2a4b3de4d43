"""Intersection backends side by side, then the tracer against Mitsuba 3 with the default backend.

    python scripts/bench_accel.py [--rays 65536] [--repeats 5] [--no-tracer] [--no-build]

Part 1, Mrays/s of every available backend (``embree``, ``warp``; the pure-JAX ``jax`` backend as its BVH
and, on small scenes, its brute force) on the Cornell box (34 triangles), a 4,096-triangle torus
and a generated 1,310,720-triangle sphere, for closest hits and shadow rays, with coherent rays
(a pinhole camera's grid, looking at the object) and incoherent ones (origins uniform in the
scene's box, directions uniform on the sphere). Times are the fastest of ``--repeats`` calls
after a first (compiling) one, through the same ``geometry.closest_hit``/``occluded`` seam the
tracer calls inside its jitted work unit.

Part 2, samples/s of the tracer with the default backend against Mitsuba 3 ``llvm_ad_rgb`` on
the Cornell box (512x512, 16 spp) and on ``examples/mesh.xml`` (256x256, 16 spp), each engine
in its own process (``scripts/bench_tracer.py``), ours with one device per core as the farm runs it.
"""
import argparse
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cases():
    import trimesh

    import tracer
    cbox = tracer.load_scene(ROOT / "examples" / "cbox.xml", accel="jax").geometry
    tri = np.stack([np.asarray(p).T for p in cbox.triangles], axis=1)  # (T, 3, 3)
    box = (tri.reshape(-1, 3), np.arange(tri.shape[0] * 3).reshape(-1, 3))
    torus = trimesh.creation.torus(1.0, 0.35, 64, 32)
    sphere = trimesh.creation.icosphere(8)
    return [("cbox 34 tris", box, ("brute", "bvh", "embree", "warp")),
            ("torus 4k tris", (torus.vertices, torus.faces), ("bvh", "embree", "warp")),
            ("sphere 1.3M tris", (sphere.vertices, sphere.faces), ("bvh", "embree", "warp"))]


def rays(positions, n, coherent, seed=0):
    """(o, d, shadow t_max): a camera grid aimed at the bounding box, or uniform random rays."""
    rng = np.random.default_rng(seed)
    lo, hi = positions.min(axis=0), positions.max(axis=0)
    center, size = (lo + hi) / 2, float(np.max(hi - lo))
    if coherent:
        side = int(np.sqrt(n))
        eye = center + np.array([0.3, 0.2, -1.0]) * 1.6 * size
        forward = (center - eye) / np.linalg.norm(center - eye)
        right = np.cross(forward, [0, 1, 0]); right /= np.linalg.norm(right)
        up = np.cross(right, forward)
        s = np.linspace(-0.35, 0.35, side)
        gx, gy = np.meshgrid(s, s)
        d = forward[:, None] + right[:, None] * gx.ravel() + up[:, None] * gy.ravel()
        d = np.pad(d, ((0, 0), (0, n - d.shape[1])), mode="edge")
        o = np.broadcast_to(eye[:, None], (3, n))
    else:
        o = rng.uniform(lo - 0.1 * size, hi + 0.1 * size, (n, 3)).T
        d = rng.normal(size=(3, n))
    d = d / np.linalg.norm(d, axis=0)
    t_max = rng.uniform(0, 2 * size, n)
    return o.astype(np.float32), d.astype(np.float32), t_max.astype(np.float32)


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


def intersection(n_rays, repeats):
    import jax

    from tracer.shapes import geometry

    closest = jax.jit(lambda g, o, d, t: geometry.closest_hit(g, o, d, t).t)
    occluded = jax.jit(geometry.occluded)
    print(f"\n{'case':18s} {'backend':>8s} {'rays':>10s} {'closest Mrays/s':>16s} {'occluded Mrays/s':>17s} "
          f"{'build s':>8s} {'compile s':>10s}")
    for name, (v, f), backends in cases():
        for accel in backends:
            engine = geometry.HOST_ENGINES.get(accel)
            if engine is not None and not engine.available():
                print(f"{name:18s} {accel:>8s}  (not installed)")
                continue
            t0 = time.perf_counter()
            geo = geometry.build_geometry([(v, f, None, None, 0)], [], accel=accel)
            build_s = time.perf_counter() - t0
            label = "jax-" + accel if accel in ("brute", "bvh") else accel
            for coherent in (True, False):
                o, d, t_max = rays(np.asarray(v, np.float64), n_rays, coherent)
                inf = np.full(n_rays, np.inf, np.float32)
                first_c, best_c = fastest(lambda: jax.block_until_ready(closest(geo, o, d, inf)), repeats)
                _, best_o = fastest(lambda: jax.block_until_ready(occluded(geo, o, d, t_max)), repeats)
                print(f"{name:18s} {label:>8s} {'coherent' if coherent else 'random':>10s} "
                      f"{n_rays / best_c / 1e6:16.2f} {n_rays / best_o / 1e6:17.2f} {build_s:8.2f} "
                      f"{first_c - best_c:10.1f}", flush=True)


def tracer_vs_mitsuba():
    runs = [("cbox", ["--scene", str(ROOT / "examples" / "cbox.xml"), "--res", "512"]),
            ("mesh", ["--scene", str(ROOT / "examples" / "mesh.xml"), "--res", "256"])]
    for name, extra in runs:
        # One device per core: what the farm's CPU workers run (tracer/runtime/cpu.py).
        cmd = [sys.executable, str(ROOT / "scripts" / "bench_tracer.py"), "--devices", str(os.cpu_count()), "--spp", "16",
               "--json", f"/tmp/bench_accel_{name}.json", *extra]
        subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rays", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-tracer", action="store_true", help="skip part 2")
    args = ap.parse_args()
    import jax
    import tracer
    tracer.configure()  # as tracer.render's callers get it, before jax.default_backend() starts JAX
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, JAX on {jax.default_backend()}")
    intersection(args.rays, args.repeats)
    if not args.no_tracer:
        tracer_vs_mitsuba()


if __name__ == "__main__":
    main()
