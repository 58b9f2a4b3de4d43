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
from farm.store import StoreError
from tracer.reduction import resolve

__all__ = ["export_frames"]


def export_frames(spec, store, frames, fmt, out, partial=False):
    """Write frames (numbers) of ``store`` (its job ``spec``, ``farm.job.open_store``) as
    frame_NNNN.<fmt> in ``out``; returns the paths. A frame with tasks that do not read back
    (``FrameStore.verified_records``) is not finished; ``partial`` exports what its tiles hold."""
    first, last = frames if frames else spec.frames
    if first < spec.frames[0] or last > spec.frames[1]:
        raise SpecError(f"--frames {first}-{last}: the job has frames {spec.frames[0]}-{spec.frames[1]}")
    records, damaged = store.verified_records()
    status = frame_status(store, spec, records)
    for frame in range(first, last + 1):
        f = frame - spec.frames[0]
        if status[f] < 1.0 and not partial:
            bad = sum(1 for key in damaged if key[0] == f)
            why = f" ({bad} recorded task(s) do not read back)" if bad else ""
            raise StoreError(f"frame {frame} is {100 * status[f]:.0f}% rendered{why}; finish it "
                             f"(farm resume {store.url}) or export with --partial")
    _make_folder(out)
    paths = []
    for frame in range(first, last + 1):
        f = frame - spec.frames[0]
        path = os.path.join(out, f"frame_{frame:04d}.{fmt}")
        _write(path, resolve(*store.frame_sums(f, records[f])), fmt)
        paths.append(path)
    return paths


def _make_folder(out):
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise FarmError(f"--out {out}: cannot make the folder: {e.strerror or e}") from None


def _write(path, image, fmt):
    from tracer.io.images import write_exr, write_png
    try:
        if fmt == "npy":
            np.save(path, image)
        elif fmt == "exr":
            write_exr(path, image)
        else:
            write_png(path, image)
    except (OSError, RuntimeError) as e:  # OpenEXR raises RuntimeError
        text = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FarmError(f"{path}: cannot write: {text}") from None
