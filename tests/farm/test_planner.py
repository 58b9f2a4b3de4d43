"""The planner, for any spec: every (frame, chunk, tile) is rendered exactly once, whole.

Hypothesis draws the job (frames, spp, pass size, film and tile size; the chunk size is what
``JobSpec.planned`` picks, as a new store does) and what a store may already hold: the tasks an
earlier run of the same job finished, possibly at a lower spp (refining a job keeps its pass and
chunk sizes and may grow its last chunk or add chunks). For every task key, the passes the store
keeps and the passes the plan renders must together be the chunk's passes, each exactly once,
and what the store keeps must hold the samples the job asks of those passes now.
"""
import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.planner import covered, plan
from farm.spec import MAX_CHUNKS, JobSpec


def _film(width, height, tile):
    """(tiles_y, tiles_x, tile_pixels) as a store of this film size cuts it (edge tiles cut short)."""
    tiles_y, tiles_x = -(-height // tile), -(-width // tile)

    def tile_pixels(ty, tx):
        return min(tile, height - ty * tile) * min(tile, width - tx * tile)
    return tiles_y, tiles_x, tile_pixels


def _chunks(spec):
    """The job's chunks as pass ranges [start, end), from the spec's definition."""
    n_passes = -(-spec.spp // spec.pass_size)
    return [(s, min(s + spec.chunk_passes, n_passes)) for s in range(0, n_passes, spec.chunk_passes)]


def _finish(spec, records, tasks, rng, share):
    """Records of ``records`` after a run that finished a random ``share`` of ``tasks`` at ``spec.spp``."""
    records = records.copy()
    for task in tasks:
        if rng.random() < share:
            records[task.key] = (task.chunk_end, spec.spp, 0)
    return records


@st.composite
def jobs(draw):
    """(planned spec, film (tiles_y, tiles_x, tile_pixels), records) of a job and a store of it."""
    first = draw(st.integers(0, 100))
    n_frames = draw(st.integers(1, 3))
    old_spp = draw(st.integers(1, 1500))
    pass_size = draw(st.one_of(st.none(), st.integers(1, 40)))
    tile = draw(st.integers(8, 64))
    width, height = draw(st.integers(1, 96)), draw(st.integers(1, 96))
    old = JobSpec(scene="scene.xml", frames=(first, first + n_frames - 1), spp=old_spp, store="job.zarr",
                  tile=tile, pass_size=pass_size).planned()
    # A refined job keeps the store's pass and chunk sizes; at most 64 chunks keep examples small.
    most = MAX_CHUNKS * old.chunk_passes * old.pass_size
    spp = draw(st.integers(old_spp, max(old_spp, most)))
    spec = dataclasses.replace(old, spp=spp)
    film = _film(width, height, tile)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    records = np.zeros((n_frames, len(_chunks(old)), film[0], film[1], 3), np.uint32)
    records = _finish(old, records, plan(old, records, *film).todo, rng, draw(st.sampled_from([0.0, 0.3, 1.0])))
    if draw(st.booleans()):
        # A run of the refined job: ``set_spp`` first grows the records to its chunks.
        grown = np.zeros((n_frames, len(_chunks(spec))) + records.shape[2:], np.uint32)
        grown[:, :records.shape[1]] = records
        records = _finish(spec, grown, plan(spec, grown, *film).todo, rng, draw(st.sampled_from([0.0, 0.5])))
    return spec, film, records


def _check_exactly_once(spec, film, records):
    tiles_y, tiles_x, tile_pixels = film
    p = spec.pass_size
    job = plan(spec, records, *film)
    keys = [t.key for t in job.todo]
    assert keys == sorted(set(keys)), "tasks repeat, or are not frame by frame, chunk by chunk, tile by tile"
    todo = dict(zip(keys, job.todo))
    chunks = _chunks(spec)
    assert job.n_chunks == len(chunks)
    assert sum(covered(s, e - s, spec.spp, p) for s, e in chunks) == spec.spp  # the chunks hold every sample
    done_units = 0
    for f in range(spec.n_frames):
        for c, (start, end) in enumerate(chunks):
            for ty in range(tiles_y):
                for tx in range(tiles_x):
                    task = todo.get((f, c, ty, tx))
                    if task is None:
                        kept, rendered = (start, end), (end, end)
                    else:
                        assert task.frame == spec.frames[0] + f and task.chunk_end == end - start
                        kept = (start, task.first_pass if task.continues else start)
                        rendered = (task.first_pass, task.first_pass + task.n_passes)
                        assert task.n_passes > 0
                    # The kept passes, then the rendered ones, are the chunk's passes exactly once.
                    assert kept[0] == start and kept[1] == rendered[0] and rendered[1] == end
                    if kept[1] > start:
                        rec = records[f, c, ty, tx] if c < records.shape[1] else (0, 0, 0)
                        n = kept[1] - start
                        assert int(rec[0]) == n
                        # What is kept holds the samples the job now asks of those passes.
                        assert covered(start, n, int(rec[1]), p) == covered(start, n, spec.spp, p)
                        done_units += covered(start, n, spec.spp, p) * tile_pixels(ty, tx)
    width_height = sum(tile_pixels(ty, tx) for ty in range(tiles_y) for tx in range(tiles_x))
    assert job.total_units == spec.n_frames * spec.spp * width_height
    assert job.done_units == done_units


@settings(max_examples=150, deadline=None)
@given(jobs())
def test_every_frame_chunk_and_tile_is_rendered_exactly_once(job):
    _check_exactly_once(*job)


@settings(max_examples=60, deadline=None)
@given(jobs())
def test_a_fresh_store_plans_every_task_whole_and_at_most_64_chunks(job):
    spec, film, records = job
    fresh = dataclasses.replace(spec, chunk_passes=None).planned()
    empty = np.zeros((fresh.n_frames, 0) + records.shape[2:], np.uint32)
    job = plan(fresh, empty, *film)
    assert job.n_chunks <= MAX_CHUNKS and job.done_units == 0
    assert len(job.todo) == fresh.n_frames * job.n_chunks * film[0] * film[1]
    assert all(not t.continues and t.n_passes == t.chunk_end for t in job.todo)
    _check_exactly_once(fresh, film, empty)
