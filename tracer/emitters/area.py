"""Area lights: diffuse emission from the front side of a triangle mesh, rectangle, sphere, disk or
cylinder.

Sampling follows Mitsuba 3: a mesh picks a triangle by area with ``sample_reuse`` on u.y and a
point with the square-root triangle warp (``Mesh::sample_position``), a rectangle maps u onto its
square (``Rectangle::sample_position``: not as the two triangles it is intersected as, which low-
discrepancy samplers would feel), a disk maps u with the
concentric map (``Disk::sample_position``), a cylinder takes phi = 2 pi u.y and z = u.x
(``Cylinder::sample_position``: uniform in area); all convert the area density to solid angle
(``Shape::sample_direction``). A sphere seen from outside samples the cone it subtends
uniformly (``Sphere::sample_direction``, after Akalin's "sampling the visible sphere"), from
inside it samples its area. A sample is valid when it sees the emitting side:
``dot(d, n) < 0`` with n the oriented normal (``AreaLight::sample_direction``).

A textured radiance (Mitsuba's ``AreaLight`` with a spatially varying ``radiance``) is read at the
sampled point's uv, the point sampled as above. Mitsuba instead samples uv by the texture and
maps it onto the shape (``eval_parameterization``); both are unbiased where the shape's uv map
is one-to-one, so the images agree in expectation there (noise differs).

All normals here are oriented: the shape's ``flip_normals`` is applied, as Mitsuba's
``si.n`` / ``ds.n``. Mesh normals are interpolated vertex normals when the mesh has them,
as Mitsuba's ``Mesh::sample_position`` (the pdf then uses that normal's cosine, as Mitsuba).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from tracer import elementary, sampling

from tracer.shapes import surface_uv
from tracer import textures as tex
from tracer import lanes
from tracer import vecmath as vm
from tracer.constants import INV_TWO_PI, RAY_EPSILON, TWO_PI
from tracer.emitters import discrete
from tracer.kinds import SurfaceKind

if TYPE_CHECKING:
    from tracer.emitters.table import Emitters

__all__ = ["sample", "pdf", "eval_radiance"]

ONE_MINUS_EPS = np.float32(1.0 - 2.0**-24)


def _to_solid_angle(ref: jax.Array, p: jax.Array, n: jax.Array,
                    pdf_area: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Direction, distance and solid-angle pdf of an area sample (``Shape::sample_direction``)."""
    d = p - ref
    dist2 = vm.dot(d, d)
    dist = jnp.sqrt(dist2)
    d = d / jnp.where(dist > 0, dist, 1.0)
    x = dist2 / jnp.abs(vm.dot(d, n))
    return d, dist, pdf_area * jnp.where(jnp.isfinite(x), x, 0.0)


def _sample_mesh(em, e, ref, u):
    i, u1 = discrete.sample_reuse(em.tri_cdf, em.tri_offset[e], em.tri_count[e], u[1], em.search_steps)
    b = sampling.square_to_uniform_triangle(jnp.stack([u[0], u1]))
    p = lanes.take(em.tri_e1, i) * b[0] + (lanes.take(em.tri_e2, i) * b[1] + lanes.take(em.tri_p0, i))
    n = lanes.take(em.tri_n[0], i) * (1.0 - b[0] - b[1]) + lanes.take(em.tri_n[1], i) * b[0] + lanes.take(em.tri_n[2], i) * b[1]
    n = vm.normalize(n)
    n = vm.select(em.flip[e], -n, n)
    uv = lanes.take(em.tri_uv[0], i) * (1.0 - b[0] - b[1]) + lanes.take(em.tri_uv[1], i) * b[0] + lanes.take(em.tri_uv[2], i) * b[1]
    return p, n, *_to_solid_angle(ref, p, n, em.inv_area[e]), uv


def _sample_planar(em, e, ref, q, uv):
    """The point to_world (q.x, q.y, 0) of a disk or rectangle, its normal the inverse transpose
    applied to +z (Mitsuba's ``m_frame.n``)."""
    m = lanes.take(em.to_world, e)
    p = m[:, 0] * q[0] + m[:, 1] * q[1] + m[:, 3]
    n = vm.normalize(em.to_local[2][:3, e])
    n = vm.select(em.flip[e], -n, n)
    return p, n, *_to_solid_angle(ref, p, n, em.inv_area[e]), uv


def _sample_disk(em, e, ref, u):
    q = sampling.square_to_uniform_disk_concentric(u)
    return _sample_planar(em, e, ref, q, surface_uv.disk_uv(q[0], q[1]))


def _sample_rectangle(em, e, ref, u):
    """Mitsuba's ``Rectangle::sample_position``: u in [0, 1]^2 to (2 u - 1, 0) in [-1, 1]^2, whose
    uv is u itself."""
    return _sample_planar(em, e, ref, u * 2.0 - 1.0, u)


def _sample_cylinder(em, e, ref, u):
    """Mitsuba's ``Cylinder::sample_position``: the point to_world (cos, sin, u.x), the normal
    to_world's inverse transpose applied to (cos, sin, 0), flipped with ``flip`` -- which holds
    Mitsuba's flip for a mirroring to_world: there, unlike the normal at a ray hit, this one then
    points inward (Mitsuba's behaviour, kept)."""
    m = lanes.take(em.to_world, e)
    sin_phi, cos_phi = elementary.sincos(TWO_PI * u[1])
    p = m[:, 0] * cos_phi + m[:, 1] * sin_phi + m[:, 2] * u[0] + m[:, 3]
    n = vm.normalize(em.to_local[0][:3, e] * cos_phi + em.to_local[1][:3, e] * sin_phi)
    n = vm.select(em.flip[e], -n, n)
    uv = surface_uv.cylinder_uv(vm.transform_point(lanes.take(em.to_local, e), p))
    return p, n, *_to_solid_angle(ref, p, n, em.inv_area[e]), uv


def _sphere(em: Emitters, e: jax.Array) -> tuple[jax.Array, jax.Array]:
    return lanes.take(em.to_world[:, 3], e), vm.norm(lanes.take(em.to_world[:, 0], e))


def _sample_sphere(em, e, ref, u):
    center, radius = _sphere(em, e)
    flip = lanes.take(em.flip, e)
    dc = center - ref
    dc2 = vm.dot(dc, dc)
    radius_adj = radius * jnp.where(flip, 1.0 + RAY_EPSILON, 1.0 - RAY_EPSILON)
    outside = dc2 > radius_adj * radius_adj

    # Outside: uniform in the subtended cone, mapped back to the visible cap.
    inv_dc = 1.0 / jnp.sqrt(dc2)
    sin_max = radius * inv_dc
    sin_max2 = sin_max * sin_max
    inv_sin_max = 1.0 / sin_max
    cos_max = vm.safe_sqrt(1.0 - sin_max2)
    # Mitsuba's Taylor expansion below sin^2(1.5 deg), where 1 - cos cancels badly.
    sin2 = jnp.where(sin_max2 > 0.00068523, 1.0 - jnp.square((cos_max - 1.0) * u[0] + 1.0), sin_max2 * u[0])
    cos_t = vm.safe_sqrt(1.0 - sin2)
    cos_alpha = sin2 * inv_sin_max + cos_t * vm.safe_sqrt(1.0 - sin2 * inv_sin_max * inv_sin_max)
    sin_alpha = vm.safe_sqrt(1.0 - cos_alpha * cos_alpha)
    phi = u[1] * TWO_PI
    axis = -dc * inv_dc
    sin_phi, cos_phi = elementary.sincos(phi)
    # Materialized before they become vectors: XLA computes a (3, N) result per component, and
    # would redo the sines and cosines three times over.
    local, frame = jax.lax.optimization_barrier((jnp.stack([cos_phi * sin_alpha, sin_phi * sin_alpha, cos_alpha]),
                                                 vm.Frame(*vm.coordinate_system(axis), axis)))
    cap = vm.to_world(frame, local)
    cone_pdf = INV_TWO_PI / (1.0 - cos_max)

    # Inside: uniform over the area.
    whole = sampling.square_to_uniform_sphere(u)

    # Materialized: every output below reads the sampled direction, and fused into each XLA
    # would redo the sines, cosines and frame per output.
    n, outside, cone_pdf = jax.lax.optimization_barrier((vm.select(outside, cap, whole), outside, cone_pdf))
    p = n * radius + center
    uv = surface_uv.sphere_uv(vm.transform_point(lanes.take(em.to_local, e), p))
    n = vm.select(flip, -n, n)
    d, dist, area_pdf = _to_solid_angle(ref, p, n, lanes.take(em.inv_area, e))
    pdf = jnp.where(outside, jnp.where(dist == 0, 0.0, cone_pdf), area_pdf)
    return p, n, d, dist, pdf, uv


_SAMPLERS = {SurfaceKind.MESH: _sample_mesh, SurfaceKind.SPHERE: _sample_sphere, SurfaceKind.DISK: _sample_disk,
             SurfaceKind.CYLINDER: _sample_cylinder, SurfaceKind.RECTANGLE: _sample_rectangle}


def sample(em: Emitters, textures: tex.Textures, e: jax.Array, ref: jax.Array,
           u: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Sample area emitters ``e`` (N,) from ``ref`` (3, N) with u (2, N).

    Returns (p, n, d, dist, pdf, weight): the point, its oriented normal, the unit direction
    from ref, the distance, the solid-angle pdf (selection not included) and radiance / pdf;
    pdf and weight are zero where the sample sees the back side (or is degenerate). A textured
    radiance is read at the point's uv (``textures``), the point sampled as without texture.
    """
    shapes = em.area_shapes_present
    out = _SAMPLERS[shapes[0]](em, e, ref, u)
    for shape in shapes[1:]:
        other = _SAMPLERS[shape](em, e, ref, u)
        take = em.area_shape[e] == shape
        out = tuple(jnp.where(take, b, a) for a, b in zip(out, other))
    p, n, d, dist, pdf, uv = out
    valid = (vm.dot(d, n) < 0) & (pdf > 0) & jnp.isfinite(pdf)
    pdf = jnp.where(valid, pdf, 0.0)
    weight = jnp.where(valid, _radiance(em, textures, e, uv) / jnp.where(valid, pdf, 1.0), 0.0)
    return p, n, d, dist, pdf, weight


def pdf(em: Emitters, e: jax.Array, ref: jax.Array, p: jax.Array, n: jax.Array, d: jax.Array) -> jax.Array:
    """Solid-angle pdf (N,) of sampling point p (oriented normal n) of emitters ``e`` from ref
    along unit direction d (``AreaLight::pdf_direction``); zero on the back side."""
    dp = vm.dot(d, n)
    dist = vm.norm(p - ref)
    value = lanes.take(em.inv_area, e) * jnp.where(dp != 0, dist * dist / jnp.abs(dp), 0.0)
    if SurfaceKind.SPHERE in em.area_shapes_present:
        center, radius = _sphere(em, e)
        sin_alpha = radius / vm.norm(center - ref)
        cos_alpha = vm.safe_sqrt(1.0 - sin_alpha * sin_alpha)
        cone = (lanes.take(em.area_shape, e) == SurfaceKind.SPHERE) & (sin_alpha < ONE_MINUS_EPS)
        value = jnp.where(cone, INV_TWO_PI / (1.0 - cos_alpha), value)
    return jnp.where(dp < 0, value, 0.0)


def _radiance(em: Emitters, textures: tex.Textures, e: jax.Array, uv: jax.Array) -> jax.Array:
    """The radiance (3, N) of area emitters ``e`` at surface uv (2, N): times its texture there,
    if it has one."""
    if not em.textured:
        return lanes.take(em.radiance, e)
    tid = em.texture[e]
    texture = tex.eval_rgb(textures, jnp.maximum(tid, 0), uv)
    radiance = lanes.take(em.radiance, e)
    return jnp.where(tid >= 0, radiance * texture, radiance)


def eval_radiance(em: Emitters, textures: tex.Textures, e: jax.Array, n: jax.Array, d: jax.Array,
                  uv: jax.Array) -> jax.Array:
    """Radiance (3, N) leaving an area emitter towards -d (d: the ray's direction) at a point with
    oriented normal n and surface uv (2, N): the emitter's radiance (textured: at uv) on the front
    side, zero on the back (``AreaLight::eval``)."""
    return jnp.where(vm.dot(n, d) < 0, _radiance(em, textures, e, uv), 0.0)
