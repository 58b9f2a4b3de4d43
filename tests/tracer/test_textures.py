"""Bitmap lookups: wrap modes and filters against numpy, and the same bits whichever other
textures share the table (a table compiles only the modes and filters it holds)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tracer import textures as tx
from tracer.kinds import BitmapFilter, WrapMode

IMAGE = np.random.default_rng(0).uniform(size=(5, 4, 3)).astype(np.float32)
COMBOS = list(itertools.product((BitmapFilter.NEAREST, BitmapFilter.BILINEAR), (WrapMode.REPEAT, WrapMode.MIRROR, WrapMode.CLAMP)))
# Coordinates well outside [0, 1], texel centers and edges included.
UV = np.stack(np.meshgrid(np.linspace(-2.0, 3.0, 61), np.linspace(-1.5, 2.5, 53)), 0).reshape(2, -1).astype(np.float32)


def _table(combos):
    builder = tx.TextureTableBuilder()
    ids = [builder.add_bitmap(IMAGE, filter=f, wrap=w) for f, w in combos]
    return builder.build(), ids


@jax.jit
def _lookup(table, tid, uv):
    return tx.eval_rgb(table, tid, uv)


def _wrap(i, n, mode):
    if mode == WrapMode.REPEAT:
        return np.mod(i, n)
    if mode == WrapMode.MIRROR:
        period = np.mod(i, 2 * n)
        return np.where(period >= n, 2 * n - 1 - period, period)
    return np.clip(i, 0, n - 1)


def _reference(filter, wrap):
    """Mitsuba's bitmap lookup in float64: texel centers at (i + 0.5) / res, v = 0 the first row."""
    h, w, _ = IMAGE.shape
    px, py = UV[0].astype(np.float64) * w, UV[1].astype(np.float64) * h
    texel = lambda x, y: IMAGE[_wrap(y, h, wrap), _wrap(x, w, wrap)].T
    if filter == BitmapFilter.NEAREST:
        return texel(np.floor(px).astype(int), np.floor(py).astype(int))
    fx, fy = px - 0.5, py - 0.5
    x0, y0 = np.floor(fx).astype(int), np.floor(fy).astype(int)
    tx_, ty = fx - x0, fy - y0
    return ((1 - tx_) * (1 - ty) * texel(x0, y0) + tx_ * (1 - ty) * texel(x0 + 1, y0)
            + (1 - tx_) * ty * texel(x0, y0 + 1) + tx_ * ty * texel(x0 + 1, y0 + 1))


@pytest.mark.parametrize("filter,wrap", COMBOS)
def test_a_bitmap_alone_and_among_others_agrees_and_gives_mitsubas_lookup(filter, wrap):
    alone, (tid,) = _table([(filter, wrap)])
    assert alone.wraps_present == (wrap,) and alone.filters_present == (filter,)
    mixed, ids = _table(COMBOS)
    assert mixed.wraps_present == (WrapMode.REPEAT, WrapMode.MIRROR, WrapMode.CLAMP)
    n = UV.shape[1]
    ours = np.asarray(_lookup(alone, jnp.full(n, tid, jnp.int32), UV))
    among = np.asarray(_lookup(mixed, jnp.full(n, ids[COMBOS.index((filter, wrap))], jnp.int32), UV))
    # Two programs (the table's modes are static): the same arithmetic, FMAs contracted apiece.
    np.testing.assert_allclose(ours, among, rtol=2e-6, atol=1e-8)
    np.testing.assert_allclose(ours, _reference(filter, wrap), atol=2e-5)


def test_one_batch_mixing_every_mode_and_filter():
    mixed, ids = _table(COMBOS)
    n = UV.shape[1]
    pick = np.arange(n) % len(COMBOS)
    got = np.asarray(_lookup(mixed, jnp.asarray(np.asarray(ids)[pick], jnp.int32), UV))
    want = np.stack([_reference(*COMBOS[k]) for k in range(len(COMBOS))])[pick, :, np.arange(n)].T
    np.testing.assert_allclose(got, want, atol=2e-5)
