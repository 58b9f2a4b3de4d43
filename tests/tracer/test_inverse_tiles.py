"""The pieces of the farm's inverse rendering in one process: a view's loss and gradient are the
sums of its tiles' (``tracer.differentiable.tile_loss``), and an optimizer step resumed from its
state's bytes is the bits of one never stopped (``tracer.optimizer``)."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import tracer
from tracer import optimizer
from tracer.differentiable import image, tile_image, tile_loss_and_grad
from tests.helpers.optimize_cases import KEYS, SCENE

SIZE, TILE, SPP = 12, 8, 4  # tiles of 8 on a 12x12 film: the edge tiles are cut (padding out of the loss)


def test_tiles_add_up_to_the_whole_image():
    scene = tracer.load_scene(SCENE, accel="jax", res=str(SIZE))
    params = {k: v for k, v in tracer.parameters(scene).items() if k in KEYS}
    target = np.random.default_rng(0).uniform(0, 0.5, (SIZE, SIZE, 3)).astype(np.float32)
    seed, frame = jnp.int32(3), jnp.int32(0)

    def whole(p):
        img = image(scene, p, seed, frame, spp=SPP)
        return jnp.sum((img - target) ** 2), img
    (want_loss, want_image), want_grad = jax.jit(jax.value_and_grad(whole, has_aux=True))(params)
    loss, grads, tiles = 0.0, {k: 0.0 for k in params}, np.zeros((SIZE, SIZE, 3), np.float32)
    for y in range(0, SIZE, TILE):
        for x in range(0, SIZE, TILE):
            rows, cols = min(TILE, SIZE - y), min(TILE, SIZE - x)
            padded = np.zeros((TILE, TILE, 3), np.float32)
            padded[:rows, :cols] = target[y:y + rows, x:x + cols]
            mask = np.zeros((TILE, TILE), bool)
            mask[:rows, :cols] = True
            (l, img), g = tile_loss_and_grad(scene, params, padded, mask, seed, frame, jnp.int32(y), jnp.int32(x),
                                             spp=SPP, tile_h=TILE, tile_w=TILE, loss="l2")
            loss += float(l)
            grads = {k: grads[k] + np.asarray(g[k]) for k in params}
            tiles[y:y + rows, x:x + cols] = np.asarray(img)[:rows, :cols]
    # A pixel's samples are the pixel's whatever the window: the same values but for the rounding of
    # programs of other sizes (the farm keeps its tiles fixed: its bits do not depend on this).
    np.testing.assert_allclose(tiles, np.asarray(want_image), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(loss, float(want_loss), rtol=1e-5)
    for k in params:
        np.testing.assert_allclose(grads[k], np.asarray(want_grad[k]), rtol=1e-4, atol=1e-6)
        assert np.abs(grads[k]).max() > 0


def test_a_tile_of_a_cropped_film_is_that_window_of_the_whole_film():
    """A gradient task's tile (like a render task's) is placed in the film's crop window, not the
    whole film: a cropped film's tile (0, 0) is the whole film's tile at the crop's offset."""
    scene = tracer.load_scene(SCENE, accel="jax", res=str(SIZE))
    params = {k: v for k, v in tracer.parameters(scene).items() if k in KEYS}
    film = scene.film
    cropped = dataclasses.replace(scene, film=dataclasses.replace(film, crop_x=5, crop_y=3, crop_width=TILE,
                                                                    crop_height=TILE))
    at = jax.jit(tile_image, static_argnames=("spp", "tile_h", "tile_w"))
    seed, frame = jnp.int32(3), jnp.int32(0)
    window = at(cropped, params, seed, frame, jnp.int32(0), jnp.int32(0), spp=SPP, tile_h=TILE, tile_w=TILE)
    whole = at(scene, params, seed, frame, jnp.int32(3), jnp.int32(5), spp=SPP, tile_h=TILE, tile_w=TILE)
    corner = at(scene, params, seed, frame, jnp.int32(0), jnp.int32(0), spp=SPP, tile_h=TILE, tile_w=TILE)
    np.testing.assert_allclose(np.asarray(window), np.asarray(whole), rtol=1e-5, atol=1e-7)
    assert np.abs(np.asarray(window) - np.asarray(corner)).max() > 1e-3  # (the film's own corner is elsewhere)


def test_a_step_resumed_from_its_state_bytes_is_the_same_bits():
    params = {"a": np.array([0.5, 0.5, 0.5], np.float32), "b": np.array([2.0], np.float32)}
    ranges = {"a": (0.0, 1.0), "b": (0.0, float("inf"))}
    rng = np.random.default_rng(1)
    grads = [{"a": rng.normal(size=3).astype(np.float32), "b": rng.normal(size=1).astype(np.float32)}
             for _ in range(3)]
    state = optimizer.init_state("adam", 0.1, params)
    straight = params
    for g in grads:
        straight, state = optimizer.step("adam", 0.1, straight, state, g, ranges)
    resumed = params
    data = optimizer.state_bytes(optimizer.init_state("adam", 0.1, params))
    for g in grads:  # every step from the bytes of the last, as the farm's checkpoints give them
        state = optimizer.state_from_bytes("adam", 0.1, resumed, data)
        resumed, state = optimizer.step("adam", 0.1, resumed, state, g, ranges)
        data = optimizer.state_bytes(state)
    for k in params:
        assert straight[k].tobytes() == resumed[k].tobytes()
    assert optimizer.state_bytes(state) == data
    big = {"a": np.full(3, -100.0, np.float32), "b": np.full(1, 100.0, np.float32)}
    clamped, _ = optimizer.step("sgd", 1.0, params, optimizer.init_state("sgd", 1.0, params), big, ranges)
    np.testing.assert_array_equal(clamped["a"], [1.0, 1.0, 1.0])  # reflectance-like: at most 1
    np.testing.assert_array_equal(clamped["b"], [0.0])  # radiance-like: at least 0
