"""A job's life through the command line, on one small noise-target job rendered once for the
module (a real local Ray, 16x16, two frames): what a run without a progress bar says, a
render of a job that is done already, a resume that waits out another driver's lease, its log,
and `farm wait` on it and on stores whose job ended otherwise (no Ray)."""
import dataclasses
import json
import os
import re
import subprocess
import time

import pytest

from farm import job
from farm import lease as lease_module
from farm.lease import Lease, holder
from farm.progress import PHASES
from farm.store import FrameStore
from tests.helpers.farm_cases import ORBIT, farm_cli, farm_main, orbit_spec

JOB = ("--frames", "0-1", "--spp", "64", "--noise", "0.5", "--min-spp", "20", "--res", "16x16", "--tile", "16",
       "--set", "angle=0:0,1:45")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """(store path, the render's CompletedProcess) of the module's job, rendered without a bar."""
    store = tmp_path_factory.mktemp("jobs") / "j.zarr"
    result = farm_cli("render", ORBIT, *JOB, "--out", str(store), "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    return store, result


def test_a_run_without_a_bar_says_each_phase_and_how_min_spp_was_rounded(rendered):
    _, result = rendered
    lines = result.stderr.splitlines()
    phases = [line.removesuffix("...") for line in lines if line.endswith("...")]
    # In their order, each once; those before rendering may be left out where the preflight child
    # rendered the first tasks while Ray started and the group formed (farm.scheduler.RenderAhead).
    assert phases[0] == "starting Ray" and phases[-2:] == ["rendering", "finishing"], lines
    assert phases == [p for p in PHASES if p in phases], lines
    assert ("--min-spp 20 is rounded up to 32: a noise target renders chunks of 16 samples, and a tile's noise "
            "estimate needs at least two") in lines, lines


def test_render_of_a_job_done_already_says_so_and_starts_nothing(rendered, monkeypatch):
    from farm import session
    store, _ = rendered
    notes = FrameStore.open(str(store), mode="r").progress()
    monkeypatch.setattr(session, "starting_ray", lambda *args, **kwargs: pytest.fail("Ray was started"))
    code, _, err = farm_main("render", ORBIT, *JOB, "--out", store)
    monkeypatch.undo()
    assert code == 0 and err == (f"{store}: done already (2 frame(s) x noise 0.5: 32 to 64 spp a tile); nothing to "
                                 f"render (`farm export {store} --out DIR`; a higher --spp or a later last frame "
                                 f"renders more)\n"), err
    assert FrameStore.open(str(store), mode="r").progress() == notes  # the last run's rate and state kept
    assert farm_main("resume", store)[0] == 0


def test_resume_wait_waits_out_the_lease_of_a_driver_elsewhere(rendered, monkeypatch):
    store, _ = rendered
    fs = FrameStore.open(str(store))
    monkeypatch.setattr(lease_module, "_PID_SPACE", "another machine's")
    elsewhere = Lease.acquire(fs.group, str(store), duration=3.0, heartbeat=False)
    monkeypatch.setattr(lease_module, "_PROCESS", "another driver's process")
    monkeypatch.setattr(lease_module, "_PID_SPACE", lease_module._pid_space())
    code, _, err = farm_main("resume", store, "--wait")
    assert code == 0 and time.time() >= elsewhere.expires, err
    lines = err.splitlines()
    assert re.fullmatch(rf"{re.escape(str(store))}: waiting for the lease of {re.escape(elsewhere.holder.who())} to "
                        r"lapse \(it renews it; it lapses in \d s unless it is renewed\)", lines[0]), lines
    assert all(line.startswith(f"{store}: waiting for the lease of ") for line in lines[:-1]), lines
    assert "done already" in lines[-1] and holder(fs.group) == elsewhere.holder, lines


def test_logs_show_what_the_driver_said_and_wait_returns_at_once_on_a_done_job(rendered):
    store, result = rendered
    code, out, _ = farm_main("logs", store)
    said = [line.split(" ", 2)[2] for line in out.splitlines()]  # after the date and time
    assert code == 0 and said[0].startswith("--min-spp 20 is rounded up to 32") and said[1] == \
        f"2 frame(s) x noise 0.5: 32 to 64 spp a tile at 16x16 -> {store}", said
    phases = [s.removesuffix("...") for s in said if s.endswith("...")]
    assert phases == [line.removesuffix("...") for line in result.stderr.splitlines() if line.endswith("...")], said
    assert phases[0] == "starting Ray" and phases[-2:] == ["rendering", "finishing"] and said[-1] == "done", said
    code, out, err = farm_main("wait", store, "--json")
    assert code == 0 and json.loads(out) == {"store": str(store), "state": "done", "exit_code": 0, "error": None}
    assert err == f"{store}: done\n", err


@pytest.mark.parametrize("ending", ["driver gone", "cancelled", "still running"])
def test_wait_exits_as_the_job_ended(tmp_path, ending):
    _, fs = job.prepare(orbit_spec(tmp_path / "w.zarr", frames=(0, 0)))
    fs.lease = Lease.acquire(fs.group, fs.url, duration=600, heartbeat=False)
    fs.write_progress(state="running" if ending != "cancelled" else "cancelled",
                      error="cancelled; `farm resume` goes on from here" if ending == "cancelled" else None)
    if ending == "driver gone":
        dead = subprocess.Popen(["true"])
        dead.wait()
        lease_module._write(fs.lease.node, dataclasses.replace(fs.lease.holder, pid=dead.pid))
    elif ending == "cancelled":
        fs.lease.release()
    t0 = time.monotonic()
    code, _, err = farm_main("wait", fs.url, "--timeout", "1")
    if ending == "still running":  # this process holds the lease: a live driver
        assert code == 124 and err == f"{fs.url}: running; still running after 1 s\n" and time.monotonic() - t0 >= 1
    elif ending == "cancelled":
        assert code == 5 and err == f"{fs.url}: cancelled; cancelled; `farm resume` goes on from here\n", err
    else:
        assert code == 4 and err == (f"{fs.url}: failed; its driver, {fs.lease.holder.who()[:-len(str(os.getpid()))]}"
                                     f"{dead.pid}, is gone; `farm resume {fs.url}` goes on\n"), err
