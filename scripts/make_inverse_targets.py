"""Targets for examples/inverse.toml from a known truth: each view of examples/inverse.xml rendered
by the tracer with the walls' colours and the light's radiance set to TRUTH, written as linear EXR
(``--format npy``: .npy) to examples/inverse_targets/frame_NNNN.exr.

    python scripts/make_inverse_targets.py [--spp 256] [--res 48] [--out examples/inverse_targets]

``TRUTH`` is what `farm optimize examples/inverse.toml` should recover (scripts/bench_optimize.py
reports the error). The views are the job's: ``angle`` keyframed from -20 at frame 0 to 20 at frame 1.
"""
import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCENE = str(ROOT / "examples" / "inverse.xml")
TRUTH = {"left.reflectance.value": (0.70, 0.15, 0.10), "right.reflectance.value": (0.10, 0.55, 0.20),
         "lamp.emitter.radiance.value": (10.0, 9.0, 7.0)}
_DEFAULTS = {"left.reflectance.value": "left", "right.reflectance.value": "right",
             "lamp.emitter.radiance.value": "light"}  # the scene's <default> of each key
ANGLES = {0: -20.0, 1: 20.0}  # frame -> camera angle (the job's [params.angle])


def truth_defaults() -> dict[str, str]:
    """The scene's ``<default>`` values that give TRUTH."""
    return {_DEFAULTS[k]: ", ".join(str(x) for x in v) for k, v in TRUTH.items()}


def make_targets(out: str, spp: int = 256, res: int = 48, fmt: str = "exr", frames=(0, 1)) -> list[str]:
    """Render the truth at ``frames`` into ``out``; returns the files written."""
    import numpy as np

    import tracer
    from tracer.io.images import write_exr
    os.makedirs(out, exist_ok=True)
    written = []
    for frame in frames:
        scene = tracer.load_scene(SCENE, accel="jax", res=str(res), angle=str(ANGLES[frame]), **truth_defaults())
        image = np.asarray(tracer.render(scene, spp=spp, seed=12345, frame=frame), np.float32)[..., :3]
        path = os.path.join(out, f"frame_{frame:04d}.{fmt}")
        write_exr(path, image) if fmt == "exr" else np.save(path, image)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spp", type=int, default=256)
    parser.add_argument("--res", type=int, default=48)
    parser.add_argument("--format", choices=("exr", "npy"), default="exr")
    parser.add_argument("--out", default=str(ROOT / "examples" / "inverse_targets"))
    args = parser.parse_args()
    for path in make_targets(args.out, args.spp, args.res, args.format):
        print(path)


if __name__ == "__main__":
    main()
