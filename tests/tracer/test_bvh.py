"""The BVH against brute force: same closest hits, same occlusion, watertight, a million triangles."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.rays import assert_same_hits, fan, fan_rays, moller_trumbore64, soups, spheres_disks_and_meshes, unit
from tracer.shapes import bvh
from tracer.shapes import bvh_build
from tracer.shapes import geometry
from tracer.shapes import intersect as isect
from tracer.kinds import SurfaceKind

N_RAYS = 1024  # two traversal phases (1024 -> 256)
N_TRIS = 48

bvh_closest = jax.jit(bvh.closest_hit)
bvh_occluded = jax.jit(bvh.occluded)
brute_closest = jax.jit(isect.closest_hit)
brute_occluded = jax.jit(isect.occluded)
geo_closest = jax.jit(geometry.closest_hit)
geo_occluded = jax.jit(geometry.occluded)
geo_surface = jax.jit(geometry.surface_interaction)


def _no_quads():
    return (np.zeros((0,), np.int32), np.zeros((3, 4, 0), np.float32), np.zeros((3, 4, 0), np.float32))


def _pad(arrays, nodes, leaves):
    """Pad the tables to fixed sizes (unreachable rows) so that every example shares one compile."""
    m = arrays.nodes.shape[0]
    links = np.asarray(arrays.links).reshape(8, m, 2)
    grow = lambda a, n, fill=0: np.concatenate([a, np.full((n - a.shape[0],) + a.shape[1:], fill, a.dtype)])
    return dataclasses.replace(
        arrays, nodes=jnp.asarray(grow(np.asarray(arrays.nodes), nodes)),
        links=jnp.asarray(np.concatenate([links, np.full((8, nodes - m, 2), -1, np.int32)], axis=1).reshape(-1, 2)),
        leaf_tris=jnp.asarray(grow(np.asarray(arrays.leaf_tris), leaves)),
        leaf_prims=jnp.asarray(grow(np.asarray(arrays.leaf_prims), leaves, -1)))


def _build(tri, quads=None, leaf_size=bvh.LEAF_SIZE, pad=True):
    quads = _no_quads() if quads is None else quads
    lo = np.minimum(np.minimum(tri[0], tri[1]), tri[2])
    hi = np.maximum(np.maximum(tri[0], tri[1]), tri[2])
    if quads[0].size:
        q_lo, q_hi = geometry.analytic_bounds(*quads)
        lo, hi = np.concatenate([lo, q_lo], 1), np.concatenate([hi, q_hi], 1)
    tree = bvh_build.thread(bvh_build.build_bvh(lo, hi, max_leaf=leaf_size))
    arrays = bvh.make_arrays(tree, tri, quads, leaf_size=leaf_size)
    n = lo.shape[1]
    return _pad(arrays, 2 * n, n) if pad else arrays


@settings(max_examples=20, deadline=None)
@given(soups(), st.floats(0.05, 3.0))
def test_bvh_equals_brute_force(soup, t_max):
    tri, o, d = soup
    arrays = _build(tri)
    ref = brute_closest(tri, _no_quads(), o, d, jnp.inf)
    assert_same_hits(bvh_closest(arrays, tri, _no_quads(), o, d, jnp.inf), ref)
    # Occlusion: same answers as t < t_max (away from t = t_max itself).
    blocked = np.asarray(bvh_occluded(arrays, o, d, np.float32(t_max)))
    t = np.asarray(ref.t)
    clear_cut = np.abs(t - t_max) > 1e-5 * t_max
    np.testing.assert_array_equal(blocked[clear_cut], (t < t_max)[clear_cut])
    np.testing.assert_array_equal(blocked, np.asarray(brute_occluded(tri, _no_quads(), o, d, np.float32(t_max))))


def test_parallel_rays_and_degenerate_triangles():
    rng = np.random.default_rng(5)
    n = N_TRIS
    p0 = rng.uniform(-1, 1, (3, n)).astype(np.float32)
    p0[2] = 0
    p1, p2 = p0 + [[0.3], [0], [0]], p0 + [[0], [0.3], [0]]
    p1[:, :8] = p0[:, :8]  # zero-area triangles
    tri = (p0, p1.astype(np.float32), p2.astype(np.float32))
    o = np.concatenate([rng.uniform(-1.5, 1.5, (2, N_RAYS)), np.zeros((1, N_RAYS))]).astype(np.float32)
    d = unit(np.concatenate([rng.normal(size=(2, N_RAYS)), np.zeros((1, N_RAYS))]))
    h = bvh_closest(_build(tri), tri, _no_quads(), o, d, jnp.inf)
    assert np.all(np.asarray(h.prim) == -1)  # in the plane of every triangle
    # From above: the zero-area ones are never hit, nothing is NaN.
    o[2] = 1.0
    k = rng.integers(0, n, N_RAYS)
    d = unit(p0[:, k] + rng.uniform(0, 0.1, (3, N_RAYS)) * [[1], [1], [0]] - o)
    h = bvh_closest(_build(tri), tri, _no_quads(), o, d, jnp.inf)
    prim = np.asarray(h.prim)
    assert np.all((prim < 0) | (prim >= 8)) and np.any(prim >= 8)
    assert not any(np.any(np.isnan(np.asarray(x))) for x in (h.t, h.u, h.v))


def test_watertight_through_the_bvh():
    tri = fan()
    arrays = _build(tri, leaf_size=4, pad=False)  # several leaves share the center vertex
    rng = np.random.default_rng(2)
    for _ in range(2):
        o, d, crossing = fan_rays(tri, rng, 4096)
        prim = np.asarray(bvh_closest(arrays, tri, _no_quads(), o, d, jnp.inf).prim)
        assert np.all(prim[crossing] >= 0)


@pytest.mark.parametrize("kinds", [(SurfaceKind.DISK, SurfaceKind.SPHERE), (SurfaceKind.CYLINDER,),
                                   (SurfaceKind.DISK, SurfaceKind.SPHERE, SurfaceKind.CYLINDER)],
                         ids=["spheres+disks", "cylinders", "all"])
def test_analytic_primitives_inside_the_bvh(kinds):
    """Leaf rows of every analytic kind, their boxes (a cylinder's from its end circles), and
    surface data from either backend."""
    rng = np.random.default_rng(6)
    meshes, analytic = spheres_disks_and_meshes(rng, 40, (0.05, 0.3), kinds)
    g_bvh = geometry.build_geometry(meshes, analytic, accel="bvh")
    g_brute = geometry.build_geometry(meshes, analytic, accel="brute")
    assert g_bvh.bvh.leaf_analytic.shape[0] > 0
    o = rng.uniform(-3, 3, (3, N_RAYS)).astype(np.float32)
    d = unit(rng.normal(size=(3, N_RAYS)))
    h, ref = geo_closest(g_bvh, o, d, jnp.inf), geo_closest(g_brute, o, d, jnp.inf)
    assert_same_hits(h, ref)
    assert np.sum(np.asarray(ref.prim) >= g_brute.n_triangles) > 20
    assert g_bvh.bvh.analytic_kinds == g_brute.analytic_kinds == tuple(sorted(kinds))
    np.testing.assert_array_equal(np.asarray(geo_occluded(g_bvh, o, d, 1.5)), np.asarray(geo_occluded(g_brute, o, d, 1.5)))
    a, b = geo_surface(g_bvh, o, d, h), geo_surface(g_brute, o, d, ref)
    same = np.asarray(h.prim) == np.asarray(ref.prim)
    np.testing.assert_allclose(np.asarray(a.ng)[:, same], np.asarray(b.ng)[:, same], atol=1e-5)


def test_cylinder_boxes_hold_their_tubes():
    """Mitsuba's cylinder box (the end circles' boxes) contains points all over the tube."""
    rng = np.random.default_rng(9)
    ms = []
    for _ in range(20):
        m = np.eye(4)
        m[:3, :3] = rng.normal(size=(3, 3))
        m[:3, 3] = rng.normal(size=3)
        ms.append(m)
    to_world = np.stack(ms)[:, :3, :4].transpose(1, 2, 0).astype(np.float32)
    lo, hi = geometry.analytic_bounds(np.full(20, SurfaceKind.CYLINDER), to_world)
    phi, z = rng.uniform(0, 2 * np.pi, 500), rng.uniform(0, 1, 500)
    for k, m in enumerate(ms):
        p = m[:3, :3] @ np.stack([np.cos(phi), np.sin(phi), z]) + m[:3, 3:]
        assert np.all(p >= lo[:, k:k + 1] - 1e-6) and np.all(p <= hi[:, k:k + 1] + 1e-6)
        # Tight: the end circles touch the box.
        ring = np.linspace(0, 2 * np.pi, 4096)
        ends = np.concatenate([m[:3, :3] @ np.stack([np.cos(ring), np.sin(ring), np.full(4096, z)]) + m[:3, 3:]
                               for z in (0.0, 1.0)], axis=1)
        np.testing.assert_allclose(lo[:, k], ends.min(axis=1), atol=1e-5 * np.abs(m).max())
        np.testing.assert_allclose(hi[:, k], ends.max(axis=1), atol=1e-5 * np.abs(m).max())


def test_build_invariants():
    rng = np.random.default_rng(7)
    n = 5000
    c = rng.random((3, n)).astype(np.float32)
    c[:, :500] = 0.5  # a pile of coincident centroids: median splits
    lo, hi = c - 0.01, c + rng.random((3, n)).astype(np.float32) * 0.02
    tree = bvh_build.build_bvh(lo, hi, max_leaf=4)
    np.testing.assert_array_equal(np.sort(tree.order), np.arange(n))
    leaf = tree.left < 0
    assert tree.count[leaf].sum() == n and tree.count[leaf].max() <= 4 and tree.count[leaf].min() >= 1
    # Every primitive lies in its leaf's box, every child in its parent's.
    owner = np.repeat(np.flatnonzero(leaf), tree.count[leaf])
    prims = np.concatenate([tree.order[s:s + k] for s, k in zip(tree.start[leaf], tree.count[leaf])])
    assert np.all(lo[:, prims] >= tree.lo[:, owner]) and np.all(hi[:, prims] <= tree.hi[:, owner])
    inner = np.flatnonzero(~leaf)
    for child in (tree.left[inner], tree.left[inner] + 1):
        assert np.all(tree.lo[:, child] >= tree.lo[:, inner]) and np.all(tree.hi[:, child] <= tree.hi[:, inner])
    # Threads: following hit links visits every node once, in every octant.
    threaded = bvh_build.thread(tree)
    for octant in range(8):
        seen, node = [], 0
        while node >= 0:
            seen.append(node)
            node = threaded.hit[octant, node]
        assert sorted(seen) == list(range(tree.left.size))


def test_a_million_triangles():
    """Build a 1M-triangle BVH and check hits on a sample of rays against float64 brute force."""
    rng = np.random.default_rng(8)
    n = 1_000_000
    c = rng.random((3, n)).astype(np.float32) * [[4], [4], [1]]
    p = [c + rng.normal(0, 0.003, (3, n)).astype(np.float32) for _ in range(3)]
    tri = tuple(a.astype(np.float32) for a in p)
    arrays = _build(tri, pad=False)
    n_rays = 256
    o = rng.uniform(-1, 5, (3, n_rays)).astype(np.float32)
    k = rng.integers(0, n, n_rays)
    d = unit(np.where(rng.random(n_rays) < 0.75, c[:, k] - o, rng.normal(size=(3, n_rays))))
    h = bvh_closest(arrays, tri, _no_quads(), o, d, jnp.inf)
    sample = np.arange(0, n_rays, 8)
    t_ref, prim_ref = zip(*(moller_trumbore64(*tri, o[:, i:i + 1], d[:, i:i + 1]) for i in sample))
    t_ref, prim_ref = np.concatenate(t_ref), np.concatenate(prim_ref)
    prim, t = np.asarray(h.prim)[sample], np.asarray(h.t)[sample]
    assert np.mean(prim >= 0) > 0.5
    np.testing.assert_array_equal(prim, prim_ref)
    np.testing.assert_allclose(t[prim >= 0], t_ref[prim >= 0], rtol=1e-5)


def _phases(n, min_phase):
    """drain_in_phases' phase count over n lanes at the BVH's shrink."""
    phases = 1
    while n // bvh._SHRINK >= min_phase:
        n, phases = n // bvh._SHRINK, phases + 1
    return phases


def test_on_accelerators_the_traversal_phases_stop_at_the_accelerator_floor(monkeypatch):
    """Each phase of a traversal is another compiled loop body (a GPU's compile of a BVH scene's
    work unit took over a minute), and on GPUs and TPUs a phase over fewer lanes than
    ``lanes.ACCELERATOR_MIN_PHASE`` saves nothing: a program made there has fewer loops, a CPU's
    as many as before. Lowered only, for a GPU-sized batch of rays."""
    from tracer import lanes

    rng = np.random.default_rng(3)
    tri = tuple(rng.random((3, 64)).astype(np.float32) for _ in range(3))
    # With analytic slots: a GPU's tree of triangles alone is the Pallas kernel's (below).
    spheres = tuple(map(jnp.asarray, (np.full(4, SurfaceKind.SPHERE, np.int32), *_sphere_transforms(rng, 4))))
    arrays = _build(tri, tuple(map(np.asarray, spheres)), pad=False)
    n = 1 << 20
    ray = jax.ShapeDtypeStruct((3, n), jnp.float32)

    def loops():
        closest = lambda o, d: bvh.closest_hit(arrays, tuple(map(jnp.asarray, tri)), spheres, o, d, jnp.inf).t
        occluded = lambda o, d: bvh.occluded(arrays, o, d, jnp.inf)
        return [jax.jit(f).lower(ray, ray).as_text().count("stablehlo.while") for f in (closest, occluded)]

    assert loops() == [_phases(n, bvh._MIN_PHASE)] * 2 == [8, 8]
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert loops() == [_phases(n, lanes.ACCELERATOR_MIN_PHASE)] * 2 == [3, 3]


def _sphere_transforms(rng, count):
    """(to_world, to_local) (3, 4, count) of spheres of radius 0.1-0.3 in the unit cube."""
    m = np.tile(np.eye(4), (count, 1, 1))
    m[:, :3, :3] *= rng.uniform(0.1, 0.3, count)[:, None, None]
    m[:, :3, 3] = rng.random((count, 3))
    cols = lambda a: np.ascontiguousarray(a[:, :3, :4].transpose(1, 2, 0), np.float32)
    return cols(m), cols(np.linalg.inv(m))


@pytest.mark.parametrize("any_hit", [False, True], ids=["closest", "any-hit"])
def test_the_gpu_kernel_finds_the_hits_of_the_phased_traversal_to_the_bit(any_hit):
    """``bvh_kernel`` (one Pallas kernel: through Pallas' interpreter on CPUs, Triton on a GPU,
    where ``scripts/gpu_check.sh`` runs this test) answers each ray as the phased XLA loop does: the same leaf slot and the same truncated t, whatever block of
    ``bvh_kernel.BLOCK`` rays a ray is in (a batch that is not a whole number of blocks, rays
    that ask nothing, rays stopped early)."""
    from tracer.shapes import bvh_kernel
    rng = np.random.default_rng(11)
    p0 = rng.uniform(-1, 1, (3, 600)).astype(np.float32)
    tri = (p0, (p0 + rng.normal(0, 0.15, p0.shape)).astype(np.float32), (p0 + rng.normal(0, 0.15, p0.shape)).astype(np.float32))
    arrays = _build(tri, pad=False)
    n = 1000
    o = rng.uniform(-1.5, 1.5, (3, n)).astype(np.float32)
    d = unit(rng.normal(size=(3, n)))
    t_max = np.where(rng.random(n) < 0.1, 0.0, np.inf).astype(np.float32)
    t_max[:100] = 0.4

    def phased(o, d, t_max):
        rays, state = bvh._traverse(arrays, *bvh._setup(o, d, t_max), any_hit=any_hit)
        return bvh._unpermute(rays, state.t), bvh._unpermute(rays, state.slot)

    t, slot = map(np.asarray, jax.jit(phased)(o, d, t_max))
    kernel = lambda *r: bvh_kernel.traverse(arrays, *bvh._setup(*r), any_hit=any_hit)
    t_k, slot_k = map(np.asarray, jax.jit(kernel)(o, d, t_max))
    assert 0.2 < np.mean(slot >= 0) < 0.8
    assert np.all(slot[t_max == 0] == -1)
    np.testing.assert_array_equal(slot_k, slot)
    np.testing.assert_array_equal(t_k, t)


def test_on_gpus_the_world_triangles_are_one_kernel_and_analytic_shapes_are_tested_beside(monkeypatch):
    """On a GPU the world's BVH holds its triangles alone, traversed by the kernel (Pallas'
    interpreter here), its spheres and disks tested beside it by brute force: the same hits and
    occlusion as the CPU's BVH of both."""
    from tests.helpers.rays import spheres_disks_and_meshes
    rng = np.random.default_rng(6)
    meshes, analytic = spheres_disks_and_meshes(rng, geometry.KERNEL_ANALYTIC_BESIDE_MAX, (0.1, 0.5))
    g_cpu = geometry.build_geometry(meshes, analytic, accel="bvh")
    o = rng.uniform(-3, 3, (3, N_RAYS)).astype(np.float32)
    d = unit(rng.normal(size=(3, N_RAYS)))
    ref, ref_blocked = geo_closest(g_cpu, o, d, jnp.inf), np.asarray(geo_occluded(g_cpu, o, d, 1.5))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    g_gpu = geometry.build_geometry(meshes, analytic, accel="bvh")
    assert g_cpu.bvh.leaf_analytic.shape[0] > 0 and g_gpu.bvh.leaf_analytic.shape[0] == 0
    assert g_gpu.bvh.leaf_tris.shape[0] > 0 and geometry._analytic_beside(g_gpu)
    h = jax.jit(geometry.closest_hit)(g_gpu, o, d, jnp.inf)
    assert_same_hits(h, ref)
    assert np.sum(np.asarray(ref.prim) >= g_cpu.n_triangles) > 20
    assert np.sum((np.asarray(ref.prim) >= 0) & (np.asarray(ref.prim) < g_cpu.n_triangles)) > 20
    np.testing.assert_array_equal(np.asarray(jax.jit(geometry.occluded)(g_gpu, o, d, 1.5)), ref_blocked)
    # One shape more, and the GPU's tree holds both again (brute force beside is for a few).
    meshes, analytic = spheres_disks_and_meshes(rng, geometry.KERNEL_ANALYTIC_BESIDE_MAX + 1, (0.1, 0.5))
    assert geometry.build_geometry(meshes, analytic, accel="bvh").bvh.leaf_analytic.shape[0] > 0


def test_for_a_gpu_the_traversal_lowers_to_one_triton_kernel(monkeypatch):
    """No GPU here: the program is lowered for one (an abstract H200), as a worker there would
    lower it. Every primitive of the kernel has a Triton lowering in Pallas, and the closest-hit
    and occlusion queries are one Triton kernel each, without a traversal loop in XLA."""
    from jax._src import mesh as mesh_lib
    from tests.helpers.rays import spheres_disks_and_meshes
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    meshes, analytic = spheres_disks_and_meshes(np.random.default_rng(6), 8, (0.05, 0.3))
    g = geometry.build_geometry(meshes, analytic, accel="bvh")
    ray = jax.ShapeDtypeStruct((3, 1 << 16), jnp.float32)
    h200 = mesh_lib.AbstractDevice(device_kind="NVIDIA H200", num_cores=132, platform="gpu")
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((1,), ("x",), abstract_device=h200)):
        for query in (lambda o, d: geometry.closest_hit(g, o, d, jnp.inf).t, lambda o, d: geometry.occluded(g, o, d, 1.0)):
            text = jax.jit(query).trace(ray, ray).lower(lowering_platforms=("cuda",)).as_text()
            assert text.count("custom_call @__gpu$xla.gpu.triton") == 1
            assert "stablehlo.while" not in text
