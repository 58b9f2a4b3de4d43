"""Mitsuba 3 ``<sensor>`` -> (``Camera``, ``Film``, samples per pixel).

Sensors: ``perspective`` and ``thinlens`` (``fov`` and ``fov_axis``, or ``focal_length``;
``aperture_radius``, ``focus_distance``) and ``orthographic`` (its view scaled by ``to_world``); all take
``to_world``, ``near_clip`` and ``far_clip``. The film is read by ``tracer.io.films``.

A camera that no scene can mean is refused, with file, line and parameter, instead of rendering
a flat or black image (limits, each as Mitsuba's own checks where it has them):

- ``to_world``: finite and affine, its linear part invertible (a zero scale is not a camera), its
  entries at most ``tracer.io.checks.MAX_COORDINATE`` (``checked_to_world``);
- ``fov``: finite, strictly between 0 and 180 degrees (along its ``fov_axis``);
- ``near_clip``, ``far_clip``: finite, 0 < near_clip < far_clip (Mitsuba's ProjectiveCamera);
- ``aperture_radius``: finite, >= 0; ``focus_distance``: finite, > 0.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tracer import camera as cameras
from tracer import film as films
from tracer.io.checks import checked_to_world
from tracer.errors import SceneError
from tracer.io.films import read_film
from tracer.io.scene_info import sample_count

if TYPE_CHECKING:
    from tracer.io.plugin_node import PluginNode

__all__ = ["load_sensor", "field_of_view"]

SENSORS = ("perspective", "thinlens", "orthographic")
# Sensor parameters that change nothing we render (shutter times without motion, spectral
# response in an RGB renderer, a perspective camera's focus distance); samplers: scene_info.
HARMLESS = ("shutter_open", "shutter_close", "srf", "focus_distance")
# A 35 mm film's diagonal (mm): Mitsuba's 'focal_length' is a full-frame lens.
FULL_FRAME_DIAGONAL = (36.0 ** 2 + 24.0 ** 2) ** 0.5
# The linear part of to_world is singular when its smallest singular value is below this
# fraction of its largest: float32 directions would no longer resolve the view.
SINGULAR = 2.0**-20


def load_sensor(node: PluginNode, resolution: tuple[int, int] | None = None) -> tuple[cameras.Camera, films.Film, int]:
    """(Camera, Film, spp) of a sensor ``PluginNode``; ``resolution`` (width, height) overrides the film's."""
    if node.type not in SENSORS:
        raise SceneError(f"{node.source}: unsupported sensor '{node.type}' ({', '.join(SENSORS)})")
    spec = read_film(node, resolution)
    film = films.make_film(spec.width, spec.height, spec.rfilter, crop=spec.crop)
    spp = sample_count(node)
    to_world = checked_to_world(node, f"sensor '{node.type}'", singular=SINGULAR)
    near, far = _clip(node)
    if node.type == "orthographic":
        camera = cameras.make_orthographic(to_world, spec.width, spec.height, near_clip=near, far_clip=far)
    else:
        camera = cameras.make_camera(to_world, _x_fov(node, spec.width, spec.height), spec.width, spec.height,
                                     near_clip=near, far_clip=far, **_lens(node))
    node.mark_used(*(name for name in HARMLESS if node.has(name)))
    node.check_unused()
    return camera, film, spp


def _finite(node, name, default, ok, requirement):
    value = node.get_float(name, default)
    if not (math.isfinite(value) and ok(value)):
        raise SceneError(f"{node.source}: sensor '{node.type}': '{name}' must be {requirement}, got {value}")
    return value


def _clip(node):
    near = _finite(node, "near_clip", 1e-2, lambda v: v > 0, "a finite number > 0")
    far = _finite(node, "far_clip", 1e4, lambda v: v > near, f"a finite number > near_clip ({near})")
    return near, far


def _x_fov(node, width, height):
    fov, fov_axis = field_of_view(node)
    if not (math.isfinite(fov) and 0 < fov < 180):
        raise SceneError(f"{node.source}: sensor '{node.type}': 'fov' must be in degrees, strictly between 0 and 180, "
                         f"got {fov}")
    try:
        x_fov = cameras.x_fov_from(fov, fov_axis, width, height)
    except ValueError as e:
        raise SceneError(f"{node.source}: {e}") from None
    if not 0 < x_fov < 180:
        raise SceneError(f"{node.source}: the horizontal field of view must be in (0, 180) degrees, got {x_fov:g}")
    return x_fov


def field_of_view(node: PluginNode) -> tuple[float, str]:
    """(fov in degrees, fov_axis) of a sensor, as Mitsuba's ``parse_fov``: ``fov`` along
    ``fov_axis``, or else a full-frame lens of ``focal_length`` (default "50mm") on the diagonal."""
    if node.has("fov") and node.has("focal_length"):
        raise SceneError(f"{node.source}: give either fov or focal_length, not both")
    if node.has("fov"):
        return node.get_float("fov"), node.get_string("fov_axis", "x").lower()
    try:
        text = node.get_string("focal_length", "50mm").strip()
    except SceneError:
        text = str(node.get_float("focal_length"))
    try:
        focal = float(text[:-2] if text.endswith("mm") else text)
    except ValueError:
        focal = float("nan")
    if not (focal > 0 and math.isfinite(focal)):
        raise SceneError(f"{node.source}: could not parse the focal length '{text[:40]}' (expected <x>mm, x > 0)")
    return math.degrees(2.0 * math.atan(FULL_FRAME_DIAGONAL / (2.0 * focal))), "diagonal"


def _lens(node):
    if node.type != "thinlens":
        return {}
    return dict(aperture_radius=_finite(node, "aperture_radius", 0.03, lambda v: v >= 0, "a finite number >= 0"),
                focus_distance=_finite(node, "focus_distance", 0.0, lambda v: v > 0, "a finite number > 0"),
                thin_lens=True)


