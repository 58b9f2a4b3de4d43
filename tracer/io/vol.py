"""Host side: Mitsuba's binary volume grid files (``.vol``, version 3), as ``VolumeGrid::read``.

Layout (little-endian): ``VOL``, the version byte 3, int32 encoding (1: float32), int32 x, y and
z resolutions, int32 channels, six float32 (the grid's box: min x, y, z then max x, y, z), then
x * y * z * channels float32 values, x fastest and channels innermost.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from tracer.errors import SceneError
from tracer.io.reads import read_file

__all__ = ["Grid", "read", "parse", "encode"]

_HEADER = 3 + 1 + 4 * 5 + 4 * 6


@dataclasses.dataclass(frozen=True)
class Grid:
    data: np.ndarray   # (z, y, x, channels) float32
    lo: np.ndarray     # (3,) the box the file gives
    hi: np.ndarray

    @property
    def res(self) -> np.ndarray:
        """(x, y, z) voxels."""
        return np.array(self.data.shape[2::-1], np.int32)

    @property
    def channels(self) -> int:
        return int(self.data.shape[3])

    @property
    def largest(self) -> float:
        return float(self.data.max())

    def bbox_to_world(self) -> np.ndarray:
        """(4, 4) the unit cube onto the file's box (what ``use_grid_bbox`` places the grid by)."""
        m = np.diag([*(self.hi - self.lo), 1.0])
        m[:3, 3] = self.lo
        return m


def read(path: str | os.PathLike[str]) -> Grid:
    """The grid in the file at ``path``; ``SceneError`` naming it for anything malformed."""
    try:
        data = read_file(path)  # (noted, so that a farm member checks the bytes it renders)
    except OSError as e:
        raise SceneError(f"cannot read volume grid '{path}': {e.strerror or e}") from None
    return parse(data, str(path))


def parse(data: bytes, where: str) -> Grid:
    if len(data) < _HEADER or data[:3] != b"VOL":
        raise SceneError(f"{where}: not a Mitsuba volume grid (no 'VOL' header)")
    if data[3] != 3:
        raise SceneError(f"{where}: volume grid version {data[3]}; only version 3 is read")
    encoding, x, y, z, channels = np.frombuffer(data, "<i4", 5, 4)
    if encoding != 1:
        raise SceneError(f"{where}: volume grid encoding {encoding}; only 1 (float32) is read")
    if min(x, y, z) < 1 or channels not in (1, 3):
        raise SceneError(f"{where}: volume grid of {x}x{y}x{z} voxels and {channels} channels (1 or 3, at least "
                         "one voxel each way)")
    box = np.frombuffer(data, "<f4", 6, 24).astype(np.float64)
    count = int(x) * int(y) * int(z) * int(channels)
    if len(data) != _HEADER + 4 * count:
        raise SceneError(f"{where}: volume grid of {x}x{y}x{z}x{channels} values needs {_HEADER + 4 * count} bytes, "
                         f"the file has {len(data)}")
    values = np.frombuffer(data, "<f4", count, _HEADER).reshape(int(z), int(y), int(x), int(channels))
    if not np.all(np.isfinite(values)):
        raise SceneError(f"{where}: volume grid has values that are not finite")
    return Grid(values.astype(np.float32), box[:3], box[3:])


def encode(values: np.ndarray, lo: tuple[float, float, float] = (0.0, 0.0, 0.0),
           hi: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> bytes:
    """The bytes of a ``.vol`` file of ``values`` (z, y, x) or (z, y, x, channels)."""
    values = np.asarray(values, np.float32)
    if values.ndim == 3:
        values = values[..., None]
    z, y, x, channels = values.shape
    head = b"VOL" + bytes([3]) + np.array([1, x, y, z, channels], "<i4").tobytes()
    return head + np.array([*lo, *hi], "<f4").tobytes() + values.astype("<f4").tobytes()
