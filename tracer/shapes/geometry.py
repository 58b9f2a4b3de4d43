"""The scene's geometry: triangles and analytic shapes, their intersection and surface data.

``Geometry`` is a pytree of structure-of-arrays tables. Primitive ids are [0, T) for triangles
and [T, T + A) for spheres, disks and cylinders. ``closest_hit`` and ``occluded`` are the one
seam behind which the acceleration structure lives (brute force for small scenes, a BVH
otherwise); ``surface_interaction`` turns any backend's ``Hit`` into positions, normals and uvs
the way Mitsuba 3 computes them (``Mesh``, ``Sphere``, ``Disk`` and ``Cylinder``
``compute_surface_interaction``), and
``spawn_ray``/``spawn_ray_to`` offset new rays as Mitsuba's ``Interaction::offset_p``.

Shape groups (Mitsuba's ``shapegroup``) keep their primitives once, in object space, after the
world-space ones in each table; instances place them (``tracer.shapes.instancing``). The backends
answer world primitives as before and instances in JAX: a two-level BVH (``tracer.shapes.instance_bvh``)
or, for small scenes, brute force per instance. Embree places the instances' triangles itself,
with its own instancing (``host_instances``), where the instances hold few analytic shapes
(spheres, disks...: up to HOST_INSTANCES_ANALYTIC_MAX over all instances), which JAX then tests
by brute force per instance; with more of them, and with Warp's BVH (no instancing), the engine
takes the world's triangles and the JAX two-level BVH the instances.
"""
import dataclasses
import warnings
from typing import Any, NamedTuple, Sequence, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpy.typing import ArrayLike as HostArrayLike

from tracer.shapes import bvh as bvh_traversal
from tracer.shapes import bvh_kernel
from tracer.shapes import bvh_build
from tracer.shapes import curves, sdfgrid
from tracer.shapes import instancing
from tracer.shapes import surface_uv
from tracer.shapes import instance_bvh as two_level
from tracer.shapes import intersect as isect
from tracer import lanes
from tracer import vecmath as vm
from tracer.accel import embree, host, warp
from tracer.constants import PI, RAY_EPSILON, SHADOW_EPSILON, TWO_PI
from tracer.shapes.intersect import Hit
from tracer.shapes.surface_point import SurfacePoint, select_point
from tracer.errors import EngineNotice
from tracer.kinds import SurfaceKind
from tracer.pytree import owned, pytree_dataclass, static
from tracer.table_rows import on_device

__all__ = [
    "Hit", "Geometry", "MeshShape", "AnalyticShape", "Instance", "AttributeSlot", "SurfaceInteraction", "cylinder_to_world",
    "analytic_bounds", "build_geometry", "closest_hit", "occluded", "surface_interaction", "primitive_shape",
    "spawn_ray", "spawn_ray_to",
]

# Below this many primitives brute force beats the BVH: on 2 cores, 65k incoherent rays at a
# torus, brute force / BVH Mrays/s were 6.7 / 5.5 at 64 triangles, 5.0 / 4.0 at 128, 2.7 / 4.0
# at 256; brute force also compiles in 0.5 s against 3-5 s.
AUTO_BVH_MIN = 192
# From this many triangles Embree, called from XLA, beats brute force on CPUs even below
# AUTO_BVH_MIN (2 cores, 64 spp, second render, November 29): the Cornell box's 36 triangles 5.30
# against 4.59 s a frame at 256x256, examples/lamp.xml's 34 3.41 against 2.81 s and
# examples/textures.xml's 20 2.13 against 1.99 s at 192x192; examples/inverse.xml's 12 1.91 against
# 2.09 s (brute force). Embree's hit is recomputed by the same watertight test either way.
EMBREE_MIN = 16


# Where a triangle's fields lie in its record (``Geometry.tri_records``). One gather of a
# triangle's 24 floats (one or two cache lines) instead of one a float: the same time on a
# 16k-triangle table, 2.4-3.3x faster on 1.3M triangles (9 floats of 65,536 random lanes, 2 cores).
RECORD = {"p0": slice(0, 3), "p1": slice(3, 6), "p2": slice(6, 9), "n0": slice(9, 12), "n1": slice(12, 15),
          "n2": slice(15, 18), "uv0": slice(18, 20), "uv1": slice(20, 22), "uv2": slice(22, 24)}


@pytree_dataclass
class Geometry:
    """T triangles (world space) and A analytic primitives; vectors are components first."""

    v0: jnp.ndarray          # (3, T) corner p0 (the brute-force search's columns)
    v1: jnp.ndarray          # (3, T) p1 as given (the watertight test needs the shared vertices exactly)
    v2: jnp.ndarray          # (3, T) p2 as given
    # (T, 24) a triangle's record, what a hit reads of its triangle in one gather (RECORD's
    # slices): corners p0, p1, p2, vertex shading normals n0, n1, n2 (zero where absent), uvs uv0,
    # uv1, uv2 (Mitsuba's default (0,0), (1,0), (0,1)).
    tri_records: jnp.ndarray
    has_normals: jnp.ndarray  # (T,) bool: false -> the face normal shades
    tri_shape: jnp.ndarray   # (T,) int32 shape index of each triangle
    attr_corner: jnp.ndarray  # (3, Cv, T) vertex-attribute channels at each corner (Cv = 0 without any)
    attr_face: jnp.ndarray    # (Cf, T) face-attribute channels
    analytic_kind: jnp.ndarray      # (A,) int32 SurfaceKind.SPHERE, DISK or CYLINDER
    analytic_to_world: jnp.ndarray  # (3, 4, A) affine object-to-world
    analytic_to_local: jnp.ndarray  # (3, 4, A) its inverse
    analytic_shape: jnp.ndarray     # (A,) int32 shape index
    sdf_values: jnp.ndarray         # (V,) float32 the values of every sdfgrid's grid, one after another
    sdf_grids: jnp.ndarray          # (G, 5) int32 per sdfgrid: first value, R x, y, z, smooth normals
    bvh: bvh_traversal.BvhArrays | None  # when accel == 'bvh'
    host_handle: jnp.ndarray  # () int32 handle of an engine's scene (accel 'embree', 'warp'), else 0
    host_scene: embree.EmbreeScene | host.HostScene | None = owned()  # what the handle names (None in copies)
    instance_to_world: jnp.ndarray | None = None  # (3, 4, I) affine, instances sorted by group; None without
    instance_to_local: jnp.ndarray | None = None  # (3, 4, I) its inverse
    instance_bvh: two_level.InstanceBvh | None = None  # unless instances are tested by brute force
    n_triangles: int = static(default=0)  # all of them: world ones [0, n_world_triangles), then the groups'
    n_analytic: int = static(default=0)
    n_world_triangles: int = static(default=0)
    n_world_analytic: int = static(default=0)
    groups: tuple[instancing.GroupSpan, ...] = static(default=())  # a GroupSpan per shape group
    n_instances: int = static(default=0)
    host_instances: bool = static(default=False)  # Embree answers the instances' triangles too
    analytic_kinds: tuple[int, ...] = static(default=())  # the kinds present: surface data is computed for those only
    # The mesh attributes kept (those textures read), as AttributeSlots: vertex ones first.
    attribute_slots: tuple["AttributeSlot", ...] = static(default=())
    accel: str = static(default="brute")  # 'brute' or 'bvh' (the pure-JAX backend), 'embree' or 'warp'

    @property
    def triangles(self) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        return (self.v0, self.v1, self.v2)

    @property
    def analytic(self) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        return (self.analytic_kind, self.analytic_to_world, self.analytic_to_local)

    def close(self) -> None:
        """Free what a host engine built for this geometry (copies share it: close the original)."""
        if self.host_scene is not None:
            self.host_scene.close()


@pytree_dataclass
class SurfaceInteraction:
    """Surface data of N hits (Mitsuba's ``SurfaceInteraction3f``); undefined where not valid."""

    p: jnp.ndarray      # (3, N) position
    ng: jnp.ndarray     # (3, N) geometric normal (not flipped toward the ray)
    ns: jnp.ndarray     # (3, N) shading normal
    uv: jnp.ndarray     # (2, N) surface uv
    dp_du: jnp.ndarray  # (3, N) position partials along the surface uv (Mitsuba's dp_du, dp_dv):
    dp_dv: jnp.ndarray  # (3, N)   the shading frame's tangent follows dp_du
    shape: jnp.ndarray  # (N,) int32 shape index, -1 where not valid
    valid: jnp.ndarray  # (N,) bool: the ray hit something
    prim: jnp.ndarray | None = None  # (N,) int32 primitive id, -1 where not valid
    t: jnp.ndarray | None = None     # (N,) distance along the ray
    attributes: jnp.ndarray | None = None  # (C, N) the geometry's attribute channels at the hit; None without any


# ---------------------------------------------------------------------------------------------
# Host-side construction.

class MeshShape(NamedTuple):
    """A shape's triangles in world space, as ``build_geometry`` takes them."""

    positions: np.ndarray        # (V, 3)
    faces: np.ndarray            # (F, 3) vertex indices
    normals: np.ndarray | None   # (V, 3) shading normals, or None (the face normal shades)
    uvs: np.ndarray | None       # (V, 2), or None (Mitsuba's default per-triangle uvs)
    shape: int                   # the scene's shape index
    attributes: dict | None = None  # Mitsuba's mesh attributes: 'vertex_*' (V, dim), 'face_*' (F, dim)
    group: int = -1              # the shape group it belongs to (then in object space), -1 for none


class AttributeSlot(NamedTuple):
    """Where a mesh attribute lives among the channels of ``SurfaceInteraction.attributes``."""

    name: str    # 'vertex_...' (interpolated over the triangle) or 'face_...' (constant on it)
    first: int   # its first channel
    width: int   # 1, or 3 (RGB; an attribute of width 1 on some meshes is repeated there)


class AnalyticShape(NamedTuple):
    """A sphere, a disk or a cylinder: ``to_world`` maps the unit sphere, the unit disk in z = 0,
    or the unit-radius tube 0 <= z <= 1 (as Mitsuba's plugins); or a curve segment."""

    kind: int                    # SurfaceKind.SPHERE, DISK, CYLINDER, or a curve segment's
    to_world: np.ndarray         # (4, 4)
    shape: int                   # the scene's shape index
    group: int = -1              # the shape group it belongs to (to_world is then to object space)
    local: np.ndarray | None = None  # (4, 4) what to_local holds: to_world's inverse when None
                                     # (a curve segment packs data in both: tracer.shapes.curves)


class SdfGrid(NamedTuple):
    """The grid of an ``sdfgrid`` (its voxels are ``AnalyticShape``s of kind SDF_VOXEL naming it)."""

    values: np.ndarray           # (Z, Y, X) float32, each axis at least 2
    smooth: bool                 # Mitsuba's normals="smooth" (else "analytic")


class Instance(NamedTuple):
    """A shape group placed in the world (Mitsuba's ``instance``)."""

    group: int                   # index of the shape group (the ``group`` of its shapes)
    to_world: np.ndarray         # (4, 4) affine, invertible


def cylinder_to_world(p0: HostArrayLike, p1: HostArrayLike, radius: float) -> np.ndarray:
    """Host: Mitsuba's cylinder frame (4, 4): translate(p0) to_frame(Frame(d / |d|)) scale(r, r, |d|)
    with d = p1 - p0, the frame's tangents from Duff et al.'s ``coordinate_system`` (as Mitsuba).
    Compose ``to_world @ cylinder_to_world(...)`` for a shape's own transform."""
    p0, p1 = np.asarray(p0, np.float64), np.asarray(p1, np.float64)
    d = p1 - p0
    length = np.linalg.norm(d)
    n = d / length
    sign = np.copysign(1.0, n[2])
    a = -1.0 / (sign + n[2])
    b = n[0] * n[1] * a
    s = np.array([1.0 + sign * n[0] * n[0] * a, sign * b, -sign * n[0]])
    t = np.array([b, sign + n[1] * n[1] * a, -n[1]])
    m = np.eye(4)
    m[:3, :3] = np.stack([s * radius, t * radius, d], axis=1)
    m[:3, 3] = p0
    return m


class _TriangleColumns(NamedTuple):
    """T triangles, components first (what Geometry holds, before it goes to the device)."""

    p: tuple          # (p0, p1, p2), each (3, T) float32
    n: tuple          # (n0, n1, n2), each (3, T) float32, zero where the mesh has no normals
    has_normals: np.ndarray  # (T,) bool
    uv: tuple         # (uv0, uv1, uv2), each (2, T) float32
    shape: np.ndarray  # (T,) int32


def _corners(values, faces, width):
    """Per-corner columns of vertex ``values`` (V, width): three (width, F) float32 arrays."""
    values = np.asarray(values, np.float32).reshape(-1, width)
    return tuple(values[faces[:, k]].T for k in range(3))


def _triangle_columns(meshes):
    parts = []
    for mesh in map(lambda m: MeshShape(*m), meshes):
        faces = np.asarray(mesh.faces, np.int64).reshape(-1, 3)
        f = faces.shape[0]
        p = _corners(mesh.positions, faces, 3)
        n = _corners(mesh.normals, faces, 3) if mesh.normals is not None else (np.zeros((3, f), np.float32),) * 3
        if mesh.uvs is not None:
            uv = _corners(mesh.uvs, faces, 2)
        else:  # Mitsuba's Mesh without texcoords reports uv = (b1, b2).
            uv = tuple(np.tile(np.array(c, np.float32)[:, None], (1, f)) for c in ((0, 0), (1, 0), (0, 1)))
        parts.append(_TriangleColumns(p, n, np.full(f, mesh.normals is not None), uv, np.full(f, mesh.shape, np.int32)))
    if not parts:
        empty = lambda rows: (np.zeros((rows, 0), np.float32),) * 3
        return _TriangleColumns(empty(3), empty(3), np.zeros(0, bool), empty(2), np.zeros(0, np.int32))
    cat = lambda get: np.concatenate([get(part) for part in parts], axis=-1)
    corners = lambda field: tuple(cat(lambda part: getattr(part, field)[k]) for k in range(3))
    return _TriangleColumns(corners("p"), corners("n"), cat(lambda part: part.has_normals), corners("uv"),
                            cat(lambda part: part.shape))


def _attribute_columns(meshes, names):
    """Host: (slots, per-corner vertex channels (3, Cv, T), face channels (Cf, T)) of the named
    attributes over the meshes' triangles, in ``_triangle_columns`` order; meshes without an
    attribute hold zeros. Widths other than 1 and 3 are refused (Mitsuba cannot evaluate them)."""
    meshes = [MeshShape(*m) for m in meshes]
    slots, first = [], 0
    for name in sorted(names, key=lambda n: (n.startswith("face_"), n)):
        widths = {np.shape(m.attributes[name])[1] for m in meshes if m.attributes and name in m.attributes}
        if not widths or not widths <= {1, 3}:
            raise ValueError(f"attribute {name!r} has widths {sorted(widths)} (1 or 3 are evaluated)")
        width = 1 if widths == {1} else 3
        slots.append(AttributeSlot(name, first, width))
        first += width
    vertex_slots = [s for s in slots if not s.name.startswith("face_")]
    face_slots = [s for s in slots if s.name.startswith("face_")]
    corner = [np.zeros((3, sum(s.width for s in vertex_slots), 0), np.float32)]
    face = [np.zeros((sum(s.width for s in face_slots), 0), np.float32)]
    for mesh in meshes:
        faces = np.asarray(mesh.faces, np.int64).reshape(-1, 3)
        table = _attribute_table(mesh, vertex_slots, len(mesh.positions))
        corner.append(np.stack([table[faces[:, k]].T for k in range(3)]))
        face.append(_attribute_table(mesh, face_slots, len(faces)).T)
    return tuple(slots), np.concatenate(corner, axis=-1), np.concatenate(face, axis=-1)


def _attribute_table(mesh, slots, rows):
    """(rows, channels) float32: the mesh's values of the attributes in ``slots``, an attribute of
    width 1 repeated over a slot of 3, zeros for one the mesh lacks."""
    parts = [np.zeros((rows, 0), np.float32)]
    for slot in slots:
        values = (mesh.attributes or {}).get(slot.name)
        values = np.zeros((rows, 1), np.float32) if values is None else np.asarray(values, np.float32)
        parts.append(np.broadcast_to(values, (rows, slot.width)))
    return np.concatenate(parts, axis=1)


def _analytic_arrays(analytic):
    """(kind (A,), to_world (3, 4, A), to_local (3, 4, A), shape (A,)) of AnalyticShapes."""
    analytic = [AnalyticShape(*a) for a in analytic]
    kind = np.array([a.kind for a in analytic], np.int32)
    to_world = np.stack([np.asarray(a.to_world, np.float64) for a in analytic]) if analytic else np.zeros((0, 4, 4))
    to_local = np.stack([np.linalg.inv(a.to_world) if a.local is None else np.asarray(a.local, np.float64)
                         for a in analytic]) if analytic else np.zeros((0, 4, 4))
    shape = np.array([a.shape for a in analytic], np.int32)
    cols = lambda m: np.ascontiguousarray(m[:, :3, :4].transpose(1, 2, 0), np.float32)
    return kind, cols(to_world), cols(to_local), shape


def analytic_bounds(kind: np.ndarray, to_world: np.ndarray,
                    to_local: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """World boxes (3, A) as Mitsuba's ``bbox()``: spheres from center and radius, disks from their
    corners, cylinders from the circles at their two ends, curve segments (``curves.bounds``), SDF
    voxels (``sdfgrid.bounds``); to_world, to_local (3, 4, A) float32 (to_local is needed only for
    curve segments and SDF voxels)."""
    center = to_world[:, 3]
    radius = np.sqrt(np.sum(to_world[:, 0].astype(np.float64) ** 2, axis=0))
    corners = [to_world[:, 3] + sx * to_world[:, 0] + sy * to_world[:, 1] for sx in (-1, 1) for sy in (-1, 1)]
    lo = np.where(kind == SurfaceKind.SPHERE, center - radius, np.minimum.reduce(corners))
    hi = np.where(kind == SurfaceKind.SPHERE, center + radius, np.maximum.reduce(corners))
    # Cylinder: the ends' circles reach sqrt(x1^2 + x2^2) along each axis around their centers.
    m = to_world.astype(np.float64)
    reach = np.sqrt(m[:, 0] ** 2 + m[:, 1] ** 2)
    lo = np.where(kind == SurfaceKind.CYLINDER, np.minimum(m[:, 3], m[:, 3] + m[:, 2]) - reach, lo)
    hi = np.where(kind == SurfaceKind.CYLINDER, np.maximum(m[:, 3], m[:, 3] + m[:, 2]) + reach, hi)
    if kind.size and np.isin(kind, SurfaceKind.CURVES).any():
        assert to_local is not None, "curve segments need to_local"
        c_lo, c_hi = curves.bounds(kind, to_world, to_local)
        is_curve = np.isin(kind, SurfaceKind.CURVES)
        lo, hi = np.where(is_curve, c_lo, lo), np.where(is_curve, c_hi, hi)
    is_voxel = kind == SurfaceKind.SDF_VOXEL
    if is_voxel.any():
        assert to_local is not None, "SDF voxels need to_local"
        lo, hi = lo.astype(np.float64), hi.astype(np.float64)
        lo[:, is_voxel], hi[:, is_voxel] = sdfgrid.bounds(to_world[..., is_voxel], to_local[..., is_voxel])
    # Round outward so the float32 box contains the float64 one.
    return (np.nextafter(lo.astype(np.float32), -np.inf), np.nextafter(hi.astype(np.float32), np.inf))


BACKENDS = ("embree", "warp", "jax")
# Engines outside XLA, built on the host: Embree is called from XLA (tracer.accel.embree), Warp
# through a host callback (tracer.accel.host).
HOST_ENGINES = {"embree": embree, "warp": warp}
_fallback_said = False
# Beside Embree's instancing, the instances' analytic shapes are tested by brute force per
# instance where they hold this many in all, at most; past it, by a two-level BVH of their own
# (it compiles some 18 s longer; brute force runs as fast at 72 shapes, 0.66x as fast at 360).
HOST_INSTANCES_ANALYTIC_MAX = 64
# On GPUs the world's analytic shapes are tested by brute force beside the triangles' kernel where
# there are this many at most (a GPU's batch is millions of rays: brute force costs a pass over
# them a shape); past it, the XLA traversal of one tree of both (tracer.shapes.bvh).
KERNEL_ANALYTIC_BESIDE_MAX = 16


def _say_fallback(reason: str) -> None:
    """Once a process: why 'auto' uses the pure-JAX BVH where Embree would serve."""
    global _fallback_said
    if not _fallback_said:
        _fallback_said = True
        warnings.warn(EngineNotice(f"{embree.MISSING} ({reason}): using the pure-JAX BVH"), stacklevel=3)


def resolve_accel(accel: str, n_primitives: int, n_host: int | None = None) -> str:
    """The structure behind ``accel``: 'auto', 'embree', 'warp', 'jax' (brute force below
    AUTO_BVH_MIN primitives, else a BVH), or one of the pure-JAX structures 'brute' and 'bvh'
    forced. Returns 'embree', 'warp', 'brute' or 'bvh'. ``n_host``: the primitives a host engine
    would hold (the world's triangles, and the groups' where it places the instances itself;
    ``n_primitives`` counts each instance's).

    'auto' is Embree on CPUs where it would hold AUTO_BVH_MIN primitives or more, and in a scene
    of fewer primitives where it would hold EMBREE_MIN triangles or more; else
    the pure-JAX brute force below AUTO_BVH_MIN primitives, the pure-JAX BVH from there. Where
    Embree would serve a scene of AUTO_BVH_MIN primitives or more but cannot (its extension not
    built, its library missing), 'auto' says so once, as an ``EngineNotice``, and uses the BVH (a
    smaller scene takes brute force, within some 20% of Embree there, without a word)."""
    n_host = n_primitives if n_host is None else n_host
    if accel == "auto":
        small = n_primitives < AUTO_BVH_MIN
        least = EMBREE_MIN if small else AUTO_BVH_MIN
        host_worth = n_host >= least and jax.default_backend() == "cpu"
        reason = embree.unavailable_reason() if host_worth else None
        if reason and not small:
            _say_fallback(reason)
        accel = "embree" if host_worth and not reason else "jax"
    if accel == "embree" and (reason := embree.unavailable_reason()):
        raise ImportError(f"{embree.MISSING}: {reason}")
    if accel == "warp" and not warp.available():
        raise ImportError(warp.MISSING)
    if accel == "jax":
        accel = "bvh" if n_primitives >= AUTO_BVH_MIN else "brute"
    if accel not in (*HOST_ENGINES, "brute", "bvh"):
        raise ValueError(f"unknown intersection backend {accel!r}: expected auto, {', '.join(BACKENDS)} (or brute, bvh)")
    if n_primitives == 0:
        return "brute"
    return accel


def _in_group_order(items):
    """World items (group -1) first, then each group's, each in the order given."""
    order = sorted(range(len(items)), key=lambda i: items[i].group)  # stable: -1 first
    return [items[i] for i in order]


def _spans(meshes, analytic, instances, n_groups):
    """A ``GroupSpan`` per group, from group-ordered meshes, analytic shapes and instances."""
    tri_counts = np.zeros(n_groups + 1, np.int64)
    for m in meshes:
        tri_counts[m.group + 1] += np.asarray(m.faces).reshape(-1, 3).shape[0]
    count = lambda items: np.bincount([it.group + 1 for it in items], minlength=n_groups + 1)
    starts = lambda c: np.concatenate([[0], np.cumsum(c)])
    t, a, i = starts(tri_counts), starts(count(analytic)), starts(np.concatenate([[0], count(instances)[1:]]))
    return tuple(instancing.GroupSpan(int(t[g + 1]), int(t[g + 2]), int(a[g + 1]), int(a[g + 2]),
                                      int(i[g + 1]), int(i[g + 2])) for g in range(n_groups))


def build_geometry(meshes: Sequence[MeshShape], analytic: Sequence[AnalyticShape], accel: str = "auto",
                   leaf_size: int = bvh_traversal.LEAF_SIZE, attributes: Sequence[str] = (),
                   instances: Sequence[Instance] = (), robust: bool = False,
                   sdf_grids: Sequence[SdfGrid] = ()) -> "Geometry":
    """Host: the scene's geometry from meshes and analytic shapes, and instances of shape groups.

    Shapes of ``group`` -1 are in world space; the others in their group's object space, seen
    only through ``instances`` (every group has at least one shape). accel: see
    ``resolve_accel``. With Embree or Warp, the analytic shapes are tested in JAX by brute force,
    and instances with the two-level BVH. ``attributes``: the names of the mesh attributes to
    keep (what the scene's ``mesh_attribute`` textures read); ``surface_interaction`` then
    evaluates them at every hit. The Geometry owns what a host engine built: ``close()`` frees it.
    ``robust``: Embree's watertight (slower) triangle test, as Mitsuba's scene property
    ``embree_use_robust_intersections``; off by default, as in Mitsuba. ``sdf_grids``: the grids
    that SDF voxels among the analytic shapes name (tracer.shapes.sdfgrid).
    """
    meshes = _in_group_order([MeshShape(*m) for m in meshes])
    analytic = _in_group_order([AnalyticShape(*a) for a in analytic])
    instances = sorted((Instance(*i) for i in instances), key=lambda i: i.group)
    n_groups = 1 + max([m.group for m in meshes] + [a.group for a in analytic] + [i.group for i in instances], default=-1)
    spans = _spans(meshes, analytic, instances, n_groups)
    tri = _triangle_columns(meshes)
    slots, attr_corner, attr_face = _attribute_columns(meshes, attributes)
    kind, to_world, to_local, analytic_shape = _analytic_arrays(analytic)
    n_tri, n_analytic = tri.shape.size, kind.size
    n_world_tri = spans[0].tri_start if spans else n_tri
    n_world_analytic = spans[0].analytic_start if spans else n_analytic
    per_group = [s.tri_end - s.tri_start + s.analytic_end - s.analytic_start for s in spans]
    n_effective = n_world_tri + n_world_analytic + sum(per_group[i.group] for i in instances)
    # Embree places the instances' triangles itself (each group's held once); their analytic
    # shapes are JAX's: by brute force per instance where the instances hold few, else in a
    # two-level BVH over the groups' analytic shapes alone.
    n_placed_analytic = sum(spans[i.group].analytic_end - spans[i.group].analytic_start for i in instances)
    n_embree = n_tri if instances else n_world_tri
    accel = resolve_accel(accel, n_effective, n_host=n_embree)
    host_instances = accel == "embree" and bool(instances)
    if accel in HOST_ENGINES and (n_embree if host_instances else n_world_tri) == 0:
        accel, host_instances = ("brute" if not instances and n_effective < AUTO_BVH_MIN else "bvh"), False
    lo = np.minimum(np.minimum(tri.p[0], tri.p[1]), tri.p[2])
    hi = np.maximum(np.maximum(tri.p[0], tri.p[1]), tri.p[2])
    a_lo, a_hi = analytic_bounds(kind, to_world, to_local)
    bvh = None
    # The BVH holds the world's triangles and analytic primitives; beside a host engine (which
    # takes the triangles), the analytic ones where brute force would be slow (an sdfgrid's voxels).
    bvh_tri = n_world_tri if accel == "bvh" else 0
    # On GPUs one Pallas kernel traverses a tree of triangles (tracer.shapes.bvh_kernel): a few
    # analytic shapes of the world are then tested beside it by brute force, as beside Embree.
    beside = (accel == "bvh" and bvh_kernel.runs_here() and n_world_tri > 0
              and n_world_analytic <= KERNEL_ANALYTIC_BESIDE_MAX)
    in_tree = 0 if beside else n_world_analytic
    if (accel == "bvh" or accel in HOST_ENGINES and n_world_analytic >= AUTO_BVH_MIN) and bvh_tri + in_tree:
        world = np.r_[0:bvh_tri, n_tri:n_tri + in_tree]
        prim_lo, prim_hi = np.concatenate([lo, a_lo], axis=1), np.concatenate([hi, a_hi], axis=1)
        tree = bvh_build.thread(bvh_build.build_bvh(prim_lo[:, world], prim_hi[:, world], max_leaf=leaf_size))
        world_analytic = (kind[:in_tree], to_world[..., :in_tree], to_local[..., :in_tree])
        bvh = bvh_traversal.make_arrays(tree, tuple(p[:, :bvh_tri] for p in tri.p), world_analytic,
                                        leaf_size=leaf_size)
    engine = HOST_ENGINES.get(accel)
    options: dict[str, Any] = {"robust": robust} if accel == "embree" else {}
    if host_instances:
        options["groups"] = [(span.tri_start, *(p[:, span.tri_start:span.tri_end] for p in tri.p)) for span in spans]
        options["instances"] = [(i.group, i.to_world) for i in instances]
    host_scene = engine.build(*(p[:, :n_world_tri] for p in tri.p), **options) if engine else None
    instance_fields: dict[str, Any] = {}  # arrays and the InstanceBvh
    if instances:
        m = np.stack([np.asarray(i.to_world, np.float64) for i in instances])
        cols = lambda a: on_device(np.ascontiguousarray(a[:, :3, :4].transpose(1, 2, 0), np.float32))
        instance_fields = dict(instance_to_world=cols(m), instance_to_local=cols(np.linalg.inv(m)))
        boxes = (np.concatenate([lo, a_lo], axis=1), np.concatenate([hi, a_hi], axis=1))
        if accel != "brute" and not host_instances:
            instance_fields["instance_bvh"] = two_level.make_arrays(
                spans, *boxes, m, tri.p, (kind, to_world, to_local), leaf_size=leaf_size)
        elif host_instances and n_placed_analytic > HOST_INSTANCES_ANALYTIC_MAX:
            instance_fields["instance_bvh"] = two_level.make_analytic_arrays(
                spans, *boxes, m, tri.p, (kind, to_world, to_local), leaf_size=leaf_size)
    j = on_device
    (p0, p1, p2), (n0, n1, n2), (uv0, uv1, uv2) = tri.p, tri.n, tri.uv
    sdf_values, sdf_table = _sdf_tables(sdf_grids)
    return Geometry(
        v0=j(p0), v1=j(p1), v2=j(p2),
        tri_records=j(np.ascontiguousarray(np.concatenate([p0, p1, p2, n0, n1, n2, uv0, uv1, uv2]).T, np.float32)),
        has_normals=j(tri.has_normals), tri_shape=j(tri.shape),
        attr_corner=j(attr_corner), attr_face=j(attr_face), attribute_slots=slots,
        analytic_kind=j(kind), analytic_to_world=j(to_world), analytic_to_local=j(to_local),
        analytic_shape=j(analytic_shape), sdf_values=sdf_values, sdf_grids=sdf_table, bvh=bvh, host_handle=on_device(host_scene.handle if host_scene else 0, np.int32),
        host_scene=host_scene, n_triangles=int(n_tri), n_analytic=int(n_analytic),
        n_world_triangles=int(n_world_tri), n_world_analytic=int(n_world_analytic), groups=spans,
        n_instances=len(instances), host_instances=host_instances, analytic_kinds=tuple(sorted({int(k) for k in kind})), accel=accel,
        **instance_fields)


def _sdf_tables(grids: Sequence[SdfGrid]) -> tuple[jax.Array, jax.Array]:
    """The geometry's ``sdf_values`` and ``sdf_grids`` from the scene's grids."""
    grids = [SdfGrid(*g) for g in grids]
    values = [np.asarray(g.values, np.float32).ravel() for g in grids]
    first = np.concatenate([[0], np.cumsum([v.size for v in values])])[:-1]
    rows = [[int(f), *np.asarray(g.values).shape[::-1], int(g.smooth)] for f, g in zip(first, grids)]
    table = np.array(rows, np.int32).reshape(-1, sdfgrid.GRID_COLUMNS)
    return on_device(np.concatenate(values) if values else np.zeros(0, np.float32)), on_device(table)


# ---------------------------------------------------------------------------------------------
# Queries (traced).

# Queries end in an optimization barrier: otherwise XLA fuses the (primitives x rays) search into
# each consumer of its result and recomputes it there -- 50x slower inside the path loop.

def _held(o, d, t_max):
    """The rays, out of differentiation: which primitive a ray meets is piecewise constant (path
    replay, ``tracer.integrators.replay``, holds it fixed), and a host engine's callback has no
    derivative rule. The identity in the primal program."""
    return jax.lax.stop_gradient((o, d, t_max))


def closest_hit(geometry: Geometry, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> Hit:
    """Closest hit of rays o, d (3, N) (d unit length) with 0 < t < t_max (N,) or scalar; in a
    scene with instances, ``Hit.instance`` says which one (-1 for the world's primitives)."""
    o, d, t_max = _held(o, d, t_max)
    if geometry.n_triangles + geometry.n_analytic == 0:
        return isect.miss(o[0])
    hit = _world_closest_hit(geometry, o, d, t_max)
    if geometry.n_instances and (not geometry.host_instances or _placed_analytic(geometry)):
        q = _instances_closest_hit(geometry, o, d, jnp.minimum(t_max, hit.t))
        closer = q.prim >= 0  # the bound makes any instance hit the closer one (q.instance is -1 elsewhere)
        instance = q.instance if hit.instance is None else jnp.where(closer, q.instance, hit.instance)
        hit = Hit(t=jnp.where(closer, q.t, hit.t), prim=jnp.where(closer, q.prim, hit.prim),
                  u=jnp.where(closer, q.u, hit.u), v=jnp.where(closer, q.v, hit.v), instance=instance)
    return jax.lax.optimization_barrier(hit)


def occluded(geometry: Geometry, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> jax.Array:
    """(N,) bool: something lies along the ray at 0 < t < t_max."""
    o, d, t_max = _held(o, d, t_max)
    if geometry.n_triangles + geometry.n_analytic == 0:
        return jnp.zeros_like(o[0], bool)
    blocked = _world_occluded(geometry, o, d, t_max)
    if geometry.n_instances and (not geometry.host_instances or _placed_analytic(geometry)):
        t_max = jnp.where(blocked, 0.0, t_max)  # lanes already blocked ask nothing
        to_local = cast(jax.Array, geometry.instance_to_local)  # set where there are instances
        if geometry.instance_bvh is not None:
            q = two_level.occluded(geometry.instance_bvh, to_local, o, d, t_max)
        else:
            q = instancing.occluded(geometry.triangles, geometry.analytic, to_local, _jax_groups(geometry),
                                    o, d, t_max, geometry.analytic_kinds)
        blocked = blocked | q
    return jax.lax.optimization_barrier(blocked)


def _world(geometry):
    """The tables of the primitives in world space (the shape groups' follow them)."""
    if not geometry.groups:
        return geometry.triangles, geometry.analytic
    n_tri, n_analytic = geometry.n_world_triangles, geometry.n_world_analytic
    return tuple(p[:, :n_tri] for p in geometry.triangles), tuple(a[..., :n_analytic] for a in geometry.analytic)


def _analytic_beside(geometry) -> bool:
    """Whether the world's BVH holds its triangles alone and its analytic shapes are tested
    beside it (on GPUs, for the traversal kernel; static)."""
    return geometry.bvh is not None and geometry.bvh.leaf_analytic.shape[0] == 0 and geometry.n_world_analytic > 0


def _world_prim(geometry, prim):
    """Ids of a query over the world's tables (analytic after the world's triangles) as the
    geometry's (analytic after every triangle)."""
    shift = geometry.n_triangles - geometry.n_world_triangles
    return jnp.where(prim >= geometry.n_world_triangles, prim + shift, prim) if shift else prim


def _world_closest_hit(geometry, o, d, t_max):
    """The closest hit among the world's primitives (and the instances, where the engine has them)."""
    tri, analytic = _world(geometry)
    if geometry.host_instances:
        return _engine_closest_hit(geometry, o, d, t_max)
    if geometry.n_world_triangles + geometry.n_world_analytic == 0:
        hit = isect.miss(o[0])
    elif geometry.accel == "bvh":
        hit = bvh_traversal.closest_hit(geometry.bvh, tri, analytic, o, d, t_max,
                                        corners=geometry.tri_records)
        if _analytic_beside(geometry):
            q = isect.closest_hit(_no_triangles(), analytic, o, d, t_max, geometry.analytic_kinds)
            hit = _nearer(hit, q, geometry.n_world_triangles)
    elif geometry.accel in HOST_ENGINES:
        return _engine_closest_hit(geometry, o, d, t_max)
    else:
        hit = isect.closest_hit(tri, analytic, o, d, t_max, geometry.analytic_kinds,
                                corners=geometry.tri_records)
    return Hit(t=hit.t, prim=_world_prim(geometry, hit.prim), u=hit.u, v=hit.v)


def _world_occluded(geometry, o, d, t_max):
    tri, analytic = _world(geometry)
    if geometry.n_world_triangles + geometry.n_world_analytic == 0 and not geometry.host_instances:
        return jnp.zeros_like(o[0], bool)
    if geometry.accel == "bvh":
        blocked = bvh_traversal.occluded(geometry.bvh, o, d, t_max)
        if _analytic_beside(geometry):
            blocked = blocked | _analytic_occluded(geometry, analytic, o, d, t_max)
        return blocked
    if geometry.accel in HOST_ENGINES:
        query = embree.occluded if geometry.accel == "embree" else host.occluded
        blocked = query(geometry.host_handle, o, d, t_max)
        if geometry.bvh is not None:  # the world's analytic primitives, many
            blocked = blocked | bvh_traversal.occluded(geometry.bvh, o, d, t_max)
        elif geometry.n_world_analytic:
            blocked = blocked | _analytic_occluded(geometry, analytic, o, d, t_max)
        return blocked
    return isect.occluded(tri, analytic, o, d, t_max, geometry.analytic_kinds)


def _analytic_occluded(geometry, analytic, o, d, t_max):
    """Occlusion by the world's analytic shapes alone, by brute force (beside Embree or the kernel)."""
    return isect.occluded(_no_triangles(), analytic, o, d, t_max, geometry.analytic_kinds)


def _instances_closest_hit(geometry, o, d, t_max):
    if geometry.instance_bvh is not None:
        return two_level.closest_hit(geometry.instance_bvh, geometry.instance_to_local, geometry.triangles,
                                     geometry.analytic, o, d, t_max, corners=geometry.tri_records)
    return instancing.closest_hit(geometry.triangles, geometry.analytic, geometry.instance_to_local,
                                  _jax_groups(geometry), o, d, t_max, geometry.analytic_kinds)


def _placed_analytic(geometry) -> bool:
    """Whether the shape groups hold analytic shapes (static)."""
    return any(s.analytic_end > s.analytic_start for s in geometry.groups)


def _jax_groups(geometry):
    """The groups' spans JAX's brute force per instance tests: beside Embree's instancing, the
    groups with analytic shapes, without their triangles (Embree's)."""
    if not geometry.host_instances:
        return geometry.groups
    return tuple(s._replace(tri_end=s.tri_start) for s in geometry.groups if s.analytic_end > s.analytic_start)


def _no_triangles():
    empty = jnp.zeros((3, 0), jnp.float32)
    return (empty, empty, empty)


def _engine_closest_hit(geometry, o, d, t_max):
    tri, analytic = _world(geometry)
    no_analytic = tuple(a[..., :0] for a in analytic)
    corners = geometry.tri_records  # (the exact test reads its first 9 columns)
    # t and (u, v) again from the winner with our own watertight test: every backend then gives
    # the same hit data for the same primitive (Embree's barycentrics differ in the 4th digit).
    if geometry.host_instances:  # an instance's triangle tested in its object space, as the JAX backends do
        t, prim, instance = embree.closest_hit_instanced(geometry.host_handle, o, d, t_max)
        placed = instance >= 0
        o_local, d_local = instancing.object_rays(cast(jax.Array, geometry.instance_to_local), instance, o, d)
        hit = isect.exact_hit(geometry.triangles, no_analytic, vm.select(placed, o_local, o),
                              vm.select(placed, d_local, d), prim, t, corners=corners)
    else:
        query = embree.closest_hit if geometry.accel == "embree" else host.closest_hit
        t, prim = query(geometry.host_handle, o, d, t_max)
        instance = None
        hit = isect.exact_hit(tri, no_analytic, o, d, prim, t, corners=corners)
    hit = dataclasses.replace(hit, instance=instance)
    if geometry.n_world_analytic:
        if geometry.bvh is not None:  # the world's analytic primitives, many
            q = bvh_traversal.closest_hit(geometry.bvh, _no_triangles(), analytic, o, d, t_max)
        else:
            q = isect.closest_hit(_no_triangles(), analytic, o, d, t_max, geometry.analytic_kinds)
        hit = _nearer(hit, q, geometry.n_triangles)
    return hit


def _nearer(hit: Hit, q: Hit, shift: int) -> Hit:
    """``hit``, or the analytic shapes' hit ``q`` where nearer (its ids moved up by ``shift``, the
    triangles before them; a world shape, so no instance)."""
    closer = q.t < hit.t
    instance = None if hit.instance is None else jnp.where(closer, -1, hit.instance)
    return Hit(t=jnp.where(closer, q.t, hit.t), prim=jnp.where(closer, q.prim + shift, hit.prim),
               u=jnp.where(closer, q.u, hit.u), v=jnp.where(closer, q.v, hit.v), instance=instance)


def primitive_shape(geometry: Geometry, prim: jax.Array) -> jax.Array:
    """Shape index of primitive ids (N,); -1 for -1."""
    t = geometry.n_triangles
    shape = jnp.full(prim.shape, -1, jnp.int32)
    if t:
        shape = jnp.where((prim >= 0) & (prim < t), geometry.tri_shape[jnp.clip(prim, 0, t - 1)], shape)
    if geometry.n_analytic:
        shape = jnp.where(prim >= t, lanes.take(geometry.analytic_shape, jnp.clip(prim - t, 0, geometry.n_analytic - 1)), shape)
    return shape


def _triangle_fields(geo: Geometry, i: jax.Array) -> dict[str, jax.Array]:
    """The record fields (``RECORD``) of triangles i (N,), each (3 or 2, N), in one gather."""
    r = geo.tri_records[i].T
    return {name: r[part] for name, part in RECORD.items()}


def _triangle_surface(geo, hit):
    """The ``SurfacePoint`` of triangle hits."""
    i = jnp.clip(hit.prim, 0, geo.n_triangles - 1)
    f = _triangle_fields(geo, i)
    u, v = hit.u, hit.v
    w = 1.0 - u - v
    e1, e2 = f["p1"] - f["p0"], f["p2"] - f["p0"]  # (float32 differences: exact as the host's)
    p = f["p0"] + u * e1 + v * e2
    # Materialized: its many (3, N) consumers (the shading normal, the partials' fallback) would
    # each take the cross product again for each of their rows.
    ng = jax.lax.optimization_barrier(vm.normalize(vm.cross(e1, e2)))
    ns = vm.normalize(f["n0"] * w + f["n1"] * u + f["n2"] * v)
    ns = vm.select(geo.has_normals[i], ns, ng)
    uv = f["uv0"] * w + f["uv1"] * u + f["uv2"] * v
    dp_du, dp_dv = _triangle_partials(e1, e2, f["uv1"] - f["uv0"], f["uv2"] - f["uv0"], ng)
    return SurfacePoint(p, ng, ns, uv, dp_du, dp_dv)


def _triangle_partials(e1, e2, duv0, duv1, ng):
    """(dp_du, dp_dv) of triangles as Mitsuba's ``Mesh::compute_surface_interaction``: from the
    edges and the uv differences along them, ``coordinate_system(ng)`` where those are degenerate.
    (A mesh without uvs has (0,0), (1,0), (0,1) here: dp_du = e1, dp_dv = e2 exactly, as there.)"""
    det = duv0[0] * duv1[1] - duv0[1] * duv1[0]
    inv_det = 1.0 / jnp.where(det != 0, det, 1.0)
    dp_du = (duv1[1] * e1 - duv0[1] * e2) * inv_det
    dp_dv = (duv0[0] * e2 - duv1[0] * e1) * inv_det
    fallback_u, fallback_v = vm.coordinate_system(ng)
    return vm.select(det != 0, dp_du, fallback_u), vm.select(det != 0, dp_dv, fallback_v)


def _attributes(geo, hit):
    """(C, N) attribute channels at triangle hits, as Mitsuba's ``Mesh::interpolate_attribute``:
    vertex attributes v0 w + (v1 u + v2 v) (barycentrics), face attributes as they are."""
    i = jnp.clip(hit.prim, 0, geo.n_triangles - 1)
    parts = []
    if geo.attr_corner.shape[1]:
        a = geo.attr_corner[:, :, i]
        parts.append(a[0] * (1.0 - hit.u - hit.v) + (a[1] * hit.u + a[2] * hit.v))
    if geo.attr_face.shape[0]:
        parts.append(geo.attr_face[:, i])
    values = jnp.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
    return jnp.where((hit.prim >= 0) & (hit.prim < geo.n_triangles), values, 0.0)


def _analytic_surface(geo, o, d, hit):
    """The ``SurfacePoint`` of hits on analytic shapes, each from its kind's function."""
    q = jnp.clip(hit.prim - geo.n_triangles, 0, geo.n_analytic - 1)
    to_world, to_local = lanes.take(geo.analytic_to_world, q), lanes.take(geo.analytic_to_local, q)
    t = jnp.where(jnp.isfinite(hit.t), hit.t, 0.0)
    # Materialized once for the kinds' many reads (fused, XLA would gather per read).
    to_world, to_local, p_ray = jax.lax.optimization_barrier((to_world, to_local, o + t * d))
    # Only the kinds the scene has (a disk-only scene spent 12% of its time on sphere uvs).
    fields = {}
    if SurfaceKind.SPHERE in geo.analytic_kinds:
        fields[SurfaceKind.SPHERE] = _sphere_surface(p_ray, to_world, to_local)
    if SurfaceKind.DISK in geo.analytic_kinds:
        fields[SurfaceKind.DISK] = _disk_surface(p_ray, to_world, to_local, hit)
    if SurfaceKind.CYLINDER in geo.analytic_kinds:
        fields[SurfaceKind.CYLINDER] = _cylinder_surface(p_ray, to_world, to_local)
    curve_kinds = tuple(k for k in SurfaceKind.CURVES if k in geo.analytic_kinds)
    if curve_kinds:  # one set of fields for both curve kinds, keyed by the first
        fields[curve_kinds[0]] = curves.surface(geo.analytic_kind[q], curve_kinds, p_ray, to_world, to_local, hit.u)
    if SurfaceKind.SDF_VOXEL in geo.analytic_kinds:  # no uvs, no partials (Mitsuba's sdfgrid)
        ng, ns = sdfgrid.surface(p_ray, to_world, to_local, geo.sdf_values, geo.sdf_grids)
        zero = jnp.zeros_like(p_ray)
        fields[SurfaceKind.SDF_VOXEL] = SurfacePoint(p=p_ray, ng=ng, ns=ns, uv=zero[:2], dp_du=zero, dp_dv=zero)
    kinds = sorted(fields)
    out = fields[kinds[0]]
    for kind in kinds[1:]:
        mine = geo.analytic_kind[q] == kind
        if kind in SurfaceKind.CURVES:
            mine = (geo.analytic_kind[q] == SurfaceKind.LINEAR_CURVE) | (geo.analytic_kind[q] == SurfaceKind.BSPLINE_CURVE)
        out = select_point(mine, fields[kind], out)
    return out


def _sphere_surface(p_ray, to_world, to_local):
    """The ``SurfacePoint`` of sphere hits."""
    # Sphere (sphere.cpp): the normal from the center, the point re-projected onto the surface,
    # uv = (phi / 2 pi, theta / pi) of the point in the object frame. A mirroring to_world turns
    # the normals inward (Mitsuba flips them when the decomposed scale is negative).
    center, radius = isect.sphere_center_radius(to_world)
    n_sph = vm.normalize(p_ray - center)
    p_sph = center + n_sph * radius
    local = vm.transform_point(to_local, p_sph)
    uv_sph = surface_uv.sphere_uv(local)
    det = (to_world[0, 0] * (to_world[1, 1] * to_world[2, 2] - to_world[1, 2] * to_world[2, 1])
           - to_world[0, 1] * (to_world[1, 0] * to_world[2, 2] - to_world[1, 2] * to_world[2, 0])
           + to_world[0, 2] * (to_world[1, 0] * to_world[2, 1] - to_world[1, 1] * to_world[2, 0]))
    n_sph = vm.select(det < 0, -n_sph, n_sph)
    # dp/du = 2 pi (-y, x, 0), dp/dv = pi (z cos phi, z sin phi, -r_xy) in the object frame; at the
    # poles dp/du vanishes (the frame then falls back on coordinate_system) and dp/dv is pi e_x.
    rd = jnp.sqrt(local[0] * local[0] + local[1] * local[1])
    inv_rd = 1.0 / jnp.where(rd != 0, rd, 1.0)
    zero = jnp.zeros_like(rd)
    dp_du = vm.transform_vector(to_world, jnp.stack([-local[1], local[0], zero])) * TWO_PI
    dp_dv = jnp.stack([local[2] * local[0] * inv_rd, local[2] * local[1] * inv_rd, -rd])
    dp_dv = vm.select(rd == 0, jnp.stack([zero + 1.0, zero, zero]), dp_dv)
    dp_dv = vm.transform_vector(to_world, dp_dv) * PI
    return SurfacePoint(p=p_sph, ng=n_sph, ns=n_sph, uv=uv_sph, dp_du=dp_du, dp_dv=dp_dv)


def _disk_surface(p_ray, to_world, to_local, hit):
    """The ``SurfacePoint`` of disk hits (disk.cpp): the transformed +z normal, uv =
    (r, phi / 2 pi) of the local hit, dp/du = (cos phi, sin phi, 0) and dp/dv = 2 pi r (-sin phi,
    cos phi, 0) in the object frame (zero at the center, as there)."""
    n_disk = vm.normalize(vm.transform_normal(to_local, jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0])[:, None], p_ray.shape)))
    uv_disk = surface_uv.disk_uv(hit.u, hit.v)
    r = uv_disk[0]
    inv_r = jnp.where(r != 0, 1.0 / jnp.where(r != 0, r, 1.0), 0.0)
    cos_phi, sin_phi, zero = hit.u * inv_r, hit.v * inv_r, jnp.zeros_like(r)
    dp_du = vm.transform_vector(to_world, jnp.stack([cos_phi, sin_phi, zero]))
    dp_dv = vm.transform_vector(to_world, jnp.stack([-sin_phi, cos_phi, zero])) * (TWO_PI * r)
    return SurfacePoint(p=p_ray, ng=n_disk, ns=n_disk, uv=uv_disk, dp_du=dp_du, dp_dv=dp_dv)


def _cylinder_surface(p_ray, to_world, to_local):
    """The ``SurfacePoint`` of cylinder hits (cylinder.cpp): uv = (phi / 2 pi, z) of the
    local hit, dp/du = 2 pi (-y, x, 0) and dp/dv = e_z in the object frame,
    n = normalize(dp/du x dp/dv) in world space, p pushed along n by 1 - r_local (Mitsuba's
    round-off correction, in local units as there). A mirroring to_world turns n inward; the
    loader folds that into the shape's flip_normals, as Mitsuba flips a negative scale."""
    local = vm.transform_point(to_local, p_ray)
    uv = surface_uv.cylinder_uv(local)
    dp_du = TWO_PI * (to_world[:, 1] * local[0] - to_world[:, 0] * local[1])
    dp_dv = jnp.broadcast_to(to_world[:, 2], dp_du.shape)
    n = vm.normalize(vm.cross(dp_du, dp_dv))
    p = p_ray + n * (1.0 - jnp.sqrt(local[0] * local[0] + local[1] * local[1]))
    return SurfacePoint(p=p, ng=n, ns=n, uv=uv, dp_du=dp_du, dp_dv=dp_dv)


def surface_interaction(geometry: Geometry, o: jax.Array, d: jax.Array, hit: Hit) -> SurfaceInteraction:
    """Positions, normals, uvs and uv partials of the hits (computed from ids, so any backend's
    Hit works).

    Triangles: p = p0 + u e1 + v e2, ng = normalize(e1 x e2), ns = the interpolated vertex normal
    (normalized) or ng, uv interpolated. Normals are not flipped toward the ray. An instance's
    surface is found in its object space and taken to the world (``instancing.surface_to_world``).
    """
    geo = geometry
    # With instances, the geometry's instance tables and the hit's instance are set (None without).
    if geo.n_instances:  # analytic surfaces are found from the ray: the instance's own
        o, d = instancing.object_rays(cast(jax.Array, geo.instance_to_local), cast(jax.Array, hit.instance), o, d)
    n = hit.prim.shape[0]
    valid = hit.prim >= 0
    p = jnp.zeros((3, n), jnp.float32)
    ng = ns = jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0], jnp.float32)[:, None], (3, n))
    uv = jnp.zeros((2, n), jnp.float32)
    dp_du, dp_dv = p, p
    out = SurfacePoint(p, ng, ns, uv, dp_du, dp_dv)
    if geo.n_triangles:
        is_tri = valid & (hit.prim < geo.n_triangles)
        out = select_point(is_tri, _triangle_surface(geo, hit), out)
    if geo.n_analytic:
        is_analytic = hit.prim >= geo.n_triangles
        out = select_point(is_analytic, _analytic_surface(geo, o, d, hit), out)
    p, ng, ns, uv, dp_du, dp_dv = out
    if geo.n_instances:
        p, ng, ns, dp_du, dp_dv = instancing.surface_to_world(cast(jax.Array, geo.instance_to_world),
                                                              cast(jax.Array, geo.instance_to_local),
                                                              cast(jax.Array, hit.instance), p, ng, ns, dp_du, dp_dv)
    attributes = _attributes(geo, hit) if geo.attribute_slots and geo.n_triangles else None
    return SurfaceInteraction(p=p, ng=ng, ns=ns, uv=uv, dp_du=dp_du, dp_dv=dp_dv,
                              shape=primitive_shape(geo, hit.prim), valid=valid,
                              prim=hit.prim, t=hit.t, attributes=attributes)


# ---------------------------------------------------------------------------------------------
# Spawning rays (Mitsuba's Interaction::spawn_ray / spawn_ray_to).

def offset_p(p: jax.Array, ng: jax.Array, d: jax.Array) -> jax.Array:
    """Move p along ng by (1 + max|p|) RayEpsilon, to the side d points to (Mitsuba's offset_p)."""
    mag = (1.0 + vm.max_component(jnp.abs(p))) * RAY_EPSILON
    # Materialized: fused into a (3, N) result, it was computed again for each of its rows.
    mag = jax.lax.optimization_barrier(jnp.copysign(mag, vm.dot(ng, d)))
    return p + mag * ng


def spawn_ray(p: jax.Array, ng: jax.Array, d: jax.Array) -> jax.Array:
    """Origin (3, N) of a ray leaving the surface at p (geometric normal ng) along d."""
    return offset_p(p, ng, d)


def spawn_ray_to(p: jax.Array, ng: jax.Array, target: jax.Array,
                 dist: jax.Array | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Shadow ray from the surface at p toward a point: (o, d, t_max), as Mitsuba's spawn_ray_to.

    ``target`` is a point (3, N); or, with ``dist`` (N,) given, a unit direction and the distance
    to the target along it, which may be inf (directional and environment lights): then t_max is
    inf and d is the direction itself. t_max stops (1 - ShadowEpsilon) short of the target so the
    target's own surface is not hit.
    """
    if dist is None:
        point, infinite = target, jnp.zeros(p.shape[1:], bool)
    else:
        infinite = ~jnp.isfinite(dist)
        point = p + target * jnp.where(infinite, 0.0, dist)
    direction = vm.select(infinite, target, point - p)
    o = offset_p(p, ng, direction)
    to_target = point - o
    length = vm.norm(to_target)
    d_finite = to_target / jnp.where(length > 0, length, 1.0)
    d = vm.select(infinite, target, d_finite)
    t_max = jnp.where(infinite, np.inf, length * (1.0 - SHADOW_EPSILON))
    return o, d, t_max
