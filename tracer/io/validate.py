"""Load a scene once per parameter set and say whether it loads: ``python -m tracer.io.validate``.

The farm's driver runs this in a child process before it starts Ray or makes a store, so that a
scene the workers would refuse (an unsupported plugin, a bad parameter, a broken mesh) is a
one-line error at once, and the driver itself never imports JAX. Input on stdin, one JSON object:
``{"path": str, "resolution": [w, h] | null, "accel": str, "aovs": str | null, "rfilter": str | null,
"param_sets": [[[name, value], ...], ...]}`` (``aovs`` and ``rfilter``: ``tracer.io.overrides``).
Exit 0 when every set loads; 1 with the ``SceneError`` on stderr when one does not.
"""
import json
import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["check", "check_job", "main"]


def check(path: str, resolution: tuple[int, int] | None, accel: str, param_sets: Iterable[Iterable[tuple[str, object]]],
          aovs: str | None = None, rfilter: str | None = None) -> None:
    """Load the scene with each of ``param_sets``; raises the first ``SceneError``."""
    from tracer.io.scene_loader import load_scene
    for params in param_sets:
        with load_scene(path, resolution=resolution, accel=accel, aovs=aovs, rfilter=rfilter, **dict(params)):
            pass


def check_job(job: dict[str, Any]) -> None:
    """``check`` of a job as the JSON object above gives it."""
    resolution = tuple(job["resolution"]) if job.get("resolution") else None
    check(job["path"], resolution, job["accel"], [tuple(map(tuple, p)) for p in job["param_sets"]],
          job.get("aovs"), job.get("rfilter"))


def main() -> int:
    from tracer.errors import SceneError
    try:
        check_job(json.load(sys.stdin))
    except SceneError as e:
        print(str(e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
