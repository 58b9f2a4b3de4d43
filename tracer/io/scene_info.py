"""What a scene is, without building it (host only: no JAX): film size, samples per pixel, its
``<default>`` parameters and every file it reads.

``describe(path, **params)`` is what the farm's driver knows of a scene; the loader takes the
film size and the sample count from the same functions (``film_size``, ``sample_count``), so
Mitsuba's defaults live here once: an ``hdrfilm`` of 768x576 and an ``independent`` sampler
of 4 samples per pixel.
"""
import dataclasses
import math
import os

import numpy as np

from tracer.io.aovs import integrator_aovs
from tracer.io import overrides
from tracer.errors import SceneError
from tracer.io.films import read_film
from tracer.io.plugin_node import PluginNode
from tracer.io.xml import parse_file

__all__ = ["SceneInfo", "SceneFile", "describe", "scene_aovs", "the_sensor", "film_size", "sample_count", "sampler_type",
           "DEFAULT_SPP", "SAMPLERS", "RENDERED_WITH"]

DEFAULT_SPP = 4                 # Mitsuba's default sampler
# Mitsuba's samplers, and ours that renders each (tracer.rng.SAMPLERS). Their sample counts are
# taken as Mitsuba rounds them (``mitsuba_sample_count``); their patterns are not: Mitsuba's
# stratified, multijitter, orthogonal and ldsampler lay out the whole sample count at once, and a
# farm job's sample i must not depend on it (refining 32 spp to 64 continues the first 32), so
# all four render with our progressive Owen-scrambled Sobol sequence.
RENDERED_WITH = {"independent": "independent", "stratified": "sobol", "multijitter": "sobol", "orthogonal": "sobol",
                 "ldsampler": "sobol"}
SAMPLERS = tuple(RENDERED_WITH)
# Sampler parameters that change nothing in our image: the seed (ours comes from the job) and
# the stratification of the other samplers.
SAMPLER_HARMLESS = ("seed", "jitter", "strength", "scramble", "samples_per_pass")


@dataclasses.dataclass(frozen=True)
class SceneFile:
    """A file the scene reads."""

    kind: str       # 'xml' (the scene or an <include>), 'spectrum', 'resource' (mesh, image, ...)
    name: str       # as written in the scene, after $ substitution
    path: str       # absolute, resolved as the loader resolves it
    where: str      # "file:line" of the tag that names it
    varies: bool    # its name (or a <path> folder) comes from a $parameter: other values, other files


@dataclasses.dataclass(frozen=True)
class SceneInfo:
    """What the farm needs of a scene (see ``describe``)."""

    film_size: tuple    # (width, height) of its film
    spp: int            # samples per pixel its sampler takes
    defaults: dict      # <default> name -> value as written (the first of each name)
    files: tuple        # SceneFile: the top XML first, then in document order (see files_of)
    aovs: tuple = ()    # its ``aov`` integrator's (name, type) pairs (tracer.io.aovs): channels after RGB
    rfilter: str = "gaussian"  # its film's reconstruction filter (tracer.shared.FILTERS)


def describe(path: str | os.PathLike[str], aovs: str | None = None, rfilter: str | None = None,
             **params: object) -> SceneInfo:
    """Film size, samples per pixel, ``<default>``s and files of the scene at ``path``, with
    ``params`` set and the job's ``aovs`` and ``rfilter`` applied as ``load_scene`` does. Raises
    ``SceneError`` for a scene that does not parse, has no single sensor, or names a file that
    does not exist."""
    root = overrides.apply(parse_file(path, **params), aovs, rfilter)
    sensor = the_sensor(root)
    film = read_film(sensor)
    return SceneInfo(film_size=film.image_size, spp=sample_count(sensor), defaults=dict(root.defaults),
                     files=files_of(root), aovs=scene_aovs(root), rfilter=film.rfilter_name)


def scene_aovs(root: PluginNode) -> tuple[tuple[str, str], ...]:
    """The (name, type) channels after the RGB of the scene's integrator (``integrator_aovs``:
    an ``aov``'s AOVs, a ``moment``'s moments; none for others)."""
    nodes = root.children_of("integrator")
    return integrator_aovs(nodes[0]) if nodes else ()


def files_of(root):
    """The ``SceneFile``s of a parsed scene in document order: its XML files, spectrum files and
    resources (every ``filename`` parameter, resolved as ``PluginNode.get_path`` resolves it; a
    file named twice is listed twice)."""
    files = []
    for ref in root.files:
        path = ref.node.get_path("filename") if ref.kind == "resource" else ref.path
        if not os.path.isfile(path):
            raise SceneError(f"file '{ref.name}' not found", ref.where)
        files.append(SceneFile(ref.kind, ref.name, path, ref.where, ref.varies))
    return tuple(files)


def the_sensor(root: PluginNode) -> PluginNode:
    """The scene's one ``<sensor>``."""
    sensors = root.children_of("sensor")
    if len(sensors) != 1:
        raise SceneError(f"{root.source}: expected exactly one <sensor>, found {len(sensors)}")
    return sensors[0]


def _one(node: PluginNode, category: str) -> PluginNode | None:
    found = node.children_of(category)
    if len(found) > 1:
        raise SceneError(f"{found[1].source}: more than one <{category}> in {node.describe()}")
    return found[0] if found else None


def film_size(sensor: PluginNode) -> tuple[int, int]:
    """(width, height) of the image the sensor's film makes: its crop window (the whole film,
    Mitsuba's 768x576 when it has none), as the loader reads it (``tracer.io.films``)."""
    return read_film(sensor).image_size


def sample_count(sensor: PluginNode) -> int:
    """Samples per pixel of the sensor's sampler: its ``sample_count`` rounded as Mitsuba's
    sampler of that type rounds it (stratified 7 -> 9), 4 when it has none."""
    sampler = _sampler(sensor)
    if sampler is None:
        return DEFAULT_SPP
    count = sampler.get_int("sample_count", DEFAULT_SPP)
    if count < 1:
        raise SceneError(f"{sampler.source}: sample_count must be at least 1, got {count}")
    sampler.mark_used(*(name for name in SAMPLER_HARMLESS if sampler.has(name)))
    sampler.check_unused()
    return mitsuba_sample_count(sampler.type, count)


def sampler_type(sensor: PluginNode) -> str:
    """Our sampler for the sensor's (``RENDERED_WITH``): 'independent' when it has none."""
    sampler = _sampler(sensor)
    return "independent" if sampler is None else RENDERED_WITH[sampler.type]


def _sampler(sensor: PluginNode) -> PluginNode | None:
    sampler = _one(sensor, "sampler")
    if sampler is not None and sampler.type not in SAMPLERS:
        raise SceneError(f"{sampler.source}: unsupported sampler '{sampler.type}' ({', '.join(SAMPLERS)})")
    return sampler


def mitsuba_sample_count(sampler_type: str, count: int) -> int:
    """The samples per pixel Mitsuba's ``sampler_type`` takes for ``count`` (``set_sample_count``)."""
    if sampler_type == "stratified":       # a square
        return _ceil_sqrt(count) ** 2
    if sampler_type == "multijitter":      # a near-square rectangle (its sqrt is float32)
        rows = max(int(np.sqrt(np.float32(count))), 1)
        return -(-count // rows) * rows
    if sampler_type == "orthogonal":       # the square of a prime
        side = max(_ceil_sqrt(count), 2)
        while any(side % d == 0 for d in range(2, math.isqrt(side) + 1)):
            side += 1
        return side * side
    if sampler_type == "ldsampler":        # the square of a power of two
        side = 2
        while side * side < count:
            side *= 2
        return side * side
    return count


def _ceil_sqrt(n: int) -> int:
    root = math.isqrt(n)
    return root if root * root == n else root + 1
