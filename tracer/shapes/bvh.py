"""Stackless BVH traversal in JAX: closest hit and occlusion for batches of rays.

The tree comes from ``bvh_build`` (binned SAH, threaded per direction octant). One
``lax.while_loop`` advances all rays together. An iteration takes up to ``_BOX_STEPS`` slab
tests (Ize 2013, "Robust BVH Ray Traversal": the far distance is padded by 1 + 2 gamma_3 so a box
that touches a triangle exactly is never missed), following the octant's hit or miss links and
stopping at the first leaf whose box is hit; then all L slots of that leaf are tested at once as
(N, L) arrays with the watertight test. A ray's state is three numbers and no stack.

Three things decide the speed on the CPU (measured with scripts/bench_accel.py):
  * XLA fuses gathers into their elementwise consumers as scalar loops and re-derives values
    inside every consumer (once per slot inside the leaf test). ``optimization_barrier``
    materializes the gathered node rows and the chosen leaf: 2x.
  * Leaves are tested as (N, L) broadcasts with one integer min over (t bits | slot) keys, which
    XLA vectorizes along L; testing the slots one after the other made the leaf test 6x slower.
  * A batched loop runs until its slowest ray is done. Traversal therefore runs in phases over
    shrinking prefixes of the batch: when at most 1/_SHRINK of the prefix is still traversing,
    live rays move to its front (a stable partition) and the next phase loops over that part
    only: 3x (each phase compiles its own loop body, about a second; on GPUs and TPUs phases
    stop at ``lanes.ACCELERATOR_MIN_PHASE`` lanes).
"""
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from tracer.shapes import bvh_kernel
from tracer.shapes import intersect as isect
from tracer import lanes
from tracer.kinds import SurfaceKind
from tracer.pytree import pytree_dataclass, static
from tracer.table_rows import on_device

if TYPE_CHECKING:
    from tracer.shapes import bvh_build

__all__ = ["BvhArrays", "make_arrays", "closest_hit", "occluded", "LEAF_SIZE"]

LEAF_SIZE = 8
# Ize 2013: 1 + 2 gamma(3), gamma(n) = n u / (1 - n u), u = 2^-24.
_PAD = np.float32(1.0 + 2.0 * (3 * 2.0**-24) / (1 - 3 * 2.0**-24))
_SHRINK = 3
_MIN_PHASE = 256
_BOX_STEPS = 4
# Rows of an analytic slot: kind, to_world (12), to_local (12).
_ANALYTIC_ROWS = 25


@pytree_dataclass
class BvhArrays:
    """Device tables of a threaded BVH with fixed-width leaves of L slots."""

    nodes: jnp.ndarray       # (M, 8) float32: lo xyz, hi xyz, leaf index (-1 inner), 0
    links: jnp.ndarray       # (8 M, 2) int32: [hit, miss] next node at octant * M + node
    leaf_tris: jnp.ndarray   # (nL, 9 L) float32: component c (p0 xyz, p1 xyz, p2 xyz) of slot s at c L + s; (0, 9 L) if none
    leaf_prims: jnp.ndarray  # (nL, L) int32 primitive id per slot, -1 for padding
    leaf_analytic: jnp.ndarray  # (nL, 25 L) float32 analytic slots (row 0 = kind, -1 if none); (0, 25 L) if none
    leaf_size: int = static(default=LEAF_SIZE)
    analytic_kinds: tuple[int, ...] = static(default=SurfaceKind.ANALYTIC)  # the analytic kinds present


def make_arrays(threaded: "bvh_build.ThreadedBvh", tri: Sequence[np.ndarray], analytic: Sequence[np.ndarray],
                leaf_size: int = LEAF_SIZE) -> BvhArrays:
    """Host: pack a ``bvh_build.ThreadedBvh`` built over T triangles then A analytic primitives.

    tri = (p0, p1, p2) (3, T) float32; analytic = (kind (A,), to_world (3, 4, A), to_local (3, 4, A)).
    """
    if np.any(threaded.leaf_count > leaf_size):
        raise ValueError("a leaf holds more primitives than leaf_size")
    m = threaded.leaf.size
    if threaded.leaf_start.size >= 2**24 or 8 * m >= 2**31:
        raise ValueError("too many nodes: leaf indices are stored as exact float32 (< 2^24 leaves)")
    nodes = np.zeros((m, 8), np.float32)
    nodes[:, 0:3] = threaded.lo.T
    nodes[:, 3:6] = threaded.hi.T
    nodes[:, 6] = threaded.leaf
    links = np.stack([threaded.hit.reshape(-1), threaded.miss.reshape(-1)], axis=1).astype(np.int32)
    slot = np.arange(leaf_size)
    idx = np.minimum(threaded.leaf_start[:, None] + slot, threaded.order.size - 1)
    prims = np.where(slot < threaded.leaf_count[:, None], threaded.order[idx], -1).astype(np.int32)
    n_tri, n_analytic = tri[0].shape[1], analytic[0].shape[0]
    n_leaves = prims.shape[0]

    def table(columns, is_mine, local_index, rows):
        if not columns.shape[1]:
            return np.zeros((n_leaves, rows, leaf_size), np.float32)
        data = columns[:, np.where(is_mine, local_index, 0)]  # (rows, nL, L)
        return np.where(is_mine[None], data, 0.0).transpose(1, 0, 2).astype(np.float32)

    is_tri = (prims >= 0) & (prims < n_tri)
    # A tree of analytic shapes alone (beside Embree) has no triangle table: no triangle test at all.
    leaf_tris = (table(np.concatenate(tri, axis=0), is_tri, prims, 9) if is_tri.any()
                 else np.zeros((0, 9, leaf_size), np.float32))
    is_analytic = prims >= n_tri
    kind, to_world, to_local = analytic
    analytic_cols = np.concatenate([kind[None].astype(np.float32), to_world.reshape(12, -1), to_local.reshape(12, -1)])
    leaf_analytic = table(analytic_cols, is_analytic, prims - n_tri, _ANALYTIC_ROWS)
    leaf_analytic[:, 0] = np.where(is_analytic, leaf_analytic[:, 0], -1.0)
    if not n_analytic:
        leaf_analytic = leaf_analytic[:0]
    return BvhArrays(nodes=on_device(nodes), links=on_device(links),
                     leaf_tris=on_device(leaf_tris.reshape(leaf_tris.shape[0], 9 * leaf_size)), leaf_prims=on_device(prims),
                     leaf_analytic=on_device(leaf_analytic.reshape(leaf_analytic.shape[0], _ANALYTIC_ROWS * leaf_size)),
                     leaf_size=leaf_size, analytic_kinds=tuple(sorted({int(k) for k in kind})))


@pytree_dataclass
class _Rays:
    """Per-ray constants of a traversal; every field has the batch as its last axis."""

    o: jnp.ndarray       # (3, N)
    d: jnp.ndarray       # (3, N)
    inv_d: jnp.ndarray   # (3, N) 1/d with zero components replaced by tiny ones
    shear: isect.RayShear
    octant: jnp.ndarray  # (N,) int32, bit k set when d_k < 0
    index: jnp.ndarray   # (N,) int32 position in the caller's batch


@pytree_dataclass
class _State:
    node: jnp.ndarray    # (N,) int32 next node to visit, -1 when done
    t: jnp.ndarray       # (N,) float32 closest hit so far (t_max initially), low bits truncated
    slot: jnp.ndarray    # (N,) int32 leaf * L + slot of the closest hit, -1 for none


def _setup(o: jax.Array, d: jax.Array, t_max: jax.Array) -> tuple[_Rays, _State]:
    tiny = np.float32(1e-30)
    safe = jnp.where(jnp.abs(d) < tiny, jnp.where(d < 0, -tiny, tiny), d)
    octant = ((d[0] < 0).astype(jnp.int32) | ((d[1] < 0).astype(jnp.int32) << 1)
              | ((d[2] < 0).astype(jnp.int32) << 2))
    # *_like keeps shard_map's varying type on the loop carries (jnp.full/arange would not).
    index = jnp.zeros_like(octant) + jnp.arange(o.shape[1], dtype=jnp.int32)
    rays = _Rays(o=o, d=d, inv_d=1.0 / safe, shear=isect.ray_shear(d), octant=octant, index=index)
    st = _State(node=jnp.where(t_max > 0, 0, -1).astype(jnp.int32), t=t_max, slot=jnp.full_like(octant, -1))
    return rays, st


def _box(row, rays, t_best):
    """Slab test of gathered node rows (N, 8): (hit (N,), leaf index (N,), -1 for inner nodes)."""
    tn = jnp.zeros_like(t_best)
    tf = t_best
    for k in range(3):
        a = (row[:, k] - rays.o[k]) * rays.inv_d[k]
        b = (row[:, 3 + k] - rays.o[k]) * rays.inv_d[k]
        tn = jnp.maximum(tn, jnp.minimum(a, b))
        tf = jnp.minimum(tf, jnp.maximum(a, b) * _PAD)
    return tn <= tf, row[:, 6].astype(jnp.int32)


def _closest_slot(t, size):
    """The closest of a leaf's (N, L) slots (``lanes.min_key``): (t truncated by log2(L) bits,
    slot) or (inf, -1). The exact t is recomputed at the end."""
    bits = size.bit_length() - 1
    key = lanes.min_key(t, bits, axis=-1)
    found = key < lanes.INF_KEY
    return jnp.where(found, lanes.key_t(key, bits), np.inf), jnp.where(found, lanes.key_index(key, bits), -1)


def _col(v):
    return v[..., None]


def _leaf_triangles(bvh, leaf, rays, t_best):
    size = bvh.leaf_size
    c = bvh.leaf_tris[leaf].reshape(-1, 9, size)
    c = [c[:, k, :] for k in range(9)]
    shear = isect.RayShear(_col(rays.shear.sx), _col(rays.shear.sy), _col(rays.shear.sz))
    t, _, _ = isect.intersect_triangles(tuple(c[0:3]), tuple(c[3:6]), tuple(c[6:9]), tuple(_col(rays.o)),
                                        shear, _col(t_best))
    return _closest_slot(t, size)


def _leaf_analytic(bvh, leaf, rays, t_best):
    size = bvh.leaf_size
    q = bvh.leaf_analytic[leaf].reshape(-1, _ANALYTIC_ROWS, size)
    kind = q[:, 0].astype(jnp.int32)
    to_world = jnp.moveaxis(q[:, 1:13], 1, 0).reshape(3, 4, -1, size)
    to_local = jnp.moveaxis(q[:, 13:25], 1, 0).reshape(3, 4, -1, size)
    t, _, _ = isect.intersect_analytic(kind, to_world, to_local, _col(rays.o), _col(rays.d), _col(t_best),
                                       bvh.analytic_kinds)
    return _closest_slot(jnp.where(kind >= 0, t, np.inf), size)


def leaf_hits(bvh, at_leaf, leaf, rays, t_best):
    """The closest slot of each lane's ``leaf`` (N,) below ``t_best``: (t truncated, slot or -1);
    meaningful where ``at_leaf``. Analytic slots are tested only when some lane's leaf has one;
    triangle slots only in a tree that holds triangles."""
    if bvh.leaf_tris.shape[0]:
        t, s = _leaf_triangles(bvh, leaf, rays, t_best)
    else:
        t, s = jnp.full_like(t_best, np.inf), jnp.full_like(leaf, -1)
    if bvh.leaf_analytic.shape[0]:
        has_analytic = at_leaf & jnp.any(bvh.leaf_analytic[leaf, :bvh.leaf_size] >= 0, axis=1)

        def with_analytic():
            tq, sq = _leaf_analytic(bvh, leaf, rays, jnp.minimum(t_best, t))
            closer = has_analytic & (sq >= 0) & (tq < t)
            return jnp.where(closer, tq, t), jnp.where(closer, sq, s)

        t, s = jax.lax.cond(jnp.any(has_analytic), with_analytic, lambda: (t, s))
    return t, s


def _step(bvh, rays, st, any_hit):
    node = st.node
    pending = jnp.full_like(node, -1)
    m = bvh.nodes.shape[0]
    for _ in range(_BOX_STEPS):
        live = (node >= 0) & (pending < 0)
        safe = jnp.maximum(node, 0)
        # Gathers fused into elementwise consumers run as scalar loops: materialize them.
        row, link = jax.lax.optimization_barrier((bvh.nodes[safe], bvh.links[rays.octant * m + safe]))
        hit, leaf = _box(row, rays, st.t)
        pending = jnp.where(live & hit & (leaf >= 0), leaf, pending)
        node = jnp.where(live, jnp.where(hit, link[:, 0], link[:, 1]), node)
        # Otherwise XLA re-derives this chain inside every consumer, once per slot in the leaf test.
        node, pending = jax.lax.optimization_barrier((node, pending))
    at_leaf = pending >= 0
    leaf = jnp.maximum(pending, 0)
    t, s = leaf_hits(bvh, at_leaf, leaf, rays, st.t)
    found = at_leaf & (s >= 0)
    if any_hit:
        node = jnp.where(found, -1, node)
    return _State(node=node, t=jnp.where(found, t, st.t), slot=jnp.where(found, leaf * bvh.leaf_size + s, st.slot))


def _traverse(bvh, rays, st, any_hit):
    """The traversal loop, in phases over shrinking prefixes of the batch (module docstring)."""
    return lanes.drain_in_phases((rays, st), lambda c: c[1].node >= 0,
                                 lambda c: (c[0], _step(bvh, c[0], c[1], any_hit)),
                                 shrink=_SHRINK, min_phase=lanes.phase_floor(_MIN_PHASE))


def _search(bvh, o, d, t_max, any_hit):
    """(t truncated, leaf * L + slot or -1) of each ray, in the rays' order: by the Pallas
    kernel on GPUs for a tree of triangles (``tracer.shapes.bvh_kernel``: the same arithmetic, one
    kernel), else by the phased loop here."""
    if bvh_kernel.applies(bvh):
        return bvh_kernel.traverse(bvh, *_setup(o, d, t_max), any_hit=any_hit)
    rays, st = _traverse(bvh, *_setup(o, d, t_max), any_hit=any_hit)
    return _unpermute(rays, st.t), _unpermute(rays, st.slot)


def _unpermute(rays, value):
    return jnp.zeros_like(value).at[rays.index].set(value, unique_indices=True)


def closest_hit(bvh: BvhArrays, tri: Sequence[jax.Array], analytic: Sequence[jax.Array], o: jax.Array, d: jax.Array,
                t_max: ArrayLike, corners: jax.Array | None = None) -> isect.Hit:
    """Closest hit with 0 < t < t_max of rays o, d (3, N); ``tri``/``analytic`` as in make_arrays
    (device arrays), used for the exact t and barycentrics of the winners (``corners``: as
    ``isect.exact_hit`` takes them)."""
    o, d = jnp.asarray(o, jnp.float32), jnp.asarray(d, jnp.float32)
    t_max = jnp.zeros_like(o[0]) + t_max
    t, slot = _search(bvh, o, d, t_max, any_hit=False)
    prim = jnp.where(slot >= 0, bvh.leaf_prims.reshape(-1)[jnp.maximum(slot, 0)], -1)
    return isect.exact_hit(tri, analytic, o, d, prim, t, kinds=bvh.analytic_kinds, corners=corners)


def occluded(bvh: BvhArrays, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> jax.Array:
    """Whether anything lies at 0 < t < t_max; rays stop at their first hit."""
    o, d = jnp.asarray(o, jnp.float32), jnp.asarray(d, jnp.float32)
    t_max = jnp.zeros_like(o[0]) + t_max
    return _search(bvh, o, d, t_max, any_hit=True)[1] >= 0
