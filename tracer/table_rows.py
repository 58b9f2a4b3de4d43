"""Host side: a list of row records (one per material, texture, emitter or shape) -> table columns.

Each builder accumulates one small frozen record per entry and packs the table once, column by
column: a scalar field becomes an (N,) array, a vector or matrix field is stacked components-first,
(3,) -> (3, N) and (3, 4) -> (3, 4, N), as the traced code indexes ``table.field[:, i]``. The
packing is numpy; only the finished column is put on the device.
"""
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

__all__ = ["column", "stacked"]


def column(rows: Sequence[object], field: str, dtype: DTypeLike) -> jnp.ndarray:
    """(N,) ``dtype`` array of the scalar ``field`` of each of the N ``rows``."""
    return jnp.asarray(np.array([getattr(row, field) for row in rows], dtype))


def stacked(rows: Sequence[object], field: str, dtype: DTypeLike = np.float32) -> jnp.ndarray:
    """(..., N) ``dtype`` array of the array ``field`` (shape (...)) of each of the N ``rows``,
    components first."""
    return jnp.asarray(np.stack([getattr(row, field) for row in rows], axis=-1).astype(dtype))
