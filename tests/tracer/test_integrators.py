"""Integrators other than 'path' against Mitsuba 3, rendered live on a small scene.

The scene has every kind of light the direct integrator treats differently (an area light, a
point light, an environment) over a diffuse floor, a rough and a smooth (delta) conductor. For
each integrator setting, Mitsuba renders a reference at many samples and an image at the test's
sample count (tests/helpers/mitsuba_render.py): ours must have the reference's mean radiance
(within 2%, a few times the noise) and a relative MSE at most 1.5x Mitsuba's own.
"""
import warnings

import pytest

from tests.helpers.mitsuba_render import assert_matches_mitsuba
from tracer.errors import SceneError, SceneNotice

pytest.importorskip("mitsuba")

RES = (32, 24)
SPP = 64
REFERENCE_SPP = 4096
SCENE = """<scene version="3.0.0">
    {integrator}
    <sensor type="perspective">
        <float name="fov" value="45"/>
        <transform name="to_world"><lookat origin="0, 1.5, 5" target="0, 0.3, 0" up="0, 1, 0"/></transform>
        <sampler type="independent"><integer name="sample_count" value="16"/></sampler>
        <film type="hdrfilm"><integer name="width" value="{w}"/><integer name="height" value="{h}"/>
            <rfilter type="box"/></film>
    </sensor>
    <shape type="rectangle">
        <transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.6, 0.5, 0.4"/></bsdf>
    </shape>
    <shape type="sphere">
        <point name="center" x="-0.8" y="0.6" z="0"/><float name="radius" value="0.6"/>
        <bsdf type="roughconductor"><string name="material" value="Au"/><float name="alpha" value="0.2"/></bsdf>
    </shape>
    <shape type="sphere">
        <point name="center" x="0.8" y="0.5" z="0.3"/><float name="radius" value="0.5"/>
        <bsdf type="conductor"><string name="material" value="Cu"/></bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.5"/><rotate x="1" angle="90"/><translate y="2.5"/></transform>
        <emitter type="area"><rgb name="radiance" value="6, 6, 5"/></emitter>
    </shape>
    <emitter type="point"><point name="position" x="2" y="2" z="2"/><rgb name="intensity" value="3, 2, 2"/></emitter>
    <emitter type="constant"><rgb name="radiance" value="0.2, 0.25, 0.3"/></emitter>
</scene>"""
DIRECT = {
    "default": '<integrator type="direct"/>',
    "lights_only": '<integrator type="direct"><integer name="emitter_samples" value="2"/>'
                   '<integer name="bsdf_samples" value="0"/></integrator>',
    "bsdf_heavy_hidden": '<integrator type="direct"><integer name="emitter_samples" value="1"/>'
                         '<integer name="bsdf_samples" value="3"/><boolean name="hide_emitters" value="true"/>'
                         '</integrator>',
}


def _scene_file(tmp_path_factory, integrator):
    path = tmp_path_factory.mktemp("integrator") / "scene.xml"
    path.write_text(SCENE.format(integrator=integrator, w=RES[0], h=RES[1]))
    return path


@pytest.mark.parametrize("name", DIRECT)
def test_direct_matches_mitsuba(name, tmp_path_factory):
    assert_matches_mitsuba(_scene_file(tmp_path_factory, DIRECT[name]), spp=SPP, reference_spp=REFERENCE_SPP)


def test_moment_gives_its_inner_image_and_second_moments_as_mitsuba(tmp_path_factory):
    """Mitsuba's ``moment``: the inner integrator's RGB, then per sample the XYZ and its square
    (named after the nested integrator), filtered as the image."""
    import mitsuba as mi
    import numpy as np

    import tracer
    from tests.helpers.ztest import RGB_TO_XYZ
    from tracer.shared import aov_channel_names

    inner = '<integrator type="path" name="inner"><integer name="max_depth" value="4"/></integrator>'
    plain = tracer.load_scene(_scene_file(tmp_path_factory, inner))
    path = _scene_file(tmp_path_factory, f'<integrator type="moment">{inner}</integrator>')
    wrapped = tracer.load_scene(path)
    assert aov_channel_names(wrapped.settings.aovs) == ("inner.X", "inner.Y", "inner.Z", "m2_inner.X", "m2_inner.Y",
                                                   "m2_inner.Z")
    ours = np.asarray(tracer.render(wrapped, spp=SPP, seed=0), np.float64)
    np.testing.assert_array_equal(ours[..., :3], np.asarray(tracer.render(plain, spp=SPP, seed=0)))
    xyz = ours[..., :3] @ RGB_TO_XYZ.T  # a box filter: each pixel is the mean of its own samples
    np.testing.assert_allclose(ours[..., 3:6], xyz, rtol=1e-4, atol=1e-6)
    assert np.all(ours[..., 6:] >= xyz * xyz * (1 - 1e-4))  # a mean square is at least the squared mean
    mi.set_variant("scalar_rgb")
    theirs = np.asarray(mi.render(mi.load_file(str(path)), spp=4 * SPP, seed=1), np.float64)
    assert theirs.shape == ours.shape
    error = np.abs(ours.mean(axis=(0, 1)) / theirs.mean(axis=(0, 1)) - 1)
    assert np.all(error[:6] < 0.03) and np.all(error[6:] < 0.15), error


def test_ptracer_renders_as_path_only_where_the_image_is_the_same(tmp_path_factory):
    """Mitsuba's particle tracer misses what the camera sees through a Dirac lobe, and can only
    connect to a pinhole camera: elsewhere its image is path's in expectation."""
    import tracer

    def scene(text):
        path = tmp_path_factory.mktemp("ptracer") / "scene.xml"
        path.write_text(text.format(integrator='<integrator type="ptracer"><integer name="max_depth" value="4"/>'
                                               '<integer name="samples_per_pass" value="4"/></integrator>',
                                    w=RES[0], h=RES[1]))
        return path

    rough = SCENE.replace('<bsdf type="conductor">', '<bsdf type="roughconductor">')
    with pytest.warns(SceneNotice, match="'ptracer' is rendered with 'path'"):
        loaded = tracer.load_scene(scene(rough))
    assert loaded.settings == tracer.load_scene(_scene_file(tmp_path_factory, '<integrator type="path"><integer '
                                                            'name="max_depth" value="4"/></integrator>')).settings
    with pytest.raises(SceneError, match="'ptracer' on this scene: its 'conductor' BSDFs' Dirac lobes"):
        tracer.load_scene(scene(SCENE))
    with pytest.raises(SceneError, match="'ptracer' on this scene: its 'orthographic' sensor"):
        tracer.load_scene(scene(rough.replace('<sensor type="perspective">', '<sensor type="orthographic">')
                                .replace('<float name="fov" value="45"/>', '')))


def test_integrators_that_are_not_implemented(tmp_path_factory):
    import tracer

    with pytest.warns(SceneNotice, match="integrator 'volpath' is rendered with 'path'"):
        scene = tracer.load_scene(_scene_file(tmp_path_factory, '<integrator type="volpath"/>'))
    assert scene.settings.integrator == "path" and scene.settings.max_depth == -1
    with pytest.raises(SceneError, match="unsupported integrator 'stokes'"):
        tracer.load_scene(_scene_file(tmp_path_factory, '<integrator type="stokes"><integrator type="path"/>'
                                                        '</integrator>'))
    with pytest.raises(SceneError, match="either 'shading_samples' or"):
        tracer.load_scene(_scene_file(tmp_path_factory, '<integrator type="direct"><integer name="shading_samples" '
                                                        'value="2"/><integer name="bsdf_samples" value="1"/></integrator>'))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tracer.load_scene(_scene_file(tmp_path_factory, "")).settings.max_depth == -1  # Mitsuba's default
