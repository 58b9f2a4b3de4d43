"""The last step of every reduction tree: pixel values from a tile's or a frame's sums.

A film accumulates, per pixel, the sum of filter-weighted radiance ``sum(f L)`` and the sum of
filter weights ``sum(f)`` (Mitsuba's ``ImageBlock``); the pixel's value is their ratio, as
Mitsuba's film develops it (negative-lobed filters, mitchell and lanczos, can make the sum of
weights negative: Mitsuba divides by any non-zero sum). ``tracer.render`` resolves each tile of
its image with it, and the farm's export each frame of a store: numpy only (no JAX), so that
``farm`` can import it.
"""
import numpy as np

__all__ = ["resolve"]


def resolve(value, weight):
    """Pixel values from accumulated sums (numpy): sum(f L) / sum(f), zero where sum(f) is zero.

    value: (..., 3) float32, weight: (...) float32. Returns (..., 3) float32.
    """
    safe = np.where(weight != 0, weight, 1.0)
    return np.where(weight[..., None] != 0, value / safe[..., None], 0.0).astype(np.float32)
