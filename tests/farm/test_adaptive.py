"""A noise target (``farm.adaptive``) through the real store, planner, folding and decisions, with a
stub work unit whose noise grows across the film: every tile ends at or below the target or at the
spp, its spp is a function of its samples alone (any order of results, any interruption, ends in
the same bits), and a tile at s spp holds the bits of a uniform job at s spp.

The stub is test_tree.py's (the real work unit's contract: passes added in order to the start
accumulator, samples past the spp masked out) with samples of a known spread. The real work unit is
held to the same by test_adaptive_render.py.
"""
import contextlib
import dataclasses
import random
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm import job
from farm.adaptive import DEFAULT_MIN_SPP, Shot, frame_noise, relative_noise, stored_noise, tile_noise
from farm.errors import SpecError
from farm.folding import Folds
from farm.planner import plan
from farm.records import TileRecord
from farm.scheduler import _JobRun
from farm.tree import CHUNK_SPP, NOISE_CHUNK_SPP, STATE_CHANNELS, fold
from tests.farm.test_tree import stub_unit
from tests.helpers.farm_cases import orbit_spec

WIDTH, HEIGHT, TILE = 32, 8, 8


def _mix(x):
    """MurmurHash3's 64-bit finalizer, the top 24 bits."""
    for m in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        x = (x ^ (x >> np.uint64(33))) * np.uint64(m)
    return (x ^ (x >> np.uint64(33))) >> np.uint64(40)


def _sample(seed, frame, ys, xs, s):
    """One sample (value (h, w, 3), weight (h, w)) at film pixels (ys, xs): 0.5 plus a hashed
    uniform whose spread grows with x (tiles to the right are noisier) and with the frame."""
    key = (np.uint64(frame) * np.uint64(1_000_003) + ys.astype(np.uint64) * np.uint64(7919)
           + xs.astype(np.uint64) * np.uint64(104_729) + np.uint64(s) * np.uint64(2_654_435_761))
    u = np.stack([_mix(key + np.uint64(c)).astype(np.float32) / np.float32(2 ** 24) for c in (1, 2, 3)], axis=-1)
    spread = (np.float32(0.05) + (xs / WIDTH).astype(np.float32) ** 2 * np.float32(1 + frame))[..., None]
    return np.float32(0.5) + spread * (u - np.float32(0.5)), np.ones(ys.shape, np.float32)


class Kill(Exception):
    """The driver dies here."""


def _run(spec, store, order, kill_after=None, groups=4):
    """The scheduler's loop over ``store`` with the stub unit: results handed back in an order
    drawn from ``order`` (a Random) among ``groups`` tasks in flight; killed after ``kill_after``
    results. Returns the results taken."""
    runner = _JobRun(spec, store, [], 3, 0, SimpleNamespace(), lambda *_: None, 1, None)
    records, _ = runner.verify_store()
    shot = Shot(spec, store)
    folds = runner.folds = Folds(store, records, spec.spp, window=3)
    queue = plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels, shot.tile_spp(records)).todo
    inflight, done = [], 0
    while queue or inflight:
        for t in [t for t in queue if folds.may_start(t)][:groups - len(inflight)]:
            queue.remove(t)
            inflight.append((t, stub_unit(runner.tile_task(t), _sample)))
        task, (value, weight) = inflight.pop(order.randrange(len(inflight)))
        if kill_after is not None and done >= kill_after:
            raise Kill()
        if folds.accept(task, value, weight):
            queue[:0] = shot.more(task.line, TileRecord.of(folds.records[task.line]))
        done += 1
    return done


def _spec(store, spp=64, noise=0.02, min_spp=16, frames=(0, 1)):
    base = orbit_spec(store, frames=frames, spp=spp)
    return dataclasses.replace(base, resolution=(WIDTH, HEIGHT), tile=TILE, pass_size=2, chunk_passes=2,
                               noise=noise, min_spp=min_spp)


def _bits(store, spec):
    records, bad = store.verified_records()
    assert bad == []
    return records, [np.asarray(store.state[f]).view(np.uint32) for f in range(spec.n_frames)]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """An uninterrupted adaptive job of the stub: (spec, store, records, state bits)."""
    spec, store = job.prepare(_spec(tmp_path_factory.mktemp("fresh") / "a.zarr"))
    _run(spec, store, random.Random(0))
    return (spec, store, *_bits(store, spec))


def test_tiles_end_at_or_below_the_target_or_at_the_spp(fresh):
    spec, store, records, _ = fresh
    chunk = spec.tree.chunk_samples
    spp = records["folded"] * chunk
    assert spp.min() == spec.min_spp and spp.max() == spec.spp  # the least, and the most
    assert len(np.unique(spp)) >= 3, spp  # samples went where the noise is
    assert np.all(spp[:, :, 0] <= spp[:, :, -1]) and np.all(spp[0] <= spp[1])
    for key in np.ndindex(records.shape[:3]):
        noise = stored_noise(store, spec.tree, key, TileRecord.of(records[key]))
        assert noise <= spec.noise or spp[key] == spec.spp
    assert plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels,
                Shot(spec, store).tile_spp(records)).todo == []
    assert job.frame_status(store, spec, records) == [1.0, 1.0]


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kills=st.lists(st.integers(0, 40), max_size=3), seed=st.integers(0, 2 ** 16), groups=st.integers(1, 6))
def test_killed_and_resumed_in_any_order_ends_in_the_same_bits(tmp_path_factory, fresh, kills, seed, groups):
    spec, _, records, bits = fresh
    spec, store = job.prepare(_spec(tmp_path_factory.mktemp("resumed") / "a.zarr"))
    order = random.Random(seed)
    for kill in kills:
        with contextlib.suppress(Kill):  # (killed, unless the job has no more than ``kill`` results left)
            _run(spec, store, order, kill_after=kill, groups=groups)
    _run(spec, store, order, groups=groups)
    got_records, got = _bits(store, spec)
    np.testing.assert_array_equal(got_records["folded"], records["folded"])
    for a, b in zip(got, bits):
        np.testing.assert_array_equal(a, b)


def test_a_tile_at_s_spp_holds_a_uniform_job_at_s_spp(tmp_path, fresh):
    spec, store, records, bits = fresh
    chunk = spec.tree.chunk_samples
    for s in np.unique(records["folded"]) * chunk:
        uniform, ustore = job.prepare(dataclasses.replace(spec, spp=int(s), noise=None, min_spp=None,
                                                          store=str(tmp_path / f"u{s}.zarr")))
        _run(uniform, ustore, random.Random(1))
        _, ubits = _bits(ustore, uniform)
        for key in zip(*np.nonzero(records["folded"] * chunk == s)):
            f, ty, tx = (int(k) for k in key)
            y0, y1, x0, x1 = store.tile_box(ty, tx)
            np.testing.assert_array_equal(bits[f][y0:y1, x0:x1], ubits[f][y0:y1, x0:x1])


def test_a_tighter_target_goes_on_and_a_looser_one_keeps_what_is_there(tmp_path, fresh):
    spec, _, records, bits = fresh
    loose, store = job.prepare(_spec(tmp_path / "a.zarr", noise=0.04))
    _run(loose, store, random.Random(2))
    first, _ = _bits(store, loose)
    assert np.all(first["folded"] <= records["folded"]) and np.any(first["folded"] < records["folded"])
    tight, store = job.prepare(_spec(tmp_path / "a.zarr", noise=0.02))
    _run(tight, store, random.Random(3))
    got_records, got = _bits(store, tight)
    np.testing.assert_array_equal(got_records["folded"], records["folded"])
    for a, b in zip(got, bits):
        np.testing.assert_array_equal(a, b)
    again, store = job.prepare(_spec(tmp_path / "a.zarr", noise=0.5))
    assert _run(again, store, random.Random(4)) == 0  # looser: nothing to do, nothing dropped


def test_the_spp_past_whole_chunks_ends_in_a_tail(tmp_path):
    """A job spp that is not a whole number of chunks: the noisiest tiles end with a tail at it."""
    spec, store = job.prepare(_spec(tmp_path / "a.zarr", spp=42, noise=0.001, min_spp=8, frames=(1, 1)))
    _run(spec, store, random.Random(0))
    records, _ = _bits(store, spec)
    assert np.all(records["folded"] == 10) and np.all(records["tail_passes"] == 1)
    fn = frame_noise(store, spec, records[0], 0)
    assert fn.frame == 1 and fn.spp == 42.0 and fn.noise > 0.001


def test_the_estimator_is_the_spread_of_the_chunks():
    rng = np.random.default_rng(3)
    sigma, n = 0.2, 16
    state = np.zeros((8, 8, STATE_CHANNELS), np.float32)
    for _ in range(n):
        state = fold(state, rng.normal(1.0, sigma, (8, 8, 3)).astype(np.float32), np.ones((8, 8), np.float32))
    want = np.sqrt(sigma ** 2 / n / (1.0 + 0.01))
    assert tile_noise(state, n) == pytest.approx(want, rel=0.15)
    assert tile_noise(state, 1) is None
    # Exact sums: the same noise in any order of its terms.
    value, var = rng.random((64, 3)), rng.random((64, 3)) * 1e-3
    perm = rng.permutation(64)
    assert relative_noise(value, var) == relative_noise(value[perm], var[perm])


def test_a_new_target_job_has_small_chunks_and_a_store_keeps_its_own(tmp_path):
    """More chunks, more degrees of freedom for the estimate: a job made with a target has chunks
    of NOISE_CHUNK_SPP samples, and the tree of a store made without one stays its own."""
    made, store = job.prepare(orbit_spec(tmp_path / "n.zarr", spp=1024, noise=0.05))
    assert made.tree.chunk_samples == NOISE_CHUNK_SPP and Shot(made, store).least == DEFAULT_MIN_SPP
    job.prepare(orbit_spec(tmp_path / "u.zarr", spp=512))
    later, store = job.prepare(orbit_spec(tmp_path / "u.zarr", spp=1024, noise=0.05))
    assert later.tree.chunk_samples == CHUNK_SPP and Shot(later, store).checkpoints[:2] == [4, 5]


@pytest.mark.parametrize("fields, message", [
    ({"noise": 0.0}, "noise must be a number above 0"),
    ({"noise": float("nan")}, "noise must be a number above 0"),
    ({"noise": True}, "noise must be a number above 0"),
    ({"noise": 0.1, "min_spp": 200}, "min_spp must be a whole number of samples .at most the spp. from 1 to 64"),
    ({"min_spp": 16}, "min_spp is only for a noise target"),
])
def test_a_bad_target_is_refused_by_name(fields, message):
    with pytest.raises(SpecError, match=message):
        dataclasses.replace(orbit_spec("s.zarr", spp=64), **fields)


def test_a_job_file_and_the_command_line_set_the_target(tmp_path):
    from farm.spec import JobSpec
    from tests.helpers.farm_cases import ORBIT, farm_main
    path = tmp_path / "job.toml"
    path.write_text(f'scene = "{ORBIT}"\nstore = "a.zarr"\nspp = 1024\nnoise = 0.05\nmin_spp = 128\n')
    spec = JobSpec.from_toml(str(path))
    assert (spec.noise, spec.min_spp) == (0.05, 128)
    assert JobSpec.from_json(spec.to_json()) == spec
    code, _, err = farm_main("render", ORBIT, "--out", tmp_path / "b.zarr", "--spp", "64", "--min-spp", "16")
    assert code == 2 and "min_spp is only for a noise target" in err, err
    assert not (tmp_path / "b.zarr").exists()
