"""Host side: Mitsuba emitter plugins -> the ``Emitters`` table (numpy only, no tracing).

``EmitterTableBuilder.add_area`` takes the area light of a shape (its triangles in world space,
or a sphere, disk, rectangle or cylinder by its to_world); ``add`` takes ``point``, ``spot``, ``directional``, ``constant``
and ``envmap`` nodes; ``build`` packs everything once the scene's bounds are known. Parameters
and defaults are Mitsuba 3.9's; a bad value raises ``SceneError`` naming the plugin and line.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from tracer import camera as cameras
from tracer import constants
from tracer.emitters import discrete, envmap
from tracer.emitters.table import Emitters
from tracer.io import sensors
from tracer.io.checks import check_radiance, check_texels
from tracer.errors import SceneError
from tracer.kinds import EmitterKind, SurfaceKind
from tracer.table_rows import column, on_device, stacked

if TYPE_CHECKING:
    from tracer.io.xml import PluginNode

__all__ = ["EmitterTableBuilder", "EmitterRow"]

RAY_EPSILON = float(constants.RAY_EPSILON)  # the bounding sphere is computed in float64


def _affine(m):
    """(3, 4) float32 top of a 4x4 affine matrix."""
    return np.asarray(m, np.float64)[:3, :4].astype(np.float32)


def _inverse(m, node, what="to_world"):
    m = np.asarray(m, np.float64)
    det = np.linalg.det(m[:3, :3])
    if not np.isfinite(det) or abs(det) < 1e-30:
        raise SceneError(f"{node.describe()}: '{what}' is singular", node.source)
    return np.linalg.inv(m)


def _translation(p):
    m = np.eye(4)
    m[:3, 3] = p
    return m


def _identity():
    return _affine(np.eye(4))


@dataclasses.dataclass(frozen=True)
class EmitterRow:
    """One emitter, a column entry of each ``Emitters`` field; the defaults are neutral (no shape, no
    spot cone, no texture)."""

    kind: int                   # an EmitterKind
    radiance: np.ndarray        # (3,) float32 radiance, intensity or irradiance
    weight: float               # Mitsuba's sampling_weight
    to_world: np.ndarray = dataclasses.field(default_factory=_identity)  # (3, 4) float32
    to_local: np.ndarray = dataclasses.field(default_factory=_identity)  # (3, 4) float32
    shape: int = -1             # the shape an area light is attached to
    area_shape: int = SurfaceKind.MESH
    flip: bool = False          # the shape's flip_normals
    inv_area: float = 0.0
    tri_offset: int = 0         # first triangle of a mesh area light in the triangle arrays
    tri_count: int = 0
    spot_cos_cutoff: float = -1.0
    spot_cutoff: float = math.pi
    spot_cos_beam: float = -1.0
    spot_inv_transition: float = 0.0
    spot_uv_factor: float = 1.0
    texture: int = -1           # multiplies radiance (spot, projector, area)
    proj_cot: float = 1.0
    proj_aspect: float = 1.0


class _MeshTriangles(NamedTuple):
    """The T triangles of one mesh area light, world space, float64."""

    p0: np.ndarray       # (T, 3) first vertex
    e1: np.ndarray       # (T, 3) p1 - p0
    e2: np.ndarray       # (T, 3) p2 - p0
    normals: np.ndarray  # (3, T, 3) the normal at each vertex (the face normal for flat meshes)
    uvs: np.ndarray      # (3, T, 2) the uv at each vertex (Mitsuba's (0,0), (1,0), (0,1) without)
    cdf: np.ndarray      # (T,) inclusive cdf of the triangles' areas


class _Environment(NamedTuple):
    """The environment map and its sampling distribution (``envmap.build_distribution``)."""

    rgb: np.ndarray      # (H, W, 3) float32, scaled
    density: np.ndarray
    row_cdf: np.ndarray
    col_cdf: np.ndarray


class EmitterTableBuilder:
    """Accumulates emitters; ``add_*`` returns the emitter id, ``build`` makes the table.

    ``load_image(path) -> (H, W, C) float32 linear`` reads environment maps (default:
    ``tracer.io.images.load_image``).
    """

    def __init__(self, load_image: Callable[[str], np.ndarray] | None = None):
        self._load_image = load_image
        self._rows: list[EmitterRow] = []
        self._triangles: list[_MeshTriangles] = []  # per mesh area emitter
        self._n_triangles = 0
        self._env: _Environment | None = None
        self._environment = -1
        self._textured = False

    # ------------------------------------------------------------------ area lights
    def add_area(self, node: PluginNode, shape_index: int,
                 triangles: tuple[ArrayLike, ArrayLike, ArrayLike] | None = None,
                 analytic: tuple[int, ArrayLike] | None = None, flip_normals: bool = False,
                 normals: tuple[ArrayLike, ArrayLike, ArrayLike] | None = None,
                 uvs: tuple[ArrayLike, ArrayLike, ArrayLike] | None = None,
                 add_texture: Callable[[PluginNode], int] | None = None) -> int:
        """The ``area`` emitter ``node`` of shape ``shape_index``.

        Give either ``triangles`` = (p0, e1, e2), each (T, 3) world space (p1 - p0, p2 - p0), with
        optional per-vertex ``normals`` = (n0, n1, n2), each (T, 3) (smooth meshes: Mitsuba then
        uses the interpolated normal for the emitting side and the pdf) and ``uvs`` = (uv0, uv1, uv2),
        each (T, 2) (where a textured radiance is read; a mesh without them cannot carry one, as in
        Mitsuba, whose sampling maps uv onto the mesh), or ``analytic`` =
        (kind, to_world 4x4) with kind ``SurfaceKind.SPHERE``, ``DISK``, ``RECTANGLE`` or ``CYLINDER``;
        the sphere's to_world maps the unit sphere, center and radius included; the disk's the unit
        disk and the rectangle's [-1, 1]^2 at z = 0, without any flip folded in; the cylinder's the unit tube, p0, p1 and radius included (its
        ``flip_normals`` with Mitsuba's flip for a mirroring transform folded in).
        ``add_texture(node)`` gives the texture id of a nested ``radiance`` texture.
        """
        if node.type != "area":
            raise SceneError(f"unsupported emitter type '{node.type}' on a shape (only 'area')", node.source)
        if node.has("to_world"):
            raise SceneError(f"{node.describe()}: an area light takes the transform of its shape, not "
                             "'to_world'", node.source)
        if (triangles is None) == (analytic is None):
            raise ValueError("add_area takes exactly one of triangles or analytic")
        row = self._area_radiance(node, add_texture, shape=int(shape_index), flip=bool(flip_normals))
        if triangles is not None:
            if row.texture >= 0 and uvs is None:
                raise SceneError(f"{node.describe()}: a textured 'radiance' needs a mesh with uv coordinates "
                                 "(Mitsuba samples it through them)", node.source)
            row = self._add_mesh(node, row, triangles, normals, uvs)
        else:
            assert analytic is not None  # (exactly one of the two is given: checked above)
            row = self._add_analytic(node, row, *analytic)
        return self._append(row)

    def _area_radiance(self, node, add_texture, **fields):
        """The area light's row with its radiance: a spectrum, or a nested texture (``AreaLight``
        with a spatially varying radiance; a mesh attribute is refused: lights read uv only)."""
        child = node.child("radiance")
        if child is None:
            return self._row(node, EmitterKind.AREA, self._spectrum(node, "radiance", 1.0), **fields)
        if child.type == "mesh_attribute":
            raise SceneError(f"{node.describe()}: a 'mesh_attribute' radiance is not supported (give an rgb, a "
                             "spectrum, a bitmap or a checkerboard)", node.source)
        if add_texture is None:
            raise ValueError("a textured area light needs add_texture")
        return self._textured_row(self._row(node, EmitterKind.AREA, np.ones(3), **fields), add_texture(child))

    def _add_mesh(self, node, row, triangles, normals, uvs):
        p0, e1, e2 = (np.asarray(a, np.float64).reshape(-1, 3) for a in triangles)
        cross = np.cross(e1, e2)
        double_area = np.linalg.norm(cross, axis=1)
        total = 0.5 * double_area.sum()
        if len(p0) == 0 or not total > 0 or not np.isfinite(total):
            raise SceneError(f"{node.describe()}: the emitting shape has no surface area", node.source)
        face_n = cross / np.where(double_area > 0, double_area, 1.0)[:, None]
        if normals is None:
            n = np.stack([face_n, face_n, face_n])
        else:
            n = np.stack([np.asarray(a, np.float64).reshape(-1, 3) for a in normals])
        if uvs is None:
            uv = np.stack([np.tile(np.array(c, np.float64), (len(p0), 1)) for c in ((0, 0), (1, 0), (0, 1))])
        else:
            uv = np.stack([np.asarray(a, np.float64).reshape(-1, 2) for a in uvs])
        cdf = discrete.inclusive_cdf(double_area)
        row = dataclasses.replace(row, area_shape=SurfaceKind.MESH, inv_area=1.0 / total,
                                  tri_offset=self._n_triangles, tri_count=len(p0))
        self._triangles.append(_MeshTriangles(p0, e1, e2, n, uv, cdf))
        self._n_triangles += len(p0)
        return row

    def _add_analytic(self, node, row, kind, to_world):
        to_world = np.asarray(to_world, np.float64)
        to_local = _inverse(to_world, node)
        if kind == SurfaceKind.SPHERE:
            area = 4.0 * math.pi * float(np.dot(to_world[:3, 0], to_world[:3, 0]))
        elif kind == SurfaceKind.CYLINDER:  # Mitsuba's 2 pi |M e_x| |M e_z|, exact without shear
            area = 2.0 * math.pi * float(np.linalg.norm(to_world[:3, 0]) * np.linalg.norm(to_world[:3, 2]))
        else:  # a disk (the unit disk) or a rectangle ([-1, 1]^2: Mitsuba's |dp_du x dp_dv|)
            scale = 4.0 if kind == SurfaceKind.RECTANGLE else math.pi
            area = scale * float(np.linalg.norm(np.cross(to_world[:3, 0], to_world[:3, 1])))
        if not area > 0 or not np.isfinite(area):
            raise SceneError(f"{node.describe()}: the emitting shape has no surface area", node.source)
        return dataclasses.replace(row, area_shape=kind, inv_area=1.0 / area, to_world=_affine(to_world),
                                   to_local=_affine(to_local))

    # ------------------------------------------------------------------ other emitters
    def add(self, node: PluginNode, add_texture: Callable[[PluginNode], int] | None,
            texture_resolution: Callable[[int], tuple[int, int]] | None = None) -> int:
        """A ``point``, ``spot``, ``directional``, ``constant``, ``envmap`` or ``projector`` node;
        returns its id.

        ``add_texture(node)`` returns the texture id of a nested texture plugin (spot and projector
        textures), ``texture_resolution(id)`` its (width, height) (a projector's film).
        """
        adders = {"point": self._point, "spot": self._spot, "directional": self._directional,
                  "constant": self._constant, "envmap": self._envmap,
                  "projector": lambda n, add: self._projector(n, add, texture_resolution)}
        if node.type not in adders:
            raise SceneError(f"unsupported emitter type '{node.type}'", node.source)
        row = adders[node.type](node, add_texture)
        if row.kind in EmitterKind.ENVIRONMENT:
            if self._environment >= 0:
                raise SceneError("only one environment emitter (constant or envmap) can be specified per scene",
                                 node.source)
            self._environment = len(self._rows)
        return self._append(row)

    def _point(self, node, add_texture):
        row = self._row(node, EmitterKind.POINT, self._spectrum(node, "intensity", 1.0))
        return self._set_to_world(node, row, "position", lambda p: _translation(p))

    def _spot(self, node, add_texture):
        row = self._row(node, EmitterKind.SPOT, self._spectrum(node, "intensity", 1.0))
        cutoff = node.get_float("cutoff_angle", 20.0)
        beam = node.get_float("beam_width", cutoff * 0.75)
        if not (0 < cutoff <= 180 and 0 <= beam <= cutoff):
            raise SceneError(f"{node.describe()}: need 0 < beam_width <= cutoff_angle <= 180 degrees, got "
                             f"beam_width={beam}, cutoff_angle={cutoff}", node.source)
        cutoff, beam = math.radians(cutoff), math.radians(beam)
        row = dataclasses.replace(row, spot_cos_cutoff=math.cos(cutoff), spot_cutoff=cutoff,
                                  spot_cos_beam=math.cos(beam),
                                  spot_inv_transition=1.0 / (cutoff - beam) if cutoff > beam else 0.0,
                                  spot_uv_factor=math.tan(cutoff))
        if node.has("texture"):
            child = node.child("texture")
            if child is None:
                raise SceneError(f"{node.describe()}: 'texture' must be a nested texture plugin "
                                 "(spatially varying)", node.source)
            row = self._textured_row(row, add_texture(child))
        return self._set_to_world(node, row)

    def _projector(self, node, add_texture, texture_resolution):
        """Mitsuba's ``projector`` (tracer.emitters.projector): its film is the irradiance texture's
        resolution (1 x 1 for a constant), its ``fov`` along ``fov_axis`` (or ``focal_length``)."""
        scale = float(check_radiance(node, "scale", np.full(3, node.get_float("scale", 1.0)))[0])
        child = node.child("irradiance")
        width = height = 1
        if child is None:
            row = self._row(node, EmitterKind.PROJECTOR, scale * self._spectrum(node, "irradiance", 1.0))
        else:
            row = self._textured_row(self._row(node, EmitterKind.PROJECTOR, np.full(3, scale)), add_texture(child))
            width, height = texture_resolution(row.texture)
        fov, axis = sensors.field_of_view(node)
        if not (np.isfinite(fov) and 0 < fov < 180):
            raise SceneError(f"{node.describe()}: 'fov' must be in degrees, strictly between 0 and 180, got {fov}",
                             node.source)
        try:
            x_fov = float(cameras.x_fov_from(fov, axis, width, height))
        except ValueError as err:
            raise SceneError(f"{node.describe()}: {err}", node.source) from None
        if not 0 < x_fov < 180:
            raise SceneError(f"{node.describe()}: the horizontal field of view must be in (0, 180) degrees, "
                             f"got {x_fov:g}", node.source)
        row = dataclasses.replace(row, proj_cot=1.0 / math.tan(math.radians(x_fov) / 2), proj_aspect=width / height)
        return self._set_to_world(node, row)

    def _textured_row(self, row, tid):
        self._textured = True
        return dataclasses.replace(row, texture=int(tid))

    def _directional(self, node, add_texture):
        row = self._row(node, EmitterKind.DIRECTIONAL, self._spectrum(node, "irradiance", 1.0))

        def frame(direction):
            norm = np.linalg.norm(direction)
            if not norm > 0 or not np.isfinite(norm):
                raise SceneError(f"{node.describe()}: 'direction' must be a nonzero vector", node.source)
            m = np.eye(4)
            m[:3, 2] = direction / norm  # only the +z axis matters
            return m

        return self._set_to_world(node, row, "direction", frame)

    def _constant(self, node, add_texture):
        return self._row(node, EmitterKind.CONSTANT, self._spectrum(node, "radiance", 1.0))

    def _envmap(self, node, add_texture):
        path = node.get_path("filename")
        scale = node.get_float("scale", 1.0)
        node.get_bool("mis_compensation", False)  # only reshapes sampling; the image converges alike
        if not np.isfinite(scale):
            raise SceneError(f"{node.describe()}: 'scale' must be finite, got {scale}", node.source)
        load = self._load_image
        if load is None:
            from tracer.io.images import load_image as load
        image = np.asarray(load(path), np.float32)
        if image.ndim == 2:
            image = image[:, :, None]
        if image.shape[2] < 3:
            image = np.repeat(image[:, :, :1], 3, axis=2)
        image = image[:, :, :3]
        h, w = image.shape[:2]
        if w < 2 or h < 3:
            raise SceneError(f"{node.describe()}: the environment map must be at least 2x3 pixels, got {w}x{h}",
                             node.source)
        check_texels(node, path, image, scale)
        self._env = _Environment(image * np.float32(scale), *envmap.build_distribution(image))
        return self._set_to_world(node, self._row(node, EmitterKind.ENVMAP, np.ones(3)))

    # ------------------------------------------------------------------ helpers
    def _spectrum(self, node, name, default):
        if node.child(name) is not None:
            raise SceneError(f"{node.describe()}: a textured '{name}' is not supported (give an rgb or "
                             "a uniform spectrum)", node.source)
        return check_radiance(node, name, node.get_rgb(name, np.full(3, default)))

    def _set_to_world(self, node, row, alternative=None, make=None):
        """``row`` with to_world from 'to_world', or from ``alternative`` (position, direction) via
        ``make``."""
        if alternative is not None and node.has(alternative):
            if node.has("to_world"):
                raise SceneError(f"{node.describe()}: give only one of '{alternative}' and 'to_world'",
                                 node.source)
            to_world = make(node.get_vector(alternative))
        else:
            to_world = node.get_transform("to_world")
        return dataclasses.replace(row, to_world=_affine(to_world), to_local=_affine(_inverse(to_world, node)))

    def _row(self, node, kind, radiance, **fields):
        weight = node.get_float("sampling_weight", 1.0)
        if not (weight >= 0 and np.isfinite(weight)):
            raise SceneError(f"{node.describe()}: 'sampling_weight' must be finite and non-negative, got "
                             f"{weight}", node.source)
        return EmitterRow(kind=kind, radiance=np.asarray(radiance, np.float32), weight=weight, **fields)

    def _append(self, row):
        self._rows.append(row)
        return len(self._rows) - 1

    # ------------------------------------------------------------------ packing
    def build(self, scene_bounds_min: ArrayLike, scene_bounds_max: ArrayLike) -> Emitters:
        """The ``Emitters`` table; the bounds (3,) are the scene's bounding box (all shapes)."""
        rows = self._rows
        count = len(rows)
        if not rows:  # nothing to sample: one black point light that is never chosen
            rows = [EmitterRow(kind=EmitterKind.POINT, radiance=np.zeros(3, np.float32), weight=0.0)]
        weights = np.array([r.weight for r in rows], np.float64)
        pmf = weights / weights.sum() if weights.sum() > 0 else np.zeros_like(weights)

        no_triangle = np.zeros((1, 3))
        tris = self._triangles or [_MeshTriangles(no_triangle, no_triangle, no_triangle, np.zeros((3, 1, 3)),
                                                  np.zeros((3, 1, 2)), np.ones(1, np.float32))]
        p0, e1, e2 = (np.concatenate([getattr(t, k) for t in tris]).T.astype(np.float32) for k in ("p0", "e1", "e2"))
        tri_n = np.concatenate([t.normals for t in tris], axis=1).transpose(0, 2, 1).astype(np.float32)
        tri_uv = np.concatenate([t.uvs for t in tris], axis=1).transpose(0, 2, 1).astype(np.float32)
        tri_cdf = np.concatenate([t.cdf for t in tris])

        env = self._env
        if env is None:
            env = _Environment(np.zeros((3, 2, 3), np.float32),
                               *envmap.build_distribution(np.ones((3, 2, 3), np.float32)))
        h, w = env.rgb.shape[:2]
        steps = max(discrete.steps_for(max(t.p0.shape[0] for t in tris)), discrete.steps_for(w),
                    discrete.steps_for(h - 1))

        center, radius = _bounding_sphere(scene_bounds_min, scene_bounds_max)
        kinds = sorted({r.kind for r in rows})
        area_shapes = sorted({r.area_shape for r in rows if r.kind == EmitterKind.AREA})
        return Emitters(
            kind=column(rows, "kind", np.int32), radiance=stacked(rows, "radiance"),
            select_pmf=on_device(pmf, np.float32), select_cdf=on_device(discrete.inclusive_cdf(weights)),
            to_world=stacked(rows, "to_world"), to_local=stacked(rows, "to_local"),
            shape=column(rows, "shape", np.int32), area_shape=column(rows, "area_shape", np.int32),
            flip=column(rows, "flip", bool), inv_area=column(rows, "inv_area", np.float32),
            tri_offset=column(rows, "tri_offset", np.int32), tri_count=column(rows, "tri_count", np.int32),
            tri_cdf=on_device(tri_cdf), tri_p0=on_device(p0), tri_e1=on_device(e1), tri_e2=on_device(e2),
            tri_n=on_device(tri_n), tri_uv=on_device(tri_uv),
            spot_cos_cutoff=column(rows, "spot_cos_cutoff", np.float32),
            spot_cutoff=column(rows, "spot_cutoff", np.float32),
            spot_cos_beam=column(rows, "spot_cos_beam", np.float32),
            spot_inv_transition=column(rows, "spot_inv_transition", np.float32),
            spot_uv_factor=column(rows, "spot_uv_factor", np.float32),
            texture=column(rows, "texture", np.int32),
            proj_cot=column(rows, "proj_cot", np.float32), proj_aspect=column(rows, "proj_aspect", np.float32),
            env_rgb=on_device(np.ascontiguousarray(env.rgb.transpose(2, 0, 1))),
            env_density=on_device(env.density), env_row_cdf=on_device(env.row_cdf),
            env_col_cdf=on_device(env.col_cdf),
            sphere_center=on_device(center), sphere_radius=on_device(radius),
            count=count, kinds_present=tuple(kinds), area_shapes_present=tuple(area_shapes),
            environment=self._environment, textured=self._textured, search_steps=steps,
        )


def _bounding_sphere(lo, hi):
    """Mitsuba's ``set_scene``: the box's bounding sphere, radius enlarged by (1 + RayEpsilon)."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo <= hi)):
        return np.zeros(3, np.float32), np.float32(RAY_EPSILON)
    center = 0.5 * (lo + hi)
    radius = max(RAY_EPSILON, float(np.linalg.norm(hi - center)) * (1.0 + RAY_EPSILON))
    return center.astype(np.float32), np.float32(radius)
