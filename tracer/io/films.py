"""A sensor's film, read without JAX: its size, crop window and reconstruction filter.

The loader and the farm (``farm.spec.film_size``: a store holds frames of the crop window's
size) both read the film through ``read_film``, so they agree on it and on its limits:

- width and height: whole numbers in [1, ``MAX_FILM_SIZE``] (16384), whether the scene gives
  them or a resolution override does;
- the crop window (``crop_offset_x``, ``crop_offset_y``, ``crop_width``, ``crop_height``) lies
  inside the film, as Mitsuba's ``Film::set_crop_window`` requires; a resolution override
  replaces the film, window included, as Mitsuba's ``Film::set_size`` does;
- the reconstruction filter's parameters lie within ``tracer.filters``' limits (radius at most
  8 pixels).

Every violation is a one-line ``SceneError`` naming the file, line and parameter.
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import TYPE_CHECKING

from tracer import filters
from tracer.shared import FILTERS, MAX_FILM_SIZE
from tracer.errors import SceneError

if TYPE_CHECKING:
    from tracer.io.plugin_node import PluginNode

__all__ = ["FilmSpec", "read_film", "DEFAULT_SIZE"]

DEFAULT_SIZE = (768, 576)  # Mitsuba's hdrfilm default
# Film parameters that change nothing we render (output formats; see tracer.film on borders).
HARMLESS = ("pixel_format", "component_format", "file_format", "banner", "sample_border", "compensate")
CROP = ("crop_offset_x", "crop_offset_y", "crop_width", "crop_height")


@dataclasses.dataclass(frozen=True)
class FilmSpec:
    width: int                 # the whole film, pixels
    height: int
    crop: tuple                # (x, y, width, height): the window rendered, in film pixels
    rfilter: filters.Filter
    rfilter_name: str = "gaussian"  # the filter's type, as the scene names it

    @property
    def image_size(self) -> tuple[int, int]:
        """(width, height) of the rendered image: the crop window's."""
        return self.crop[2], self.crop[3]


def read_film(sensor: PluginNode, resolution: tuple[int, int] | None = None) -> FilmSpec:
    """The ``FilmSpec`` of a sensor ``PluginNode``; ``resolution`` (width, height) overrides its size."""
    nodes = sensor.children_of("film")
    if len(nodes) > 1:
        raise SceneError(f"{nodes[1].source}: more than one <film> in sensor '{sensor.type}'")
    node = nodes[0] if nodes else None
    if node is not None and node.type != "hdrfilm":
        raise SceneError(f"{node.source}: unsupported film '{node.type}' (only hdrfilm)")
    width, height = DEFAULT_SIZE
    if node is not None:
        width, height = node.get_int("width", width), node.get_int("height", height)
    where, what = (node or sensor).source, "film"
    if resolution:
        (width, height), where, what = resolution, sensor.source, "resolution override"
    for name, value in (("width", width), ("height", height)):
        if not (isinstance(value, numbers.Integral) and 1 <= value <= MAX_FILM_SIZE):
            raise SceneError(f"{where}: {what} {name} must be between 1 and {MAX_FILM_SIZE} pixels, got {value!r}")
    if node is None:
        return FilmSpec(width, height, (0, 0, width, height), filters.make_filter("gaussian"))
    if resolution:
        node.mark_used(*CROP)
        crop = (0, 0, width, height)
    else:
        crop = _crop(node, width, height)
    rfilter = _rfilter(node)
    node.mark_used(*HARMLESS)
    node.check_unused()
    return FilmSpec(width, height, crop, *rfilter)


def _crop(node, width, height):
    """Mitsuba's crop window: the whole film unless given (a width or height left out is the film's)."""
    x, y = node.get_int("crop_offset_x", 0), node.get_int("crop_offset_y", 0)
    w, h = node.get_int("crop_width", width), node.get_int("crop_height", height)
    if x < 0 or y < 0 or w < 1 or h < 1 or x + w > width or y + h > height:
        raise SceneError(f"{node.source}: the crop window (crop_offset_x={x}, crop_offset_y={y}, crop_width={w}, "
                         f"crop_height={h}) must lie inside the {width}x{height} film")
    return x, y, w, h


def _rfilter(film):
    nodes = film.children_of("rfilter")
    if len(nodes) > 1:
        raise SceneError(f"{nodes[1].source}: more than one <rfilter> in the film")
    if not nodes:
        return filters.make_filter("gaussian"), "gaussian"
    node = nodes[0]
    readers = {"tent": [("radius", node.get_float)], "gaussian": [("stddev", node.get_float)],
               "mitchell": [("B", node.get_float), ("C", node.get_float)], "lanczos": [("lobes", node.get_int)],
               "box": [], "catmullrom": []}
    if node.type not in readers:
        raise SceneError(f"{node.source}: unsupported rfilter '{node.type}' ({', '.join(FILTERS)})")
    params = {name: read(name) for name, read in readers[node.type] if node.has(name)}
    node.check_unused()
    try:
        return filters.make_filter(node.type, **params), node.type
    except ValueError as e:
        raise SceneError(f"{node.source}: rfilter '{node.type}': {e}") from None
