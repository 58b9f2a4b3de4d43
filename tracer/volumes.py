"""Grid volumes as Mitsuba 3's ``gridvolume``: values on a voxel grid over the unit cube, placed in
the world by ``to_world``, filtered trilinearly (or to the nearest voxel) with Mitsuba's texture
convention (voxel centres at (i + 1/2) / res; outside the grid, coordinates clamped to its edge,
repeated or mirrored, as its ``wrap_mode`` says).

Every grid of a scene lives in one flat array (``Volumes.data``); a volume is its offset there,
its resolution, its channel count (1 or 3: a 1-channel grid is grey), its filter and the inverse
of its placement. A medium names its volumes by row (tracer.media).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tracer import lanes
from tracer import vecmath as vm
from tracer.kinds import WrapMode
from tracer.pytree import pytree_dataclass, static
from tracer.table_rows import on_device
from tracer.textures import wrap_index

__all__ = ["Volumes", "no_volumes", "eval_rgb"]


@pytree_dataclass
class Volumes:
    """V grid volumes."""

    data: jnp.ndarray      # (D,) float32 every grid's voxels, each (z, y, x, channel), x fastest
    offset: jnp.ndarray    # (V,) int32 where each grid starts in data
    res: jnp.ndarray       # (3, V) int32 voxels along x, y, z
    channels: jnp.ndarray  # (V,) int32 1 or 3
    nearest: jnp.ndarray   # (V,) bool: Mitsuba's filter_type="nearest"
    to_local: jnp.ndarray  # (3, 4, V) world -> the unit cube the grid spans
    wrap: jnp.ndarray | None = None  # (V,) int32 WrapMode of each grid; None: all clamped
    count: int = static(default=0)
    wraps_present: tuple[int, ...] = static(default=(WrapMode.CLAMP,))


def no_volumes() -> Volumes:
    none = on_device(np.zeros(0, np.int32))
    return Volumes(data=on_device(np.zeros(1, np.float32)), offset=none, res=on_device(np.zeros((3, 0), np.int32)),
                   channels=none, nearest=on_device(np.zeros(0, bool)), to_local=on_device(np.zeros((3, 4, 0), np.float32)))


def eval_rgb(volumes: Volumes, volume: jax.Array, p: jax.Array) -> jax.Array:
    """(3, N) the values of ``volume`` (N,) int32 at world points p (3, N); a 1-channel grid's
    value in all three."""
    v = jnp.clip(volume, 0, max(volumes.count - 1, 0))
    local = vm.transform_point(lanes.take(volumes.to_local, v), p)
    res = lanes.take(volumes.res, v)
    channels, offset, nearest = volumes.channels[v], volumes.offset[v], volumes.nearest[v]
    # Mitsuba's (Dr.Jit's) texture lookup: position p * res - 1/2, its floor and fraction; each
    # corner's index clamped to the grid, or wrapped.
    pos = local * res.astype(jnp.float32) - 0.5
    base = jnp.floor(pos)
    frac = pos - base
    base = base.astype(jnp.int32)
    mode = volumes.wrap[v] if volumes.wrap is not None else WrapMode.CLAMP
    wrap = lambda i: wrap_index(i, res, mode, volumes.wraps_present)
    near = wrap(jnp.floor(local * res.astype(jnp.float32)).astype(jnp.int32))
    out = jnp.zeros_like(p)
    for corner in range(8):
        step = jnp.asarray([(corner >> 0) & 1, (corner >> 1) & 1, (corner >> 2) & 1], jnp.int32)[:, None]
        index = jnp.where(nearest, near, wrap(base + step))
        w = jnp.where(step == 1, frac, 1.0 - frac)
        weight = w[0] * w[1] * w[2]  # in one order (tracer.media.channel_mean says why)
        weight = jnp.where(nearest, float(corner == 0), weight)
        voxel = (index[2] * res[1] + index[1]) * res[0] + index[0]
        first = offset + voxel * channels
        grey = volumes.data[first]
        rgb = jnp.stack([grey, volumes.data[first + jnp.minimum(1, channels - 1)],
                         volumes.data[first + jnp.minimum(2, channels - 1)]])
        out = out + weight * rgb
    return out

