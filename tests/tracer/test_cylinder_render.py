"""A scene of cylinders rendered by us and by Mitsuba 3: a cylinder area light (sampled for
next-event estimation and hit by BSDF samples), a two-sided diffuse cylinder seen from outside and
through its open end, a mirrored one with flipped normals; with the brute-force and BVH backends."""
import numpy as np
import pytest

mi = pytest.importorskip("mitsuba")

SCENE = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="5"/></integrator>
    <sensor type="perspective"><float name="fov" value="45"/>
        <transform name="to_world"><lookat origin="0, -4, 2.5" target="0, 0, 0.4" up="0, 0, 1"/></transform>
        <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="24"/>
            <rfilter type="box"/></film>
        <sampler type="independent"><integer name="sample_count" value="16"/></sampler></sensor>
    <emitter type="constant"><rgb name="radiance" value="0.05"/></emitter>
    <shape type="rectangle"><transform name="to_world"><scale value="3"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.6, 0.5, 0.4"/></bsdf></shape>
    <shape type="cylinder"><point name="p0" value="-1.2, 0.6, 1.6"/><point name="p1" value="1.2, 0.8, 1.8"/>
        <float name="radius" value="0.15"/>
        <emitter type="area"><rgb name="radiance" value="6, 5, 4"/></emitter></shape>
    <shape type="cylinder"><float name="radius" value="0.4"/>
        <transform name="to_world"><rotate x="1" angle="-70"/><translate x="-0.7" y="-0.3" z="0.4"/></transform>
        <bsdf type="twosided"><bsdf type="diffuse"><rgb name="reflectance" value="0.2, 0.6, 0.3"/></bsdf></bsdf></shape>
    <shape type="cylinder"><float name="radius" value="0.3"/><boolean name="flip_normals" value="true"/>
        <point name="p1" value="0, 0, 0.8"/>
        <transform name="to_world"><scale x="-1"/><translate x="0.8" y="0.2"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.7, 0.7, 0.7"/></bsdf></shape>
</scene>"""


@pytest.mark.parametrize("accel", ["brute", "bvh"])
def test_cylinders_render_like_mitsuba(tmp_path, accel):
    import tracer
    xml = tmp_path / "cylinders.xml"
    xml.write_text(SCENE)
    scene = tracer.load_scene(str(xml), accel=accel)
    assert scene.geometry.analytic_kinds == (3,) and scene.emitters.area_shapes_present == (3,)
    ours = np.mean([np.asarray(tracer.render(scene, spp=256, seed=seed)) for seed in range(4)], axis=0)
    mi.set_variant("scalar_rgb")
    theirs = np.array(mi.render(mi.load_file(str(xml)), spp=2048, seed=3))
    assert np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours.mean((0, 1)), theirs.mean((0, 1)), rtol=0.015)
    # Per pixel, 3x3 blocks (the light itself is excluded: its pixels are all or nothing).
    lit = theirs.max(-1) < 3.0
    block = lambda img: img[:24, :30].reshape(8, 3, 10, 3, -1).mean((1, 3))
    mask = block(lit[..., None].astype(float))[..., 0] == 1
    np.testing.assert_allclose(block(ours)[mask], block(theirs)[mask], rtol=0.08, atol=0.01)
