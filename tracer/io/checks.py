"""Numbers no scene can mean, refused by name (host only: numpy). Mitsuba renders most of these
as nothing, as a flat or black image, or as infinities; the loader refuses them instead.

- A ``to_world`` must be finite and affine (last row 0, 0, 0, 1), its linear part invertible:
  Mitsuba draws a zero-scale shape as nothing (an area light on one is an error there), and
  transforms its normals by the infinite inverse; a zero scale here is a mistake, so refused.
- World-space coordinates (shapes, the camera) are at most ``MAX_COORDINATE`` in magnitude:
  intersections take products of three coordinates in float32, which overflow past about 7e12;
  past 1e30 Mitsuba, in float32 too, draws nothing.
- Radiance (emitters, environment map texels after ``scale``) and texture texels are finite,
  non-negative and at most ``MAX_RADIANCE``: a film pixel sums up to 2^30 samples of radiance
  times reflectance in float32 (3.4e38 at most), so 3e38 texels made infinite pixels.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from tracer.errors import SceneError

if TYPE_CHECKING:
    from tracer.io.plugin_node import PluginNode

__all__ = ["MAX_COORDINATE", "MAX_RADIANCE", "SINGULAR", "checked_to_world", "check_extent", "check_radiance",
           "check_texels"]

MAX_COORDINATE = 1e12
MAX_RADIANCE = 1e12
# A linear part whose smallest singular value is below this fraction of its largest is singular:
# below float32's resolution a shape is flat and its normals are not defined.
SINGULAR = 2.0**-24


def checked_to_world(node: PluginNode, what: str, name: str = "to_world", singular: float = SINGULAR) -> np.ndarray:
    """``node``'s transform ``name`` (4, 4) float64, checked; ``what`` names the plugin in the message."""
    m = node.get_transform(name)
    where = f"{node.source}: {what}: {name}"
    if not np.all(np.isfinite(m)):
        raise SceneError(f"{where} is not finite")
    if not np.array_equal(m[3], [0.0, 0.0, 0.0, 1.0]):
        raise SceneError(f"{where} is not affine (its last row is {m[3].tolist()})")
    s = np.linalg.svd(m[:3, :3], compute_uv=False)
    if not s[-1] > s[0] * singular:
        raise SceneError(f"{where} is singular (a zero scale?): singular values {s.tolist()}")
    if np.max(np.abs(m[:3])) > MAX_COORDINATE:
        raise SceneError(f"{where} has an entry past {MAX_COORDINATE:g} (float32 arithmetic overflows)")
    return m


def check_extent(node: PluginNode, what: str, points: ArrayLike) -> None:
    """Refuse world-space ``points`` (N, 3) of a shape that are not finite or lie past ``MAX_COORDINATE``."""
    points = np.asarray(points)
    if not np.all(np.isfinite(points)):
        raise SceneError(f"{node.source}: {what}: its world-space positions are not finite")
    largest = float(np.max(np.abs(points), initial=0.0))
    if largest > MAX_COORDINATE:
        raise SceneError(f"{node.source}: {what}: a world-space coordinate of {largest:g} is past "
                         f"{MAX_COORDINATE:g} (float32 arithmetic overflows)")


def check_radiance(node: PluginNode, name: str, value: ArrayLike) -> np.ndarray:
    """Refuse a radiance (or intensity, irradiance) ``value`` that is not finite, negative or past
    ``MAX_RADIANCE``; returns it."""
    value = np.asarray(value)
    if not (np.all(np.isfinite(value)) and np.all(value >= 0) and np.all(value <= MAX_RADIANCE)):
        shown = np.round(value, 6).tolist() if value.size <= 3 else f"values in [{value.min():g}, {value.max():g}]"
        raise SceneError(f"{node.describe()}: '{name}' must be finite, non-negative and at most {MAX_RADIANCE:g}, "
                         f"got {shown}", node.source)
    return value


def check_texels(node: PluginNode, path: str, image: ArrayLike, scale: float = 1.0) -> None:
    """Refuse an image (``path``, its texels times ``scale``) with a texel that is not finite,
    negative or past ``MAX_RADIANCE``, naming the first such texel."""
    image = np.asarray(image)
    scaled = image.astype(np.float64) * scale
    bad = ~np.isfinite(scaled) | (scaled < 0) | (scaled > MAX_RADIANCE)
    if np.any(bad):
        y, x = np.unravel_index(np.argmax(bad.reshape(bad.shape[0], bad.shape[1], -1).any(axis=2)), bad.shape[:2])
        times = f" times 'scale' {scale:g}" if scale != 1.0 else ""
        raise SceneError(f"{node.describe()}: '{path}' has texel (x={x}, y={y}) = {image[y, x].tolist()}{times}; "
                         f"texels must be finite, non-negative and at most {MAX_RADIANCE:g}", node.source)
