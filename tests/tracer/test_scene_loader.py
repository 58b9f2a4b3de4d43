"""load_scene end to end: what it builds, and the one-line errors it gives."""
import math

import numpy as np
import pytest

import tracer
from tracer import SceneError
from tracer.shapes.geometry import RECORD

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
    assert scene.settings.spp == 9 and scene.settings.max_depth == 8  # Mitsuba's stratified takes a square
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


# Every parameter Mitsuba 3 reads for these plugins that does not change our image.
HARMLESS = """<scene version="3.0.0">
  <integrator type="path"><integer name="block_size" value="32"/><float name="timeout" value="10"/>
    <integer name="samples_per_pass" value="4"/></integrator>
  <sensor type="perspective">
    <float name="fov" value="40"/><float name="near_clip" value="0.1"/><float name="far_clip" value="100"/>
    <float name="focus_distance" value="3"/><float name="shutter_open" value="0"/><float name="shutter_close" value="1"/>
    <transform name="to_world"><lookat origin="0, 0, 3" target="0, 0, 0" up="0, 1, 0"/></transform>
    <sampler type="ldsampler"><integer name="sample_count" value="5"/><integer name="seed" value="3"/></sampler>
    <film type="hdrfilm"><integer name="width" value="20"/><integer name="height" value="10"/>
      <string name="pixel_format" value="rgba"/><string name="component_format" value="float32"/>
      <string name="file_format" value="openexr"/><boolean name="banner" value="false"/>
      <boolean name="sample_border" value="true"/><boolean name="compensate" value="false"/></film>
  </sensor>
  <shape type="rectangle"><float name="silhouette_sampling_weight" value="0.5"/>
    <bsdf type="diffuse"><texture type="checkerboard" name="reflectance"/></bsdf></shape>
</scene>"""


@pytest.mark.parametrize("setting, robust", [
    ("", False), ('<boolean name="embree_use_robust_intersections" value="true"/>', True)])
def test_embree_is_robust_where_the_scene_asks_as_in_mitsuba(tmp_path, monkeypatch, setting, robust):
    from tracer.accel import embree
    if not embree.available():
        pytest.skip("embreex is not installed")
    asked, build = [], embree.build
    monkeypatch.setattr(embree, "build", lambda *p, robust: asked.append(robust) or build(*p, robust=robust))
    path = _write(tmp_path)
    path.write_text(path.read_text().replace("<integrator", setting + "<integrator", 1))
    tracer.load_scene(path, accel="embree")
    assert asked == [robust]


def test_the_scenes_own_parameters_are_mitsubas(tmp_path):
    """Mitsuba's <scene> reads three parameters and refuses any other; so does the loader."""
    path = _write(tmp_path)
    text = path.read_text()
    path.write_text(text.replace("<integrator", '<boolean name="allow_thread_reordering" value="false"/>'
                                 '<boolean name="compact_acceleration_structures" value="true"/><integrator', 1))
    assert tracer.load_scene(path).geometry.n_triangles == 2  # taken: they change no image
    path.write_text(text.replace("<integrator", '<float name="shutter_open" value="0.5"/><integrator', 1))
    with pytest.raises(SceneError, match=r"scene\.xml:\d+: scene has unsupported parameter 'shutter_open'"):
        tracer.load_scene(path)


def test_parameters_that_change_nothing_are_taken(tmp_path):
    path = tmp_path / "scene.xml"
    path.write_text(HARMLESS)
    scene = tracer.load_scene(path)
    assert scene.settings.spp == 16  # ldsampler: a power of two, squared


@pytest.mark.parametrize("where, param, needle", [
    ("sensor", '<float name="principal_point_offset_x" value="0.1"/>', "sensor 'perspective' has unsupported "
     "parameter 'principal_point_offset_x'"),
    ("sampler", '<float name="gamma" value="2"/>', "sampler 'ldsampler' has unsupported parameter 'gamma'"),
    ("sensor", '<string name="fov_axis" value="x"/><string name="focal_length" value="35mm"/>', "fov_axis"),
])
def test_parameters_that_change_the_image_and_are_not_implemented_are_refused(tmp_path, where, param, needle):
    anchor = {"sensor": '<float name="fov" value="40"/>', "film": '<integer name="width" value="20"/>',
              "sampler": '<integer name="sample_count" value="5"/>'}[where]
    text = HARMLESS.replace(anchor, anchor + param)
    if "focal_length" in param:
        text = text.replace('<float name="fov" value="40"/>', "")
    path = tmp_path / "scene.xml"
    path.write_text(text)
    with pytest.raises(SceneError, match=r"scene\.xml:\d+: ") as info:
        tracer.load_scene(path)
    assert needle in str(info.value)


@pytest.mark.parametrize("lens", ['<string name="focal_length" value="35mm"/>', '<string name="focal_length" value="85"/>',
                                  "", '<float name="fov" value="30"/><string name="fov_axis" value="Diagonal"/>'])
def test_field_of_view_as_mitsuba_reads_it(tmp_path, lens):
    """A focal length is a full-frame lens on the diagonal; none at all is Mitsuba's 50 mm."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    text = SCENE.format(depth=8, sampler="independent", shapes=QUAD.format(bsdf="")).replace(
        '<float name="fov" value="40"/>', lens)
    path = tmp_path / "scene.xml"
    path.write_text(text)
    ours = float(tracer.load_scene(path).camera.tan_half_fov)
    theirs = mi.traverse(mi.load_string(text).sensors()[0])["x_fov"]
    assert ours == pytest.approx(math.tan(math.radians(float(np.ravel(theirs)[0])) / 2), rel=1e-6)


def test_field_of_view_out_of_range_is_refused(tmp_path):
    path = tmp_path / "scene.xml"
    path.write_text(SCENE.format(depth=8, sampler="independent", shapes=QUAD.format(bsdf="")).replace(
        'value="40"', 'value="180"'))
    with pytest.raises(SceneError, match=r"scene\.xml:3: .*.fov. must be in degrees, strictly between 0 and 180"):
        tracer.load_scene(path)


@pytest.mark.parametrize("kind, flip, v", [("obj", None, 0.75), ("obj", "false", 0.25), ("ply", None, 0.25),
                                            ("ply", "true", 0.75)])
def test_flip_tex_coords_as_mitsuba(tmp_path, kind, flip, v):
    """Mitsuba flips an OBJ's v by default and a PLY's only when asked."""
    if kind == "obj":
        (tmp_path / "m.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0.25\nvt 1 0.25\nvt 0 0.25\nf 1/1 2/2 3/3\n")
    else:
        (tmp_path / "m.ply").write_text("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                                        "property float z\nproperty float u\nproperty float v\nelement face 1\n"
                                        "property list uchar int vertex_indices\nend_header\n0 0 0 0 0.25\n"
                                        "1 0 0 1 0.25\n0 1 0 0 0.25\n3 0 1 2\n")
    option = "" if flip is None else f'<boolean name="flip_tex_coords" value="{flip}"/>'
    shape = f'<shape type="{kind}"><string name="filename" value="m.{kind}"/>{option}</shape>'
    scene = tracer.load_scene(_write(tmp_path, shapes=shape))
    np.testing.assert_allclose(np.asarray(scene.geometry.tri_records)[:, RECORD["uv0"]][:, 1], [v])


def test_spectra_reach_the_tables_converted(tmp_path):
    """A reflectance and an emitter given as the same spectrum get their different conversions."""
    spectrum = '<spectrum name="{}" value="400:0.2, 500:0.8, 600:0.5, 700:0.9"/>'
    text = (SCENE.format(depth=8, sampler="independent",
                         shapes=QUAD.format(bsdf=f'<bsdf type="diffuse">{spectrum.format("reflectance")}</bsdf>'))
            .replace('<rgb name="intensity" value="5"/>', spectrum.format("intensity")))
    path = tmp_path / "scene.xml"
    path.write_text(text)
    scene = tracer.load_scene(path)
    constants = np.asarray(scene.textures.color0).T
    assert any(np.allclose(c, [0.49235284, 0.6945368, 0.5065798], rtol=0, atol=1e-7) for c in constants)
    np.testing.assert_allclose(np.asarray(scene.emitters.radiance)[:, 0], [0.61999595, 0.65696317, 0.45019063],
                               rtol=0, atol=1e-7)


def test_a_mitsuba_0_6_scene_loads(tmp_path):
    path = tmp_path / "old.xml"
    path.write_text("""<scene version="0.6.0">
      <integrator type="path"><integer name="maxDepth" value="4"/></integrator>
      <sensor type="perspective"><float name="fov" value="40"/><string name="fovAxis" value="x"/>
        <transform name="toWorld"><lookat origin="0, 0, 3" target="0, 0, 0" up="0, 1, 0"/></transform>
        <sampler type="ldsampler"><integer name="sampleCount" value="16"/></sampler>
        <film type="hdrfilm"><integer name="width" value="8"/><integer name="height" value="8"/></film></sensor>
      <shape type="rectangle"><bsdf type="diffuse"><rgb name="diffuseReflectance" value="0.3"/></bsdf></shape>
      <emitter type="point"><point name="position" value="0, 0, 2"/></emitter>
    </scene>""")
    scene = tracer.load_scene(path)
    assert scene.settings.max_depth == 4 and scene.settings.spp == 16


def test_plugins_defined_at_the_top_and_referenced(tmp_path):
    """As in Mitsuba's gallery scenes: a sampler and an area emitter defined at the top level and
    used through <ref>; a top-level sampler nothing uses is ignored, as Mitsuba ignores it."""
    path = tmp_path / "scene.xml"
    path.write_text("""<scene version="2.1.0">
      <sampler type="stratified" id="s"><integer name="sample_count" value="16"/></sampler>
      <sampler type="independent" id="unused"/>
      <emitter type="area" id="light"><rgb name="radiance" value="2"/></emitter>
      <sensor type="perspective"><ref id="s"/>
        <film type="hdrfilm"><integer name="width" value="8"/><integer name="height" value="8"/></film></sensor>
      <shape type="rectangle"><ref id="light"/></shape>
    </scene>""")
    scene = tracer.load_scene(path)
    assert scene.settings.spp == 16
    np.testing.assert_array_equal(np.asarray(scene.emitters.radiance)[:, 0], [2, 2, 2])


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
    (dict(width=100000000000000000000), "'width'"),
    (dict(width=0), "film width"),
    (dict(film='<integer name="crop_offset_x" value="25"/><integer name="crop_width" value="10"/>'), "crop window"),
    (dict(film='<integer name="crop_offset_y" value="-1"/>'), "crop window"),
    (dict(film='<integer name="crop_offset_x" value="3"/>'), "crop window"),  # crop_width is the film's
    # Cameras.
    (dict(transform=NAN), "not a finite number"),
    (dict(transform='<scale value="0"/>'), "to_world is singular"),
    (dict(sensor="orthographic", transform='<scale x="1" y="1" z="0"/>'), "to_world is singular"),
    (dict(params='<float name="fov" value="180"/>'), "'fov' must be in degrees, strictly between 0 and 180"),
    (dict(params='<float name="fov" value="0"/>'), "'fov'"),
    (dict(params='<float name="fov" value="nan"/>'), "'fov'"),
    (dict(params='<float name="near_clip" value="nan"/>'), "'near_clip'"),
    (dict(params='<float name="near_clip" value="0"/>'), "'near_clip'"),
    (dict(params='<float name="far_clip" value="nan"/>'), "'far_clip'"),
    (dict(params='<float name="near_clip" value="5"/><float name="far_clip" value="1"/>'), "'far_clip'"),
    (dict(sensor="orthographic", params='<float name="far_clip" value="inf"/>'), "'far_clip'"),
    (dict(sensor="thinlens", params='<float name="aperture_radius" value="nan"/><float name="focus_distance" '
                                    'value="2"/>'), "'aperture_radius'"),
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


def test_a_shape_without_a_bsdf_is_diffuse_and_black_if_it_emits(tmp_path):
    """Mitsuba's Shape: no BSDF given means a diffuse one, of reflectance 0 on an area light."""
    lit = '<shape type="rectangle"><emitter type="area"><rgb name="radiance" value="1"/></emitter></shape>'
    path = _write(tmp_path, shapes=QUAD.format(bsdf="") + lit)
    scene = tracer.load_scene(path)
    textures = scene.textures
    reflectance = [np.asarray(textures.color0)[:, int(scene.materials.reflectance[int(m)])]
                   for m in np.asarray(scene.shapes.bsdf_front)]
    np.testing.assert_array_equal(reflectance[0], [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(reflectance[1], [0.0, 0.0, 0.0])


SHAPES = """<scene version="3.0.0">
  <sensor type="perspective"><transform name="to_world"><lookat origin="0, 0, 3" target="0, 0, 0"/></transform>
    <film type="hdrfilm"><integer name="width" value="4"/><integer name="height" value="3"/></film></sensor>
  {emitter}
  {shape}
</scene>"""
_ENV = '<emitter type="constant"/>'


@pytest.mark.parametrize("shape, emitter, needle", [
    ('<shape type="sphere"><transform name="to_world"><scale value="0"/></transform></shape>', _ENV,
     "shape 'sphere': to_world is singular (a zero scale?)"),      # was numpy's LinAlgError
    ('<shape type="disk"><transform name="to_world"><scale x="0"/></transform></shape>', _ENV, "singular"),
    ('<shape type="rectangle"><transform name="to_world"><scale z="0"/></transform></shape>', _ENV, "singular"),
    ('<shape type="cube"><transform name="to_world"><matrix value="1 0 0 0 0 1 0 0 0 0 1 0 1 0 0 1"/></transform>'
     '</shape>', _ENV, "shape 'cube': to_world is not affine"),
    ('<shape type="sphere"><float name="radius" value="1e13"/></shape>', _ENV, "past 1e+12"),
    ('<shape type="rectangle"><transform name="to_world"><translate x="2e12"/></transform></shape>', _ENV,
     "to_world has an entry past 1e+12"),
    ('<shape type="rectangle"/>', '<emitter type="constant"><rgb name="radiance" value="3e38"/></emitter>',
     "emitter 'constant': 'radiance' must be finite, non-negative and at most 1e+12"),
    ('<shape type="rectangle"/>', '<emitter type="directional"><rgb name="irradiance" value="-1"/></emitter>',
     "'irradiance'"),
    ('<shape type="rectangle"><emitter type="area"><rgb name="radiance" value="1e13"/></emitter></shape>', "",
     "emitter 'area': 'radiance'"),
    ('<shape type="rectangle"><bsdf type="diffuse"><texture type="bitmap" name="reflectance">'
     '<string name="filename" value="negative.exr"/></texture></bsdf></shape>', _ENV,
     "has texel (x=1, y=0) = [-0.5, 1.0, 1.0]; texels must be finite, non-negative"),
])
def test_numbers_no_scene_can_mean_are_refused_by_name(tmp_path, shape, emitter, needle):
    from tracer.io.images import write_exr
    texels = np.ones((2, 2, 3), np.float32)
    texels[0, 1, 0] = -0.5
    write_exr(tmp_path / "negative.exr", texels)
    (tmp_path / "scene.xml").write_text(SHAPES.format(shape=shape, emitter=emitter))
    with pytest.raises(SceneError) as info:
        tracer.load_scene(tmp_path / "scene.xml")
    assert needle in str(info.value) and "scene.xml:" in str(info.value), str(info.value)


@pytest.mark.parametrize("transform", ['<scale z="1e-4"/>', '<scale value="1e-9"/>', '<translate x="9e11"/>'])
def test_thin_small_and_far_shapes_load(tmp_path, transform):
    """The limits leave legal shapes alone: a slab 1e-4 thick, a nanometre-sized one, one far away."""
    shape = f'<shape type="cube"><transform name="to_world">{transform}</transform></shape>'
    (tmp_path / "scene.xml").write_text(SHAPES.format(shape=shape, emitter=_ENV))
    assert tracer.load_scene(tmp_path / "scene.xml").geometry is not None


_LOAD_AND_COUNT = """
import sys
from jax import monitoring
from tracer.runtime.process import configure
configure()
from tracer.io.scene_loader import load_scene
compiled = []
monitoring.register_event_duration_secs_listener(
    lambda event, secs, **kw: compiled.append(event) if event == "/jax/core/compile/backend_compile_duration" else None)
for path, accel in (arg.split("@") for arg in sys.argv[1:]):
    load_scene(path, resolution=(32, 24), accel=accel)
    print(path, accel, len(compiled), flush=True)
"""


def test_loading_a_scene_compiles_nothing(tmp_path):
    """A scene's tables go to the device as they are (``table_rows.on_device``), never staged
    through programs compiled for each of their shapes (``jnp.asarray``: some 45 of them, 0.6 s
    of every worker's first load). In a fresh process, where no program of an earlier load is
    at hand: examples with Embree and with the JAX BVH (instanced too), and a medium of grids."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.tracer.test_media import SMOKE, _grids
    _grids(tmp_path)
    (tmp_path / "smoke.xml").write_text(SMOKE.format(albedo_filter="nearest"))
    examples = Path(__file__).resolve().parents[2] / "examples"
    scenes = [f"{examples / name}.xml@{accel}" for name, accel in (
        ("materials", "auto"), ("orbit", "auto"), ("textures", "auto"), ("dof", "auto"), ("lamp", "auto"),
        ("mesh", "bvh"), ("instances", "bvh"), ("cbox", "brute"))] + [f"{tmp_path / 'smoke.xml'}@auto"]
    run = subprocess.run([sys.executable, "-c", _LOAD_AND_COUNT, *scenes], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    counts = [line.rsplit(" ", 1) for line in run.stdout.splitlines()]
    assert len(counts) == len(scenes) and all(n == "0" for _, n in counts), run.stdout


def test_a_table_on_the_device_keeps_no_host_memory():
    """``on_device`` copies: on CPUs a plain transfer of an aligned array may share its memory,
    and a change the loader makes later to that host array would change the table too."""
    from tracer.table_rows import on_device
    for n in (16, 1000, 1 << 16):
        buffer = np.zeros(n + 16, np.float32)
        start = (-buffer.ctypes.data % 64) // 4
        host = buffer[start:start + n]  # 64-byte aligned, as XLA shares it (a plain jax.device_put does)
        table = on_device(host)
        host[:] = 5
        assert not np.asarray(table).any(), n
