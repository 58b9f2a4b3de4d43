"""Render every example scene small, save the images, or compare them with saved ones bit for bit.

    python scripts/snapshot_examples.py save DIR [--devices 2]
    python scripts/snapshot_examples.py compare DIR [--devices 2] [--against N]

The check a refactoring owes: the same scenes, seeds and backends give the same bits before and
after. Each scene renders at 48x36 with 8 spp (passes of 4, tiles of 32: several tiles and
passes) with the deterministic arithmetic of the farm's workers (``tracer.runtime.xla_flags``), once with
the default intersection backend and once with every other one that applies: 'jax' (brute force
or BVH), 'bvh' forced, and Embree where installed. ``compare`` exits 1 naming every image whose
bits differ. ``--against N`` compares with the images saved on N devices: the farm's promise that
a job's bits do not depend on the device count (``save DIR --devices 1``, then ``compare DIR
--devices 2 --against 1`` and ``--devices 4 --against 1``).
"""
import argparse
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCENES = ("cbox", "dof", "lamp", "materials", "mesh", "orbit", "textures")
ACCELS = ("auto", "jax", "bvh", "embree")
RES = (48, 36)


def render_all():
    import tracer
    from tracer.accel import embree

    images = {}
    for name in SCENES:
        for accel in ACCELS:
            if accel == "embree" and not embree.available():
                continue
            scene = tracer.load_scene(ROOT / "examples" / f"{name}.xml", resolution=RES, accel=accel, spp=8)
            images[f"{name}-{accel}"] = tracer.render(scene, spp=8, seed=3, frame=1, tile=32, pass_size=4)
            print(f"{name:10s} {accel:7s} {scene.geometry.accel:7s} mean {images[f'{name}-{accel}'].mean():.6f}",
                  flush=True)
    return images


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("save", "compare"))
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--against", type=int, help="compare with the images saved on this many devices")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tracer.runtime.xla_flags import set_in_environment

    set_in_environment(devices=args.devices)
    images = render_all()
    path = args.dir / f"snapshot-{args.devices if args.against is None else args.against}dev.npz"
    if args.action == "save":
        args.dir.mkdir(parents=True, exist_ok=True)
        np.savez(path, **images)
        print(f"saved {len(images)} images to {path}")
        return
    saved = np.load(path)
    differ = [k for k in images if k not in saved or not np.array_equal(saved[k], images[k])]
    missing = [k for k in saved.files if k not in images]
    for k in differ:
        diff = np.abs(saved[k] - images[k]) if k in saved else None
        print(f"DIFFERS {k}" + (f": {int((diff > 0).sum())} values, max {diff.max():.3g}" if diff is not None else ""))
    for k in missing:
        print(f"MISSING {k}")
    print(f"{len(images) - len(differ)} of {len(images)} images bit-identical")
    sys.exit(1 if differ or missing else 0)


if __name__ == "__main__":
    main()
