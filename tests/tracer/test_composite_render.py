"""Composite materials in whole renders against Mitsuba 3 rendered live (tests/helpers/mitsuba_render.py).

A mask with a checkerboard opacity lets the light through in squares, a blend mixes a diffuse
and a rough conductor by a checkerboard, a null rectangle stands between the camera and the
scene, a twosided diffuse is masked, and a twosided material puts a blend on one side and a
diffuse on the other.
"""
import pytest

from tests.helpers.mitsuba_render import assert_matches_mitsuba
from tracer.errors import SceneError

pytest.importorskip("mitsuba")

SCENE = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="6"/></integrator>
    <sensor type="perspective">
        <float name="fov" value="40"/>
        <transform name="to_world"><lookat origin="0.5, 2, 5" target="0, 0.5, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="24"/>
            <rfilter type="box"/></film>
    </sensor>
    <shape type="rectangle">
        <transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
        <bsdf type="blendbsdf">
            <texture name="weight" type="checkerboard"><float name="color0" value="0.9"/>
                <float name="color1" value="0.2"/><transform name="to_uv"><scale value="4"/></transform></texture>
            <bsdf type="diffuse"><rgb name="reflectance" value="0.7, 0.6, 0.5"/></bsdf>
            <bsdf type="roughconductor"><string name="material" value="Au"/><float name="alpha" value="0.25"/></bsdf>
        </bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.8"/><rotate y="1" angle="30"/><translate x="-0.6" y="0.8"/></transform>
        <bsdf type="mask">
            <texture name="opacity" type="checkerboard"><transform name="to_uv"><scale value="3"/></transform>
                <float name="color0" value="1"/><float name="color1" value="0"/></texture>
            <bsdf type="twosided"><bsdf type="diffuse"><rgb name="reflectance" value="0.2, 0.6, 0.3"/></bsdf></bsdf>
        </bsdf>
    </shape>
    <shape type="sphere">
        <point name="center" x="0.9" y="0.5" z="0.2"/><float name="radius" value="0.5"/>
        <bsdf type="twosided">
            <bsdf type="blendbsdf"><float name="weight" value="0.5"/>
                <bsdf type="plastic"><rgb name="diffuse_reflectance" value="0.1, 0.2, 0.6"/></bsdf>
                <bsdf type="conductor"><string name="material" value="Cu"/></bsdf>
            </bsdf>
            <bsdf type="diffuse"><rgb name="reflectance" value="0.8, 0.2, 0.2"/></bsdf>
        </bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.7"/><translate x="0.3" y="0.6" z="1.8"/></transform>
        <bsdf type="null"/>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.6"/><rotate x="1" angle="90"/><translate y="3"/></transform>
        <emitter type="area"><rgb name="radiance" value="8, 8, 7"/></emitter>
    </shape>
    <emitter type="constant"><rgb name="radiance" value="0.3, 0.3, 0.35"/></emitter>
</scene>"""


def test_composites_render_as_mitsuba(tmp_path):
    path = tmp_path / "scene.xml"
    path.write_text(SCENE)
    assert_matches_mitsuba(path)


@pytest.mark.parametrize("bsdf, message", [
    ('<bsdf type="twosided"><bsdf type="mask"><bsdf type="diffuse"/></bsdf></bsdf>', "cannot wrap 'mask'"),
    ('<bsdf type="blendbsdf"><bsdf type="diffuse"/><bsdf type="diffuse"/></bsdf>', "needs a 'weight'"),
    ('<bsdf type="blendbsdf"><float name="weight" value="0.5"/><bsdf type="diffuse"/></bsdf>', "needs two nested"),
    ('<bsdf type="mask"/>', "needs one nested bsdf"),
])
def test_composites_refused_as_mitsuba_refuses_them(tmp_path, bsdf, message):
    import tracer

    path = tmp_path / "scene.xml"
    path.write_text(SCENE.replace('<bsdf type="null"/>', bsdf))
    with pytest.raises(SceneError, match=message):
        tracer.load_scene(path)
