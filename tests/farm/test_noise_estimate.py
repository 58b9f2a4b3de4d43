"""The noise estimator (``farm.adaptive``) against the real error: the tracer's chunks of the
Cornell box, folded as the farm folds them, give an estimated relative MSE (noise^2) within
``FACTOR`` of the real relative MSE against Mitsuba 3's 16384-spp reference
(tests/data/references), at two sample counts."""
import numpy as np
import pytest

import tracer
from farm.adaptive import tile_noise
from farm.tree import STATE_CHANNELS, fold, tile_sums
from tests.helpers.farm_cases import ROOT
from tests.helpers.image_metrics import read_exr, relative_mse
from tests.helpers.tiles import render_passes
from tracer.shared import resolve

FACTOR = 1.5     # estimated / real relative MSE, either way
CHUNK_SPP = 16   # one pass of 16 samples a chunk


@pytest.fixture(scope="module")
def chunks():
    """The states of the 48x48 Cornell box, one tile, after 4 and after 8 chunks of 16 samples."""
    scene = tracer.load_scene(str(ROOT / "examples" / "cbox.xml"), res=48)
    states, state = {}, np.zeros((48, 48, STATE_CHANNELS), np.float32)
    for c in range(8):
        v, w = render_passes(scene, c, 1, size=(48, 48), pass_size=CHUNK_SPP, spp=1 << 20)
        state = fold(state, np.asarray(v), np.asarray(w))
        if c + 1 in (4, 8):
            states[c + 1] = state
    return states


@pytest.mark.parametrize("n", [4, 8])
def test_the_estimate_is_the_real_error_within_a_factor(chunks, n):
    ref = read_exr(ROOT / "tests" / "data" / "references" / "cbox.exr")
    state = chunks[n]
    real = relative_mse(resolve(*tile_sums(state)), ref)
    estimate = tile_noise(state, n) ** 2
    assert 1 / FACTOR < estimate / real < FACTOR, (n, estimate, real)
    # Falls as 1/spp (against the Mitsuba's own figure of this scene at 32 spp: 0.00295).
    assert estimate == pytest.approx(0.00295 * 32 / (n * CHUNK_SPP), rel=0.5)
