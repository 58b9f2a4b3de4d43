"""Mitsuba's ``sdfgrid``: hits and both kinds of normals against Mitsuba's own (its Embree user
geometry) ray by ray, in world space, beside an Embree mesh and through a rotated instance; one
small scene rendered by both; bad grids refused in one line."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tracer
from tracer.errors import SceneError
from tracer.io import vol
from tracer.kinds import SurfaceKind
from tracer.shapes import geometry

mi = pytest.importorskip("mitsuba")

N_RAYS = 500


def _grid(n: int) -> np.ndarray:
    """(n, n, n) values of a wobbly ball, z slowest: a surface with curvature of every sign."""
    z, y, x = np.mgrid[0:n, 0:n, 0:n].astype(np.float64) / (n - 1)
    r = np.sqrt((x - 0.5) ** 2 + (y - 0.45) ** 2 + (z - 0.5) ** 2)
    return (r - 0.3 + 0.04 * np.sin(9 * x) * np.cos(7 * z)).astype(np.float32)


def _plane_obj(path, n=12):
    """An OBJ of 2 n^2 triangles (enough for 'auto' to give them to Embree): z = 1.5 over [-1, 3]^2,
    behind the grid as the rays see it."""
    xs = np.linspace(-1, 3, n + 1)
    lines = [f"v {x} {y} 1.5" for y in xs for x in xs]
    k = lambda i, j: i * (n + 1) + j + 1
    lines += [f"f {k(i, j)} {k(i, j + 1)} {k(i + 1, j + 1)}\nf {k(i, j)} {k(i + 1, j + 1)} {k(i + 1, j)}"
              for i in range(n) for j in range(n)]
    path.write_text("\n".join(lines) + "\n")


SDF = ('<shape type="sdfgrid"><string name="filename" value="g.vol"/><string name="normals" value="{normals}"/>'
       '{transform}</shape>')
PLACES = {
    # world space, scaled unevenly (Mitsuba asks for no rotation there), alone: the pure-JAX BVH
    "world": (SDF.replace("{transform}", '<transform name="to_world"><scale value="2 1.5 1"/>'
                          '<translate value="0.3 -0.2 0.1"/></transform>'), "bvh"),
    # beside a mesh Embree takes: the voxels in a BVH of their own
    "beside_embree": (SDF.replace("{transform}", '<transform name="to_world"><scale value="2 1.5 1"/></transform>')
                      + '<shape type="obj"><string name="filename" value="plane.obj"/></shape>', "embree"),
    # in a shape group placed by a rotated, scaled instance (as Mitsuba's own scenes place them;
    # a unit axis: Mitsuba's 'rotate' about a longer one is no rotation, and its inverse then wrong)
    "instance": ('<shape type="shapegroup" id="g">' + SDF.replace("{transform}", "") + '</shape>'
                 '<shape type="instance"><ref id="g"/><transform name="to_world"><translate value="-0.5 -0.5 -0.5"/>'
                 '<scale value="2.2"/><rotate value="0.3, -0.8, 0.5196152" angle="50"/><translate value="1 0.5 0.6"/>'
                 '</transform></shape>', "bvh"),
}


def _scene_xml(tmp_path, body, n=14):
    (tmp_path / "g.vol").write_bytes(vol.encode(_grid(n)[..., None]))
    _plane_obj(tmp_path / "plane.obj")
    xml = tmp_path / "scene.xml"
    xml.write_text(f'<scene version="3.0.0">{body}<sensor type="perspective"/></scene>')
    return xml


@jax.jit
def _hits(geo, o, d):
    hit = geometry.closest_hit(geo, o, d, jnp.float32(jnp.inf))
    si = geometry.surface_interaction(geo, o, d, hit)
    return hit.t, si.ng, si.ns, geometry.occluded(geo, o, d, jnp.where(jnp.isfinite(hit.t), hit.t * 1.001, 1e3))


@pytest.mark.parametrize("normals", ["smooth", "analytic"])
@pytest.mark.parametrize("place", sorted(PLACES))
def test_hits_and_normals_match_mitsuba(tmp_path, place, normals):
    body, accel = PLACES[place]
    if accel == "embree":
        from tracer.accel import embree
        if not embree.available():
            pytest.skip("Embree's extension is not built here")
    xml = _scene_xml(tmp_path, body.replace("{normals}", normals))
    scene = tracer.load_scene(str(xml), accel=accel if accel == "embree" else "auto")
    assert scene.geometry.accel == accel and SurfaceKind.SDF_VOXEL in scene.geometry.analytic_kinds
    rng = np.random.default_rng(len(place))
    o = np.stack([rng.uniform(-1, 3, N_RAYS), rng.uniform(-1.5, 2, N_RAYS), np.full(N_RAYS, -2.0)])
    aim = np.stack([rng.uniform(0.3, 2.3, N_RAYS), rng.uniform(-0.2, 1.3, N_RAYS), rng.uniform(0.1, 1.1, N_RAYS)])
    d = (aim - o) / np.linalg.norm(aim - o, axis=0)
    t, ng, ns, blocked = (np.asarray(a) for a in _hits(scene.geometry, jnp.asarray(o, jnp.float32),
                                                        jnp.asarray(d, jnp.float32)))

    mi.set_variant("scalar_rgb")
    theirs = mi.load_file(str(xml))
    ref = [theirs.ray_intersect(mi.Ray3f(o[:, i], d[:, i])) for i in range(N_RAYS)]
    ref_t = np.array([r.t for r in ref])
    ref_ng, ref_ns = np.array([r.n for r in ref]).T, np.array([r.sh_frame.n for r in ref]).T
    if place == "world":  # the same voxels
        assert scene.geometry.n_analytic == theirs.shapes()[0].primitive_count()

    both = np.isfinite(t) & np.isfinite(ref_t)
    assert both.sum() > 0.3 * N_RAYS
    assert np.sum(np.isfinite(t) != np.isfinite(ref_t)) <= 0.004 * N_RAYS
    np.testing.assert_allclose(t[both], ref_t[both], rtol=1e-5, atol=5e-5)
    np.testing.assert_allclose(ng[:, both], ref_ng[:, both], atol=2e-3)
    np.testing.assert_allclose(ns[:, both], ref_ns[:, both], atol=2e-3)
    if normals == "smooth":  # the blend is not the voxel's own gradient
        assert np.max(np.abs(ns[:, both] - ng[:, both])) > 0.05
    else:
        np.testing.assert_allclose(ns[:, both], ng[:, both], atol=1e-6)
    np.testing.assert_array_equal(blocked, np.isfinite(t))  # the shadow query sees the same surface


SCENE = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="4"/></integrator>
    <sensor type="perspective"><float name="fov" value="40"/>
        <transform name="to_world"><lookat origin="0.5, -3, 2.5" target="0.5, 0.5, 0.4" up="0, 0, 1"/></transform>
        <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="24"/>
            <rfilter type="box"/></film>
        <sampler type="independent"><integer name="sample_count" value="16"/></sampler></sensor>
    <emitter type="constant"><rgb name="radiance" value="0.2"/></emitter>
    <shape type="rectangle"><transform name="to_world"><scale value="3"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.6, 0.5, 0.4"/></bsdf></shape>
    <shape type="rectangle"><transform name="to_world"><scale value="0.6"/><rotate x="1" angle="180"/>
        <translate z="3"/></transform>
        <emitter type="area"><rgb name="radiance" value="8, 7, 6"/></emitter></shape>
    <shape type="sdfgrid"><string name="filename" value="g.vol"/>
        <transform name="to_world"><scale value="1.2"/></transform>
        <bsdf type="roughplastic"><rgb name="diffuse_reflectance" value="0.2, 0.3, 0.7"/></bsdf></shape>
</scene>"""


def test_sdfgrid_renders_like_mitsuba(tmp_path):
    (tmp_path / "g.vol").write_bytes(vol.encode(_grid(12)[..., None]))
    xml = tmp_path / "scene.xml"
    xml.write_text(SCENE)
    scene = tracer.load_scene(str(xml))
    ours = np.asarray(tracer.render(scene, spp=128, seed=0))
    mi.set_variant("scalar_rgb")
    theirs = np.array(mi.render(mi.load_file(str(xml)), spp=2048, seed=3))
    assert np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours.mean((0, 1)), theirs.mean((0, 1)), rtol=0.02)
    block = lambda img: img.reshape(8, 3, 8, 4, -1).mean((1, 3))
    np.testing.assert_allclose(block(ours), block(theirs), rtol=0.1, atol=0.01)
    # the ball is in the picture: without it the blocks at the center differ by far more
    assert abs(theirs[12, 16].mean() - 0.2 * 0.6) > 0.02


HEAD = '<scene version="3.0.0"><sensor type="perspective"/>'  # line 1
BAD = [
    (np.zeros((4, 4, 4, 3), np.float32), "", "has 3 channels, expected 1"),
    (np.full((1, 4, 4, 1), -1.0, np.float32), "", "needs at least 2 each way"),
    (np.ones((4, 4, 4, 1), np.float32), "", "never change sign: it has no surface"),
    (_grid(6)[..., None], '<string name="normals" value="flat"/>', "normals 'flat': expected 'analytic' or 'smooth'"),
    (_grid(6)[..., None], '<emitter type="area"/>', "an 'sdfgrid' cannot carry an area emitter"),
]


@pytest.mark.parametrize("values, extra, message", BAD)
def test_bad_sdfgrids_are_refused_in_one_line(tmp_path, values, extra, message):
    (tmp_path / "g.vol").write_bytes(vol.encode(values))
    xml = tmp_path / "scene.xml"
    xml.write_text(f'{HEAD}\n<shape type="sdfgrid"><string name="filename" value="g.vol"/>{extra}</shape>\n</scene>')
    with pytest.raises(SceneError) as err:
        tracer.load_scene(str(xml))
    assert "\n" not in str(err.value) and message in str(err.value) and "scene.xml:2" in str(err.value)


def test_missing_grid_is_refused_by_name(tmp_path):
    xml = tmp_path / "scene.xml"
    xml.write_text(f'{HEAD}\n<shape type="sdfgrid"><string name="filename" value="nope.vol"/></shape>\n</scene>')
    with pytest.raises(SceneError, match=r"scene.xml:2: .*nope.vol"):
        tracer.load_scene(str(xml))
