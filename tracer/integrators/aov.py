"""Arbitrary output variables of the camera rays' first hits, as Mitsuba 3's ``aov`` integrator.

For each camera ray, ``evaluate`` intersects the scene once more and returns the AOVs the scene's
``Settings.aovs`` lists ((K, N), channels in the order ``tracer.shared.aov_channel_names`` names
them); the work unit splats them with the radiance through the same reconstruction filter, so a
pixel's AOV is sum(f a) / sum(f), as Mitsuba's film develops its AOV channels. A miss gives
zeros (Mitsuba zeroes the interaction of an invalid hit). Per type (Mitsuba's aov.cpp):

- ``albedo``: the material's ``eval_diffuse_reflectance``: the diffuse reflectance (base color)
  of diffuse, plastic, roughplastic, principled and principledthin; for other BSDFs Mitsuba's
  default, pi f(wi, n) toward the shading normal (zero for smooth conductors and dielectrics).
  Composites (``blendbsdf``, ``mask``): the weighted sum of their leaves' (for a ``mask`` this
  weighs the leaf by its opacity, where Mitsuba's ``mask`` returns its leaf's unweighted).
- ``depth``: the hit's distance along the ray (from the near clip plane, where rays start);
  ``position``, ``uv``, ``geo_normal``, ``dp_du``, ``dp_dv``: the surface's, in world space.
- ``sh_normal``: the shading normal (after ``flip_normals``; a leaf's normal or bump map turns
  it, in world space: for a bump map Mitsuba 3.9.1 returns its local frame's normal instead).
- ``duv_dx``, ``duv_dy``: uv partials along the film from the camera's ray differentials, scaled
  by 1/sqrt(spp) as Mitsuba scales them, with the spp the scene's sampler names (not the
  render's: a job's samples must not depend on its spp, ``farm.tree``).
- ``prim_index``: the triangle's index in its mesh (in the mesh Mitsuba merges it into: after its
  merged predecessors' triangles), 0 for shapes Mitsuba makes one primitive (sphere, disk,
  cylinder; a rectangle is two triangles there too); ``shape_index``: 1 + the place of the shape
  (or of the instance it was hit through) in Mitsuba's ``scene->shapes()``, 0 for a miss: its
  loader's order, not the file's (``tracer.io.shape_order``: meshes merged and put last).
- ``moment_xyz``, ``moment_m2`` (Mitsuba's ``moment`` integrator, ``tracer.io.aovs``): the XYZ of
  the sample's radiance and its square.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from tracer import bsdfs

from tracer.shapes import geometry
from tracer import textures as tx
from tracer import vecmath as vm
from tracer.bsdfs import layers
from tracer.integrators.path import find_surfaces, fresh_paths
from tracer.constants import SRGB_TO_XYZ
from tracer.kinds import BsdfKind, Perturbation, Projection
from tracer.pytree import pytree_dataclass
from tracer.shared import MOMENT_TYPES

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["AovTables", "make_tables", "evaluate"]

# Kinds whose eval_diffuse_reflectance is their reflectance texture (Mitsuba's overrides).
_REFLECTANCE_KINDS = (BsdfKind.DIFFUSE, BsdfKind.PLASTIC, BsdfKind.ROUGHPLASTIC, *BsdfKind.PRINCIPLEDS)


@pytree_dataclass
class AovTables:
    """What the index AOVs read, per shape (S) and instance (I)."""

    shape_order: jnp.ndarray     # (S,) float32 1 + the shape's place among the world's shapes (0 in a group)
    first_prim: jnp.ndarray      # (S,) int32 the shape's first primitive id
    prim_offset: jnp.ndarray     # (S,) int32 primitives before its own in Mitsuba's merged mesh
    one_prim: jnp.ndarray        # (S,) bool: Mitsuba's shape is a single primitive
    instance_order: jnp.ndarray  # (max(I, 1),) float32 each instance's place, as shape_order


def make_tables(geo: geometry.Geometry, order: np.ndarray, one_prim: ArrayLike, instance_order: np.ndarray,
                prim_offset: ArrayLike) -> AovTables:
    """Host: ``AovTables`` from the geometry and the loader's per-shape ``order``, ``one_prim`` and
    ``prim_offset`` (S,) and the instances' places (I,), in the geometry's instance order
    (``tracer.io.shape_order``: places in Mitsuba's ``scene->shapes()``)."""
    shapes = np.concatenate([np.asarray(geo.tri_shape), np.asarray(geo.analytic_shape)]).astype(np.int64)
    first = np.zeros(len(order), np.int32)
    ids, index = np.unique(shapes, return_index=True)
    first[ids] = index
    instances = np.asarray(instance_order, np.float32) if len(instance_order) else np.zeros(1, np.float32)
    return AovTables(shape_order=jnp.asarray(np.asarray(order, np.float32)), first_prim=jnp.asarray(first),
                     prim_offset=jnp.asarray(np.asarray(prim_offset, np.int32)),
                     one_prim=jnp.asarray(np.asarray(one_prim, bool)), instance_order=jnp.asarray(instances))


def evaluate(scene: Scene, origin: jax.Array, direction: jax.Array, t_max: jax.Array, valid: jax.Array,
             radiance: jax.Array) -> jax.Array:
    """(K, N) float32: the AOVs of rays (origin, direction (3, N), t_max (N,)) from the camera,
    for ``valid`` (N,) rays (zeros elsewhere and for misses); a ``moment``'s channels come from
    the rays' ``radiance`` (3, N) (the XYZ of each sample and its square, hit or miss)."""
    kinds = [kind for _, kind in scene.settings.aovs]
    if set(kinds) <= set(MOMENT_TYPES):  # no hit to find
        return jnp.concatenate([_moment(kind, radiance) for kind in kinds], axis=0)
    state = fresh_paths(origin, direction, t_max, valid)
    surface = find_surfaces(scene, state, skip_hidden_emitters=False)
    instance = None
    if scene.geometry.n_instances and "shape_index" in kinds:
        # (find_surfaces keeps the hit's surface only: the instance hit is asked for again)
        instance = geometry.closest_hit(scene.geometry, origin, direction, jnp.where(valid, t_max, 0.0)).instance
    out = [_moment(kind, radiance) if kind in MOMENT_TYPES
           else jnp.where(surface.valid, _one(scene, kind, state, instance, surface), 0.0) for kind in kinds]
    return jnp.concatenate(out, axis=0)


def _moment(kind, radiance):
    """Mitsuba's ``moment``: the XYZ (3, N) of each sample's radiance (3, N), or its square."""
    xyz = jnp.asarray(SRGB_TO_XYZ, jnp.float32) @ radiance
    return xyz * xyz if kind == "moment_m2" else xyz


def _one(scene, kind, state, instance, surface):
    si = surface.si
    if kind == "albedo":
        return _albedo(scene, state, surface)
    if kind == "depth":
        return si.t[None]
    if kind == "position":
        return si.p
    if kind == "uv":
        return si.uv
    if kind == "geo_normal":
        return surface.ng
    if kind == "sh_normal":
        return _shading_normal(scene, state, surface)
    if kind in ("dp_du", "dp_dv"):
        return getattr(si, kind)
    if kind in ("duv_dx", "duv_dy"):
        return _uv_partials(scene, state, surface)[kind == "duv_dy"]
    tables, shape = scene.aov, surface.shape
    if kind == "prim_index":
        local = si.prim - tables.first_prim[shape] + tables.prim_offset[shape]
        return jnp.where(tables.one_prim[shape], 0, local).astype(jnp.float32)[None]
    order = tables.shape_order[shape]  # shape_index
    if instance is not None:
        order = jnp.where(instance >= 0, tables.instance_order[jnp.maximum(instance, 0)], order)
    return order[None]


def _albedo(scene, state, surface):
    """Mitsuba's ``eval_diffuse_reflectance`` of the material the ray meets (3, N)."""
    materials, textures, si = scene.materials, scene.textures, surface.si
    s, t, n = surface.frame
    mat = jnp.where(surface.front, scene.shapes.bsdf_front[surface.shape], scene.shapes.bsdf_back[surface.shape])
    mirror = ~surface.front & scene.shapes.flip_back[surface.shape]
    frame = vm.Frame(s, t, vm.select(mirror, -n, n))
    wi = vm.to_local(frame, -state.direction)
    at = tx.texture_point(si.uv, si.attributes)
    if materials.layers is None:
        return _leaf_albedo(materials, textures, mat, at, wi, surface.tangents)
    weight = layers.weights(materials.layers, textures, mat, at)
    total = jnp.zeros_like(wi)
    for slot in range(weight.shape[0]):
        leaf = jnp.maximum(materials.layers.leaf[slot, mat], 0)
        total = total + weight[slot] * _leaf_albedo(materials, textures, leaf, at, wi, surface.tangents)
    return total


def _leaf_albedo(materials, textures, mat, at, wi, tangents):
    kind = materials.kind[mat]
    up = jnp.stack([jnp.zeros_like(wi[0]), jnp.zeros_like(wi[0]), jnp.ones_like(wi[0])])
    value, _ = bsdfs.eval_pdf(materials, textures, mat, at, wi, up, tangents)
    value = value * np.float32(np.pi)
    if set(materials.kinds_present) & set(_REFLECTANCE_KINDS):
        reflectance = tx.eval_rgb(textures, materials.reflectance[mat], at,
                                  constant=not materials.is_textured("reflectance"))
        own = jnp.isin(kind, jnp.asarray(_REFLECTANCE_KINDS))
        value = vm.select(own, reflectance, value)
    return value


def _shading_normal(scene, state, surface):
    """The shading normal (3, N), turned by a leaf's normal or bump map."""
    materials = scene.materials
    frame = surface.frame
    if materials.perturbation is None:
        return frame.n
    mat = jnp.where(surface.front, scene.shapes.bsdf_front[surface.shape], scene.shapes.bsdf_back[surface.shape])
    wi = vm.to_local(frame, -state.direction)
    at = tx.texture_point(surface.si.uv, surface.si.attributes)
    pf = bsdfs.perturb.frame(materials.perturbation, scene.textures, mat, at, wi, surface.tangents)
    turned = vm.to_world(frame, pf.n)
    return vm.select(pf.kind != Perturbation.NONE, turned, frame.n)


def _uv_partials(scene, state, surface):
    """(duv_dx, duv_dy), each (2, N): Mitsuba's ``compute_uv_partials`` with the camera's ray
    differentials scaled by 1/sqrt(spp) (``SamplingIntegrator::render``)."""
    si = surface.si
    o, d = state.origin, state.direction
    o_x, d_x, o_y, d_y = _differentials(scene, o, d)
    n = surface.ng
    plane = vm.dot(n, si.p)
    points = []
    for oo, dd in ((o_x, d_x), (o_y, d_y)):
        t = (plane - vm.dot(n, oo)) / vm.dot(n, dd)
        points.append(oo + dd * t - si.p)
    a00, a01, a11 = vm.dot(si.dp_du, si.dp_du), vm.dot(si.dp_du, si.dp_dv), vm.dot(si.dp_dv, si.dp_dv)
    inv_det = 1.0 / (a00 * a11 - a01 * a01)
    inv_det = jnp.where(jnp.isfinite(inv_det), inv_det, 0.0)
    out = []
    for dp in points:
        b0, b1 = vm.dot(si.dp_du, dp), vm.dot(si.dp_dv, dp)
        duv = jnp.stack([a11 * b0 - a01 * b1, a00 * b1 - a01 * b0]) * inv_det
        out.append(jnp.where(jnp.isfinite(duv), duv, 0.0))
    return out


def _differentials(scene, o, d):
    """The camera rays one pixel over in x and in y (Mitsuba's ``sample_ray_differential``), moved
    toward the ray by 1/sqrt(spp): (o_x, d_x, o_y, d_y), each (3, N)."""
    camera, film = scene.camera, scene.film
    scale = np.float32(1.0 / np.sqrt(scene.settings.spp))
    local_d = vm.transform_vector(_inverse_rotation(camera), d)
    if camera.projection == Projection.ORTHOGRAPHIC:
        step_x = vm.transform_vector(camera.to_world, jnp.array([-2.0 / film.width, 0.0, 0.0])[:, None])
        step_y = vm.transform_vector(camera.to_world, jnp.array([0.0, -2.0 / (film.height * camera.aspect), 0.0])[:, None])
        return o + step_x * scale, d, o + step_y * scale, d
    # A pinhole through the near plane (z = 1): one pixel is 2 tan(fov / 2) / width there.
    near = local_d / local_d[2:3]
    dx = jnp.stack([jnp.full_like(near[0], -2.0) * camera.tan_half_fov / film.width, jnp.zeros_like(near[0]),
                    jnp.zeros_like(near[0])])
    dy = jnp.stack([jnp.zeros_like(near[0]), jnp.full_like(near[0], -2.0) * camera.tan_half_fov
                    / (camera.aspect * film.height), jnp.zeros_like(near[0])])
    world = lambda v: vm.normalize(vm.transform_vector(camera.to_world, vm.normalize(v)))
    d_x, d_y = world(near + dx), world(near + dy)
    return o, d + (d_x - d) * scale, o, d + (d_y - d) * scale


def _inverse_rotation(camera):
    """The camera's world-to-local linear map (3, 4) for directions (its to_world is affine)."""
    linear = jnp.linalg.inv(camera.to_world[:, :3])
    return jnp.concatenate([linear, jnp.zeros((3, 1), jnp.float32)], axis=1)
