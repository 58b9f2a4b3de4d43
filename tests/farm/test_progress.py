"""Progress that tells the truth (farm.progress, farm.status): the steady-state rate and ETA on a
fake clock, the phases a run goes through, and ``farm status --json`` / ``--watch``, checked
against the store, and from another process while a real render runs."""
import collections
import json
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from farm import status as farm_status
from farm.job import frame_status, open_store
from farm.web import make_app
from farm.progress import MIN_TASKS, NOTE_EVERY_S, PHASES, RunProgress, Throughput
from tests.helpers.farm_cases import ORBIT, ROOT, farm_cli, farm_main, filled_store
from tests.helpers.hang_guard import hang_guard


def _steady_run(startup_s=15.0, tasks=400, units=1000, mean_s=0.2, seed=0):
    """(times at which tasks come back, the time the last does): a start-up gap, then tasks of
    uneven cost (0.5x to 1.5x the mean) one after another."""
    rng = np.random.default_rng(seed)
    times = startup_s + np.cumsum(rng.uniform(0.5, 1.5, tasks) * mean_s)
    return times, times[-1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eta_after_a_slow_start_is_within_a_fifth_of_the_truth(seed):
    times, end = _steady_run(seed=seed)
    units, total = 1000, 1000 * len(times)
    meter = Throughput()
    for i, t in enumerate(times):
        meter.add(units, t)
        if i < MIN_TASKS:
            assert meter.rate() is None and meter.eta(total, t) is None  # no guess before the steady state
        done = (i + 1) * units
        if i + 1 in (20, 40, 100, 200, 300):  # 5% to 75% of the tasks
            truth = end - t
            assert meter.eta(total - done, t) == pytest.approx(truth, rel=0.2), (i, truth)
            naive = (total - done) / (done / t)  # the rate since the start, as before
            assert abs(naive - truth) > 0.5 * truth or i + 1 > 100  # (the test can tell)
    # Between tasks the ETA counts down with the clock.
    meter = Throughput()
    for t in times[:20]:
        meter.add(units, t)
    eta = meter.eta(total, times[19])
    assert meter.eta(total, times[19] + 0.1) == pytest.approx(eta - 0.1)


def test_the_rate_forgets_a_slow_start():
    meter = Throughput(window_s=10.0)
    t = 0.0
    for _ in range(20):  # a slow stretch (a second compilation, a busy machine)
        t += 2.0
        meter.add(100, t)
    assert meter.rate() == pytest.approx(50.0)
    for _ in range(200):  # then 1000 units/s for 20 s
        t += 0.1
        meter.add(100, t)
    assert meter.rate() == pytest.approx(1000.0, rel=0.05)


class _Notes:
    """A store as RunProgress sees it: the notes written, in order."""

    def __init__(self):
        self.written = []
        self.lines = []

    def write_progress(self, **fields):
        self.written.append(fields)

    def log(self, line):  # (the store's run log, ``farm logs``)
        self.lines.append(line)


def test_run_progress_notes_each_phase_at_once_and_then_every_few_seconds():
    clock = types.SimpleNamespace(t=0.0)
    store = _Notes()
    progress = RunProgress(store, show=False, clock=lambda: clock.t)
    progress.phase("starting Ray")
    assert store.written[-1]["phase"] == "starting Ray" and store.written[-1]["state"] == "running"
    tasks = [types.SimpleNamespace(key=(f, 0, 0, c)) for f in range(2) for c in range(10)]
    progress.start(types.SimpleNamespace(total_units=2000, done_units=0,
                                         frame_tasks=lambda: collections.Counter(t.key[0] for t in tasks)), 2)
    for name in ("forming groups", "compiling"):
        clock.t += 5.0
        progress.phase(name)
    assert [n["phase"] for n in store.written] == ["starting Ray", "forming groups", "compiling"]
    assert list(store.written[-1]["phases"]) == ["starting Ray", "forming groups", "compiling"]
    for task in tasks:
        clock.t += 1.0
        progress.done(100, task.key[0])  # the first task back: rendering, noted at once
        progress.note()
    assert store.written[3]["phase"] == "rendering" and store.written[3]["eta_s"] is None
    notes = store.written[4:]
    assert len(notes) == pytest.approx(len(tasks) / NOTE_EVERY_S, abs=2)  # every few seconds, not every task
    assert notes[0]["eta_s"] is None and notes[0]["done_units"] <= 100 * MIN_TASKS  # no guess from the start
    for n in notes[1:]:  # 100 units a second from the first task on
        assert n["rate"] == pytest.approx(100.0) and n["eta_s"] == pytest.approx((2000 - n["done_units"]) / 100)
    progress.note(force=True)
    assert store.written[-1]["frames_done"] == 2 and store.written[-1]["eta_s"] == 0
    progress.phase("finishing")
    progress.finish()
    assert store.written[-1]["state"] == "done" and list(store.written[-1]["phases"]) == list(PHASES)


def _partial_store(tmp_path):
    """A filled store (orbit, 3 frames at 8 spp) with frame 1 forgotten and one tile of frame 2
    without samples: (spec, FrameStore)."""
    spec, fs = filled_store(tmp_path / "job.zarr", spp=8)
    fs.forget_frames([1])
    fs.records[2, 0, 0] = 0
    return spec, fs


def test_status_json_is_what_the_store_holds(tmp_path):
    spec, fs = _partial_store(tmp_path)
    now = time.time()
    fs.write_progress(state="running", phase="rendering", rate=1000.0, eta_s=50.0)
    code, out, err = farm_main("status", fs.url, "--json")
    assert code == 0, err
    job = json.loads(out)
    records, _ = fs.verified_records()
    done = frame_status(fs, spec, records)
    assert 0 < done[2] < 1 and done[1] == 0 and done[0] == 1  # the store is what the test thinks it is
    pixels = fs.width * fs.height
    assert (job["store"], job["state"], job["phase"], job["frames"], job["frames_done"], job["spp"]) == \
        (fs.url, "running", "rendering", 3, 1, 8)
    assert job["samples_done"] == round(sum(done) * pixels * 8) and job["samples_total"] == 3 * pixels * 8
    assert job["rate"] == 1000.0 and 50.0 - (time.time() - now) - 1 <= job["eta_s"] <= 50.0
    assert [f["frame"] for f in job["per_frame"]] == [0, 1, 2]
    for f, d in zip(job["per_frame"], done):
        assert f["done"] == pytest.approx(d) and f["spp"] == pytest.approx(8 * d)
    assert [f["state"] for f in job["per_frame"]] == ["done", "waiting", "rendering"]
    text = farm_main("status", fs.url)[1]
    assert "last run: running, rendering (" in text and "  frame 2: " in text
    # The web monitor answers the same (it reads records without their CRCs: none is damaged here).
    web = make_app(str(tmp_path)).test_client()
    served = web.get("/api/jobs/job.zarr").get_json()
    assert served["store"] == "job.zarr" and served["eta_s"] <= job["eta_s"]
    for answer in (served, job):  # (ETAs count down between the two looks)
        del answer["store"], answer["eta_s"]
        for frame in answer["per_frame"]:
            del frame["eta_s"]
    assert job["verified"] and not served["verified"]  # (status read this small store whole)
    assert served | {"verified": True} == job
    assert b"running: rendering" in web.get("/jobs/job.zarr").data and b"running: rendering" in web.get("/").data


def test_watch_stops_when_the_job_is_not_running_and_on_ctrl_c(tmp_path, monkeypatch):
    spec, fs = _partial_store(tmp_path)
    fs.write_progress(state="failed", error="boom")
    code, out, _ = farm_main("status", fs.url, "--json", "--watch")
    (line,) = out.splitlines()  # one look: the job is not running
    assert code == 0 and json.loads(line)["state"] == "failed" and json.loads(line)["error"] == "boom"
    fs.write_progress(state="running", phase="compiling")
    looks = []

    def sleep(seconds):
        looks.append(seconds)
        if len(looks) == 3:
            raise KeyboardInterrupt
    monkeypatch.setattr(farm_status.time, "sleep", sleep)
    code, out, err = farm_main("status", fs.url, "--watch", "--json")
    assert code == 0 and err == ""  # Ctrl-C ends a watch cleanly
    assert [json.loads(line)["phase"] for line in out.splitlines()] == ["compiling"] * 3


def _notes(store):
    try:
        return open_store(str(store))[1].progress() or {}
    except Exception:  # not made yet, or half made
        return {}


def test_a_render_seen_from_another_process(tmp_path):
    """A real `farm render`: its phases seen in order by this process as it runs, `status --watch`
    ending with the job, and `status --json` agreeing with the store afterwards."""
    store = tmp_path / "orbit.zarr"
    render = subprocess.Popen([sys.executable, "-m", "farm.cli", "render", ORBIT, "--frames", "0-2", "--spp", "8",
                               "--res", "40x30", "--tile", "16", "--no-progress", "--out", str(store)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, watch = [], None
    with hang_guard(600):
        while render.poll() is None:
            notes = _notes(store)
            if notes.get("state") == "running":
                if not seen or seen[-1] != notes.get("phase"):
                    seen.append(notes.get("phase"))
                if watch is None:
                    watch = subprocess.Popen([sys.executable, "-m", "farm.cli", "status", str(store), "--watch",
                                              "--json"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
            time.sleep(0.05)
        _, err = render.communicate()
        watched, _ = watch.communicate()
    assert render.returncode == 0 and watch.returncode == 0, err[-3000:]
    assert len(seen) >= 2, seen  # the groups take seconds to form and compile (Ray may be up before the store)
    assert [PHASES.index(p) for p in seen] == sorted({PHASES.index(p) for p in seen}), seen
    final = _notes(store)
    # (forming groups and compiling left out where the first tasks rendered while Ray started: RenderAhead)
    assert final["state"] == "done" and list(final["phases"]) == [p for p in PHASES if p in final["phases"]]
    assert {"starting Ray", "rendering", "finishing"} <= set(final["phases"]), final
    assert list(final["phases"].values()) == sorted(final["phases"].values())
    looks = [json.loads(line) for line in watched.splitlines()]
    assert looks[0]["state"] == "running" and looks[-1]["state"] == "done", looks
    assert all(look["state"] == "running" for look in looks[:-1])

    result = farm_cli("status", str(store), "--json", timeout=120)
    job = json.loads(result.stdout)
    assert (job["state"], job["phase"], job["frames_done"], job["spp"], job["eta_s"]) == ("done", None, 3, 8, None)
    assert job["samples_done"] == job["samples_total"] == 3 * 40 * 30 * 8 and job["rate"] > 0
    assert [(f["frame"], f["spp"], f["state"]) for f in job["per_frame"]] == [(i, 8.0, "done") for i in range(3)]
