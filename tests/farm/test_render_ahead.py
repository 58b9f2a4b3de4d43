"""A local job's first tasks rendered by the driver's preflight child while Ray starts and the
group forms (``farm.scheduler.RenderAhead``): committed as a group's answers are, the frames the
bits of ``tracer.render``'s, and a task whose answer never came (the child killed after writing
it) rendered again by the group and counted once. Where the job's groups are one group of one
member (the default), the child stands in for it and renders the whole job, and the group forms
only if the child stops with tasks left."""
import contextlib
import io
import re
import threading
import time

import numpy as np
import pytest

from farm import faults, job, session
from farm.cli import main
from farm.scene_check import Preflight
from farm.scheduler import _JobRun
from farm.store import FrameStore
from tests.helpers.farm_cases import ORBIT, exported, reference
from tests.helpers.hang_guard import hang_guard

JOB = ("--frames", "0-2", "--spp", "8", "--res", "40x30", "--tile", "16", "--set", "angle=0:0,2:90")


def _render(store, monkeypatch, ahead, kill_at=None, stands_in=True, hang_at=None, args=()):
    """``farm render`` of JOB in this process, Ray started beside the preflight as the command
    does; the group forms only once the child has answered ``ahead`` tasks (or stopped taking
    them), and the answer to the child's next task waits for the group's first answer (the
    child takes none after it). ``kill_at``: the child is killed once it has written that task, before its answer
    is read. ``hang_at``: that task's answer never comes (the child is stopped after the task's
    time limit). ``stands_in=False``: the child renders beside the group, as where the job has
    several groups. ``args``: more of the command's. Returns (the number of tasks the store's log says the child rendered, its
    answers, the store's log)."""
    answered, enough, first = [], threading.Event(), threading.Event()
    answer_of, done = Preflight.answer, Preflight.done
    start_groups, collect = _JobRun.start_groups, _JobRun.collect

    def answering(self, timeout_s):
        if len(answered) + 1 == hang_at:  # (its line is left unread)
            time.sleep(min(timeout_s, 0.05))
            return False, None
        if len(answered) >= ahead and not first.is_set():  # (this thread collects the group's answers too)
            time.sleep(min(timeout_s, 0.01))
            return False, None
        ended, answer = answer_of(self, timeout_s)
        if ended and answer is not None and len(answered) + 1 == kill_at:  # written, but the answer lost
            self._child.kill()
            answer = None
        if answer is not None:
            answered.append(answer)
        if ended and (len(answered) >= ahead or answer is None):
            enough.set()
        return ended, answer

    def finishing(self):
        enough.set()
        return done(self)

    def forming(self, log=None):
        enough.wait(120)
        return start_groups(self, log)

    def collecting(self, d, groups):
        collect(self, d, groups)
        first.set()

    monkeypatch.setattr(Preflight, "answer", answering)
    monkeypatch.setattr(Preflight, "done", finishing)
    monkeypatch.setattr(_JobRun, "start_groups", forming)
    monkeypatch.setattr(_JobRun, "collect", collecting)
    if not stands_in:  # (told the job has two such groups, it renders beside them)
        render_ahead = session._render_ahead
        monkeypatch.setattr(session, "_render_ahead", lambda start, preflight, shapes:
                            render_ahead(start, preflight, shapes * 2))
    err = io.StringIO()
    with hang_guard(300), contextlib.redirect_stderr(err):
        try:
            main(["render", ORBIT, *JOB, *args, "--out", str(store), "--no-progress"])
        except SystemExit as e:
            assert e.code == 0, err.getvalue()[-3000:]
    monkeypatch.undo()
    log = FrameStore.open(str(store), "r").logs()
    lines = [line for line in log if "rendered by the driver's preflight" in line]
    assert len(lines) <= 1, lines
    return int(re.search(r"(\d+) task\(s\) rendered", lines[0])[1]) if lines else 0, answered, log


def test_tasks_rendered_ahead_give_the_bits_of_tracer_render(tmp_path, monkeypatch):
    store = tmp_path / "ahead.zarr"
    n, answered, _ = _render(store, monkeypatch, ahead=7, stands_in=False)
    # The 8th waited for the group's first answer; the group took the other 10 of 3 frames x 6 tiles.
    assert n == len(answered) == 8, n
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec), strict=True):
        np.testing.assert_array_equal(got, want)
    renderers = FrameStore.open(str(store), "r").renderers
    assert len(renderers) == 1 and renderers[0] == answered[0]["renderer"], renderers  # the child's is a member's


def test_the_child_standing_in_for_the_one_group_renders_the_whole_job_and_no_group_forms(tmp_path, monkeypatch):
    store = tmp_path / "alone.zarr"
    formed = []
    monkeypatch.setattr(_JobRun, "start_groups", lambda self, log=None: formed.append(1) or [])
    n, answered, log = _render(store, monkeypatch, ahead=18)
    assert n == len(answered) == 18 and not formed, (n, formed)  # 3 frames x 6 tiles, all the child's
    assert not any("forming groups" in line for line in log), log
    xla = [line for line in log if "XLA: " in line]  # the child's programs, as a member's would be
    assert len(xla) == 1 and re.search(r"XLA: \d+ program\(s\)", xla[0]), log
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_task_whose_answer_was_lost_is_rendered_again_and_counted_once(tmp_path, monkeypatch):
    """...by the group, which forms once the child standing in for it has stopped."""
    store = tmp_path / "killed.zarr"
    n, answered, log = _render(store, monkeypatch, ahead=18, kill_at=3)
    assert n == len(answered) == 2, n
    assert any("preflight process stopped with tasks left" in line for line in log), log
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_task_of_the_child_standing_in_is_timed_as_a_group_s_and_its_group_takes_the_rest(tmp_path, monkeypatch):
    """Past its first task, the child's tasks get the job's task time limit (here 5 s), not a
    first task's 600 s: the hung one is given up on, the child stopped, and the group forms and
    renders it and the rest, each counted once."""
    store = tmp_path / "hung.zarr"
    began = time.monotonic()
    n, answered, log = _render(store, monkeypatch, ahead=18, hang_at=4, args=("--task-timeout", "5"))
    assert n == len(answered) == 3 and time.monotonic() - began < 240, n
    assert any("preflight process stopped with tasks left" in line for line in log), log
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec), strict=True):
        np.testing.assert_array_equal(got, want)


def _no_ray(address, groups):
    raise faults.EnvironmentFault("the embedded Ray did not start: simulated (Ray's logs: nowhere)")


def test_a_job_the_child_stands_in_for_is_rendered_where_ray_does_not_start(tmp_path, monkeypatch):
    """Ray is the fallback of a child standing in for the job's one group: where it fails to
    start, the child renders the whole job alone (said in the store's log), to the same bits."""
    store = tmp_path / "no-ray.zarr"
    monkeypatch.setattr(session, "_start", _no_ray)
    n, answered, log = _render(store, monkeypatch, ahead=18)
    assert n == len(answered) == 18, n
    assert any("Ray did not start: simulated" in line and "renders the job alone" in line for line in log), log
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec), strict=True):
        np.testing.assert_array_equal(got, want)


def test_where_ray_does_not_start_a_child_that_stops_with_tasks_left_fails_the_job_with_ray_s_error(tmp_path,
                                                                                                      monkeypatch):
    store = tmp_path / "no-ray-killed.zarr"
    monkeypatch.setattr(session, "_start", _no_ray)
    with pytest.raises(AssertionError) as failed:  # (_render's: the command's exit code was not 0)
        _render(store, monkeypatch, ahead=18, kill_at=3)
    errors = [line.strip() for line in str(failed.value).splitlines() if line.strip().startswith("error:")]
    assert errors == ["error: the embedded Ray did not start: simulated (Ray's logs: nowhere)"], str(failed.value)
    fs = FrameStore.open(str(store), "r")
    records = fs.all_records()
    # the two tasks the child answered before it was killed
    assert int((records["tail_passes"] > 0).sum()) == 2, (records, fs.logs())


def test_a_stop_while_the_child_renders_waits_for_its_renderer_and_resumes_to_the_same_bits(tmp_path, monkeypatch):
    """A Ctrl-C while the child standing in for the group is answering a task: the run lets go of
    the child only once its renderer thread has (a joined thread that the stop's
    KeyboardInterrupt interrupted had been marked dead while it ran, python/cpython#90882, and
    the stop raced it: "unexpected AttributeError", exit 70); it stops as a Ctrl-C does (exit
    130), and the job resumes to the bits of an uninterrupted render."""
    import _thread
    assert threading.current_thread() is threading.main_thread()  # (where the KeyboardInterrupt goes)
    store = tmp_path / "stopped.zarr"
    answer_of, stop_ahead = Preflight.answer, _JobRun.stop_ahead
    answered, answering_now, raced = [], threading.Event(), []

    def answering(self, timeout_s):
        ended, answer = answer_of(self, timeout_s)
        if answer is not None:
            answered.append(answer)
            if len(answered) == 3:  # the stop comes while this answer is still being taken in
                answering_now.set()
                _thread.interrupt_main()
                time.sleep(1.0)
                answering_now.clear()
        return ended, answer

    def stopping(self, now=False):
        if threading.current_thread() is threading.main_thread():
            raced.append(answering_now.is_set())
        return stop_ahead(self, now)

    monkeypatch.setattr(Preflight, "answer", answering)
    monkeypatch.setattr(_JobRun, "stop_ahead", stopping)
    err = io.StringIO()
    with hang_guard(300), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stopped:
        main(["render", ORBIT, *JOB, "--out", str(store), "--no-progress"])
    monkeypatch.undo()
    assert stopped.value.code == 130 and len(answered) == 3, err.getvalue()[-3000:]
    assert raced and not any(raced), raced  # the run's own stops came after the renderer's
    assert "unexpected" not in err.getvalue(), err.getvalue()[-3000:]
    with hang_guard(300), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(["resume", str(store), "--no-progress"])
        except SystemExit as e:
            assert e.code == 0
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec), strict=True):
        np.testing.assert_array_equal(got, want)
