"""The canonical reduction tree (``farm.tree``) through the real store, planner and folding: any
sequence of spp values, any order of results, any interruption (a driver killed between two
results, or in the middle of writing a fold) ends in the bits of a fresh job at the final spp,
and in the bits of ``tracer.render``'s loop of chunks.

The work unit is a stub with the real one's contract (``cluster.task.TileTask``): passes added
one at a time to the start accumulator, in pass order, each pass the float32 sum of its samples
in sample order, samples at or past the spp masked out. Its samples are hashed values of very
different magnitudes, so that any other order of additions changes bits. The real work unit is
held to the same tree by tests/farm/test_farm.py (a job refined and one killed and resumed,
against the tracer's own render).
"""
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm import job
from farm.folding import Folds
from farm.planner import plan
from farm.records import TileRecord
from farm.scheduler import _JobRun
from farm.store import FrameStore
from farm.tree import STATE_CHANNELS, Tree, fold, variance
from tests.helpers.farm_cases import format_2, orbit_spec


def _sample(seed, frame, ys, xs, s):
    """(value (h, w, 3), weight (h, w)) float32 of sample ``s`` at film pixels (ys, xs): a hash."""
    key = (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(frame) * np.uint64(1_000_003)
           + ys.astype(np.uint64) * np.uint64(7919) + xs.astype(np.uint64) * np.uint64(104_729)
           + np.uint64(s) * np.uint64(2_654_435_761))
    bits = [(key * np.uint64(m) >> np.uint64(40)) & np.uint64(0xFFFFFF) for m in (3, 5, 7, 11)]
    u = [b.astype(np.float32) / np.float32(2 ** 24) for b in bits]
    scale = np.float32(10.0) ** np.floor(u[3] * 6 - 3).astype(np.float32)  # 1e-3 to 1e2
    return np.stack(u[:3], axis=-1) * scale[..., None], np.float32(0.5) + u[3]


def stub_unit(task, sample=_sample):
    """What ``tracer.rendering.render_tile`` does to a ``TileTask``, with hashed samples
    (``sample(seed, frame, ys, xs, s)``)."""
    ys, xs = np.meshgrid(task.tile_y + np.arange(task.tile_h), task.tile_x + np.arange(task.tile_w), indexing="ij")
    if task.start is None:
        value, weight = np.zeros((task.tile_h, task.tile_w, 3), np.float32), np.zeros((task.tile_h, task.tile_w), np.float32)
    else:
        value, weight = (np.array(a, np.float32) for a in task.start)
    for k in range(task.n_passes):
        pv, pw = np.zeros_like(value), np.zeros_like(weight)
        first = (task.first_pass + k) * task.pass_size
        for s in range(first, min(first + task.pass_size, task.spp)):
            sv, sw = sample(task.seed, task.frame, ys, xs, s)
            pv, pw = pv + sv, pw + sw
        value, weight = value + pv, weight + pw
    return value, weight


class Kill(Exception):
    """The driver dies here."""


def _run(spec, store, order, kill_after=None, tear_at=None):
    """One run of the driver over ``store`` with the stub unit: results handed back in an order
    drawn from ``order`` (a Random) within each tile's window; killed after ``kill_after``
    results, or ``tear_at`` array writes into the run (before that write)."""
    runner = _JobRun(spec, store, [], 3, 0, SimpleNamespace(), lambda *_: None, 1, None)
    records, _ = runner.verify_store()
    folds = runner.folds = Folds(store, records, spec.spp, window=3)
    queue = plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels).todo
    writes = [0]
    originals = {name: getattr(store, name) for name in ("_write", "_put_record")}

    def counted(write):
        def counted_write(*a):
            if tear_at is not None and writes[0] >= tear_at:
                raise Kill()
            writes[0] += 1
            write(*a)
        return counted_write
    for name, write in originals.items():
        setattr(store, name, counted(write))
    try:
        inflight, done = [], 0
        while queue or inflight:
            startable = [t for t in queue if folds.may_start(t)][:4]  # a few groups' worth
            for t in startable:
                queue.remove(t)
                tile_task = runner.tile_task(t)
                # The job's size, that the work unit's drain phases are chosen by.
                assert tile_task.job_samples == spec.n_frames * spec.spp * store.width * store.height
                inflight.append((t, stub_unit(tile_task)))
            task, (value, weight) = inflight.pop(order.randrange(len(inflight)))
            if kill_after is not None and done >= kill_after:
                raise Kill()
            folds.accept(task, value, weight)
            done += 1
        assert folds.held() == 0
    except Kill:
        pass
    finally:
        for name, write in originals.items():
            setattr(store, name, write)


def _frames(spec, store):
    records, bad = store.verified_records()
    assert bad == []
    return [store.frame_sums(f, records[f]) for f in range(spec.n_frames)], records


def _direct(spec, store):
    """The frames as ``tracer.render`` sums them: per tile, chunks from zero, added to a zero
    accumulator in chunk order (the stub unit in place of the tracer's)."""
    runner = _JobRun(spec, store, [], 3, 0, SimpleNamespace(), lambda *_: None, 1, None)
    runner.folds = Folds(store, runner.verify_store()[0], spec.spp)  # results handed back, as without a shared root
    g, n_passes = spec.chunk_passes, -(-spec.spp // spec.pass_size)
    out = []
    for f in range(spec.n_frames):
        value, weight = np.zeros((store.height, store.width, 3), np.float32), np.zeros((store.height, store.width), np.float32)
        for ty in range(store.tiles_y):
            for tx in range(store.tiles_x):
                tv, tw = np.zeros((runner.th, runner.tw, 3), np.float32), np.zeros((runner.th, runner.tw), np.float32)
                for first in range(0, n_passes, g):
                    task = dataclasses.replace(runner.tile_task(_task(spec, f, ty, tx)), first_pass=first,
                                               n_passes=min(g, n_passes - first), start=None)
                    v, w = stub_unit(task)
                    tv, tw = tv + v, tw + w
                y0, y1, x0, x1 = store.tile_box(ty, tx)
                value[y0:y1, x0:x1], weight[y0:y1, x0:x1] = tv[:y1 - y0, :x1 - x0], tw[:y1 - y0, :x1 - x0]
        out.append((value, weight))
    return out


def _task(spec, f, ty, tx):
    from farm.planner import Task
    return Task((f, 0, ty, tx), spec.frames[0] + f, 0, 1, False, 1)


def _same(got, want):
    for (gv, gw), (wv, ww) in zip(got, want):
        np.testing.assert_array_equal(gv.view(np.uint32), wv.view(np.uint32))
        np.testing.assert_array_equal(gw.view(np.uint32), ww.view(np.uint32))


@st.composite
def histories(draw):
    """(pass size, chunk passes, spp values in order, per run: (seed of the order, kill after,
    tear at)); the last run of the last spp finishes."""
    pass_size, chunk = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    spps = sorted(draw(st.lists(st.integers(1, 20), min_size=1, max_size=3)))
    runs = []
    for spp in spps:
        for _ in range(draw(st.integers(0, 2))):
            cut = draw(st.sampled_from(["kill", "tear"]))
            at = draw(st.integers(0, 20))
            runs.append((spp, draw(st.integers(0, 2**16)), at if cut == "kill" else None, at if cut == "tear" else None))
        runs.append((spp, draw(st.integers(0, 2**16)), None, None))
    return pass_size, chunk, runs


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(histories())
def test_any_history_ends_in_the_bits_of_a_fresh_job(tmp_path_factory, history):
    import random
    pass_size, chunk, runs = history
    root = tmp_path_factory.mktemp("tree")
    base = dataclasses.replace(orbit_spec(root / "a.zarr", frames=(1, 1), spp=1), resolution=(20, 12), tile=8,
                               pass_size=pass_size, chunk_passes=chunk)
    for spp, seed, kill_after, tear_at in runs:
        spec, store = job.prepare(dataclasses.replace(base, spp=spp))
        _run(spec, store, random.Random(seed), kill_after, tear_at)
    got, records = _frames(spec, store)
    fresh_spec, fresh = job.prepare(dataclasses.replace(base, spp=spec.spp, store=str(root / "fresh.zarr")))
    _run(fresh_spec, fresh, random.Random(0))
    want, _ = _frames(fresh_spec, fresh)
    _same(got, want)
    _same(got, _direct(spec, store))
    assert np.all(records["folded"] == spec.tree.complete(spec.spp))
    assert plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels).todo == []


def test_the_tree_does_not_depend_on_the_spp():
    small, large = (orbit_spec("s.zarr", spp=spp).planned() for spp in (1, 65536))
    assert small.tree == large.tree == Tree(pass_size=4, chunk_passes=16)
    default = dataclasses.replace(orbit_spec("s.zarr", spp=3), pass_size=None).planned()
    assert default.tree == Tree(16, 4) and Tree(16, 4).complete(65536) == 1024
    assert (Tree(4, 16).complete(70), Tree(4, 16).tail_passes(70), Tree(4, 16).n_chunks(70)) == (1, 2, 2)


def test_a_finished_store_is_bounded_whatever_the_spp(tmp_path):
    """Per finished frame: the state and at most one tail, nothing per chunk (the layout's bytes,
    uncompressed: 14 float32 a pixel against the frame's 4)."""
    sizes = {}
    for spp in (4, 64, 4096):
        spec, store = job.prepare(dataclasses.replace(orbit_spec(tmp_path / f"{spp}.zarr", frames=(0, 0), spp=spp),
                                                      resolution=(20, 12), tile=8))
        # Fold made-up chunks: what a finished store of this spp holds.
        records, _ = store.verified_records()
        folds = Folds(store, records, spp, window=10**6)
        for task in plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels).todo:
            folds.accept(task, np.ones((8, 8, 3), np.float32), np.ones((8, 8), np.float32))
        data = sum(p.stat().st_size for a in ("state", "tail") for p in (tmp_path / f"{spp}.zarr" / a).rglob("*")
                   if p.is_file() and p.name != "zarr.json")
        sizes[spp] = data
        assert store.state.nbytes + store.tail.nbytes <= 4 * 20 * 12 * 4 * 4
    assert sizes[4096] <= sizes[64] * 1.5  # compressed: about the same, not 64 times more


def test_variance_is_the_spread_of_the_chunks():
    rng = np.random.default_rng(1)
    chunks = rng.normal(2.0, 0.5, size=(400, 3, 3)).astype(np.float32)
    state = np.zeros((3, STATE_CHANNELS), np.float32)
    for c in chunks:
        state = fold(state, c, np.ones(3, np.float32))
    got = variance(state, len(chunks))
    np.testing.assert_allclose(got, chunks.var(axis=0, ddof=1) / len(chunks), rtol=1e-3)
    np.testing.assert_allclose(got * len(chunks), 0.25, rtol=0.2)


def test_an_older_store_is_refused_by_its_format(tmp_path):
    """Format 1 (sums per chunk) is refused by name."""
    spec, store = job.prepare(orbit_spec(tmp_path / "old.zarr"))
    store.group.attrs["farm"] = dict(store.meta, format="jaxfarm-frames/1")
    from farm.store import StoreError
    with pytest.raises(StoreError, match='store format "jaxfarm-frames/1" is not read by this farm'):
        FrameStore.open(store.url)


def test_a_format_2_store_is_read_and_written_as_it_is(tmp_path):
    """Format 2 kept a Zarr chunk of records per tile and a folder per tile (format 3: records per
    frame, the tiles' chunks in one folder): its stores open, take folds (a record written alone,
    and records repaired by frame) and keep their layout, holding what a format-3 store holds."""
    got = {}
    for name in ("2", "3"):
        spec, store = job.prepare(orbit_spec(tmp_path / f"{name}.zarr", frames=(0, 1), spp=96))
        if name == "2":
            format_2(store)
        store = FrameStore.open(store.url)
        records, _ = store.verified_records()
        folds = Folds(store, records, spec.spp, window=10**6)
        for task in plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels).todo:
            value = np.full((16, 16, 3), 1.0 + sum(task.key), np.float32)
            folds.accept(task, value, np.ones((16, 16), np.float32))
        store.state[1, 0:16, 0:16, 0] += 1.0  # a damaged tile: its record is repaired (zeroed)
        store = FrameStore.open(store.url)
        records, damaged = store.verified_records(repair=True)
        assert damaged == [(1, 0, 0)]
        got[name] = records, store.state[...], store.records.chunks, store.state.metadata.encode_chunk_key((1, 0, 2, 0))
    np.testing.assert_array_equal(got["2"][0], got["3"][0])
    np.testing.assert_array_equal(got["2"][1], got["3"][1])
    assert got["2"][2:] == ((1, 1, 1, 6), "c/1/0/2/0") and got["3"][2:] == ((1, 2, 3, 6), "c.1.0.2.0")
    assert TileRecord.of(FrameStore.open(str(tmp_path / "2.zarr")).verified_records()[0][1, 0, 0]) == TileRecord()
