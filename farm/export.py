"""From a store to image files: each frame's chunk sums added in chunk order, then resolved.

A frame is exported only when every task of it is recorded at the job's spp (``partial`` exports
what there is). Pixel values come from ``tracer.reduction.resolve``, the same function that
``tracer.render`` ends with, so an exported npy or EXR frame has the bits of the tracer's own
render with the job's reduction tree (``frame_NNNN.npy``, ``.exr``: linear float32 (H, W, 3);
``.png``: tone-mapped to sRGB).
"""
import os

import numpy as np

from farm.errors import SpecError
from farm.job import frame_status
from farm.spec import JobSpec
from farm.store import StoreError
from tracer.reduction import resolve

__all__ = ["export_frames"]


def export_frames(store, frames, fmt, out, partial=False):
    """Write frames (numbers) of ``store`` as frame_NNNN.<fmt> in ``out``; returns the paths."""
    from tracer.io.images import write_exr, write_png

    spec = JobSpec.from_json(store.spec_json)
    first, last = frames if frames else spec.frames
    if first < spec.frames[0] or last > spec.frames[1]:
        raise SpecError(f"--frames {first}-{last}: the job has frames {spec.frames[0]}-{spec.frames[1]}")
    status = frame_status(store)
    os.makedirs(out, exist_ok=True)
    paths = []
    for frame in range(first, last + 1):
        f = frame - spec.frames[0]
        if status[f] < 1.0 and not partial:
            raise StoreError(f"frame {frame} is {100 * status[f]:.0f}% rendered; finish it (farm resume) "
                             f"or export with --partial")
        image = resolve(*store.frame_sums(f))
        path = os.path.join(out, f"frame_{frame:04d}.{fmt}")
        if fmt == "npy":
            np.save(path, image)
        elif fmt == "exr":
            write_exr(path, image)
        else:
            write_png(path, image)
        paths.append(path)
    return paths
