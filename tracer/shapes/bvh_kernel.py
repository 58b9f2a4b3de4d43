"""The BVH traversal as one Pallas kernel over the rays, for GPUs.

``tracer.shapes.bvh`` traverses in XLA: a ``while_loop`` over the whole batch, drained in
phases, each phase a compiled loop body. On a GPU that made a work unit's compile 71-76 s (an
H200, November 29) and the traversal a chain of small kernels an iteration. Here each program of
the kernel takes a block of ``BLOCK`` rays (a thread a ray) and runs the same stackless traversal
to its end: the same threaded tree, octant links, ``bvh._BOX_STEPS`` slab tests then the first leaf
reached, the leaf's slots tested at once with the watertight test and an integer min over
(t bits | slot) keys. A ray's answer is its own arithmetic whatever block it is in, so the bits
depend neither on the batch nor on how it is split over devices.

Pallas lowers the kernel with Triton on NVIDIA and AMD GPUs. Trees with analytic slots (spheres,
disks, ... in leaves) and TPUs keep the XLA traversal. Everything the kernel reads per ray is
passed as one (N,) column a component: Triton has no slicing of a block's rows.
"""
import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from tracer.shapes import intersect as isect

if TYPE_CHECKING:
    from tracer.shapes.bvh import BvhArrays, _Rays, _State

__all__ = ["BLOCK", "runs_here", "applies", "traverse"]

BLOCK = 128  # rays a program: a thread each with Triton's default 4 warps


def runs_here() -> bool:
    """Whether this process's programs traverse trees of triangles with the kernel: on GPUs
    (decided when a scene is built and when its program is traced, as the phases are)."""
    return jax.default_backend() == "gpu"


def applies(bvh: "BvhArrays") -> bool:
    """Whether ``bvh`` is traversed by the kernel: on GPUs, a tree of triangles alone."""
    return runs_here() and bvh.leaf_analytic.shape[0] == 0 and bvh.leaf_tris.shape[0] > 0


def traverse(bvh: "BvhArrays", rays: "_Rays", state: "_State", any_hit: bool,
             interpret: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """(t, slot) of the rays and start state ``tracer.shapes.bvh._setup`` makes (N rays): the
    closest hit's t (its low bits truncated, as the XLA traversal's) and leaf * L + slot, -1 for
    none, in the rays' order; with ``any_hit`` each ray stops at its first hit. ``interpret``: run
    Pallas' interpreter, the same arithmetic in XLA (by default where the program is lowered for
    no GPU: the tests, on CPUs)."""
    if interpret is None:  # Triton where the program is lowered for a GPU, else the interpreter
        run = lambda interpret: functools.partial(traverse, any_hit=any_hit, interpret=interpret)
        return jax.lax.platform_dependent(bvh, rays, state, cuda=run(False), rocm=run(False), default=run(True))
    n = state.t.shape[0]
    padded = -(-n // BLOCK) * BLOCK
    pad = lambda c, fill=0: jnp.pad(c, (0, padded - n), constant_values=fill)
    floats = [pad(c) for c in (*rays.o, *rays.inv_d, *rays.shear.sx, *rays.shear.sy, *rays.shear.sz, state.t)]
    ints = [pad(rays.octant), pad(state.node, -1)]  # spare rays of the last block ask nothing
    tables = (bvh.nodes, bvh.links, bvh.leaf_tris)
    column = pl.BlockSpec((BLOCK,), lambda i: (i,))
    whole = [pl.BlockSpec(a.shape, lambda i, r=a.ndim: (0,) * r) for a in tables]
    t, slot = pl.pallas_call(
        functools.partial(_kernel, leaf_size=bvh.leaf_size, n_nodes=bvh.nodes.shape[0], any_hit=any_hit),
        out_shape=(jax.ShapeDtypeStruct((padded,), jnp.float32), jax.ShapeDtypeStruct((padded,), jnp.int32)),
        grid=(padded // BLOCK,), in_specs=[*whole, *[column] * (len(floats) + len(ints))],
        out_specs=(column, column), interpret=interpret, name="bvh_traversal",
    )(*tables, *floats, *ints)
    return t[:n], slot[:n]


def _kernel(nodes_ref, links_ref, tris_ref, *refs, leaf_size, n_nodes, any_hit):
    from tracer.shapes import bvh as xla  # its constants and leaf min (bvh imports this module)
    (ox, oy, oz, ix, iy, iz, sx0, sx1, sx2, sy0, sy1, sy2, sz0, sz1, sz2, t_max, octant, first,
     t_out, slot_out) = refs
    o = (ox[...], oy[...], oz[...])
    inv_d = (ix[...], iy[...], iz[...])
    octant = octant[...]
    shear = isect.RayShear(sx=tuple(r[...][:, None] for r in (sx0, sx1, sx2)),
                           sy=tuple(r[...][:, None] for r in (sy0, sy1, sy2)),
                           sz=tuple(r[...][:, None] for r in (sz0, sz1, sz2)))
    o_col = tuple(c[:, None] for c in o)
    lane_slots = jnp.zeros((BLOCK, leaf_size), jnp.int32) + jax.lax.broadcasted_iota(jnp.int32, (BLOCK, leaf_size), 1)

    def box(node, t_best):
        """Slab test of each ray's ``node``: (hit, leaf index or -1)."""
        tn = jnp.zeros_like(t_best)
        tf = t_best
        for k in range(3):
            a = (nodes_ref[node, k] - o[k]) * inv_d[k]
            b = (nodes_ref[node, 3 + k] - o[k]) * inv_d[k]
            tn = jnp.maximum(tn, jnp.minimum(a, b))
            tf = jnp.minimum(tf, jnp.maximum(a, b) * xla._PAD)
        return tn <= tf, nodes_ref[node, 6].astype(jnp.int32)

    def leaf_hits(leaf, t_best):
        rows = jnp.zeros_like(lane_slots) + leaf[:, None]
        c = [tris_ref[rows, k * leaf_size + lane_slots] for k in range(9)]
        t, _, _ = isect.intersect_triangles(tuple(c[0:3]), tuple(c[3:6]), tuple(c[6:9]), o_col, shear,
                                            t_best[:, None])
        return xla._closest_slot(t, leaf_size)

    def step(state):
        node, t, slot = state
        pending = jnp.full_like(node, -1)
        for _ in range(xla._BOX_STEPS):
            live = (node >= 0) & (pending < 0)
            safe = jnp.maximum(node, 0)
            hit, leaf = box(safe, t)
            pending = jnp.where(live & hit & (leaf >= 0), leaf, pending)
            link = octant * n_nodes + safe
            node = jnp.where(live, jnp.where(hit, links_ref[link, 0], links_ref[link, 1]), node)
        at_leaf = pending >= 0
        leaf = jnp.maximum(pending, 0)

        def test(_):
            return leaf_hits(leaf, t)

        def skip(_):
            return jnp.full_like(t, np.inf), jnp.full_like(node, -1)

        # A block whose rays reach no leaf this iteration skips the leaf test.
        t_leaf, s = jax.lax.cond(jnp.max(at_leaf.astype(jnp.int32)) > 0, test, skip, 0)
        found = at_leaf & (s >= 0)
        if any_hit:
            node = jnp.where(found, -1, node)
        return node, jnp.where(found, t_leaf, t), jnp.where(found, leaf * leaf_size + s, slot)

    t0 = t_max[...]
    node0 = first[...]
    _, t, slot = jax.lax.while_loop(lambda s: jnp.max(s[0]) >= 0, step, (node0, t0, jnp.full_like(node0, -1)))
    t_out[...] = t
    slot_out[...] = slot
