"""Surface interactions (with their uv partials and shading frames) and spawned rays against
Mitsuba 3 (scalar_rgb), and edge cases."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import trimesh

from tests.helpers.rays import transform, unit
from tracer.shapes import geometry
from tracer import vecmath as vm
from tracer.kinds import SurfaceKind

mi = pytest.importorskip("mitsuba")

N_RAYS = 256

closest = jax.jit(geometry.closest_hit)
occluded = jax.jit(geometry.occluded)
surface = jax.jit(geometry.surface_interaction)


def _mitsuba_hits(scene, o, d):
    """Mitsuba's t, p, n, sh_frame (s, t, n), uv, dp_du, dp_dv, prim_index for each ray (columns)."""
    mi.set_variant("scalar_rgb")
    out = {k: [] for k in ("t", "p", "n", "ns", "s", "tangent", "dp_du", "dp_dv", "uv", "prim")}
    for i in range(o.shape[1]):
        si = scene.ray_intersect(mi.Ray3f(mi.Point3f(*map(float, o[:, i])), mi.Vector3f(*map(float, d[:, i]))))
        valid = bool(si.is_valid())
        out["t"].append(float(si.t) if valid else np.inf)
        out["p"].append(np.array(si.p) if valid else np.zeros(3))
        out["n"].append(np.array(si.n) if valid else np.zeros(3))
        out["ns"].append(np.array(si.sh_frame.n) if valid else np.zeros(3))
        out["s"].append(np.array(si.sh_frame.s) if valid else np.zeros(3))
        out["tangent"].append(np.array(si.sh_frame.t) if valid else np.zeros(3))
        out["dp_du"].append(np.array(si.dp_du) if valid else np.zeros(3))
        out["dp_dv"].append(np.array(si.dp_dv) if valid else np.zeros(3))
        out["uv"].append(np.array(si.uv) if valid else np.zeros(2))
        out["prim"].append(int(si.prim_index) if valid else -1)
    return {k: np.array(v).T for k, v in out.items()}


def _check_frame(si, ref, ok, sign=1.0, atol=1e-5):
    """dp/du, dp/dv and the shading frame built from them (``vm.tangent_frame``, as the
    integrator builds it after the shape's flip: ``sign``) against Mitsuba's, where ``ok``."""
    for ours, theirs in ((si.dp_du, "dp_du"), (si.dp_dv, "dp_dv")):
        scale = max(1.0, float(np.max(np.abs(ref[theirs][:, ok]))))
        np.testing.assert_allclose(np.asarray(ours)[:, ok], ref[theirs][:, ok], atol=atol * scale, err_msg=theirs)
    s, t, _ = vm.tangent_frame(sign * si.ns, si.dp_du)
    np.testing.assert_allclose(np.asarray(s)[:, ok], ref["s"][:, ok], atol=atol, err_msg="s")
    np.testing.assert_allclose(np.asarray(t)[:, ok], ref["tangent"][:, ok], atol=atol, err_msg="t")


def _ours(geo, o, d):
    h = closest(geo, o, d, jnp.inf)
    si = surface(geo, o, d, h)
    return h, si


def _mitsuba_mesh(v, f, normals, uvs):
    mi.set_variant("scalar_rgb")
    mesh = mi.Mesh("m", len(v), len(f), has_vertex_normals=normals is not None, has_vertex_texcoords=uvs is not None)
    params = mi.traverse(mesh)
    params["vertex_positions"] = np.asarray(v, np.float32).ravel()
    params["faces"] = np.asarray(f, np.uint32).ravel()
    if uvs is not None:
        params["vertex_texcoords"] = np.asarray(uvs, np.float32).ravel()
    params.update()
    if normals is not None:
        # A second update: positions changing would recompute the normals.
        params["vertex_normals"] = np.asarray(normals, np.float32).ravel()
        params.update()
    return mi.load_dict({"type": "scene", "mesh": mesh})


def _rays_at(points, rng, spread=0.05):
    n = N_RAYS
    k = rng.integers(0, points.shape[1], n)
    target = points[:, k] + rng.normal(0, spread, (3, n))
    o = (target + unit(rng.normal(size=(3, n))) * rng.uniform(0.5, 3, n)).astype(np.float32)
    return o, unit(target - o)


@pytest.mark.parametrize("accel", ["brute", "bvh"])
@pytest.mark.parametrize("attributes", ["normals+uvs", "bare"])
def test_mesh_matches_mitsuba(accel, attributes):
    rng = np.random.default_rng(0)
    mesh = trimesh.creation.icosphere(1)
    v = (mesh.vertices * rng.uniform(0.7, 1.3, (len(mesh.vertices), 1)) + [0.2, -0.1, 0.3]).astype(np.float32)
    normals = uvs = None
    if attributes == "normals+uvs":
        normals = unit((mesh.vertices + rng.normal(0, 0.2, mesh.vertices.shape)).T).T
        uvs = rng.random((len(v), 2)).astype(np.float32)
    geo = geometry.build_geometry([(v, mesh.faces, normals, uvs, 3)], [], accel=accel)
    o, d = _rays_at(v.T, rng)
    h, si = _ours(geo, o, d)
    ref = _mitsuba_hits(_mitsuba_mesh(v, mesh.faces, normals, uvs), o, d)
    prim = np.asarray(h.prim)
    same = prim == ref["prim"]
    assert same.mean() > 0.98 and (prim >= 0).mean() > 0.5
    ok = same & (prim >= 0)
    np.testing.assert_allclose(np.asarray(h.t)[ok], ref["t"][ok], rtol=1e-5, atol=1e-6)
    for ours, theirs, tol in ((si.p, "p", 2e-6), (si.ng, "n", 1e-5), (si.ns, "ns", 1e-5), (si.uv, "uv", 1e-5)):
        np.testing.assert_allclose(np.asarray(ours)[:, ok], ref[theirs][:, ok], atol=tol, err_msg=theirs)
    _check_frame(si, ref, ok, atol=1e-4)  # dp/du of random uvs is large and ill-conditioned
    np.testing.assert_array_equal(np.asarray(si.shape), np.where(prim >= 0, 3, -1))
    np.testing.assert_array_equal(np.asarray(si.valid), prim >= 0)


def _mitsuba_shape(kind, to_world):
    mi.set_variant("scalar_rgb")
    return mi.load_dict({"type": "scene", "s": {"type": kind, "to_world": mi.ScalarTransform4f(to_world.tolist())}})


@pytest.mark.parametrize("to_world", [
    transform([0.8] * 3, 0.9, [1, 2, 3], [0.3, -0.2, 1.0]),
    transform([-1.2] * 3, 0.0, [0, 0, 1], [0.1, 0.4, -0.3]),  # mirrored: normals point inward
], ids=["rotated", "mirrored"])
def test_sphere_matches_mitsuba(to_world):
    rng = np.random.default_rng(1)
    geo = geometry.build_geometry([], [(SurfaceKind.SPHERE, to_world, 0)], accel="brute")
    center = to_world[:3, 3:]
    o, d = _rays_at(center + rng.normal(0, 0.5, (3, 8)), rng, spread=0.5)
    h, si = _ours(geo, o, d)
    ref = _mitsuba_hits(_mitsuba_shape("sphere", to_world), o, d)
    hit = np.isfinite(ref["t"])
    assert hit.mean() > 0.5
    np.testing.assert_array_equal(np.asarray(h.prim) >= 0, hit)
    # Mitsuba intersects spheres in double precision on the CPU; float32 errors are absolute.
    np.testing.assert_allclose(np.asarray(h.t)[hit], ref["t"][hit], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(si.p)[:, hit], ref["p"][:, hit], atol=2e-6)
    np.testing.assert_allclose(np.asarray(si.ng)[:, hit], ref["n"][:, hit], atol=1e-5)
    np.testing.assert_allclose(np.asarray(si.ns)[:, hit], ref["ns"][:, hit], atol=1e-5)
    # u wraps around at phi = 0: compare on the circle.
    du = np.asarray(si.uv)[0, hit] - ref["uv"][0, hit]
    np.testing.assert_allclose(np.abs(du - np.round(du)), 0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(si.uv)[1, hit], ref["uv"][1, hit], atol=1e-5)
    _check_frame(si, ref, hit, atol=1e-4)


@pytest.mark.parametrize("to_world", [
    transform([1.5, 0.6, 1.0], 0.7, [1, 1, 0], [0.2, 0.1, 0.5]),
    transform([1.0, 1.0, -1.0], 0.3, [0, 1, 0], [0.0, 0.0, 0.2]),  # normal flipped by the transform
], ids=["scaled", "flipped"])
def test_disk_matches_mitsuba(to_world):
    rng = np.random.default_rng(2)
    geo = geometry.build_geometry([], [(SurfaceKind.DISK, to_world, 0)], accel="brute")
    r, phi = np.sqrt(rng.uniform(0, 1.3, 64)), rng.uniform(0, 2 * np.pi, 64)
    on_disk = to_world[:3, :3] @ np.stack([r * np.cos(phi), r * np.sin(phi), 0 * r]) + to_world[:3, 3:]
    o, d = _rays_at(on_disk, rng, spread=0.01)
    h, si = _ours(geo, o, d)
    ref = _mitsuba_hits(_mitsuba_shape("disk", to_world), o, d)
    hit = np.isfinite(ref["t"])
    rim = np.abs(np.asarray(si.uv)[0] - 1) < 1e-4
    assert hit.mean() > 0.3
    np.testing.assert_array_equal((np.asarray(h.prim) >= 0)[~rim], hit[~rim])
    ok = hit & (np.asarray(h.prim) >= 0)
    np.testing.assert_allclose(np.asarray(h.t)[ok], ref["t"][ok], rtol=1e-5)
    # A scaled disk's hit point is p = o + t d: with t within 1e-5 of Mitsuba's, p is within a
    # few ulps of the scale (2 here); XLA and Mitsuba contract different products into FMAs.
    np.testing.assert_allclose(np.asarray(si.p)[:, ok], ref["p"][:, ok], atol=1e-5)
    np.testing.assert_allclose(np.asarray(si.ng)[:, ok], ref["n"][:, ok], atol=1e-6)
    np.testing.assert_allclose(np.asarray(si.ns)[:, ok], ref["ns"][:, ok], atol=1e-6)
    np.testing.assert_allclose(np.asarray(si.uv)[:, ok], ref["uv"][:, ok], atol=1e-5)
    _check_frame(si, ref, ok)


def _cylinder_node(to_world, p0, p1, radius, flip):
    from tracer.io.xml import parse_string
    matrix = " ".join(repr(float(x)) for x in np.asarray(to_world).ravel())
    return parse_string(f"""<scene version="3.0.0"><shape type="cylinder">
        <point name="p0" value="{', '.join(map(repr, p0))}"/><point name="p1" value="{', '.join(map(repr, p1))}"/>
        <float name="radius" value="{radius!r}"/><boolean name="flip_normals" value="{str(flip).lower()}"/>
        <transform name="to_world"><matrix value="{matrix}"/></transform></shape></scene>""").children[0]


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("to_world", [
    transform([0.8] * 3, 0.9, [1, 2, 3], [0.3, -0.2, 1.0]),
    transform([1.0, -1.0, 1.0], 0.4, [0, 1, 0], [0.1, 0.4, -0.3]),  # mirrored: Mitsuba flips the normals back
], ids=["rotated", "mirrored"])
def test_cylinder_matches_mitsuba(to_world, flip):
    """The loader's frame (p0, p1, radius folded into to_world), hits, p, normals and uv against
    Mitsuba's cylinder, from outside and from inside the tube."""
    from tracer.io.scene_loader import _SceneBuilder
    p0, p1, radius = (0.1, 0.2, -0.5), (0.3, -0.1, 1.2), 0.6
    node = _cylinder_node(to_world, p0, p1, radius, flip)
    m, mirrored = _SceneBuilder(None, "auto", None)._cylinder(node, node.get_transform("to_world"))
    assert mirrored == (np.linalg.det(to_world[:3, :3]) < 0)
    geo = geometry.build_geometry([], [(SurfaceKind.CYLINDER, m, 0)], accel="brute")
    rng = np.random.default_rng(3)
    phi, z = rng.uniform(0, 2 * np.pi, 64), rng.uniform(-0.1, 1.1, 64)
    on_tube = m[:3, :3] @ np.stack([np.cos(phi), np.sin(phi), z]) + m[:3, 3:]
    o, d = _rays_at(on_tube, rng, spread=0.02)
    o[:, :32] = (m[:3, :3] @ np.stack([rng.uniform(-0.5, 0.5, 32), rng.uniform(-0.5, 0.5, 32),
                                       rng.uniform(0.2, 0.8, 32)]) + m[:3, 3:]).astype(np.float32)  # inside
    h, si = _ours(geo, o, d)
    mi.set_variant("scalar_rgb")
    spec = {"type": "cylinder", "p0": list(p0), "p1": list(p1), "radius": radius, "flip_normals": flip,
            "to_world": mi.ScalarTransform4f(to_world.tolist())}
    ref = _mitsuba_hits(mi.load_dict({"type": "scene", "s": spec}), o, d)
    hit = np.isfinite(ref["t"])
    rim = np.minimum(np.abs(np.asarray(si.uv)[1]), np.abs(np.asarray(si.uv)[1] - 1)) < 1e-4
    assert hit.mean() > 0.5
    np.testing.assert_array_equal((np.asarray(h.prim) >= 0)[~rim], hit[~rim])
    ok = hit & (np.asarray(h.prim) >= 0)
    np.testing.assert_allclose(np.asarray(h.t)[ok], ref["t"][ok], rtol=1e-5, atol=1e-6)
    # Grazing hits (|cos| < 0.05) have the least accurate float32 t: their points may differ more.
    ok &= np.abs(np.sum(ref["n"] * d, axis=0)) > 0.05
    np.testing.assert_allclose(np.asarray(si.p)[:, ok], ref["p"][:, ok], atol=1e-5)
    # The integrator applies the shape's flip_normals, which holds the mirror: as Mitsuba's si.n.
    sign = -1.0 if flip != mirrored else 1.0
    np.testing.assert_allclose(sign * np.asarray(si.ng)[:, ok], ref["n"][:, ok], atol=1e-5)
    np.testing.assert_allclose(sign * np.asarray(si.ns)[:, ok], ref["ns"][:, ok], atol=1e-5)
    du = np.asarray(si.uv)[0, ok] - ref["uv"][0, ok]
    np.testing.assert_allclose(np.abs(du - np.round(du)), 0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(si.uv)[1, ok], ref["uv"][1, ok], atol=1e-5)
    _check_frame(si, ref, ok, sign=sign)


@pytest.mark.parametrize("xml, message", [
    ('<float name="radius" value="0"/>', "nonzero radius and p0 != p1"),
    ('<point name="p1" value="0, 0, 0"/>', "nonzero radius and p0 != p1"),
    ('<float name="radius" value="nan"/>', "'radius': value 'nan' is not a finite number"),
    ('<transform name="to_world"><scale x="0"/></transform>', "singular"),
])
def test_cylinder_errors(xml, message):
    from tracer.io.scene_loader import _SceneBuilder
    from tracer.io.xml import parse_string
    from tracer.errors import SceneError
    with pytest.raises(SceneError, match=message):  # (a NaN is refused as the XML is read)
        node = parse_string(f'<scene version="3.0.0"><shape type="cylinder">{xml}</shape></scene>').children[0]
        _SceneBuilder(None, "auto", None)._cylinder(node, node.get_transform("to_world"))


def test_spawn_rays_match_mitsuba():
    mi.set_variant("scalar_rgb")
    rng = np.random.default_rng(3)
    n = 64
    p = (rng.normal(size=(3, n)) * rng.choice([0.1, 1, 50], n)).astype(np.float32)
    ng = unit(rng.normal(size=(3, n)))
    d = unit(rng.normal(size=(3, n)))
    target = (p + rng.normal(size=(3, n)) * 3).astype(np.float32)
    o1 = np.asarray(geometry.spawn_ray(jnp.asarray(p), jnp.asarray(ng), jnp.asarray(d)))
    o2, d2, t2 = (np.asarray(x) for x in geometry.spawn_ray_to(jnp.asarray(p), jnp.asarray(ng), jnp.asarray(target)))
    for i in range(n):
        si = mi.SurfaceInteraction3f()
        si.p, si.n = mi.Point3f(*map(float, p[:, i])), mi.Normal3f(*map(float, ng[:, i]))
        ray = si.spawn_ray(mi.Vector3f(*map(float, d[:, i])))
        np.testing.assert_allclose(o1[:, i], np.array(ray.o), rtol=1e-6, atol=1e-7)
        ray = si.spawn_ray_to(mi.Point3f(*map(float, target[:, i])))
        np.testing.assert_allclose(o2[:, i], np.array(ray.o), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(d2[:, i], np.array(ray.d), atol=1e-6)
        np.testing.assert_allclose(t2[i], float(ray.maxt), rtol=1e-6)
    # The (direction, distance) form: the same ray for finite distances, unbounded for infinite ones.
    w = unit(target - p)
    dist = np.linalg.norm(target - p, axis=0).astype(np.float32)
    dist[::2] = np.inf
    o3, d3, t3 = (np.asarray(x) for x in geometry.spawn_ray_to(jnp.asarray(p), jnp.asarray(ng), jnp.asarray(w),
                                                             jnp.asarray(dist)))
    np.testing.assert_allclose(o3[:, 1::2], o2[:, 1::2], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d3[:, 1::2], d2[:, 1::2], atol=2e-6)
    np.testing.assert_allclose(t3[1::2], t2[1::2], rtol=2e-6)
    assert np.all(np.isinf(t3[::2]))
    np.testing.assert_array_equal(d3[:, ::2], w[:, ::2])
    np.testing.assert_array_equal(o3[:, ::2], geometry.spawn_ray(p, ng, w)[:, ::2])


def test_empty_and_partial_geometry():
    rng = np.random.default_rng(4)
    o = rng.normal(size=(3, 16)).astype(np.float32)
    d = unit(rng.normal(size=(3, 16)))
    empty = geometry.build_geometry([], [])
    h = closest(empty, o, d, jnp.inf)
    assert np.all(np.asarray(h.prim) == -1) and np.all(np.isinf(np.asarray(h.t)))
    assert not np.any(np.asarray(occluded(empty, o, d, 10.0)))
    si = surface(empty, o, d, h)
    assert not np.any(np.asarray(si.valid)) and np.all(np.isfinite(np.asarray(si.p)))

    # Triangles of shape 5 (ids 0, 1) and a big sphere of shape 7 (id 2) around everything.
    quad = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]], np.float32)
    sphere = np.diag([10.0, 10.0, 10.0, 1.0])
    both = geometry.build_geometry([(quad, [[0, 1, 2], [0, 2, 3]], None, None, 5)], [(SurfaceKind.SPHERE, sphere, 7)],
                                  accel="jax")
    assert (both.n_triangles, both.n_analytic, both.accel) == (2, 1, "brute")
    o = np.array([[0.5, 5.0], [0.2, 0.0], [1.0, 0.0]], np.float32)
    d = np.array([[0.0, 0.0], [0.0, 0.0], [-1.0, 1.0]], np.float32)
    h = closest(both, o, d, jnp.inf)
    np.testing.assert_array_equal(np.asarray(h.prim), [0, 2])
    np.testing.assert_allclose(np.asarray(h.t), [1.0, np.sqrt(75.0)], rtol=1e-6)
    si = surface(both, o, d, h)
    np.testing.assert_array_equal(np.asarray(si.shape), [5, 7])
    np.testing.assert_array_equal(np.asarray(geometry.primitive_shape(both, jnp.array([-1, 0, 1, 2]))), [-1, 5, 5, 7])
    # Without uvs a mesh reports Mitsuba's (b1, b2); the face normal is not flipped toward the ray.
    np.testing.assert_allclose(np.asarray(si.uv)[:, 0], [np.asarray(h.u)[0], np.asarray(h.v)[0]])
    np.testing.assert_allclose(np.asarray(si.ng)[:, 0], [0, 0, 1])
    np.testing.assert_allclose(np.asarray(si.ng)[:, 1], [0.5, 0, np.sqrt(0.75)], atol=1e-6)


def test_changing_values_does_not_retrace():
    traces = []

    @jax.jit
    def cast(geo, o, d):
        traces.append(1)
        return geometry.closest_hit(geo, o, d, jnp.inf).t

    rng = np.random.default_rng(5)
    o = np.zeros((3, 8), np.float32)
    d = unit(rng.normal(size=(3, 8)))
    for radius in (1.0, 2.0):
        mesh = trimesh.creation.icosphere(2)
        geo = geometry.build_geometry([(mesh.vertices * radius, mesh.faces, None, None, 0)], [], accel="bvh")
        np.testing.assert_allclose(np.asarray(cast(geo, o, d)), radius, rtol=2e-2)
    assert len(traces) == 1
