"""Reconstruction filters and splatting against Mitsuba 3's ImageBlock."""
import jax.numpy as jnp
import numpy as np
import pytest

from tracer import film as films

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

FILTERS = [("box", {}), ("tent", {}), ("gaussian", {}), ("gaussian", {"stddev": 0.3}), ("tent", {"radius": 1.7})]


@pytest.mark.parametrize("name,params", FILTERS)
def test_filter_values_match_mitsuba(name, params):
    film = films.make_film(8, 8, name, **params)
    rfilter = mi.load_dict({"type": name, **params})
    assert film.radius == pytest.approx(rfilter.radius())
    xs = np.linspace(-film.radius * 1.1, film.radius * 1.1, 101).astype(np.float32)
    for discretized in (False, True):
        ours = np.asarray(films.filter_weights(film, jnp.asarray(xs), discretized=discretized))
        ref = np.array([(rfilter.eval_discretized if discretized else rfilter.eval)(float(x)) for x in xs])
        # Mitsuba's gaussian is within 1e-3 of the exact curve (peak 1).
        np.testing.assert_allclose(ours, ref, atol=1e-3)


@pytest.mark.parametrize("name,params", FILTERS)
def test_splat_matches_mitsuba_image_block(name, params):
    """Samples of a tile's source grid splat exactly as Mitsuba's ImageBlock.put would."""
    w, h, spp = 9, 7, 3
    film = films.make_film(w, h, name, **params)
    rng = np.random.default_rng(0)
    offsets = rng.random((2, spp, h, w)).astype(np.float32)
    radiance = rng.random((3, spp, h, w)).astype(np.float32)

    rfilter = mi.load_dict({"type": name, **params})
    block = mi.ImageBlock([w, h], [0, 0], 4, rfilter=rfilter, border=True, normalize=False)
    for s in range(spp):
        for y in range(h):
            for x in range(w):
                pos = mi.Point2f(x + offsets[0, s, y, x], y + offsets[1, s, y, x])
                block.put(pos, [*radiance[:, s, y, x], 1.0])
    data = np.array(block.tensor())
    b = block.border_size()
    ref = data[b:b + h, b:b + w]

    # One tile covering the film; its source grid is the film grown by the margin (invalid outside).
    m = film.margin
    grid_off = np.zeros((2, spp, h + 2 * m, w + 2 * m), np.float32)
    grid_rad = np.zeros((3, spp, h + 2 * m, w + 2 * m), np.float32)
    valid = np.zeros((spp, h + 2 * m, w + 2 * m), bool)
    grid_off[:, :, m:m + h, m:m + w] = offsets
    grid_rad[:, :, m:m + h, m:m + w] = radiance
    valid[:, m:m + h, m:m + w] = True
    value, weight = films.splat_tile(film, jnp.asarray(grid_off), jnp.asarray(grid_rad), jnp.asarray(valid), h, w)
    tol = dict(rtol=1e-5, atol=1e-6) if name != "gaussian" else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(np.asarray(weight), ref[..., 3], **tol)
    np.testing.assert_allclose(np.asarray(value), ref[..., :3], **tol)
