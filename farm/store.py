"""The Zarr v3 frame store: a job's single source of truth.

Layout (one Zarr group; F frames, C chunks of samples, H x W pixels, TY x TX tiles)::

    zarr.json            attributes["farm"]: format, job identity, spec, film size, tiling
    sums/                float32 (F, C, H, W, 4): per chunk of passes, the sums of filter-weighted
                         RGB radiance and of filter weights; one Zarr chunk per (frame, chunk, tile)
    records/             uint32 (F, C, TY, TX, 3): per task [passes done, spp they were cut at,
                         CRC-32 of the task's sums]; one Zarr chunk per task; zeros = nothing done
    progress/zarr.json   attributes["progress"]: state, samples done, rate, ETA (for `farm status`)
    cancel/zarr.json     present once `farm cancel` asked the running driver to stop
    lease/               the driver's lease, one document per epoch (``farm.lease``)

Writes: only the driver writes, and a task's ``sums`` chunk is written before its ``records``
entry, so a record never points at data that is not there. Every chunk has one writer. A driver
holds the store's lease (``farm.lease``); with ``lease`` set, every write checks it first. On resume
each recorded task's sums are read back and checked against the CRC: a torn or corrupted chunk
is re-rendered. A frame's image is the sum of its chunks in chunk order, divided by the weights.

Reads: a store is checked when it is opened: metadata that does not parse (``zarr.json`` of the
group, ``sums`` or ``records``), attributes of the wrong shape, or arrays that do not match the
film and tiles are a ``StoreError`` before anything is written. A record that does not decode
counts as not done, like a task whose sums fail their CRC (``verified_records``). The progress
and cancel nodes are the driver's notes, not the job's data: unreadable, they are reported and
written afresh by the next run.
"""
import json
import time
import zlib

import numpy as np
import zarr

from farm.errors import FarmError, shown
from tracer.defaults import MAX_FILM_SIZE

__all__ = ["FrameStore", "StoreError", "FORMAT"]

FORMAT = "jaxfarm-frames/1"
# The group's only attribute while a store is being made (or replaced): not a store yet.
_INCOMPLETE = "jaxfarm-incomplete"
# All-zero (black) tiles must be written like any other: completion is checked by reading back.
zarr.config.set({"array.write_empty_chunks": True})


class StoreError(FarmError):
    exit_code = 3


# Nothing there: not a store (to create one, or to say so).
_ABSENT = (FileNotFoundError, NotADirectoryError, FileExistsError,  # a file where the store would be
           zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError, zarr.errors.ContainsArrayError)


def _why(error):
    """One line for an error zarr or fsspec raised (they raise many types for bad metadata or URLs)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _open_group(url, mode):
    """The Zarr group at ``url``, None where there is none, or a StoreError if it does not read."""
    try:
        return zarr.open_group(url, mode=mode)
    except _ABSENT:
        return None
    except Exception as e:  # JSON, UTF-8, zarr's metadata validation, fsspec protocols and I/O
        raise StoreError(f"{url}: cannot read the store (zarr.json: {_why(e)})") from None


def _node(group, name, url):
    """``group[name]``, or a StoreError naming the node's metadata that does not read."""
    try:
        return group[name]
    except KeyError as e:
        if e.args != (name,):  # a key missing from the node's metadata
            raise StoreError(f"{url}: damaged store: {name}/zarr.json does not read ({_why(e)})") from None
        raise StoreError(f"{url}: damaged store: '{name}' is missing") from None
    except Exception as e:
        raise StoreError(f"{url}: damaged store: {name}/zarr.json does not read ({_why(e)})") from None


def _layout(meta, url):
    """(width, height, tile) from the group's ``farm`` attributes, checked."""
    film, identity, spec = meta.get("film"), meta.get("identity"), meta.get("spec")
    if not (isinstance(identity, dict) and isinstance(spec, dict)):
        raise StoreError(f"{url}: damaged store: zarr.json has no job identity and spec")
    if not (isinstance(film, list) and len(film) == 2 and all(_whole(v, MAX_FILM_SIZE) for v in film)):
        raise StoreError(f"{url}: damaged store: zarr.json's film is {shown(film)}, not [WIDTH, HEIGHT]")
    if not _whole(identity.get("tile"), MAX_FILM_SIZE):
        raise StoreError(f"{url}: damaged store: zarr.json's tile is {shown(identity.get('tile'))}")
    return film[0], film[1], identity["tile"]


def _whole(value, high):
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high


def _has(group, name):
    """Whether ``group`` has a node ``name``, readable or not."""
    try:
        return name in group
    except Exception:  # there, but its metadata does not read
        return True


def _crc(block):
    return zlib.crc32(np.ascontiguousarray(block, np.float32).tobytes()) & 0xFFFFFFFF


class FrameStore:
    """Open with ``create`` or ``open``. Keys of tasks are (frame index, chunk, tile row, tile column)."""

    def __init__(self, group, url):
        self.group, self.url = group, url
        self.lease = None  # farm.lease.Lease of the driver that writes, checked before each write
        self.meta = group.attrs.get("farm")
        self.width, self.height, self.tile = _layout(self.meta, url)
        self.tiles_y, self.tiles_x = -(-self.height // self.tile), -(-self.width // self.tile)
        self.sums = _node(group, "sums", url)
        self.records = _node(group, "records", url)
        self._check_arrays()

    def _check_arrays(self):
        """The arrays are the film's, in its tiles, with as many frames and chunks as each other."""
        for name, array in (("sums", self.sums), ("records", self.records)):
            if not isinstance(array, zarr.Array) or array.ndim != 5:
                raise StoreError(f"{self.url}: damaged store: '{name}' is not a 5-dimensional array")
        frames, chunks = self.sums.shape[:2]
        want = {"sums": (np.float32, (frames, chunks, self.height, self.width, 4), (1, 1, self.tile, self.tile, 4)),
                "records": (np.uint32, (frames, chunks, self.tiles_y, self.tiles_x, 3), (1, 1, 1, 1, 3))}
        for name, array in (("sums", self.sums), ("records", self.records)):
            dtype, shape, chunk_shape = want[name]
            if array.dtype != dtype or array.shape != shape or array.chunks != chunk_shape or 0 in shape:
                raise StoreError(f"{self.url}: damaged store: '{name}' is {array.dtype} {array.shape} in chunks of "
                                 f"{array.chunks}, not {np.dtype(dtype)} {shape} in chunks of {chunk_shape}")

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def exists(cls, url):
        """Whether a frame store is at ``url`` (metadata there that does not read is a StoreError)."""
        group = _open_group(url, mode="r")
        return group is not None and "farm" in group.attrs

    @classmethod
    def create(cls, url, identity, spec_json, film, n_frames, n_chunks, over=None):
        """A new store; fails if ``url`` already holds anything. ``over``: the group of a store
        (``replaceable``) whose content the new one replaces (its lease stays)."""
        group = cls._new_group(url) if over is None else over
        if over is not None:  # not a store from here until its attributes are written: --replace again
            group.attrs.put({_INCOMPLETE: FORMAT})
            for name in ("sums", "records", "progress", "cancel"):
                if _has(group, name):
                    del group[name]
        width, height = film
        tile = identity["tile"]
        ty, tx = -(-height // tile), -(-width // tile)
        group.create_array("sums", shape=(n_frames, n_chunks, height, width, 4), chunks=(1, 1, tile, tile, 4),
                           dtype="float32", fill_value=0.0, dimension_names=["frame", "chunk", "y", "x", "channel"])
        group.create_array("records", shape=(n_frames, n_chunks, ty, tx, 3), chunks=(1, 1, 1, 1, 3),
                           dtype="uint32", fill_value=0, dimension_names=["frame", "chunk", "tile_y", "tile_x", "field"])
        group.create_group("progress")
        # Written last: a store without it is not a store (one cut short is made again by --replace).
        group.attrs.put({"farm": {"format": FORMAT, "identity": identity, "spec": spec_json, "film": [width, height]}})
        return cls(group, url)

    @staticmethod
    def _new_group(url):
        try:
            return zarr.open_group(url, mode="w-", attributes={_INCOMPLETE: FORMAT})
        except (FileExistsError, zarr.errors.ContainsGroupError, zarr.errors.ContainsArrayError):
            group = _open_group(url, mode="r")
            if group is not None and group.attrs.get(_INCOMPLETE) == FORMAT:
                raise StoreError(f"{url}: a store whose making was cut short; add --replace to make it again") from None
            raise StoreError(f"{url}: already exists and is not a frame store of this job") from None
        except (OSError, ValueError) as e:  # a file on the way, no permission, an unknown URL scheme
            raise StoreError(f"{url}: cannot make a store here ({_why(e)})") from None

    @classmethod
    def replaceable(cls, url):
        """The zarr group at ``url`` if it is a frame store (of any job, even damaged) or one whose
        making was cut short; None where nothing is there. Anything else is a StoreError: what
        the farm did not make is never replaced."""
        group = _open_group(url, mode="r+")
        if group is None:
            return None
        meta = group.attrs.get("farm")
        if (isinstance(meta, dict) and str(meta.get("format")).startswith("jaxfarm-frames/")
                or group.attrs.get(_INCOMPLETE) == FORMAT):
            return group
        raise StoreError(f"{url}: not a farm frame store; --replace replaces only frame stores (choose another --out)")

    @classmethod
    def open(cls, url, mode="r+"):
        """The store at ``url``, checked (see the module's docstring); opening writes nothing."""
        group = _open_group(url, mode)
        if group is None:
            raise StoreError(f"{url}: no frame store here")
        meta = group.attrs.get("farm")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise StoreError(f"{url}: not a farm frame store (no '{FORMAT}' attributes)")
        return cls(group, url)

    def check_identity(self, identity):
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
    def spec_json(self):
        return self.meta["spec"]

    @property
    def n_frames(self):
        return self.sums.shape[0]

    @property
    def n_chunks(self):
        return self.sums.shape[1]

    def set_spp(self, spec_json, n_chunks):
        """Raise the job's spp: more chunks (the driver alone calls this)."""
        self.grow(spec_json, self.meta["identity"], self.n_frames, n_chunks)

    def grow(self, spec_json, identity, n_frames, n_chunks):
        """Bind the store to a job with at least its frames and chunks: the arrays grow first
        (what is stored stays where it is), then the attributes (the driver alone calls this)."""
        self._check_lease()
        if n_frames > self.n_frames or n_chunks > self.n_chunks:
            f, c = max(n_frames, self.n_frames), max(n_chunks, self.n_chunks)
            self.sums.resize((f, c, self.height, self.width, 4))
            self.records.resize((f, c, self.tiles_y, self.tiles_x, 3))
        meta = dict(self.meta, spec=spec_json, identity=identity)
        self.group.attrs["farm"] = meta
        self.meta = meta

    def tile_box(self, ty, tx):
        y0, x0 = ty * self.tile, tx * self.tile
        return y0, min(y0 + self.tile, self.height), x0, min(x0 + self.tile, self.width)

    def tile_pixels(self, ty, tx):
        """Film pixels in the tile (edge tiles are cut by the film)."""
        y0, y1, x0, x1 = self.tile_box(ty, tx)
        return (y1 - y0) * (x1 - x0)

    # -- tasks -------------------------------------------------------------------------------

    def all_records(self):
        """(F, C, TY, TX, 3) uint32, as stored (a record that does not decode raises)."""
        return self.records[...]

    def read_records(self, n_chunks):
        """The records of the first ``n_chunks`` chunks, (F, n_chunks, TY, TX, 3) uint32, and the
        keys of those that do not decode (zeros here: not done)."""
        try:
            return self.records[:, :n_chunks], []
        except Exception:  # a chunk that does not decode: read them one by one
            pass
        records, bad = np.zeros((self.n_frames, n_chunks, self.tiles_y, self.tiles_x, 3), np.uint32), []
        for key in np.ndindex(records.shape[:4]):
            try:
                records[key] = self.records[key]
            except Exception:
                bad.append(key)
        return records, bad

    def verified_records(self, n_chunks):
        """``read_records``, less the tasks whose sums do not read back intact: (records with
        those zeroed, the sorted keys of every record that does not decode or fails its CRC).
        Reads every recorded task's sums: the whole store."""
        records, bad = self.read_records(n_chunks)
        for key in zip(*np.nonzero(records[..., 0])):
            key = tuple(int(k) for k in key)
            if not self.verify_task(key, records[key]):
                records[key] = 0
                bad.append(key)
        return records, sorted(bad)

    def read_task(self, key):
        """The task's (value (h, w, 3), weight (h, w)) as stored, cropped to the film."""
        f, c, ty, tx = key
        y0, y1, x0, x1 = self.tile_box(ty, tx)
        block = self.sums[f, c, y0:y1, x0:x1, :]
        return block[..., :3], block[..., 3]

    def verify_task(self, key, record):
        """Whether the task's sums read back intact (decodable, same CRC as recorded)."""
        f, c, ty, tx = key
        y0, y1, x0, x1 = self.tile_box(ty, tx)
        try:
            block = self.sums[f, c, y0:y1, x0:x1, :]
        except Exception:  # a chunk that does not decode
            return False
        return _crc(block) == int(record[2])

    def write_task(self, key, value, weight, passes_done, spp_cut):
        """Durably store a task's sums, then its record."""
        f, c, ty, tx = key
        y0, y1, x0, x1 = self.tile_box(ty, tx)
        h, w = y1 - y0, x1 - x0
        block = np.concatenate([value[:h, :w], weight[:h, :w, None]], axis=-1).astype(np.float32)
        self._check_lease()
        self.sums[f, c, y0:y1, x0:x1, :] = block
        self._check_lease()  # the commit: right before the record
        self.records[f, c, ty, tx, :] = np.array([passes_done, spp_cut, _crc(block)], np.uint32)

    def forget_task(self, key):
        f, c, ty, tx = key
        self._check_lease()
        self.records[f, c, ty, tx, :] = np.zeros(3, np.uint32)

    def forget_frames(self, frames):
        """Discard the data of frames (indexes): their records are zeroed, so they are rendered afresh."""
        for f in frames:
            self._check_lease()
            self.records[f] = 0

    def _check_lease(self):
        if self.lease is not None:
            self.lease.check()

    # -- frames ------------------------------------------------------------------------------

    def frame_sums(self, f, n_chunks, keep=None):
        """(value (H, W, 3), weight (H, W)): the frame's first ``n_chunks`` chunks added in chunk
        order; with ``keep`` ((n_chunks, TY, TX) bool), only those tasks' tiles (zeros elsewhere)."""
        total = np.zeros((self.height, self.width, 4), np.float32)
        for c in range(n_chunks):
            if keep is None or keep[c].all():
                total = total + self.sums[f, c]
                continue
            part = np.zeros_like(total)
            for ty, tx in zip(*np.nonzero(keep[c])):
                y0, y1, x0, x1 = self.tile_box(ty, tx)
                part[y0:y1, x0:x1] = self.sums[f, c, y0:y1, x0:x1]
            total = total + part
        return total[..., :3], total[..., 3]

    # -- progress and cancel -----------------------------------------------------------------

    def write_progress(self, **fields):
        self._check_lease()
        fields["updated"] = time.time()
        try:
            node = self.group["progress"]
        except Exception:  # missing, or its metadata does not read: the driver's notes, written afresh
            node = self.group.create_group("progress", overwrite=True)
        node.attrs["progress"] = fields

    def progress(self):
        """The last run's progress attributes ({} before any), or None where they do not read."""
        try:
            node = self.group["progress"]
        except KeyError:
            return {}
        except Exception:
            return None
        value = node.attrs.get("progress", {})
        return dict(value) if isinstance(value, dict) else None

    def request_cancel(self):
        if not _has(self.group, "cancel"):
            self.group.create_group("cancel")

    def cancel_requested(self):
        try:
            return _has(zarr.open_group(self.url, mode="r"), "cancel")
        except Exception:
            return False

    def clear_cancel(self):
        if _has(self.group, "cancel"):
            self._check_lease()
            del self.group["cancel"]  # by name: unreadable metadata there goes too


def _short(value):
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
