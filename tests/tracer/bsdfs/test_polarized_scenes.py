"""The polarized plugins as Mitsuba's RGB variants render them, in a whole scene: a pplastic
sphere (textured, GGX) and a pplastic floor seen through two polarizers (one textured, one
seen from its back), rendered by both; and what the loader refuses about them."""
import numpy as np
import pytest

from tests.helpers import image_metrics as im
from tests.helpers.mitsuba_render import assert_matches_mitsuba
from tracer.errors import SceneError

mi = pytest.importorskip("mitsuba")

SCENE = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="4"/></integrator>
    <sensor type="perspective">
        <float name="fov" value="45"/>
        <transform name="to_world"><lookat origin="0, 1.5, 4" target="0, 0.4, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="24"/>
            <rfilter type="box"/></film>
    </sensor>
    <shape type="rectangle">
        <transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
        <bsdf type="pplastic"><rgb name="diffuse_reflectance" value="0.5, 0.4, 0.3"/><float name="alpha" value="0.2"/></bsdf>
    </shape>
    <shape type="sphere"><point name="center" x="-0.5" y="0.5" z="0"/><float name="radius" value="0.5"/>
        <bsdf type="pplastic">
            <texture type="bitmap" name="diffuse_reflectance"><string name="filename" value="albedo.exr"/></texture>
            <float name="alpha" value="0.1"/><string name="distribution" value="ggx"/><float name="eta" value="1.6"/>
        </bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale x="0.5" y="0.6"/><translate x="0.6" y="0.6" z="0.8"/></transform>
        <bsdf type="polarizer"><float name="theta" value="30"/>
            <texture type="checkerboard" name="transmittance"><rgb name="color0" value="0.9, 0.5, 0.2"/>
                <transform name="to_uv"><scale value="4"/></transform></texture>
        </bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale x="0.4" y="0.5"/><rotate y="1" angle="180"/><translate x="0.6" y="0.6" z="0.4"/></transform>
        <bsdf type="polarizer"><spectrum name="theta" value="90"/><rgb name="transmittance" value="0.8"/></bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.6"/><rotate x="1" angle="90"/><translate y="2.5"/></transform>
        <emitter type="area"><rgb name="radiance" value="8, 8, 7"/></emitter>
    </shape>
    <emitter type="constant"><rgb name="radiance" value="0.2, 0.25, 0.3"/></emitter>
</scene>"""


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("polarized")
    albedo = np.random.default_rng(2).uniform(0.05, 0.9, (4, 8, 3)).astype(np.float32)
    im.write_exr(folder / "albedo.exr", albedo)
    path = folder / "scene.xml"
    path.write_text(SCENE)
    return path


def test_render_matches_mitsuba(scene_file):
    assert_matches_mitsuba(scene_file, spp=64, reference_spp=4096)


@pytest.mark.parametrize("bsdf,message", [
    ('<bsdf type="twosided"><bsdf type="polarizer"/></bsdf>', "cannot wrap 'polarizer'"),
    ('<bsdf type="pplastic"><float name="eta" value="1.5"/><float name="int_ior" value="1.5"/></bsdf>',
     "either 'eta' or 'int_ior'"),
    ('<bsdf type="pplastic"><float name="int_ior" value="1.3"/><float name="ext_ior" value="1.3"/></bsdf>', "differ"),
    ('<bsdf type="measured_polarized"><string name="filename" value="gold.pbsdf"/></bsdf>',
     "unsupported bsdf type 'measured_polarized'"),
    ('<bsdf type="polarizer"><float name="bogus" value="1"/></bsdf>', "unsupported parameter 'bogus'"),
])
def test_refusals_name_the_problem(tmp_path, bsdf, message):
    import tracer
    path = tmp_path / "scene.xml"
    path.write_text(f'<scene version="3.0.0"><shape type="sphere">{bsdf}</shape><sensor type="perspective"/></scene>')
    with pytest.raises(SceneError, match=message) as info:
        tracer.load_scene(path)
    assert "scene.xml:1" in str(info.value)
