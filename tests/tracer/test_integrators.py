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
from tracer.io.errors import SceneError, SceneNotice

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


def test_moment_renders_its_inner_integrator(tmp_path_factory):
    import tracer

    inner = '<integrator type="path"><integer name="max_depth" value="4"/></integrator>'
    plain = tracer.load_scene(_scene_file(tmp_path_factory, inner))
    wrapped = tracer.load_scene(_scene_file(tmp_path_factory, f'<integrator type="moment">{inner}</integrator>'))
    assert wrapped.settings == plain.settings


def test_integrators_that_are_not_implemented(tmp_path_factory):
    import tracer

    with pytest.warns(SceneNotice, match="integrator 'volpath' is rendered with 'path'"):
        scene = tracer.load_scene(_scene_file(tmp_path_factory, '<integrator type="volpath"/>'))
    assert scene.settings.integrator == "path" and scene.settings.max_depth == -1
    with pytest.raises(SceneError, match="unsupported integrator 'ptracer'"):
        tracer.load_scene(_scene_file(tmp_path_factory, '<integrator type="ptracer"/>'))
    with pytest.raises(SceneError, match="either 'shading_samples' or"):
        tracer.load_scene(_scene_file(tmp_path_factory, '<integrator type="direct"><integer name="shading_samples" '
                                                        'value="2"/><integer name="bsdf_samples" value="1"/></integrator>'))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tracer.load_scene(_scene_file(tmp_path_factory, "")).settings.max_depth == -1  # Mitsuba's default
