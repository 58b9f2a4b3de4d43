"""Batch-lane utilities shared by the wavefront loops (path tracing, BVH traversal, brute force).

Arrays carry their batch of lanes on the last axis. Three things the loops need, each once:

* ``stable_partition``: the order that moves the lanes a mask selects to the front;
* ``drain_in_phases``: a ``lax.while_loop`` that runs until its slowest lane is done, in
  phases over fewer and fewer lanes, so that finished lanes stop costing an iteration
  (``drain_in_place``: the same, its lanes back in their own order at the end);
* ``by_kind``: each kind's code run on the lanes of that kind only (coherent shading);
* ``min_key`` / ``key_index`` / ``key_t``: the closest of several candidates per lane as one
  integer min over keys that hold t's bits and the candidate's index;
* ``take``: each lane's column of a table (a material's parameters, a shape's transform).
"""
from collections.abc import Callable
from typing import Any, TypeVar, overload

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["stable_partition", "drain_in_phases", "phase_floor", "ACCELERATOR_MIN_PHASE", "drain_in_place", "by_kind", "WINDOW", "min_key", "key_index", "key_t", "INF_KEY", "take"]

INF_KEY = np.int32(0x7F800000)  # the bits of float32 inf: every key of a hit is below it

T = TypeVar("T")  # a pytree of arrays with the lanes on their last axis
S = TypeVar("S")  # a pytree the loop carries whole


# A table of at most this many columns is read by a chain of selects rather than a gather: XLA's
# CPU gathers cost about a nanosecond an element however small the table (12 rows of 4k lanes:
# 2 columns 93 against 39 us, 4 columns 38 against 13 us, 8 about even, 16 3x slower; one row:
# 5 columns 2.7 against 1.6 us, 8 2.5 against 2.3).
SELECT_COLUMNS = 8


def take(table: jax.Array, index: jax.Array) -> jax.Array:
    """``table[..., index]``: the columns (..., S) -> (..., N) of a table stored components first,
    gathered one row at a time. XLA makes ``table[..., index]`` one gather of lane-major slices
    (N, ...) and transposes them back in every consumer: a 3x4 transform and two vectors took
    1.5x as long that way (4k lanes). A small table (``SELECT_COLUMNS``) is read by selects, with
    the same values (out-of-range indices clamped, negative ones from the end, as indexing does)."""
    rows = table.reshape(-1, table.shape[-1])
    columns = rows.shape[1]
    if 0 < columns <= SELECT_COLUMNS:
        index = jnp.clip(jnp.where(index < 0, index + columns, index), 0, columns - 1)
        column = lambda c: rows[:, c].reshape(-1, *(1,) * index.ndim)
        out = jnp.broadcast_to(column(columns - 1), (rows.shape[0], *index.shape))
        for c in range(columns - 2, -1, -1):
            out = jnp.where(index == c, column(c), out)
        return out.reshape(*table.shape[:-1], *index.shape)
    return jnp.stack([rows[k][index] for k in range(rows.shape[0])]).reshape(*table.shape[:-1], *index.shape)


def stable_partition(mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(order, count): the indices of ``mask``'s (N,) true entries in order, then of its false
    ones in order; and the number of true ones. A prefix sum and a scatter: XLA's CPU sort took
    19 ms for 278k entries."""
    n = mask.shape[0]
    count = jnp.sum(mask, dtype=jnp.int32)
    before = prefix_count(mask) - mask.astype(jnp.int32)
    position = jnp.where(mask, before, count + jnp.arange(n, dtype=jnp.int32) - before)
    order = jnp.zeros_like(position).at[position].set(jnp.arange(n, dtype=jnp.int32), unique_indices=True)
    return order, count


# On GPUs and TPUs a loop iteration over fewer lanes than the device runs at once costs about what
# one over that many does (its kernels' launches and the loop's test, not its lanes), so a phase
# over fewer lanes saves next to nothing there, and each phase is another compiled loop body (XLA's
# GPU compile of a BVH scene's work unit took 71-76 s on an H200, most of it the traversal's
# bodies). The pure-JAX BVH's per-ray step counts on mesh.xml (4M lanes, camera and random rays),
# costing an iteration max(width, 65,536) lanes: its phases from 256 lanes were 9 a traversal,
# from 65,536 they are 4, for 6.5-9.3% more traversal work (10-16% at a 4,096-lane floor).
ACCELERATOR_MIN_PHASE = 65536


def phase_floor(on_cpu: int) -> int:
    """The fewest lanes a phase of a drain loop spans in a program made for this process's
    devices: ``on_cpu`` on CPUs; at least ``ACCELERATOR_MIN_PHASE`` on GPUs and TPUs. Host side,
    decided when the program is traced (its phases are static); any phases give the same bits."""
    return on_cpu if jax.default_backend() == "cpu" else max(on_cpu, ACCELERATOR_MIN_PHASE)


@overload
def drain_in_phases(carry: T, live: Callable[[T], jax.Array], step: Callable[[T], T], *, shrink: int,
                    min_phase: int, max_phases: int | None = None, shared: None = None,
                    busy: Callable[[tuple[()]], jax.Array] | None = None) -> T: ...


@overload
def drain_in_phases(carry: T, live: Callable[[T], jax.Array], step: Callable[[T, S], tuple[T, S]], *, shrink: int,
                    min_phase: int, max_phases: int | None = None, shared: S,
                    busy: Callable[[S], jax.Array] | None = None) -> tuple[T, S]: ...


def drain_in_phases(carry: Any, live: Callable[[Any], jax.Array], step: Callable[..., Any], *, shrink: int,
                    min_phase: int, max_phases: int | None = None, shared: Any = None,
                    busy: Callable[[Any], jax.Array] | None = None) -> Any:
    """Apply ``step`` to ``carry`` until ``live(carry)`` (N,) is all false; returns the carry.

    A batched loop runs until its slowest lane is done. So it runs in phases over shrinking
    prefixes of the lanes: when at most 1/``shrink`` of the prefix is still live, its live lanes
    move to the front (a stable partition) and the next phase loops over that part only. Each
    phase compiles its own loop body (about a second), so the last phase is the one whose next
    prefix would hold fewer than ``min_phase`` lanes, or the ``max_phases``-th. Lanes end up
    permuted: carry their identity (an index) if the caller needs it.

    ``shared``: what the loop also carries whole, neither cut nor permuted (a queue's head, an
    output buffer); then ``step(carry, shared)`` returns both, and so does this. ``busy(shared)``
    (a scalar bool): the first phase also runs while it holds, however many lanes are live. A
    loop that refills lanes from a queue is so the first phase's own loop, not a second compiled
    body ahead of it (the path loop's bodies take seconds each to compile).
    """
    if shared is None:
        return drain_in_phases(carry, live, lambda c, s: (step(c), s), shrink=shrink, min_phase=min_phase,
                               max_phases=max_phases, shared=(),
                               busy=None if busy is None else lambda _: busy(()))[0]
    size = jax.tree.leaves(carry)[0].shape[-1]
    phase = 1
    while True:
        smaller = size // shrink
        last = smaller < min_phase or phase == max_phases
        bound = 0 if last else smaller

        def more(c, b=bound, first=phase == 1):
            draining = jnp.sum(live(c[0]), dtype=jnp.int32) > b
            return draining | busy(c[1]) if first and busy is not None else draining

        head, shared = jax.lax.while_loop(more, lambda c: step(*c), (_head(carry, size), shared))
        if not last:
            order = stable_partition(live(head))[0]
            head = jax.tree.map(lambda a: a[..., order], head)
        carry = jax.tree.map(lambda a, b: a.at[..., :size].set(b), carry, head)
        if last:
            return carry, shared
        size, phase = smaller, phase + 1


def drain_in_place(carry: T, inputs: Any, live: Callable[[T], jax.Array], step: Callable[[T, Any], T], *,
                   shrink: int, min_phase: int) -> T:
    """``drain_in_phases`` of ``carry`` under ``step(carry, inputs)``, ``inputs`` a pytree of
    per-lane arrays the step reads (moved with their lanes, not returned); the carry comes back
    in the lanes' own order. For loops whose lanes are independent (a lane's numbers its own):
    their bits then do not depend on the phases."""
    n = jax.tree.leaves(carry)[0].shape[-1]
    moved = (carry, inputs, jnp.arange(n, dtype=jnp.int32))
    out, _, index = drain_in_phases(moved, lambda c: live(c[0]), lambda c: (step(c[0], c[1]), c[1], c[2]),
                                    shrink=shrink, min_phase=min_phase)
    return jax.tree.map(lambda a: jnp.zeros_like(a).at[..., index].set(a, unique_indices=True), out)


# Lanes a ``by_kind`` branch runs over at a time: small windows pay a step each, large ones
# compute more lanes of the wrong kind. Measured on a 2-core AVX2 host, coherent BSDFs
# (tracer.bsdfs) at 4k lanes a device, second render: examples/orbit.xml 0.365 / 0.335 / 0.387 s
# at 128 / 256 / 512, materials.xml 0.699 / 0.706 / 0.754 s. Since a bounce's kernels got fewer
# (November 30, a 2-core AVX-512 host, 128x128, 64 spp, fastest of 5, two processes each, 64 /
# 128 / 256): orbit.xml 0.251-0.252 / 0.247-0.251 / 0.242-0.256 s, materials.xml 0.423-0.442 /
# 0.403-0.414 / 0.417-0.430, mesh.xml 0.354-0.366 / 0.354-0.358 / 0.361-0.380.
WINDOW = 128


def by_kind(slot: jax.Array, count: int, branch: Callable[[int, Any], Any], inputs: Any,
            window: int = WINDOW) -> Any:
    """``branch(j, inputs)`` for the lanes of ``slot`` (N,) == j, j in range(``count``) (static),
    run on those lanes only: a pytree of per-lane outputs (..., N), in the lanes' order.

    Computed for every lane and selected, each kind's code would cost every lane (XLA runs both
    sides of a batched ``where``). Here the lanes are sorted by slot (a counting sort: one prefix
    sum over the slots' masks) and one ``lax.scan`` runs over windows of ``window`` sorted lanes,
    each window a ``lax.switch`` to its slot's code. A slot's lanes fill whole windows but the
    last, whose spare lanes belong to the next slots (their windows come later and write over
    them), so the scan takes ceil(N / window) + count - 1 steps, a static count: reverse-mode
    differentiable, as a ``while_loop`` is not. A lane's numbers are its own and every window has
    the same shape, so its bits depend neither on N nor on the lanes beside it.
    """
    n = slot.shape[0]
    mine = slot[None, :] == jnp.arange(count, dtype=slot.dtype)[:, None]
    upto = _prefix_counts(mine)
    sizes = upto[:, -1]
    offsets = jnp.cumsum(sizes) - sizes
    position = jnp.sum(jnp.where(mine, offsets[:, None] + upto - 1, 0), axis=0)
    # Sorted inputs, then a window of spare lanes (copies of lane 0) that the last window may reach.
    order = jnp.zeros(n + window, jnp.int32).at[position].set(jnp.arange(n, dtype=jnp.int32), unique_indices=True)
    sorted_inputs = jax.tree.map(lambda a: a[..., order], inputs)
    # Step w's slot (``count``: a spare step, when slots end mid-window) and first lane.
    steps = -(-n // window) + count - 1
    runs = (sizes + window - 1) // window
    ends = jnp.cumsum(runs)
    w = jnp.arange(steps, dtype=jnp.int32)
    step_slot = jnp.sum(w[:, None] >= ends[None, :], axis=1, dtype=jnp.int32)
    j = jnp.minimum(step_slot, count - 1)
    start = jnp.where(step_slot < count, offsets[j] + (w - (ends[j] - runs[j])) * window, n)

    def cut(tree, at):
        return jax.tree.map(lambda a: jax.lax.dynamic_slice_in_dim(a, at, window, axis=a.ndim - 1), tree)

    shapes = jax.eval_shape(lambda x: branch(0, cut(x, 0)), sorted_inputs)
    spare = lambda _: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    branches = [lambda x, j=j: branch(j, x) for j in range(count)] + [spare]

    def run(out, step):
        which, at = step
        result = jax.lax.switch(which, branches, cut(sorted_inputs, at))
        return jax.tree.map(lambda o, r: jax.lax.dynamic_update_slice_in_dim(o, r, at, axis=o.ndim - 1),
                            out, result), None

    out = jax.tree.map(lambda s: jnp.zeros((*s.shape[:-1], n + window), s.dtype), shapes)
    out, _ = jax.lax.scan(run, out, (step_slot, start))
    return jax.tree.map(lambda a: a[..., position], out)


def prefix_count(mask: jax.Array) -> jax.Array:
    """Inclusive prefix sum (int32) of a (N,) bool ``mask``: ``jnp.cumsum(mask)``'s numbers, made
    as ``_prefix_counts`` makes them (below 2^24 lanes; by cumsum itself above)."""
    if mask.shape[0] >= 1 << 24:
        return jnp.cumsum(mask, dtype=jnp.int32)
    return _prefix_counts(mask[None])[0]


def _prefix_counts(mask: jax.Array) -> jax.Array:
    """Inclusive prefix sums (int32) of the rows of a (K, N) bool ``mask`` (``_prefix_sums``).
    Exact below 2^24 lanes, in full float32. ``jnp.cumsum`` (XLA's associative scan: a dozen
    strided passes) took twice as long, 89 against 42 us for two rows of 4k on one core."""
    return _prefix_sums(mask.astype(jnp.float32)).astype(jnp.int32)


def _prefix_sums(x: jax.Array, block: int = 64) -> jax.Array:
    """Inclusive prefix sums of the rows of (K, N) float32 whole numbers, as matrix products with
    triangular matrices of ones: within blocks of ``block``, then over the blocks' totals (the
    same way again where there are more than ``block`` blocks). Exact while the sums stay below
    2^24."""
    k, n = x.shape
    padded = -(-n // block) * block
    x = jnp.pad(x, ((0, 0), (0, padded - n))).reshape(k, -1, block)
    exact = jax.lax.Precision.HIGHEST  # (a GPU's default would round the inputs to TF32's 10 bits)
    within = jnp.matmul(x, jnp.triu(jnp.ones((block, block), jnp.float32)), precision=exact)
    totals = within[:, :, -1]
    if totals.shape[1] > block:
        before = _prefix_sums(totals, block) - totals
    else:
        before = jnp.matmul(totals, jnp.triu(jnp.ones((totals.shape[1],) * 2, jnp.float32), 1), precision=exact)
    return (within + before[:, :, None]).reshape(k, padded)[:, :n]


def _head(tree: T, size: int) -> T:
    return jax.tree.map(lambda a: a[..., :size], tree)


def min_key(t: jax.Array, index_bits: int, axis: int) -> jax.Array:
    """Integer min along ``axis`` of keys (t's bits, low ``index_bits`` bits replaced by the
    candidate's position along ``axis``).

    t > 0 (or inf) orders like its bits, so the min key is the closest candidate; XLA vectorizes
    an int32 min reduction, not an argmin. Candidates within 2^index_bits ulps tie and the lower
    position wins: callers recompute the winner's exact t. Needs t.shape[axis] <= 2^index_bits.
    """
    shape = [1] * t.ndim
    shape[axis] = t.shape[axis]
    position = jnp.arange(t.shape[axis], dtype=jnp.int32).reshape(shape)
    low = (1 << index_bits) - 1
    return jnp.min((jax.lax.bitcast_convert_type(t, jnp.int32) & ~low) | position, axis=axis)


def key_index(key: jax.Array, index_bits: int) -> jax.Array:
    """The candidate position a ``min_key`` key holds (meaningful where key < INF_KEY)."""
    return key & ((1 << index_bits) - 1)


def key_t(key: jax.Array, index_bits: int) -> jax.Array:
    """The truncated t a ``min_key`` key holds (inf for INF_KEY)."""
    return jax.lax.bitcast_convert_type(key & ~((1 << index_bits) - 1), jnp.float32)
