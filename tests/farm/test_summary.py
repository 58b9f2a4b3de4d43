"""The frame summary (farm.summary): `farm status` reads one small array a job, and what it says
never counts more than the store holds."""
import contextlib
import json
import time
from unittest import mock

import numpy as np
import pytest

from farm import job, monitor, summary
from farm.job import open_store
from farm.scheduler import run_job
from farm.store import FrameStore
from tests.helpers.farm_cases import farm_main, filled_store, orbit_spec


def _status(store, *flags):
    code, out, err = farm_main("status", store, "--json", *flags)
    assert code == 0, err
    return json.loads(out)


def _done(status):
    return [f["done"] for f in status["per_frame"]]


@contextlib.contextmanager
def _no_tile_read():
    """Reading any tile's record or data fails the test."""
    def refuse(*_, **__):
        raise AssertionError("a tile was read")
    with mock.patch.object(FrameStore, "read_records", refuse), mock.patch.object(FrameStore, "_read", refuse), \
            mock.patch.object(FrameStore, "frame_records", refuse):
        yield


class _Killed(BaseException):
    """The driver dying where the test says (nothing catches a BaseException that is not one of Python's)."""


@pytest.fixture
def summaries_shown(monkeypatch):
    """`farm status` shows the summary of any store (by default, of those past VERIFY_TILES tiles)."""
    monkeypatch.setattr(monitor, "VERIFY_TILES", 0)


def test_a_driver_killed_between_records_and_summary_counts_less_never_more(local_ray, tmp_path, summaries_shown):
    spec, store = job.prepare(orbit_spec(tmp_path / "s.zarr", frames=(0, 2), spp=16))
    real, calls = summary.update, []

    def update_then_die(*args):
        calls.append(args[3])
        if len(calls) == 2:  # the second commit's records are written, its rows are not
            raise _Killed
        real(*args)
    with mock.patch.object(summary, "update", update_then_die), pytest.raises(_Killed):
        run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    fs = open_store(spec.store)[1]
    assert summary.read(fs, spec) is not None  # (written when the run started, then a row of its first commit)
    with _no_tile_read():
        noted = _status(spec.store)
    verified = _status(spec.store, "--verify")
    assert all(n <= v for n, v in zip(_done(noted), _done(verified))), (_done(noted), _done(verified))
    assert _done(noted) != _done(verified) and noted["samples_done"] < verified["samples_done"]
    # The next run writes every row again: the two agree, at the end as throughout.
    spec, store = job.prepare(orbit_spec(tmp_path / "s.zarr", frames=(0, 2), spp=16))
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    noted, verified = _status(spec.store), _status(spec.store, "--verify")
    assert noted == verified | {"verified": False} and noted["frames_done"] == 3 and noted["state"] == "done", noted


def test_rows_for_another_job_or_forgotten_frames_are_not_used(tmp_path, summaries_shown):
    spec, fs = filled_store(tmp_path / "s.zarr")
    summary.write_all(fs, spec, fs.verified_records()[0])
    with _no_tile_read():
        assert _status(fs.url)["frames_done"] == 3
    # A refine records a new spp before its run writes new rows: the old ones are not this job's.
    more = spec.to_json() | {"spp": 2 * spec.spp}
    fs.set_spp(more)
    assert summary.read(*reversed(open_store(fs.url))) is None
    assert _status(fs.url)["frames_done"] == 0 == _status(fs.url, "--verify")["frames_done"]
    # Frames forgotten (--redo) drop the summary before their records go.
    fs.set_spp(spec.to_json())
    summary.write_all(fs, spec, fs.verified_records()[0])
    fs.forget_frames([1])
    assert not (tmp_path / "s.zarr" / "summary").exists()
    status = _status(fs.url)
    assert _done(status) == [1.0, 0.0, 1.0] and status == _status(fs.url, "--verify")  # (no summary: verified)


def test_status_of_a_100000_frame_job_reads_its_summary_alone(tmp_path):
    spec, fs = job.prepare(orbit_spec(tmp_path / "s.zarr", frames=(0, 99_999), spp=4, tile=40))
    rows = summary.rows(fs, spec, fs.read_records()[0])
    rows[:90_000, :2] = (1.0, 4.0)  # the rows a driver would write once 90,000 frames are rendered
    fs.write_summary(rows)
    t0 = time.perf_counter()
    with _no_tile_read():
        code, out, err = farm_main("status", fs.url)
    print(f"status of 100,000 frames, 90,000 recorded: {time.perf_counter() - t0:.2f} s")
    assert code == 0 and "0-99999 (90000/100000 finished)" in out and "samples: 90.0% done" in out, out[:2000] + err
    assert "  frame 89999: 4.0 spp" in out and "  frame 90000: 0.0 spp, noise - (0%)" in out
    assert "90.0% done (as the driver recorded them; --verify checks every tile's data)" in out


def test_status_checks_a_small_stores_data_by_default(tmp_path):
    """A store of few tiles is read whole: damage its summary cannot know of is named."""
    spec, fs = filled_store(tmp_path / "s.zarr")
    summary.write_all(fs, spec, fs.verified_records()[0])
    fs.tail[1, 0:16, 0:16, 0] += 1.0  # decodes, fails its CRC
    status = _status(fs.url)
    assert status["verified"] and status["damaged_tasks"] == 1 and status["frames_done"] == 2, status
