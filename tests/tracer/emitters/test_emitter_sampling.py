"""Emitter sampling against its own pdf (consistency, chi-square) and against analytic irradiance."""
import math

import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import chi2
from tests.helpers import emitter_cases as C
from tracer.shapes import geometry
from tracer.kinds import SurfaceKind

SAMPLES = 100_000  # one batch size for every test, so that tests of one table share a compilation
QUAD = [(-1.0, -0.5, 2.0), (1.5, -1.0, 2.0), (1.2, 1.3, 2.0), (-0.8, 1.0, 2.0)]  # normal +z: flip to face down
SPHERE_C, SPHERE_R = np.array([0.3, -0.2, 1.8]), 0.9
ROOM_C, ROOM_R = np.array([0.0, 0.0, 0.2]), 1.5


def _disk_to_world():
    rot = np.eye(4)
    a = math.radians(160.0)
    rot[1:3, 1:3] = [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]
    m = np.diag([1.4, 0.8, 1.0, 1.0]) @ np.eye(4)
    t = np.eye(4)
    t[:3, 3] = (0.2, 0.1, 1.5)
    return t @ rot @ m


DISK_TO_WORLD = _disk_to_world()
# A sheared rectangle facing down onto the reference point (Mitsuba's [-1, 1]^2 at z = 0 mapped).
RECT_TO_WORLD = np.array([[0.9, 0.3, 0.0, 0.1], [0.1, -0.6, 0.0, 0.2], [0.2, 0.1, -1.0, 1.7], [0, 0, 0, 1.0]])
RECT_CORNERS = [(RECT_TO_WORLD @ (x, y, 0.0, 1.0))[:3] for x, y in [(-1, -1), (1, -1), (1, 1), (-1, 1)]]
# A tilted tube of radius 0.6 and length 1.8 (p0 = (0.2, -0.1, 1.2), p1 = (0.5, 0.3, 2.9)), seen
# from outside; and a wide one around the reference point, emitting inward.
CYLINDER_TO_WORLD = geometry.cylinder_to_world((0.2, -0.1, 1.2), (0.5, 0.3, 2.9), 0.6)
TUBE_TO_WORLD = geometry.cylinder_to_world((0.1, 0.0, -1.0), (0.0, 0.2, 1.5), 1.3)


def _envmap_image():
    rng = np.random.default_rng(7)
    img = rng.uniform(0.05, 1.0, (16, 32, 3)).astype(np.float32)
    img[4:6, 20:23] = 60.0  # a sun
    return img


def _envmap_table():
    xml = ('<emitter type="envmap"><string name="filename" value="/sky.exr"/><float name="scale" value="2"/>'
           '<transform name="to_world"><rotate y="1" angle="70"/></transform></emitter>')
    return C.table(lambda b: b.add(C.node(xml), None), load_image=lambda path: _envmap_image())


# name -> (table, reference point, cast: directions (3, P) -> (hit, p, oriented normal))
CASES = {
    "mesh": (lambda: C.table(lambda b: b.add_area(C.area_node(), 0, triangles=C.quad(QUAD), flip_normals=True)),
             np.array([0.1, 0.2, 0.0]),
             lambda o, d: (lambda t, p, n: (np.isfinite(t), p, -n))(*C.hit_triangles(o, d, C.quad(QUAD)))),
    "sphere": (lambda: C.table(lambda b: b.add_area(C.area_node(), 0, analytic=(SurfaceKind.SPHERE, C.sphere_to_world(SPHERE_C, SPHERE_R)))),
               np.array([0.0, 0.0, 0.0]),
               lambda o, d: (lambda t, p, n: (np.isfinite(t), p, n))(*C.hit_sphere(o, d, SPHERE_C, SPHERE_R))),
    "sphere_inside": (lambda: C.table(lambda b: b.add_area(C.area_node(), 0, analytic=(SurfaceKind.SPHERE, C.sphere_to_world(ROOM_C, ROOM_R)),
                                                           flip_normals=True)),
                      np.array([0.3, 0.1, -0.2]),
                      lambda o, d: (lambda t, p, n: (np.isfinite(t), p, -n))(*C.hit_sphere(o, d, ROOM_C, ROOM_R, inside=True))),
    "disk": (lambda: C.table(lambda b: b.add_area(C.area_node(), 0, analytic=(SurfaceKind.DISK, DISK_TO_WORLD))),
             np.array([0.0, 0.0, 0.0]),
             lambda o, d: (lambda t, p, n: (np.isfinite(t), p, n))(*C.hit_disk(o, d, DISK_TO_WORLD))),
    "rectangle": (lambda: C.table(lambda b: b.add_area(C.area_node(), 0, analytic=(SurfaceKind.RECTANGLE, RECT_TO_WORLD))),
                  np.array([0.0, 0.1, 0.0]),
                  lambda o, d: (lambda t, p, n: (np.isfinite(t), p, n))(*C.hit_triangles(o, d, C.quad(RECT_CORNERS)))),
    "cylinder": (lambda: C.table(lambda b: b.add_area(C.area_node(), 0, analytic=(SurfaceKind.CYLINDER, CYLINDER_TO_WORLD))),
                 np.array([1.5, -0.5, 1.6]),  # beside the tube: its outside and, through its ends, its inside
                 lambda o, d: (lambda t, p, n: (np.isfinite(t), p, n))(*C.hit_cylinder(o, d, CYLINDER_TO_WORLD))),
    "cylinder_inside": (lambda: C.table(lambda b: b.add_area(C.area_node(), 0, flip_normals=True,
                                                             analytic=(SurfaceKind.CYLINDER, TUBE_TO_WORLD))),
                        np.array([0.2, 0.1, 0.0]),
                        lambda o, d: (lambda t, p, n: (np.isfinite(t), p, n))(*C.hit_cylinder(o, d, TUBE_TO_WORLD, True))),
    "constant": (lambda: C.table(lambda b: b.add(C.node('<emitter type="constant"/>'), None)),
                 np.array([0.2, 0.3, 0.1]),
                 lambda o, d: (np.ones(d.shape[1], bool), o[:, None] + d, -d)),
    "envmap": (_envmap_table, np.array([0.2, 0.3, 0.1]),
               lambda o, d: (np.ones(d.shape[1], bool), o[:, None] + d, -d)),
}


def _sample(emitters, ref, n, seed):
    rng = np.random.default_rng(seed)
    refs = jnp.asarray(np.broadcast_to(ref[:, None], (3, n)).astype(np.float32))
    u_select = jnp.asarray(rng.random(n, np.float32))
    u = jnp.asarray(rng.random((2, n), np.float32))
    ds, weight = C.sample_direction(emitters, C.no_textures(), refs, u_select, u)
    return ds, np.asarray(weight)


def _pdf_along(emitters, ref, cast, d):
    hit, p, n = cast(ref, np.asarray(d, np.float64))
    count = d.shape[1]
    refs = jnp.asarray(np.broadcast_to(ref[:, None], (3, count)).astype(np.float32))
    pdf = C.pdf_direction(emitters, refs, jnp.zeros(count, jnp.int32), jnp.asarray(p, jnp.float32),
                          jnp.asarray(n, jnp.float32), jnp.asarray(d, jnp.float32))
    return np.where(hit, np.asarray(pdf), 0.0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sampled_pdf_equals_pdf_direction(name):
    make, ref, _ = CASES[name]
    emitters = make()
    ds, weight = _sample(emitters, ref, SAMPLES, seed=1)
    pdf = np.asarray(ds.pdf)
    valid = pdf > 0
    assert valid.mean() > 0.3
    again = C.pdf_direction(emitters, jnp.asarray(np.broadcast_to(ref[:, None], (3, SAMPLES)).astype(np.float32)),
                            ds.emitter, ds.p, ds.n, ds.d)
    # Float32 round trips. Near an environment map's poles its pdf goes as 1 / sin(theta), theta =
    # acos(d.y) as in Mitsuba, and one ulp of d.y 4e-5 from the pole moves the pdf by 1e-3 (seen
    # after XLA's platform-dependent math was turned off: 1.07e-3 at d.y = 0.99996).
    near_pole = np.abs(np.asarray(ds.d)[1]) > 0.999
    np.testing.assert_allclose(np.asarray(again)[valid & ~near_pole], pdf[valid & ~near_pole], rtol=1e-3)
    np.testing.assert_allclose(np.asarray(again)[valid & near_pole], pdf[valid & near_pole], rtol=5e-3)
    assert np.all(weight[:, ~valid] == 0)
    assert np.all(np.isfinite(weight)) and np.all(weight >= 0)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(ds.d), axis=0), 1.0, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_chi2_directions(name):
    make, ref, cast = CASES[name]
    emitters = make()
    n = SAMPLES
    ds, _ = _sample(emitters, ref, n, seed=2)
    valid = np.asarray(ds.pdf) > 0
    directions = np.asarray(ds.d, np.float64)[:, valid]
    result = chi2.chi2_test(directions, lambda d: _pdf_along(emitters, ref, cast, d), n, res=20, ires=36,
                            test_count=len(CASES))
    assert result.passed, result.message


def _irradiance(emitters, x, normal, n=SAMPLES, seed=3):
    """Monte Carlo irradiance at x (normal) and its standard error, per channel (3,)."""
    ds, weight = _sample(emitters, np.asarray(x, np.float64), n, seed)
    cos = np.maximum(np.asarray(normal, np.float32) @ np.asarray(ds.d), 0.0)
    values = weight * cos
    return values.mean(axis=1), values.std(axis=1) / math.sqrt(n)


def _assert_irradiance(emitters, x, normal, expected):
    mean, err = _irradiance(emitters, x, normal)
    expected = np.broadcast_to(np.asarray(expected, np.float64), (3,))
    assert np.all(np.abs(mean - expected) < 5 * err + 2e-3 * expected), (mean, expected, err)


def test_irradiance_of_sphere_light():
    x = np.zeros(3)
    to_c = SPHERE_C - x
    dist = np.linalg.norm(to_c)
    emitters = CASES["sphere"][0]()
    _assert_irradiance(emitters, x, to_c / dist, math.pi * C.RADIANCE * (SPHERE_R / dist) ** 2)


def test_irradiance_inside_an_inward_sphere_is_pi_l():
    emitters = CASES["sphere_inside"][0]()
    _assert_irradiance(emitters, np.array([0.3, 0.1, -0.2]), np.array([0.6, 0.0, 0.8]), math.pi * C.RADIANCE)


def test_irradiance_of_disk_on_axis():
    radius, height = 0.8, 1.5
    m = np.diag([radius, -radius, -1.0, 1.0])  # rotated by pi about x: faces -z
    m[2, 3] = height
    emitters = C.table(lambda b: b.add_area(C.area_node(), 0, analytic=(SurfaceKind.DISK, m)))
    expected = math.pi * C.RADIANCE * radius**2 / (height**2 + radius**2)
    _assert_irradiance(emitters, np.zeros(3), np.array([0.0, 0.0, 1.0]), expected)


def test_irradiance_of_quad_mesh():
    x, normal = np.array([0.1, 0.2, 0.0]), np.array([0.0, 0.0, 1.0])
    emitters = CASES["mesh"][0]()
    _assert_irradiance(emitters, x, normal, C.polygon_irradiance(x, normal, QUAD, C.RADIANCE))


def test_irradiance_of_rectangle():
    x, normal = np.array([0.0, 0.1, 0.0]), np.array([0.0, 0.0, 1.0])
    emitters = CASES["rectangle"][0]()
    _assert_irradiance(emitters, x, normal, C.polygon_irradiance(x, normal, RECT_CORNERS, C.RADIANCE))


def test_back_side_of_area_light_is_dark():
    emitters = C.table(lambda b: b.add_area(C.area_node(), 0, triangles=C.quad(QUAD)))  # faces +z, away from x
    ds, weight = _sample(emitters, np.array([0.1, 0.2, 0.0]), SAMPLES, seed=4)
    assert np.all(weight == 0) and np.all(np.asarray(ds.pdf) == 0)


@pytest.mark.parametrize("kind", ["constant", "envmap_constant"])
def test_irradiance_of_constant_environment_is_pi_l(kind):
    if kind == "constant":
        xml = '<emitter type="constant"><rgb name="radiance" value="1, 2, 3"/></emitter>'
        emitters = C.table(lambda b: b.add(C.node(xml), None))
    else:
        image = np.broadcast_to(np.float32([1.0, 2.0, 3.0]), (8, 16, 3))
        xml = '<emitter type="envmap"><string name="filename" value="/flat.exr"/></emitter>'
        emitters = C.table(lambda b: b.add(C.node(xml), None), load_image=lambda path: image)
    _assert_irradiance(emitters, np.array([0.1, 0.0, 0.3]), np.array([0.0, 0.0, 1.0]), math.pi * C.RADIANCE)


def test_point_light_irradiance_is_intensity_over_r2():
    xml = '<emitter type="point"><rgb name="intensity" value="1, 2, 3"/><point name="position" x="0.5" y="0" z="2"/></emitter>'
    emitters = C.table(lambda b: b.add(C.node(xml), None))
    ds, weight = _sample(emitters, np.zeros(3), SAMPLES, seed=5)
    r2 = 0.25 + 4.0
    np.testing.assert_allclose(weight, np.broadcast_to(C.RADIANCE[:, None] / r2, (3, SAMPLES)), rtol=1e-5)
    assert np.all(np.asarray(ds.is_delta)) and np.all(np.asarray(ds.pdf) == 1)
    np.testing.assert_allclose(np.asarray(ds.d)[:, 0], np.array([0.5, 0.0, 2.0]) / math.sqrt(r2), rtol=1e-6)


def test_spot_falloff_is_linear_in_angle_between_beam_and_cutoff():
    xml = ('<emitter type="spot"><rgb name="intensity" value="1, 2, 3"/><float name="cutoff_angle" value="40"/>'
           '<float name="beam_width" value="20"/><transform name="to_world">'
           '<lookat origin="0, 0, 2" target="0, 0, 0" up="0, 1, 0"/></transform></emitter>')
    emitters = C.table(lambda b: b.add(C.node(xml), None))
    angles = np.radians([0.0, 10.0, 19.0, 25.0, 30.0, 39.0, 41.0, 80.0])
    refs = np.stack([2.0 * np.tan(angles), np.zeros_like(angles), np.zeros_like(angles)])
    n = len(angles)
    ds, weight = C.sample_direction(emitters, C.no_textures(), jnp.asarray(refs, jnp.float32), jnp.zeros(n),
                                    jnp.zeros((2, n)))
    r2 = 4.0 + refs[0] ** 2
    falloff = np.clip((np.radians(40.0) - angles) / np.radians(20.0), 0.0, 1.0)
    np.testing.assert_allclose(np.asarray(weight), C.RADIANCE[:, None] * falloff / r2, rtol=2e-4, atol=1e-7)


def test_directional_light_weight_is_its_irradiance():
    xml = '<emitter type="directional"><rgb name="irradiance" value="1, 2, 3"/><vector name="direction" x="0" y="-1" z="-1"/></emitter>'
    emitters = C.table(lambda b: b.add(C.node(xml), None))
    ds, weight = _sample(emitters, np.array([0.1, 0.2, 0.3]), SAMPLES, seed=6)
    np.testing.assert_allclose(weight, np.broadcast_to(C.RADIANCE[:, None], (3, SAMPLES)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ds.d)[:, 0], np.array([0.0, 1.0, 1.0]) / math.sqrt(2), rtol=1e-6)
    assert np.all(np.isinf(np.asarray(ds.dist)))
    # The far point lies outside the scene's bounding sphere (radius sqrt(3)).
    assert np.all(np.linalg.norm(np.asarray(ds.p), axis=0) > math.sqrt(3))


def test_several_emitters_add_up():
    """Uniform selection plus reweighting: the irradiance of a set is the sum of its members'."""
    x, normal = np.array([0.1, 0.2, 0.0]), np.array([0.0, 0.0, 1.0])
    point_xml = '<emitter type="point"><rgb name="intensity" value="2"/><point name="position" x="0" y="0" z="1"/></emitter>'
    emitters = C.table(
        lambda b: b.add_area(C.area_node(), 0, triangles=C.quad(QUAD), flip_normals=True),
        lambda b: b.add(C.node(point_xml), None),
        lambda b: b.add(C.node('<emitter type="constant"><rgb name="radiance" value="0.5"/></emitter>'), None),
    )
    assert np.allclose(np.asarray(emitters.select_pmf), 1 / 3)
    to_point = np.array([0.0, 0.0, 1.0]) - x
    expected = (C.polygon_irradiance(x, normal, QUAD, C.RADIANCE)
                + 2.0 * (to_point @ normal) / np.linalg.norm(to_point) ** 3 + math.pi * 0.5)
    _assert_irradiance(emitters, x, normal, expected)


def test_sampling_weight_sets_selection_probability():
    xml = '<emitter type="point"><point name="position" x="0" y="0" z="1"/><float name="sampling_weight" value="{}"/></emitter>'
    emitters = C.table(lambda b: b.add(C.node(xml.format(3.0)), None), lambda b: b.add(C.node(xml.format(1.0)), None))
    ds, weight = _sample(emitters, np.zeros(3), SAMPLES, seed=8)
    chosen = np.asarray(ds.emitter)
    assert abs((chosen == 0).mean() - 0.75) < 0.006
    np.testing.assert_allclose(weight[0, chosen == 0], 1 / 0.75, rtol=1e-5)
    np.testing.assert_allclose(weight[0, chosen == 1], 1 / 0.25, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ds.pdf)[chosen == 0], 0.75, rtol=1e-6)
