"""Mitsuba 3 XML -> ``Scene``: walks the parsed plugin tree and fills the scene's tables.

Host only (numpy); the arrays it makes are what the jitted work unit reads. Every property a
plugin is given must be understood: whatever no builder read is reported, with file and line,
by ``PluginNode.check_unused``.
"""
import dataclasses
import os
import warnings
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from tracer import camera as cameras
from tracer import film as films
from tracer import geometry
from tracer.bsdfs.build import MaterialTableBuilder, has_transmission
from tracer.emitters.build import EmitterTableBuilder
from tracer.io import meshes
from tracer.io.errors import SceneError, SceneNotice
from tracer.io.images import load_image
from tracer.io.xml import PluginNode, parse_file
from tracer.scene import Scene, Settings, Shapes
from tracer.kinds import BitmapFilter, SurfaceKind, WrapMode
from tracer.table_rows import column
from tracer.textures import TextureTableBuilder

__all__ = ["load_scene"]

# BSDFs that see both sides themselves (wi below the surface is inside): the same material on the back.
BOTH_SIDES = {"dielectric", "roughdielectric", "thindielectric", "principled", "principledthin"}
MESH_TYPES = {"obj", "ply", "rectangle", "cube"}
ANALYTIC_TYPES = {"sphere": SurfaceKind.SPHERE, "disk": SurfaceKind.DISK}
# Properties that change nothing in what we render (output formats, sampler flavours, ids).
# Integrators rendered with 'path': without participating media (which the loader refuses) their
# image is the same in expectation.
PATH_LIKE = {"volpath", "volpathmis", "prb", "prb_basic"}
MAX_DIRECT_SAMPLES = 1024  # per camera ray: each sample is unrolled into the compiled program
HARMLESS = {
    "film": {"pixel_format", "component_format", "file_format", "banner", "sample_border", "compensate", "rfilter"},
    "sampler": {"seed", "jitter", "scramble", "samples_per_pass"},
    "sensor": {"shutter_open", "shutter_close", "srf"},
    "integrator": {"samples_per_pass", "timeout"},
}


def load_scene(path: str | os.PathLike, resolution: tuple[int, int] | None = None, accel: str = "auto",
               **params: object) -> Scene:
    """Load a Mitsuba 3 XML scene; ``params`` override its ``<default>`` values.

    ``resolution`` (width, height) overrides the film size. Raises ``SceneError`` with file and
    line for anything malformed or unsupported.
    """
    root = parse_file(str(path), **params)
    return _SceneBuilder(root, accel, resolution).build()


def _first(node, category):
    """The single nested plugin of a category, or None; two are an error."""
    found = node.children_of(category)
    if len(found) > 1:
        raise SceneError(f"{found[1].source}: more than one <{category}> in {node.category} '{node.type}'")
    return found[0] if found else None


def _load(node, loader, *args, **kwargs):
    """Run a file loader; its error (naming the file) also names the XML line that asked for it."""
    try:
        return loader(*args, **kwargs)
    except SceneError as e:
        raise SceneError(f"{node.source}: {e}") from None


class ShapeMaterials(NamedTuple):
    """The materials of a shape's two sides."""

    front: int        # material id seen from the side the normal points to
    back: int         # material id seen from the other side (the null material for one-sided BSDFs)
    flip_back: bool   # mirror the frame on the back (reflective two-sided BSDFs)


@dataclasses.dataclass(frozen=True)
class ShapeRow:
    """One shape, a column entry of each ``Shapes`` field."""

    bsdf_front: int
    bsdf_back: int
    flip_back: bool = False
    emitter: int = -1            # its area emitter's id, -1 for none
    flip_normals: bool = False


class _SceneBuilder:
    def __init__(self, root, accel, resolution):
        self.root = root
        self.accel = accel
        self.resolution = resolution
        self.textures = TextureTableBuilder()
        self.materials = MaterialTableBuilder()
        self.emitters = EmitterTableBuilder()
        self.null_material = self.materials.add_null()
        self.material_ids = {}       # id(node) -> ShapeMaterials; ("single", id(node)) -> material id
        self.bitmap_ids = {}
        self.meshes: list[geometry.MeshShape] = []
        self.analytic: list[geometry.AnalyticShape] = []
        self.shape_rows: list[ShapeRow] = []

    # ------------------------------------------------------------------ top level
    def build(self) -> Scene:
        root = self.root
        settings = self._integrator()
        sensors = root.children_of("sensor")
        if len(sensors) != 1:
            raise SceneError(f"{root.source}: expected exactly one <sensor>, found {len(sensors)}")
        camera, film, spp = self._sensor(sensors[0])
        for node in root.children:
            if node.category == "shape":
                self._shape(node)
            elif node.category == "emitter":
                if node.type == "area":
                    raise SceneError(f"{node.source}: an area emitter must be nested in a shape")
                self.emitters.add(node, self.add_texture)
                node.check_unused()
            elif node.category in ("bsdf", "texture", "sensor", "integrator"):
                continue  # referenced by shapes, or handled above
            else:
                raise SceneError(f"{node.source}: unsupported <{node.category}> plugin '{node.type}'")
        if not self.shape_rows:
            raise SceneError(f"{root.source}: the scene has no shapes")
        geo = geometry.build_geometry(self.meshes, self.analytic, accel=self.accel)
        lo, hi = self._bounds()
        emitters = self.emitters.build(lo, hi)
        rows = self.shape_rows
        shapes = Shapes(bsdf_front=column(rows, "bsdf_front", np.int32), bsdf_back=column(rows, "bsdf_back", np.int32),
                        flip_back=column(rows, "flip_back", bool), emitter=column(rows, "emitter", np.int32),
                        flip_normals=column(rows, "flip_normals", bool))
        settings = dataclasses.replace(settings, spp=spp)
        textures = self.textures.build()
        return Scene(geometry=geo, shapes=shapes, materials=self.materials.build(textures),
                     textures=textures, emitters=emitters, camera=camera, film=film,
                     settings=settings)

    def _bounds(self):
        points = [m.positions for m in self.meshes]
        for kind, to_world, _ in self.analytic:
            corners = np.array([[x, y, z, 1.0] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)])
            points.append((corners @ np.asarray(to_world).T)[:, :3])
        allp = np.concatenate(points, axis=0)
        return allp.min(axis=0), allp.max(axis=0)

    def _integrator(self):
        nodes = self.root.children_of("integrator")
        if len(nodes) > 1:
            raise SceneError(f"{nodes[1].source}: more than one <integrator>")
        if not nodes:
            return Settings(max_depth=-1)  # Mitsuba's default: 'path', unbounded
        return self._integrator_settings(nodes[0])

    def _integrator_settings(self, node):
        """Settings of a path, direct or moment integrator; others are refused by name, or
        stand in for one whose image is the same in expectation (with a notice)."""
        if node.type == "moment":  # Mitsuba's wrapper: its inner integrator's image, plus moments
            inner = node.children_of("integrator")
            if len(inner) != 1:
                raise SceneError(f"{node.source}: 'moment' takes one nested integrator, got {len(inner)}")
            node.check_unused()
            return self._integrator_settings(inner[0])
        if node.type in PATH_LIKE:
            warnings.warn(SceneNotice(f"{node.source}: integrator '{node.type}' is rendered with 'path' (without "
                                      "participating media its image is the same in expectation)"), stacklevel=2)
        elif node.type not in ("path", "direct"):
            raise SceneError(f"{node.source}: unsupported integrator '{node.type}' (path, direct, moment, or "
                             f"{', '.join(sorted(PATH_LIKE))} rendered as path)")
        hide_emitters = node.get_bool("hide_emitters", False)
        if node.type == "direct":
            settings = self._direct_settings(node, hide_emitters)
        else:
            settings = self._path_settings(node, hide_emitters)
        self._ignore(node, "integrator")
        node.check_unused()
        return settings

    def _path_settings(self, node, hide_emitters):
        max_depth = node.get_int("max_depth", -1)
        rr_depth = node.get_int("rr_depth", 5)
        if max_depth < -1:
            raise SceneError(f"{node.source}: max_depth must be -1 (unbounded) or >= 0, got {max_depth}")
        if rr_depth < 1:
            raise SceneError(f"{node.source}: rr_depth must be >= 1, got {rr_depth}")
        return Settings(max_depth=max_depth, rr_depth=rr_depth, hide_emitters=hide_emitters)

    def _direct_settings(self, node, hide_emitters):
        if node.has("shading_samples") and (node.has("emitter_samples") or node.has("bsdf_samples")):
            raise SceneError(f"{node.source}: give either 'shading_samples' or 'emitter_samples'/'bsdf_samples'")
        shading = node.get_int("shading_samples", 1)
        counts = {name: node.get_int(name, shading) for name in ("emitter_samples", "bsdf_samples")}
        for name, count in (("shading_samples", shading), *counts.items()):
            if not 0 <= count <= MAX_DIRECT_SAMPLES:
                raise SceneError(f"{node.source}: '{name}' must be in [0, {MAX_DIRECT_SAMPLES}], got {count}")
        if sum(counts.values()) == 0:
            raise SceneError(f"{node.source}: the direct integrator needs at least 1 BSDF or emitter sample")
        return Settings(integrator="direct", max_depth=2, hide_emitters=hide_emitters, **counts)

    def _ignore(self, node, category):
        node.mark_used(*(name for name in HARMLESS.get(category, ()) if node.has(name)))

    # ------------------------------------------------------------------ sensor
    def _sensor(self, node):
        if node.type not in ("perspective", "thinlens"):
            raise SceneError(f"{node.source}: unsupported sensor '{node.type}' (perspective or thinlens)")
        film_node = _first(node, "film")
        width, height = self.resolution or (768, 576)
        film = films.make_film(width, height)
        if film_node is not None:
            if film_node.type != "hdrfilm":
                raise SceneError(f"{film_node.source}: unsupported film '{film_node.type}' (only hdrfilm)")
            width, height = film_node.get_int("width", 768), film_node.get_int("height", 576)
            if self.resolution is not None:
                width, height = self.resolution
            if width < 1 or height < 1:
                raise SceneError(f"{film_node.source}: film size must be positive, got {width}x{height}")
            rfilter = _first(film_node, "rfilter")
            film = self._film(width, height, rfilter)
            for name in ("crop_offset_x", "crop_offset_y", "crop_width", "crop_height"):
                if film_node.has(name):
                    raise SceneError(f"{film_node.source}: film cropping ('{name}') is not supported")
            self._ignore(film_node, "film")
            film_node.check_unused()
        spp = 4
        sampler = _first(node, "sampler")
        if sampler is not None:
            spp = sampler.get_int("sample_count", 4)
            if spp < 1:
                raise SceneError(f"{sampler.source}: sample_count must be at least 1, got {spp}")
            self._ignore(sampler, "sampler")
            sampler.check_unused()
        if node.has("fov") and node.has("focal_length"):
            raise SceneError(f"{node.source}: give either fov or focal_length, not both")
        if node.has("focal_length"):
            raise SceneError(f"{node.source}: 'focal_length' is not supported; give 'fov'")
        fov = node.get_float("fov", 90.0) if node.has("fov") else 90.0
        fov_axis = node.get_string("fov_axis", "x")
        try:
            x_fov = cameras.x_fov_from(fov, fov_axis, width, height)
        except ValueError as e:
            raise SceneError(f"{node.source}: {e}") from None
        kwargs = {}
        if node.type == "thinlens":
            kwargs = dict(aperture_radius=node.get_float("aperture_radius", 0.03),
                          focus_distance=node.get_float("focus_distance", 0.0))
            if kwargs["focus_distance"] <= 0:
                raise SceneError(f"{node.source}: thinlens needs a positive focus_distance")
        camera = cameras.make_camera(node.get_transform("to_world"), x_fov, width, height,
                                     near_clip=node.get_float("near_clip", 1e-2),
                                     far_clip=node.get_float("far_clip", 1e4), **kwargs)
        self._ignore(node, "sensor")
        node.check_unused()
        return camera, film, spp

    def _film(self, width, height, rfilter):
        if rfilter is None:
            return films.make_film(width, height, "gaussian")
        try:
            if rfilter.type == "gaussian":
                film = films.make_film(width, height, "gaussian", stddev=rfilter.get_float("stddev", 0.5))
            elif rfilter.type in ("box", "tent"):
                radius = rfilter.get_float("radius", 0.5 if rfilter.type == "box" else 1.0)
                film = films.make_film(width, height, rfilter.type, radius=radius)
            else:
                raise SceneError(f"{rfilter.source}: unsupported rfilter '{rfilter.type}' (box, tent or gaussian)")
        except ValueError as e:
            raise SceneError(f"{rfilter.source}: {e}") from None
        rfilter.check_unused()
        return film

    # ------------------------------------------------------------------ shapes
    def _shape(self, node):
        index = len(self.shape_rows)
        to_world = node.get_transform("to_world")
        flip_normals = node.get_bool("flip_normals", False)
        triangles, analytic, vertex_normals = None, None, None
        if node.type in MESH_TYPES:
            mesh = self._mesh(node, to_world)
            self.meshes.append(geometry.MeshShape(mesh.positions, mesh.faces, mesh.normals, mesh.uvs, index))
            p = mesh.positions[mesh.faces]
            triangles = (p[:, 0], p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
            if mesh.normals is not None:
                n = mesh.normals[mesh.faces]
                vertex_normals = (n[:, 0], n[:, 1], n[:, 2])
        elif node.type in ANALYTIC_TYPES:
            if node.type == "sphere":
                center = node.get_point("center", np.zeros(3))
                radius = node.get_float("radius", 1.0)
                if radius <= 0:
                    raise SceneError(f"{node.source}: sphere radius must be positive, got {radius}")
                local = np.diag([radius, radius, radius, 1.0])
                local[:3, 3] = center
                to_world = to_world @ local
            analytic = (ANALYTIC_TYPES[node.type], to_world)
            self.analytic.append(geometry.AnalyticShape(*analytic, index))
        else:
            raise SceneError(f"{node.source}: unsupported shape type '{node.type}'")

        bsdf_nodes = node.children_of("bsdf")
        if len(bsdf_nodes) > 1:
            raise SceneError(f"{node.source}: a shape takes one bsdf, got {len(bsdf_nodes)}")
        sides = self._material(bsdf_nodes[0] if bsdf_nodes else None)
        emitter = -1
        for em in node.children_of("emitter"):
            if em.type != "area":
                raise SceneError(f"{em.source}: only 'area' emitters can be attached to a shape, got '{em.type}'")
            if emitter >= 0:
                raise SceneError(f"{em.source}: a shape takes at most one area emitter")
            emitter = self.emitters.add_area(em, index, triangles=triangles, analytic=analytic,
                                             flip_normals=flip_normals, normals=vertex_normals,
                                             add_texture=self.add_texture)
            em.check_unused()
        for child in node.children:
            if child.category not in ("bsdf", "emitter"):
                raise SceneError(f"{child.source}: unsupported <{child.category}> inside a shape")
        self.shape_rows.append(ShapeRow(bsdf_front=sides.front, bsdf_back=sides.back, flip_back=sides.flip_back,
                                        emitter=emitter, flip_normals=flip_normals))
        node.check_unused()

    def _mesh(self, node, to_world):
        """The shape's triangles in world space, with normals as Mitsuba computes them."""
        normal_matrix = node.get_normal_transform("to_world")
        if node.type == "rectangle":
            return meshes.transform_mesh(meshes.rectangle_mesh(), to_world, normal_matrix)
        if node.type == "cube":
            return meshes.transform_mesh(meshes.cube_mesh(), to_world, normal_matrix)
        path = node.get_path("filename")
        mesh = _load(node, meshes.load_obj if node.type == "obj" else meshes.load_ply, path)
        face_normals = node.get_bool("face_normals", False)
        if face_normals:
            mesh = meshes.Mesh(mesh.positions, mesh.faces, None, mesh.uvs)
        mesh = meshes.transform_mesh(mesh, to_world, normal_matrix)
        if not face_normals and mesh.normals is None:
            mesh = meshes.recompute_vertex_normals(mesh)  # from world-space positions, as Mitsuba
        return mesh

    # ------------------------------------------------------------------ materials and textures
    def _material(self, node):
        """The front and back materials of a shape's bsdf ``node`` (None: the default diffuse)."""
        if node is None:
            node = PluginNode.synthetic("bsdf", "diffuse")
        key = id(node)
        if key in self.material_ids:
            return self.material_ids[key]
        if node.type == "twosided":
            inner = node.children_of("bsdf")
            if not 1 <= len(inner) <= 2:
                raise SceneError(f"{node.source}: twosided takes one or two nested bsdfs, got {len(inner)}")
            if any(has_transmission(b) or b.type == "twosided" for b in inner):
                raise SceneError(f"{node.source}: twosided cannot wrap '{inner[0].type}' (as Mitsuba: only "
                                 "materials without a transmission component)")
            front = self._single_material(inner[0])
            back = self._single_material(inner[-1])
            result = ShapeMaterials(front, back, flip_back=True)
            node.check_unused()
        else:
            front = self._single_material(node)
            back = front if node.type in BOTH_SIDES else self.null_material
            result = ShapeMaterials(front, back, flip_back=False)
        self.material_ids[key] = result
        return result

    def _single_material(self, node):
        key = ("single", id(node))
        if key not in self.material_ids:
            self.material_ids[key] = self.materials.add(node, self.add_texture)
            node.check_unused()
        return self.material_ids[key]

    def add_texture(self, value: PluginNode | ArrayLike | float) -> int:
        """Texture id for a nested texture plugin, an RGB triple or a float."""
        if not isinstance(value, PluginNode):
            return self.textures.add_constant(np.broadcast_to(np.asarray(value, np.float64), (3,)))
        node = value
        to_uv = node.get_transform("to_uv")
        if node.type == "checkerboard":
            c0 = node.get_rgb("color0", np.full(3, 0.4))
            c1 = node.get_rgb("color1", np.full(3, 0.2))
            tid = self.textures.add_checkerboard(c0, c1, to_uv)
        elif node.type == "bitmap":
            path = node.get_path("filename")
            raw = node.get_bool("raw", False)
            filters = {"bilinear": BitmapFilter.BILINEAR, "nearest": BitmapFilter.NEAREST}
            wraps = {"repeat": WrapMode.REPEAT, "mirror": WrapMode.MIRROR, "clamp": WrapMode.CLAMP}
            filter_name = node.get_string("filter_type", "bilinear")
            wrap_name = node.get_string("wrap_mode", "repeat")
            if filter_name not in filters:
                raise SceneError(f"{node.source}: unknown filter_type '{filter_name}' (bilinear or nearest)")
            if wrap_name not in wraps:
                raise SceneError(f"{node.source}: unknown wrap_mode '{wrap_name}' (repeat, mirror or clamp)")
            key = (path, raw, filter_name, wrap_name, to_uv.tobytes())
            if key not in self.bitmap_ids:
                image = _load(node, load_image, path, raw=raw)
                self.bitmap_ids[key] = self.textures.add_bitmap(image, filters[filter_name], wraps[wrap_name], to_uv)
            tid = self.bitmap_ids[key]
        else:
            raise SceneError(f"{node.source}: unsupported texture type '{node.type}'")
        node.check_unused()
        return tid
