"""Area lights with a textured ``radiance`` against Mitsuba 3 (scalar_rgb).

Ours samples the point as without a texture and reads the texture at its uv; Mitsuba samples
uv by the texture and maps it onto the shape. So: the radiance of each of our samples must be
Mitsuba's ``eval`` at the same point (uv conventions per shape), the two light-sampling
estimators must agree in expectation, and so must whole images.
"""
import numpy as np
import pytest

from tests.helpers import emitter_cases as C
from tests.helpers import image_metrics as im
from tests.helpers.mitsuba_render import assert_matches_mitsuba

mi = pytest.importorskip("mitsuba")

N = 96
# A smooth texture (bilinear, so a uv difference of rounding size changes little), tiled twice.
TEXELS = (0.2 + np.random.default_rng(3).random((6, 8, 3))).astype(np.float32)
# A quad with uvs in [0, 1]^2 (the two triangles of a unit square, bent out of plane a little).
OBJ = """v -1 -1 0\nv 1 -1 0.2\nv 1 1 0\nv -1 1 -0.1\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1
f 1/1 2/2 3/3\nf 1/1 3/3 4/4\n"""
SHAPES = {
    "rectangle": '<shape type="rectangle">{em}<transform name="to_world"><rotate x="1" angle="20"/>'
                 '<translate z="-2"/></transform></shape>',
    "disk": '<shape type="disk">{em}<transform name="to_world"><rotate y="1" angle="-30"/><translate z="-2"/></transform>'
            '</shape>',
    "sphere": '<shape type="sphere"><point name="center" x="0.2" y="0" z="-2.5"/><float name="radius" value="0.8"/>'
              '{em}<transform name="to_world"><rotate x="1" angle="40"/></transform></shape>',
    "cylinder": '<shape type="cylinder"><point name="p0" x="0" y="-1" z="-2"/><point name="p1" x="0.3" y="1" z="-2"/>'
                '<float name="radius" value="0.5"/>{em}</shape>',
    "mesh": '<shape type="obj"><string name="filename" value="quad.obj"/>{em}'
            '<transform name="to_world"><translate z="-2"/></transform></shape>',
}
SENSOR = '<sensor type="perspective"><film type="hdrfilm"><integer name="width" value="4"/></film></sensor>'
EMITTER = ('<emitter type="area"><texture type="bitmap" name="radiance"><string name="filename" value="tex.exr"/>'
           '<transform name="to_uv"><scale x="2" y="1"/></transform></texture></emitter>')


@pytest.fixture(autouse=True)
def _scalar_rgb():
    mi.set_variant("scalar_rgb")


def _scene_file(tmp_path, shape):
    im.write_exr(tmp_path / "tex.exr", TEXELS)
    (tmp_path / "quad.obj").write_text(OBJ)
    path = tmp_path / f"{shape}.xml"
    path.write_text(f'<scene version="3.0.0">{SENSOR}{SHAPES[shape].format(em=EMITTER)}</scene>')
    return path


def _ours(path, refs, u):
    import tracer

    scene = tracer.load_scene(path)
    ds, w = C.sample_direction(scene.emitters, scene.textures, refs, np.zeros(refs.shape[1], np.float32), u)
    return ds, np.asarray(w)


def _refs():
    rng = np.random.default_rng(7)
    return (rng.uniform(-0.6, 0.6, (3, N)) + np.array([[0.0], [0.0], [1.0]])).astype(np.float32)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_sampled_radiance_is_mitsubas_eval_there(shape, tmp_path):
    path = _scene_file(tmp_path, shape)
    refs = _refs()
    u = np.random.default_rng(5).random((2, N), np.float32)
    ds, w = _ours(path, refs, u)
    pdf = np.asarray(ds.pdf)
    valid = pdf > 0
    assert valid.mean() > 0.3
    scene = mi.load_file(str(path))
    for i in np.flatnonzero(valid):
        ray = mi.Ray3f(mi.Point3f(*refs[:, i].tolist()), mi.Vector3f(*np.asarray(ds.d)[:, i].tolist()))
        si = scene.ray_intersect(ray)
        assert si.is_valid()
        np.testing.assert_allclose(float(si.t), float(np.asarray(ds.dist)[i]), rtol=1e-4)
        theirs = np.array(si.emitter(scene).eval(si), np.float64)
        np.testing.assert_allclose(w[:, i] * pdf[i], theirs, rtol=2e-3, atol=1e-5)


@pytest.mark.parametrize("shape", ["rectangle", "mesh"])
def test_light_sampling_agrees_with_mitsubas_in_expectation(shape, tmp_path):
    """The irradiance at a point, estimated by our sampling and by Mitsuba's (which samples the
    texture): equal within 4 standard errors."""
    path = _scene_file(tmp_path, shape)
    n = 4096
    refs = np.tile(np.array([[0.1], [-0.2], [0.5]], np.float32), (1, n))
    u = np.random.default_rng(9).random((2, n), np.float32)
    ds, w = _ours(path, refs, u)
    ours = w * -np.asarray(ds.d)[2]  # times cos at a receiver facing -z
    scene = mi.load_file(str(path))  # kept: the emitter refers to the scene's shape
    emitter = scene.emitters()[0]
    it = mi.Interaction3f()
    it.p = mi.Point3f(*refs[:, 0].tolist())
    theirs = []
    for v in np.random.default_rng(10).random((n, 2)):
        mds, mw = emitter.sample_direction(it, mi.Point2f(*v.tolist()))
        theirs.append(np.array(mw, np.float64) * -float(mds.d[2]))
    theirs = np.array(theirs).T
    error = np.sqrt(ours.var(axis=1) / n + theirs.var(axis=1) / n)
    assert np.all(np.abs(ours.mean(axis=1) - theirs.mean(axis=1)) < 4 * error), (ours.mean(axis=1), theirs.mean(axis=1), error)
    assert np.all(ours.mean(axis=1) > 0.05)


SCENE = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="3"/></integrator>
    <sensor type="perspective">
        <float name="fov" value="55"/>
        <transform name="to_world"><lookat origin="0, 1.2, 4" target="0, 0.3, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="24"/>
            <rfilter type="box"/></film>
    </sensor>
    <shape type="rectangle">
        <transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.6"/></bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale x="1" y="0.6"/><rotate y="1" angle="30"/><translate x="-0.8" y="0.8" z="-1"/></transform>
        <emitter type="area"><texture type="bitmap" name="radiance"><string name="filename" value="tex.exr"/></texture>
        </emitter>
    </shape>
    <shape type="obj"><string name="filename" value="quad.obj"/>
        <transform name="to_world"><scale value="0.5"/><rotate y="1" angle="-40"/><translate x="1" y="0.7" z="-0.5"/></transform>
        <emitter type="area"><texture type="checkerboard" name="radiance"><rgb name="color0" value="0.3, 0.6, 1"/>
            <rgb name="color1" value="1, 0.8, 0.5"/><transform name="to_uv"><scale value="3"/></transform></texture>
        </emitter>
    </shape>
    <shape type="sphere"><point name="center" x="0" y="0.4" z="0.3"/><float name="radius" value="0.4"/>
        <bsdf type="roughplastic"><rgb name="diffuse_reflectance" value="0.3, 0.5, 0.7"/></bsdf></shape>
</scene>"""


def test_render_matches_mitsuba(tmp_path):
    im.write_exr(tmp_path / "tex.exr", TEXELS)
    (tmp_path / "quad.obj").write_text(OBJ)
    path = tmp_path / "scene.xml"
    path.write_text(SCENE)
    assert_matches_mitsuba(path, spp=64, reference_spp=4096, seeds=2)
