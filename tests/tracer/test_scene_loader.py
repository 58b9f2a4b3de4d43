"""load_scene end to end: what it builds, and the one-line errors it gives."""
import numpy as np
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
    ('<shape type="cylinder"/>', "cylinder"),
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


SENSOR = """<scene version="3.0.0">
  <sensor type="{sensor}">
    {params}
    <transform name="to_world">{transform}</transform>
    <film type="hdrfilm"><integer name="width" value="{width}"/><integer name="height" value="20"/>
      {film}<rfilter type="{rfilter}">{rparams}</rfilter></film>
  </sensor>
  <emitter type="constant"/>
  <shape type="rectangle"/>
</scene>"""


def _sensor_scene(tmp_path, sensor="perspective", params="", transform='<lookat origin="0, 0, 3" target="0, 0, 0"/>',
                  width=30, film="", rfilter="gaussian", rparams=""):
    path = tmp_path / "scene.xml"
    path.write_text(SENSOR.format(sensor=sensor, params=params, transform=transform, width=width, film=film,
                                  rfilter=rfilter, rparams=rparams))
    return path


def test_crop_window_orthographic_and_filters(tmp_path):
    crop = ('<integer name="crop_offset_x" value="4"/><integer name="crop_offset_y" value="3"/>'
            '<integer name="crop_width" value="10"/><integer name="crop_height" value="12"/>')
    scene = tracer.load_scene(_sensor_scene(tmp_path, film=crop, rfilter="lanczos",
                                            rparams='<integer name="lobes" value="2"/>'))
    f = scene.film
    assert (f.width, f.height, f.crop_x, f.crop_y, f.crop_width, f.crop_height) == (30, 20, 4, 3, 10, 12)
    assert f.radius == 2.0 and f.margin == 2
    # A resolution override is a new film, window included (Mitsuba's Film::set_size).
    f = tracer.load_scene(_sensor_scene(tmp_path, film=crop), resolution=(16, 8)).film
    assert (f.width, f.height, f.crop_x, f.crop_y, f.crop_width, f.crop_height) == (16, 8, 0, 0, 16, 8)
    ortho = tracer.load_scene(_sensor_scene(tmp_path, sensor="orthographic", rfilter="mitchell",
                                            params='<float name="near_clip" value="0.5"/>',
                                            rparams='<float name="B" value="0.2"/><float name="C" value="0.4"/>'))
    assert ortho.film.rfilter.b == pytest.approx(0.2) and float(ortho.camera.near_clip) == 0.5
    image = tracer.render(ortho, spp=4)
    assert image.shape == (20, 30, 3) and np.all(np.isfinite(image)) and image.mean() > 0


NAN = '<matrix value="1 0 0 0 0 1 0 0 0 0 1 nan 0 0 0 1"/>'


@pytest.mark.parametrize("kwargs,needle", [
    # Filters: a radius past 8 pixels would unroll a huge splat loop (gaussian stddev 1000 hung).
    (dict(rparams='<float name="stddev" value="1000"/>'), "'stddev' must be a finite number in [0.00025, 2]"),
    (dict(rparams='<float name="stddev" value="0"/>'), "'stddev'"),
    (dict(rparams='<float name="stddev" value="nan"/>'), "'stddev'"),
    (dict(rparams='<float name="stddev" value="1e38"/>'), "'stddev'"),
    (dict(rfilter="tent", rparams='<float name="radius" value="0"/>'), "'radius'"),
    (dict(rfilter="tent", rparams='<float name="radius" value="300"/>'), "'radius'"),
    (dict(rfilter="lanczos", rparams='<integer name="lobes" value="0"/>'), "'lobes'"),
    (dict(rfilter="mitchell", rparams='<float name="B" value="nan"/>'), "'B'"),
    (dict(rfilter="box", rparams='<float name="radius" value="2"/>'), "'radius'"),
    (dict(rfilter="sinc"), "unsupported rfilter 'sinc'"),
    # Films.
    (dict(width=100000), "film width must be between 1 and 16384 pixels, got 100000"),
    (dict(width=2147483647), "film width must be between 1 and 16384"),
    (dict(width=100000000000000000000), "film width must be between 1 and 16384"),
    (dict(width=0), "film width"),
    (dict(film='<integer name="crop_offset_x" value="25"/><integer name="crop_width" value="10"/>'), "crop window"),
    (dict(film='<integer name="crop_offset_y" value="-1"/>'), "crop window"),
    (dict(film='<integer name="crop_offset_x" value="3"/>'), "crop window"),  # crop_width is the film's
    # Cameras.
    (dict(transform=NAN), "to_world is not finite"),
    (dict(transform='<scale value="0"/>'), "to_world is singular"),
    (dict(sensor="orthographic", transform='<scale x="1" y="1" z="0"/>'), "to_world is singular"),
    (dict(params='<float name="fov" value="180"/>'), "'fov' must be in degrees, strictly between 0 and 180"),
    (dict(params='<float name="fov" value="0"/>'), "'fov'"),
    (dict(params='<float name="fov" value="nan"/>'), "'fov'"),
    (dict(params='<float name="near_clip" value="nan"/>'), "'near_clip' must be a finite number > 0"),
    (dict(params='<float name="near_clip" value="0"/>'), "'near_clip'"),
    (dict(params='<float name="far_clip" value="nan"/>'), "'far_clip'"),
    (dict(params='<float name="near_clip" value="5"/><float name="far_clip" value="1"/>'), "'far_clip'"),
    (dict(sensor="orthographic", params='<float name="far_clip" value="inf"/>'), "'far_clip'"),
    (dict(sensor="thinlens", params='<float name="aperture_radius" value="nan"/><float name="focus_distance" '
                                    'value="2"/>'), "'aperture_radius' must be a finite number >= 0"),
    (dict(sensor="thinlens", params='<float name="aperture_radius" value="-1"/><float name="focus_distance" '
                                    'value="2"/>'), "'aperture_radius'"),
    (dict(sensor="thinlens", params='<float name="focus_distance" value="nan"/>'), "'focus_distance'"),
    (dict(sensor="orthographic", params='<float name="fov" value="40"/>'), "'fov'"),
])
def test_hostile_films_and_cameras_are_one_line_scene_errors(tmp_path, kwargs, needle):
    path = _sensor_scene(tmp_path, **kwargs)
    with pytest.raises(SceneError) as info:
        tracer.load_scene(path)
    message = str(info.value)
    assert needle in message and "\n" not in message and "scene.xml:" in message, message


@pytest.mark.parametrize("resolution", [(100000, 100000), (1e20, 10), (10.5, 10), (0, 10)])
def test_a_resolution_override_has_the_film_limits(tmp_path, resolution):
    with pytest.raises(SceneError, match="resolution override width must be between 1 and 16384"):
        tracer.load_scene(_sensor_scene(tmp_path), resolution=resolution)
