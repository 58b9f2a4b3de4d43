"""Host side: a list of row records (one per material, texture, emitter or shape) -> table columns.

Each builder accumulates one small frozen record per entry and packs the table once, column by
column: a scalar field becomes an (N,) array, a vector or matrix field is stacked components-first,
(3,) -> (3, N) and (3, 4) -> (3, 4, N), as the traced code indexes ``table.field[:, i]``. The
packing is numpy; only the finished column is put on the device (``on_device``).
"""
from collections.abc import Sequence

import jax
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

__all__ = ["column", "stacked", "on_device"]


def on_device(values: ArrayLike, dtype: DTypeLike | None = None) -> jax.Array:
    """Host data (numpy, Python numbers) as a JAX array of ``dtype`` (default: its own, made
    canonical as JAX makes it: float64 -> float32, int64 -> int32), copied to the device.

    Not ``jnp.asarray``: outside a trace it stages numpy data through a small program compiled
    for each shape and dtype, 14 ms each the first time in a process (2-core host); a scene's
    tables made some 45 of them, 0.6 s of every worker's first load. This compiles nothing. From
    a copy of its own: on CPUs the device array keeps an aligned host array's memory (whatever
    ``may_alias`` says, jax 0.12: jax-ml/jax#37830), which a later change to that array (a cached
    mesh's) would change too."""
    return jax.device_put(np.array(values, dtype, copy=True))


def column(rows: Sequence[object], field: str, dtype: DTypeLike) -> jax.Array:
    """(N,) ``dtype`` array of the scalar ``field`` of each of the N ``rows``."""
    return on_device(np.array([getattr(row, field) for row in rows], dtype))


def stacked(rows: Sequence[object], field: str, dtype: DTypeLike = np.float32) -> jax.Array:
    """(..., N) ``dtype`` array of the array ``field`` (shape (...)) of each of the N ``rows``,
    components first."""
    return on_device(np.stack([getattr(row, field) for row in rows], axis=-1).astype(dtype))
