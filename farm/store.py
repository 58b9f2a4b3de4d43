"""The Zarr v3 frame store: a job's single source of truth.

Layout (one Zarr group; F frames, H x W pixels, TY x TX tiles; the reduction tree is ``farm.tree``'s)::

    zarr.json            attributes["farm"]: format, job identity, spec, film size, tiling
    state/               float32 (F, H, W, 10 + K): per tile, the running state of its complete chunks
                         folded in chunk order (sums of filter-weighted RGB and of filter weights, then
                         the sums of the chunks' estimates and of their squares, then the sums of the
                         K AOV channels of a scene with an ``aov`` integrator); one Zarr chunk per tile,
                         its key flat (``c.F.TY.TX.0``: one folder)
    tail/                float32 (F, H, W, 4 + K): per tile, the sums of its partial last chunk (only
                         where the spp is not a whole number of chunks); one Zarr chunk per tile, flat
    records/             uint32 (F, TY, TX, 6): per tile the six fields of its ``TileRecord``
                         (``farm.records``) in order: folded (chunks folded), state_crc (CRC-32 of
                         its state), next_crc (CRC-32 of the state being written, 0: none),
                         tail_passes, tail_spp (the spp the tail was cut at), tail_crc (CRC-32 of
                         the tail); one Zarr chunk per frame; zeros = nothing done
    summary/             float64 (F, 4): per frame what ``farm.summary`` says of it (the fraction done,
                         its spp, its noise, its pixel samples to do), the driver's notes for `farm
                         status`; attributes["basis"]: the job it was computed for
    progress/zarr.json   attributes["progress"]: state, samples done, rate, ETA (for `farm status`)
    cancel/zarr.json     present once `farm cancel` asked the running driver to stop
    pause/zarr.json      present while `farm pause` holds the job's place in its cluster's queue
    lease/               the driver's lease, one document per epoch (``farm.lease``)

The store is bounded: folded chunks are dropped, so a finished frame holds 14 float32 values a
pixel (3.5 times its float32 RGBA image; 2 K more with K AOV channels) at any spp, and nothing
per chunk. The AOVs (``attributes["farm"]["aovs"]``, [name, type] pairs as ``tracer.io.aovs``
parses them; absent for none) fold and add up exactly as the RGB sums do (``farm.tree``).
``attributes["farm"]["rfilter"]`` names the film's reconstruction filter (absent in stores made
before it was recorded); ``attributes["farm"]["renderers"]`` the software that rendered its
samples (``cluster.renderer``; more than one where a run of other software resumed it).

Writes: only the driver writes, and a record never points at data that is not there. Every
Zarr chunk is written whole and at once (a local store writes a file and renames it; an object
store puts one object). Folding a chunk writes the tile's record naming the CRC of the state
it is about to write, then the state, then the record of the new count; the tail is written
before the record that names it. On resume each tile's state and tail are read back and checked
against the record: a state matching the CRC being written counts as the fold done; a state
matching neither is damaged and the tile is rendered again from its first chunk; a damaged
tail is rendered again. A driver holds the store's lease (``farm.lease``); with ``lease`` set,
every write checks it first.

Reads: a store is checked when it is opened: metadata that does not parse (``zarr.json`` of the
group, ``state``, ``tail`` or ``records``), attributes of the wrong shape, or arrays that do not
match the film and tiles are a ``StoreError`` before anything is written. A store of an older
format is refused by name, but for format 2, read and written as it is: it differs only in
keeping a Zarr chunk of records per tile and a folder per tile in ``state/`` and ``tail/``
(format 3 keeps a chunk of records per frame and the tiles' chunks in one folder, so that
committing a batch of tiles writes a file per frame and syncs one folder). A record that does
not decode counts as nothing done, like a tile whose data fails its CRC (``verified_records``).
The progress and cancel nodes are the driver's notes, not the job's data: unreadable, they are
reported and written afresh by the next run.
"""
import errno
import hashlib
import json
import math
import os
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from farm.errors import FarmError, shown
from farm.records import FIELD_COUNT, RECORD, TileRecord, as_fields, as_records
from farm.tree import state_channels, tail_block, tail_channels, tile_sums
from tracer.shared import AOV_SUFFIXES, FILTERS, MAX_FILM_SIZE, aov_channel_count

if TYPE_CHECKING:
    from zarr.core.common import AccessModeLiteral

    from farm.lease import Lease

__all__ = ["FrameStore", "StoreError", "writing_empty_chunks", "FORMAT", "error_line", "progress_number"]

FORMAT = "jaxfarm-frames/3"
# Formats read (and written as they are), and their record chunks: format 2 kept one per tile.
_RECORDS_PER_TILE = "jaxfarm-frames/2"
READS = (FORMAT, _RECORDS_PER_TILE)
# The chunk keys of state/ and tail/ (format 3): ``c.F.TY.TX.0``, every tile's file in one
# folder, so that committing a batch of tiles syncs one folder, not one per tile.
_FLAT: dict[str, Any] = {"name": "default", "separator": "."}
# The group's only attribute while a store is being made (or replaced): not a store yet.
_INCOMPLETE = "jaxfarm-incomplete"
# The frame summary (farm.summary): its array, the frames a chunk, and the attribute naming its basis.
_SUMMARY, _SUMMARY_CHUNK, _BASIS = "summary", 1024, "basis"


class StoreError(FarmError):
    exit_code = 3


# Nothing there: not a store (to create one, or to say so).
_ABSENT = (FileNotFoundError, NotADirectoryError, FileExistsError,  # a file where the store would be
           zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError, zarr.errors.ContainsArrayError)


def error_line(error: BaseException) -> str:
    """One line for an error zarr or fsspec raised (they raise many types for bad metadata or URLs)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _open_group(url: str, mode: "AccessModeLiteral") -> zarr.Group | None:
    """The Zarr group at ``url``, None where there is none, or a StoreError if it does not read."""
    try:
        return zarr.open_group(url, mode=mode)
    except _ABSENT:
        return None
    except Exception as e:  # JSON, UTF-8, zarr's metadata validation, fsspec protocols and I/O
        raise StoreError(f"{url}: cannot read the store (zarr.json: {error_line(e)})") from None


FULL = (errno.ENOSPC, errno.EDQUOT)  # a disk or quota full: no new blocks, but the ones a file has


def rewrite_in_place(path: str, data: bytes) -> None:
    """Overwrite the file at ``path`` with ``data`` in its own blocks, for a full disk: not
    atomic (a reader may see it torn; the notes and the lease are read as such), but it takes
    no new block while ``data`` is no longer than what the file's blocks hold."""
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def writing_empty_chunks(array: zarr.Array) -> zarr.Array:
    """``array``, writing all-zero (black) chunks like any other: completion is checked by
    reading back (zarr leaves such chunks out by default, and does not store that setting)."""
    return array.with_config({"write_empty_chunks": True})


def _node(group, name, url):
    """``group[name]``, or a StoreError naming the node's metadata that does not read."""
    try:
        node = group[name]
        return writing_empty_chunks(node) if isinstance(node, zarr.Array) else node
    except KeyError as e:
        if e.args != (name,):  # a key missing from the node's metadata
            raise StoreError(f"{url}: damaged store: {name}/zarr.json does not read ({error_line(e)})") from None
        raise StoreError(f"{url}: damaged store: '{name}' is missing") from None
    except Exception as e:
        raise StoreError(f"{url}: damaged store: {name}/zarr.json does not read ({error_line(e)})") from None


def _layout(meta: dict[str, Any], url: str) -> tuple[int, int, int]:
    """(width, height, tile) from the group's ``farm`` attributes, checked."""
    film, identity, spec = meta.get("film"), meta.get("identity"), meta.get("spec")
    if not (isinstance(identity, dict) and isinstance(spec, dict)):
        raise StoreError(f"{url}: damaged store: zarr.json has no job identity and spec")
    if not (isinstance(film, list) and len(film) == 2 and all(_whole(v, MAX_FILM_SIZE) for v in film)):
        raise StoreError(f"{url}: damaged store: zarr.json's film is {shown(film)}, not [WIDTH, HEIGHT]")
    if not _whole(identity.get("tile"), MAX_FILM_SIZE):
        raise StoreError(f"{url}: damaged store: zarr.json's tile is {shown(identity.get('tile'))}")
    return film[0], film[1], identity["tile"]


def _aovs(meta: dict[str, Any], url: str) -> tuple[tuple[str, str], ...]:
    """The store's (name, type) AOVs (none for a store without them), checked."""
    aovs = meta.get("aovs", [])
    ok = isinstance(aovs, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(v, str) for v in p)
                                        and p[1] in AOV_SUFFIXES for p in aovs)
    if not ok:
        raise StoreError(f"{url}: damaged store: zarr.json's aovs are {shown(aovs)}, not [[NAME, TYPE], ...]")
    return tuple(tuple(p) for p in aovs)


def _rfilter(meta: dict[str, Any], url: str) -> str | None:
    rfilter = meta.get("rfilter")
    if rfilter is not None and rfilter not in FILTERS:
        raise StoreError(f"{url}: damaged store: zarr.json's rfilter is {shown(rfilter)}, not one of {', '.join(FILTERS)}")
    return rfilter


def _whole(value: object, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high


def _has(group: zarr.Group, name: str) -> bool:
    """Whether ``group`` has a node ``name``, readable or not."""
    try:
        return name in group
    except Exception:  # there, but its metadata does not read
        return True


def _incomplete(group: zarr.Group) -> bool:
    """Whether ``group`` is a store whose making (or replacing) was cut short, by any format."""
    return str(group.attrs.get(_INCOMPLETE, "")).startswith("jaxfarm-frames/")


def _crc(block):
    """CRC-32 of a float32 block; None for a block that did not decode."""
    if block is None:
        return None
    return zlib.crc32(np.ascontiguousarray(block, np.float32).tobytes()) & 0xFFFFFFFF


class FrameStore:
    """Open with ``create`` or ``open``. Tiles are keyed (frame index, tile row, tile column)."""

    def __init__(self, group: zarr.Group, url: str):
        self.group, self.url = group, url
        self.lease: Lease | None = None  # farm.lease.Lease of the driver that writes, checked before each write
        self.log_lines: list[str] = []  # this run's log (``log``), written whole each time
        # The files behind the identity's scene_hash (absolute path -> SHA-256 hex), as the
        # driver read them when it bound the job (farm.job.prepare); members check what they load against them.
        self.scene_files: dict[str, str] = {}
        self.meta: dict[str, Any] = cast("dict[str, Any]", group.attrs.get("farm"))  # (open and create check it)
        self.width, self.height, self.tile = _layout(self.meta, url)
        self.aovs = _aovs(self.meta, url)
        self.rfilter = _rfilter(self.meta, url)  # the film's reconstruction filter; None: not recorded
        self.channels = 3 + aov_channel_count(self.aovs)  # of a tile's value: RGB, then the AOVs
        self.tiles_y, self.tiles_x = -(-self.height // self.tile), -(-self.width // self.tile)
        self.state: zarr.Array = _node(group, "state", url)  # (arrays, checked by _check_arrays)
        self.tail: zarr.Array = _node(group, "tail", url)
        self.records: zarr.Array = _node(group, "records", url)
        self._check_arrays()

    def _check_arrays(self) -> None:
        """The arrays are the film's, in its tiles, with as many frames as each other."""
        arrays = (("state", self.state), ("tail", self.tail), ("records", self.records))
        for name, array in arrays:
            if not isinstance(array, zarr.Array) or array.ndim != 4:
                raise StoreError(f"{self.url}: damaged store: '{name}' is not a 4-dimensional array")
        frames, t = self.state.shape[0], self.tile
        sc, tc = state_channels(self.channels - 3), tail_channels(self.channels - 3)
        ty, tx = (1, 1) if self.meta.get("format") == _RECORDS_PER_TILE else (self.tiles_y, self.tiles_x)
        want = {"state": (np.float32, (frames, self.height, self.width, sc), (1, t, t, sc)),
                "tail": (np.float32, (frames, self.height, self.width, tc), (1, t, t, tc)),
                "records": (np.uint32, (frames, self.tiles_y, self.tiles_x, FIELD_COUNT), (1, ty, tx, FIELD_COUNT))}
        for name, array in arrays:
            dtype, shape, chunk_shape = want[name]
            if array.dtype != dtype or array.shape != shape or array.chunks != chunk_shape or 0 in shape:
                raise StoreError(f"{self.url}: damaged store: '{name}' is {array.dtype} {array.shape} in chunks of "
                                 f"{array.chunks}, not {np.dtype(dtype)} {shape} in chunks of {chunk_shape}")

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def exists(cls, url: str) -> bool:
        """Whether a frame store is at ``url`` (metadata there that does not read is a StoreError)."""
        group = _open_group(url, mode="r")
        return group is not None and "farm" in group.attrs

    @classmethod
    def create(cls, url: str, identity: dict[str, Any], spec_json: dict[str, Any], film: tuple[int, int], n_frames: int,
               over: zarr.Group | None = None, aovs: Sequence[tuple[str, str]] = (),
               rfilter: str | None = None) -> Self:
        """A new store; fails if ``url`` already holds anything. ``over``: the group of a store
        (``replaceable``) whose content the new one replaces (its lease stays). ``aovs``: the
        scene's (name, type) AOVs, whose channels the tiles' sums carry after the RGB; ``rfilter``:
        the name of the film's reconstruction filter (export's denoiser wants a box)."""
        group = cls._new_group(url) if over is None else over
        if over is not None:  # not a store from here until its attributes are written: --replace again
            group.attrs.put({_INCOMPLETE: FORMAT})
            for name in ("state", "tail", "records", _SUMMARY, "sums", "progress", "cancel", "pause"):  # (sums: format 1)
                if _has(group, name):
                    del group[name]
        width, height = film
        tile = identity["tile"]
        ty, tx = -(-height // tile), -(-width // tile)
        k = aov_channel_count(aovs)
        for name, channels in (("state", state_channels(k)), ("tail", tail_channels(k))):
            group.create_array(name, shape=(n_frames, height, width, channels), chunks=(1, tile, tile, channels),
                               dtype="float32", fill_value=0.0, dimension_names=["frame", "y", "x", "channel"],
                               chunk_key_encoding=_FLAT)
        group.create_array("records", shape=(n_frames, ty, tx, FIELD_COUNT), chunks=(1, ty, tx, FIELD_COUNT),
                           dtype="uint32", fill_value=0, dimension_names=["frame", "tile_y", "tile_x", "field"])
        group.create_group("progress")
        # Written last: a store without it is not a store (one cut short is made again by --replace).
        meta: dict[str, Any] = {"format": FORMAT, "identity": identity, "spec": spec_json, "film": [width, height]}
        if aovs:
            meta["aovs"] = [list(pair) for pair in aovs]
        if rfilter:
            meta["rfilter"] = rfilter
        group.attrs.put({"farm": meta})
        return cls(group, url)

    @staticmethod
    def _new_group(url: str) -> zarr.Group:
        try:
            return zarr.open_group(url, mode="w-", attributes={_INCOMPLETE: FORMAT})
        except (FileExistsError, zarr.errors.ContainsGroupError, zarr.errors.ContainsArrayError):
            group = _open_group(url, mode="r")
            if group is not None and _incomplete(group):
                raise StoreError(f"{url}: a store whose making was cut short; add --replace to make it again") from None
            raise StoreError(f"{url}: already exists and is not a frame store of this job") from None
        except (OSError, ValueError) as e:  # a file on the way, no permission, an unknown URL scheme
            raise StoreError(f"{url}: cannot make a store here ({error_line(e)})") from None

    @classmethod
    def replaceable(cls, url: str) -> zarr.Group | None:
        """The zarr group at ``url`` if it is a frame store (of any job, even damaged) or one whose
        making was cut short; None where nothing is there. Anything else is a StoreError: what
        the farm did not make is never replaced."""
        group = _open_group(url, mode="r+")
        if group is None:
            return None
        meta = group.attrs.get("farm")
        if (isinstance(meta, dict) and str(meta.get("format")).startswith("jaxfarm-frames/")
                or _incomplete(group)):
            return group
        raise StoreError(f"{url}: not a farm frame store; --replace replaces only frame stores (choose another --out)")

    @classmethod
    def open(cls, url: str, mode: "AccessModeLiteral" = "r+") -> Self:
        """The store at ``url``, checked (see the module's docstring); opening writes nothing."""
        group = _open_group(url, mode)
        if group is None:
            raise StoreError(f"{url}: no frame store here")
        meta = group.attrs.get("farm")
        if not isinstance(meta, dict) or not str(meta.get("format", "")).startswith("jaxfarm-frames/"):
            raise StoreError(f"{url}: not a farm frame store (no '{FORMAT}' attributes)")
        if meta["format"] not in READS:
            raise StoreError(f"{url}: store format {_short(meta['format'])} is not read by this farm (it reads "
                             f"{' and '.join(map(json.dumps, READS))}): render the job again (another --out, or --replace)")
        return cls(group, url)

    def check_identity(self, identity: dict[str, Any]) -> None:
        """Refuse a store of another job: name the first field that differs."""
        mine = self.meta["identity"]
        order = ["scene_hash", "frames", "resolution", "seed", "tile", "pass_size", "chunk_passes", "params"]
        for key in sorted(set(mine) | set(identity), key=lambda k: (order.index(k) if k in order else len(order), k)):
            if mine.get(key) != identity.get(key):
                what = "scene (its XML or a file it names changed)" if key == "scene_hash" else key
                raise StoreError(f"{self.url}: holds a different job: {what} differs "
                                 f"(store: {_short(mine.get(key))}, job: {_short(identity.get(key))}); "
                                 f"render into another --out, or add --replace to replace the store's content")

    # -- the job's shape ---------------------------------------------------------------------

    @property
    def spec_json(self) -> dict[str, Any]:
        return self.meta["spec"]

    @property
    def n_frames(self) -> int:
        return self.state.shape[0]

    def set_spp(self, spec_json: dict[str, Any]) -> None:
        """Record the job's new spp (the driver alone calls this): the arrays do not depend on it."""
        self.grow(spec_json, self.meta["identity"], self.n_frames)

    def grow(self, spec_json: dict[str, Any], identity: dict[str, Any], n_frames: int) -> None:
        """Bind the store to a job with at least its frames: the arrays grow first (what is
        stored stays where it is), then the attributes (the driver alone calls this)."""
        self._check_lease()
        if n_frames > self.n_frames:
            for array in (self.state, self.tail, self.records):
                array.resize((n_frames, *array.shape[1:]))
        self._put_meta(spec=spec_json, identity=identity)

    def _put_meta(self, **fields: Any) -> None:
        """Write the store's attributes with ``fields`` changed (the caller checked the lease)."""
        meta = dict(self.meta, **fields)
        self.group.attrs["farm"] = meta
        self.meta = meta

    @property
    def renderers(self) -> list[str]:
        """What rendered the store's samples (``cluster.renderer.describe``), first to last; empty for
        a store made before stores noted it, or with nothing rendered yet."""
        noted = self.meta.get("renderers", [])
        return [str(r) for r in noted] if isinstance(noted, list) else []

    def note_renderer(self, renderer: str, rendered: bool | None = None) -> str | None:
        """Note that ``renderer`` is about to add samples (the driver alone calls this, before the
        tasks it sends; one noted already is answered from memory). Returns a one-line warning where the store's
        samples so far came from other software: the sums then mix the two's bits (the same
        image in expectation, not the bits of one render). ``rendered``: whether the store holds
        work already (default: whether a tile's record says so; an optimization's iterations)."""
        earlier = self.renderers
        if renderer in earlier:
            return None
        if rendered is None:
            rendered = bool(np.asarray(self.records[...]).any())
        self._check_lease()
        self._put_meta(renderers=[*earlier, renderer] if rendered else [renderer])
        if not rendered:
            return None
        before = "; ".join(earlier) if earlier else "a farm that did not note its software"
        return (f"{self.url}: its work so far was done by {before}; from here on by {renderer}: the results "
                f"agree with one run's in expectation, not to the bit")

    def tile_box(self, ty: int, tx: int) -> tuple[int, int, int, int]:
        y0, x0 = ty * self.tile, tx * self.tile
        return y0, min(y0 + self.tile, self.height), x0, min(x0 + self.tile, self.width)

    def tile_pixels(self, ty: int, tx: int) -> int:
        """Film pixels in the tile (edge tiles are cut by the film)."""
        y0, y1, x0, x1 = self.tile_box(ty, tx)
        return (y1 - y0) * (x1 - x0)

    # -- tiles -------------------------------------------------------------------------------

    def all_records(self) -> np.ndarray:
        """Every tile's record, (F, TY, TX) of ``farm.records.RECORD``, as stored (a record that
        does not decode raises)."""
        return as_records(self.records[...])

    def read_records(self) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """Every tile's record, (F, TY, TX) of ``RECORD``, and the keys of those that do not
        decode (zeros here: nothing done). Only frames with a record written are read, where
        the store lists its files (a new job of 10,000 frames reads none)."""
        bad: list[tuple[int, ...]]
        records, bad = np.zeros(self.records.shape[:3], RECORD), []
        for f in self._frames_recorded():
            records[f], unread = self.frame_records(f)
            bad += unread
        return records, bad

    def frame_records(self, f: int) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """Frame index ``f``'s records, (TY, TX) of ``RECORD``, and the keys of those that do not
        decode (zeros here: nothing done)."""
        try:
            return as_records(self.records[f]), []
        except Exception:  # a chunk that does not decode: read them one by one
            fields, bad = np.zeros(self.records.shape[1:], np.uint32), []
            for ty, tx in np.ndindex(fields.shape[:2]):
                try:
                    fields[ty, tx] = self.records[f, ty, tx]
                except Exception:
                    bad.append((f, ty, tx))
            return as_records(fields), bad

    def _frames_recorded(self):
        """Frame indexes that may hold a written record: those with a folder of record chunks on
        a local store (zarr's default chunk keys, ``records/c/F/...``), else every frame."""
        encoding = self.records.metadata.chunk_key_encoding
        if not (isinstance(self.group.store, LocalStore) and getattr(encoding, "separator", None) == "/"
                and getattr(encoding, "name", None) == "default"):
            return range(self.n_frames)
        folder = os.path.join(self.group.store.root, self.records.path, "c")
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(n) for n in names if n.isdigit() and int(n) < self.n_frames)

    def verified_records(self, repair: bool = False) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """``read_records``, checked against the data (see the module's docstring): (records as
        the data stands, a fold whose state was written counted, anything damaged zeroed; the
        sorted keys of tiles whose record does not decode or whose state or tail fail their
        CRC). Reads every tile's state and tail: the whole store. ``repair`` (the driver alone)
        writes the records that changed back."""
        records, bad = self.read_records()
        changed = list(bad)
        for key in zip(*np.nonzero(records["folded"] | records["next_crc"] | records["tail_passes"])):
            key = tuple(int(k) for k in key)
            stored = TileRecord.of(records[key])
            record, ok = self._verified(key, stored)
            if record != stored:
                records[key] = record
                changed.append(key)
            if not ok:
                bad.append(key)
        if repair:  # whole frames: a record chunk that does not decode cannot be written in part
            if changed:
                self.drop_summary()
            for f in sorted({key[0] for key in changed}):
                self._check_lease()
                self.records[f] = as_fields(records[f])
        return records, sorted(bad)

    def verify_tile(self, key: tuple[int, int, int], record: TileRecord) -> tuple[TileRecord, bool]:
        """(the record the tile's data supports, whether all it recorded read back): reads the
        tile's state and tail, writes nothing."""
        return self._verified(key, record)

    def _verified(self, key: tuple[int, ...], record: TileRecord) -> tuple[TileRecord, bool]:
        """(the record the tile's data supports, whether all it recorded read back)."""
        ok = True
        if record.folded or record.next_crc:
            crc = _crc(self._read(self.state, key))
            if record.next_crc and crc == record.next_crc:
                record = record._replace(folded=record.folded + 1, state_crc=crc)  # written, not yet recorded
            elif record.folded and crc != record.state_crc:
                record, ok = TileRecord(), False  # (a first fold cut short left no state: nothing lost)
        record = record._replace(next_crc=0)
        if record.tail_passes and _crc(self._read(self.tail, key)) != record.tail_crc:
            record, ok = record.without_tail(), False
        return record, ok

    def _read(self, array: zarr.Array, key: tuple[int, ...]) -> np.ndarray | None:
        """The tile's block of ``array``, cropped to the film; None where it does not decode."""
        f, ty, tx = key
        y0, y1, x0, x1 = self.tile_box(ty, tx)
        try:
            return cast(np.ndarray, array[f, y0:y1, x0:x1, :])
        except Exception:
            return None

    def read_state(self, key: tuple[int, int, int]) -> np.ndarray | None:
        """The tile's folded state (h, w, 10 + K), cropped to the film."""
        return self._read(self.state, key)

    def read_tail(self, key: tuple[int, int, int]) -> np.ndarray | None:
        """The tile's tail (h, w, 4 + K): value RGB, weight and the AOVs, cropped to the film."""
        return self._read(self.tail, key)

    def fold_tile(self, key: tuple[int, int, int], record: TileRecord, state: np.ndarray) -> TileRecord:
        """Durably replace the tile's state by ``state`` (cropped to the film), one more chunk
        folded; ``record`` is the tile's current one. Returns the new record (no tail)."""
        state = np.ascontiguousarray(state, np.float32)
        crc = _crc(state)
        self._put_record(key, record.without_tail()._replace(next_crc=crc))
        self._write(self.state, key, state)
        done = TileRecord(folded=record.folded + 1, state_crc=crc)
        self._put_record(key, done)
        return done

    def write_tail(self, key: tuple[int, int, int], record: TileRecord, value: np.ndarray, weight: np.ndarray,
                   passes: int, spp_cut: int) -> TileRecord:
        """Durably store the tile's tail (sums of ``passes`` passes of its partial last chunk,
        cut at ``spp_cut``), then its record. Returns the new record."""
        y0, y1, x0, x1 = self.tile_box(*key[1:])
        h, w = y1 - y0, x1 - x0
        block = tail_block(value[:h, :w], weight[:h, :w])
        self._write(self.tail, key, block)
        new = record._replace(next_crc=0, tail_passes=passes, tail_spp=spp_cut, tail_crc=_crc(block))
        self._put_record(key, new)
        return new

    def _put_record(self, key: tuple[int, int, int], record: TileRecord) -> None:
        f, ty, tx = key
        self._check_lease()  # the commit: right before the record
        self.records[f, ty, tx, :] = np.array(record, np.uint32)  # (TileRecord's fields in the stored order)

    def _write(self, array: zarr.Array, key: tuple[int, int, int], block: np.ndarray) -> None:
        f, ty, tx = key
        self._check_lease()
        y0, y1, x0, x1 = self.tile_box(ty, tx)
        array[f, y0:y1, x0:x1, :] = block

    def forget_frames(self, frames: Iterable[int]) -> None:
        """Discard the data of frames (indexes): their records are zeroed, so they are rendered afresh."""
        frames = list(frames)
        if frames:
            self.drop_summary()
        for f in frames:
            self._check_lease()
            self.records[f] = 0

    def _check_lease(self) -> None:
        if self.lease is not None:
            self.lease.check()

    # -- frames ------------------------------------------------------------------------------

    def frame_sums(self, f: int, records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(value (H, W, 3 + K), weight (H, W)): frame index ``f``'s folded sums plus each tile's
        tail where ``records`` (the frame's, (TY, TX) of ``RECORD``, verified) have one; zeros
        where a tile has nothing."""
        value = np.zeros((self.height, self.width, self.channels), np.float32)
        weight = np.zeros((self.height, self.width), np.float32)
        for ty in range(self.tiles_y):
            for tx in range(self.tiles_x):
                record = TileRecord.of(records[ty, tx])
                if not (record.folded or record.tail_passes):
                    continue
                y0, y1, x0, x1 = self.tile_box(ty, tx)
                state = (self.read_state((f, ty, tx)) if record.folded
                         else np.zeros((y1 - y0, x1 - x0, state_channels(self.channels - 3)), np.float32))
                tail = self.read_tail((f, ty, tx)) if record.tail_passes else None
                assert state is not None  # (verified records: the tile's state reads back)
                value[y0:y1, x0:x1], weight[y0:y1, x0:x1] = tile_sums(state, tail)
        return value, weight

    # -- the frame summary (farm.summary) -----------------------------------------------------

    def _summary_basis(self) -> str:
        """What the summary's rows were computed for: the recorded job (its spp, frames, target...)."""
        job = json.dumps({"spec": self.meta["spec"], "identity": self.meta["identity"]}, sort_keys=True)
        return hashlib.sha256(job.encode()).hexdigest()

    def write_summary(self, rows: np.ndarray) -> None:
        """Replace the summary with ``rows`` (F, SUMMARY_FIELDS), one a frame of the job; its basis
        is written last, so a summary cut short is never taken for one."""
        self._check_lease()
        array = self.group.create_array(
            _SUMMARY, shape=rows.shape, chunks=(min(_SUMMARY_CHUNK, len(rows)), rows.shape[1]), dtype="float64",
            fill_value=np.nan, overwrite=True, dimension_names=["frame", "field"])
        array[...] = rows
        array.attrs[_BASIS] = self._summary_basis()

    def update_summary(self, frames: Sequence[int], rows: np.ndarray) -> None:
        """Rows (len(frames), SUMMARY_FIELDS) of frame indexes ``frames`` (sorted, distinct), after
        the records they were computed from are written."""
        array = self.group[_SUMMARY] if _has(self.group, _SUMMARY) else None
        if not isinstance(array, zarr.Array):
            return
        self._check_lease()
        array.oindex[np.asarray(frames, np.int64)] = rows

    def drop_summary(self) -> None:
        """Before records change other than by a commit: no summary may count what is gone."""
        if _has(self.group, _SUMMARY):
            self._check_lease()
            del self.group[_SUMMARY]

    def summary(self, frames: int) -> np.ndarray | None:
        """The summary's rows (``frames``, SUMMARY_FIELDS), or None where there is none for the
        recorded job (none written, another job's, cut short, or not readable)."""
        try:
            array = self.group[_SUMMARY]
            if (not isinstance(array, zarr.Array) or array.attrs.get(_BASIS) != self._summary_basis()
                    or array.shape[0] != frames or array.ndim != 2):
                return None
            rows = np.asarray(array[...], np.float64)
        except Exception:  # absent, or notes that do not read: the records are read instead
            return None
        return None if np.isnan(rows[:, 0]).any() else rows

    # -- progress and cancel -----------------------------------------------------------------

    def write_progress(self, **fields: Any) -> None:
        self._check_lease()
        fields["updated"] = time.time()
        try:
            node = self.group["progress"]
        except Exception:  # missing, or its metadata does not read: the driver's notes, written afresh
            node = self.group.create_group("progress", overwrite=True)
        try:
            node.attrs["progress"] = fields
        except OSError as e:
            if not (isinstance(self.group.store, LocalStore) and e.errno in FULL):
                raise
            # A full disk: the notes go in place, into the blocks their document already has
            # (zarr writes a new file, then renames it), so that a run stopped by it says so.
            path = os.path.join(self.group.store.root, self.group.path, "progress", "zarr.json")
            with open(path, "rb") as f:
                meta = json.load(f)
            meta.setdefault("attributes", {})["progress"] = fields
            rewrite_in_place(path, json.dumps(meta).encode())

    def progress(self) -> dict[str, Any] | None:
        """The last run's progress attributes ({} before any), or None where they do not read."""
        try:
            node = self.group["progress"]
        except KeyError:
            return {}
        except Exception:
            return None
        value = node.attrs.get("progress", {})
        return dict(value) if isinstance(value, dict) else None

    def log(self, line: str) -> None:
        """Add ``line`` (one line the driver said) to this run's log, ``log/run-EPOCH.txt`` (its
        lease's epoch; 0 without one), written whole each time: notes, like the progress, so a
        log that cannot be written is let go, and nothing is written once the lease is lost."""
        lines = self.log_lines
        lines.append(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}")
        try:
            self._check_lease()
            node = self.group.require_group("log").store_path
            epoch = self.lease.holder.epoch if self.lease is not None else 0
            data = ("\n".join(lines) + "\n").encode()
            sync((node / f"run-{epoch:010d}.txt").set(default_buffer_prototype().buffer.from_bytes(data)))
        except Exception:
            pass

    def logs(self) -> list[str]:
        """Every run's log lines (``log``), the runs in the order of their epochs, newest last."""
        if not _has(self.group, "log"):
            return []
        node = self.group["log"].store_path

        async def names() -> list[str]:
            return [name async for name in node.store.list_dir(node.path)]
        out = []
        for name in sorted(n for n in sync(names()) if n.startswith("run-") and n.endswith(".txt")):
            buffer = sync((node / name).get())
            if buffer is not None:
                out += buffer.to_bytes().decode("utf-8", "replace").splitlines()
        return out

    def request_cancel(self) -> None:
        if not _has(self.group, "cancel"):
            self.group.create_group("cancel")

    def cancel_requested(self) -> bool:
        try:
            return _has(zarr.open_group(self.url, mode="r"), "cancel")
        except Exception:
            return False

    def set_paused(self, paused: bool) -> None:
        """Hold the job's place in its cluster's queue with no groups (``farm pause``), or not."""
        if paused and not _has(self.group, "pause"):
            self.group.create_group("pause")
        elif not paused and _has(self.group, "pause"):
            del self.group["pause"]

    def paused(self) -> bool:
        """Whether ``farm pause`` holds the job (read afresh: another process sets it)."""
        try:
            return _has(zarr.open_group(self.url, mode="r"), "pause")
        except Exception:
            return False

    def clear_cancel(self) -> None:
        if _has(self.group, "cancel"):
            self._check_lease()
            del self.group["cancel"]  # by name: unreadable metadata there goes too


def progress_number(notes: Mapping[str, Any], key: str) -> float | None:
    """A progress note's number (``FrameStore.progress``), None where it is missing or not a
    finite number: the notes are the driver's, not the job's, and may be of any type."""
    value = notes.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
