"""An optimization's checkpoints in its job's Zarr store (``farm optimize``): the parameters and
the optimizer's state after every iteration, the loss history, the latest renders.

Layout, beside a frame store's arrays (``farm.store``; they stay empty)::

    optimize/zarr.json    attributes["optimize"]: the [optimize] table (farm.optimize_spec), the
                          SHA-256 of the targets' values ("targets_sha256"), and
                          "keys": [[KEY, SHAPE, LOW, HIGH], ...], the parameters in order with their
                          shapes and valid ranges (HIGH null: none)
    optimize/params       float32 (I + 1, N): row i the parameters after i iterations (row 0 the
                          scene's), every key's values ravelled in the keys' order; a chunk a row
    optimize/state        uint8 (I + 1, B): row i the optimizer's state after i iterations
                          (``tracer.optimizer.state_bytes``; row 0 unused: a fresh state)
    optimize/loss         float64 (I,): the loss of iteration i (its renders at row i's parameters)
    optimize/renders      float32 (F, H, W, 3): every frame's render of the last iteration committed
    optimize/targets      float32 (F, H, W, 3): every frame's target, as the optimization began (its
                          monitor shows them from here: nothing outside the store is read)
    optimize/record       uint32 (4,): iterations done, CRC-32 of their params row, of their state
                          row, and of the renders (0: none yet)

The record is written last (one chunk, whole): a checkpoint counts once its record names it, and
an iteration cut short before is done again from the row the record names, to the same bits. Its
rows are read back and checked against their CRCs on resume; rows past the record are rewritten.
Every write checks the driver's lease first (``FrameStore.lease``: fencing).
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import zarr

from farm.optimize_spec import OptimizeSpec
from farm.store import FrameStore, StoreError, error_line, writing_empty_chunks

__all__ = ["Key", "Checkpoint", "Optimization", "is_optimization", "create", "open_optimization"]

_GROUP = "optimize"


class Key(NamedTuple):
    """A parameter of the optimization: its Mitsuba key, shape and valid range."""

    key: str
    shape: tuple[int, ...]
    low: float
    high: float

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class Checkpoint(NamedTuple):
    """The optimization after ``iteration`` iterations."""

    iteration: int
    params: np.ndarray   # (N,) float32
    state: bytes         # the optimizer's (empty before the first step)


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _array(group: zarr.Group, name: str) -> zarr.Array:
    node = group[name]
    if not isinstance(node, zarr.Array):
        raise StoreError(f"optimize/{name} is not an array")
    return writing_empty_chunks(node)


def _group(store: FrameStore) -> zarr.Group:
    node = store.group[_GROUP]
    if not isinstance(node, zarr.Group):
        raise StoreError(f"{_GROUP} is not a group")
    return node


def is_optimization(store: FrameStore) -> bool:
    try:
        return _GROUP in store.group and "optimize" in _group(store).attrs
    except Exception:
        return False


class Optimization:
    """The optimize group of an open store: ``latest`` to resume, ``commit`` after each iteration."""

    def __init__(self, store: FrameStore):
        self.store = store
        try:
            self.group = _group(store)
            meta: Any = self.group.attrs["optimize"]  # (checked as it is read: a bad one does not read)
            self.spec = OptimizeSpec.from_json(meta["spec"])
            self.targets_sha256 = str(meta["targets_sha256"])
            self.keys = tuple(Key(k, tuple(shape), float(lo), float("inf") if hi is None else float(hi))
                              for k, shape, lo, hi in meta["keys"])
            self.params, self.loss = _array(self.group, "params"), _array(self.group, "loss")
            self.renders, self.record = _array(self.group, "renders"), _array(self.group, "record")
        except Exception as e:
            raise StoreError(f"{store.url}: damaged store: its optimization does not read ({error_line(e)})") from None

    @property
    def size(self) -> int:
        return sum(k.size for k in self.keys)

    def unravel(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """{key: values in its shape} of a flat parameter vector."""
        out, at = {}, 0
        for k in self.keys:
            out[k.key] = np.asarray(vector[at:at + k.size], np.float32).reshape(k.shape)
            at += k.size
        return out

    def ravel(self, params: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(params[k.key], np.float32).ravel() for k in self.keys])

    # -- reading ---------------------------------------------------------------------------------

    def done(self) -> int:
        """Iterations the record names (0 where it does not read)."""
        try:
            return int(np.asarray(self.record[...])[0])
        except Exception:
            return 0

    def latest(self) -> Checkpoint:
        """The last checkpoint the record names, its rows checked against their CRCs (a row that
        does not read back is a StoreError: the data the record names is gone)."""
        record = np.asarray(self.record[...], np.uint32)
        n = int(record[0])
        params = np.ascontiguousarray(self.params[n], np.float32)
        if _crc(params.tobytes()) != int(record[1]):
            raise StoreError(f"{self.store.url}: damaged store: the parameters of iteration {n} do not read back "
                             f"(CRC); `farm optimize` with --replace starts over")
        state = b""
        if n:
            state = np.asarray(_array(self.group, "state")[n], np.uint8).tobytes()
            if _crc(state) != int(record[2]):
                raise StoreError(f"{self.store.url}: damaged store: the optimizer state of iteration {n} does not "
                                 f"read back (CRC); `farm optimize` with --replace starts over")
        return Checkpoint(n, params, state)

    def losses(self) -> list[float]:
        n = self.done()
        return [float(v) for v in np.asarray(self.loss[:n], np.float64)] if n else []

    def history(self) -> np.ndarray:
        """(iterations done + 1, N) float32: the parameters after each iteration."""
        return np.asarray(self.params[:self.done() + 1], np.float32)

    def target(self, f: int) -> np.ndarray:
        """Frame index ``f``'s target, as the optimization began with it."""
        return np.asarray(_array(self.group, "targets")[f], np.float32)

    def render(self, f: int) -> np.ndarray | None:
        """Frame index ``f``'s render of the last iteration committed (None before the first)."""
        if self.done() == 0:
            return None
        return np.asarray(self.renders[f], np.float32)

    # -- writing (the driver, under its lease) ---------------------------------------------------

    def commit(self, iteration: int, params: np.ndarray, state: bytes, loss: float, renders: np.ndarray) -> None:
        """Record iteration ``iteration - 1`` done: its loss and renders, then the parameters and
        state after it (row ``iteration``), then the record that names them."""
        store = self.store
        params = np.ascontiguousarray(params, np.float32)
        state_row = np.frombuffer(state, np.uint8)
        store._check_lease()
        if "state" not in self.group:
            self.group.create_array("state", shape=(self.spec.iterations + 1, len(state_row)),
                                    chunks=(1, len(state_row)), dtype="uint8", fill_value=0)
        states = _array(self.group, "state")
        if states.shape[1] != len(state_row):
            raise StoreError(f"{store.url}: damaged store: its optimizer state is {states.shape[1]} bytes, "
                             f"the step's {len(state_row)}")
        self.loss[iteration - 1] = loss
        store._check_lease()
        self.renders[...] = renders
        store._check_lease()
        self.params[iteration] = params
        store._check_lease()
        states[iteration] = state_row
        store._check_lease()
        self.record[...] = np.array([iteration, _crc(params.tobytes()), _crc(state), 1], np.uint32)


def create(store: FrameStore, spec: OptimizeSpec, keys: Sequence[Key], initial: Mapping[str, np.ndarray],
           targets: Sequence[np.ndarray], targets_sha256: str) -> Optimization:
    """The optimize group of a new optimization in ``store`` (under its lease), row 0 the scene's
    values; ``targets`` (H, W, 3) a frame, and ``targets_sha256`` what they hold
    (``farm.descent.targets_hash``)."""
    store._check_lease()
    group = store.group.create_group(_GROUP, overwrite=True)
    n = sum(k.size for k in keys)
    group.create_array("params", shape=(spec.iterations + 1, n), chunks=(1, n), dtype="float32", fill_value=0.0)
    group.create_array("loss", shape=(spec.iterations,), chunks=(1,), dtype="float64", fill_value=np.nan)
    group.create_array("renders", shape=(store.n_frames, store.height, store.width, 3),
                       chunks=(1, store.height, store.width, 3), dtype="float32", fill_value=0.0)
    group.create_array("record", shape=(4,), chunks=(4,), dtype="uint32", fill_value=0)
    group.create_array("targets", shape=(store.n_frames, store.height, store.width, 3),
                       chunks=(1, store.height, store.width, 3), dtype="float32", fill_value=0.0)
    _array(group, "targets")[...] = np.stack([np.asarray(t, np.float32) for t in targets])
    opt = Optimization.__new__(Optimization)
    opt.store, opt.group, opt.spec, opt.keys, opt.targets_sha256 = store, group, spec, tuple(keys), targets_sha256
    opt.params, opt.loss = _array(group, "params"), _array(group, "loss")
    opt.renders, opt.record = _array(group, "renders"), _array(group, "record")
    row = opt.ravel(initial)
    opt.params[0] = row
    opt.record[...] = np.array([0, _crc(row.tobytes()), 0, 0], np.uint32)
    # The attributes last: a group without them is not an optimization yet (made again from the start).
    group.attrs["optimize"] = json.loads(json.dumps(
        {"spec": spec.to_json(), "targets_sha256": targets_sha256, "keys": [[k.key, list(k.shape), k.low, k.high if k.high != float("inf") else None] for k in keys]}))
    return opt


def open_optimization(store: FrameStore) -> Optimization | None:
    """The store's optimization, or None for a render job's store."""
    return Optimization(store) if is_optimization(store) else None
