"""A local job's first tasks rendered by the driver's preflight child while Ray starts and the
group forms (``farm.scheduler.RenderAhead``): committed as a group's answers are, the frames the
bits of ``tracer.render``'s, and a task whose answer never came (the child killed after writing
it) rendered again by the group and counted once."""
import contextlib
import io
import re
import threading
import time

import numpy as np
import pytest

from farm import job
from farm.cli import main
from farm.scene_check import Preflight
from farm.scheduler import _JobRun
from farm.store import FrameStore
from tests.helpers.farm_cases import ORBIT, exported, reference
from tests.helpers.hang_guard import hang_guard

JOB = ("--frames", "0-2", "--spp", "8", "--res", "40x30", "--tile", "16", "--set", "angle=0:0,2:90")


def _render(store, monkeypatch, ahead, kill_at=None):
    """``farm render`` of JOB in this process, Ray started beside the preflight as the command
    does; the group forms only once the child has answered ``ahead`` tasks (or stopped taking
    them), and the answer to the child's next task waits for the group's first answer (the
    child takes none after it). ``kill_at``: the child is killed once it has written that task, before its answer
    is read. Returns (the number of tasks the store's log says the child rendered, its answers)."""
    answered, enough, first = [], threading.Event(), threading.Event()
    answer_of, done = Preflight.answer, Preflight.done
    start_groups, collect = _JobRun.start_groups, _JobRun.collect

    def answering(self, timeout_s):
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
    err = io.StringIO()
    with hang_guard(300), contextlib.redirect_stderr(err):
        try:
            main(["render", ORBIT, *JOB, "--out", str(store), "--no-progress"])
        except SystemExit as e:
            assert e.code == 0, err.getvalue()[-3000:]
    monkeypatch.undo()
    lines = [line for line in FrameStore.open(str(store), "r").logs() if "rendered by the driver's preflight" in line]
    assert len(lines) <= 1, lines
    return int(re.search(r"(\d+) task\(s\) rendered", lines[0])[1]) if lines else 0, answered


def test_tasks_rendered_ahead_give_the_bits_of_tracer_render(tmp_path, monkeypatch):
    store = tmp_path / "ahead.zarr"
    n, answered = _render(store, monkeypatch, ahead=7)
    # The 8th waited for the group's first answer; the group took the other 10 of 3 frames x 6 tiles.
    assert n == len(answered) == 8, n
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec), strict=True):
        np.testing.assert_array_equal(got, want)
    renderers = FrameStore.open(str(store), "r").renderers
    assert len(renderers) == 1 and renderers[0] == answered[0]["renderer"], renderers  # the child's is a member's


def test_a_task_whose_answer_was_lost_is_rendered_again_and_counted_once(tmp_path, monkeypatch):
    store = tmp_path / "killed.zarr"
    n, answered = _render(store, monkeypatch, ahead=18, kill_at=3)
    assert n == len(answered) == 2, n
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec), strict=True):
        np.testing.assert_array_equal(got, want)
