"""Ray-primitive intersection kernels and the brute-force closest hit / occlusion queries.

Triangles use the watertight test of Woop, Benthin and Wald 2013 ("Watertight Ray/Triangle
Intersection", JCGT 2(1)): vertices are translated to the ray origin and sheared so the ray runs
along +z; the three 2D edge functions then depend only on (vertex, ray), so two triangles that
share an edge evaluate it to exactly opposite values and a ray can never slip between them.
The shear is written as three per-ray row vectors (``RayShear``) so that the same kernel serves
every ray without a per-ray permutation; a row has one unit entry and zeros, so a dot product
with it is bit-identical to the paper's permuted expression.

Spheres follow Mitsuba 3's ``sphere.cpp`` (the origin is first moved to the plane through the
center, then a stable quadratic), disks ``disk.cpp`` (the plane z = 0 of the local frame, inside
the unit circle). Every kernel broadcasts: primitive data of shape (P, 1) against rays (N,) gives
(P, N) answers. Misses have t = inf; hits have 0 < t < t_max.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from tracer.pytree import pytree_dataclass

__all__ = [
    "SPHERE", "DISK", "Hit", "RayShear", "ray_shear", "intersect_triangles", "intersect_sphere",
    "intersect_disk", "intersect_analytic", "closest_hit", "occluded",
]

SPHERE, DISK = 0, 1
INF = np.float32(np.inf)
# Triangle x ray pairs per brute-force chunk: bounds memory, keeps the chunk in cache.
_CHUNK_PAIRS = 1 << 21


@pytree_dataclass
class Hit:
    """Closest hits of N rays. ``prim`` indexes the geometry's primitives, -1 for a miss.

    For triangles (u, v) are the barycentrics of p1 and p2 (hit = p0 + u e1 + v e2); for a disk
    they are the local (x, y) of the hit; for a sphere they are unused (zero).
    """

    t: jnp.ndarray     # (N,) distance along d, inf for a miss
    prim: jnp.ndarray  # (N,) int32 primitive id, -1 for a miss
    u: jnp.ndarray     # (N,)
    v: jnp.ndarray     # (N,)


@pytree_dataclass
class RayShear:
    """Per-ray constants of the watertight test: rows of the shear ``S P`` (each (3, N))."""

    sx: jnp.ndarray  # e_kx - (d_kx / d_kz) e_kz
    sy: jnp.ndarray  # e_ky - (d_ky / d_kz) e_kz
    sz: jnp.ndarray  # e_kz / d_kz


def miss(n):
    return Hit(jnp.full((n,), INF), jnp.full((n,), -1, jnp.int32), jnp.zeros((n,)), jnp.zeros((n,)))


def ray_shear(d):
    """Woop et al. section 3: kz = argmax |d|, (kx, ky) its successors, swapped if d_kz < 0."""
    a = jnp.abs(d)
    kz = jnp.where((a[0] >= a[1]) & (a[0] >= a[2]), 0, jnp.where(a[1] >= a[2], 1, 2))
    kx = (kz + 1) % 3
    ky = (kx + 1) % 3
    dz = jnp.take_along_axis(d, kz[None], axis=0)[0]
    kx, ky = jnp.where(dz < 0, ky, kx), jnp.where(dz < 0, kx, ky)
    dx = jnp.take_along_axis(d, kx[None], axis=0)[0]
    dy = jnp.take_along_axis(d, ky[None], axis=0)[0]
    axes = jnp.arange(3)[:, None]
    ex, ey, ez = (axes == kx).astype(d.dtype), (axes == ky).astype(d.dtype), (axes == kz).astype(d.dtype)
    inv_dz = 1.0 / dz
    return RayShear(sx=ex - (dx * inv_dz) * ez, sy=ey - (dy * inv_dz) * ez, sz=ez * inv_dz)


def _row(row, a0, a1, a2):
    return a0 * row[0] + a1 * row[1] + a2 * row[2]


def intersect_triangles(p0, p1, p2, o, shear, t_max):
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


def solve_quadratic(a, b, c):
    """Real roots of a x^2 + b x + c (Mitsuba's ``math::solve_quadratic``): (found, x0 <= x1)."""
    linear = a == 0
    x_lin = -c / jnp.where(b != 0, b, 1.0)
    disc = b * b - 4.0 * a * c
    sq = jnp.sqrt(jnp.maximum(disc, 0.0))
    temp = -0.5 * (b + jnp.where(b < 0, -sq, sq))
    x0 = temp / jnp.where(linear, 1.0, a)
    x1 = c / jnp.where(temp != 0, temp, 1.0)
    lo, hi = jnp.minimum(x0, x1), jnp.maximum(x0, x1)
    found = jnp.where(linear, b != 0, disc >= 0)
    return found, jnp.where(linear, x_lin, lo), jnp.where(linear, x_lin, hi)


def sphere_center_radius(to_world):
    """World center and radius of Mitsuba's sphere: to_world (3, 4, ...) applied to 0 and e_x."""
    center = to_world[:, 3]
    radius = jnp.sqrt(jnp.sum(to_world[:, 0] ** 2, axis=0))
    return center, radius


def intersect_sphere(center, radius, o, d, t_max):
    """Mitsuba 3's robust ray-sphere test; center (3, ...) and o, d (3, ...) broadcast."""
    l = [o[i] - center[i] for i in range(3)]
    dd = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    plane_t = -(l[0] * d[0] + l[1] * d[1] + l[2] * d[2]) / jnp.sqrt(dd)
    q = [l[i] + plane_t * d[i] for i in range(3)]
    b = 2.0 * (q[0] * d[0] + q[1] * d[1] + q[2] * d[2])
    c = q[0] * q[0] + q[1] * q[1] + q[2] * q[2] - radius * radius
    found, near, far = solve_quadratic(dd, b, c)
    near, far = near + plane_t, far + plane_t
    t = jnp.where(near > 0, near, far)
    hit = found & (t > 0) & (t < t_max)
    return jnp.where(hit, t, INF)


def intersect_disk(to_local, o, d, t_max):
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


def intersect_analytic(kind, to_world, to_local, o, d, t_max):
    """Spheres and disks by ``kind``: matrices (3, 4, ...) broadcast against rays. (t, u, v)."""
    center, radius = sphere_center_radius(to_world)
    t_sphere = intersect_sphere(center, radius, o, d, t_max)
    t_disk, x, y = intersect_disk(to_local, o, d, t_max)
    is_disk = kind == DISK
    zero = jnp.zeros_like(x)
    return jnp.where(is_disk, t_disk, t_sphere), jnp.where(is_disk, x, zero), jnp.where(is_disk, y, zero)


# ---------------------------------------------------------------------------------------------
# Brute force over all primitives: the fast path for small scenes.

def _triangle_chunks(n_tri, n_rays):
    chunk = max(1, min(n_tri, _CHUNK_PAIRS // max(n_rays, 1)))
    return chunk, -(-n_tri // chunk)


def _brute_triangles(p0, p1, p2, o, d, t_max):
    """Closest triangle hit: p* are (3, T) arrays; one broadcast per chunk of triangles."""
    n_tri, n = p0.shape[1], o.shape[1]
    shear = ray_shear(d)
    chunk, n_chunks = _triangle_chunks(n_tri, n)
    if n_chunks == 1:
        return _closest_in_chunk(p0, p1, p2, jnp.int32(0), o, shear, t_max)
    pad = chunk * n_chunks - n_tri
    # Padding repeats the last triangle: a duplicate never wins (ties keep the lower id).
    tri = [jnp.concatenate([p, jnp.repeat(p[:, -1:], pad, axis=1)], axis=1).reshape(3, n_chunks, chunk)
           for p in (p0, p1, p2)]

    def body(i, best):
        c = [jax.lax.dynamic_index_in_dim(p, i, axis=1, keepdims=False) for p in tri]
        h = _closest_in_chunk(*c, i * chunk, o, shear, best.t)
        closer = h.t < best.t
        return jax.tree.map(lambda a, b: jnp.where(closer, a, b), h, best)

    init = Hit(t_max.astype(jnp.float32), jnp.full((n,), -1, jnp.int32), jnp.zeros((n,)), jnp.zeros((n,)))
    best = jax.lax.fori_loop(0, n_chunks, body, init)
    return Hit(jnp.where(best.prim >= 0, best.t, INF), best.prim, best.u, best.v)


def _closest_in_chunk(p0, p1, p2, offset, o, shear, t_max):
    col = lambda p: tuple(p[i][:, None] for i in range(3))
    t, _, _ = intersect_triangles(col(p0), col(p1), col(p2), tuple(o), shear, t_max)
    t_min = jnp.min(t, axis=0)
    idx = jnp.argmin(t, axis=0).astype(jnp.int32)
    # Recompute the barycentrics of the winner only: O(N) instead of O(T N) outputs.
    g = lambda p: tuple(p[i][idx] for i in range(3))
    _, u, v = intersect_triangles(g(p0), g(p1), g(p2), tuple(o), shear, INF)
    found = t_min < INF
    return Hit(t_min, jnp.where(found, idx + offset, -1), jnp.where(found, u, 0.0), jnp.where(found, v, 0.0))


def _brute_analytic(kind, to_world, to_local, o, d, t_max):
    t, x, y = intersect_analytic(kind[:, None], to_world[..., None], to_local[..., None],
                                 o[:, None], d[:, None], t_max)
    idx = jnp.argmin(t, axis=0).astype(jnp.int32)
    t_min = jnp.min(t, axis=0)
    pick = lambda a: jnp.take_along_axis(a, idx[None], axis=0)[0]
    found = t_min < INF
    return Hit(t_min, jnp.where(found, idx, -1), jnp.where(found, pick(x), 0.0), jnp.where(found, pick(y), 0.0))


def closest_hit(tri, analytic, o, d, t_max):
    """Brute-force closest hit. tri = (p0, p1, p2) each (3, T) or None; analytic =
    (kind (A,), to_world (3, 4, A), to_local (3, 4, A)) or None. Triangles have ids [0, T),
    analytic primitives [T, T + A)."""
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    best = miss(n)
    n_tri = 0
    if tri is not None and tri[0].shape[1] > 0:
        n_tri = tri[0].shape[1]
        best = _brute_triangles(*tri, o, d, t_max)
    if analytic is not None and analytic[0].shape[0] > 0:
        h = _brute_analytic(*analytic, o, d, jnp.minimum(t_max, best.t))
        closer = h.t < best.t
        h = Hit(h.t, jnp.where(h.prim >= 0, h.prim + n_tri, -1), h.u, h.v)
        best = jax.tree.map(lambda a, b: jnp.where(closer, a, b), h, best)
    return best


def occluded(tri, analytic, o, d, t_max):
    """Brute-force shadow test: any hit with 0 < t < t_max."""
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    blocked = jnp.zeros((n,), bool)
    if tri is not None and tri[0].shape[1] > 0:
        blocked = _any_triangle(*tri, o, d, t_max)
    if analytic is not None and analytic[0].shape[0] > 0:
        kind, to_world, to_local = analytic
        t, _, _ = intersect_analytic(kind[:, None], to_world[..., None], to_local[..., None],
                                     o[:, None], d[:, None], t_max)
        blocked = blocked | jnp.any(t < INF, axis=0)
    return blocked


def _any_triangle(p0, p1, p2, o, d, t_max):
    shear = ray_shear(d)
    n_tri, n = p0.shape[1], o.shape[1]
    chunk, n_chunks = _triangle_chunks(n_tri, n)
    col = lambda p: tuple(p[i][:, None] for i in range(3))
    if n_chunks == 1:
        t, _, _ = intersect_triangles(col(p0), col(p1), col(p2), tuple(o), shear, t_max)
        return jnp.any(t < INF, axis=0)
    pad = chunk * n_chunks - n_tri
    tri = [jnp.concatenate([p, jnp.repeat(p[:, -1:], pad, axis=1)], axis=1).reshape(3, n_chunks, chunk)
           for p in (p0, p1, p2)]

    def body(i, blocked):
        c = [jax.lax.dynamic_index_in_dim(p, i, axis=1, keepdims=False) for p in tri]
        t, _, _ = intersect_triangles(col(c[0]), col(c[1]), col(c[2]), tuple(o), shear, t_max)
        return blocked | jnp.any(t < INF, axis=0)

    return jax.lax.fori_loop(0, n_chunks, body, jnp.zeros((n,), bool))
