"""Stackless BVH traversal in JAX: closest hit and occlusion for batches of rays.

The tree comes from ``bvh_build`` (binned SAH, threaded per direction octant). One
``lax.while_loop`` advances every ray by one node per iteration: a slab test against the node's
box (Ize 2013, "Robust BVH Ray Traversal": the far distance is padded by 1 + 2 gamma_3 so
boxes that touch a triangle exactly are never missed), then, for a leaf, the watertight test
of all its slots at once. The next node is read from the octant's hit or miss link, so the
state of a ray is five numbers and no stack.

A batched while loop runs until its slowest ray is done; to keep finished rays from costing
work, traversal runs in phases over shrinking prefixes of the batch: when at most a quarter of
the prefix is still traversing, the live rays are moved to its front and the next phase works on
that quarter only.
"""
import jax
import jax.numpy as jnp
import numpy as np

from tracer import intersect as isect
from tracer.pytree import pytree_dataclass, static

__all__ = ["BvhArrays", "make_arrays", "closest_hit", "occluded", "LEAF_SIZE"]

LEAF_SIZE = 4
# Ize 2013: 1 + 2 gamma(3), gamma(n) = n u / (1 - n u), u = 2^-24.
_PAD = np.float32(1.0 + 2.0 * (3 * 2.0**-24) / (1 - 3 * 2.0**-24))
# Batch prefix shrinks by this factor per phase, down to _MIN_PHASE rays.
_SHRINK = 4
_MIN_PHASE = 1024
# Box tests per loop iteration (a ray stops early at a leaf it must test).
_BOX_STEPS = 2
_INF_BITS = np.int32(0x7F800000)


@pytree_dataclass
class BvhArrays:
    """Device tables of a threaded BVH with fixed-width leaves."""

    nodes: jnp.ndarray       # (M, 8) float32: lo xyz, hi xyz, leaf index (-1 inner), 0
    links: jnp.ndarray       # (8 M, 2) int32: [hit, miss] next node for octant * M + node
    leaf_tris: jnp.ndarray   # (nL, 9 L) float32: slot s of component c (p0 xyz, p1 xyz, p2 xyz) at c L + s
    leaf_prims: jnp.ndarray  # (nL, L) int32 primitive id per slot, -1 for padding
    leaf_quads: jnp.ndarray  # (nL, L) int32 analytic index per slot (-1 if not analytic)
    leaf_size: int = static(LEAF_SIZE)
    has_analytic: bool = static(False)


def make_arrays(threaded, p0, p1, p2, n_triangles, leaf_size=LEAF_SIZE):
    """Host: pack a ``bvh_build.ThreadedBvh`` over T triangles + A analytic primitives (ids >= T).

    p0, p1, p2: (3, T) float32 triangle vertices.
    """
    m = threaded.leaf.size
    nodes = np.zeros((m, 8), np.float32)
    nodes[:, 0:3] = threaded.lo.T
    nodes[:, 3:6] = threaded.hi.T
    nodes[:, 6] = threaded.leaf
    links = np.stack([threaded.hit.reshape(-1), threaded.miss.reshape(-1)], axis=1).astype(np.int32)
    n_leaves = threaded.leaf_start.size
    if np.any(threaded.leaf_count > leaf_size):
        raise ValueError("a leaf holds more primitives than leaf_size")
    slot = np.arange(leaf_size)
    idx = threaded.leaf_start[:, None] + slot
    valid = slot < threaded.leaf_count[:, None]
    prims = np.where(valid, threaded.order[np.minimum(idx, threaded.order.size - 1)], -1).astype(np.int32)
    is_tri = (prims >= 0) & (prims < n_triangles)
    tri = np.where(is_tri, prims, 0)
    verts = np.concatenate([p0, p1, p2], axis=0)  # (9, T)
    if n_triangles:
        leaf_tris = np.where(is_tri[:, None, :], verts[:, tri].transpose(1, 0, 2), 0.0)
    else:
        leaf_tris = np.zeros((n_leaves, 9, leaf_size), np.float32)
    quads = np.where(prims >= n_triangles, prims - n_triangles, -1).astype(np.int32)
    return BvhArrays(nodes=jnp.asarray(nodes), links=jnp.asarray(links),
                     leaf_tris=jnp.asarray(leaf_tris.reshape(n_leaves, 9 * leaf_size).astype(np.float32)),
                     leaf_prims=jnp.asarray(prims), leaf_quads=jnp.asarray(quads), leaf_size=leaf_size,
                     has_analytic=bool(np.any(quads >= 0)))


@pytree_dataclass
class _Rays:
    """Per-ray constants of a traversal; every field has the batch as its last axis."""

    o: jnp.ndarray       # (3, N)
    d: jnp.ndarray       # (3, N)
    inv_d: jnp.ndarray   # (3, N) 1/d, zero components replaced by tiny ones
    shear: isect.RayShear
    octant: jnp.ndarray  # (N,) int32
    index: jnp.ndarray   # (N,) int32 position in the caller's batch


@pytree_dataclass
class _State:
    node: jnp.ndarray    # (N,) int32 next node to visit, -1 when done
    t: jnp.ndarray       # (N,) float32 closest hit so far (t_max initially)
    slot: jnp.ndarray    # (N,) int32 leaf * L + slot of the closest hit, -1 for none


def _setup(o, d):
    tiny = np.float32(1e-30)
    safe = jnp.where(jnp.abs(d) < tiny, jnp.where(d < 0, -tiny, tiny), d)
    octant = ((d[0] < 0).astype(jnp.int32) | ((d[1] < 0).astype(jnp.int32) << 1)
              | ((d[2] < 0).astype(jnp.int32) << 2))
    n = o.shape[1]
    return _Rays(o=o, d=d, inv_d=1.0 / safe, shear=isect.ray_shear(d), octant=octant,
                 index=jnp.arange(n, dtype=jnp.int32))


def _box(row, rays, t_best):
    """Slab test of the gathered node rows (N, 8) against the rays; (hit, leaf index)."""
    tn = jnp.zeros_like(t_best)
    tf = t_best
    for k in range(3):
        a = (row[:, k] - rays.o[k]) * rays.inv_d[k]
        b = (row[:, 3 + k] - rays.o[k]) * rays.inv_d[k]
        tn = jnp.maximum(tn, jnp.minimum(a, b))
        tf = jnp.minimum(tf, jnp.maximum(a, b) * _PAD)
    return tn <= tf, row[:, 6].astype(jnp.int32)


def _leaf_triangles(bvh, leaf, rays, t_best):
    """Watertight test of all L slots of the rays' leaves at once, as (N, L) arrays.

    Returns (t, slot): the closest t below t_best and its slot, or (t_best, -1). The slot is
    found with one integer min over keys (t's bits with the slot in the low bits; t > 0 so its
    bits order like t): t is truncated by log2(L) bits here, and recomputed exactly at the end.
    """
    size = bvh.leaf_size
    bits = size.bit_length() - 1
    tri = bvh.leaf_tris[leaf].reshape(-1, 9, size)
    c = [tri[:, k, :] for k in range(9)]
    col = lambda v: v[..., None]
    shear = isect.RayShear(col(rays.shear.sx), col(rays.shear.sy), col(rays.shear.sz))
    t, _, _ = isect.intersect_triangles(tuple(c[0:3]), tuple(c[3:6]), tuple(c[6:9]), tuple(col(rays.o)),
                                        shear, col(t_best))
    key = (jax.lax.bitcast_convert_type(t, jnp.int32) & ~(size - 1)) | jnp.arange(size, dtype=jnp.int32)
    key = jnp.min(key, axis=1)
    found = key < _INF_BITS
    t = jax.lax.bitcast_convert_type(key & ~(size - 1), jnp.float32)
    return jnp.where(found, t, t_best), jnp.where(found, key & (size - 1), -1)


def _leaf_analytic(bvh, quads, leaf, rays, t_best, mask):
    size = bvh.leaf_size
    kind, to_world, to_local = quads
    slots = bvh.leaf_quads[leaf]  # (N, L)
    best_t, best_s = t_best, jnp.full(t_best.shape, -1, jnp.int32)
    for s in range(size):
        q = jnp.maximum(slots[:, s], 0)
        t, _, _ = isect.intersect_analytic(kind[q], to_world[..., q], to_local[..., q], rays.o, rays.d, best_t)
        closer = (t < best_t) & (slots[:, s] >= 0) & mask
        best_t = jnp.where(closer, t, best_t)
        best_s = jnp.where(closer, s, best_s)
    return best_t, best_s


def _step(bvh, quads, rays, st, any_hit):
    """Up to ``_BOX_STEPS`` box tests, stopping at the first leaf hit, then that leaf's slots."""
    node = st.node
    pending = jnp.full_like(node, -1)
    m = bvh.nodes.shape[0]
    for _ in range(_BOX_STEPS):
        live = (node >= 0) & (pending < 0)
        safe = jnp.maximum(node, 0)
        hit, leaf = _box(bvh.nodes[safe], rays, st.t)
        link = bvh.links[rays.octant * m + safe]
        pending = jnp.where(live & hit & (leaf >= 0), leaf, pending)
        node = jnp.where(live, jnp.where(hit, link[:, 0], link[:, 1]), node)
    at_leaf = pending >= 0
    leaf = jnp.maximum(pending, 0)
    t, s = _leaf_triangles(bvh, leaf, rays, st.t)
    if bvh.has_analytic:
        has_quad = at_leaf & jnp.any(bvh.leaf_quads[leaf] >= 0, axis=1)
        t, s = jax.lax.cond(jnp.any(has_quad),
                            lambda: _merge(_leaf_analytic(bvh, quads, leaf, rays, t, has_quad), (t, s)),
                            lambda: (t, s))
    found = at_leaf & (s >= 0)
    if any_hit:
        node = jnp.where(found, -1, node)
    return _State(node=node, t=jnp.where(found, t, st.t),
                  slot=jnp.where(found, leaf * bvh.leaf_size + s, st.slot))


def _merge(a, b):
    t_a, s_a = a
    t_b, s_b = b
    closer = (s_a >= 0) & (t_a < t_b)
    return jnp.where(closer, t_a, t_b), jnp.where(closer, s_a, s_b)


def _traverse(bvh, quads, rays, st, any_hit):
    """Run the loop in phases over shrinking prefixes of the batch (see module docstring)."""
    n = st.node.shape[0]
    size = n
    while True:
        nxt = size // _SHRINK
        last = nxt < _MIN_PHASE
        bound = 0 if last else nxt

        def cond(c):
            return jnp.sum(c[1].node[:size] >= 0) > bound

        def body(c):
            r, s = c
            return r, _step(bvh, quads, r, s, any_hit)

        head = lambda tree: jax.tree.map(lambda a: a[..., :size], tree)
        r, s = jax.lax.while_loop(cond, body, (head(rays), head(st)))
        if last:
            rays, st = _put(rays, r), _put(st, s)
            break
        # Live rays first (stable), then write the reordered prefix back.
        perm = jnp.argsort(s.node < 0, stable=True)
        take = lambda tree: jax.tree.map(lambda a: a[..., perm], tree)
        rays, st = _put(rays, take(r)), _put(st, take(s))
        size = nxt
    return rays, st


def _put(full, head):
    return jax.tree.map(lambda a, b: a.at[..., : b.shape[-1]].set(b), full, head)


def _unpermute(rays, values):
    return [jnp.zeros_like(v).at[..., rays.index].set(v) for v in values]


def closest_hit(bvh, tri, quads, o, d, t_max, n_triangles):
    """Closest hit of rays o, d (3, N) with 0 < t < t_max (N,). ``tri`` = (p0, p1, p2) (3, T)
    arrays for the final barycentrics; ``quads`` = (kind, to_world, to_local) of analytic prims."""
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    rays = _setup(o, d)
    st = _State(node=jnp.where(t_max > 0, 0, -1).astype(jnp.int32), t=t_max, slot=jnp.full((n,), -1, jnp.int32))
    rays, st = _traverse(bvh, quads, rays, st, any_hit=False)
    t, slot = _unpermute(rays, [st.t, st.slot])
    found = slot >= 0
    prim = jnp.where(found, bvh.leaf_prims.reshape(-1)[jnp.maximum(slot, 0)], -1)
    return _finish(prim, t, tri, quads, o, d, n_triangles)


def _finish(prim, t, tri, quads, o, d, n_triangles):
    """Barycentrics (or disk coordinates) of the winners, recomputed per ray."""
    found = prim >= 0
    u = v = jnp.zeros_like(t)
    if tri is not None and n_triangles:
        i = jnp.clip(prim, 0, n_triangles - 1)
        g = lambda p: tuple(p[k][i] for k in range(3))
        _, u, v = isect.intersect_triangles(g(tri[0]), g(tri[1]), g(tri[2]), tuple(o), isect.ray_shear(d), np.inf)
    if quads is not None and quads[0].shape[0]:
        kind, to_world, to_local = quads
        q = jnp.clip(prim - n_triangles, 0, kind.shape[0] - 1)
        _, x, y = isect.intersect_analytic(kind[q], to_world[..., q], to_local[..., q], o, d, np.inf)
        is_quad = prim >= n_triangles
        u, v = jnp.where(is_quad, x, u), jnp.where(is_quad, y, v)
    return isect.Hit(t=jnp.where(found, t, np.inf), prim=prim, u=jnp.where(found, u, 0.0), v=jnp.where(found, v, 0.0))


def occluded(bvh, quads, o, d, t_max):
    """Any hit with 0 < t < t_max: rays stop at their first hit."""
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    rays = _setup(o, d)
    st = _State(node=jnp.where(t_max > 0, 0, -1).astype(jnp.int32), t=t_max, slot=jnp.full((n,), -1, jnp.int32))
    rays, st = _traverse(bvh, quads, rays, st, any_hit=True)
    (slot,) = _unpermute(rays, [st.slot])
    return slot >= 0
