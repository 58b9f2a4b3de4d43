"""Two-level stackless BVH in JAX: a top tree over instances, a bottom tree per shape group.

The top tree is built over the instances' world boxes with one instance per leaf; each shape
group has its own tree over its primitives in object space (``tracer.shapes.bvh``'s binned SAH trees,
threaded per octant). Both levels live in one node table: top nodes first, then the groups'
trees, so the traversal of ``tracer.shapes.bvh`` serves both with one extra column: a top leaf names
its instance (column 7), and reaching it *enters* the instance: the lane remembers where the top
walk resumes, maps its ray into the instance's object space (``instancing.transform_rays``,
unnormalized, so t is shared by both levels and the closest hit so far still bounds the boxes)
and walks the group's tree from its root. A group tree's walk ends with a -1 link, which takes
the lane back to its resume node and its world ray. A lane's state is six numbers; still no stack.

A lane that changes level stops its box steps for the iteration; its ray is then recomputed
with the others' (one gather of the instance's to_local). The top tree of I instances always
has 2 I - 1 nodes, so moving instances (an animated ``to_world``) changes the table's values,
never its shape: one compiled program serves every frame.
"""
import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from tracer.shapes import bvh as flat
from tracer.shapes import bvh_build
from tracer.shapes import instancing
from tracer.shapes import intersect as isect
from tracer import lanes
from tracer.pytree import pytree_dataclass
from tracer.table_rows import on_device

__all__ = ["InstanceBvh", "make_arrays", "make_analytic_arrays", "closest_hit", "occluded"]


@pytree_dataclass
class InstanceBvh:
    """Device tables of the two levels (``tree.nodes`` column 7: instance of a top leaf, else -1)."""

    tree: flat.BvhArrays  # top nodes [0, 2 I - 1), then every group's tree; leaves are the groups'
    roots: jnp.ndarray    # (I,) int32 first node of each instance's group tree


def _pack_group(span: instancing.GroupSpan, prim_lo: np.ndarray, prim_hi: np.ndarray, n_tri: int,
                leaf_size: int) -> bvh_build.ThreadedBvh:
    """Host: the threaded tree of one group over its object-space primitives (global ids)."""
    ids = np.concatenate([np.arange(span.tri_start, span.tri_end),
                          n_tri + np.arange(span.analytic_start, span.analytic_end)]).astype(np.int32)
    tree = bvh_build.thread(bvh_build.build_bvh(prim_lo[:, ids], prim_hi[:, ids], max_leaf=leaf_size))
    return bvh_build.ThreadedBvh(**{**tree.__dict__, "order": ids[tree.order]})


def make_arrays(groups: Sequence[instancing.GroupSpan], prim_lo: np.ndarray, prim_hi: np.ndarray,
                to_world: np.ndarray, tri: Sequence[np.ndarray], analytic: Sequence[np.ndarray],
                leaf_size: int = flat.LEAF_SIZE) -> InstanceBvh:
    """Host: the two-level tables.

    groups: the ``GroupSpan``s (none empty); prim_lo/hi (3, T + A) object boxes of every
    primitive (triangles, then analytic); to_world (I, 4, 4) of the instances (sorted by group,
    as the spans say); tri, analytic: the geometry's whole tables (numpy, as ``bvh.make_arrays``
    takes them)."""
    n_tri = tri[0].shape[1]
    spans = [np.concatenate([np.arange(s.tri_start, s.tri_end), n_tri + np.arange(s.analytic_start, s.analytic_end)])
             for s in groups]
    group_lo = np.stack([prim_lo[:, ids].min(axis=1) for ids in spans], axis=1)
    group_hi = np.stack([prim_hi[:, ids].max(axis=1) for ids in spans], axis=1)
    group_of = np.concatenate([np.full(s.end_instance - s.first_instance, g, np.int64) for g, s in enumerate(groups)])
    lo, hi = instancing.instance_bounds(group_lo[:, group_of], group_hi[:, group_of], to_world)
    top = bvh_build.thread(bvh_build.build_bvh(lo, hi, max_leaf=1))
    m_top = top.leaf.size
    instance = np.where(top.leaf >= 0, top.order[top.leaf_start[np.maximum(top.leaf, 0)]], -1)
    parts = [flat.make_arrays(_pack_group(s, prim_lo, prim_hi, n_tri, leaf_size), tri, analytic, leaf_size)
             for s in groups]
    nodes = [np.concatenate([top.lo.T, top.hi.T, np.full((m_top, 1), -1), instance[:, None]], axis=1)]
    links = [np.stack([top.hit, top.miss], axis=-1)]  # (8, M, 2)
    roots, first_node, first_leaf = [], m_top, 0
    for part in parts:
        n = np.array(part.nodes)
        m = n.shape[0]
        n[:, 6] = np.where(n[:, 6] >= 0, n[:, 6] + first_leaf, -1)
        n[:, 7] = -1
        link = np.array(part.links).reshape(8, m, 2)
        nodes.append(n)
        links.append(np.where(link >= 0, link + first_node, -1))
        roots.append(first_node)
        first_node += m
        first_leaf += part.leaf_prims.shape[0]
    if first_node >= 2**24:
        raise ValueError("too many nodes: node columns are stored as exact float32 (< 2^24)")
    cat = lambda name: on_device(np.concatenate([np.asarray(getattr(p, name)) for p in parts]))
    # A group without triangles has no triangle table of its own (bvh.make_arrays): where another
    # group has one, its leaves get zeros (degenerate triangles, never hit).
    leaf_tris = [np.asarray(p.leaf_tris) for p in parts]
    if any(t.shape[0] for t in leaf_tris):
        leaf_tris = [t if t.shape[0] else np.zeros((p.leaf_prims.shape[0], t.shape[1]), t.dtype)
                     for t, p in zip(leaf_tris, parts)]
    tree = flat.BvhArrays(nodes=on_device(np.concatenate(nodes), np.float32),
                          links=on_device(np.concatenate(links, axis=1).reshape(-1, 2), np.int32),
                          leaf_tris=on_device(np.concatenate(leaf_tris)), leaf_prims=cat("leaf_prims"), leaf_analytic=cat("leaf_analytic"),
                          leaf_size=leaf_size, analytic_kinds=parts[0].analytic_kinds)
    return InstanceBvh(tree=tree, roots=on_device(np.array(roots, np.int32)[group_of]))


def make_analytic_arrays(groups: Sequence[instancing.GroupSpan], prim_lo: np.ndarray, prim_hi: np.ndarray,
                         to_world: np.ndarray, tri: Sequence[np.ndarray], analytic: Sequence[np.ndarray],
                         leaf_size: int = flat.LEAF_SIZE) -> InstanceBvh:
    """Host: the two-level tables of the groups' analytic shapes alone, beside an engine that
    places their triangles (Embree's instancing). Groups without analytic shapes, and their
    instances, are left out of the trees; a hit's instance is still its index among all of them
    (``to_world`` (I, 4, 4): all the instances, and the traversal's ``to_local`` too)."""
    keep = [s for s in groups if s.analytic_end > s.analytic_start]
    ids = np.concatenate([np.arange(s.first_instance, s.end_instance) for s in keep])
    spans, first = [], 0  # the kept groups' instances numbered 0, 1, ... among themselves
    for s in keep:
        count = s.end_instance - s.first_instance
        spans.append(s._replace(tri_end=s.tri_start, first_instance=first, end_instance=first + count))
        first += count
    part = make_arrays(spans, prim_lo, prim_hi, to_world[ids], tri, analytic, leaf_size)
    nodes = np.array(part.tree.nodes)
    top_leaf = nodes[:, 7] >= 0  # a top leaf's instance, numbered among the kept ones
    nodes[:, 7] = np.where(top_leaf, ids[np.where(top_leaf, nodes[:, 7], 0).astype(np.int64)], -1)
    roots = np.zeros(to_world.shape[0], np.int32)  # (an instance left out is never entered)
    roots[ids] = np.asarray(part.roots)
    return InstanceBvh(tree=dataclasses.replace(part.tree, nodes=jnp.asarray(nodes)), roots=jnp.asarray(roots))


@pytree_dataclass
class _State:
    node: jnp.ndarray      # (N,) int32 next node to visit, -1 when done
    inst: jnp.ndarray      # (N,) int32 instance the lane is walking, -1 in the top tree
    resume: jnp.ndarray    # (N,) int32 top node to go on with when the group's walk ends
    t: jnp.ndarray         # (N,) float32 closest hit so far (t_max at first), low bits truncated
    slot: jnp.ndarray      # (N,) int32 leaf * L + slot of the closest hit, -1 for none
    best_inst: jnp.ndarray  # (N,) int32 the instance of that hit


def _ray(world_o, world_d, index, to_local, inst):
    """The lane's ray in the space it walks (its instance's, or the world's)."""
    o, d = instancing.object_rays(to_local, inst, world_o, world_d)
    rays, _ = flat._setup(o, d, jnp.zeros_like(o[0]))
    return flat._Rays(o=rays.o, d=rays.d, inv_d=rays.inv_d, shear=rays.shear, octant=rays.octant, index=index)


def _step(ib, to_local, carry, any_hit):
    world, ray, st = carry
    tree = ib.tree
    node, inst, resume = st.node, st.inst, st.resume
    pending = jnp.full_like(node, -1)
    moved = jnp.zeros_like(node, bool)
    leaf_inst = inst
    m = tree.nodes.shape[0]
    for _ in range(flat._BOX_STEPS):
        live = (node >= 0) & (pending < 0) & ~moved
        safe = jnp.maximum(node, 0)
        row, link = jax.lax.optimization_barrier((tree.nodes[safe], tree.links[ray.octant * m + safe]))
        hit, leaf = flat._box(row, ray, st.t)
        child = row[:, 7].astype(jnp.int32)
        pending = jnp.where(live & hit & (leaf >= 0), leaf, pending)
        # A group's last leaf also ends its walk (below): the leaf is tested in the space it was reached in.
        leaf_inst = jnp.where(live & hit & (leaf >= 0), inst, leaf_inst)
        nxt = jnp.where(hit, link[:, 0], link[:, 1])
        enter = live & hit & (child >= 0)
        resume = jnp.where(enter, nxt, resume)
        nxt = jnp.where(enter, ib.roots[jnp.maximum(child, 0)], nxt)
        leave = live & (inst >= 0) & (nxt < 0)
        nxt = jnp.where(leave, resume, nxt)
        inst = jnp.where(enter, child, jnp.where(leave, -1, inst))
        node = jnp.where(live, nxt, node)
        moved = moved | enter | leave
        node, pending, resume, inst, moved, leaf_inst = jax.lax.optimization_barrier(
            (node, pending, resume, inst, moved, leaf_inst))
    at_leaf = pending >= 0
    leaf = jnp.maximum(pending, 0)
    t, s = flat.leaf_hits(tree, at_leaf, leaf, ray, st.t)
    found = at_leaf & (s >= 0)
    if any_hit:
        node = jnp.where(found, -1, node)
    ray = jax.tree.map(lambda a, b: jnp.where(moved, a, b), _ray(*world, ray.index, to_local, inst), ray)
    st = _State(node=node, inst=inst, resume=resume, t=jnp.where(found, t, st.t),
                slot=jnp.where(found, leaf * tree.leaf_size + s, st.slot), best_inst=jnp.where(found, leaf_inst, st.best_inst))
    return world, ray, st


def _traverse(ib, to_local, o, d, t_max, any_hit):
    o, d = jnp.asarray(o, jnp.float32), jnp.asarray(d, jnp.float32)
    t_max = jnp.zeros_like(o[0]) + t_max
    none = jnp.full_like(t_max, -1, jnp.int32)
    index = jnp.zeros_like(none) + jnp.arange(o.shape[1], dtype=jnp.int32)
    st = _State(node=jnp.where(t_max > 0, 0, -1).astype(jnp.int32), inst=none, resume=none, t=t_max, slot=none,
                best_inst=none)
    carry = ((o, d), _ray(o, d, index, to_local, none), st)
    carry = lanes.drain_in_phases(carry, lambda c: c[2].node >= 0, lambda c: _step(ib, to_local, c, any_hit),
                                  shrink=flat._SHRINK, min_phase=lanes.phase_floor(flat._MIN_PHASE))
    _, ray, st = carry
    unpermute = lambda value: jnp.zeros_like(value).at[ray.index].set(value, unique_indices=True)
    return o, d, unpermute(st.t), unpermute(st.slot), unpermute(st.best_inst)


def closest_hit(ib: InstanceBvh, to_local: jax.Array, tri: Sequence[jax.Array], analytic: Sequence[jax.Array],
                o: jax.Array, d: jax.Array, t_max: ArrayLike, corners: jax.Array | None = None) -> isect.Hit:
    """Closest instance hit with 0 < t < t_max of rays o, d (3, N): a Hit with ``instance``.
    to_local (3, 4, I); tri, analytic: the geometry's device tables (for the exact t and (u, v);
    ``corners``: as ``isect.exact_hit`` takes them)."""
    o, d, t, slot, inst = _traverse(ib, to_local, o, d, t_max, any_hit=False)
    prim = jnp.where(slot >= 0, ib.tree.leaf_prims.reshape(-1)[jnp.maximum(slot, 0)], -1)
    inst = jnp.where(prim >= 0, inst, -1)
    o_local, d_local = instancing.object_rays(to_local, inst, o, d)
    hit = isect.exact_hit(tri, analytic, o_local, d_local, prim, t, kinds=ib.tree.analytic_kinds, corners=corners)
    return isect.Hit(t=hit.t, prim=hit.prim, u=hit.u, v=hit.v, instance=inst)


def occluded(ib: InstanceBvh, to_local: jax.Array, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> jax.Array:
    """(N,) bool: an instance has a primitive at 0 < t < t_max; lanes stop at their first hit."""
    return _traverse(ib, to_local, o, d, t_max, any_hit=True)[3] >= 0
