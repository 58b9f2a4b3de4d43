"""The Zarr v3 frame store: a job's single source of truth.

Layout (one Zarr group; F frames, C chunks of samples, H x W pixels, TY x TX tiles)::

    zarr.json            attributes["farm"]: format, job identity, spec, film size, tiling
    sums/                float32 (F, C, H, W, 4): per chunk of passes, the sums of filter-weighted
                         RGB radiance and of filter weights; one Zarr chunk per (frame, chunk, tile)
    records/             uint32 (F, C, TY, TX, 3): per task [passes done, spp they were cut at,
                         CRC-32 of the task's sums]; one Zarr chunk per task; zeros = nothing done
    progress/zarr.json   attributes["progress"]: state, samples done, rate, ETA (for `farm status`)
    cancel/zarr.json     present once `farm cancel` asked the running driver to stop

Writes: only the driver writes, and a task's ``sums`` chunk is written before its ``records``
entry, so a record never points at data that is not there. Every chunk has one writer. On resume
each recorded task's sums are read back and checked against the CRC: a torn or corrupted chunk
is re-rendered. A frame's image is the sum of its chunks in chunk order, divided by the weights.
"""
import json
import time
import zlib

import numpy as np
import zarr

from farm.errors import FarmError

__all__ = ["FrameStore", "StoreError", "FORMAT"]

FORMAT = "jaxfarm-frames/1"
# All-zero (black) tiles must be written like any other: completion is checked by reading back.
zarr.config.set({"array.write_empty_chunks": True})


class StoreError(FarmError):
    exit_code = 3


def _crc(block):
    return zlib.crc32(np.ascontiguousarray(block, np.float32).tobytes()) & 0xFFFFFFFF


class FrameStore:
    """Open with ``create`` or ``open``. Keys of tasks are (frame index, chunk, tile row, tile column)."""

    def __init__(self, group, url):
        self.group, self.url = group, url
        meta = group.attrs.get("farm")
        self.meta = meta
        self.width, self.height = meta["film"]
        self.tile = meta["identity"]["tile"]
        self.tiles_y, self.tiles_x = -(-self.height // self.tile), -(-self.width // self.tile)
        self.sums = group["sums"]
        self.records = group["records"]

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def exists(cls, url):
        try:
            group = zarr.open_group(url, mode="r")
        except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError):
            return False
        return "farm" in group.attrs

    @classmethod
    def create(cls, url, identity, spec_json, film, n_frames, n_chunks):
        """A new store; fails if ``url`` already holds anything."""
        try:
            group = zarr.open_group(url, mode="w-")
        except (FileExistsError, zarr.errors.ContainsGroupError, zarr.errors.ContainsArrayError):
            raise StoreError(f"{url}: already exists and is not a frame store of this job") from None
        width, height = film
        tile = identity["tile"]
        ty, tx = -(-height // tile), -(-width // tile)
        group.create_array("sums", shape=(n_frames, n_chunks, height, width, 4), chunks=(1, 1, tile, tile, 4),
                           dtype="float32", fill_value=0.0, dimension_names=["frame", "chunk", "y", "x", "channel"])
        group.create_array("records", shape=(n_frames, n_chunks, ty, tx, 3), chunks=(1, 1, 1, 1, 3),
                           dtype="uint32", fill_value=0, dimension_names=["frame", "chunk", "tile_y", "tile_x", "field"])
        group.create_group("progress")
        # Written last: a store without it is not a store (a creation cut short is retried).
        group.attrs["farm"] = {"format": FORMAT, "identity": identity, "spec": spec_json, "film": [width, height]}
        return cls(group, url)

    @classmethod
    def open(cls, url, mode="r+"):
        try:
            group = zarr.open_group(url, mode=mode)
        except (FileNotFoundError, zarr.errors.GroupNotFoundError, zarr.errors.NodeTypeValidationError):
            raise StoreError(f"{url}: no frame store here") from None
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
                                 f"(store: {_short(mine.get(key))}, job: {_short(identity.get(key))})")

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
        if n_chunks > self.n_chunks:
            f, _, h, w, c = self.sums.shape
            self.sums.resize((f, n_chunks, h, w, c))
            self.records.resize((self.n_frames, n_chunks, self.tiles_y, self.tiles_x, 3))
        meta = dict(self.meta, spec=spec_json)
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
        """(F, C, TY, TX, 3) uint32."""
        return self.records[...]

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
        self.sums[f, c, y0:y1, x0:x1, :] = block
        self.records[f, c, ty, tx, :] = np.array([passes_done, spp_cut, _crc(block)], np.uint32)

    def forget_task(self, key):
        f, c, ty, tx = key
        self.records[f, c, ty, tx, :] = np.zeros(3, np.uint32)

    # -- frames ------------------------------------------------------------------------------

    def frame_sums(self, f, n_chunks=None):
        """(value (H, W, 3), weight (H, W)): the frame's chunks added in chunk order."""
        n = self.n_chunks if n_chunks is None else n_chunks
        total = np.zeros((self.height, self.width, 4), np.float32)
        for c in range(n):
            total = total + self.sums[f, c]
        return total[..., :3], total[..., 3]

    # -- progress and cancel -----------------------------------------------------------------

    def write_progress(self, **fields):
        fields["updated"] = time.time()
        self.group["progress"].attrs["progress"] = fields

    def progress(self):
        return dict(self.group["progress"].attrs.get("progress", {}))

    def request_cancel(self):
        if "cancel" not in self.group:
            self.group.create_group("cancel")

    def cancel_requested(self):
        try:
            return "cancel" in zarr.open_group(self.url, mode="r")
        except Exception:
            return False

    def clear_cancel(self):
        if "cancel" in self.group:
            del self.group["cancel"]


def _short(value):
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
