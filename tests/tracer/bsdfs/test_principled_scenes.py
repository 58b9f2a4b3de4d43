"""Principled materials in whole scenes: which side sees which material, Mitsuba's rules for
wrapping them in twosided, and a render against Mitsuba's, judged as tests/tracer/test_images.py
judges (mean radiance, relative MSE against Mitsuba's own at the same sample count).

The scene has every principled lobe in view: a metallic sphere with clearcoat, sheen and a
bitmap roughness (a float texture read through its luminance), a glass-like sphere (spec_trans:
rays enter, reflect inside and leave), and a principledthin sheet with diffuse and specular
transmission, lit from above and from behind.
"""

import numpy as np
import pytest

from tests.helpers import image_metrics as im
from tests.helpers.mitsuba_render import assert_matches_mitsuba
from tracer.errors import SceneError

mi = pytest.importorskip("mitsuba")

RES = (32, 24)
SPP = 64
REFERENCE_SPP = 4096
SCENE = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="8"/></integrator>
    <sensor type="perspective">
        <float name="fov" value="50"/>
        <transform name="to_world"><lookat origin="0, 1.4, 4.5" target="0, 0.5, 0" up="0, 1, 0"/></transform>
        <sampler type="independent"><integer name="sample_count" value="16"/></sampler>
        <film type="hdrfilm"><integer name="width" value="{w}"/><integer name="height" value="{h}"/>
            <rfilter type="box"/></film>
    </sensor>
    <shape type="rectangle">
        <transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.5, 0.45, 0.4"/></bsdf>
    </shape>
    <shape type="sphere">
        <point name="center" x="-0.9" y="0.55" z="0"/><float name="radius" value="0.55"/>
        <bsdf type="principled">
            <rgb name="base_color" value="0.8, 0.5, 0.2"/><float name="metallic" value="0.6"/>
            <texture type="bitmap" name="roughness"><string name="filename" value="{roughness}"/></texture>
            <float name="anisotropic" value="0.5"/><float name="clearcoat" value="0.7"/>
            <float name="clearcoat_gloss" value="0.5"/><float name="sheen" value="0.8"/>
            <float name="sheen_tint" value="0.5"/><float name="spec_tint" value="0.3"/>
        </bsdf>
    </shape>
    <shape type="sphere">
        <point name="center" x="0.35" y="0.45" z="0.4"/><float name="radius" value="0.45"/>
        <bsdf type="principled">
            <rgb name="base_color" value="0.9, 0.95, 0.8"/><float name="spec_trans" value="0.85"/>
            <float name="roughness" value="0.3"/><float name="eta" value="1.45"/><float name="flatness" value="0.4"/>
        </bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale x="0.5" y="0.6"/><translate x="1.3" y="0.6" z="-0.5"/></transform>
        <bsdf type="principledthin">
            <rgb name="base_color" value="0.3, 0.6, 0.8"/><float name="spec_trans" value="0.4"/>
            <float name="diff_trans" value="1.2"/><float name="roughness" value="0.4"/><float name="eta" value="1.3"/>
            <float name="sheen" value="0.3"/>
        </bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.5"/><rotate x="1" angle="90"/><translate y="2.5"/></transform>
        <emitter type="area"><rgb name="radiance" value="6, 6, 5"/></emitter>{black}
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.4"/><translate x="1.3" y="0.8" z="-1.8"/></transform>
        <emitter type="area"><rgb name="radiance" value="3, 4, 6"/></emitter>{black}
    </shape>
    <emitter type="constant"><rgb name="radiance" value="0.2, 0.25, 0.3"/></emitter>
</scene>"""


@pytest.fixture(scope="module")
def scene_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("principled")
    # A colored roughness map: its luminance is the roughness (Mitsuba's bitmap eval_1).
    rng = np.random.default_rng(0)
    image = np.clip(rng.random((8, 16, 1)) * [0.6, 0.5, 0.4] + [0.2, 0.1, 0.15], 0, 1).astype(np.float32)
    im.write_exr(folder / "roughness.exr", image)
    path = folder / "scene.xml"
    # (The lights' BSDF given, though a shape without one is black on an emitter, as Mitsuba's.)
    black = '<bsdf type="diffuse"><rgb name="reflectance" value="0"/></bsdf>'
    path.write_text(SCENE.format(w=RES[0], h=RES[1], roughness="roughness.exr", black=black))
    return path


def test_render_matches_mitsuba(scene_file):
    assert_matches_mitsuba(scene_file, spp=SPP, reference_spp=REFERENCE_SPP)


def _load(tmp_path, bsdf):
    import tracer

    path = tmp_path / "scene.xml"
    path.write_text(f"""<scene version="3.0.0">
        <sensor type="perspective"><film type="hdrfilm"><integer name="width" value="4"/>
            <integer name="height" value="4"/></film></sensor>
        <shape type="sphere">{bsdf}</shape>
    </scene>""")
    return tracer.load_scene(path)


@pytest.mark.parametrize("bsdf", ['<bsdf type="principled"/>', '<bsdf type="principledthin"/>',
                                  '<bsdf type="principled"><float name="spec_trans" value="0.5"/></bsdf>'])
def test_principled_sees_both_sides(tmp_path, bsdf):
    """Mitsuba's principled BSDFs tell the sides apart themselves (wi below the surface is inside):
    the back of the shape has the same material, unmirrored."""
    shapes = _load(tmp_path, bsdf).shapes
    assert int(shapes.bsdf_back[0]) == int(shapes.bsdf_front[0]) and not bool(shapes.flip_back[0])


def test_twosided_principled(tmp_path):
    """As Mitsuba: twosided takes a principled without transmission and mirrors it onto the back;
    it refuses principled with 'spec_trans' (a texture or nonzero float) and principledthin."""
    shapes = _load(tmp_path, '<bsdf type="twosided"><bsdf type="principled">'
                             '<float name="spec_trans" value="0"/></bsdf></bsdf>').shapes
    assert int(shapes.bsdf_back[0]) == int(shapes.bsdf_front[0]) and bool(shapes.flip_back[0])
    for inner in ('<bsdf type="principled"><float name="spec_trans" value="0.2"/></bsdf>',
                  '<bsdf type="principledthin"/>'):
        with pytest.raises(SceneError, match="twosided.: cannot wrap"):
            _load(tmp_path, f'<bsdf type="twosided">{inner}</bsdf>')


@pytest.mark.parametrize("bsdf,name", [('<bsdf type="principled"><boolean name="sample_visible" value="true"/></bsdf>',
                                        "sample_visible"),
                                       ('<bsdf type="principledthin"><float name="metallic" value="0.5"/></bsdf>',
                                        "metallic"),
                                       ('<bsdf type="principledthin"><float name="clearcoat" value="0.5"/></bsdf>',
                                        "clearcoat")])
def test_parameters_mitsuba_does_not_read_are_refused(tmp_path, bsdf, name):
    with pytest.raises(SceneError, match=f"unsupported parameter '{name}'"):
        _load(tmp_path, bsdf)
