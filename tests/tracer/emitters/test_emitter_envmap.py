"""The environment map: Mitsuba's lat-long conventions and the value of its importance sampling."""
import math

import jax.numpy as jnp
import numpy as np

from tests.helpers import emitter_cases as C

H, W = 9, 16


def _table(image, transform=""):
    xml = (f'<emitter type="envmap"><string name="filename" value="/sky.exr"/><float name="scale" value="2"/>'
           f'{transform}</emitter>')
    return C.table(lambda b: b.add(C.node(xml), None), load_image=lambda path: image)


def _direction(u, v):
    """Mitsuba's uv -> local direction: +y up at v = 0, u = 0 looking down -z."""
    theta, phi = v * math.pi, u * 2 * math.pi
    return np.array([math.sin(phi) * math.sin(theta), math.cos(theta), -math.cos(phi) * math.sin(theta)])


def test_pixel_centres_map_to_directions_as_mitsuba():
    image = np.random.default_rng(0).uniform(0, 1, (H, W, 3)).astype(np.float32)
    emitters = _table(image)
    pixels = [(1, 0), (1, 5), (3, 0), (4, 7), (7, 15), (6, 11)]  # rows 0 and H - 1 are the poles
    # Column x is centred at u = (x + 0.5) / W, row y sits at v = y / (H - 1).
    d = np.stack([_direction((x + 0.5) / W, y / (H - 1)) for y, x in pixels], axis=1)
    radiance = np.asarray(C.eval_environment(emitters, C.no_textures(), jnp.asarray(d, jnp.float32)))
    expected = np.stack([2 * image[y, x] for y, x in pixels], axis=1)
    np.testing.assert_allclose(radiance, expected, rtol=1e-4, atol=1e-5)


def test_to_world_rotates_the_map():
    image = np.random.default_rng(1).uniform(0, 1, (H, W, 3)).astype(np.float32)
    plain = _table(image)
    turned = _table(image, '<transform name="to_world"><rotate y="1" angle="90"/></transform>')
    rng = np.random.default_rng(2)
    local = rng.normal(size=(3, 64))
    local /= np.linalg.norm(local, axis=0)
    rot = np.array([[0.0, 0, 1], [0, 1, 0], [-1, 0, 0]])  # 90 degrees about +y
    a = C.eval_environment(plain, None, jnp.asarray(local, jnp.float32))
    b = C.eval_environment(turned, None, jnp.asarray(rot @ local, jnp.float32))
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_importance_sampling_beats_uniform_sampling_on_a_peaked_map():
    image = np.full((32, 64, 3), 0.05, np.float32)
    image[8:10, 40:42] = 500.0  # a small, bright sun above the horizon
    emitters = _table(image)
    n = 50_000
    rng = np.random.default_rng(3)
    x = jnp.zeros((3, n))
    normal = np.array([0.0, 1.0, 0.0])  # a receiver facing up (+y is up)

    ds, weight = C.sample_direction(emitters, None, x, jnp.asarray(rng.random(n, np.float32)),
                                    jnp.asarray(rng.random((2, n), np.float32)))
    importance = np.asarray(weight)[0] * np.maximum(normal @ np.asarray(ds.d), 0.0)

    d = rng.normal(size=(3, n))
    d /= np.linalg.norm(d, axis=0)
    radiance = np.asarray(C.eval_environment(emitters, None, jnp.asarray(d, jnp.float32)))[0]
    uniform = radiance * np.maximum(normal @ d, 0.0) * 4 * math.pi

    err = math.sqrt(importance.var() / n + uniform.var() / n)
    assert abs(importance.mean() - uniform.mean()) < 5 * err
    assert importance.var() < 0.01 * uniform.var()
