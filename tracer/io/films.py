"""A sensor's film, read without JAX: its size and reconstruction filter.

The reconstruction filter's parameters must lie within ``tracer.filters``' limits (radius at
most 8 pixels); a violation is a one-line ``SceneError`` naming the file, line and parameter.
"""
import dataclasses

from tracer import filters
from tracer.io.errors import SceneError

__all__ = ["FilmSpec", "read_film", "DEFAULT_SIZE"]

DEFAULT_SIZE = (768, 576)  # Mitsuba's hdrfilm default
# Film parameters that change nothing we render (output formats, borders).
HARMLESS = ("pixel_format", "component_format", "file_format", "banner", "sample_border", "compensate")
CROP = ("crop_offset_x", "crop_offset_y", "crop_width", "crop_height")


@dataclasses.dataclass(frozen=True)
class FilmSpec:
    width: int                 # the whole film, pixels
    height: int
    rfilter: filters.Filter


def read_film(sensor, resolution=None):
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
    if width < 1 or height < 1:
        raise SceneError(f"{where}: {what} size must be positive, got {width}x{height}")
    if node is None:
        return FilmSpec(width, height, filters.make_filter("gaussian"))
    for name in CROP:
        if node.has(name):
            raise SceneError(f"{node.source}: film cropping ('{name}') is not supported")
    rfilter = _rfilter(node)
    node.mark_used(*HARMLESS)
    node.check_unused()
    return FilmSpec(width, height, rfilter)


def _rfilter(film):
    nodes = film.children_of("rfilter")
    if len(nodes) > 1:
        raise SceneError(f"{nodes[1].source}: more than one <rfilter> in the film")
    if not nodes:
        return filters.make_filter("gaussian")
    node = nodes[0]
    readers = {"tent": [("radius", node.get_float)], "gaussian": [("stddev", node.get_float)],
               "mitchell": [("B", node.get_float), ("C", node.get_float)], "lanczos": [("lobes", node.get_int)],
               "box": [], "catmullrom": []}
    if node.type not in readers:
        raise SceneError(f"{node.source}: unsupported rfilter '{node.type}' ({', '.join(filters.NAMES)})")
    params = {name: read(name) for name, read in readers[node.type] if node.has(name)}
    node.check_unused()
    try:
        return filters.make_filter(node.type, **params)
    except ValueError as e:
        raise SceneError(f"{node.source}: rfilter '{node.type}': {e}") from None
