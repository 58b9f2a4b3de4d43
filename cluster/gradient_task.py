"""What a worker group is asked for in inverse rendering: one tile's loss and gradient, or one
optimizer step.

Plain data (no JAX), as ``cluster.task``: the farm builds these on the driver (``farm.descent``)
and Ray ships them to the group's members (``cluster.gradient``: a step to the first alone). Parameters travel as
(key, float32 array) pairs in the job's key order, so that every member sees one order.
"""
import dataclasses
from typing import NamedTuple

import numpy as np

from cluster.task import SceneRef

__all__ = ["GradientTask", "TileGradient", "StepTask", "Stepped", "Params"]

Params = tuple[tuple[str, np.ndarray], ...]  # (key, value) in the job's key order


@dataclasses.dataclass(frozen=True)
class GradientTask:
    """The tile of ``frame`` at (tile_y, tile_x), rendered at ``params`` with ``spp`` samples a
    pixel and ``seed`` (the iteration's), its loss against ``target`` and the loss's gradient.

    Every tile of a job has the job's tile shape (tile_h, tile_w), so that one program serves
    them all; ``rows`` x ``cols`` of it are inside the film (the rest is padding, out of the loss).
    """

    scene: SceneRef
    frame: int
    seed: int
    spp: int
    tile_y: int
    tile_x: int
    tile_h: int
    tile_w: int
    rows: int
    cols: int
    params: Params
    target: np.ndarray  # (rows, cols, 3) float32, linear RGB
    loss: str           # tracer.shared.LOSSES


class TileGradient(NamedTuple):
    """A gradient task's answer: the loss summed over the tile's pixels and channels, d(that)/d(params)
    in the task's key order (float64: the tile's bands added, ``cluster.gradient``), the tile's
    image, and the seconds the member took."""

    loss: float
    grads: Params
    image: np.ndarray   # (rows, cols, 3) float32
    seconds: float


@dataclasses.dataclass(frozen=True)
class StepTask:
    """One optimizer step (``tracer.optimizer.step``) from ``params`` and ``state`` (its bytes,
    ``tracer.optimizer.state_bytes``; empty: a fresh state) with ``grads``, each key clamped to
    ``ranges``."""

    optimizer: str
    learning_rate: float
    params: Params
    state: bytes
    grads: Params
    ranges: tuple[tuple[float, float], ...]  # (low, high) per key, in the key order


class Stepped(NamedTuple):
    """A step's answer: the new parameters and the optimizer state's bytes."""

    params: Params
    state: bytes
