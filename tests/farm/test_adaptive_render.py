"""A noise target with the real work unit on a real local Ray: a run interrupted and resumed ends in
the bits of an uninterrupted run on another number of groups, every tile at s spp holds the
tracer's own render at s spp, and `farm status --json` reports each frame's spp and noise."""
import dataclasses
import json

import numpy as np
import pytest

import tracer
from farm import job
from farm.adaptive import stored_noise
from farm.folding import Folds
from farm.scheduler import run_job
from farm.spec import GroupsSpec
from farm.store import FOLDED
from tests.helpers.farm_cases import exported, farm_main, orbit_spec

NOISE = 0.08


def _spec(store, groups=1):
    return dataclasses.replace(orbit_spec(store, spp=48), chunk_passes=2, noise=NOISE, min_spp=16,
                               groups=GroupsSpec(count=groups))


def _state_bits(store):
    return np.asarray(store.state[...]).view(np.uint32)


@pytest.fixture(scope="module")
def whole(local_ray, tmp_path_factory):
    """An uninterrupted run on two groups: (spec, store)."""
    spec, store = job.prepare(_spec(tmp_path_factory.mktemp("whole") / "a.zarr", groups=2))
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    return spec, store


def test_tiles_get_samples_where_the_noise_is(whole):
    spec, store = whole
    records, bad = store.verified_records()
    spp = records[..., FOLDED] * spec.tree.chunk_samples
    assert bad == [] and spp.min() >= 16 and len(np.unique(spp)) >= 2, spp
    for key in np.ndindex(spp.shape):
        assert spp[key] == spec.spp or stored_noise(store, spec.tree, key, records[key]) <= NOISE


def test_interrupted_and_resumed_is_the_uninterrupted_run(whole, tmp_path, monkeypatch):
    spec, store = job.prepare(_spec(tmp_path / "b.zarr"))
    accept, taken = Folds.accept, []

    def interrupted(self, task, value, weight):
        if len(taken) == 12:
            raise KeyboardInterrupt  # the driver stops here, mid-job
        taken.append(task)
        return accept(self, task, value, weight)
    monkeypatch.setattr(Folds, "accept", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    monkeypatch.setattr(Folds, "accept", accept)
    assert 0 < store.all_records()[..., FOLDED].sum() < whole[1].all_records()[..., FOLDED].sum()
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    np.testing.assert_array_equal(store.all_records(), whole[1].all_records())
    np.testing.assert_array_equal(_state_bits(store), _state_bits(whole[1]))


def test_a_tile_at_s_spp_is_the_tracers_render_at_s_spp(whole, tmp_path):
    spec, store = whole
    spp = store.all_records()[..., FOLDED] * spec.tree.chunk_samples
    images = exported(store.url, tmp_path)
    for f, frame in enumerate(range(spec.frames[0], spec.frames[1] + 1)):
        scene = tracer.load_scene(spec.scene, resolution=spec.resolution, **dict(spec.params_at(frame)))
        for s in np.unique(spp[f]):
            want = tracer.render(scene, spp=int(s), seed=spec.seed, frame=frame, tile=spec.tile,
                                 pass_size=spec.pass_size, chunk_passes=spec.chunk_passes)
            for ty, tx in zip(*np.nonzero(spp[f] == s)):
                y0, y1, x0, x1 = store.tile_box(int(ty), int(tx))
                np.testing.assert_array_equal(images[f][y0:y1, x0:x1], want[y0:y1, x0:x1])


def test_status_reports_each_frames_spp_and_noise(whole):
    spec, store = whole
    code, out, err = farm_main("status", store.url, "--json")
    assert code == 0, err
    per_frame = json.loads(out)["per_frame"]
    spp = store.all_records()[..., FOLDED] * spec.tree.chunk_samples
    pixels = np.array([[store.tile_pixels(ty, tx) for tx in range(store.tiles_x)] for ty in range(store.tiles_y)])
    assert [p["frame"] for p in per_frame] == [0, 1, 2]
    records = store.all_records()
    for f, p in enumerate(per_frame):
        assert p["spp"] == pytest.approx((spp[f] * pixels).sum() / pixels.sum())
        tiles = np.array([[stored_noise(store, spec.tree, (f, ty, tx), records[f, ty, tx]) for tx in range(store.tiles_x)]
                          for ty in range(store.tiles_y)])
        assert p["noise"] == pytest.approx(np.sqrt((tiles ** 2 * pixels).sum() / pixels.sum()))
    code, out, _ = farm_main("status", store.url)
    assert code == 0 and "noise 0.08: 16 to 48 spp a tile" in out and f"frame 2: {per_frame[2]['spp']:.1f} spp, noise" in out
