"""The farm tests' small job and its independent reference: the orbit scene (3 frames of a turntable
at 40x30, tiles of 16, passes of 4 samples), the tracer's own render of it in this process, the
frames a store exports, and the ``farm`` command line run as a subprocess."""
import pathlib
import subprocess
import sys

import numpy as np

from farm.curves import Curve
from farm.export import export_frames
from farm.spec import JobSpec
from farm.store import FrameStore

ROOT = pathlib.Path(__file__).resolve().parents[2]
ORBIT = str(ROOT / "examples" / "orbit.xml")


def orbit_spec(store, frames=(0, 2), spp=8, **kw):
    """A ``JobSpec`` of the orbit scene into ``store``, the camera turning 90 degrees over frames 0-2."""
    return JobSpec(scene=ORBIT, frames=frames, spp=spp, store=str(store), resolution=(40, 30), tile=16,
                   pass_size=4, curves=(Curve("angle", ((0, 0.0), (2, 90.0))),), **kw)


def farm_cli(*args, timeout=600, **kw):
    """``python -m farm.cli ARGS`` from the repository root: the ``CompletedProcess``, output as text."""
    return subprocess.run([sys.executable, "-m", "farm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kw)


def reference(spec):
    """The frames as tracer.render gives them with the job's reduction tree (this process, 1 device)."""
    import tracer
    out = []
    for frame in range(spec.frames[0], spec.frames[1] + 1):
        scene = tracer.load_scene(spec.scene, resolution=spec.resolution, **dict(spec.params_at(frame)))
        out.append(tracer.render(scene, spp=spec.spp, seed=spec.seed, frame=frame, tile=spec.tile,
                                 pass_size=spec.pass_size, chunk_passes=spec.chunk_passes))
    return out


def exported(store, tmp_path, name="npy"):
    """Every frame of the store at URL ``store``, exported as npy under ``tmp_path / name`` and read back."""
    paths = export_frames(FrameStore.open(str(store), mode="r"), None, "npy", str(tmp_path / name))
    return [np.load(p) for p in paths]
