"""Intel Embree (through embreex) as the triangle intersection engine on CPUs.

The Embree scene is built on the host and registered with ``tracer.accel.host``, which sends it
rays from the jitted program through a host callback; a batch is split over this device's share of
the cores. Embree answers each ray on its own (``rtcIntersect1``).
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tracer.runtime import cpu
from tracer.accel import host

__all__ = ["available", "build", "MISSING"]

MISSING = "the 'embree' intersection backend needs embreex: pip install embreex (it comes with jaxfarm's default install)"

# Below this many rays a batch is answered on the calling thread: splitting costs more than it saves.
_MIN_SPLIT = 4096

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def available() -> bool:
    try:
        import embreex.rtcore_scene  # noqa: F401
    except ImportError:
        return False
    return True


def _threads() -> int:
    """Threads per query: this device's share of the cores (the other devices query too)."""
    return cpu.cores_per_device() or cpu.cores()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max(1, cpu.cores() - 1), thread_name_prefix="embree")
        return _pool


def build(p0: np.ndarray, p1: np.ndarray, p2: np.ndarray, robust: bool = False) -> host.HostScene:
    """Host: an Embree scene over triangles p0, p1, p2 (3, T), as a ``host.HostScene``;
    ``robust``: Embree's watertight triangle test (Mitsuba's default is off: mesh.xml renders
    1.04-1.08x faster without it)."""
    try:
        from embreex import mesh_construction, rtcore_scene
    except ImportError as e:
        raise ImportError(MISSING) from e
    vertices = np.ascontiguousarray(np.stack([p0.T, p1.T, p2.T], axis=1), np.float32)  # (T, 3, 3)
    scene = rtcore_scene.EmbreeScene(robust=robust)
    mesh_construction.TriangleMesh(scene, vertices)
    return host.HostScene(_Engine, scene)


def _split_run(run, n):
    """``run(slice) -> tuple of arrays`` over [0, n) in parts, concatenated: the calling thread
    runs the first part, the pool the others."""
    parts = _threads()
    if n < _MIN_SPLIT or parts == 1:
        return run(slice(0, n))
    bounds = np.linspace(0, n, parts + 1).astype(int)
    slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    others = [_executor().submit(run, s) for s in slices[1:]]
    results = [run(slices[0])] + [f.result() for f in others]
    return tuple(np.concatenate(r) for r in zip(*results))


class _Engine:
    """Embree's answers in ``tracer.accel.host``'s terms."""

    @staticmethod
    def closest(scene, o, d, t_max):
        def run(s):
            r = scene.run(o[s], d[s], dists=t_max[s].copy(), output=1)
            return np.where(r["geomID"] >= 0, r["primID"], -1).astype(np.int32), r["tfar"]
        return _split_run(run, t_max.shape[0])

    @staticmethod
    def occluded(scene, o, d, t_max):
        # embreex's occlusion query answers the geometry id of a blocker, -1 for none.
        run = lambda s: (scene.run(o[s], d[s], dists=t_max[s].copy(), query="OCCLUDED"),)
        return _split_run(run, t_max.shape[0])[0] >= 0
