"""A tile's record: what the store holds of one tile, read by name.

The store keeps the records as uint32 (frames, TY, TX, 6), six fields a tile in the order of
``TileRecord`` (``farm.store``; the layout every store format has had). Here they are named:

* ``RECORD``, a structured dtype of those six uint32 fields: ``as_records`` views the store's
  uint32 chunks as records (``records["folded"]`` is the (F, TY, TX) count array), with the
  same bytes, so a CRC or hash of them is unchanged;
* ``TileRecord``, one tile's record as a Python value, replaced (``_replace``), never mutated:
  what the driver commits is built whole, so a write goes only where it is put.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["TileRecord", "RECORD", "FIELD_COUNT", "as_records", "as_fields", "has_samples"]


class TileRecord(NamedTuple):
    """One tile's record; all zeros (the default): nothing done. Field order is the stored order."""
    folded: int = 0       # complete chunks folded into the tile's state
    state_crc: int = 0    # CRC-32 of the tile's state
    next_crc: int = 0     # CRC-32 of the state being written over it (0: none)
    tail_passes: int = 0  # passes of its partial last chunk kept as its tail (0: no tail)
    tail_spp: int = 0     # the job's spp when the tail was cut (what its last pass masks)
    tail_crc: int = 0     # CRC-32 of the tail

    @classmethod
    def of(cls, record: np.void | np.ndarray) -> TileRecord:
        """The record of one element of a ``RECORD`` array, in Python ints (a copy, not a view)."""
        return cls(*record.item())

    def without_tail(self) -> TileRecord:
        """This record with no tail (what folding a chunk leaves: the tail is part of what is folded)."""
        return self._replace(tail_passes=0, tail_spp=0, tail_crc=0)


RECORD = np.dtype([(name, np.uint32) for name in TileRecord._fields])
FIELD_COUNT = len(TileRecord._fields)  # uint32 values a record: the last axis of the store's records


def as_records(fields: ArrayLike) -> np.ndarray:
    """The records (...) of ``RECORD`` of the store's uint32 ``fields`` (..., 6): a view where
    they are C-contiguous native uint32 (what zarr reads), else a copy."""
    return np.ascontiguousarray(fields, np.uint32).view(RECORD)[..., 0]


def as_fields(records: np.ndarray) -> np.ndarray:
    """The store's uint32 fields (..., 6) of ``records`` (...) of ``RECORD``, byte for byte."""
    return np.ascontiguousarray(records, RECORD).view(np.uint32).reshape(*records.shape, FIELD_COUNT)


def has_samples(records: np.ndarray) -> np.ndarray:
    """Bools (...): whether each tile of ``records`` holds any samples (folded chunks or a tail)."""
    return (records["folded"] > 0) | (records["tail_passes"] > 0)
