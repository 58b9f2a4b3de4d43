"""What the host-side intersection engines (Embree, Warp) share: a registry of built scenes
addressed by a traced int32 handle, and the ``jax.pure_callback`` seam that sends them rays.

The jitted program refers to an engine's scene only by its handle, so every frame of a job (a
new scene each) reuses one compiled program. Rays leave XLA as (3, N) columns; only the rays
that ask for something (t_max > 0) are sent, as (N', 3) rows, and the answers are scattered back.
An engine answers each ray on its own, so a ray's result does not depend on how a batch is split:
renders stay bit-identical across device counts.
"""
import itertools
import threading
import weakref

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["register", "closest_hit", "occluded"]

_scenes = {}
_ids = itertools.count(1)
_lock = threading.Lock()


def register(engine, scene, owner):
    """Keep ``scene`` (answered by ``engine``) while ``owner`` lives; returns its int32 handle.

    ``engine`` has ``closest(scene, o, d, t_max) -> (prim (N,) int32, t (N,) float32)`` and
    ``occluded(scene, o, d, t_max) -> (N,) bool`` over (N, 3) float32 rows.
    """
    with _lock:
        handle = next(_ids)
        _scenes[handle] = (engine, scene)
    weakref.finalize(owner, _scenes.pop, handle, None)
    return handle


def _lookup(handle):
    entry = _scenes.get(int(handle))
    if entry is None:
        raise RuntimeError(f"intersection scene {int(handle)} is gone: the Geometry that built it was freed")
    return entry


def _live_rays(o, d, t_max):
    """The rays that ask for something (t_max > 0) as (N', 3) rows, and their indices."""
    t_max = np.asarray(t_max, np.float32)
    live = np.flatnonzero(t_max > 0)
    rows = lambda a: np.ascontiguousarray(np.asarray(a, np.float32)[:, live].T)
    return live, rows(o), rows(d), np.ascontiguousarray(t_max[live])


def _host_closest(handle, o, d, t_max):
    engine, scene = _lookup(handle)
    n = t_max.shape[0]
    live, o, d, t_max = _live_rays(o, d, t_max)
    t = np.full(n, np.inf, np.float32)
    prim = np.full(n, -1, np.int32)
    if live.size:
        prim_live, t_live = engine.closest(scene, o, d, t_max)
        hit = prim_live >= 0
        t[live[hit]], prim[live[hit]] = t_live[hit], prim_live[hit]
    return t, prim


def _host_occluded(handle, o, d, t_max):
    engine, scene = _lookup(handle)
    blocked = np.zeros(t_max.shape[0], bool)
    live, o, d, t_max = _live_rays(o, d, t_max)
    if live.size:
        blocked[live] = engine.occluded(scene, o, d, t_max)
    return blocked


def closest_hit(handle, o, d, t_max):
    """(t, prim) of rays o, d (3, N) against the scene ``handle``; t = inf, prim = -1 for misses."""
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    shapes = (jax.ShapeDtypeStruct((n,), jnp.float32), jax.ShapeDtypeStruct((n,), jnp.int32))
    return jax.pure_callback(_host_closest, shapes, handle, o, d, t_max, vmap_method="sequential")


def occluded(handle, o, d, t_max):
    """(N,) bool: the scene ``handle`` has a triangle at 0 < t < t_max along the ray."""
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    return jax.pure_callback(_host_occluded, jax.ShapeDtypeStruct((n,), jnp.bool_), handle, o, d, t_max,
                             vmap_method="sequential")
