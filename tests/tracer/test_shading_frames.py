"""Shading frames in whole scenes, against Mitsuba rendering the same files (judged as
tests/tracer/test_images.py judges: mean radiance, relative MSE against Mitsuba's own).

* Anisotropic BSDFs see the tangent along dp/du: roughconductors with alpha_u != alpha_v and an
  anisotropic principled on every kind of surface (a sphere, a cylinder, a disk, a cube and a
  rectangle, whose dp/du come from their uvs), where a frame turned about the normal shows.
* Normal and bump maps over anisotropic and textured BSDFs on meshes and analytic shapes, and a
  twosided normal-mapped sheet seen from its back.
"""
import numpy as np
import pytest

from tests.helpers import image_metrics as im
from tests.helpers.mitsuba_render import assert_matches_mitsuba

mi = pytest.importorskip("mitsuba")

RES = (32, 24)
SPP = 64
REFERENCE_SPP = 4096
FRAME = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="6"/></integrator>
    <sensor type="perspective">
        <float name="fov" value="45"/>
        <transform name="to_world"><lookat origin="0.3, 2.2, 5" target="0, 0.5, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="{w}"/><integer name="height" value="{h}"/>
            <rfilter type="box"/></film>
    </sensor>
    <shape type="rectangle">
        <transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.4, 0.4, 0.35"/></bsdf>
    </shape>
    <shape type="rectangle">
        <transform name="to_world"><scale value="0.6"/><rotate x="1" angle="90"/><translate y="3"/></transform>
        <emitter type="area"><rgb name="radiance" value="8, 8, 7"/></emitter>{black}
    </shape>
    <emitter type="constant"><rgb name="radiance" value="0.15, 0.2, 0.25"/></emitter>
    {shapes}
</scene>"""
ANISO = '<bsdf type="roughconductor"><string name="material" value="Al"/><string name="distribution" value="ggx"/>' \
        '<float name="alpha_u" value="{u}"/><float name="alpha_v" value="{v}"/></bsdf>'
ANISOTROPIC = f"""
    <shape type="sphere"><point name="center" x="-1.2" y="0.5" z="0"/><float name="radius" value="0.5"/>
        {ANISO.format(u=0.4, v=0.03)}</shape>
    <shape type="cylinder"><point name="p0" x="0" y="0" z="-0.6"/><point name="p1" x="0" y="1" z="-0.6"/>
        <float name="radius" value="0.35"/>{ANISO.format(u=0.03, v=0.4)}</shape>
    <shape type="cube"><transform name="to_world"><scale value="0.4"/><rotate y="1" angle="30"/>
        <rotate x="1" angle="20"/><translate x="1.2" y="0.5" z="0"/></transform>
        <bsdf type="principled"><rgb name="base_color" value="0.8, 0.6, 0.3"/><float name="metallic" value="0.9"/>
            <float name="roughness" value="0.4"/><float name="anisotropic" value="0.9"/></bsdf></shape>
    <shape type="disk"><transform name="to_world"><scale value="0.45"/><rotate x="1" angle="-60"/>
        <translate x="0.1" y="0.6" z="0.9"/></transform>{ANISO.format(u=0.5, v=0.02)}</shape>
    <shape type="rectangle"><transform name="to_world"><scale x="0.5" y="0.3"/><rotate x="1" angle="-70"/>
        <rotate y="1" angle="25"/><translate x="-0.5" y="0.05" z="1.4"/></transform>{ANISO.format(u=0.02, v=0.5)}</shape>
"""
NORMALS = '<texture type="bitmap" name="normalmap"><string name="filename" value="normals.exr"/>' \
          '<boolean name="raw" value="true"/>{uv}</texture>'
HEIGHT = '<texture type="bitmap" name="height"><string name="filename" value="height.exr"/>' \
         '<boolean name="raw" value="true"/>{uv}</texture>'
TILE = '<transform name="to_uv"><scale x="{k}" y="{k}"/></transform>'
PERTURBED = f"""
    <shape type="sphere"><point name="center" x="-1.2" y="0.5" z="0"/><float name="radius" value="0.5"/>
        <bsdf type="normalmap">{NORMALS.format(uv=TILE.format(k=3))}{ANISO.format(u=0.3, v=0.05)}</bsdf></shape>
    <shape type="cylinder"><point name="p0" x="0" y="0" z="-0.6"/><point name="p1" x="0" y="1" z="-0.6"/>
        <float name="radius" value="0.35"/><bsdf type="bumpmap"><float name="scale" value="0.04"/>
        {HEIGHT.format(uv=TILE.format(k=2))}<bsdf type="diffuse"><texture type="checkerboard" name="reflectance">
        <transform name="to_uv"><scale x="4" y="2"/></transform></texture></bsdf></bsdf></shape>
    <shape type="cube"><transform name="to_world"><scale value="0.4"/><rotate y="1" angle="30"/>
        <rotate x="1" angle="20"/><translate x="1.2" y="0.5" z="0"/></transform>
        <bsdf type="bumpmap"><float name="scale" value="0.08"/>{HEIGHT.format(uv="")}
            <bsdf type="roughplastic"><rgb name="diffuse_reflectance" value="0.2, 0.4, 0.7"/>
            <float name="alpha" value="0.15"/></bsdf></bsdf></shape>
    <shape type="disk"><transform name="to_world"><scale value="0.45"/><rotate x="1" angle="-60"/>
        <translate x="0.1" y="0.6" z="0.9"/></transform>
        <bsdf type="normalmap">{NORMALS.format(uv="")}<bsdf type="diffuse"/></bsdf></shape>
    <shape type="rectangle"><transform name="to_world"><scale x="0.5" y="0.3"/><rotate x="1" angle="110"/>
        <rotate y="1" angle="25"/><translate x="-0.5" y="0.05" z="1.4"/></transform>
        <bsdf type="twosided"><bsdf type="normalmap">{NORMALS.format(uv=TILE.format(k=2))}
            <bsdf type="roughplastic"><rgb name="diffuse_reflectance" value="0.7, 0.3, 0.2"/></bsdf></bsdf></bsdf>
    </shape>
"""


def _write_maps(folder):
    """A height field of bumps (16 x 16) and the tangent-space normal map it implies."""
    y, x = np.mgrid[0:16, 0:16] / 16.0
    height = 0.5 + 0.25 * np.sin(2 * np.pi * x) * np.cos(2 * np.pi * 2 * y)
    dy, dx = np.gradient(height)
    n = np.stack([-4 * dx, -4 * dy, np.ones_like(height)], axis=-1)
    n /= np.linalg.norm(n, axis=-1, keepdims=True)
    im.write_exr(folder / "height.exr", height[..., None].astype(np.float32))
    im.write_exr(folder / "normals.exr", (0.5 * n + 0.5).astype(np.float32))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("frames")
    _write_maps(folder)
    black = '<bsdf type="diffuse"><rgb name="reflectance" value="0"/></bsdf>'
    for name, shapes in (("anisotropic", ANISOTROPIC), ("perturbed", PERTURBED)):
        (folder / f"{name}.xml").write_text(FRAME.format(w=RES[0], h=RES[1], black=black, shapes=shapes))
    return folder


@pytest.mark.parametrize("name", ["anisotropic", "perturbed"])
def test_render_matches_mitsuba(folder, name):
    assert_matches_mitsuba(folder / f"{name}.xml", spp=SPP, reference_spp=REFERENCE_SPP)


def test_anisotropic_frame_shows(folder, tmp_path):
    """The anisotropic scene is a test of the frame: with the alphas swapped, Mitsuba's own image
    changes by far more than its noise."""
    from tests.helpers.mitsuba_render import mitsuba_image
    swapped = tmp_path / "swapped.xml"
    text = (folder / "anisotropic.xml").read_text()
    swapped.write_text(text.replace('name="alpha_u"', 'name="alpha_tmp"').replace('name="alpha_v"', 'name="alpha_u"')
                       .replace('name="alpha_tmp"', 'name="alpha_v"'))
    reference = mitsuba_image(folder / "anisotropic.xml", REFERENCE_SPP, 1000)
    noise = im.relative_mse(mitsuba_image(folder / "anisotropic.xml", SPP, 0), reference)
    assert im.relative_mse(mitsuba_image(swapped, SPP, 0), reference) > 3 * noise
