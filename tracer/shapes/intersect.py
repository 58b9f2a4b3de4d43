"""Ray-primitive intersection kernels and the brute-force closest hit / occlusion queries.

Triangles use the watertight test of Woop, Benthin and Wald 2013 ("Watertight Ray/Triangle
Intersection", JCGT 2(1)): vertices are translated to the ray origin and sheared so the ray runs
along +z; the three 2D edge functions then depend only on (vertex, ray), so two triangles that
share an edge evaluate it to exactly opposite values and a ray can never slip between them.
The shear is written as three per-ray row vectors (``RayShear``: one unit entry, zeros and the
shear) so that one kernel serves every ray without a per-ray permutation; every vertex goes
through the same expression, which is all that watertightness asks of it.

Spheres follow Mitsuba 3's ``sphere.cpp`` (the origin is first moved to the ray's point closest
to the center, then the roots are found about it), disks ``disk.cpp`` (the plane z = 0 of the local frame, inside
the unit circle), cylinders ``cylinder.cpp`` (the unit-radius tube 0 <= z <= 1 of the local
frame, no caps). Every kernel broadcasts: primitive data of shape (P, 1) against rays (N,) gives
(P, N) answers. Misses have t = inf; hits have 0 < t < t_max.
"""

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from tracer import lanes

from tracer.shapes import curves, sdfgrid
from tracer import vecmath as vm
from tracer.kinds import SurfaceKind
from tracer.pytree import pytree_dataclass

__all__ = [
    "Hit", "RayShear", "ray_shear", "intersect_triangles", "intersect_sphere",
    "intersect_disk", "intersect_cylinder", "intersect_analytic", "closest_hit", "occluded", "exact_hit", "miss",
]

INF = np.float32(np.inf)


@pytree_dataclass
class Hit:
    """Closest hits of N rays. ``prim`` indexes the geometry's primitives, -1 for a miss.

    For triangles (u, v) are the barycentrics of p1 and p2 (hit = p0 + u e1 + v e2); for a disk
    they are the local (x, y) of the hit; for a sphere or a cylinder they are unused (zero).
    In a scene with instances, ``instance`` says which one was hit (-1: a primitive in world
    space); (u, v) and t are then those of the instance's object space (t is the same there).
    """

    t: jnp.ndarray     # (N,) distance along d, inf for a miss
    prim: jnp.ndarray  # (N,) int32 primitive id, -1 for a miss
    u: jnp.ndarray     # (N,)
    v: jnp.ndarray     # (N,)
    instance: jnp.ndarray | None = None  # (N,) int32 instance hit, -1 for none; None without instances


@pytree_dataclass
class RayShear:
    """Per-ray constants of the watertight test: rows of the shear ``S P`` (each (3, N))."""

    sx: jnp.ndarray  # e_kx - (d_kx / d_kz) e_kz
    sy: jnp.ndarray  # e_ky - (d_ky / d_kz) e_kz
    sz: jnp.ndarray  # e_kz / d_kz


def miss(like: jax.Array) -> Hit:
    """No hit for rays shaped like ``like`` (N,)."""
    return Hit(jnp.full_like(like, INF), jnp.full_like(like, -1, jnp.int32), jnp.zeros_like(like), jnp.zeros_like(like))


def ray_shear(d: jax.Array) -> RayShear:
    """Woop et al. section 3: kz = argmax |d|, (kx, ky) its successors, swapped if d_kz < 0."""
    a = jnp.abs(d)
    kz = jnp.where((a[0] >= a[1]) & (a[0] >= a[2]), 0, jnp.where(a[1] >= a[2], 1, 2))
    kx = (kz + 1) % 3
    ky = (kx + 1) % 3
    # d's component k by selects: XLA makes take_along_axis a gather, which costs more here.
    component = lambda k: jnp.where(k == 0, d[0], jnp.where(k == 1, d[1], d[2]))
    dz = component(kz)
    kx, ky = jnp.where(dz < 0, ky, kx), jnp.where(dz < 0, kx, ky)
    dx, dy = component(kx), component(ky)
    axes = jnp.arange(3)[:, None]
    ex, ey, ez = (axes == kx).astype(d.dtype), (axes == ky).astype(d.dtype), (axes == kz).astype(d.dtype)
    inv_dz = 1.0 / dz
    return RayShear(sx=ex - (dx * inv_dz) * ez, sy=ey - (dy * inv_dz) * ez, sz=ez * inv_dz)


def _row(row: jax.Array, a0: jax.Array, a1: jax.Array, a2: jax.Array) -> jax.Array:
    return a0 * row[0] + a1 * row[1] + a2 * row[2]


def intersect_triangles(p0: Sequence[jax.Array], p1: Sequence[jax.Array], p2: Sequence[jax.Array],
                        o: Sequence[jax.Array], shear: RayShear,
                        t_max: ArrayLike) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Watertight ray-triangle test; two-sided, degenerate triangles never hit.

    p0, p1, p2: tuples of three coordinate arrays (triangle vertices), o: tuple of three origin
    arrays, ``shear`` from ``ray_shear``, t_max: upper bound -- all mutually broadcastable.
    Returns (t, u, v): t = inf where missed, (u, v) the barycentrics of p1 and p2.
    """
    sx, sy, sz = shear.sx, shear.sy, shear.sz
    a = [p0[i] - o[i] for i in range(3)]
    b = [p1[i] - o[i] for i in range(3)]
    c = [p2[i] - o[i] for i in range(3)]
    ax, ay = _row(sx, *a), _row(sy, *a)
    bx, by = _row(sx, *b), _row(sy, *b)
    cx, cy = _row(sx, *c), _row(sy, *c)
    # Edge functions U = cx by - cy bx, V = ax cy - ay cx, W = bx ay - by ax. XLA's CPU backend
    # always contracts a*b - c*d into an FMA, which breaks U(p, q) = -U(q, p); the signs are
    # therefore taken from comparisons of the two rounded products, which no compiler fuses.
    pu, qu = cx * by, cy * bx
    pv, qv = ax * cy, ay * cx
    pw, qw = bx * ay, by * ax
    pos = (pu > qu) | (pv > qv) | (pw > qw)
    neg = (pu < qu) | (pv < qv) | (pw < qw)
    eu, ev, ew = pu - qu, pv - qv, pw - qw
    det = eu + ev + ew
    # Not mixed signs, not all zero (degenerate triangle or a ray in its plane), det agrees.
    ok = (pos != neg) & jnp.where(pos, det > 0, det < 0)
    tz = eu * _row(sz, *a) + ev * _row(sz, *b) + ew * _row(sz, *c)
    inv_det = 1.0 / jnp.where(ok, det, 1.0)
    t = tz * inv_det
    hit = ok & (t > 0) & (t < t_max)
    return jnp.where(hit, t, INF), ev * inv_det, ew * inv_det


def sphere_center_radius(to_world: jax.Array) -> tuple[jax.Array, jax.Array]:
    """World center and radius of Mitsuba's sphere: to_world (3, 4, ...) applied to 0 and e_x."""
    center = to_world[:, 3]
    radius = jnp.sqrt(vm.dot(to_world[:, 0], to_world[:, 0]))
    return center, radius


def intersect_sphere(center: jax.Array, radius: jax.Array, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> jax.Array:
    """Mitsuba 3's robust ray-sphere test; center (3, ...) and o, d (3, ...) broadcast.

    As in sphere.cpp the origin first moves along the ray to q, here the ray's point closest to
    the center (t_c = -l.d / d.d, so for an instance's unnormalized d too); the roots are then
    t_c -+ sqrt((r^2 - |q|^2) / d.d). Mitsuba solves the quadratic in q with its stable formula,
    whose linear term 2 q.d is zero up to rounding: the formula picks a root by that term's
    sign and uses the term twice, and XLA may compute it twice in two fusions that contract
    FMAs differently, so the two uses could disagree in sign and give both roots the far one's
    value (1 ray in 25 through a sphere of an instance lost its near side). This form has no
    such term, as the cylinder's.
    """
    l = [o[i] - center[i] for i in range(3)]
    dd = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    t_c = -(l[0] * d[0] + l[1] * d[1] + l[2] * d[2]) / dd
    q = [l[i] + t_c * d[i] for i in range(3)]
    h2 = (radius * radius - (q[0] * q[0] + q[1] * q[1] + q[2] * q[2])) / dd
    h = jnp.sqrt(jnp.maximum(h2, 0.0))
    near, far = t_c - h, t_c + h
    t = jnp.where(near > 0, near, far)
    hit = (h2 >= 0) & (t > 0) & (t < t_max)
    return jnp.where(hit, t, INF)


def intersect_disk(to_local: jax.Array, o: jax.Array, d: jax.Array,
                   t_max: ArrayLike) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Unit disk in the local z = 0 plane; returns (t, local x, local y)."""
    oz = to_local[2, 0] * o[0] + to_local[2, 1] * o[1] + to_local[2, 2] * o[2] + to_local[2, 3]
    dz = to_local[2, 0] * d[0] + to_local[2, 1] * d[1] + to_local[2, 2] * d[2]
    t = -oz / jnp.where(dz != 0, dz, 1.0)
    x = (to_local[0, 0] * o[0] + to_local[0, 1] * o[1] + to_local[0, 2] * o[2] + to_local[0, 3]
         + t * (to_local[0, 0] * d[0] + to_local[0, 1] * d[1] + to_local[0, 2] * d[2]))
    y = (to_local[1, 0] * o[0] + to_local[1, 1] * o[1] + to_local[1, 2] * o[2] + to_local[1, 3]
         + t * (to_local[1, 0] * d[0] + to_local[1, 1] * d[1] + to_local[1, 2] * d[2]))
    hit = (dz != 0) & (t > 0) & (t < t_max) & (x * x + y * y <= 1.0)
    return jnp.where(hit, t, INF), x, y


def intersect_cylinder(to_local: jax.Array, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> jax.Array:
    """Mitsuba's cylinder: the local tube x^2 + y^2 = 1, 0 <= z <= 1, open at both ends.

    Mitsuba solves the quadratic in float64; in float32 the ray is first moved to its point
    closest to the axis (in xy), as Mitsuba's sphere test does, so that the roots keep their
    digits for rays from far away: with A = dx^2 + dy^2 and that point q, the roots are
    t_c -+ sqrt((1 - qx^2 - qy^2) / A). Which root counts follows cylinder.cpp: the near one if
    it lies on the tube at t >= 0, else the far one if it does at t <= t_max; none when the
    segment [0, t_max] lies inside the infinite tube. Returns t.
    """
    row = lambda k, v, w: to_local[k, 0] * v[0] + to_local[k, 1] * v[1] + to_local[k, 2] * v[2] + w
    ox, oy, oz = (row(k, o, to_local[k, 3]) for k in range(3))
    dx, dy, dz = (row(k, d, 0.0) for k in range(3))
    a = dx * dx + dy * dy
    safe_a = jnp.where(a > 0, a, 1.0)
    t_c = -(dx * ox + dy * oy) / safe_a
    qx, qy = ox + t_c * dx, oy + t_c * dy
    h2 = (1.0 - (qx * qx + qy * qy)) / safe_a
    found = (a > 0) & (h2 >= 0)
    h = jnp.sqrt(jnp.maximum(h2, 0.0))
    near, far = t_c - h, t_c + h
    z_near, z_far = oz + dz * near, oz + dz * far
    inside = (near < 0) & (far > t_max)  # the segment never meets the tube
    on_near = (z_near >= 0) & (z_near <= 1) & (near >= 0)
    on_far = (z_far >= 0) & (z_far <= 1) & (far <= t_max)
    t = jnp.where(on_near, near, far)
    hit = found & (near <= t_max) & (far >= 0) & ~inside & (on_near | on_far) & (t > 0) & (t < t_max)
    return jnp.where(hit, t, INF)


def intersect_analytic(kind: jax.Array, to_world: jax.Array, to_local: jax.Array, o: jax.Array, d: jax.Array,
                       t_max: ArrayLike,
                       kinds: tuple[int, ...] = SurfaceKind.ANALYTIC) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Spheres, disks, cylinders, curve segments and SDF voxels by ``kind``: matrices (3, 4, ...) broadcast against rays. (t, u, v).

    ``kinds`` (static): the kinds that may occur; the others' tests are left out.
    """
    t: ArrayLike
    u: ArrayLike
    v: ArrayLike
    t, u, v = INF, np.float32(0), np.float32(0)
    if SurfaceKind.SPHERE in kinds:
        center, radius = sphere_center_radius(to_world)
        t = jnp.where(kind == SurfaceKind.SPHERE, intersect_sphere(center, radius, o, d, t_max), t)
    if SurfaceKind.DISK in kinds:
        t_disk, x, y = intersect_disk(to_local, o, d, t_max)
        is_disk = kind == SurfaceKind.DISK
        t, u, v = jnp.where(is_disk, t_disk, t), jnp.where(is_disk, x, u), jnp.where(is_disk, y, v)
    if SurfaceKind.CYLINDER in kinds:
        t = jnp.where(kind == SurfaceKind.CYLINDER, intersect_cylinder(to_local, o, d, t_max), t)
    if any(k in kinds for k in SurfaceKind.CURVES):  # u: the segment's v_local
        t_curve, v_local = curves.intersect(kind, to_world, to_local, o, d, t_max, kinds)
        is_curve = (kind == SurfaceKind.LINEAR_CURVE) | (kind == SurfaceKind.BSPLINE_CURVE)
        t, u = jnp.where(is_curve, t_curve, t), jnp.where(is_curve, v_local, u)
    if SurfaceKind.SDF_VOXEL in kinds:
        t = jnp.where(kind == SurfaceKind.SDF_VOXEL, sdfgrid.intersect(to_world, to_local, o, d, t_max), t)
    shape = jnp.broadcast_shapes(jnp.shape(kind), jnp.shape(o[0]), jnp.shape(t_max))
    return jnp.broadcast_to(t, shape), jnp.broadcast_to(u, shape), jnp.broadcast_to(v, shape)


# ---------------------------------------------------------------------------------------------
# Brute force over all primitives: the fast path for small scenes.
#
# The closest of P candidates is found chunk by chunk with one integer min per ray over keys
# that hold t's bits and the candidate's index (``lanes.min_key``); the winner's t and
# barycentrics are then recomputed exactly.

_CHUNK = 16  # candidates per key (4 index bits); more chunks are unrolled or looped
_UNROLL_CHUNKS = 4
_BITS = _CHUNK.bit_length() - 1


def _keys(t: jax.Array, offset: int | jax.Array) -> tuple[jax.Array, jax.Array]:
    """The closest of the (C, N) candidates t: (key (N,), global index (N,))."""
    key = lanes.min_key(t, _BITS, axis=0)
    return key, lanes.key_index(key, _BITS) + offset


def _scan_chunks(n_prims: int, like: jax.Array, chunk_key: Callable[[int | jax.Array], tuple[jax.Array, ...]],
                 extra: int = 0) -> tuple[jax.Array, ...]:
    """Running min of ``chunk_key(start) -> (key, index, *values)`` over chunks of ``_CHUNK``
    candidates (``extra`` float values of the winner carried along).

    ``like`` (N,) shapes the carry (``*_like`` keeps shard_map's varying type, ``jnp.full`` not).
    """
    n_chunks = -(-n_prims // _CHUNK)
    best = (jnp.full_like(like, lanes.INF_KEY, jnp.int32), jnp.full_like(like, -1, jnp.int32),
            *(jnp.zeros_like(like, jnp.float32) for _ in range(extra)))

    def merge(best, start):
        found = chunk_key(start)
        closer = found[0] < best[0]
        return tuple(jnp.where(closer, f, b) for f, b in zip(found, best))

    if n_chunks <= _UNROLL_CHUNKS:
        for c in range(n_chunks):
            best = merge(best, c * _CHUNK)
        return best
    return jax.lax.fori_loop(0, n_chunks, lambda c, b: merge(b, c * _CHUNK), best)


def _chunk(p: jax.Array, start: int | jax.Array, n_prims: int, fill: float) -> jax.Array:
    """Candidates [start, start + _CHUNK) of p (..., P) as (..., _CHUNK, 1); a traced ``start``
    (a looped chunk) reads a copy padded with ``fill``."""
    if isinstance(start, int):
        c = p[..., start:min(start + _CHUNK, n_prims)]  # an unrolled last chunk is just shorter
    else:
        pad = [(0, 0)] * (p.ndim - 1) + [(0, _CHUNK)]
        c = jax.lax.dynamic_slice_in_dim(jnp.pad(p, pad, constant_values=fill), start, _CHUNK, axis=p.ndim - 1)
    return c[..., None]


def _triangle_keys(tri, o, shear, t_max):
    n_tri = tri[0].shape[1]

    def chunk_key(start):
        # Padding triangles are all zero: degenerate, never hit.
        p0, p1, p2 = (_chunk(p, start, n_tri, 0.0) for p in tri)
        t, _, _ = intersect_triangles(tuple(p0), tuple(p1), tuple(p2), tuple(o), shear, t_max)
        return _keys(t, start)

    return _scan_chunks(n_tri, o[0], chunk_key)


def _analytic_keys(analytic, o, d, t_max, kinds):
    """The closest analytic primitive of each ray: (key, index, its exact t, u, v). Each
    candidate's hit is exact already, so the winner's is kept from its chunk (selected by
    position) rather than computed again from its gathered matrices, which cost more than all
    the candidates' tests of a few shapes."""
    kind, to_world, to_local = analytic
    n_analytic = kind.shape[0]

    def chunk_key(start):
        k = _chunk(kind, start, n_analytic, -1)
        t, u, v = intersect_analytic(k, _chunk(to_world, start, n_analytic, 0.0), _chunk(to_local, start, n_analytic, 0.0),
                                     o[:, None], d[:, None], t_max, kinds)
        key, index = _keys(jnp.where(k >= 0, t, INF), start)
        return key, index, _of_winner(t, key), _of_winner(u, key), _of_winner(v, key)

    return _scan_chunks(n_analytic, o[0], chunk_key, extra=3)


def _of_winner(a: jax.Array, key: jax.Array) -> jax.Array:
    """The (C, N) candidates' values ``a`` of the candidate each ray's ``key`` names (a chain of
    selects: XLA's CPU gathers cost more)."""
    position = lanes.key_index(key, _BITS)
    out = a[0]
    for c in range(1, a.shape[0]):
        out = jnp.where(position == c, a[c], out)
    return out


def _ray_setup(o: jax.Array, d: jax.Array, t_max: ArrayLike,
               triangles: bool) -> tuple[jax.Array, jax.Array, jax.Array, RayShear | None]:
    """The rays and, where there are ``triangles`` to test, their shear, materialized once: XLA
    would otherwise fuse the making of the rays (spawning, normalizing) into the (primitives x
    rays) search and redo it per primitive. (A shear behind the barrier is computed, used or not.)
    The shear's rows pass the barrier as one (9, N) array: two kernels fewer than three arrays."""
    o, d = jnp.asarray(o, jnp.float32), jnp.asarray(d, jnp.float32)
    extent = jnp.zeros_like(o[0]) + t_max
    rows = _shear_rows(d) if triangles else None
    o, d, extent, rows = jax.lax.optimization_barrier((o, d, extent, rows))
    return o, d, extent, None if rows is None else _from_rows(rows)


def _shear_rows(d: jax.Array) -> jax.Array:
    """``ray_shear(d)``'s rows stacked (9, N), for a barrier to materialize as one array."""
    shear = ray_shear(d)
    return jnp.concatenate([shear.sx, shear.sy, shear.sz])


def _from_rows(rows: jax.Array) -> RayShear:
    return RayShear(rows[0:3], rows[3:6], rows[6:9])


def closest_hit(tri: Sequence[jax.Array], analytic: Sequence[jax.Array], o: jax.Array, d: jax.Array, t_max: ArrayLike,
                kinds: tuple[int, ...] = SurfaceKind.ANALYTIC, corners: jax.Array | None = None) -> Hit:
    """Brute-force closest hit with 0 < t < t_max. tri = (p0, p1, p2), each (3, T); analytic =
    (kind (A,), to_world (3, 4, A), to_local (3, 4, A)), of the static ``kinds``. Triangles have
    ids [0, T), analytic primitives [T, T + A). ``corners``: as ``exact_hit`` takes them."""
    n_tri = tri[0].shape[1]
    n_analytic = analytic[0].shape[0]
    o, d, t_max, shear = _ray_setup(o, d, t_max, triangles=n_tri > 0)
    key = jnp.full_like(o[0], lanes.INF_KEY, jnp.int32)
    prim = jnp.full_like(o[0], -1, jnp.int32)
    if n_tri:
        key, prim = _triangle_keys(tri, o, shear, t_max)
    analytic_hit = None
    if n_analytic:
        # Keys are comparable across the two sets: same truncation of t.
        k, i, *analytic_hit = _analytic_keys(analytic, o, d, t_max, kinds)
        closer = k < key
        key, prim = jnp.where(closer, k, key), jnp.where(closer, i + n_tri, prim)
    prim = jnp.where(key < lanes.INF_KEY, prim, -1)
    t_key = lanes.key_t(key, _BITS)
    return exact_hit(tri, analytic, o, d, prim, t_key, shear, kinds, corners=corners, analytic_hit=analytic_hit)


def exact_hit(tri: Sequence[jax.Array], analytic: Sequence[jax.Array], o: jax.Array, d: jax.Array, prim: jax.Array,
              t_approx: jax.Array, shear: RayShear | None = None, kinds: tuple[int, ...] = SurfaceKind.ANALYTIC,
              corners: jax.Array | None = None, analytic_hit: Sequence[jax.Array] | None = None) -> Hit:
    """Recompute t and (u, v) of each ray's winning primitive ``prim`` (-1 for a miss) exactly.
    ``analytic_hit``: (t, u, v) (N,) of the rays' closest analytic primitive, exact already (the
    brute force's), taken where that primitive won instead of computed again.

    ``t_approx`` (a truncated t from the search) stands in if the recomputation misses, which
    can only happen for t within an ulp of the search's bounds. ``corners`` (T', 9 or more), T' >=
    T: each triangle's p0, p1, p2 in its row's first 9 columns (``Geometry.tri_records``), the
    same values as ``tri``'s, read in one gather a lane instead of nine (a large mesh's rows miss
    the cache).
    """
    n_tri = tri[0].shape[1]
    n_analytic = analytic[0].shape[0]
    found = prim >= 0
    t = jnp.full(prim.shape, INF)
    u = v = jnp.zeros(prim.shape, jnp.float32)
    if n_tri:
        # Materialized as one array: fused into the test's three results, it took 13 kernels.
        shear = _from_rows(jax.lax.optimization_barrier(_shear_rows(d))) if shear is None else shear
        i = jnp.clip(prim, 0, n_tri - 1)
        if corners is None:
            p0, p1, p2 = (tuple(vertex[k][i] for k in range(3)) for vertex in tri)
        else:
            c = corners[i, :9].T
            p0, p1, p2 = (tuple(c[3 * j + k] for k in range(3)) for j in range(3))
        t, u, v = intersect_triangles(p0, p1, p2, tuple(o), shear, INF)
    if n_analytic:
        if analytic_hit is None:
            kind, to_world, to_local = analytic
            q = jnp.clip(prim - n_tri, 0, n_analytic - 1)
            tq, x, y = intersect_analytic(kind[q], lanes.take(to_world, q), lanes.take(to_local, q), o, d, INF, kinds)
        else:
            tq, x, y = analytic_hit
        is_analytic = prim >= n_tri
        t, u, v = jnp.where(is_analytic, tq, t), jnp.where(is_analytic, x, u), jnp.where(is_analytic, y, v)
    t = jnp.where(t < INF, t, t_approx)
    return Hit(t=jnp.where(found, t, INF), prim=prim, u=jnp.where(found, u, 0.0), v=jnp.where(found, v, 0.0))


def occluded(tri: Sequence[jax.Array], analytic: Sequence[jax.Array], o: jax.Array, d: jax.Array, t_max: ArrayLike,
             kinds: tuple[int, ...] = SurfaceKind.ANALYTIC) -> jax.Array:
    """Brute-force shadow test: any primitive with 0 < t < t_max."""
    n_tri, n_analytic = tri[0].shape[1], analytic[0].shape[0]
    o, d, t_max, shear = _ray_setup(o, d, t_max, triangles=n_tri > 0)
    blocked = jnp.zeros_like(o[0], bool)
    if n_tri:
        def triangles_hit(s):
            p0, p1, p2 = (tuple(_chunk(p, s, n_tri, 0.0)) for p in tri)
            return _any_finite(intersect_triangles(p0, p1, p2, tuple(o), shear, t_max)[0])

        blocked = _any_hit(n_tri, blocked, triangles_hit)
    if n_analytic:
        kind, to_world, to_local = analytic
        blocked = _any_hit(n_analytic, blocked, lambda s: _any_finite(intersect_analytic(
            _chunk(kind, s, n_analytic, -1), _chunk(to_world, s, n_analytic, 0.0), _chunk(to_local, s, n_analytic, 0.0),
            o[:, None], d[:, None], t_max, kinds)[0]))
    return blocked


def _any_finite(t: jax.Array) -> jax.Array:
    """Whether any of the (P, N) hit distances t (positive, or inf) is finite, per ray.

    An integer min over t's bits, like the closest-hit keys: XLA's CPU backend fuses that into
    the intersection loop, while it hands a float min to a library reduction, which needs the
    (P, N) distances written out first (and an any over booleans does not vectorize at all).
    """
    return jnp.min(jax.lax.bitcast_convert_type(t, jnp.int32), axis=0) < lanes.INF_KEY


def _any_hit(n_prims: int, blocked: jax.Array, chunk_any: Callable[[int | jax.Array], jax.Array]) -> jax.Array:
    n_chunks = -(-n_prims // _CHUNK)
    if n_chunks <= _UNROLL_CHUNKS:
        for c in range(n_chunks):
            blocked = blocked | chunk_any(c * _CHUNK)
        return blocked
    return jax.lax.fori_loop(0, n_chunks, lambda c, b: b | chunk_any(c * _CHUNK), blocked)
