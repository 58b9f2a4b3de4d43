"""The scene checked as the workers will load it, before Ray starts or a store is made.

``tracer.io.scene_info.describe`` reads a scene without JAX but does not build it, so an
unsupported plugin or a bad parameter would otherwise surface only in a worker, after Ray
started and the store was made. ``check_scene`` loads the scene in a child process
(``python -m tracer.io.validate``: the driver never imports JAX) for the job's first and last frames.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from farm.errors import FarmError, SceneFileError

if TYPE_CHECKING:
    from farm.spec import JobSpec

__all__ = ["check_scene"]


def check_scene(spec: JobSpec) -> None:
    """Raise ``SceneFileError`` (the loader's one line) unless the scene of ``spec`` loads at its
    first and last frames."""
    first, last = spec.frames
    param_sets = list(dict.fromkeys([spec.params_at(first), spec.params_at(last)]))
    job = {"path": spec.scene, "resolution": list(spec.resolution) if spec.resolution else None,
           "accel": spec.accel, "aovs": spec.aovs, "rfilter": spec.rfilter, "param_sets": [list(map(list, p)) for p in param_sets]}
    result = subprocess.run([sys.executable, "-m", "tracer.io.validate"], input=json.dumps(job), text=True,
                            capture_output=True, env=_child_env())
    if result.returncode == 1 and result.stderr.strip():
        raise SceneFileError(result.stderr.strip().splitlines()[-1])
    if result.returncode != 0:
        last_line = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise FarmError(f"checking the scene {spec.scene} failed (exit {result.returncode}): {last_line}")


def _child_env():
    """This process's environment, on the CPU, importing the same ``tracer`` as this process would."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(importlib.util.find_spec("tracer").origin))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    return env
