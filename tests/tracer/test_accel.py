"""Every intersection backend against brute force: closest hits, occlusion, watertightness,
self-intersection and degenerate input; and the backend choice itself."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import trimesh
from hypothesis import given, settings

from tests.helpers.rays import assert_same_hits, fan, fan_rays, grazing, soups, spheres_disks_and_meshes, unit
from tracer.shapes import geometry
from tracer.accel import embree, host

HOST_ENGINES = [name for name, engine in geometry.HOST_ENGINES.items() if engine.available()]
BACKENDS = ["bvh"] + HOST_ENGINES
closest = jax.jit(geometry.closest_hit)
blocked = jax.jit(geometry.occluded)
surface = jax.jit(geometry.surface_interaction)


def _geometry(tri, accel, analytic=(), robust=False):
    faces = np.arange(3 * tri[0].shape[1]).reshape(3, -1).T
    positions = np.concatenate([p.T for p in tri])
    return geometry.build_geometry([(positions, faces, None, None, 0)], list(analytic), accel=accel, robust=robust)


@pytest.mark.parametrize("accel", BACKENDS)
@settings(max_examples=12, deadline=None)
@given(soup=soups())
def test_same_hits_as_brute_force(accel, soup):
    tri, o, d = soup
    geo, ref_geo = _geometry(tri, accel), _geometry(tri, "brute")
    assert geo.accel == accel
    ref = closest(ref_geo, o, d, jnp.inf)
    # Embree's own triangle test rounds differently from the watertight one: t agrees to ~1e-5,
    # and a ray nearly in a triangle's plane (|cos| < 1e-2) may hit it in one test and miss in
    # the other: hypothesis found slivers at cos 1.5e-4 and 1.4e-3 (this one 8e-4 from an edge in
    # barycentrics) that Embree itself misses. A hit within 1e-5 of a lone triangle's edge (in
    # barycentrics) is a tie between hitting and missing: there Embree may miss too.
    hit = closest(geo, o, d, jnp.inf)
    excused = np.zeros(o.shape[1], bool)
    for h in (ref, hit):
        u, v = np.asarray(h.u), np.asarray(h.v)
        on_edge = (np.asarray(h.prim) >= 0) & (np.minimum(np.minimum(u, v), 1 - u - v) < 1e-5)
        excused |= grazing(tri, d, np.asarray(h.prim), 1e-2) | on_edge
    assert_same_hits(hit, ref, rtol=2e-5, excused=excused if accel in HOST_ENGINES else None)
    t_ref = np.asarray(ref.t)
    t_max = np.float32(np.median(t_ref[np.isfinite(t_ref)]))
    clear_cut = (np.abs(t_ref - t_max) > 1e-4 * t_max) & ~(excused & (accel in HOST_ENGINES))
    got = np.asarray(blocked(geo, o, d, t_max))
    np.testing.assert_array_equal(got[clear_cut], (t_ref < t_max)[clear_cut])
    # A bounded closest hit finds only what lies before the bound; t_max = 0 asks for nothing.
    bounded = closest(geo, o, d, jnp.full(o.shape[1], t_max))
    prim = np.asarray(bounded.prim)
    np.testing.assert_array_equal((prim >= 0)[clear_cut], (t_ref < t_max)[clear_cut])
    assert np.all(np.asarray(closest(geo, o, d, jnp.zeros(o.shape[1])).prim) == -1)
    assert not np.any(np.asarray(blocked(geo, o, d, 0.0)))


@pytest.mark.parametrize("accel", BACKENDS)
def test_rays_through_shared_edges_never_slip_through(accel):
    """Embree only in its robust mode, which a scene asks for as in Mitsuba
    (``embree_use_robust_intersections``; off by default there, as here)."""
    tri = fan()
    geo = _geometry(tri, accel, robust=True)
    rng = np.random.default_rng(2)
    o, d, crossing = fan_rays(tri, rng, 4096)
    assert np.all(np.asarray(closest(geo, o, d, jnp.inf).prim)[crossing] >= 0)


@pytest.mark.parametrize("accel", BACKENDS)
def test_rays_leaving_a_surface_do_not_hit_it_again(accel):
    mesh = trimesh.creation.torus(1.0, 0.35, 48, 24)
    geo = geometry.build_geometry([(mesh.vertices, mesh.faces, None, None, 0)], [], accel=accel)
    rng = np.random.default_rng(4)
    n = 4096
    o = (unit(rng.normal(size=(3, n))) * 3).astype(np.float32)
    d = unit(rng.normal(0, 0.4, (3, n)) - o)
    h = closest(geo, o, d, jnp.inf)
    si = surface(geo, o, d, h)
    valid = np.asarray(si.valid)
    assert valid.mean() > 0.3
    w = unit(rng.normal(size=(3, n)))
    # A quarter of them graze the surface.
    q = n // 4
    w[:, :q] = unit(np.cross(np.asarray(si.ng)[:, :q].T, rng.normal(size=(q, 3))).T + 1e-3 * w[:, :q])
    h2 = closest(geo, geometry.spawn_ray(si.p, si.ng, w), w, jnp.inf)
    assert not np.any((np.asarray(h2.prim) == np.asarray(h.prim)) & valid)
    # Shadow rays between two surface points stop at neither end.
    target = np.roll(np.asarray(si.p), 1, axis=1)
    o3, d3, t3 = geometry.spawn_ray_to(si.p, si.ng, target)
    h3 = np.asarray(closest(geo, o3, d3, t3).prim)
    ends = (h3 == np.asarray(h.prim)) | (h3 == np.roll(np.asarray(h.prim), 1))
    assert not np.any(ends & valid & np.roll(valid, 1))


@pytest.mark.parametrize("accel", BACKENDS)
def test_degenerate_triangles_and_rays_in_their_plane(accel):
    rng = np.random.default_rng(5)
    n, n_rays = 48, 1024
    p0 = rng.uniform(-1, 1, (3, n)).astype(np.float32)
    p0[2] = 0
    p1, p2 = p0 + [[0.3], [0], [0]], p0 + [[0], [0.3], [0]]
    p1[:, :8] = p0[:, :8]  # zero area
    tri = (p0, p1.astype(np.float32), p2.astype(np.float32))
    geo = _geometry(tri, accel)
    o = np.concatenate([rng.uniform(-1.5, 1.5, (2, n_rays)), np.zeros((1, n_rays))]).astype(np.float32)
    d = unit(np.concatenate([rng.normal(size=(2, n_rays)), np.zeros((1, n_rays))]))
    assert np.all(np.asarray(closest(geo, o, d, jnp.inf).prim) == -1)
    o[2] = 1.0
    k = rng.integers(0, n, n_rays)
    d = unit(p0[:, k] + rng.uniform(0, 0.1, (3, n_rays)) * [[1], [1], [0]] - o)
    h = closest(geo, o, d, jnp.inf)
    prim = np.asarray(h.prim)
    assert np.all((prim < 0) | (prim >= 8)) and np.any(prim >= 8)
    assert not any(np.any(np.isnan(np.asarray(x))) for x in (h.t, h.u, h.v))


@pytest.mark.parametrize("accel", BACKENDS)
def test_triangles_with_spheres_and_disks(accel):
    rng = np.random.default_rng(6)
    meshes, analytic = spheres_disks_and_meshes(rng, 12, (0.1, 0.5))
    geo = geometry.build_geometry(meshes, analytic, accel=accel)
    ref_geo = geometry.build_geometry(meshes, analytic, accel="brute")
    o = rng.uniform(-3, 3, (3, 2048)).astype(np.float32)
    d = unit(rng.normal(size=(3, 2048)))
    h, ref = closest(geo, o, d, jnp.inf), closest(ref_geo, o, d, jnp.inf)
    assert_same_hits(h, ref, rtol=2e-5)
    prim = np.asarray(ref.prim)
    assert np.sum(prim >= ref_geo.n_triangles) > 20 and np.sum((prim >= 0) & (prim < ref_geo.n_triangles)) > 20
    np.testing.assert_array_equal(np.asarray(blocked(geo, o, d, 1.5)), np.asarray(blocked(ref_geo, o, d, 1.5)))


def test_backend_choice():
    tri = fan(8)
    assert _geometry(tri, "jax").accel == "brute"
    assert geometry.resolve_accel("jax", geometry.AUTO_BVH_MIN) == "bvh"
    assert _geometry(tri, "auto").accel == "brute"  # a few triangles: brute force wins
    on_cpu = embree.available() and jax.default_backend() == "cpu"
    expected = "embree" if on_cpu else "bvh"
    assert geometry.resolve_accel("auto", geometry.AUTO_BVH_MIN) == expected
    # Below AUTO_BVH_MIN primitives Embree from EMBREE_MIN triangles (the Cornell box's 36), not
    # for the analytic shapes of a scene (it holds only triangles).
    many = fan(geometry.EMBREE_MIN)
    assert _geometry(many, "auto").accel == ("embree" if on_cpu else "brute")
    assert _geometry(fan(geometry.EMBREE_MIN - 1), "auto").accel == "brute"
    assert geometry.resolve_accel("auto", 100, n_host=geometry.EMBREE_MIN - 1) == "brute"
    with pytest.raises(ValueError, match="unknown intersection backend 'optix'"):
        _geometry(tri, "optix")


# Warp is called back through the host, directly or through its ``jax.pure_callback`` fallback.
@pytest.mark.parametrize("accel, direct", [(a, direct) for a in HOST_ENGINES
                                           for direct in ((True, False) if a == "warp" else (True,))])
def test_engine_queries_answer_only_the_rays_that_ask(accel, direct, monkeypatch):
    """Most rays asking and few asking (Warp's callback sends the first whole, idle ones with
    t_max -1, and gathers the second) give each asking ray the answer it gets alone, and idle
    rays none."""
    if not direct:
        monkeypatch.setattr(host, "_direct", None)
    mesh = trimesh.creation.icosphere(subdivisions=2)
    tri = tuple(np.asarray(mesh.vertices[mesh.faces[:, k]].T, np.float32) for k in range(3))
    geo = _geometry(tri, accel)
    rng = np.random.default_rng(5)
    n = 4096
    o_np = rng.uniform(-2, 2, (3, n))
    o = jnp.asarray(o_np, jnp.float32)
    d = jnp.asarray(unit(-o_np + rng.normal(size=(3, n))), jnp.float32)  # mostly toward the sphere
    jax.clear_caches()  # ``_direct`` is read while tracing
    # Every ray asking, through the same compiled query (XLA contracts FMAs per program: an eager
    # call's t can differ in the last bit).
    all_hits = closest(geo, o, d, jnp.full(n, jnp.inf, jnp.float32))
    assert np.mean(np.asarray(all_hits.prim) >= 0) > 0.3
    t_all = np.asarray(all_hits.t)
    t_shadow = np.where(np.isfinite(t_all), t_all * 1.5, 1.0).astype(np.float32)
    all_blocked = np.asarray(blocked(geo, o, d, t_shadow))
    for share in (0.9, 0.1):
        asks = rng.uniform(size=n) < share
        hits = closest(geo, o, d, jnp.where(asks, jnp.inf, 0.0))
        np.testing.assert_array_equal(np.asarray(hits.prim), np.where(asks, np.asarray(all_hits.prim), -1))
        np.testing.assert_array_equal(np.asarray(hits.t), np.where(asks, t_all, np.inf))
        got = np.asarray(blocked(geo, o, d, np.where(asks, t_shadow, 0.0)))
        np.testing.assert_array_equal(got, all_blocked & asks)
    jax.clear_caches()


@pytest.mark.parametrize("accel", HOST_ENGINES)
def test_a_geometry_owns_its_host_scene(accel):
    """Closing frees the engine's scene (queries then fail by name); copies made by tree
    operations share the handle but not the ownership; a dropped geometry frees it too."""
    import gc
    geo = _geometry(fan(8), accel)
    handle = int(geo.host_handle)
    copy = jax.tree.map(lambda a: a, geo)
    assert copy.host_scene is None and int(copy.host_handle) == handle
    o, d, _ = fan_rays(fan(8), np.random.default_rng(1), 64)
    np.testing.assert_array_equal(np.asarray(blocked(copy, o, d, jnp.inf)), np.asarray(blocked(geo, o, d, jnp.inf)))
    is_open = embree.is_open if accel == "embree" else lambda h: h in host._scenes
    assert is_open(handle)
    geo.close()
    assert not is_open(handle) and geo.host_scene.closed
    with pytest.raises(Exception, match="closed or freed"):
        np.asarray(blocked(copy, o, d, jnp.inf))
    geo.close()  # twice is harmless
    dropped = _geometry(fan(8), accel)
    handle = int(dropped.host_handle)
    assert is_open(handle)
    del dropped
    gc.collect()
    assert not is_open(handle)


def test_the_direct_host_call_is_available():
    """``host._host_call`` hands XLA's buffers to the engines through a primitive built from a
    private JAX function (``jax._src.callback._callback_op_sharding``); where that is gone it
    falls back to ``jax.pure_callback``, which copies every argument (15% of a query). This
    pins the private API: a JAX upgrade that moves it fails here, not silently slower."""
    assert host._direct is not None


def test_missing_warp_names_what_to_install(monkeypatch):
    monkeypatch.setattr(geometry.warp, "available", lambda: False)
    with pytest.raises(ImportError, match=re.escape("jaxfarm[warp]")):
        geometry.resolve_accel("warp", 1000)


@pytest.mark.parametrize("broken, reason", [
    (dict(_extension_path=lambda: None), "native extension was not built"),
    (dict(_embree_library=lambda: None), "pip install embreex")])
def test_embree_unavailable_says_why_and_auto_falls_back_once(broken, reason, monkeypatch):
    """Where Embree cannot be loaded, asking for it fails naming why; 'auto' says why once, in
    one line, and uses the pure-JAX BVH."""
    import warnings
    from tracer.errors import EngineNotice
    monkeypatch.setattr(embree, "_loaded", None)
    for name, value in broken.items():
        monkeypatch.setattr(embree, name, value)
    monkeypatch.setattr(geometry, "_fallback_said", False)
    assert not embree.available() and reason in embree.unavailable_reason()
    with pytest.raises(ImportError, match=re.escape(reason)):
        geometry.resolve_accel("embree", 1000)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        chosen = [geometry.resolve_accel("auto", geometry.AUTO_BVH_MIN) for _ in range(3)]
    if jax.default_backend() == "cpu":
        assert chosen == ["bvh"] * 3
        notices = [w for w in said if issubclass(w.category, EngineNotice)]
        assert len(notices) == 1 and reason in str(notices[0].message) and "\n" not in str(notices[0].message)
    # A small scene, which Embree would take too, takes brute force (as fast within some 20%) without a word.
    monkeypatch.setattr(geometry, "_fallback_said", False)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert geometry.resolve_accel("auto", 100) == "brute"
    assert not [w for w in said if issubclass(w.category, EngineNotice)]


@pytest.mark.skipif(not embree.available(), reason="Embree is unavailable here")
def test_embree_from_xla_answers_as_embree_alone():
    """The custom call gives, ray by ray, the bits embreex's own single-ray queries give (the
    host callback it replaced): hit ids, distances and occlusion, on a device of this host's
    level (embreex's); rays with t_max <= 0 or NaN ask nothing."""
    from embreex import mesh_construction, rtcore_scene
    from tracer.runtime import xla_flags
    torus = trimesh.creation.torus(1.0, 0.3, major_sections=64, minor_sections=32)
    corners = np.asarray(torus.vertices[torus.faces], np.float32)  # (T, 3, 3)
    scene = embree.build(*(corners[:, k].T for k in range(3)), isa=xla_flags.local_isa())
    rng = np.random.default_rng(3)
    n = 20000
    o = rng.uniform(-1.5, 1.5, (3, n)).astype(np.float32)
    aim = torus.vertices[rng.integers(0, len(torus.vertices), n)].T + rng.normal(scale=0.3, size=(3, n))
    d = unit(aim - o).astype(np.float32)
    t_max = rng.choice(np.array([np.inf, 0.4, 1.0, 0.0, -1.0, np.nan], np.float32), n, p=[.5, .15, .15, .1, .05, .05])
    t, prim = jax.jit(embree.closest_hit)(scene.handle, o, d, t_max)
    got_blocked = np.asarray(jax.jit(embree.occluded)(scene.handle, o, d, t_max))
    alone = rtcore_scene.EmbreeScene(robust=False)
    mesh_construction.TriangleMesh(alone, corners)
    asks = t_max > 0
    rows = lambda a: np.ascontiguousarray(a.T)
    dists = np.where(asks, t_max, np.float32(-1))
    ref = alone.run(rows(o), rows(d), dists=dists.copy(), output=1)
    ref_prim = np.where(asks & (ref["geomID"] >= 0), ref["primID"], -1)
    assert 0.2 < np.mean(ref_prim >= 0) < 0.9
    np.testing.assert_array_equal(np.asarray(prim), ref_prim)
    np.testing.assert_array_equal(np.asarray(t), np.where(ref_prim >= 0, ref["tfar"], np.inf))
    ref_blocked = asks & (alone.run(rows(o), rows(d), dists=dists.copy(), query="OCCLUDED") >= 0)
    np.testing.assert_array_equal(got_blocked, ref_blocked)
    scene.close()


def _edge_rays(corners: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rays o, d (3, n) from about the triangles ``corners`` (T, 3, 3), each aimed at a point on
    an edge or at a corner of one of them (where arithmetic decides between two triangles), and
    t_max: infinite, the distance to that point exactly, or asking nothing (0)."""
    w = rng.random((n, 3))
    w[np.arange(n), rng.integers(0, 3, n)] = 0  # a point on an edge...
    at_corner = rng.random(n) < 0.2
    w[at_corner] = np.eye(3)[rng.integers(0, 3, at_corner.sum())]  # ...or a corner
    w /= w.sum(1, keepdims=True)
    target = np.einsum("nk,nkc->cn", w, corners[rng.integers(0, len(corners), n)].astype(np.float64))
    lo, hi = corners.min((0, 1)), corners.max((0, 1))
    o = lo[:, None] + (hi - lo)[:, None] * rng.uniform(-0.2, 1.2, (3, n))
    dist = np.linalg.norm(target - o, axis=0)
    kind = rng.choice(3, n, p=[.45, .45, .1])  # infinite; the exact distance half the time; nothing
    exact = (kind == 1) & (rng.random(n) < 0.5)
    t_max = np.where(kind == 2, 0.0, np.where(exact, dist, np.inf))
    return o.astype(np.float32), unit(target - o).astype(np.float32), t_max.astype(np.float32)


@pytest.mark.skipif(not embree.available(), reason="Embree is unavailable here")
@pytest.mark.parametrize("instanced", [False, True], ids=["world", "instanced"])
def test_an_embree_rays_answer_does_not_depend_on_the_rays_beside_it(instanced):
    """Closest hits go to Embree in packets (occlusion one ray at a time): a ray's hit distance,
    triangle, instance and occlusion are the same bits whichever rays share its packet, here the
    same rays shuffled and with others asking nothing, at both instruction-set levels, for rays
    aimed at edges and corners of a box's triangles (axis-aligned, as most scenes' walls are) and
    a torus's. (Embree's own packet occlusion test fails it: 16 and 17 of these 65,536 rays
    changed with their packets.)"""
    from tracer.runtime import xla_flags
    meshes = (trimesh.creation.box().subdivide().subdivide(), trimesh.creation.torus(1.0, 0.3, 32, 16))
    corners = np.concatenate([np.asarray(m.vertices[m.faces], np.float32) for m in meshes])
    rng = np.random.default_rng(11)
    n = 1 << 16
    if instanced:
        placed = [np.eye(4), np.diag([0.5, 0.5, 0.5, 1.0]) + np.eye(4, k=3) * 1.5]
        world = np.concatenate([corners @ m[:3, :3].T + m[:3, 3] for m in placed])
        o, d, t_max = _edge_rays(world, n, rng)
        tri = tuple(np.zeros((3, 0), np.float32) for _ in range(3))
        options = dict(groups=[(0, *(corners[:, k].T for k in range(3)))], instances=[(0, m) for m in placed])
    else:
        o, d, t_max = _edge_rays(corners, n, rng)
        tri, options = tuple(corners[:, k].T for k in range(3)), {}
    closest = jax.jit(embree.closest_hit_instanced if instanced else embree.closest_hit)
    occluded = jax.jit(embree.occluded)
    for isa in sorted({"AVX2", xla_flags.local_isa()} - {"AVX"}):
        scene = embree.build(*tri, isa=isa, **options)

        def answers(order, asks):
            t = np.where(asks, t_max, np.float32(0))[order]
            hit = closest(scene.handle, o[:, order], d[:, order], t)
            blocked = occluded(scene.handle, o[:, order], d[:, order], t)
            back = np.argsort(order)
            return [np.asarray(a)[back] for a in (*hit, blocked)]

        everyone = np.ones(n, bool)
        alone = answers(np.arange(n), everyone)
        assert 0.3 < np.mean(alone[1] >= 0) < 0.95 and 0.1 < np.mean(alone[-1]) < 0.9
        for seed, share in ((1, 1.0), (2, 0.6), (3, 0.1)):
            asks = everyone if share == 1.0 else np.random.default_rng(seed).random(n) < share
            got = answers(np.random.default_rng(seed).permutation(n), asks)
            for a, b in zip(alone, got):
                np.testing.assert_array_equal(a[asks].view(np.uint32) if a.dtype == np.float32 else a[asks],
                                              b[asks].view(np.uint32) if b.dtype == np.float32 else b[asks])
        scene.close()


@pytest.mark.skipif(not embree.available(), reason="Embree is unavailable here")
def test_embree_runs_at_the_jobs_instruction_set_level(monkeypatch):
    """Embree's device is the job's level (its hit distances differ between its ISA paths; its
    ids do not): the process's XLA_FLAGS name it, else the host's level serves."""
    from tracer.runtime import xla_flags
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
    assert embree.device_config() == "isa=avx2"
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert embree.device_config() == f"isa={xla_flags.local_isa().lower()}"
    if xla_flags.local_isa() == "AVX2" or xla_flags.host_isa() is None:
        return
    mesh = trimesh.creation.icosphere(subdivisions=3)
    tri = tuple(np.asarray(mesh.vertices[mesh.faces[:, k]].T, np.float32) for k in range(3))
    rng = np.random.default_rng(9)
    o = rng.uniform(-2, 2, (3, 8192)).astype(np.float32)
    d = unit(-o + rng.normal(size=o.shape)).astype(np.float32)
    scenes = [embree.build(*tri, isa=isa) for isa in ("AVX2", xla_flags.local_isa())]
    prims = [np.asarray(jax.jit(embree.closest_hit)(s.handle, o, d, np.inf)[1]) for s in scenes]
    assert np.mean(prims[0] >= 0) > 0.3
    np.testing.assert_array_equal(prims[0], prims[1])


def test_images_agree_across_backends():
    """Whole renders (a torus mesh, spheres and a ground rectangle) with every available backend.
    Hits are recomputed with one watertight test, so where backends pick the same primitive the
    image has the same bits; they may differ only where a backend breaks a tie differently."""
    import tracer

    images = {accel: tracer.render(tracer.load_scene("examples/orbit.xml", width=32, height=24, accel=accel), spp=8)
              for accel in ["brute", *HOST_ENGINES]}
    ref = images["brute"]
    assert ref.mean() > 0.05
    for accel, image in images.items():
        identical = np.all(image == ref, axis=-1).mean()
        assert identical >= 0.99, (accel, identical)
        np.testing.assert_allclose(image.mean(axis=(0, 1)), ref.mean(axis=(0, 1)), rtol=2e-3)
