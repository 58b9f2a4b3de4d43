"""`farm optimize` of the inverse-rendering example on 1, 2 and 4 worker groups and on groups of 1
and 2 devices, and gradient samples/s against Mitsuba 3's `prb` in the same run.

    python scripts/bench_optimize.py [--res 48] [--spp 8] [--tile 24] [--iterations 60]
                                     [--shapes 1x1,1x2,2x1,4x1] [--variant llvm_ad_rgb]

In one run:

1. targets of ``examples/inverse.xml`` rendered from its known truth (``scripts/make_inverse_targets.py``);
2. ``farm optimize`` of the example's job (its two views, its three parameters) from the scene's
   values, once per shape (``GxD``: G groups of D devices, one host each), each in a fresh process
   and store: wall time, iterations/s in the steady state (the store's notes: from the end of the
   first iteration, which compiles, to the last), the final loss and the parameters' mean absolute
   error against the truth, and whether every shape ended in the same bits as the first (it must);
3. gradient samples/s of one view, whole, at the job's spp: ``jax.value_and_grad`` of the L2 loss
   through ``tracer.differentiable`` (one process, the defaults of ``tracer.render``) against
   Mitsuba's ``prb`` (``mi.render`` with the same parameters enabled, ``dr.backward``), after a
   warm-up call each. Ratios are Mitsuba's time over ours (1.0: as fast as Mitsuba).
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
sys.path.insert(0, str(ROOT / "scripts"))
DEFAULT_LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"

from make_inverse_targets import ANGLES, SCENE, TRUTH, make_targets  # noqa: E402

KEYS = tuple(TRUTH)


def job_file(folder, targets, store, args):
    path = os.path.join(folder, f"{os.path.basename(store)}.toml")
    with open(path, "w") as f:
        f.write(f"""scene = "{SCENE}"
frames = "0-1"
spp = {args.spp}
tile = {args.tile}
resolution = [{args.res}, {args.res}]
store = "{store}"

[params.angle]
keys = [[0, {ANGLES[0]}], [1, {ANGLES[1]}]]

[optimize]
targets = "{targets}/frame_{{frame:04d}}.exr"
parameters = [{", ".join(f'"{k}"' for k in KEYS)}]
iterations = {args.iterations}
optimizer = "adam"
learning_rate = 0.05
loss = "l2"
""")
    return path


def farm_run(folder, targets, shape, args, index):
    groups, devices = (int(n) for n in shape.split("x"))
    store = os.path.join(folder, f"{index}-g{groups}x{devices}.zarr")  # (a shape again: a store of its own)
    job = job_file(folder, targets, store, args)
    t0 = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "farm.cli", "optimize", job, "--groups", str(groups),
                          "--devices-per-host", str(devices)], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if run.returncode != 0:
        raise SystemExit(f"farm optimize {shape} failed: {run.stderr.strip().splitlines()[-1:]}")
    status = json.loads(subprocess.run([sys.executable, "-m", "farm.cli", "status", store, "--json"], cwd=ROOT,
                                       capture_output=True, text=True, check=True).stdout)
    import zarr
    params = np.asarray(zarr.open_group(store, mode="r")["optimize/params"][...])
    error = np.mean([np.abs(np.asarray(status["parameters"][k]) - np.asarray(TRUTH[k])).mean() for k in KEYS])
    start = np.mean([np.abs(params[0][i * 3:i * 3 + 3] - np.asarray(TRUTH[k])).mean() for i, k in enumerate(KEYS)])
    return {"shape": f"{groups} group(s) of {devices} device(s)", "wall_s": wall, "rate": status["iterations_per_s"],
            "loss": status["loss"],
            "first_loss": status["losses"][0], "error": float(error), "start_error": float(start),
            "bits": params.tobytes()}


def ours(target, args, repeats):
    """Gradient samples/s of one whole view through tracer.differentiable (after a warm-up)."""
    import jax
    import jax.numpy as jnp

    import tracer
    from tracer.differentiable import image
    scene = tracer.load_scene(SCENE, res=str(args.res), angle=str(ANGLES[0]))
    params = {k: v for k, v in tracer.parameters(scene).items() if k in KEYS}
    target = jnp.asarray(target)

    def loss(p, seed):
        d = image(scene, p, seed, jnp.int32(0), spp=args.spp) - target
        return jnp.mean(d * d)
    grad = jax.jit(jax.value_and_grad(loss))
    jax.block_until_ready(grad(params, jnp.int32(0)))
    t0 = time.perf_counter()
    for i in range(repeats):
        jax.block_until_ready(grad(params, jnp.int32(i + 1)))
    return repeats * args.spp * args.res * args.res / (time.perf_counter() - t0)


def mitsuba(target, args, repeats):
    """Gradient samples/s of the same view through Mitsuba's prb (after a warm-up), or None."""
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", DEFAULT_LLVM)
    import drjit as dr
    import mitsuba as mi
    try:
        mi.set_variant(args.variant)
    except Exception as e:
        print(f"mitsuba {args.variant} does not load ({e}); no comparison")
        return None
    scene = mi.load_file(SCENE, res=str(args.res), angle=str(ANGLES[0]))
    integrator = mi.load_dict({"type": "prb", "max_depth": 4})
    params = mi.traverse(scene)
    params.keep(list(KEYS))
    for k in KEYS:
        dr.enable_grad(params[k])
    params.update()
    ref = mi.TensorXf(np.asarray(target, np.float32))

    def step(seed):
        img = mi.render(scene, params, integrator=integrator, spp=args.spp, seed=seed)
        loss = dr.mean(dr.square(img - ref), axis=None)
        dr.backward(loss)
        grads = [dr.grad(params[k]) for k in KEYS]
        dr.eval(*grads)
        for k in KEYS:
            dr.clear_grad(params[k])
        return grads
    step(0)
    t0 = time.perf_counter()
    for i in range(repeats):
        step(i + 1)
    return repeats * args.spp * args.res * args.res / (time.perf_counter() - t0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--res", type=int, default=48)
    parser.add_argument("--spp", type=int, default=8)
    parser.add_argument("--tile", type=int, default=24)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--shapes", default="1x1,1x2,2x1,4x1", help="GxD: G groups of D devices, the first the base")
    parser.add_argument("--repeats", type=int, default=10, help="gradient calls timed, each side")
    parser.add_argument("--variant", default="llvm_ad_rgb")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-optimize-") as folder:
        targets = os.path.join(folder, "targets")
        make_targets(targets, spp=256, res=args.res)
        print(f"examples/inverse.xml at {args.res}x{args.res}, 2 views, {args.spp} spp, tiles of {args.tile}, "
              f"{args.iterations} iterations of adam (0.05), {len(KEYS)} parameters")
        runs = [farm_run(folder, targets, shape, args, i) for i, shape in enumerate(args.shapes.split(","))]
        base = runs[0]
        for r in runs:
            rate = r["rate"] or float("nan")
            print(f"  {r['shape']}: {r['wall_s']:.1f} s wall, {rate:.2f} iterations/s "
                  f"({rate / (base['rate'] or float('nan')):.2f}x of the first), loss {r['first_loss']:.4g} -> "
                  f"{r['loss']:.4g}, parameter error {r['start_error']:.4f} -> {r['error']:.4f}, "
                  f"same bits as the first: {r['bits'] == base['bits']}")
        from tracer.io.images import load_image
        target = load_image(os.path.join(targets, "frame_0000.exr"))
    ours_rate = ours(target, args, args.repeats)
    theirs = mitsuba(target, args, args.repeats)
    print(f"gradient of one view ({args.res}x{args.res}, {args.spp} spp, L2, {len(KEYS)} parameters): "
          f"ours {ours_rate / 1e6:.3f} M samples/s"
          + (f", Mitsuba prb ({args.variant}) {theirs / 1e6:.3f} M samples/s, ratio {ours_rate / theirs:.2f}x"
             if theirs else ""))


if __name__ == "__main__":
    main()
