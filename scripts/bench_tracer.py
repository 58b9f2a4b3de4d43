"""Samples per second of our tracer on 1, 2 and 4 devices, next to Mitsuba 3 ``llvm_ad_rgb``
(``--platform gpu``: on the GPU, next to Mitsuba's ``cuda_ad_rgb``).

    python scripts/bench_tracer.py [--scene examples/cbox.xml] [--res 512] [--spp 16]
                                   [--devices default,1,2,4] [--repeats 2] [--platform cpu|gpu]

Each measurement runs in its own process: ours with
``XLA_FLAGS=--xla_force_host_platform_device_count=D`` (the tracer shards over
``jax.local_devices()``; ``default``: no count set, one device per core, ``tracer.runtime.cpu``), once
with the code ``tracer.render`` gets by default (XLA's, 512 bits wide on an AVX-512 host:
``tracer.runtime.xla_flags.use_wide_vectors``) and then with the deterministic flags the farm's workers use
(``tracer.runtime.xla_flags``: at least 2 devices; code of this host's instruction-set level, a local
job's, and of AVX2, a cluster's), Mitsuba with every core. The first render of a process pays for
compilation; it is reported apart (``compile s``: JAX's own trace, lowering and XLA compile
durations, from ``jax.monitoring``; ours cold, without the persistent compilation cache that
``tracer.render`` otherwise uses; for Mitsuba, first call minus steady run, with whatever its
Dr.Jit kernel cache in ``~/.drjit`` holds from earlier runs), and the run time is
the fastest of ``--repeats`` renders after it, each with a new seed. ``--res`` sets the scene's
``res`` default, or its ``width`` and ``height``; path depth etc. stay as the scene says (the
Cornell box: max_depth 8).

``--platform gpu`` runs ours with ``JAX_PLATFORMS=cuda`` on every GPU JAX sees (one row: XLA's
GPU code has no CPU instruction-set cap to compare) and Mitsuba with ``cuda_ad_rgb``.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import defusedxml.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_LLVM = "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"


def scene_params(scene, res):
    """The resolution overrides this scene's ``<default>`` names accept."""
    names = {d.get("name") for d in ET.parse(scene).getroot().iter("default")}
    if "res" in names:
        return {"res": res}
    if {"width", "height"} <= names:
        return {"width": res, "height": res}
    raise SystemExit(f"{scene}: no <default> named res, or width and height, to set --res with")


def bench_ours(scene, params, spp, repeats):
    import jax
    import jax.monitoring

    compile_events = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **_: compile_events.append(secs) if name.startswith("/jax/core/compile/") else None)
    import tracer

    t0 = time.perf_counter()
    loaded = tracer.load_scene(scene, **params)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tracer.render(loaded, spp=spp, seed=0)
    first_s = time.perf_counter() - t0
    compile_s = sum(compile_events)  # only what the first call compiled
    runs = []
    for r in range(repeats):
        t0 = time.perf_counter()
        img = tracer.render(loaded, spp=spp, seed=1 + r)
        runs.append(time.perf_counter() - t0)
    return dict(devices=len(jax.local_devices()), accel=loaded.geometry.accel, load_s=load_s, first_s=first_s,
                compile_s=compile_s, run_s=min(runs), pixels=img.shape[0] * img.shape[1],
                recompiled=sum(compile_events) > compile_s)  # a timed run compiled again


MITSUBA_VARIANTS = {"cpu": "llvm_ad_rgb", "gpu": "cuda_ad_rgb"}


def bench_mitsuba(scene, params, spp, repeats, platform="cpu"):
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", DEFAULT_LLVM)
    import mitsuba as mi
    import numpy as np

    mi.set_variant(MITSUBA_VARIANTS[platform])
    t0 = time.perf_counter()
    loaded = mi.load_file(scene, **params)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    np.asarray(mi.render(loaded, spp=spp, seed=0))
    first_s = time.perf_counter() - t0
    runs = []
    for r in range(repeats):
        t0 = time.perf_counter()
        img = np.asarray(mi.render(loaded, spp=spp, seed=1 + r))
        runs.append(time.perf_counter() - t0)
    run_s = min(runs)
    return dict(devices=None, load_s=load_s, first_s=first_s, compile_s=max(first_s - run_s, 0.0),
                run_s=run_s, pixels=img.shape[0] * img.shape[1], recompiled=False)


def run_worker(engine, devices, args, isa=None):
    """Run one measurement in a fresh process; returns its result dict, or an error string.
    ``isa``: with the farm's deterministic flags at that instruction-set level."""
    env = dict(os.environ)
    if engine == "ours" and args.platform == "gpu":
        env["JAX_PLATFORMS"] = "cuda"
    elif engine == "ours":
        sys.path.insert(0, str(ROOT))
        from tracer.runtime.xla_flags import with_flags
        env["XLA_FLAGS"] = with_flags(env.get("XLA_FLAGS", ""), devices, deterministic=isa is not None, isa=isa)
        env["JAX_PLATFORMS"] = env.get("JAX_PLATFORMS", "cpu")
    if engine == "ours":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["JAXFARM_XLA_CACHE"] = "off"  # a cold compile: tracer.render otherwise loads what an earlier run compiled
    print(f"running {engine}" + (f" on {devices} devices" if devices else "") + " ...",
          file=sys.stderr, flush=True)
    cmd = [sys.executable, __file__, "--worker", engine, "--scene", str(args.scene),
           "--res", str(args.res), "--spp", str(args.spp), "--repeats", str(args.repeats),
           "--platform", args.platform]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        print("\n".join(proc.stderr.strip().splitlines()[-15:]), file=sys.stderr)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed: {tail[:120]}"
    return json.loads(lines[-1])


def print_table(args, rows):
    print(f"\n{args.scene}  {args.res}x{args.res}  {args.spp} spp, run = fastest of {args.repeats}")
    header = (f"{'engine':<40}{'devices':>8}{'load s':>9}{'compile s':>11}{'run s':>9}{'Msamples/s':>12}"
              f"{'vs Mitsuba':>12}")
    print(header)
    print("-" * len(header))
    base = next((r["rate"] for _, r in rows if isinstance(r, dict)), None)
    for label, r in rows:
        if not isinstance(r, dict):
            print(f"{label:<40}{r}")
            continue
        ratio = f"{r['rate'] / base:.3f}" if base else "-"
        print(f"{label:<40}{r['devices'] or '-':>8}{r['load_s']:>9.2f}{r['compile_s']:>11.2f}"
              f"{r['run_s']:>9.2f}{r['rate'] / 1e6:>12.3f}{ratio:>12}"
              + ("  (recompiled while timed)" if r["recompiled"] else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=pathlib.Path, default=ROOT / "examples" / "cbox.xml")
    parser.add_argument("--res", type=int, default=512)
    parser.add_argument("--spp", type=int, default=16)
    parser.add_argument("--devices", default="default,1,2,4",
                        help="comma-separated device counts; 'default': none set, the tracer's own choice")
    parser.add_argument("--repeats", type=int, default=2, help="timed renders after the first")
    parser.add_argument("--platform", choices=["cpu", "gpu"], default="cpu",
                        help="gpu: ours on JAX's CUDA devices, Mitsuba cuda_ad_rgb")
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    parser.add_argument("--worker", choices=["ours", "mitsuba"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    params = scene_params(args.scene, args.res)

    if args.worker:
        if args.worker == "ours":
            result = bench_ours(str(args.scene), params, args.spp, args.repeats)
        else:
            result = bench_mitsuba(str(args.scene), params, args.spp, args.repeats, args.platform)
        result["rate"] = result["pixels"] * args.spp / result["run_s"]
        print(json.dumps(result))
        return

    rows = [(f"mitsuba {MITSUBA_VARIANTS[args.platform]}", run_worker("mitsuba", None, args))]
    if args.platform == "gpu":
        result = run_worker("ours", None, args)
        accel = result["accel"] if isinstance(result, dict) else "?"
        rows.append((f"ours, {accel} (gpu)", result))
    sys.path.insert(0, str(ROOT))
    from tracer.shared import PORTABLE_ISA
    from tracer.runtime.xla_flags import local_isa
    # XLA's default code, a local job's level and a cluster's (once each where they coincide)
    for isa in (() if args.platform == "gpu" else dict.fromkeys((None, local_isa(), PORTABLE_ISA))):
        for d in (None if x == "default" else int(x) for x in args.devices.split(",")):
            result = run_worker("ours", d, args, isa)
            if isinstance(result, dict) and d is not None and result["devices"] != d:
                result = f"failed: asked for {d} devices, JAX saw {result['devices']}"
            accel = result["accel"] if isinstance(result, dict) else "?"
            rows.append((f"ours{f', det. {isa}' if isa else ''}, {accel} ({d or 'default'} dev)", result))
    print_table(args, rows)
    if args.json:
        args.json.write_text(json.dumps({label: r for label, r in rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
