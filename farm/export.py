"""From a store to image files: each tile's folded sums plus its tail (``farm.tree``), resolved.

A frame is exported only when every tile of it holds the job's spp and reads back with its CRC
(``partial`` exports what the tiles hold). Pixel values come from ``tracer.reduction.resolve``, the same function that
``tracer.render`` ends with, so an exported npy or EXR frame has the bits of the tracer's own
render with the job's reduction tree (``frame_NNNN.npy``, ``.exr``: linear float32 (H, W, 3);
``.png``: tone-mapped to sRGB).
"""
import os

import numpy as np

from farm.errors import FarmError, SpecError
from farm.job import frame_status
from farm.store import FOLDED, TAIL_PASSES, StoreError
from tracer.reduction import resolve

__all__ = ["export_frames", "checkered", "NO_SAMPLES"]

NO_SAMPLES = (96, 136)  # the 8-bit greys of the checker shown where a tile has no samples yet
CHECKER = 8              # its squares' side in pixels


def export_frames(spec, store, frames, fmt, out, partial=False):
    """Write frames (numbers) of ``store`` (its job ``spec``, ``farm.job.open_store``) as
    frame_NNNN.<fmt> in ``out``. A frame with tiles that do not read back
    (``FrameStore.verified_records``) is not finished. ``partial`` exports what unfinished frames
    hold, never a frame with no samples (it is skipped); in a partial PNG the tiles without
    samples are a grey checker (``NO_SAMPLES``), in EXR and npy they are zeros.
    Returns [(frame, path or None where skipped, fraction of its samples done)]."""
    first, last = frames if frames else spec.frames
    if first < spec.frames[0] or last > spec.frames[1]:
        raise SpecError(f"--frames {first}-{last}: the job has frames {spec.frames[0]}-{spec.frames[1]}")
    records, damaged = store.verified_records()
    status = frame_status(store, spec, records)
    for frame in range(first, last + 1):
        f = frame - spec.frames[0]
        if status[f] < 1.0 and not partial:
            bad = sum(1 for key in damaged if key[0] == f)
            why = f" ({bad} tile(s) whose recorded data does not read back)" if bad else ""
            raise StoreError(f"frame {frame} is {100 * status[f]:.0f}% rendered{why}; finish it "
                             f"(farm resume {store.url}) or export with --partial")
    _make_folder(out)
    written = []
    for frame in range(first, last + 1):
        f = frame - spec.frames[0]
        if status[f] <= 0.0:
            written.append((frame, None, 0.0))
            continue
        path = os.path.join(out, f"frame_{frame:04d}.{fmt}")
        image = resolve(*store.frame_sums(f, records[f]))
        sampled = (records[f, ..., FOLDED] > 0) | (records[f, ..., TAIL_PASSES] > 0)
        _write(path, image, fmt, None if status[f] >= 1.0 else sampled, store.tile)
        written.append((frame, path, status[f]))
    return written


def checkered(pixels, sampled, tile):
    """8-bit ``pixels`` (H, W, 3) with the tiles where ``sampled`` (TY, TX) is False as a grey
    checker: what has no samples yet is never shown as black."""
    h, w = pixels.shape[:2]
    y, x = np.mgrid[:h, :w]
    checker = np.where((y // CHECKER + x // CHECKER) % 2 == 0, *NO_SAMPLES).astype(np.uint8)
    empty = np.repeat(np.repeat(~sampled, tile, axis=0), tile, axis=1)[:h, :w]
    pixels = pixels.copy()
    pixels[empty] = checker[empty, None]
    return pixels


def _make_folder(out):
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise FarmError(f"--out {out}: cannot make the folder: {e.strerror or e}") from None


def _write(path, image, fmt, sampled=None, tile=None):
    from PIL import Image

    from tracer.io.images import srgb8, write_exr
    try:
        if fmt == "npy":
            np.save(path, image)
        elif fmt == "exr":
            write_exr(path, image)
        else:
            pixels = srgb8(image)
            Image.fromarray(pixels if sampled is None else checkered(pixels, sampled, tile)).save(path)
    except (OSError, RuntimeError) as e:  # OpenEXR raises RuntimeError
        text = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FarmError(f"{path}: cannot write: {text}") from None
