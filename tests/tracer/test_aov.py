"""Mitsuba's ``aov`` integrator: every AOV type against Mitsuba 3, channel by channel, and the
AOV names Mitsuba refuses."""
import numpy as np
import pytest

import tracer
from tests.helpers.aov_scenes import EVERY_AOV, aov_scene
from tracer import SceneError
from tracer.io.aovs import channel_names, parse_aovs
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
    names = ("R", "G", "B", *channel_names(scene.settings.aovs))
    ours = tracer.render(scene, spp=32)
    ref, mitsuba_names = _mitsuba(path, 32)
    assert ours.shape == ref.shape == (12, 16, 3 + 26)
    # Mitsuba names the RGB image.R/G/B/A; the AOVs as we do.
    assert list(names[3:]) == [n for n in mitsuba_names if not n.startswith("image.")]
    _agree(ours, ref, names)
    # Nothing is trivially zero: the channels carry the scene (depth ~5, the plastic's albedo).
    assert ours[..., names.index("dd.y.T")].mean() > 3
    assert ours[..., names.index("a.R")].max() > 0.7


def test_shape_index_counts_the_worlds_shapes_in_file_order(tmp_path):
    """prim_index as Mitsuba's; shape_index in the file's order (Mitsuba 3.9.1 numbers them in
    its loader's own object order, which is not the file's: it is not compared)."""
    path = aov_scene(tmp_path / "shapes.xml", aovs="p:prim_index,s:shape_index", second="sphere", spp=8)
    ours = tracer.render(tracer.load_scene(path), spp=8)
    ref, _ = _mitsuba(path, 8)
    _agree(ours[..., :4], ref[..., :4], ("R", "G", "B", "p.I"))
    index = ours[..., 4]
    assert index[6, 7] == pytest.approx(1.0) and index[0, 0] == pytest.approx(3.0)  # the first sphere, the back wall
    assert index.min() >= 0.0 and index.max() <= 3.0 + 1e-5  # (the light is out of view)


def test_no_nested_integrator_renders_black_rgb_and_the_aovs(tmp_path):
    path = aov_scene(tmp_path / "bare.xml", aovs="n:geo_normal", inner="", spp=4)
    image = tracer.render(tracer.load_scene(path), spp=4)
    assert image.shape == (12, 16, 6)
    assert np.all(image[..., :3] == 0) and np.abs(image[..., 3:]).max() > 0.5


def test_the_farm_reads_the_channels_without_building_the_scene(tmp_path):
    path = aov_scene(tmp_path / "aov.xml")
    assert describe(path).aovs == parse_aovs(EVERY_AOV, "x")
    assert channel_names(describe(path).aovs)[:4] == ("dd.y.T", "nn.X", "nn.Y", "nn.Z")


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
