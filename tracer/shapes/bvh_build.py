"""Binned SAH bounding volume hierarchy, built on the host with numpy, threaded for traversal.

The tree is built one level at a time: every node of a level is binned, evaluated and
partitioned by the same handful of vectorized numpy calls (no Python loop over nodes), so a
million primitives take a few seconds. Splits follow the binned surface area heuristic of
Wald 2007 ("On fast construction of SAH-based bounding volume hierarchies"): centroids fall
into ``bins`` equal bins on each of the three axes, the cost area(L) n(L) + area(R) n(R) is
swept over the bin boundaries, and the best (axis, boundary) wins. A node whose centroids
coincide is split at its median. Nodes of at most ``max_leaf`` primitives become leaves (the
traversal tests a leaf's slots all at once, so a leaf costs the same whatever its fill).

``thread`` then lays the nodes out in depth-first order and adds, for each of the 8 octants of
ray directions, the links of a stackless traversal (Smits 1998, "Efficiency issues for ray
tracing"; per-octant orders as in Hapala et al. 2011): ``hit`` goes to the child nearer along
the node's split axis, ``miss`` skips the subtree. A ray visits nodes near-to-far without a stack.
"""
import dataclasses
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["Bvh", "build_bvh", "ThreadedBvh", "thread"]


@dataclasses.dataclass(frozen=True)
class Bvh:
    """M nodes in breadth-first order; node 0 is the root."""

    lo: np.ndarray     # (3, M) float32 node bounds
    hi: np.ndarray     # (3, M)
    left: np.ndarray   # (M,) int32 left child (right = left + 1); -1 for a leaf
    axis: np.ndarray   # (M,) int8 split axis of an inner node
    start: np.ndarray  # (M,) int32 first slot of a leaf in ``order``
    count: np.ndarray  # (M,) int32 primitives in a leaf, 0 for an inner node
    order: np.ndarray  # (P,) int32 primitive ids, leaves' ranges contiguous
    depth: np.ndarray  # (M,) int32 level of each node


def _area(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Surface area of boxes (3, ...) (empty boxes, lo > hi, have area 0)."""
    e = np.maximum(hi - lo, 0.0)
    return 2.0 * (e[0] * e[1] + e[1] * e[2] + e[2] * e[0])


def _sweep(seg, b, n_nodes, n_bins, plo, phi):
    """SAH cost of every bin boundary of every node: (cost (B-1, K), left count (B-1, K)).

    Bins are bin-major, (B, K), so the prefix sweeps run over contiguous rows of K nodes.
    """
    key = b * n_nodes + seg
    count = np.bincount(key, minlength=n_bins * n_nodes).reshape(n_bins, n_nodes)
    blo = np.full((3, n_bins * n_nodes), np.inf, np.float32)
    bhi = np.full((3, n_bins * n_nodes), -np.inf, np.float32)
    for c in range(3):
        np.minimum.at(blo[c], key, plo[c])
        np.maximum.at(bhi[c], key, phi[c])
    blo, bhi = blo.reshape(3, n_bins, n_nodes), bhi.reshape(3, n_bins, n_nodes)
    l_area = _area(np.minimum.accumulate(blo, axis=1), np.maximum.accumulate(bhi, axis=1))
    r_area = _area(np.minimum.accumulate(blo[:, ::-1], axis=1)[:, ::-1],
                   np.maximum.accumulate(bhi[:, ::-1], axis=1)[:, ::-1])
    l_count = np.cumsum(count, axis=0)
    r_count = l_count[-1:] - l_count
    # Boundary j puts bins [0, j] on the left and (j, B) on the right.
    cost = l_area[:-1] * l_count[:-1] + r_area[1:] * r_count[:-1]
    cost = np.where((l_count[:-1] > 0) & (r_count[:-1] > 0), cost, np.inf)
    return cost, l_count[:-1]


def build_bvh(lo: ArrayLike, hi: ArrayLike, max_leaf: int = 4, bins: int = 16, all_axes: bool = False) -> Bvh:
    """Binned SAH BVH over P primitive boxes lo, hi (3, P) (float32, world space).

    ``all_axes`` bins the three axes (better trees, about twice the build time) instead of the
    axis along which the node's centroids spread most.
    """
    lo = np.ascontiguousarray(lo, np.float32)
    hi = np.ascontiguousarray(hi, np.float32)
    n_prims = lo.shape[1]
    if n_prims == 0:
        raise ValueError("build_bvh needs at least one primitive")
    # The primitives still inside inner nodes, grouped by node in level order.
    ids = np.arange(n_prims, dtype=np.int32)
    p_lo, p_hi, centroid = lo, hi, 0.5 * (lo + hi)
    order = np.empty(n_prims, np.int32)
    out: dict[str, list[np.ndarray]] = dict(lo=[], hi=[], left=[], axis=[], start=[], count=[], depth=[])
    cur_start = np.zeros(1, np.int64)
    cur_count = np.array([n_prims], np.int64)
    n_nodes, level = 1, 0
    while cur_start.size:
        k = cur_start.size
        offsets = np.concatenate([[0], np.cumsum(cur_count)[:-1]])
        node_lo = np.minimum.reduceat(p_lo, offsets, axis=1)
        node_hi = np.maximum.reduceat(p_hi, offsets, axis=1)
        inner = cur_count > max_leaf
        if not inner.all():  # the leaves' primitives go to ``order``
            node = np.repeat(np.arange(k), cur_count)
            at = np.flatnonzero(~inner[node])
            order[(cur_start - offsets)[node[at]] + at] = ids[at]
            keep = inner[node]
            ids, p_lo, p_hi, centroid = ids[keep], p_lo[:, keep], p_hi[:, keep], centroid[:, keep]
        n_inner = int(inner.sum())
        left = np.full(k, -1, np.int64)
        axis = np.zeros(k, np.int64)
        n_left = np.zeros(k, np.int64)
        if n_inner:
            counts = cur_count[inner]
            split = _split_search(centroid, p_lo, p_hi, counts, bins, all_axes)
            perm = _partition(split, centroid, counts)
            ids, p_lo, p_hi, centroid = ids[perm], p_lo[:, perm], p_hi[:, perm], centroid[:, perm]
            n_left[inner] = np.where(split.degenerate, counts // 2, split.n_left)
            axis[inner] = split.axis
            left[inner] = n_nodes + 2 * np.arange(n_inner)
            n_nodes += 2 * n_inner

        out["lo"].append(node_lo)
        out["hi"].append(node_hi)
        out["left"].append(left)
        out["axis"].append(axis)
        out["start"].append(np.where(inner, 0, cur_start))
        out["count"].append(np.where(inner, 0, cur_count))
        out["depth"].append(np.full(k, level))
        s, n, nl = cur_start[inner], cur_count[inner], n_left[inner]
        cur_start = np.stack([s, s + nl], axis=1).reshape(-1)
        cur_count = np.stack([nl, n - nl], axis=1).reshape(-1)
        level += 1

    cat = lambda name, axis=0: np.concatenate(out[name], axis=axis)
    return Bvh(lo=cat("lo", 1).astype(np.float32), hi=cat("hi", 1).astype(np.float32),
               left=cat("left").astype(np.int32), axis=cat("axis").astype(np.int8),
               start=cat("start").astype(np.int32), count=cat("count").astype(np.int32),
               order=order, depth=cat("depth").astype(np.int32))


class _Split(NamedTuple):
    """The chosen split of K inner nodes, and the binning it was chosen in."""

    axis: np.ndarray        # (K,) split axis
    boundary: np.ndarray    # (K,) bins [0, boundary] go left
    n_left: np.ndarray      # (K,) primitives on the left
    degenerate: np.ndarray  # (K,) bool: no boundary separates anything (centroids coincide): median split
    node: np.ndarray        # (P,) the node of each primitive (nodes contiguous)
    offsets: np.ndarray     # (K,) each node's first primitive
    c_lo: np.ndarray        # (3, K) centroid bounds' low corner
    scale: np.ndarray       # (3, K) bins per unit length
    n_bins: int


def _bins(centroid, node, node_axis, c_lo, scale, n_bins):
    """The bin of every primitive along its node's axis."""
    nodes = np.arange(node_axis.size)
    c = np.take_along_axis(centroid, node_axis[node][None], axis=0)[0]
    return np.minimum(((c - c_lo[node_axis, nodes][node]) * scale[node_axis, nodes][node]).astype(np.int64),
                      n_bins - 1)


def _split_search(centroid, p_lo, p_hi, counts, bins, all_axes):
    """Binned SAH over the primitives of K inner nodes (``counts`` each, contiguous)."""
    n_inner = counts.size
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    node = np.repeat(np.arange(n_inner), counts)
    c_lo = np.minimum.reduceat(centroid, offsets, axis=1)
    extent = np.maximum.reduceat(centroid, offsets, axis=1) - c_lo
    # Deep levels hold a few primitives per node: fewer bins lose nothing there.
    n_bins = int(min(bins, max(4, 2 * node.size // n_inner)))
    scale = np.where(extent > 0, np.float32(n_bins * (1 - 1e-6)) / np.where(extent > 0, extent, 1), 0)
    widest = np.argmax(extent, axis=0)
    best = np.full(n_inner, np.inf)
    split_axis, boundary, n_left = widest.copy(), np.zeros(n_inner, np.int64), np.zeros(n_inner, np.int64)
    for axis in range(3) if all_axes else [None]:
        node_axis = widest if axis is None else np.full(n_inner, axis)
        b = _bins(centroid, node, node_axis, c_lo, scale, n_bins)
        cost, l_count = _sweep(node, b, n_inner, n_bins, p_lo, p_hi)
        j = np.argmin(cost, axis=0)
        cj = cost[j, np.arange(n_inner)]
        better = cj < best
        best = np.where(better, cj, best)
        split_axis = np.where(better, node_axis, split_axis)
        boundary = np.where(better, j, boundary)
        n_left = np.where(better, l_count[j, np.arange(n_inner)], n_left)
    return _Split(split_axis, boundary, n_left, ~np.isfinite(best), node, offsets, c_lo, scale, n_bins)


def _partition(split, centroid, counts):
    """The permutation that puts each node's left primitives before its right ones, stably
    (nodes stay contiguous)."""
    node = split.node
    b = _bins(centroid, node, split.axis, split.c_lo, split.scale, split.n_bins)
    position = np.arange(node.size) - split.offsets[node]
    right = np.where(split.degenerate[node], position >= (counts // 2)[node], b > split.boundary[node])
    return np.argsort(node * 2 + right, kind="stable")


@dataclasses.dataclass(frozen=True)
class ThreadedBvh:
    """The BVH in depth-first order with per-octant links (octant bit k set when d_k < 0)."""

    lo: np.ndarray     # (3, M) float32
    hi: np.ndarray     # (3, M)
    leaf: np.ndarray   # (M,) int32 leaf index (into the leaf table), -1 for inner nodes
    hit: np.ndarray    # (8, M) int32 next node after a box hit (the near child; for a leaf, = miss)
    miss: np.ndarray   # (8, M) int32 next node after a miss or a finished leaf; -1 ends traversal
    leaf_start: np.ndarray  # (L,) int32 first slot of each leaf in ``order``
    leaf_count: np.ndarray  # (L,) int32
    order: np.ndarray  # (P,) int32 primitive ids


def _subtree_sizes(bvh: Bvh) -> np.ndarray:
    m = bvh.left.size
    size = np.ones(m, np.int64)
    inner = np.flatnonzero(bvh.left >= 0)
    for d in range(int(bvh.depth.max()), -1, -1):
        nodes = inner[bvh.depth[inner] == d]
        size[nodes] = 1 + size[bvh.left[nodes]] + size[bvh.left[nodes] + 1]
    return size


def _preorder(bvh: Bvh, size: np.ndarray, octant: int) -> np.ndarray:
    """Depth-first position of every node when the near child (for ``octant``) comes first."""
    m = bvh.left.size
    pre = np.zeros(m, np.int64)
    inner = np.flatnonzero(bvh.left >= 0)
    for d in range(int(bvh.depth.max()) + 1):
        nodes = inner[bvh.depth[inner] == d]
        neg = (octant >> bvh.axis[nodes].astype(np.int64)) & 1
        first = bvh.left[nodes] + neg
        second = bvh.left[nodes] + 1 - neg
        pre[first] = pre[nodes] + 1
        pre[second] = pre[nodes] + 1 + size[first]
    return pre


def thread(bvh: Bvh) -> ThreadedBvh:
    """Depth-first layout (canonical order = octant 0) with stackless links for all 8 octants."""
    m = bvh.left.size
    size = _subtree_sizes(bvh)
    pre0 = _preorder(bvh, size, 0)
    new_id = pre0  # canonical ids: depth-first, left child first
    old_of_new = np.empty(m, np.int64)
    old_of_new[new_id] = np.arange(m)
    hit = np.empty((8, m), np.int32)
    miss = np.empty((8, m), np.int32)
    for octant in range(8):
        pre = _preorder(bvh, size, octant)
        node_at = np.empty(m, np.int64)
        node_at[pre] = np.arange(m)
        nxt = pre + size
        miss_old = np.where(nxt < m, node_at[np.minimum(nxt, m - 1)], -1)
        neg = (octant >> bvh.axis.astype(np.int64)) & 1
        first_old = np.where(bvh.left >= 0, bvh.left + neg, -1)
        miss_new = np.where(miss_old >= 0, new_id[np.maximum(miss_old, 0)], -1)
        hit_new = np.where(first_old >= 0, new_id[np.maximum(first_old, 0)], miss_new)
        hit[octant, new_id] = hit_new
        miss[octant, new_id] = miss_new
    is_leaf = bvh.left[old_of_new] < 0
    leaf = np.where(is_leaf, np.cumsum(is_leaf) - 1, -1).astype(np.int32)
    return ThreadedBvh(lo=bvh.lo[:, old_of_new], hi=bvh.hi[:, old_of_new], leaf=leaf, hit=hit, miss=miss,
                       leaf_start=bvh.start[old_of_new][is_leaf], leaf_count=bvh.count[old_of_new][is_leaf],
                       order=bvh.order)
