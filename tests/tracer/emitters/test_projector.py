"""The ``projector`` emitter against Mitsuba 3's: samples point by point (constant and bitmap
irradiance, every fov axis, a scaled to_world), and a small scene rendered by both."""
import numpy as np
import pytest

from tests.helpers import emitter_cases as C
from tests.helpers import image_metrics as im
from tests.helpers.mitsuba_render import assert_matches_mitsuba
from tracer.errors import SceneError
from tracer.kinds import BitmapFilter, WrapMode
from tracer.textures import TextureTableBuilder

mi = pytest.importorskip("mitsuba")

N = 256
IMAGE = np.random.default_rng(3).uniform(0.1, 1.0, (4, 6, 3)).astype(np.float32)  # 6 wide, 4 high
LOOKAT = '<lookat origin="0.3, 0.2, 3" target="0, 0, 0" up="0, 1, 0"/>'


@pytest.fixture(autouse=True)
def _scalar_rgb():
    mi.set_variant("scalar_rgb")


def _xml(irradiance, extra="", transform=LOOKAT):
    return (f'<emitter type="projector">{irradiance}{extra}'
            f'<transform name="to_world">{transform}</transform></emitter>')


def _mi_samples(emitter, refs):
    out = {k: [] for k in ("p", "d", "pdf", "w")}
    for i in range(refs.shape[1]):
        it = mi.Interaction3f()
        it.p = mi.Point3f(*[float(x) for x in refs[:, i]])
        ds, w = emitter.sample_direction(it, mi.Point2f(0.5, 0.5))
        for key, value in (("p", list(ds.p)), ("d", list(ds.d)), ("pdf", ds.pdf), ("w", list(w))):
            out[key].append(value)
    return {k: np.array(v, np.float64).T for k, v in out.items()}


CASES = {
    "constant": ('<rgb name="irradiance" value="2, 3, 4"/>', '<float name="fov" value="40"/>', {"fov": 40.0},
                 {"type": "rgb", "value": [2, 3, 4]}),
    "bitmap": (None, '<float name="fov" value="35"/><float name="scale" value="2.5"/>', {"fov": 35.0, "scale": 2.5},
               "bitmap"),
    "bitmap_fov_y": (None, '<float name="fov" value="30"/><string name="fov_axis" value="y"/>',
                     {"fov": 30.0, "fov_axis": "y"}, "bitmap"),
    "bitmap_focal_length": (None, '<string name="focal_length" value="35mm"/>', {"focal_length": "35mm"}, "bitmap"),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("scaled", [False, True])
def test_samples_match_mitsuba(name, scaled, tmp_path):
    irradiance, extra, props, mi_irradiance = CASES[name]
    path = str(tmp_path / "projected.exr")
    mi.Bitmap(IMAGE).write(path)
    if irradiance is None:
        irradiance = f'<texture type="bitmap" name="irradiance"><string name="filename" value="{path}"/></texture>'
        mi_irradiance = {"type": "bitmap", "filename": path, "raw": True}
    transform = LOOKAT + ('<scale value="1.5"/>' if scaled else "")
    to_world = mi.ScalarTransform4f().look_at(origin=[0.3, 0.2, 3], target=[0, 0, 0], up=[0, 1, 0])
    if scaled:
        to_world = mi.ScalarTransform4f().scale(1.5) @ to_world  # the XML applies it after the lookat
    textures = TextureTableBuilder()
    add = lambda child: textures.add_bitmap(IMAGE, filter=BitmapFilter.BILINEAR, wrap=WrapMode.REPEAT)
    ours = C.table(lambda b: b.add(C.node(_xml(irradiance, extra, transform)), add, textures.resolution))
    scene = mi.load_dict({"type": "scene", "em": {"type": "projector", "irradiance": mi_irradiance,
                                                   "to_world": to_world, **props}})
    rng = np.random.default_rng(4)
    refs = rng.uniform(-1.5, 1.5, (3, N)).astype(np.float32)
    refs[:, : N // 8] *= -4  # some behind the projector
    ds, w = C.sample_direction(ours, textures.build(), refs, np.zeros(N, np.float32), np.full((2, N), 0.5, np.float32))
    ref = _mi_samples(scene.emitters()[0], refs)
    w, pdf = np.asarray(w), np.asarray(ds.pdf)
    np.testing.assert_allclose(w, ref["w"], rtol=2e-4, atol=1e-6)
    np.testing.assert_array_equal(pdf, ref["pdf"])
    np.testing.assert_allclose(np.asarray(ds.d), ref["d"], atol=2e-6)
    np.testing.assert_allclose(np.asarray(ds.p), ref["p"], atol=1e-6)
    assert np.all(np.asarray(ds.is_delta))
    assert 0.1 < np.mean(pdf > 0) < 0.9  # both inside and outside the projected frustum


def test_bad_parameters_are_refused():
    with pytest.raises(SceneError, match="fov"):
        C.table(lambda b: b.add(C.node(_xml('<float name="fov" value="180"/>')), None))
    with pytest.raises(SceneError, match="either fov or focal_length"):
        C.table(lambda b: b.add(C.node(_xml('<float name="fov" value="30"/><float name="focal_length" value="3"/>')),
                                None))


SCENE = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="2"/></integrator>
    <sensor type="perspective">
        <float name="fov" value="60"/>
        <transform name="to_world"><lookat origin="0, 2.5, 3.5" target="0, 0, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="24"/>
            <rfilter type="box"/></film>
    </sensor>
    <shape type="rectangle">
        <transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.7"/></bsdf>
    </shape>
    <shape type="sphere"><point name="center" x="0.4" y="0.4" z="0"/><float name="radius" value="0.4"/>
        <bsdf type="roughplastic"><rgb name="diffuse_reflectance" value="0.3, 0.5, 0.7"/></bsdf></shape>
    <emitter type="projector">
        <float name="fov" value="50"/><float name="scale" value="3"/>
        <texture type="bitmap" name="irradiance"><string name="filename" value="projected.exr"/></texture>
        <transform name="to_world"><lookat origin="-1, 3, 1" target="0, 0, 0" up="0, 1, 0"/></transform>
    </emitter>
    <emitter type="projector">
        <float name="fov" value="20"/><rgb name="irradiance" value="1, 0.5, 0.2"/>
        <transform name="to_world"><lookat origin="2, 2, -1" target="0.4, 0, 0" up="0, 1, 0"/></transform>
    </emitter>
</scene>"""


def test_render_matches_mitsuba(tmp_path):
    im.write_exr(tmp_path / "projected.exr", IMAGE)
    path = tmp_path / "scene.xml"
    path.write_text(SCENE)
    # (Two delta lights: choosing one per sample is most of the noise, hence the sample counts.)
    assert_matches_mitsuba(path, spp=128, reference_spp=8192, seeds=3)
