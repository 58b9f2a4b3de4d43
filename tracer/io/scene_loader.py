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

from tracer.errors import SceneError, SceneNotice
from tracer.io import aovs as aov_names
from tracer.io import curves as curve_files
from tracer.io import meshes, overrides, parameter_names, ply, serialized, shape_order, shapegroups
from tracer.io import vol as vol_files
from tracer.io.bsdfs import MaterialTableBuilder
from tracer.io.checks import check_extent, checked_to_world
from tracer.io.emitters import EmitterTableBuilder
from tracer.io.media import MediumTableBuilder
from tracer.io.scene_info import sampler_type, the_sensor
from tracer.io.sensors import load_sensor
from tracer.io.shape_order import WorldShape
from tracer.io.textures import TextureReader
from tracer.io.xml import PluginNode, parse_file
from tracer.integrators import aov
from tracer.kinds import BsdfKind, SurfaceKind
from tracer.runtime import process
from tracer.scene import Scene, Settings, Shapes
from tracer.shapes import curves, geometry, sdfgrid
from tracer.table_rows import column

__all__ = ["load_scene"]

MESH_TYPES = {"obj", "ply", "serialized", "rectangle", "cube"}
ANALYTIC_TYPES = {"sphere": SurfaceKind.SPHERE, "disk": SurfaceKind.DISK, "cylinder": SurfaceKind.CYLINDER}
CURVE_TYPES = {"linearcurve": (SurfaceKind.LINEAR_CURVE, curves.pack_linear),
               "bsplinecurve": (SurfaceKind.BSPLINE_CURVE, curves.pack_bspline)}
# Integrators rendered with 'path': without participating media (which the loader refuses) their
# image is the same in expectation.
PATH_LIKE = {"volpath", "volpathmis", "prb", "prb_basic"}
VOLPATH_LIKE = {"volpath", "volpathmis"}  # with media: rendered with 'volpath' (tracer.integrators.volpath)
MAX_DIRECT_SAMPLES = 1024  # per camera ray: each sample is unrolled into the compiled program
# Properties that change nothing in what we render (how work is split, what only differentiable
# rendering uses); sensors, films and samplers: tracer.io.sensors, tracer.io.films, scene_info.
HARMLESS = {
    "integrator": {"samples_per_pass", "timeout", "block_size"},
    "shape": {"silhouette_sampling_weight"},
}


def load_scene(path: str | os.PathLike, resolution: tuple[int, int] | None = None, accel: str = "auto",
               aovs: str | None = None, rfilter: str | None = None, **params: object) -> Scene:
    """Load a Mitsuba 3 XML scene; ``params`` override its ``<default>`` values.

    ``resolution`` (width, height) overrides the film size; ``aovs`` (``"name:type,..."``) adds
    AOV channels as Mitsuba's ``aov`` integrator would, and ``rfilter`` (a filter name) replaces
    the film's reconstruction filter (``tracer.io.overrides``). Raises ``SceneError`` with file
    and line for anything malformed or unsupported. Sets the process up first
    (``tracer.runtime.process.configure``): the scene's arrays are the first the tracer makes.
    """
    process.configure()
    root = overrides.apply(parse_file(str(path), **params), aovs, rfilter)
    return _SceneBuilder(root, accel, resolution).build()


def _nested(root):
    """id() of every plugin nested in another plugin than ``root`` (directly or by a <ref>)."""
    nested, stack = set(), [c for c in root.children]
    while stack:
        node = stack.pop()
        for child in node.children:
            if id(child) not in nested:
                nested.add(id(child))
                stack.append(child)
    return nested


def _corners(to_world):
    """(8, 3) world-space corners of the [-1, 1]^3 box an analytic shape's ``to_world`` maps."""
    corners = np.array([[x, y, z, 1.0] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)])
    return (corners @ np.asarray(to_world).T)[:, :3]


def _box_points(shape):
    """World-space points whose box is an analytic shape's (a curve segment's own bounds; not an
    SDF voxel's: its sdfgrid's box is in ``_SceneBuilder.sdf_boxes``)."""
    if shape.kind in SurfaceKind.CURVES:
        cols = lambda m: np.asarray(m, np.float64)[:3, :, None]
        lo, hi = curves.bounds(np.array([shape.kind]), cols(shape.to_world), cols(shape.local))
        return np.stack([lo[:, 0], hi[:, 0]])
    return _corners(shape.to_world)


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
    order: int = 0               # 1 + its place among the world's shapes and instances (Mitsuba's
                                 # scene->shapes(), what the shape_index AOV counts); 0 in a group
    one_prim: bool = False       # Mitsuba's shape is one primitive (sphere, disk, cylinder)
    interior: int = -1           # its interior and exterior media (rows of Media), -1 for none
    exterior: int = -1


class _SceneBuilder:
    def __init__(self, root: PluginNode, accel: str, resolution: tuple[int, int] | None) -> None:
        self.root = root
        self.accel = accel
        self.resolution = resolution
        self.textures = TextureReader()
        self.materials = MaterialTableBuilder()
        self.emitters = EmitterTableBuilder()
        self.materials.add_black()  # (row 0, as it always was)
        self.material_ids: dict[int, ShapeMaterials] = {}  # id(node) -> ShapeMaterials
        # The BSDF of a shape that names none (a node each, kept, so the cache's ids stay theirs).
        self.default_bsdfs = (PluginNode.synthetic("bsdf", "diffuse"),
                              PluginNode.synthetic("bsdf", "diffuse", reflectance=0.0))
        self.meshes: list[geometry.MeshShape] = []
        self.analytic: list[geometry.AnalyticShape] = []
        self.sdf_grids: list[geometry.SdfGrid] = []
        self.sdf_boxes: list[tuple[int, np.ndarray]] = []  # (group, the 8 corners of an sdfgrid's box)
        self.shape_rows: list[ShapeRow] = []
        self.group_ids: dict[int, int] = {}  # id(shapegroup node) -> its index
        self.instances: list[geometry.Instance] = []
        self.instance_order: list[int] = []  # each instance's ShapeRow.order
        self.world_items: list[WorldShape] = []  # the world's shapes and instances, in file order
        self.world_shapes = 0  # shapes and instances in the world so far
        self.material_attributes: dict[int, set] = {}  # material id -> the mesh attributes it reads
        self.ptracer: PluginNode | None = None  # a 'ptracer' integrator, rendered as 'path' if the scene allows
        self.media = MediumTableBuilder()
        self.emitter_rows: dict[int, int] = {}  # id(emitter node) -> its row (parameter names)
        self.volpath: PluginNode | None = None  # a volpath or volpathmis integrator: media render with it

    # ------------------------------------------------------------------ top level
    def build(self) -> Scene:
        root = self.root
        # The <scene>'s own parameters, as Mitsuba's scene reads them (it refuses others): its
        # thread reordering and compact trees change no image.
        root.mark_used("allow_thread_reordering", "compact_acceleration_structures")
        robust = root.get_bool("embree_use_robust_intersections", False)
        root.check_unused(nested=False)
        settings = self._integrator()
        sensor = the_sensor(root)
        sensor_medium = self._media_of(sensor, ("medium",)).get("medium", -1)
        camera, film, spp = load_sensor(sensor, self.resolution)
        nested = _nested(root)
        for node in root.children:
            if id(node) in nested:
                continue  # defined at the top, used by a <ref> (a sensor's sampler, a shape's emitter)
            if node.category == "shape":
                self._shape(node)
            elif node.category == "emitter":
                if node.type == "area":
                    raise SceneError(f"{node.source}: an area emitter must be nested in a shape")
                requested = len(self.textures.attribute_requests)
                self.emitter_rows[id(node)] = self.emitters.add(node, self.textures.add, self.textures.table.resolution)
                if len(self.textures.attribute_requests) > requested:
                    raise SceneError(f"{node.source}: a mesh_attribute texture can only be used by a shape's bsdf")
                node.check_unused()
            elif node.category in ("bsdf", "texture", "sensor", "integrator", "sampler", "film", "rfilter", "medium"):
                continue  # referenced by shapes, handled above, or (sampler, film, rfilter) unused as in Mitsuba
            else:
                raise SceneError(f"{node.source}: unsupported <{node.category}> plugin '{node.type}'")
        all_shapes: list[geometry.MeshShape | geometry.AnalyticShape] = [*self.meshes, *self.analytic]
        if not self.instances and all(shape.group >= 0 for shape in all_shapes):
            raise SceneError(f"{root.source}: the scene has no shapes")
        geo = geometry.build_geometry(self.meshes, self.analytic, accel=self.accel,
                                      attributes=self.textures.table.attribute_names, instances=self.instances,
                                      robust=robust, sdf_grids=self.sdf_grids)
        lo, hi = self._bounds()
        emitters = self.emitters.build(lo, hi)
        rows = self.shape_rows
        shapes = Shapes(bsdf_front=column(rows, "bsdf_front", np.int32), bsdf_back=column(rows, "bsdf_back", np.int32),
                        flip_back=column(rows, "flip_back", bool), emitter=column(rows, "emitter", np.int32),
                        flip_normals=column(rows, "flip_normals", bool), interior=column(rows, "interior", np.int32),
                        exterior=column(rows, "exterior", np.int32))
        settings = dataclasses.replace(settings, spp=spp, sampler=sampler_type(sensor))
        media = self.media.build(sensor_medium)
        settings = self._volpath(settings, media)
        textures = self.textures.table.build(geo.attribute_slots)
        aov_tables = None
        if settings.aovs:
            ranks, offsets = shape_order.mitsuba_order(self.world_items)  # Mitsuba's order, not the file's
            place = lambda order, of: np.asarray([of[o - 1] if o > 0 else 0 for o in order], np.int32)
            instance_order = [order for _, order in sorted(zip([i.group for i in self.instances], self.instance_order),
                                                            key=lambda pair: pair[0])]  # as build_geometry sorts them
            order = [row.order for row in rows]
            aov_tables = aov.make_tables(geo, place(order, ranks), column(rows, "one_prim", bool),
                                         place(instance_order, ranks), place(order, offsets))
        materials = self.materials.build(textures)
        if self.ptracer is not None:
            _ptracer_as_path(self.ptracer, sensor, materials)
        sources = parameter_names.Sources(self.materials.parameter_textures, self.materials.parameter_cells,
                                          self.materials.leaf_rows,
                                          self.textures.node_textures, self.textures.bitmap_channels,
                                          self.emitter_rows)
        return Scene(geometry=geo, shapes=shapes, materials=materials,
                     textures=textures, emitters=emitters, camera=camera, film=film,
                     settings=settings, media=media, aov=aov_tables,
                     parameter_slots=parameter_names.name_parameters(self.root, sources, textures, emitters))

    def _bounds(self, group=-1):
        """The box (lo, hi) of the world's shapes and instances (as Mitsuba's scene bbox), or of a
        group's shapes in its object space."""
        cube = np.array([[x, y, z, 1.0] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)])
        points = [m.positions for m in self.meshes if m.group == group]
        points += [_box_points(a) for a in self.analytic if a.group == group and a.kind != SurfaceKind.SDF_VOXEL]
        points += [corners for g, corners in self.sdf_boxes if g == group]
        for instance in self.instances if group < 0 else ():
            lo, hi = self._bounds(instance.group)
            box = np.concatenate([np.where(cube[:, :3] > 0, hi, lo), cube[:, 3:]], axis=1)
            points.append((box @ instance.to_world.T)[:, :3])
        allp = np.concatenate(points, axis=0)
        return allp.min(axis=0), allp.max(axis=0)

    def _integrator(self):
        nodes = self.root.children_of("integrator")
        if len(nodes) > 1:
            raise SceneError(f"{nodes[1].source}: more than one <integrator>")
        if not nodes:
            return Settings(max_depth=-1)  # Mitsuba's default: 'path', unbounded
        aovs = aov_names.integrator_aovs(nodes[0])  # the channels after the RGB, as the farm reads them
        return dataclasses.replace(self._integrator_settings(nodes[0]), aovs=aovs)

    def _integrator_settings(self, node):
        """Settings of a path, direct or moment integrator; others are refused by name, or
        stand in for one whose image is the same in expectation (with a notice)."""
        if node.type == "aov":
            return self._aov_settings(node)
        if node.type == "moment":  # Mitsuba's wrapper: its inner integrator's image, plus moments
            node.check_unused()
            return self._integrator_settings(node.children_of("integrator")[0])
        if node.type in VOLPATH_LIKE:
            self.volpath = node  # rendered as volpath if the scene has media, else as path (_volpath)
            if node.type == "volpathmis":
                node.get_bool("use_spectral_mis", True)  # read (checked) here, used by _volpath
        elif node.type in PATH_LIKE:
            warnings.warn(SceneNotice(f"{node.source}: integrator '{node.type}' is rendered with 'path' (without "
                                      "participating media its image is the same in expectation)"), stacklevel=2)
        elif node.type == "ptracer":
            self.ptracer = node  # rendered as path where the scene allows: checked once it is built
        elif node.type not in ("path", "direct"):
            raise SceneError(f"{node.source}: unsupported integrator '{node.type}' (path, direct, moment, aov; "
                             f"{', '.join(sorted(PATH_LIKE))} and, on some scenes, ptracer rendered as path)")
        hide_emitters = node.get_bool("hide_emitters", False)
        if node.type == "direct":
            settings = self._direct_settings(node, hide_emitters)
        else:
            settings = self._path_settings(node, hide_emitters)
        self._ignore(node, "integrator")
        node.check_unused()
        return settings

    def _volpath(self, settings, media):
        """Settings of a volpath or volpathmis integrator where the scene has media (volpathmis
        with ``use_spectral_mis`` off: 'volpath', the same single-channel estimator), else 'path'
        (the same image in expectation)."""
        node = self.volpath
        if node is None:
            return settings
        if media.count:
            if node.type == "volpathmis" and node.get_bool("use_spectral_mis", True):
                return dataclasses.replace(settings, integrator="volpathmis")
            if node.type != "volpath":
                warnings.warn(SceneNotice(f"{node.source}: integrator '{node.type}' without spectral MIS is rendered "
                                          "with 'volpath' (its image is the same in expectation)"), stacklevel=3)
            return dataclasses.replace(settings, integrator="volpath")
        warnings.warn(SceneNotice(f"{node.source}: integrator '{node.type}' is rendered with 'path' (without "
                                  "participating media its image is the same in expectation)"), stacklevel=3)
        return settings

    def _media_of(self, node, names):
        """{name: medium row} of the media ``node`` (a shape, the sensor) names among ``names``."""
        found = {}
        for name, child in node.named_children():
            if child.category != "medium":
                continue
            if name not in names:
                raise SceneError(f"{child.source}: a medium in {node.describe()} must be named "
                                 f"{' or '.join(repr(n) for n in names)}, got {name!r}")
            if name in found:
                raise SceneError(f"{child.source}: {node.describe()} takes one '{name}' medium")
            found[name] = self.media.add(child)
        node.children_of("medium")  # (read above)
        return found

    def _aov_settings(self, node):
        """Mitsuba's ``aov``: its nested integrator's RGB (black without one), then the AOVs of
        its first camera-ray hit (``tracer.integrators.aov``; the channels are ``integrator_aovs``')."""
        inner = node.children_of("integrator")
        if len(inner) > 1:
            raise SceneError(f"{inner[1].source}: 'aov' takes at most one nested integrator here, got {len(inner)}")
        if inner and inner[0].type == "aov":
            raise SceneError(f"{inner[0].source}: an 'aov' integrator cannot be nested in another")
        node.check_unused()
        return self._integrator_settings(inner[0]) if inner else Settings(max_depth=0)

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

    # ------------------------------------------------------------------ shapes
    def _shape(self, node, group=-1):
        """Add a shape: in world space, or (``group`` >= 0) in a shape group's object space."""
        if node.type == "shapegroup" and group < 0:
            self._shapegroup(node)  # defined, perhaps never instanced (it is checked all the same)
            return
        if group < 0:
            self.world_shapes += 1
        if node.type == "instance" and group < 0:
            self.instance_order.append(self.world_shapes)
            self.world_items.append(WorldShape())
            self.instances.append(geometry.Instance(self._shapegroup(shapegroups.instanced_group(node)),
                                                    shapegroups.instance_to_world(node)))
            node.check_unused()
            return
        index = len(self.shape_rows)
        to_world = checked_to_world(node, node.describe())
        flip_normals = node.get_bool("flip_normals", False)
        triangles, analytic, vertex_normals, vertex_uvs, mesh = None, None, None, None, None
        if node.type in MESH_TYPES:
            mesh = self._mesh(node, to_world)
            check_extent(node, node.describe(), mesh.positions)
            self.meshes.append(geometry.MeshShape(mesh.positions, mesh.faces, mesh.normals, mesh.uvs, index,
                                                  mesh.attributes, group))
            p = mesh.positions[mesh.faces]
            triangles = (p[:, 0], p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
            if node.type == "rectangle":  # a light on it samples its square, as Mitsuba's
                triangles, analytic = None, (SurfaceKind.RECTANGLE, to_world)
            elif mesh.normals is not None:
                n = mesh.normals[mesh.faces]
                vertex_normals = (n[:, 0], n[:, 1], n[:, 2])
            if mesh.uvs is not None and analytic is None:
                uv = mesh.uvs[mesh.faces]
                vertex_uvs = (uv[:, 0], uv[:, 1], uv[:, 2])
        elif node.type in ANALYTIC_TYPES:
            if node.type == "sphere":
                center = node.get_point("center", np.zeros(3))
                radius = node.get_float("radius", 1.0)
                if radius <= 0:
                    raise SceneError(f"{node.source}: sphere radius must be positive, got {radius}")
                local = np.diag([radius, radius, radius, 1.0])
                local[:3, 3] = center
                to_world = to_world @ local
            elif node.type == "cylinder":
                to_world, mirrored = self._cylinder(node, to_world)
                flip_normals = flip_normals != mirrored
            check_extent(node, node.describe(), _corners(to_world))
            analytic = (ANALYTIC_TYPES[node.type], to_world)
            self.analytic.append(geometry.AnalyticShape(*analytic, index, group))
        elif node.type in CURVE_TYPES:
            self._curve(node, to_world, index, group)
        elif node.type == "sdfgrid":
            self._sdfgrid(node, to_world, index, group)
        else:
            raise SceneError(f"{node.source}: unsupported shape type '{node.type}'")

        bsdf_nodes = node.children_of("bsdf")
        if len(bsdf_nodes) > 1:
            raise SceneError(f"{node.source}: a shape takes one bsdf, got {len(bsdf_nodes)}")
        if bsdf_nodes:
            sides = self._material(bsdf_nodes[0])
        else:  # Mitsuba's default: a diffuse BSDF, black on an emitter
            sides = self._material(self.default_bsdfs[bool(node.children_of("emitter"))])
        self._check_attributes(node, mesh, sides)
        emitter = -1
        for em in node.children_of("emitter"):
            if em.type != "area":
                raise SceneError(f"{em.source}: only 'area' emitters can be attached to a shape, got '{em.type}'")
            if emitter >= 0:
                raise SceneError(f"{em.source}: a shape takes at most one area emitter")
            if node.type in CURVE_TYPES:
                raise SceneError(f"{em.source}: a '{node.type}' cannot carry an area emitter (Mitsuba cannot "
                                 "sample points on curves)")
            if node.type == "sdfgrid":
                raise SceneError(f"{em.source}: an 'sdfgrid' cannot carry an area emitter (as in Mitsuba)")
            emitter = self.emitter_rows[id(em)] = self.emitters.add_area(em, index, triangles=triangles, analytic=analytic,
                                             flip_normals=flip_normals, normals=vertex_normals,
                                             uvs=vertex_uvs, add_texture=self.textures.add)
            em.check_unused()
        media = self._media_of(node, ("interior", "exterior"))
        for child in node.children:
            if child.category not in ("bsdf", "emitter", "medium"):
                raise SceneError(f"{child.source}: unsupported <{child.category}> inside a shape")
        self.shape_rows.append(ShapeRow(bsdf_front=sides.front, bsdf_back=sides.back, flip_back=sides.flip_back,
                                        emitter=emitter, flip_normals=flip_normals,
                                        order=self.world_shapes if group < 0 else 0,
                                        one_prim=node.type in ANALYTIC_TYPES, interior=media.get("interior", -1),
                                        exterior=media.get("exterior", -1)))
        if group < 0:
            self.world_items.append(_world_shape(node, mesh, bsdf_nodes, emitter >= 0, index))
        self._ignore(node, "shape")
        node.check_unused()

    def _shapegroup(self, node):
        """The index of the shape group ``node`` (its shapes added the first time it is seen)."""
        if id(node) not in self.group_ids:
            group = self.group_ids[id(node)] = len(self.group_ids)
            for shape in shapegroups.group_shapes(node):
                self._shape(shape, group)
        return self.group_ids[id(node)]

    def _curve(self, node, to_world, index, group):
        """A ``linearcurve`` or ``bsplinecurve``: one analytic primitive per segment
        (tracer.shapes.curves), control points in world space, radii as in the file."""
        kind, pack = CURVE_TYPES[node.type]
        data = node.load(curve_files.load_curves, node.get_path("filename"), node.type)
        points = data.points @ to_world[:3, :3].T + to_world[:3, 3]
        check_extent(node, node.describe(), points)
        check_extent(node, node.describe(), data.radii[:, None])
        for m, local in pack(points, data.radii, data.starts):
            self.analytic.append(geometry.AnalyticShape(kind, m, index, group, local))

    def _sdfgrid(self, node, to_world, index, group):
        """An ``sdfgrid``: one analytic primitive per voxel its surface crosses (tracer.shapes.sdfgrid),
        its grid (a one-channel ``.vol`` file) over the unit cube that ``to_world`` places."""
        normals = node.get_string("normals", "smooth")
        if normals not in ("smooth", "analytic"):
            raise SceneError(f"{node.source}: sdfgrid normals '{normals}': expected 'analytic' or 'smooth'")
        if not node.has("filename"):
            raise SceneError(f"{node.source}: an sdfgrid needs a 'filename' (its grid, a .vol file)")
        grid = node.load(vol_files.read, node.get_path("filename"))
        if grid.channels != 1:
            raise SceneError(f"{node.source}: the sdfgrid's grid has {grid.channels} channels, expected 1")
        if grid.res.min() < 2:
            raise SceneError(f"{node.source}: the sdfgrid's grid of {'x'.join(map(str, grid.res))} values needs at "
                             "least 2 each way (one voxel)")
        det = np.linalg.det(to_world[:3, :3])
        if not np.isfinite(det) or det == 0:
            raise SceneError(f"{node.source}: the sdfgrid's 'to_world' is singular")
        cube = np.array([[x, y, z, 1.0] for x in (0, 1) for y in (0, 1) for z in (0, 1)])
        corners = (cube @ to_world.T)[:, :3]
        check_extent(node, node.describe(), corners)
        voxels = sdfgrid.voxels(grid.data[..., 0], to_world, len(self.sdf_grids))
        if not len(voxels.to_world):
            raise SceneError(f"{node.source}: the sdfgrid's values never change sign: it has no surface")
        self.sdf_grids.append(geometry.SdfGrid(grid.data[..., 0], normals == "smooth"))
        self.sdf_boxes.append((group, corners))
        for m, local in zip(voxels.to_world, voxels.to_local):
            self.analytic.append(geometry.AnalyticShape(SurfaceKind.SDF_VOXEL, m, index, group, local))

    def _cylinder(self, node, to_world):
        """(to_world of the unit tube, flip_normals) of a ``cylinder``: p0, p1 and radius folded in
        (Mitsuba's cylinder.cpp); a mirroring transform flips the normals, as Mitsuba flips them
        for a negative scale."""
        p0, p1 = node.get_point("p0", np.zeros(3)), node.get_point("p1", np.array([0.0, 0.0, 1.0]))
        radius = node.get_float("radius", 1.0)
        if not (np.all(np.isfinite(p0)) and np.all(np.isfinite(p1)) and np.isfinite(radius)):
            raise SceneError(f"{node.source}: cylinder p0, p1 and radius must be finite")
        if radius == 0 or np.array_equal(p0, p1):
            raise SceneError(f"{node.source}: a cylinder needs a nonzero radius and p0 != p1")
        to_world = to_world @ geometry.cylinder_to_world(p0, p1, radius)
        det = np.linalg.det(to_world[:3, :3])
        if not np.isfinite(det) or det == 0:
            raise SceneError(f"{node.source}: the cylinder's 'to_world' is singular")
        return to_world, bool(det < 0)

    def _check_attributes(self, node, mesh, sides):
        """The mesh attributes the shape's materials read exist on it, with a width Mitsuba can
        evaluate (1 or 3)."""
        read = self.material_attributes.get(sides.front, set()) | self.material_attributes.get(sides.back, set())
        for name in sorted(read):
            if mesh is None:
                raise SceneError(f"{node.source}: a mesh_attribute texture reads '{name}', but a '{node.type}' "
                                 "has no mesh attributes")
            if name not in mesh.attributes:
                have = ", ".join(sorted(mesh.attributes)) or "none"
                raise SceneError(f"{node.source}: a mesh_attribute texture reads '{name}', which this shape does not "
                                 f"have (its attributes: {have})")
            width = mesh.attributes[name].shape[1]
            if width not in (1, 3):
                raise SceneError(f"{node.source}: mesh attribute '{name}' has {width} values per entry; a "
                                 "mesh_attribute texture evaluates 1 or 3")

    def _mesh(self, node, to_world):
        """The shape's triangles in world space, with normals as Mitsuba computes them."""
        normal_matrix = node.get_normal_transform("to_world")
        if node.type == "rectangle":
            return meshes.transform_mesh(meshes.rectangle_mesh(), to_world, normal_matrix)
        if node.type == "cube":
            return meshes.transform_mesh(meshes.cube_mesh(), to_world, normal_matrix)
        path = node.get_path("filename")
        face_normals = node.get_bool("face_normals", False)
        if node.type == "obj":
            mesh = node.load(meshes.load_obj, path, flip_tex_coords=node.get_bool("flip_tex_coords", True))
            if face_normals:
                mesh.normals = None
        elif node.type == "ply":
            mesh = node.load(ply.load_ply, path, face_normals=face_normals,
                         flip_tex_coords=node.get_bool("flip_tex_coords", False))
        else:
            mesh = node.load(serialized.load_serialized, path, shape_index=node.get_int("shape_index", 0),
                         face_normals=face_normals)
        mesh = meshes.transform_mesh(mesh, to_world, normal_matrix)
        if not face_normals and mesh.normals is None:
            mesh = meshes.recompute_vertex_normals(mesh)  # from world-space positions, as Mitsuba
        return mesh

    # ------------------------------------------------------------------ materials and textures
    def _material(self, node):
        """The front and back materials of a shape's bsdf ``node``."""
        key = id(node)
        if key not in self.material_ids:
            requested = len(self.textures.attribute_requests)
            front, _ = self.materials.add_side(node, False, self.textures.add)
            back, mirror = self.materials.add_side(node, True, self.textures.add)
            self.material_ids[key] = ShapeMaterials(front, back, flip_back=mirror)
            read = set(self.textures.attribute_requests[requested:])  # the mesh attributes its textures read
            for material in (front, back):
                self.material_attributes[material] = self.material_attributes.get(material, set()) | read
        return self.material_ids[key]


# Leaf BSDFs with a Dirac lobe (a mask's cut-out is a 'null' leaf): Mitsuba's particle tracer cannot
# connect them to the camera, so paths the camera sees through them are missing from its image.
_DELTA_KINDS = (BsdfKind.CONDUCTOR, BsdfKind.DIELECTRIC, BsdfKind.THINDIELECTRIC, BsdfKind.PLASTIC, BsdfKind.NULL,
                BsdfKind.POLARIZER)


def _ptracer_as_path(node, sensor, materials):
    """Mitsuba's ``ptracer`` traces light from the emitters and connects each vertex to the camera.
    Its image is path's in expectation (Mitsuba's own regression test holds it to a path-traced
    reference) when the camera is a pinhole (``perspective``: Mitsuba cannot connect to others)
    and no material has a Dirac lobe; then a ``SceneNotice`` says so, else a ``SceneError``."""
    delta = sorted(BsdfKind.NAMES[k] for k in set(materials.kinds_present) & set(_DELTA_KINDS))
    if sensor.type != "perspective" or delta:
        why = (f"its '{sensor.type}' sensor" if sensor.type != "perspective"
               else f"its {', '.join(repr(name) for name in delta)} BSDFs' Dirac lobes")
        raise SceneError(f"{node.source}: unsupported integrator 'ptracer' on this scene: {why} would make "
                         "its image differ from path's")
    warnings.warn(SceneNotice(f"{node.source}: integrator 'ptracer' is rendered with 'path' (a pinhole camera and no "
                              "Dirac BSDF lobes: the same image in expectation)"), stacklevel=3)


def _world_shape(node, mesh, bsdf_nodes, emits, index):
    """The world shape ``node`` (shape row ``index``) as Mitsuba's mesh merging sees it
    (``tracer.io.shape_order``): a mesh without attributes is merged by its BSDF (a default one is
    its own), emitter, uvs and face normals; other shapes are kept."""
    if mesh is None or node.type not in MESH_TYPES or mesh.attributes:
        return WorldShape()
    bsdf = shape_order.signature(bsdf_nodes[0]) if bsdf_nodes else ("default", index)
    key = (bsdf, index if emits else -1, mesh.uvs is not None, mesh.normals is None)
    return WorldShape(key, len(mesh.faces))
