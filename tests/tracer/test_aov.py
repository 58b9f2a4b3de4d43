"""Mitsuba's ``aov`` integrator: every AOV type against Mitsuba 3, channel by channel, and the
AOV names Mitsuba refuses."""
import numpy as np
import pytest

import tracer
from tests.helpers.aov_scenes import EVERY_AOV, aov_scene
from tracer import SceneError
from tracer.io.aovs import parse_aovs
from tracer.shared import aov_channel_names
from tracer.io.scene_info import describe


def _mitsuba(path, spp):
    import mitsuba as mi
    mi.set_variant("scalar_rgb")
    scene = mi.load_file(path)
    return np.array(mi.render(scene, spp=spp)), scene.integrator().aov_names()


def _agree(ours, ref, names):
    """Each channel's mean difference within 4 standard errors of the per-pixel differences
    (plus 1e-4 for channels equal in every sample, such as a normal on a flat shape)."""
    for i, name in enumerate(names):
        diff = (ours[..., i] - ref[..., i]).ravel().astype(np.float64)
        se = diff.std() / np.sqrt(diff.size)
        assert abs(diff.mean()) <= 4 * se + 1e-4 * (1 + np.abs(ref[..., i]).mean()), (name, diff.mean(), se)


def test_every_aov_type_agrees_with_mitsuba(tmp_path):
    path = aov_scene(tmp_path / "aov.xml", spp=32)
    scene = tracer.load_scene(path)
    names = ("R", "G", "B", *aov_channel_names(scene.settings.aovs))
    ours = tracer.render(scene, spp=32)
    ref, mitsuba_names = _mitsuba(path, 32)
    assert ours.shape == ref.shape == (12, 16, 3 + 26)
    # Mitsuba names the RGB image.R/G/B/A; the AOVs as we do.
    assert list(names[3:]) == [n for n in mitsuba_names if not n.startswith("image.")]
    _agree(ours, ref, names)
    # Nothing is trivially zero: the channels carry the scene (depth ~5, the plastic's albedo).
    assert ours[..., names.index("dd.y.T")].mean() > 3
    assert ours[..., names.index("a.R")].max() > 0.7


SHAPES = """<scene version="3.0.0">
<integrator type="aov"><string name="aovs" value="s:shape_index,p:prim_index"/>
<integrator type="path" name="image"/></integrator>
<sensor type="perspective"><film type="hdrfilm"><integer name="width" value="40"/><integer name="height" value="8"/>
<rfilter type="box"/></film><transform name="to_world"><lookat origin="0,0,12" target="0,0,0" up="0,1,0"/></transform>
</sensor>
<shape type="cube"><transform name="to_world"><rotate y="1" angle="30"/><scale value="0.7"/><translate x="-4"/></transform>
<bsdf type="diffuse"><rgb name="reflectance" value="0.5"/></bsdf></shape>
<shape type="sphere"><point name="center" x="-2" y="0" z="0"/><float name="radius" value="0.8"/></shape>
<shape type="obj"><string name="filename" value="quad.obj"/><transform name="to_world"><scale value="0.8"/></transform>
<bsdf type="diffuse"><rgb name="reflectance" value="0.5"/></bsdf></shape>
<shape type="rectangle"><transform name="to_world"><scale value="0.8"/><translate x="2"/></transform></shape>
<shape type="disk"><transform name="to_world"><scale value="0.8"/><translate x="4"/></transform></shape>
</scene>"""
QUAD = "v -1 -1 0\nv 1 -1 0\nv 1 1 0\nv -1 1 0\nvt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\nf 1/1 2/2 3/3\nf 1/1 3/3 4/4\n"


def test_shape_and_prim_index_count_as_mitsubas_merged_scene(tmp_path):
    """Mitsuba keeps the sphere and the disk in file order (1, 2), then the meshes it merges: the
    rectangle with its own default BSDF (3), the cube and the quad, whose BSDFs are written alike
    (4, the quad's triangles numbered after the cube's 12)."""
    (tmp_path / "quad.obj").write_text(QUAD)
    path = tmp_path / "shapes.xml"
    path.write_text(SHAPES)
    ours = np.asarray(tracer.render(tracer.load_scene(path), spp=16))[..., 3:]
    ref, _ = _mitsuba(str(path), 16)
    ref = ref[..., 3:]
    index, theirs = ours[..., 0], ref[..., 0]
    whole = (np.abs(index - np.round(index)) < 1e-4) & (np.abs(theirs - np.round(theirs)) < 1e-4)  # no edge
    np.testing.assert_array_equal(np.round(index[whole]), np.round(theirs[whole]))
    assert set(np.round(index[whole & (index > 0)]).astype(int).tolist()) == {1, 2, 3, 4}
    _agree(ours[..., 1:], ref[..., 1:], ("p.I",))  # (pixels on a diagonal mix two triangles)
    assert ours[..., 1].max() > 12  # a quad triangle after the cube's


def test_no_nested_integrator_renders_black_rgb_and_the_aovs(tmp_path):
    path = aov_scene(tmp_path / "bare.xml", aovs="n:geo_normal", inner="", spp=4)
    image = tracer.render(tracer.load_scene(path), spp=4)
    assert image.shape == (12, 16, 6)
    assert np.all(image[..., :3] == 0) and np.abs(image[..., 3:]).max() > 0.5


def test_the_farm_reads_the_channels_without_building_the_scene(tmp_path):
    path = aov_scene(tmp_path / "aov.xml")
    assert describe(path).aovs == parse_aovs(EVERY_AOV, "x")
    assert aov_channel_names(describe(path).aovs)[:4] == ("dd.y.T", "nn.X", "nn.Y", "nn.Z")


def test_the_farm_reads_a_moment_integrators_channels(tmp_path):
    """``moment``: its channels as the farm stores and exports them, named as Mitsuba names them;
    over an ``aov`` it is refused, by the loader and the farm alike."""
    path = aov_scene(tmp_path / "moment.xml", aovs="dd:depth", inner='<integrator type="path"/>')
    text = (tmp_path / "moment.xml").read_text()
    moment = text.replace('<integrator type="aov"><string name="aovs" value="dd:depth"/><integrator type="path"/>'
                          '</integrator>', '<integrator type="moment"><integrator type="path"/></integrator>')
    assert moment != text
    (tmp_path / "moment.xml").write_text(moment)
    assert aov_channel_names(describe(path).aovs) == ("_arg_0.X", "_arg_0.Y", "_arg_0.Z", "m2__arg_0.X", "m2__arg_0.Y",
                                                  "m2__arg_0.Z")
    (tmp_path / "moment.xml").write_text(text.replace('<integrator type="aov">', '<integrator type="moment">'
                                                      '<integrator type="aov">').replace('</integrator>\n<sensor',
                                                                                          '</integrator></integrator>\n<sensor'))
    for load in (tracer.load_scene, describe):
        with pytest.raises(SceneError, match="a 'moment' integrator over an 'aov' integrator is not supported"):
            load(path)


@pytest.mark.parametrize("aovs, message", [
    ("nn:normals", "unsupported AOV type 'normals' in 'nn:normals'"),
    ("nn", "AOV 'nn' is not a name:type pair"),
    ("a:b:c", "AOV 'a:b:c' is not a name:type pair"),
    (":depth", "AOV ':depth' is not a name:type pair"),
])
def test_an_unsupported_aov_is_one_line_naming_it(tmp_path, aovs, message):
    path = aov_scene(tmp_path / "bad.xml", aovs=aovs)
    for load in (tracer.load_scene, describe):
        with pytest.raises(SceneError) as e:
            load(path)
        assert message in str(e.value) and "bad.xml:2" in str(e.value) and "\n" not in str(e.value)


def test_two_nested_integrators_are_refused(tmp_path):
    path = aov_scene(tmp_path / "two.xml", inner='<integrator type="path"/><integrator type="direct"/>')
    with pytest.raises(SceneError, match="at most one nested integrator"):
        tracer.load_scene(path)


def test_a_jobs_aovs_and_filter_render_as_the_scene_written_with_them(tmp_path):
    written = aov_scene(tmp_path / "w.xml", aovs="a:albedo,n:sh_normal", spp=4)
    text = open(written).read().replace("</film>", '<rfilter type="box"/></film>')
    open(written, "w").write(text)
    plain = tmp_path / "plain.xml"
    plain.write_text(text.replace('<rfilter type="box"/>', "").replace(
        '<integrator type="aov"><string name="aovs" value="a:albedo,n:sh_normal"/><integrator type="path" '
        'name="image"/></integrator>', '<integrator type="path"/>'))
    assert "aov" not in plain.read_text() and describe(str(plain)).rfilter == "gaussian"
    overridden = tracer.load_scene(plain, aovs="a:albedo,n:sh_normal", rfilter="box")
    assert overridden.settings.aovs == (("a", "albedo"), ("n", "sh_normal"))
    np.testing.assert_array_equal(tracer.render(overridden, spp=4), tracer.render(tracer.load_scene(written), spp=4))


def test_a_jobs_aovs_follow_the_scenes_own_and_take_no_name_twice(tmp_path):
    path = aov_scene(tmp_path / "own.xml", aovs="d:depth")
    info = describe(path, aovs="a:albedo", rfilter="box")
    assert info.aovs == (("d", "depth"), ("a", "albedo")) and info.rfilter == "box"
    bare = tmp_path / "bare.xml"  # no integrator: Mitsuba's path inside the aov integrator
    bare.write_text(open(path).read().replace(open(path).read().splitlines()[1], ""))
    assert describe(str(bare), aovs="n:sh_normal").aovs == (("n", "sh_normal"),)
    for aovs, message in [("d:albedo", r"AOV name 'd' is taken by the scene's aov integrator \(.*own.xml:2\)"),
                          ("x:depth,x:uv", "AOV name 'x' is given twice"), ("x:normal", "unsupported AOV type")]:
        with pytest.raises(SceneError, match=message) as e:
            describe(path, aovs=aovs)
        assert str(e.value).startswith("the job's aovs: ")
    with pytest.raises(SceneError, match="the job's rfilter: unknown reconstruction filter 'boxx'"):
        describe(path, rfilter="boxx")
