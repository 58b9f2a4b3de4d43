"""The planner, for any spec and any store of it: every (frame, chunk, tile) is rendered exactly once.

Hypothesis draws the job (frames, spp, pass and chunk size, film and tile size) and what a store
of it may hold per tile at an earlier spp: complete chunks folded, and a tail (the partial last
chunk, its last pass possibly cut by that spp). For every tile, the chunks folded, the tail kept
and the tasks planned must together be the tile's chunks at the job's spp, each exactly once,
what is kept must hold the samples the job asks of it now, and each task must end where its
chunk does (``farm.tree``). Whole frames with nothing stored or everything stored are drawn
too: the planner decides those from their records at once.
"""
import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.planner import plan
from farm.spec import JobSpec
from farm.records import RECORD


def _film(width, height, tile):
    """(tiles_y, tiles_x, tile_pixels) as a store of this film size cuts it (edge tiles cut short)."""
    tiles_y, tiles_x = -(-height // tile), -(-width // tile)

    def tile_pixels(ty, tx):
        return min(tile, height - ty * tile) * min(tile, width - tx * tile)
    return tiles_y, tiles_x, tile_pixels


@st.composite
def jobs(draw):
    """(planned spec, film (tiles_y, tiles_x, tile_pixels), records) of a job and a store of it."""
    first = draw(st.integers(0, 100))
    n_frames = draw(st.integers(1, 3))
    pass_size = draw(st.one_of(st.none(), st.integers(1, 40)))
    chunk = draw(st.one_of(st.none(), st.integers(1, 6)))
    tile = draw(st.integers(8, 64))
    width, height = draw(st.integers(1, 96)), draw(st.integers(1, 96))
    old = JobSpec(scene="scene.xml", frames=(first, first + n_frames - 1), spp=draw(st.integers(1, 600)),
                  store="job.zarr", tile=tile, pass_size=pass_size, chunk_passes=chunk).planned()
    spec = dataclasses.replace(old, spp=draw(st.integers(old.spp, old.spp + 3 * old.tree.chunk_samples)))
    film = _film(width, height, tile)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    records = np.zeros((n_frames, film[0], film[1]), RECORD)
    tree = old.tree
    for key in np.ndindex(records.shape):
        folded = int(rng.integers(0, tree.complete(old.spp) + 1))
        records["folded"][key] = folded
        if folded == tree.complete(old.spp) and tree.tail_passes(old.spp) and rng.random() < 0.7:
            records["tail_passes"][key] = rng.integers(1, tree.tail_passes(old.spp) + 1)
            records["tail_spp"][key] = old.spp
    # Whole frames with nothing stored, or all of the job's spp (the planner decides those at once).
    for f in range(n_frames):
        kind = draw(st.sampled_from(["drawn", "nothing", "all"]))
        if kind == "nothing":
            records[f] = 0
        elif kind == "all":
            records["folded"][f] = spec.tree.complete(spec.spp)
            records["tail_passes"][f] = spec.tree.tail_passes(spec.spp)
            records["tail_spp"][f] = draw(st.sampled_from([old.spp, spec.spp])) if records["tail_passes"][f].any() else 0
    return spec, film, records


def _check_exactly_once(spec, film, records):
    tiles_y, tiles_x, tile_pixels = film
    tree, g = spec.tree, spec.chunk_passes
    job = plan(spec, records, *film)
    keys = [t.key for t in job.todo]
    order = sorted(set(keys), key=lambda k: (k[0], k[1], k[2], k[3]))
    assert keys == order, "tasks repeat, or are not frame by frame, chunk by chunk, tile by tile"
    n = tree.n_chunks(spec.spp)
    assert job.n_chunks == n
    assert sum(tree.covered(c, g, spec.spp) for c in range(n)) == spec.spp  # the chunks hold every sample
    by_tile = {}
    for t in job.todo:
        by_tile.setdefault(t.line, []).append(t)
    done_units = 0
    for f in range(spec.n_frames):
        for ty in range(tiles_y):
            for tx in range(tiles_x):
                tasks = by_tile.get((f, ty, tx), [])
                folded, kept = int(records["folded"][f, ty, tx]), int(records["tail_passes"][f, ty, tx])
                chunks = [t.chunk for t in tasks]
                assert chunks == list(range(folded, folded + len(chunks)))  # from the first not folded on
                assert folded + len(chunks) == n or (folded + len(chunks) == n - 1 and kept)  # to the last
                tail_counts = len(chunks) < n - folded or (tasks and tasks[0].continues)
                kept_samples = tree.covered(folded, kept, spec.spp) if tail_counts else 0
                for t in tasks:
                    end = g if t.chunk < tree.complete(spec.spp) else tree.tail_passes(spec.spp)
                    assert t.tail == (t.chunk == tree.complete(spec.spp)) and t.chunk_end == end
                    start = t.first_pass - t.chunk * g
                    assert t.n_passes > 0 and start + t.n_passes == end
                    assert t.frame == spec.frames[0] + f
                    assert start == (kept if t.continues else 0) and (not t.continues or t.chunk == folded)
                if tail_counts:
                    # What is kept holds the samples the job asks of those passes now.
                    assert tree.covered(folded, kept, int(records["tail_spp"][f, ty, tx])) == kept_samples
                done_units += (folded * tree.chunk_samples + kept_samples) * tile_pixels(ty, tx)
    pixels = sum(tile_pixels(ty, tx) for ty in range(tiles_y) for tx in range(tiles_x))
    assert job.total_units == spec.n_frames * spec.spp * pixels
    assert job.done_units == done_units


@settings(max_examples=150, deadline=None)
@given(jobs())
def test_every_frame_chunk_and_tile_is_rendered_exactly_once(job):
    _check_exactly_once(*job)


@settings(max_examples=40, deadline=None)
@given(jobs())
def test_a_fresh_store_plans_every_task_whole(job):
    spec, film, records = job
    empty = np.zeros_like(records)
    job = plan(spec, empty, *film)
    assert job.done_units == 0
    assert len(job.todo) == spec.n_frames * job.n_chunks * film[0] * film[1]
    assert all(not t.continues and t.n_passes == t.chunk_end for t in job.todo)
    _check_exactly_once(spec, film, empty)
