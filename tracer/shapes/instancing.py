"""Instances of shape groups (Mitsuba's ``shapegroup`` and ``instance``): one geometry, many places.

A shape group's primitives are stored once, in the group's object space, in the geometry's
tables (after the primitives that stand in world space); an instance is an affine ``to_world``
and the group it places. A ray meets an instance in object space: it is mapped by the
instance's inverse, o' = M^-1 o, d' = M^-1 d, with d' left unnormalized so that a hit's t is the
same in both spaces (Mitsuba's ``Instance::ray_intersect_preliminary``). The surface found there
goes back to world space as Mitsuba's ``Instance::compute_surface_interaction`` takes it: p by
M, normals by the inverse transpose, renormalized.

This module holds what every backend shares: the ray and surface transforms, the world boxes
of instances (host), and the brute-force query (each group's instances in one ``fori_loop``,
each testing the group's primitives). ``tracer.shapes.instance_bvh`` is the two-level BVH.
"""
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpy.typing import ArrayLike as HostArrayLike

from tracer.shapes import intersect as isect
from tracer import vecmath as vm

__all__ = ["GroupSpan", "transform_rays", "object_rays", "surface_to_world", "instance_bounds",
           "closest_hit", "occluded"]


class GroupSpan(NamedTuple):
    """Where a shape group's primitives and instances are (static: part of the compiled program).

    Ranges are [start, end) of the triangle table, the analytic table, and the instance table
    (instances are sorted by group)."""

    tri_start: int
    tri_end: int
    analytic_start: int
    analytic_end: int
    first_instance: int
    end_instance: int


def transform_rays(to_local: jax.Array, o: jax.Array, d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(o', d') = (M o + m, M d) for affine matrices to_local (3, 4[, N]) and rays (3, N)."""
    m = to_local if to_local.ndim == 3 else to_local[..., None]
    o_local = m[:, 0] * o[0] + m[:, 1] * o[1] + m[:, 2] * o[2] + m[:, 3]
    d_local = m[:, 0] * d[0] + m[:, 1] * d[1] + m[:, 2] * d[2]
    return o_local, d_local


def _per_lane(matrices: jax.Array, instance: jax.Array) -> jax.Array:
    """matrices (3, 4, I) of each lane's ``instance`` (N,) as (3, 4, N); the identity for -1."""
    m = matrices[..., jnp.maximum(instance, 0)]
    identity = jnp.eye(3, 4, dtype=matrices.dtype)[..., None]
    return jnp.where(instance >= 0, m, identity)


def object_rays(to_local: jax.Array, instance: jax.Array, o: jax.Array,
                d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Rays (3, N) in the object space of each lane's instance (N,) (unchanged where -1)."""
    return transform_rays(_per_lane(to_local, instance), o, d)


def surface_to_world(to_world: jax.Array, to_local: jax.Array, instance: jax.Array, p: jax.Array, ng: jax.Array,
                     ns: jax.Array, dp_du: jax.Array,
                     dp_dv: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """(p, ng, ns, dp_du, dp_dv) (3, N) found in object space, in world space where ``instance``
    >= 0: p by the instance's to_world, the uv partials by its linear part, normals by its inverse
    transpose (the transposed to_local), renormalized (as Mitsuba's ``Instance``)."""
    m_world, m_local = _per_lane(to_world, instance), _per_lane(to_local, instance)
    vector = lambda v: m_world[:, 0] * v[0] + m_world[:, 1] * v[1] + m_world[:, 2] * v[2]
    p_world = vector(p) + m_world[:, 3]
    normal = lambda n: vm.normalize(m_local[0, :3] * n[0] + m_local[1, :3] * n[1] + m_local[2, :3] * n[2])
    inside = instance >= 0
    return (vm.select(inside, p_world, p), vm.select(inside, normal(ng), ng), vm.select(inside, normal(ns), ns),
            vm.select(inside, vector(dp_du), dp_du), vm.select(inside, vector(dp_dv), dp_dv))


def instance_bounds(lo: np.ndarray, hi: np.ndarray, to_world: HostArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Host: world boxes (3, I) of instances whose groups have object boxes lo, hi (3, I), by
    the 8 transformed corners (Mitsuba's ``Instance::bbox``), rounded outward to float32."""
    to_world = np.asarray(to_world, np.float64)  # (I, 4, 4)
    corners = [np.where(np.array([x, y, z])[:, None], hi, lo) for x in (0, 1) for y in (0, 1) for z in (0, 1)]
    world = [np.einsum("iab,bi->ai", to_world[:, :3, :3], c) + to_world[:, :3, 3].T for c in corners]
    return (np.nextafter(np.minimum.reduce(world).astype(np.float32), -np.inf),
            np.nextafter(np.maximum.reduce(world).astype(np.float32), np.inf))


def _group_tables(tri: Sequence[jax.Array], analytic: Sequence[jax.Array],
                  span: GroupSpan) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """The group's own slices of the triangle and analytic tables (static slices)."""
    tri_g = tuple(p[:, span.tri_start:span.tri_end] for p in tri)
    analytic_g = tuple(a[..., span.analytic_start:span.analytic_end] for a in analytic)
    return tri_g, analytic_g


def _global_prim(span: GroupSpan, n_triangles: int, prim: jax.Array) -> jax.Array:
    """A group-local id of ``isect.closest_hit`` (triangles, then analytic) as the geometry's."""
    n_tri_g = span.tri_end - span.tri_start
    local = jnp.where(prim < n_tri_g, span.tri_start + prim, n_triangles + span.analytic_start + prim - n_tri_g)
    return jnp.where(prim >= 0, local, -1)


def closest_hit(tri: Sequence[jax.Array], analytic: Sequence[jax.Array], to_local: jax.Array,
                groups: Sequence[GroupSpan], o: jax.Array, d: jax.Array, t_max: ArrayLike,
                kinds: tuple[int, ...]) -> isect.Hit:
    """Brute-force closest hit over every instance: a Hit with ``instance`` set (-1 for a miss).

    tri (3, T) x 3 and analytic (kind, to_world, to_local) are the geometry's whole tables;
    ``groups`` a tuple of ``GroupSpan``s; to_local (3, 4, I); t_max (N,)."""
    n_triangles = tri[0].shape[1]
    best = isect.miss(o[0])
    best = isect.Hit(t=jnp.minimum(best.t, t_max), prim=best.prim, u=best.u, v=best.v,
                     instance=jnp.full_like(best.prim, -1))
    for span in groups:
        tri_g, analytic_g = _group_tables(tri, analytic, span)

        def visit(i, best, span=span, tri_g=tri_g, analytic_g=analytic_g):
            o_local, d_local = transform_rays(to_local[..., i], o, d)
            h = isect.closest_hit(tri_g, analytic_g, o_local, d_local, best.t, kinds)
            found = h.prim >= 0  # below best.t, the bound
            return isect.Hit(t=jnp.where(found, h.t, best.t), prim=jnp.where(found, _global_prim(span, n_triangles, h.prim),
                                                                              best.prim),
                             u=jnp.where(found, h.u, best.u), v=jnp.where(found, h.v, best.v),
                             instance=jnp.where(found, i, best.instance))

        best = jax.lax.fori_loop(span.first_instance, span.end_instance, visit, best)
    found = best.prim >= 0
    return isect.Hit(t=jnp.where(found, best.t, isect.INF), prim=best.prim, u=best.u, v=best.v, instance=best.instance)


def occluded(tri: Sequence[jax.Array], analytic: Sequence[jax.Array], to_local: jax.Array,
             groups: Sequence[GroupSpan], o: jax.Array, d: jax.Array, t_max: ArrayLike,
             kinds: tuple[int, ...]) -> jax.Array:
    """(N,) bool: some instance has a primitive at 0 < t < t_max along the ray (brute force)."""
    blocked = jnp.zeros_like(o[0], bool)
    for span in groups:
        tri_g, analytic_g = _group_tables(tri, analytic, span)

        def visit(i, blocked, tri_g=tri_g, analytic_g=analytic_g):
            o_local, d_local = transform_rays(to_local[..., i], o, d)
            return blocked | isect.occluded(tri_g, analytic_g, o_local, d_local, jnp.where(blocked, 0.0, t_max), kinds)

        blocked = jax.lax.fori_loop(span.first_instance, span.end_instance, visit, blocked)
    return blocked
