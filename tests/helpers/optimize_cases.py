"""The farm's inverse-rendering test job: examples/inverse.xml at 16x16, two views, tiles of 8
(4 gradient tasks a view), 4 samples a pixel, targets rendered here from a known truth."""
import os
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENE = str(ROOT / "examples" / "inverse.xml")
SIZE = 16
KEYS = ("left.reflectance.value", "lamp.emitter.radiance.value")
TRUTH = {"left": "0.7, 0.15, 0.1", "light": "10, 9, 7"}  # the scene's <default>s of KEYS


def make_targets(folder, frames=(0, 1), size=SIZE, fmt="npy"):
    """Each view of the truth (the job's camera angles), rendered by the tracer in this process."""
    import tracer
    os.makedirs(folder, exist_ok=True)
    for frame in frames:
        scene = tracer.load_scene(SCENE, accel="jax", res=str(size), angle=str(_angle(frame)), **TRUTH)
        image = np.asarray(tracer.render(scene, spp=64, seed=7, frame=frame), np.float32)
        np.save(os.path.join(folder, f"frame_{frame:04d}.{fmt}"), image)


def _angle(frame):
    return -20.0 + 40.0 * frame


def write_job(path, store, targets, iterations=4, optimizer="adam", learning_rate=0.3, loss="l2",
              keys=KEYS, extra=""):
    """A job file at ``path`` (its [optimize] table from the arguments); returns ``path``."""
    listed = ", ".join(f'"{k}"' for k in keys)
    pathlib.Path(path).write_text(f"""scene = "{SCENE}"
frames = "0-1"
spp = 4
tile = 8
resolution = [{SIZE}, {SIZE}]
store = "{store}"
{extra}
[params.angle]
keys = [[0, -20.0], [1, 20.0]]

[optimize]
targets = "{targets}/frame_{{frame:04d}}.npy"
parameters = [{listed}]
iterations = {iterations}
optimizer = "{optimizer}"
learning_rate = {learning_rate}
loss = "{loss}"
""")
    return str(path)
