"""An inverse-rendering job's targets: a reference image a frame (``[optimize] targets``), read
on the driver and checked against the film before anything runs.

EXR (and the other float formats ``tracer.io.images`` reads) are linear RGB as stored; PNG and
other 8/16-bit images are decoded from sRGB; ``.npy`` holds linear (H, W, 3) (or (H, W) gray)
values. Gray images stand for RGB. A target must be finite: a NaN would make every gradient NaN.
"""
from __future__ import annotations

import os

import numpy as np

from farm.errors import FarmError, SpecError
from farm.optimize_spec import OptimizeSpec
from farm.spec import JobSpec
from tracer.errors import SceneError

__all__ = ["load_targets", "load_target"]


def load_target(path: str) -> np.ndarray:
    """The image at ``path`` as (H, W, 3) float32 linear RGB; a FarmError naming the file where it
    is missing or does not read."""
    if not os.path.isfile(path):
        raise FarmError(f"optimize.targets: {path}: no such file")
    if path.lower().endswith(".npy"):
        try:
            image = np.load(path, allow_pickle=False)
        except Exception as e:
            raise FarmError(f"optimize.targets: {path}: not a .npy array ({type(e).__name__}: {e})") from None
        if image.ndim == 2:
            image = image[..., None]
        if image.ndim != 3 or image.shape[2] not in (1, 3) or not np.issubdtype(image.dtype, np.number):
            raise FarmError(f"optimize.targets: {path}: an array of {image.dtype} {image.shape}, not (H, W, 3) numbers")
    else:
        from tracer.io.images import load_image
        try:
            image = load_image(path)
        except SceneError as e:
            raise FarmError(f"optimize.targets: {e}") from None
    image = np.ascontiguousarray(np.broadcast_to(np.asarray(image, np.float32), (*image.shape[:2], 3)))
    if not np.isfinite(image).all():
        raise FarmError(f"optimize.targets: {path}: holds NaN or infinite values")
    return image


def load_targets(opt: OptimizeSpec, spec: JobSpec, film: tuple[int, int]) -> list[np.ndarray]:
    """Every frame's target, in frame order, each of the film's size ``film`` (width, height)."""
    out = []
    for frame in range(spec.frames[0], spec.frames[1] + 1):
        path = opt.target(frame)
        image = load_target(path)
        if image.shape[:2] != (film[1], film[0]):
            raise SpecError(f"optimize.targets: {path} is {image.shape[1]}x{image.shape[0]}, the film "
                            f"{film[0]}x{film[1]}")
        out.append(image)
    return out
