"""Intersection kernels against float64 references; watertightness; degenerate input."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import trimesh
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.rays import cylinder64, fan, fan_rays, moller_trumbore64, transform, unit
from tracer.shapes import intersect as isect
from tracer.kinds import SurfaceKind

N_RAYS = 512
N_TRIS = 40

closest = jax.jit(isect.closest_hit)
occluded = jax.jit(isect.occluded)


def _tri(p0, p1, p2):
    return tuple(jnp.asarray(np.ascontiguousarray(p, np.float32)) for p in (p0, p1, p2))


def _no_quads():
    return (jnp.zeros((0,), jnp.int32), jnp.zeros((3, 4, 0)), jnp.zeros((3, 4, 0)))


@st.composite
def soups(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    center = rng.uniform(-1, 1, (3, N_TRIS))
    size = draw(st.sampled_from([0.05, 0.3, 1.0]))
    p = [center + rng.normal(0, size, (3, N_TRIS)) for _ in range(3)]
    o = rng.uniform(-1.5, 1.5, (3, N_RAYS))
    d = unit(rng.normal(size=(3, N_RAYS)))
    return [a.astype(np.float32) for a in p], o.astype(np.float32), d


@settings(max_examples=15, deadline=None)
@given(soups())
def test_brute_force_matches_float64_reference(soup):
    (p0, p1, p2), o, d = soup
    hit = closest(_tri(p0, p1, p2), _no_quads(), o, d, jnp.inf)
    t_ref, prim_ref = moller_trumbore64(p0, p1, p2, o, d)
    t, prim = np.asarray(hit.t), np.asarray(hit.prim)
    # Near-misses of an edge may go either way between float32 and float64; near-ties too.
    with np.errstate(invalid="ignore"):
        agree = (prim == prim_ref) | (np.abs(t - t_ref) <= 1e-4 * np.minimum(t, t_ref))
    assert agree.mean() > 0.99
    both = (prim >= 0) & (prim == prim_ref)
    # The watertight test's error in t scales with the vertices' distance from the origin (~1).
    np.testing.assert_allclose(t[both], t_ref[both], rtol=1e-5, atol=1e-6)
    # Barycentrics reproduce the hit point.
    i = np.maximum(prim, 0)
    p_bary = p0[:, i] + hit.u * (p1 - p0)[:, i] + hit.v * (p2 - p0)[:, i]
    p_ray = o + t * d
    np.testing.assert_allclose(p_bary[:, prim >= 0], p_ray[:, prim >= 0], atol=2e-5)


@settings(max_examples=15, deadline=None)
@given(soups(), st.floats(0.1, 3.0))
def test_occluded_agrees_with_closest_hit(soup, t_max):
    (p0, p1, p2), o, d = soup
    tri = _tri(p0, p1, p2)
    hit = closest(tri, _no_quads(), o, d, jnp.inf)
    blocked = np.asarray(occluded(tri, _no_quads(), o, d, np.float32(t_max)))
    t = np.asarray(hit.t)
    clear_cut = np.abs(t - t_max) > 1e-5 * t_max
    np.testing.assert_array_equal(blocked[clear_cut], (t < t_max)[clear_cut])


def _edge_rays(mesh, rng, n):
    """Rays aimed exactly at points of edges and at vertices that face them (not silhouettes).

    Returns (o, d): such a ray enters the closed mesh through the edge or vertex, so it must hit.
    """
    v = mesh.vertices.astype(np.float32)
    radius = np.linalg.norm(v, axis=1).max() * 2
    o = (unit(rng.normal(size=(3, n))) * radius).astype(np.float32)
    pick = rng.integers(0, len(mesh.face_adjacency), n)
    edge = mesh.face_adjacency_edges[pick]
    s = rng.choice([0.0, 1.0, 0.5, 0.25], n).astype(np.float32)
    s = np.where(rng.random(n) < 0.5, rng.random(n).astype(np.float32), s)
    target = (v[edge[:, 0]] * (1 - s)[:, None] + v[edge[:, 1]] * s[:, None]).T
    d = unit(target - o)
    # Faces that must face the ray: the edge's two, or all faces around the vertex.
    faces = np.full((n, mesh.vertex_faces.shape[1] + 2), -1)
    faces[:, :2] = mesh.face_adjacency[pick]
    at_vertex = (s == 0) | (s == 1)
    vertex = np.where(s == 0, edge[:, 0], edge[:, 1])
    faces[at_vertex, 2:] = mesh.vertex_faces[vertex[at_vertex]]
    cos = np.einsum("nkc,cn->nk", mesh.face_normals[np.maximum(faces, 0)], d)
    facing = np.all((cos < -0.05) | (faces < 0), axis=1)
    return o[:, facing], d[:, facing]


@pytest.mark.parametrize("mesh", [trimesh.creation.icosphere(2), trimesh.creation.box(extents=(1, 2, 0.5)),
                                  trimesh.creation.torus(1.0, 0.3, 12, 8)], ids=["icosphere", "box", "torus"])
def test_watertight_closed_mesh(mesh):
    """A ray through an edge or vertex of a closed mesh hits one of its triangles."""
    rng = np.random.default_rng(3)
    o, d = _edge_rays(mesh, rng, 30000)
    o, d = o[:, :2048], d[:, :2048]
    assert o.shape[1] == 2048
    tri_v = mesh.vertices.astype(np.float32)[mesh.faces]
    tri = _tri(*(tri_v[:, k].T for k in range(3)))
    hit = closest(tri, _no_quads(), o, d, jnp.inf)
    assert np.all(np.asarray(hit.prim) >= 0)
    assert np.all(np.isfinite(np.asarray(hit.t)))


def test_watertight_fan_of_slivers():
    tri = fan()
    rng = np.random.default_rng(1)
    for _ in range(4):
        o, d, crossing = fan_rays(tri, rng, 2048)
        prim = np.asarray(closest(_tri(*tri), _no_quads(), o, d, jnp.inf).prim)
        assert crossing.mean() > 0.8
        assert np.all(prim[crossing] >= 0)


def test_degenerate_and_parallel_never_hit():
    rng = np.random.default_rng(0)
    n_tri = 8
    a = rng.normal(size=(3, n_tri)).astype(np.float32)
    b = rng.normal(size=(3, n_tri)).astype(np.float32)
    p0 = np.concatenate([a, a, a, np.zeros((3, 2), np.float32)], axis=1)
    p1 = np.concatenate([a, b, b, np.zeros((3, 2), np.float32)], axis=1)
    p2 = np.concatenate([b, b, 0.5 * (a + b), np.zeros((3, 2), np.float32)], axis=1)  # repeated, collinear, point
    # Rays through the degenerate triangles' points, from all around.
    targets = np.concatenate([a, b, 0.5 * (a + b), 0.3 * a + 0.7 * b], axis=1)
    k = rng.integers(0, targets.shape[1], N_RAYS)
    o = (targets[:, k] + rng.normal(size=(3, N_RAYS))).astype(np.float32)
    d = unit(targets[:, k] - o)
    hit = closest(_tri(p0, p1, p2), _no_quads(), o, d, jnp.inf)
    # Repeated vertices and a point never hit; the float32 "collinear" ones (ids [2n, 3n)) are
    # slivers of tiny but nonzero area and may.
    prim = np.asarray(hit.prim)
    assert not np.any(((prim >= 0) & (prim < 2 * n_tri)) | (prim >= 3 * n_tri))
    for x in (hit.t, hit.u, hit.v):
        assert not np.any(np.isnan(np.asarray(x)))

    # Rays in the plane of a triangle (z = 0) never hit it.
    q0, q1, q2 = (np.array(p, np.float32)[:, None] for p in ([0, 0, 0], [1, 0, 0], [0, 1, 0]))
    o = np.concatenate([rng.uniform(-2, 2, (2, N_RAYS)), np.zeros((1, N_RAYS))]).astype(np.float32)
    d = unit(np.concatenate([rng.normal(size=(2, N_RAYS)), np.zeros((1, N_RAYS))]))
    hit = closest(_tri(q0, q1, q2), _no_quads(), o, d, jnp.inf)
    assert np.all(np.asarray(hit.prim) == -1)
    assert not np.any(np.isnan(np.asarray(hit.u)))


def _quads(kind, to_world):
    to_world = np.asarray(to_world, np.float64)
    to_local = np.linalg.inv(to_world)
    cols = lambda m: jnp.asarray(m[:, :3, :4].transpose(1, 2, 0), jnp.float32)
    return (jnp.asarray(kind, jnp.int32), cols(to_world), cols(to_local))


def test_sphere_matches_analytic_solution():
    rng = np.random.default_rng(1)
    center, radius = np.array([0.3, -0.2, 1.5]), 0.7
    m = transform([radius] * 3, 0.7, [1, 2, 3], center)
    o = rng.uniform(-3, 3, (3, N_RAYS)).astype(np.float32)
    # Half the rays aimed at the sphere (some from inside), half anywhere.
    aim = center[:, None] + rng.normal(0, radius, (3, N_RAYS))
    d = unit(np.where(rng.random(N_RAYS) < 0.5, aim - o, rng.normal(size=(3, N_RAYS))))
    o[:, :32] = center[:, None] + rng.normal(0, 0.2, (3, 32))  # inside
    hit = closest((jnp.zeros((3, 0)),) * 3, _quads([SurfaceKind.SPHERE], [m]), o, d, jnp.inf)
    oc = o.astype(np.float64) - center[:, None]
    b = np.sum(oc * d, axis=0)
    disc = b * b - (np.sum(oc * oc, axis=0) - radius**2)
    sq = np.sqrt(np.maximum(disc, 0))
    near, far = -b - sq, -b + sq
    t_ref = np.where(disc < 0, np.inf, np.where(near > 0, near, np.where(far > 0, far, np.inf)))
    t = np.asarray(hit.t)
    grazing = np.abs(disc) < 1e-4
    np.testing.assert_array_equal(np.isfinite(t)[~grazing], np.isfinite(t_ref)[~grazing])
    ok = np.isfinite(t) & np.isfinite(t_ref)
    np.testing.assert_allclose(t[ok], t_ref[ok], rtol=2e-5, atol=2e-6)
    assert np.isfinite(t[:32]).all()


def test_disk_matches_analytic_solution():
    rng = np.random.default_rng(2)
    m = transform([0.8, 0.5, 1.0], 0.4, [1, 0, 1], [0.1, 0.2, 0.3])
    o = rng.uniform(-2, 2, (3, N_RAYS)).astype(np.float32)
    d = unit(rng.normal(size=(3, N_RAYS)))
    hit = closest((jnp.zeros((3, 0)),) * 3, _quads([SurfaceKind.DISK], [m]), o, d, jnp.inf)
    inv = np.linalg.inv(m)
    lo = inv[:3, :3] @ o + inv[:3, 3:]
    ld = inv[:3, :3] @ d
    t_ref = -lo[2] / ld[2]
    x, y = lo[0] + t_ref * ld[0], lo[1] + t_ref * ld[1]
    inside = x * x + y * y
    t_ref = np.where((t_ref > 0) & (inside <= 1), t_ref, np.inf)
    t = np.asarray(hit.t)
    boundary = np.abs(inside - 1) < 1e-4
    np.testing.assert_array_equal(np.isfinite(t)[~boundary], np.isfinite(t_ref)[~boundary])
    ok = np.isfinite(t) & np.isfinite(t_ref)
    np.testing.assert_allclose(t[ok], t_ref[ok], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(hit.u)[ok], x[ok], atol=1e-5)
    np.testing.assert_allclose(np.asarray(hit.v)[ok], y[ok], atol=1e-5)


@pytest.mark.parametrize("t_max", [np.inf, 2.5])
@pytest.mark.parametrize("to_world", [
    transform([0.7, 0.7, 1.6], 0.8, [1, 2, 0], [0.2, -0.3, 0.1]),
    transform([2.0, 2.0, 0.3], 2.5, [0, 1, 1], [0.0, 0.5, -0.2]),    # short and wide
    transform([-0.5, 0.5, 2.5], 0.3, [1, 0, 0], [-0.4, 0.0, -1.0]),  # mirrored, long and thin
], ids=["rotated", "wide", "mirrored"])
def test_cylinder_matches_float64_reference(to_world, t_max):
    """Rays from outside and inside the tube, aimed at it or anywhere, against Mitsuba's
    algorithm in float64: the same hits, the near root where it lies on the tube, else the far
    one (seen through an open end, or from inside), none when the segment stays inside."""
    rng = np.random.default_rng(3)
    n = 4 * N_RAYS
    local_o = np.concatenate([rng.uniform(-3, 3, (2, n)), rng.uniform(-2, 3, (1, n))])
    local_o[:, : n // 4] = np.concatenate([rng.uniform(-0.6, 0.6, (2, n // 4)), rng.uniform(0.1, 0.9, (1, n // 4))])
    local_aim = np.concatenate([rng.normal(0, 0.8, (2, n)), rng.uniform(-0.2, 1.2, (1, n))])
    o = (to_world[:3, :3] @ local_o + to_world[:3, 3:]).astype(np.float32)
    aim = to_world[:3, :3] @ local_aim + to_world[:3, 3:]
    d = unit(np.where(rng.random(n) < 0.7, aim - o, rng.normal(size=(3, n))))
    hit = closest((jnp.zeros((3, 0)),) * 3, _quads([SurfaceKind.CYLINDER], [to_world]), o, d, jnp.float32(t_max))
    t_ref, _, margin = cylinder64(to_world, o, d, t_max)
    t = np.asarray(hit.t)
    clear = margin > 1e-4
    assert np.isfinite(t_ref).sum() > 200 and clear.mean() > 0.95
    np.testing.assert_array_equal(np.isfinite(t)[clear], np.isfinite(t_ref)[clear])
    ok = np.isfinite(t) & np.isfinite(t_ref)
    np.testing.assert_allclose(t[ok], t_ref[ok], rtol=2e-5, atol=2e-6)
    assert np.all(np.asarray(hit.u)[ok] == 0) and np.all(np.asarray(hit.prim)[ok] == 0)
    blocked = occluded((jnp.zeros((3, 0)),) * 3, _quads([SurfaceKind.CYLINDER], [to_world]), o, d, jnp.float32(t_max))
    np.testing.assert_array_equal(np.asarray(blocked)[clear], np.isfinite(t_ref)[clear])


def test_cylinder_parallel_to_its_axis_and_degenerate_rays():
    """Rays along the axis (A = 0) never hit; a ray inside the tube ending before the wall misses."""
    quads = _quads([SurfaceKind.CYLINDER], [np.eye(4)])
    o = np.array([[0.5, 0.0, 2.0], [0.0, 0.0, -1.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.5]], np.float32).T
    d = np.array([[0, 0, -1], [0, 0, 1], [1, 0, 0], [1, 0, 0]], np.float32).T
    t_max = np.array([np.inf, np.inf, 0.5, np.inf], np.float32)
    hit = closest((jnp.zeros((3, 0)),) * 3, quads, o, d, jnp.asarray(t_max))
    np.testing.assert_array_equal(np.asarray(hit.prim), [-1, -1, -1, 0])
    np.testing.assert_allclose(np.asarray(hit.t)[3], 1.0)


@pytest.mark.parametrize("kind", [SurfaceKind.SPHERE, SurfaceKind.DISK, SurfaceKind.CYLINDER])
def test_tests_of_absent_analytic_kinds_are_left_out_with_the_same_answers(kind):
    """Queries told which analytic kinds a scene has give the bits of the full test: the kind
    present is still tested (and a wrong ``kinds`` would miss every primitive)."""
    rng = np.random.default_rng(5)
    quads = _quads([kind] * 3, [transform([0.5, 0.7, 0.6], a, [1, 1, 0], [x, 0.1, 0.2])
                                for a, x in ((0.3, -0.8), (1.1, 0.0), (2.0, 0.8))])
    o = rng.uniform(-2, 2, (3, N_RAYS)).astype(np.float32)
    target = rng.choice([-0.8, 0.0, 0.8], N_RAYS) * np.array([[1], [0], [0]]) + rng.normal(0, 0.4, (3, N_RAYS))
    d = unit(target - o)
    none = (jnp.zeros((3, 0)),) * 3
    full = closest(none, quads, o, d, jnp.inf)
    only = jax.jit(isect.closest_hit, static_argnums=5)(none, quads, o, d, jnp.inf, (kind,))
    assert np.isfinite(np.asarray(full.t)).sum() > N_RAYS // 4
    for field in ("t", "prim", "u", "v"):
        np.testing.assert_array_equal(np.asarray(getattr(full, field)), np.asarray(getattr(only, field)))
    blocked = jax.jit(isect.occluded, static_argnums=5)(none, quads, o, d, jnp.float32(3.0), (kind,))
    np.testing.assert_array_equal(np.asarray(blocked), np.asarray(occluded(none, quads, o, d, jnp.float32(3.0))))
    other = jax.jit(isect.closest_hit, static_argnums=5)(none, quads, o, d, jnp.inf, (1 - kind,))
    assert not np.isfinite(np.asarray(other.t)).any()


def test_mixed_ids_and_ties():
    """Analytic ids follow the triangles; with equal t, the lower id wins."""
    p = lambda *v: np.array(v, np.float32)[:, None]
    tri = _tri(np.concatenate([p(-1, -1, 0)] * 2, 1), np.concatenate([p(1, -1, 0)] * 2, 1),
               np.concatenate([p(0, 1, 0)] * 2, 1))
    quads = _quads([SurfaceKind.DISK], [transform([1, 1, 1], 0.0, [0, 0, 1], [0, 0, -1])])
    o = np.array([[0.0, 0.0], [0.0, 0.0], [2.0, -2.0]], np.float32)
    d = np.array([[0.0, 0.0], [0.0, 0.0], [-1.0, 1.0]], np.float32)
    hit = closest(tri, quads, o, d, jnp.inf)
    np.testing.assert_array_equal(np.asarray(hit.prim), [0, 2])
    np.testing.assert_allclose(np.asarray(hit.t), [2.0, 1.0])
    hit = closest(tri, quads, o, d, np.float32(1.0))  # t_max excludes t = 1 exactly
    np.testing.assert_array_equal(np.asarray(hit.prim), [-1, -1])
