"""load_scene end to end: what it builds, and the one-line errors it gives."""
import pytest

import tracer
from tracer import SceneError

SCENE = """<scene version="3.0.0">
  <integrator type="path"><integer name="max_depth" value="{depth}"/></integrator>
  <sensor type="perspective">
    <float name="fov" value="40"/>
    <transform name="to_world"><lookat origin="0, 0, 3" target="0, 0, 0" up="0, 1, 0"/></transform>
    <sampler type="{sampler}"><integer name="sample_count" value="7"/></sampler>
    <film type="hdrfilm"><integer name="width" value="20"/><integer name="height" value="10"/></film>
  </sensor>
  <emitter type="point"><point name="position" value="0, 0, 2"/><rgb name="intensity" value="5"/></emitter>
  {shapes}
</scene>"""
QUAD = '<shape type="rectangle">{bsdf}</shape>'


def _write(tmp_path, depth=8, sampler="independent", shapes=QUAD.format(bsdf='<bsdf type="diffuse"/>')):
    path = tmp_path / "scene.xml"
    path.write_text(SCENE.format(depth=depth, sampler=sampler, shapes=shapes))
    return path


def test_builds_the_scene_it_describes(tmp_path):
    scene = tracer.load_scene(_write(tmp_path, sampler="stratified"))
    assert (scene.film.width, scene.film.height) == (20, 10)
    assert scene.settings.spp == 7 and scene.settings.max_depth == 8
    assert scene.geometry.n_triangles == 2
    resized = tracer.load_scene(_write(tmp_path), resolution=(8, 6))
    assert (resized.film.width, resized.film.height) == (8, 6)


def test_one_sided_diffuse_is_black_from_behind_and_twosided_is_not(tmp_path):
    """Mitsuba's one-sided BSDFs reflect nothing on their back; twosided mirrors the front."""
    behind = SCENE.replace("0, 0, 3", "0, 0, -3").replace("0, 0, 2", "0, 0, -2")
    one = tmp_path / "one.xml"
    one.write_text(behind.format(depth=8, sampler="independent", shapes=QUAD.format(bsdf='<bsdf type="diffuse"/>')))
    two = tmp_path / "two.xml"
    two.write_text(behind.format(depth=8, sampler="independent",
                                 shapes=QUAD.format(bsdf='<bsdf type="twosided"><bsdf type="diffuse"/></bsdf>')))
    assert tracer.render(tracer.load_scene(one), spp=4).max() == 0.0
    assert tracer.render(tracer.load_scene(two), spp=4).mean() > 0.01


@pytest.mark.parametrize("shapes,needle", [
    (QUAD.format(bsdf='<bsdf type="hair"/>'), "hair"),
    (QUAD.format(bsdf='<bsdf type="diffuse"><float name="shininess" value="2"/></bsdf>'), "shininess"),
    ('<shape type="obj"><string name="filename" value="missing.obj"/></shape>', "missing.obj"),
    ('<shape type="bsplinecurve"/>', "bsplinecurve"),
    ('<shape type="rectangle"><emitter type="point"/></shape>', "point"),
])
def test_unsupported_or_missing_is_a_scene_error_with_file_and_line(tmp_path, shapes, needle):
    path = _write(tmp_path, shapes=shapes)
    with pytest.raises(SceneError) as info:
        tracer.load_scene(path)
    message = str(info.value)
    assert needle in message and "\n" not in message
    assert "scene.xml:" in message


def test_bad_settings_and_malformed_xml(tmp_path):
    with pytest.raises(SceneError, match="max_depth"):
        tracer.load_scene(_write(tmp_path, depth=-5))
    bad = tmp_path / "bad.xml"
    bad.write_text('<scene version="3.0.0"><shape type="cube">\n</scene>')
    with pytest.raises(SceneError, match="bad.xml:2"):
        tracer.load_scene(bad)
