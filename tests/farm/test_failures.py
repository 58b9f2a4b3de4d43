"""Failures in view (issue 35, item 4): a task past its timeout is taken from its group (the
group rebuilt, its hung member killed) and sent elsewhere; a host whose groups fail too often is
left out of the run, its group re-formed on another node; with no host left the job stops in one
line, the store resumable to an uninterrupted render's bits; retries, their reasons and the hosts
left out in `farm status` (and --json), `farm logs` and `farm serve`.

A hung member is a real one frozen with SIGSTOP (the job's real tracer on a real Ray), once its
group has answered a task: the first task of a group (which compiles) has a longer allowance."""
import json
import os
import signal
import time

import numpy as np
import psutil
import pytest

from farm import failures, job, scheduler
from farm.failures import Failures, Host, Retries, TaskClock, read_notes
from farm.scheduler import run_job
from farm.spec import GroupsSpec
from farm.web import make_app
from tests.helpers import clusters
from tests.helpers.farm_cases import ORBIT, exported, farm_main, orbit_spec, reference
from tests.helpers.hang_guard import hang_guard

TIMEOUT_S = 5.0  # the jobs' task timeout: a frozen member's task is given up on this long after the one before


def test_the_default_timeout_follows_the_median_task_and_spares_a_groups_first():
    clock = TaskClock()
    assert clock.limit(first=False) == failures.FIRST_TASK_S  # no median yet
    for seconds in (30.0, 40.0, 900.0):  # a slow first task does not move the median far
        clock.add(seconds)
    assert clock.limit(first=False) == failures.TIMEOUT_FACTOR * 40.0
    assert clock.limit(first=True) == failures.FIRST_TASK_S
    for _ in range(4):
        clock.add(0.1)
    assert clock.limit(first=False) == failures.MIN_TIMEOUT_S  # (5 x 0.1 s)
    fixed = TaskClock(timeout_s=5.0)
    assert fixed.limit(first=False) == 5.0 and fixed.limit(first=True) == failures.FIRST_TASK_S


def test_failures_count_per_task_and_host_leave_a_host_out_and_read_back_from_notes():
    a, b = Host.of("a" * 56, "10.0.0.1"), Host.of("b" * 56, "10.0.0.2")
    assert a is not None and b is not None and Host.of(None, "10.0.0.3") is None
    f = Failures(host_failures=2)
    t1, t2 = (0, 0, 0, 0), (0, 0, 0, 1)
    assert f.fail(t1, "frame 0 chunk 0 tile (0, 0)", 0, "timed out after 5 s", "group-0 on a", [a]) == []
    # A retry does not go back to the host it failed on while a group elsewhere could take it.
    assert not f.fits(t1, [a], [[a], [b]]) and f.fits(t1, [b], [[a], [b]]) and f.fits(t1, [a], [[a]])
    assert f.fits(t2, [a], [[a], [b]])  # (a task that never failed goes anywhere)
    assert f.fail(t2, "frame 0 chunk 0 tile (0, 1)", 0, "a member was lost", "group-0 on a", [a]) == [a]
    assert f.fail(t1, "frame 0 chunk 0 tile (0, 0)", 0, "timed out after 5 s", "group-1 on b", [b]) == []
    summary = f.summary()
    assert (summary.count, summary.tasks) == (3, 2)
    assert summary.retried[0].task == "frame 0 chunk 0 tile (0, 0)" and summary.retried[0].retries == 2
    assert summary.retried[0].reasons == ("timed out after 5 s (group-0 on a)", "timed out after 5 s (group-1 on b)")
    assert [(h.host, h.failures, h.reason) for h in summary.left_out] == [(a.name, 2, "a member was lost")]
    assert f.why_none_left() == f"{a.name} left out after 2 failed tasks (last: a member was lost)"
    assert read_notes({"failures": json.loads(json.dumps(f.notes()))}) == summary
    for junk in ({}, {"failures": 5}, {"failures": {"retried": [{"task": 1}]}}):
        assert read_notes(junk) == Retries()


def _freeze_after_first_answer(monkeypatch, frozen, answered=None):
    """SIGSTOP the members of the first group that answers a task, right after its answer (the
    task behind it is then the one that hangs); ``frozen``: (pid, time) of each; ``answered``:
    (node id, time, when its task was sent) of each answer that counted."""
    collect = scheduler._JobRun.collect

    def collect_then_freeze(run, d, groups):
        done = run.progress.done_units
        collect(run, d, groups)
        if answered is not None and run.progress.done_units > done:
            answered.append((d.group.nodes()[0][0], time.monotonic(), d.started))
        if not frozen and d.group in groups and d.group.members:
            for pid in d.group.member_pids():
                os.kill(pid, signal.SIGSTOP)
                frozen.append((pid, time.monotonic()))
    monkeypatch.setattr(scheduler._JobRun, "collect", collect_then_freeze)


def _thaw(frozen):
    """Kill what is left of the frozen members (the driver should have had Ray kill them)."""
    left = []
    for pid, _ in frozen:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
                p.kill()
        except psutil.NoSuchProcess:
            pass
    return left


def _job_file(tmp_path, **groups):
    lines = "\n".join(f"{k} = {v!r}" for k, v in groups.items())
    path = tmp_path / "job.toml"
    path.write_text(f'scene = "{ORBIT}"\nframes = "0-1"\nspp = 8\nresolution = [40, 30]\nstore = "s.zarr"\n'
                    f'tile = 16\npass_size = 4\n[groups]\n{lines}\n'
                    f'[params.angle]\nkeys = [[0, 0.0], [2, 90.0]]\n')
    return path


def test_a_hung_member_on_the_only_host_stops_the_job_in_one_line_and_it_resumes_to_the_same_bits(
        tmp_path, monkeypatch):
    source, store = _job_file(tmp_path, task_timeout=TIMEOUT_S, host_failures=1), tmp_path / "s.zarr"
    frozen = []
    _freeze_after_first_answer(monkeypatch, frozen)
    try:
        with hang_guard(300):
            code, _, err = farm_main("render", source, "--no-progress")
    finally:
        left = _thaw(frozen)
    monkeypatch.undo()
    assert frozen and left == []  # the driver had Ray kill the frozen member
    error = err.splitlines()[-1]
    assert code == 4 and error.startswith("error: no host is left to render on: node "), err
    assert f"left out after 1 failed task (last: timed out after {TIMEOUT_S:.0f} s); `farm resume {store}` goes on" \
           in error
    # Said by status (--json and lines), logs and the monitor.
    code, out, _ = farm_main("status", store, "--json")
    s = json.loads(out)
    assert code == 0 and s["state"] == "failed" and s["error"].startswith("no host is left to render on")
    assert s["failures"]["count"] == 1 and s["failures"]["left_out"][0]["host"] in error
    assert s["failures"]["retried"][0]["reasons"][0].startswith(f"timed out after {TIMEOUT_S:.0f} s (group-0 on node ")
    lines = farm_main("status", store)[1].splitlines()
    assert any(line.startswith("retries: 1 of 1 task(s)") for line in lines), lines
    assert any(line.startswith("left out: node ") for line in lines), lines
    log = farm_main("logs", store)[1]
    assert "is left out of the job: its groups failed 1 task(s)" in log and "retry 1 of task frame" in log, log
    assert log.splitlines()[-1].endswith(f"failed: {error.removeprefix('error: ')}")  # why the run ended
    client = make_app(str(tmp_path)).test_client()
    page = client.get("/jobs/s.zarr").get_data(as_text=True)
    assert "left out" in page and s["failures"]["left_out"][0]["host"] in page
    assert "1 host(s) left out" in client.get("/").get_data(as_text=True)
    assert client.get("/api/jobs/s.zarr").get_json()["failures"] == s["failures"]
    # The store is as the last commit left it: resumed, it ends in an uninterrupted render's bits.
    code, _, err = farm_main("resume", store, "--no-progress")
    assert code == 0, err
    spec = job.open_store(str(store))[0]
    for got, want in zip(exported(store, tmp_path), reference(spec)):
        np.testing.assert_array_equal(got, want)


@pytest.fixture
def two_nodes():
    with clusters.two_nodes(cpus=1) as cluster:
        yield cluster


def test_a_host_whose_group_hangs_is_left_out_and_the_group_formed_on_another(two_nodes, tmp_path, monkeypatch):
    # One group, one CPU a node: it forms on either node; frozen there, the node is left out (after
    # one failure), and the group re-forms on the other node, where the job ends.
    spec = orbit_spec(tmp_path / "n.zarr", frames=(0, 1), groups=GroupsSpec(task_timeout=TIMEOUT_S, host_failures=1))
    spec, store = job.prepare(spec)
    frozen, messages, answered = [], [], []
    _freeze_after_first_answer(monkeypatch, frozen, answered)
    say = lambda m: messages.append((time.monotonic(), m))  # noqa: E731
    try:
        with hang_guard(300):
            plan = run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False, log=say)
    finally:
        left = _thaw(frozen)
    assert frozen and left == []
    # Every task sent after the freeze was answered on the other node. (One sent before it may have
    # been answered before it too, and collected in the same batch as the first answer.)
    first, rest = answered[0][0], {node for node, _, sent in answered[1:] if sent > frozen[0][1]}
    assert rest and first not in rest, answered
    bad = plan.stats["failures"].left_out
    assert len(bad) == 1 and bad[0].host.startswith(f"node {first[:8]} "), bad
    assert plan.stats["failures"].count == 1
    gone = next(t for t, m in messages if "is left out of the job" in m)
    print(f"\nfrozen -> node left out: {gone - frozen[0][1]:.1f} s (task timeout {TIMEOUT_S:.0f} s); -> the "
          f"first answer of the group re-formed on the other node: {min(t for node, t, _ in answered if node != first) - frozen[0][1]:.1f} s")
    for got, want in zip(exported(store.url, tmp_path), reference(spec)):
        np.testing.assert_array_equal(got, want)
