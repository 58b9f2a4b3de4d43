"""Rays and triangles shared by the intersection tests (``test_intersect``, ``test_bvh``,
``test_accel``, ``test_geometry``): a float64 reference, fixtures that must hit, hypothesis soups,
and the comparison of two sets of hits.

Rays and triangle corners are column arrays: ``o``, ``d`` (3, N) float32, ``(p0, p1, p2)`` (3, T).
"""
import numpy as np
import trimesh
from hypothesis import strategies as st

from tracer.kinds import SurfaceKind


def unit(v):
    """Columns of ``v`` (3, N) scaled to unit length, as float32."""
    return (v / np.linalg.norm(v, axis=0)).astype(np.float32)


def transform(scale, angle, axis, translate):
    """A 4x4 to-world matrix: scale (3,), then rotate by ``angle`` about ``axis``, then translate."""
    m = trimesh.transformations.rotation_matrix(angle, axis)
    m[:3, :3] = m[:3, :3] @ np.diag(scale)
    m[:3, 3] = translate
    return m


def moller_trumbore64(p0, p1, p2, o, d):
    """float64 reference: (t (N,), prim (N,)) of the closest hit, t = inf for a miss."""
    p0, p1, p2, o, d = (np.asarray(a, np.float64) for a in (p0, p1, p2, o, d))
    e1, e2 = (p1 - p0)[:, :, None], (p2 - p0)[:, :, None]
    dd = d[:, None, :]
    pv = np.cross(dd, e2, axis=0)
    det = np.sum(e1 * pv, axis=0)
    tv = o[:, None, :] - p0[:, :, None]
    qv = np.cross(tv, e1, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.sum(tv * pv, axis=0) / det
        v = np.sum(dd * qv, axis=0) / det
        t = np.sum(e2 * qv, axis=0) / det
    ok = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > 0)
    t = np.where(ok, t, np.inf)
    prim = np.argmin(t, axis=0)
    t_min = t[prim, np.arange(t.shape[1])]
    return t_min, np.where(np.isfinite(t_min), prim, -1)


def cylinder64(to_world, o, d, t_max=np.inf):
    """float64 reference of Mitsuba's cylinder test (cylinder.cpp solves it in double precision on
    the CPU) for the unit tube mapped by ``to_world`` (4x4): (t (N,), local hit (3, N), margin (N,)),
    t = inf for a miss; ``margin`` is small where float32 may rightly decide otherwise (a ray
    grazing the tube, a root at one of the rims or at t = 0 or t_max)."""
    inv = np.linalg.inv(np.asarray(to_world, np.float64))
    o, d = np.asarray(o, np.float64), np.asarray(d, np.float64)
    lo, ld = inv[:3, :3] @ o + inv[:3, 3:], inv[:3, :3] @ d
    a = ld[0] ** 2 + ld[1] ** 2
    b = 2.0 * (ld[0] * lo[0] + ld[1] * lo[1])
    c = lo[0] ** 2 + lo[1] ** 2 - 1.0
    disc = b * b - 4.0 * a * c
    with np.errstate(divide="ignore", invalid="ignore"):
        temp = -0.5 * (b + np.copysign(np.sqrt(np.maximum(disc, 0.0)), b))
        x0, x1 = temp / a, c / temp
    near, far = np.minimum(x0, x1), np.maximum(x0, x1)
    z_near, z_far = lo[2] + ld[2] * near, lo[2] + ld[2] * far
    on_near = (z_near >= 0) & (z_near <= 1) & (near >= 0)
    on_far = (z_far >= 0) & (z_far <= 1) & (far <= t_max)
    ok = (a > 0) & (disc >= 0) & (near <= t_max) & (far >= 0) & ~((near < 0) & (far > t_max)) & (on_near | on_far)
    t = np.where(on_near, near, far)
    ok &= (t > 0) & (t < t_max)
    t = np.where(ok, t, np.inf)
    local = lo + ld * np.where(ok, t, 0.0)
    with np.errstate(invalid="ignore"):
        margin = np.nanmin(np.abs(np.stack([disc / np.maximum(b * b, 1e-30), z_near, z_near - 1, z_far, z_far - 1,
                                            near, far, near - t_max, far - t_max])), axis=0)
    return t, local, margin


def fan(n_tri=64, seed=0):
    """A non-planar fan of slivers around one vertex: (p0, p1, p2) (3, T) float32."""
    rng = np.random.default_rng(seed)
    ang = np.sort(rng.uniform(0, 2 * np.pi, n_tri))
    center = np.array([0.3, 0.7, 0.1])
    rim = np.stack([np.cos(ang), np.sin(ang), 0.3 * np.sin(3 * ang)]) + center[:, None]
    return (np.repeat(center[:, None], n_tri, 1).astype(np.float32), rim.astype(np.float32),
            np.roll(rim, -1, 1).astype(np.float32))


def fan_rays(tri, rng, n):
    """Rays at the fan's center vertex or its spokes that cross the surface there (both sides of
    the spoke, or all triangles, face the same way): such a ray must hit. Float32 Moeller-Trumbore
    lets about 2% of them through."""
    p0, p1, p2 = tri
    k_tri = p0.shape[1]
    o = (p0[:, :1] + np.concatenate([rng.normal(0, 1, (2, n)), rng.uniform(1, 3, (1, n))])).astype(np.float32)
    s = np.where(rng.random(n) < 0.5, 0.0, rng.random(n)).astype(np.float32)
    k = rng.integers(0, k_tri, n)
    d = unit(p0[:, k] * (1 - s) + p1[:, k] * s - o)
    side = np.sign(np.cross((p1 - p0).T, (p2 - p0).T) @ d)  # (T, N)
    crossing = np.where(s == 0, np.all(side == side[:1], axis=0), side[k, np.arange(n)] == side[(k - 1) % k_tri, np.arange(n)])
    return o, d, crossing


@st.composite
def soups(draw, n_tris=48, n_rays=1024):
    """Triangle soups of ``n_tris`` with a few degenerate ones, and rays from inside and outside:
    (tri, o, d)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    size = draw(st.sampled_from([0.02, 0.2, 1.0]))
    center = rng.uniform(-1, 1, (3, n_tris))
    p = [center + rng.normal(0, size, (3, n_tris)) for _ in range(3)]
    n_bad = draw(st.integers(0, 4))
    p[1][:, :n_bad] = p[0][:, :n_bad]  # repeated vertex: zero area
    tri = tuple(a.astype(np.float32) for a in p)
    o = rng.uniform(-1.5, 1.5, (3, n_rays)).astype(np.float32)
    # Half the rays aim at triangle points so that most of them hit something.
    k = rng.integers(0, n_tris, n_rays)
    b = rng.dirichlet([1, 1, 1], n_rays).T
    target = b[0] * p[0][:, k] + b[1] * p[1][:, k] + b[2] * p[2][:, k]
    d = unit(np.where(rng.random(n_rays) < 0.5, target - o, rng.normal(size=(3, n_rays))))
    return tri, o, d


def grazing(tri, d, prim, cos_max=1e-3):
    """Rays whose hit (or missed) triangle ``prim`` lies almost along them: |cos| < cos_max."""
    i = np.clip(prim, 0, tri[0].shape[1] - 1)
    p0, p1, p2 = (np.asarray(p, np.float64)[:, i] for p in tri)
    n = np.cross(p1 - p0, p2 - p0, axis=0)
    cos = np.abs(np.sum(n * d, axis=0)) / np.maximum(np.linalg.norm(n, axis=0) * np.linalg.norm(d, axis=0), 1e-300)
    return (prim >= 0) & (cos < cos_max)


def assert_same_hits(h, ref, rtol=1e-5, excused=None):
    """Hits ``h`` and ``ref`` (records with t, prim, u) agree: the same primitive, or a tie in t.
    ``excused`` (N,) bool: rays whose hit may differ outright (see ``grazing``)."""
    prim, prim_ref = np.asarray(h.prim), np.asarray(ref.prim)
    t, t_ref = np.asarray(h.t), np.asarray(ref.t)
    assert not np.any(np.isnan(t))
    same = prim == prim_ref
    # A different primitive only at a tie (shared edges, touching triangles).
    finite = np.isfinite(t) & np.isfinite(t_ref)
    tie = finite & (np.abs(np.where(finite, t, 0) - np.where(finite, t_ref, 0)) <= rtol * t_ref + 1e-6)
    if excused is not None:
        tie = tie | excused
    assert np.all(same | tie), np.flatnonzero(~(same | tie))[:10]
    both = same & (prim >= 0)
    # Separately compiled kernels contract different products into FMAs: t may differ in the
    # last bits, an absolute error on the scale of the vertex coordinates (~1 here).
    np.testing.assert_allclose(t[both], t_ref[both], rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(np.asarray(h.u)[both], np.asarray(ref.u)[both], atol=1e-5)


def spheres_disks_and_meshes(rng, count, size, kinds=(SurfaceKind.DISK, SurfaceKind.SPHERE)):
    """Two small icospheres and ``count`` analytic shapes of ``kinds`` (in turn) of random size in
    ``size``, orientation and place: (meshes, analytic) for ``geometry.build_geometry``."""
    mesh = trimesh.creation.icosphere(1)
    meshes = [(mesh.vertices * 0.5 + [x, 0, 0], mesh.faces, None, None, i) for i, x in enumerate((-2.0, 2.0))]
    analytic = []
    for i in range(count):
        m = np.eye(4)
        m[:3, :3] = trimesh.transformations.random_rotation_matrix(rng.random(3))[:3, :3] * rng.uniform(*size)
        m[:3, 3] = rng.uniform(-2.5, 2.5, 3)
        analytic.append((kinds[i % len(kinds)], m, 2 + i))
    return meshes, analytic
