"""Editing a job in its store: frames added after the last, frames redone (their data discarded,
rendered afresh: the bits of a fresh render), a store of another job refused with the ways on,
and --replace, which replaces a frame store's content and nothing else."""
import dataclasses
import json

import numpy as np
import pytest

from farm import job
from farm.errors import SpecError
from farm.records import as_fields
from farm.scheduler import run_job
from farm.spec import GroupsSpec
from farm.store import FrameStore, StoreError
from tracer.runtime import xla_flags
from tests.helpers.farm_cases import ORBIT, exported, farm_main, filled_store, orbit_spec, reference, store_files


def _render(*args):
    """``farm render`` of orbit_spec's job in this process, with ``args`` (frames, spp, store, ...)."""
    sets = () if "--set" in args else ("--set", "angle=0:0,2:90")
    return farm_main("render", ORBIT, "--res", "40x30", "--tile", "16", *sets, *args)


def _frame_files(store, f):
    """{path: bytes} of frame index ``f``'s state, tail and records chunks."""
    return {p: data for p, data in store_files(store).items()
            if p.startswith((f"state/c.{f}.", f"tail/c.{f}.", f"records/c/{f}/"))}


def test_frames_added_and_frames_redone_are_rendered_afresh_and_the_rest_is_untouched(local_ray, tmp_path):
    path = tmp_path / "edit.zarr"
    filled_store(path, frames=(0, 1))  # made-up sums: a frame rendered again would not keep them
    kept = _frame_files(path, 0)
    assert kept
    spec, store = job.prepare(orbit_spec(path, frames=(0, 2)), redo=(1,))
    assert spec.frames == (0, 2) and store.n_frames == 3 and not as_fields(store.all_records()[1:]).any()
    plan = run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    assert sorted({t.key[0] for t in plan.todo}) == [1, 2]
    assert _frame_files(path, 0) == kept
    got = exported(store.url, tmp_path)
    assert len(got) == 3
    for image, want in zip(got[1:], reference(dataclasses.replace(spec, frames=(1, 2)))):
        np.testing.assert_array_equal(image, want)
    again, _ = job.open_store(str(path))
    assert again.frames == (0, 2) and job.prepare(orbit_spec(path, frames=(0, 2)))[0].frames == (0, 2)


@pytest.mark.parametrize("args, code, message", [
    (("--frames", "0-2", "--spp", "8", "--seed", "5"), 3,
     "holds a different job: seed differs (store: 0, job: 5); render into another --out, or add --replace "
     "to replace the store's content"),
    (("--frames", "1-3", "--spp", "8"), 3,
     "holds frames 0-2, not 1-3: frames can be added after the last (0-N); render into another --out, or add "
     "--replace"),
    (("--frames", "0-1", "--spp", "8"), 3, "holds frames 0-2, not 0-1"),
    (("--frames", "0-5", "--spp", "8", "--set", "angle=0:0,5:180"), 3, "holds a different job: params differs"),
    (("--frames", "0-2", "--spp", "4"), 2, "already holds 8 spp; asking for 4 is not supported"),
    (("--frames", "0-2", "--spp", "8", "--redo", "3"), 2, "--redo 3: the job has frames 0-2"),
    (("--frames", "0-2", "--spp", "8", "--redo", "1,x"), 2, "--redo '1,x': frames 'x'"),
])
def test_a_store_of_another_job_is_refused_with_the_ways_on_and_left_alone(tmp_path, args, code, message):
    path = tmp_path / "s.zarr"
    filled_store(path)
    before = store_files(path)
    got, _, err = _render(*args, "--out", path)
    assert got == code and err.count("\n") == 1 and message in err, err
    assert store_files(path) == before  # not even a lease


def test_replace_replaces_a_frame_store_and_nothing_else(tmp_path):
    path = tmp_path / "r.zarr"
    filled_store(path)
    other = dataclasses.replace(orbit_spec(path, frames=(0, 4), spp=4), seed=5)
    spec, store = job.prepare(other, replace=True, lease=True)
    assert store.lease.holder.epoch == 1
    store.lease.release()
    stored, store = job.open_store(str(path))
    assert (stored.seed, stored.frames, stored.spp) == (5, (0, 4), 4) and store.n_frames == 5
    assert not as_fields(store.all_records()).any() and store.progress() == {}
    # A replacement cut short (the attributes say so) is not a store: --replace makes it again.
    FrameStore.open(str(path), mode="r+").group.attrs.put({"jaxfarm-incomplete": "jaxfarm-frames/2"})
    code, _, err = _render("--frames", "0-2", "--spp", "8", "--out", path)
    assert code == 3 and "a store whose making was cut short; add --replace to make it again" in err, err
    spec, store = job.prepare(orbit_spec(path), replace=True)
    assert job.open_store(str(path))[0].frames == (0, 2)
    # Anything the farm did not make is left alone.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("mine")
    for where, message in ((plain, "not a farm frame store; --replace replaces only frame stores"),
                           (tmp_path / "notes", "already exists and is not a frame store")):
        before = store_files(where)
        code, _, err = _render("--frames", "0-2", "--spp", "8", "--out", where,
                                 "--replace")
        assert code == 3 and message in err and store_files(where) == before, err


def test_redo_frames_are_parsed_and_checked():
    from farm.spec import parse_frame_list
    assert parse_frame_list("3,7-9") == (3, 7, 8, 9) and parse_frame_list(" 2 , 1-2") == (1, 2)
    for text in ("", "3,", "9-7", "-1"):
        with pytest.raises(SpecError, match="--redo"):
            parse_frame_list(text)


def test_a_jobs_tile_defaults_to_its_platforms_and_a_store_keeps_its_own(tmp_path):
    """A new job naming no tile gets 128 on CPUs and 512 on GPUs and TPUs; a job adding frames to a
    store, on any platform, takes the store's tile instead of being refused as another job."""
    from farm.spec import GroupsSpec
    from tracer.shared import ACCELERATOR_TILE, DEFAULT_TILE

    gpu = GroupsSpec(platform="gpu", gpus_per_host=1)
    for platform, groups, want in (("cpu", GroupsSpec(), DEFAULT_TILE), ("gpu", gpu, ACCELERATOR_TILE),
                                   ("tpu", GroupsSpec(platform="tpu"), ACCELERATOR_TILE)):
        spec, store = job.prepare(orbit_spec(tmp_path / f"{platform}.zarr", tile=None, groups=groups))
        assert spec.tile == store.tile == want, platform
    # On CPUs a frame whose pass fits one work unit's samples is one tile (unless the job has a
    # noise target: its tiles are where its samples go); a larger one is in 128-pixel tiles.
    for res, noise, want in (((160, 120), None, 160), ((360, 300), None, 360), ((160, 120), 0.1, DEFAULT_TILE),
                             ((1000, 800), None, DEFAULT_TILE)):  # 4 spp a pass: 4 x 1008 x 808 is past 2^21
        spec = dataclasses.replace(orbit_spec(tmp_path / "unused.zarr", tile=None), resolution=res, noise=noise)
        assert spec.planned(res).tile == want, (res, noise)
    spec, store = job.prepare(orbit_spec(tmp_path / "cpu.zarr", frames=(0, 3), tile=None, groups=gpu))
    assert spec.tile == store.tile == DEFAULT_TILE and store.n_frames == 4
    with pytest.raises(StoreError, match=r"tile differs \(store: 128, job: 64\)"):
        job.prepare(orbit_spec(tmp_path / "cpu.zarr", frames=(0, 3), tile=64))


def test_a_job_keeps_the_instruction_set_it_was_made_with(tmp_path):
    """A CPU job's arithmetic has one instruction-set level, recorded with its store: this host's
    for a job made here, AVX2 for one made on a cluster; a later run keeps it, wherever it runs,
    unless it names another; stores made before jobs had one were rendered with AVX2 code."""
    here = xla_flags.local_isa()
    spec, store = job.prepare(orbit_spec(tmp_path / "here.zarr"))
    assert spec.groups.cpu_isa == here and job.open_store(store.url)[0].groups.cpu_isa == here
    assert job.group_shapes(spec, local=True)[0].env()["XLA_FLAGS"].split().count(f"--xla_cpu_max_isa={here}") == 1
    spec, store = job.prepare(orbit_spec(tmp_path / "cluster.zarr"), local=False)
    assert spec.groups.cpu_isa == "AVX2"
    assert job.prepare(orbit_spec(store.url))[0].groups.cpu_isa == "AVX2"  # run again here
    named = orbit_spec(store.url, groups=GroupsSpec(cpu_isa="AVX"))
    assert job.prepare(named)[0].groups.cpu_isa == "AVX" and job.open_store(store.url)[0].groups.cpu_isa == "AVX"
    code, out, _ = farm_main("status", store.url)
    assert code == 0 and "workers: CPU, AVX arithmetic" in out
    code, out, _ = farm_main("status", store.url, "--json")
    assert code == 0 and json.loads(out)["cpu_isa"] == "AVX"
    # A store from before: its recorded job has no level.
    old = store.spec_json
    old["groups"].pop("cpu_isa")
    store.grow(old, store.meta["identity"], store.n_frames)
    assert job.open_store(store.url)[0].groups.cpu_isa is None
    assert job.prepare(orbit_spec(store.url))[0].groups.cpu_isa == "AVX2"
    with pytest.raises(SpecError, match="groups.cpu_isa must be one of AVX, AVX2, AVX512, got 'SSE2'"):
        GroupsSpec(cpu_isa="SSE2")
