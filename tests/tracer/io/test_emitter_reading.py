"""The emitter table builder: Mitsuba's parameters, its errors, and a program that does not retrace."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import emitter_cases as C
from tracer import emitters as E
from tracer.io.emitters import EmitterTableBuilder
from tracer.errors import SceneError
from tracer.kinds import EmitterKind, SurfaceKind


def _add(xml, load_image=None):
    return C.table(lambda b: b.add(C.node(xml), None), load_image=load_image)


@pytest.mark.parametrize("xml, message", [
    ('<emitter type="point"><point name="position" x="0" y="0" z="1"/><transform name="to_world"><translate x="1"/></transform></emitter>',
     "only one of 'position' and 'to_world'"),
    ('<emitter type="directional"><vector name="direction" x="0" y="0" z="0"/></emitter>', "nonzero"),
    ('<emitter type="spot"><float name="cutoff_angle" value="20"/><float name="beam_width" value="30"/></emitter>', "beam_width"),
    ('<emitter type="point"><rgb name="intensity" value="1, -1, 1"/></emitter>', "non-negative"),
    ('<emitter type="constant"><texture type="bitmap" name="radiance"><string name="filename" value="a.png"/></texture></emitter>',
     "textured 'radiance'"),
    ('<emitter type="point"><float name="sampling_weight" value="-1"/></emitter>', "sampling_weight"),
    ('<emitter type="sunsky"/>', "unsupported emitter type 'sunsky'"),
    ('<emitter type="projector"><float name="fov" value="0"/></emitter>', "'fov' must be in degrees"),
])
def test_bad_emitters_raise_scene_error_with_the_line(xml, message):
    with pytest.raises(SceneError, match=message) as info:
        _add(xml)
    assert "<string>:1" in str(info.value)


def test_only_one_environment_emitter():
    b = EmitterTableBuilder(load_image=lambda path: np.ones((4, 8, 3), np.float32))
    b.add(C.node('<emitter type="constant"/>'), None)
    with pytest.raises(SceneError, match="only one environment"):
        b.add(C.node('<emitter type="envmap"><string name="filename" value="/sky.exr"/></emitter>'), None)


def test_envmap_needs_two_by_three_pixels():
    with pytest.raises(SceneError, match="at least 2x3"):
        _add('<emitter type="envmap"><string name="filename" value="/sky.exr"/></emitter>',
             load_image=lambda path: np.ones((2, 8, 3), np.float32))


def test_area_light_errors():
    b = EmitterTableBuilder()
    with pytest.raises(SceneError, match="no surface area"):
        b.add_area(C.area_node(), 0, triangles=(np.zeros((1, 3)), np.zeros((1, 3)), np.zeros((1, 3))))
    with pytest.raises(SceneError, match="to_world"):
        b.add_area(C.area_node(extra='<transform name="to_world"><translate x="1"/></transform>'), 0,
                   analytic=(SurfaceKind.SPHERE, np.eye(4)))
    attribute = C.node('<emitter type="area"><texture type="mesh_attribute" name="radiance">'
                       '<string name="name" value="vertex_color"/></texture></emitter>')
    with pytest.raises(SceneError, match="'mesh_attribute' radiance"):
        b.add_area(attribute, 0, triangles=C.quad([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)]), add_texture=lambda node: 0)
    textured = C.node('<emitter type="area"><texture type="checkerboard" name="radiance"/></emitter>')
    with pytest.raises(SceneError, match="needs a mesh with uv"):
        b.add_area(textured, 0, triangles=C.quad([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)]), add_texture=lambda node: 0)


def test_every_supported_parameter_is_read():
    xmls = [
        '<emitter type="point"><rgb name="intensity" value="1"/><point name="position" x="0" y="0" z="1"/>'
        '<float name="sampling_weight" value="2"/></emitter>',
        '<emitter type="spot"><rgb name="intensity" value="1"/><float name="cutoff_angle" value="30"/>'
        '<float name="beam_width" value="10"/><transform name="to_world"><translate x="1"/></transform></emitter>',
        '<emitter type="directional"><rgb name="irradiance" value="1"/><vector name="direction" x="0" y="0" z="-1"/></emitter>',
        '<emitter type="envmap"><string name="filename" value="/sky.exr"/><float name="scale" value="2"/>'
        '<boolean name="mis_compensation" value="true"/><transform name="to_world"><rotate y="1" angle="90"/></transform></emitter>',
    ]
    for xml in xmls:
        node = C.node(xml)
        EmitterTableBuilder(load_image=lambda path: np.ones((4, 8, 3), np.float32)).add(node, None)
        node.check_unused()
    node = C.area_node(extra='<float name="sampling_weight" value="0.5"/>')
    EmitterTableBuilder().add_area(node, 3, analytic=(SurfaceKind.SPHERE, np.eye(4)))
    node.check_unused()


def test_table_columns():
    tris = C.quad([(0, 0, 0), (1, 0, 0), (1, 2, 0), (0, 2, 0)])
    emitters = C.table(
        lambda b: b.add(C.node('<emitter type="point"/>'), None),
        lambda b: b.add_area(C.area_node(), 7, triangles=tris, flip_normals=True),
        lambda b: b.add(C.node('<emitter type="constant"/>'), None),
        lambda b: b.add_area(C.area_node(), 9, analytic=(SurfaceKind.SPHERE, C.sphere_to_world((0, 0, 0), 2.0))),
    )
    assert emitters.count == 4 and emitters.environment == 2
    assert emitters.kinds_present == (EmitterKind.AREA, EmitterKind.POINT, EmitterKind.CONSTANT)
    assert emitters.area_shapes_present == (SurfaceKind.MESH, SurfaceKind.SPHERE)
    np.testing.assert_array_equal(np.asarray(emitters.shape), [-1, 7, -1, 9])
    np.testing.assert_allclose(np.asarray(emitters.inv_area)[[1, 3]], [1 / 2.0, 1 / (16 * np.pi)], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(emitters.tri_cdf), [0.5, 1.0])
    # The bounding sphere of the unit box, enlarged by Mitsuba's RayEpsilon.
    np.testing.assert_allclose(float(emitters.sphere_radius), np.sqrt(3) * (1 + 1500 * 2.0**-24), rtol=1e-7)


def test_scene_without_emitters_samples_nothing():
    emitters = C.table()
    assert emitters.count == 0 and emitters.environment == -1
    n = 8
    ds, weight = C.sample_direction(emitters, C.no_textures(), jnp.zeros((3, n)), jnp.full(n, 0.5), jnp.full((2, n), 0.5))
    assert np.all(np.asarray(weight) == 0) and np.all(np.asarray(ds.pdf) == 0)
    assert np.all(np.asarray(E.eval_environment(emitters, None, jnp.ones((3, n)))) == 0)


def test_changing_values_does_not_retrace():
    traces = []

    @jax.jit
    def run(emitters, ref, u_select, u):
        traces.append(1)
        ds, weight = E.sample_direction(emitters, C.no_textures(), ref, u_select, u)
        return weight, E.pdf_direction(emitters, ref, ds.emitter, ds.p, ds.n, ds.d)

    def make(offset, intensity):
        xml = f'<emitter type="point"><rgb name="intensity" value="{intensity}"/></emitter>'
        tris = C.quad(np.array([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0)]) + offset)
        return C.table(lambda b: b.add(C.node(xml), None), lambda b: b.add_area(C.area_node(), 0, triangles=tris))

    n = 16
    args = (jnp.zeros((3, n)) + 3.0, jnp.linspace(0, 0.99, n), jnp.full((2, n), 0.3))
    w1, _ = run(make(0.0, 1.0), *args)
    w2, _ = run(make(0.5, 2.0), *args)
    assert len(traces) == 1
    assert not np.allclose(np.asarray(w1), np.asarray(w2))
