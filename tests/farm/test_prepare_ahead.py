"""While the driver waits for its preflight's compile, each group's members get ready for the task
they will be sent first (farm.scheduler's ``prepare``, cluster.member's ``Member.prepare``): told
before the wait, with that task and the compiling process, and the store ends as it would without."""
import os
import subprocess
import sys
import time

from cluster.group import GroupShape
from cluster.member import _running
from cluster.simulated import Hosts, SimulatedGroup
from farm import job
from farm.scheduler import run_job
from tests.helpers.farm_cases import assert_same_contents, orbit_spec, store_contents


def _render(store, compiler=None, events=None):
    spec, fs = job.prepare(orbit_spec(store, frames=(0, 1), spp=12))
    hosts = Hosts(2)

    class Recording(SimulatedGroup):
        def prepare(self, task, compiler=None):
            events.append(("prepare", self.name, task, compiler))
            super().prepare(task, compiler)

    make = (lambda shape, **kw: Recording(shape, hosts, next(hosts._next), **kw)) if events is not None else \
        hosts.make_group
    try:
        run_job(spec, fs, [GroupShape()] * 2, show_progress=False, log=lambda _: None, make_group=make,
                ready=(lambda: events.append(("ready",))) if events is not None else None, compiler=compiler)
    finally:
        hosts.shutdown()
    return store_contents(store)


def test_groups_prepare_for_their_first_tasks_before_the_wait_and_the_store_ends_the_same(local_ray, tmp_path):
    events = []
    got = _render(tmp_path / "ahead.zarr", compiler=4321, events=events)
    assert [e[0] for e in events] == ["prepare", "prepare", "ready"]
    tasks = {name: task for _, name, task, _ in events[:2]}
    assert {e[3] for e in events[:2]} == {4321}
    # Each group gets the task it will be sent first: the first two groups of _DEPTH (2) tasks.
    assert all(t.frame == 0 and t.start is None and t.out is not None for t in tasks.values())
    assert len({(t.tile_y, t.tile_x) for t in tasks.values()}) == 2
    # The slots handed out ahead are never written: nothing of them is committed or counted twice.
    assert_same_contents(got, _render(tmp_path / "plain.zarr"))


def test_without_a_compiling_process_nothing_is_prepared(local_ray, tmp_path):
    events = []
    _render(tmp_path / "s.zarr", compiler=None, events=events)
    assert events == [("ready",)]


def test_a_compiler_is_running_until_it_ends_even_before_it_is_reaped():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    try:
        assert _running(child.pid)
        deadline = time.monotonic() + 10
        while _running(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        # It has ended but is not reaped yet (a zombie until its parent waits): not running.
        assert os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        child.wait()
        assert not _running(child.pid)
    finally:
        child.kill()
        child.wait()
    assert _running(os.getpid())
