"""The driver waits for its preflight child's word that the work unit is compiled, not for the
child's exit (``farm.scene_check.Preflight.wait``): the exit still takes JAX's teardown."""
import subprocess
import sys
import tempfile

from farm.scene_check import Preflight
from tests.helpers.hang_guard import hang_guard


def _preflight_of(script: str) -> Preflight:
    """A Preflight whose child runs ``script`` (Python) instead of ``cluster.preflight``."""
    preflight = Preflight.__new__(Preflight)
    preflight.scene, preflight.env = "scene.xml", {}
    preflight._stderr = tempfile.TemporaryFile(mode="w+")
    preflight._child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=preflight._stderr, text=True)
    preflight.renders, preflight._compiled = False, None
    preflight._listen()
    return preflight


def test_wait_returns_at_the_childs_word_while_it_still_runs():
    with hang_guard(60), _preflight_of("import sys, time; print('compiled 1.00', flush=True); time.sleep(60)") as pre:
        pre.wait(timeout_s=30)
        assert pre._child.poll() is None  # still tearing down: the driver went on without it
    assert pre._child.poll() is not None  # and leaving the block stopped it


def test_wait_returns_when_the_child_ends_without_a_word():
    with hang_guard(60), _preflight_of("import sys; sys.exit(3)") as pre:
        pre.wait(timeout_s=30)  # a failed compile is not the job's: a member compiles then
        assert pre._child.wait(5) == 3


def test_a_child_that_says_nothing_is_stopped_at_the_timeout():
    with hang_guard(60), _preflight_of("import time; time.sleep(60)") as pre:
        pre.wait(timeout_s=1)
        assert pre._child.poll() is not None


_RENDERS = """
import json, sys, time
print('compiled 1.00', flush=True)
for line in sys.stdin:
    if not line.strip():
        break
    time.sleep(0.5)
    print(json.dumps({"crc": 7, "seconds": 0.5, "renderer": "r"}) if "render" in line else "oops", flush=True)
"""


def test_a_child_that_renders_answers_each_task_and_one_that_fails_is_stopped():
    with hang_guard(60), _preflight_of(_RENDERS) as pre:
        pre.renders = True
        assert not pre.send({"a": "task"})  # (not before its word that it compiled)
        assert pre.compiled_within(30) is True
        assert pre.send({"a": "task"})
        assert pre.answer(0.05) == (False, None)  # still rendering
        assert pre.answer(30) == (True, {"crc": 7, "seconds": 0.5, "renderer": "r"})
        pre._send({"not": "a task"})  # answered with a line that is no answer: stopped, takes no more
        assert pre.answer(30) == (True, None)
        assert pre._child.poll() is not None and not pre.renders and not pre.send({"a": "task"})


def test_a_child_that_ends_mid_task_answers_nothing():
    with hang_guard(60), _preflight_of("import sys; print('compiled 1.00', flush=True); sys.stdin.readline()") as pre:
        pre.renders = True
        assert pre.compiled_within(30) is True and pre.send({"a": "task"})
        assert pre.answer(30) == (True, None)
