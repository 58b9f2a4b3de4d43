"""What a worker group is asked to render: one tile of one frame for a run of sample passes.

Plain data (no JAX): the farm builds these on the driver and Ray ships them to every member.
"""
import dataclasses
from typing import NamedTuple, Protocol

import numpy as np

__all__ = ["SceneRef", "TileTask", "TileSums", "TileWritten", "TileOut"]


class TileOut(Protocol):
    """Where a member writes a task's result (``TileTask.out``), such as ``farm.results.Slot``."""

    def start(self, tile_h: int, tile_w: int) -> tuple[np.ndarray, np.ndarray]:
        """(value, weight): the accumulator the task adds its passes to."""
        ...

    def write(self, value: np.ndarray, weight: np.ndarray) -> object:
        """Write the task's result; returns a receipt (``TileWritten.receipt``)."""
        ...


@dataclasses.dataclass(frozen=True)
class SceneRef:
    """How a member loads a frame's scene: the file, the ``$name`` values and overrides."""

    path: str                 # absolute path to the scene XML, readable on every host
    params: tuple[tuple[str, str], ...] = ()  # sorted (name, value) pairs for the scene's <default> names
    resolution: tuple[int, int] | None = None  # (width, height) overriding the film, or None
    accel: str = "auto"       # intersection backend
    aovs: str | None = None   # AOVs the job adds (tracer.io.overrides)
    rfilter: str | None = None  # the reconstruction filter the job sets
    # (absolute path, SHA-256 hex) of every file the job's store records: a load that reads
    # another file, or other bytes, is refused (tracer.io.reads.check_reads); () checks nothing
    files: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class TileTask:
    """Passes [first_pass, first_pass + n_passes) of the tile at (tile_y, tile_x) of ``frame``.

    The result is the sum of those passes added one at a time, in pass order, to the accumulator
    ``start`` (None: zeros, or what ``out`` reads): value (tile_h, tile_w, channels) and weight
    (tile_h, tile_w) float32, handed back, or written by the member where ``out`` says;
    ``channels``: RGB, then the scene's AOV channels (``tracer.shared.aov_channel_count``).
    """

    scene: SceneRef
    frame: int
    seed: int
    spp: int
    tile_y: int
    tile_x: int
    tile_h: int
    tile_w: int
    first_pass: int
    n_passes: int
    pass_size: int
    start: tuple[np.ndarray, np.ndarray] | None = None  # (value, weight) numpy arrays to continue from, or None
    channels: int = 3         # of value: RGB, then the scene's AOVs
    chunk_passes: int = 1     # the passes a task of its job usually adds: what the work unit traces as one batch
    job_samples: int = 0      # samples x pixels of the whole job: how long its program serves (drain phases)
    # Where rank 0 writes the result instead of returning it, or None: an object with
    # ``start(tile_h, tile_w)`` (the accumulator to continue from, when ``start`` is None) and
    # ``write(value, weight)`` (its answer), such as ``farm.results.Slot``.
    out: TileOut | None = None

    @property
    def samples(self) -> int:
        """Samples per pixel this task adds (the last pass may be cut short by spp)."""
        first = self.first_pass * self.pass_size
        return max(0, min(self.spp, first + self.n_passes * self.pass_size) - first)


class TileSums(NamedTuple):
    """A task's answer handed back (by rank 0): its sums, and the seconds the member took."""

    value: np.ndarray    # (tile_h, tile_w, channels) float32
    weight: np.ndarray   # (tile_h, tile_w) float32
    seconds: float


class TileWritten(NamedTuple):
    """A task's answer written where its ``out`` said: what ``out.write`` returned (for
    ``farm.results.Slot``, the CRC of what it wrote), and the seconds the member took."""

    receipt: object
    seconds: float
