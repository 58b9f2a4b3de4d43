"""Intel Embree (through embreex) as the triangle intersection engine on CPUs.

The Embree scene is built on the host and kept in a process-wide registry; the jitted program
refers to it by a traced int32 handle, so every frame of a job (a new Embree scene each) reuses
one compiled program. Queries leave XLA through ``jax.pure_callback``: rays (3, N) go to Embree
as (N, 3) rows, split over this process's cores, and come back as (t, primitive, u, v).

Embree answers each ray on its own (``rtcIntersect1``), so a ray's result does not depend on how
a batch is split: renders stay bit-identical across device counts.
"""
import itertools
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["available", "build", "closest_hit", "occluded", "MISSING"]

MISSING = "the 'embree' intersection backend needs embreex: pip install embreex (it comes with jaxfarm's default install)"

# Below this many rays a batch is answered on the calling thread: splitting costs more than it saves.
_MIN_SPLIT = 4096

_scenes = {}
_ids = itertools.count(1)
_lock = threading.Lock()
_pool = None


def available():
    try:
        import embreex.rtcore_scene  # noqa: F401
    except ImportError:
        return False
    return True


def _threads():
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _executor():
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_threads(), thread_name_prefix="embree")
        return _pool


def build(p0, p1, p2, owner):
    """Host: an Embree scene over triangles p0, p1, p2 (3, T); returns its int32 handle.

    The scene lives as long as ``owner`` (the Geometry that carries the handle).
    """
    try:
        from embreex import mesh_construction, rtcore_scene
    except ImportError as e:
        raise ImportError(MISSING) from e
    vertices = np.ascontiguousarray(np.stack([p0.T, p1.T, p2.T], axis=1), np.float32)  # (T, 3, 3)
    scene = rtcore_scene.EmbreeScene(robust=True)
    mesh_construction.TriangleMesh(scene, vertices)
    with _lock:
        handle = next(_ids)
        _scenes[handle] = scene
    weakref.finalize(owner, _scenes.pop, handle, None)
    return handle


def _scene(handle):
    scene = _scenes.get(int(handle))
    if scene is None:
        raise RuntimeError(f"Embree scene {int(handle)} is gone: the Geometry that built it was freed")
    return scene


def _split_run(run, n):
    """``run(slice) -> tuple of arrays`` over [0, n) on the pool, concatenated."""
    parts = _threads()
    if n < _MIN_SPLIT or parts == 1:
        return run(slice(0, n))
    bounds = np.linspace(0, n, parts + 1).astype(int)
    results = list(_executor().map(run, [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]))
    return tuple(np.concatenate(r) for r in zip(*results))


def _live_rays(o, d, t_max):
    """The rays that ask for something (t_max > 0) as (N', 3) rows, and their indices."""
    t_max = np.asarray(t_max, np.float32)
    live = np.flatnonzero(t_max > 0)
    rows = lambda a: np.ascontiguousarray(np.asarray(a, np.float32)[:, live].T)
    return live, rows(o), rows(d), np.ascontiguousarray(t_max[live])


def _host_closest(handle, o, d, t_max):
    scene = _scene(handle)
    n = t_max.shape[0]
    live, o, d, t_max = _live_rays(o, d, t_max)

    def run(s):
        r = scene.run(o[s], d[s], dists=t_max[s].copy(), output=1)
        return r["geomID"], r["primID"], r["tfar"], r["u"], r["v"]

    t = np.full(n, np.inf, np.float32)
    prim = np.full(n, -1, np.int32)
    u, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    if live.size:
        geom_id, prim_id, t_far, u_live, v_live = _split_run(run, live.size)
        hit = geom_id >= 0
        idx = live[hit]
        t[idx], prim[idx], u[idx], v[idx] = t_far[hit], prim_id[hit], u_live[hit], v_live[hit]
    return t, prim, u, v


def _host_occluded(handle, o, d, t_max):
    scene = _scene(handle)
    blocked = np.zeros(t_max.shape[0], bool)
    live, o, d, t_max = _live_rays(o, d, t_max)
    if live.size:
        # embreex's occlusion query answers the geometry id of a blocker, -1 for none.
        run = lambda s: (scene.run(o[s], d[s], dists=t_max[s].copy(), query="OCCLUDED"),)
        blocked[live] = _split_run(run, live.size)[0] >= 0
    return blocked


def closest_hit(handle, o, d, t_max):
    """(t, prim, u, v) of rays o, d (3, N) against the Embree scene; t = inf, prim = -1 for misses."""
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    shapes = (jax.ShapeDtypeStruct((n,), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.int32),
              jax.ShapeDtypeStruct((n,), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.float32))
    return jax.pure_callback(_host_closest, shapes, handle, o, d, t_max, vmap_method="sequential")


def occluded(handle, o, d, t_max):
    """(N,) bool: Embree finds a triangle at 0 <= t <= t_max."""
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    return jax.pure_callback(_host_occluded, jax.ShapeDtypeStruct((n,), jnp.bool_), handle, o, d, t_max,
                             vmap_method="sequential")
