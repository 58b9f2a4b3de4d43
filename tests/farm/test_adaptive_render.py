"""A noise target with the real work unit on a real local Ray, end to end: one job, interrupted
mid-way and resumed (the driver decides again from the store). Every tile ends at or below the
target or at the spp, holds the tracer's own render at its spp bit for bit (nothing lost, nothing
counted twice across the interruption), its spp is what the stored samples decide, and
`farm status --json` reports each frame's spp and noise.

That any order of results, any interruption and any group count end in the same bits is
test_adaptive.py's, with a stub work unit (one real job costs a Ray start-up and a compile).
"""
import dataclasses
import json

import numpy as np
import pytest

import tracer
from farm import job
from farm.adaptive import Shot, stored_noise
from farm.records import TileRecord
from farm.results import Commits
from farm.scheduler import run_job
from tests.helpers.farm_cases import exported, farm_main, orbit_spec

NOISE = 0.08
MIN_SPP, SPP = 16, 32  # checkpoints at 2, 3 and 4 chunks of 8 samples
INTERRUPT_AFTER = 8    # results folded before the driver is stopped


@pytest.fixture(scope="module")
def resumed(local_ray, tmp_path_factory):
    """The orbit job with a noise target, stopped after ``INTERRUPT_AFTER`` results and resumed:
    (spec, store, the chunks each tile held when it stopped)."""
    spec = dataclasses.replace(orbit_spec(tmp_path_factory.mktemp("adaptive") / "a.zarr", spp=SPP),
                               chunk_passes=2, noise=NOISE, min_spp=MIN_SPP)
    spec, store = job.prepare(spec)
    accept, taken = Commits.accept, []  # the workers write their results, the driver commits them

    def interrupted(self, task, *answer):
        if len(taken) == INTERRUPT_AFTER:
            raise KeyboardInterrupt  # the driver stops here, mid-job
        taken.append(task)
        return accept(self, task, *answer)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Commits, "accept", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    stopped = store.all_records()["folded"].copy()
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    return spec, store, stopped


def _spp(spec, store):
    return store.all_records()["folded"] * spec.tree.chunk_samples


def test_tiles_get_samples_where_the_noise_is(resumed):
    spec, store, stopped = resumed
    records, bad = store.verified_records()
    spp = records["folded"] * spec.tree.chunk_samples
    assert 0 < stopped.sum() < records["folded"].sum()  # it was stopped mid-job
    assert bad == [] and spp.min() >= MIN_SPP and len(np.unique(spp)) >= 2, spp
    for key in np.ndindex(spp.shape):
        assert spp[key] == spec.spp or stored_noise(store, spec.tree, key, TileRecord.of(records[key])) <= NOISE
    # The spp is what the stored samples decide: deciding again asks for nothing more.
    np.testing.assert_array_equal(Shot(spec, store).tile_spp(records), spp)


def test_a_tile_at_s_spp_is_the_tracers_render_at_s_spp(resumed, tmp_path):
    spec, store, _ = resumed
    spp, images = _spp(spec, store), exported(store.url, tmp_path)
    for f, frame in enumerate(range(spec.frames[0], spec.frames[1] + 1)):
        scene = tracer.load_scene(spec.scene, resolution=spec.resolution, **dict(spec.params_at(frame)))
        for s in np.unique(spp[f]):
            want = tracer.render(scene, spp=int(s), seed=spec.seed, frame=frame, tile=spec.tile,
                                 pass_size=spec.pass_size, chunk_passes=spec.chunk_passes)
            for ty, tx in zip(*np.nonzero(spp[f] == s)):
                y0, y1, x0, x1 = store.tile_box(int(ty), int(tx))
                np.testing.assert_array_equal(images[f][y0:y1, x0:x1], want[y0:y1, x0:x1])


def test_status_reports_each_frames_spp_and_noise(resumed):
    spec, store, _ = resumed
    code, out, err = farm_main("status", store.url, "--json")
    assert code == 0, err
    per_frame = json.loads(out)["per_frame"]
    spp, records = _spp(spec, store), store.all_records()
    pixels = np.array([[store.tile_pixels(ty, tx) for tx in range(store.tiles_x)] for ty in range(store.tiles_y)])
    assert [p["frame"] for p in per_frame] == [0, 1, 2]
    for f, p in enumerate(per_frame):
        assert p["spp"] == pytest.approx((spp[f] * pixels).sum() / pixels.sum())
        tiles = np.array([[stored_noise(store, spec.tree, (f, ty, tx), TileRecord.of(records[f, ty, tx])) for tx in range(store.tiles_x)]
                          for ty in range(store.tiles_y)])
        assert p["noise"] == pytest.approx(np.sqrt((tiles ** 2 * pixels).sum() / pixels.sum()))
    code, out, _ = farm_main("status", store.url)
    assert code == 0 and f"noise {NOISE}: {MIN_SPP} to {SPP} spp a tile" in out
    assert f"frame 2: {per_frame[2]['spp']:.1f} spp, noise" in out
