"""The shared queue (issue 35, item 3): jobs attached to one cluster share its groups through the
farm's queue, a detached named Ray actor. On a simulated two-node cluster (one CPU a node: room
for two groups) two drivers render at once, each in a thread of this process with its own
simulated groups (``cluster.simulated``: the scheduler, Ray and every store write are real, the
work unit a stub): a job of higher priority takes the groups of a lower one at task boundaries
and ends first; two of equal priority hold one group each and their tasks alternate; the queue's
actor killed for real (SIGKILL of its process) comes back, lists both jobs again, and both end
in the bits of an uninterrupted render, each task committed once."""
import json
import os
import signal
import threading
import time

import pytest
import ray

from cluster.group import GroupShape
from cluster.simulated import Hosts
from farm import job, queue as farm_queue
from farm.queue import Entry, free, room, share
from farm.results import Commits
from farm.scheduler import run_job
from farm.seat import Seat
from farm.spec import GroupsSpec
from tests.helpers import clusters
from tests.farm.test_serve import get, get_json, served
from tests.helpers.farm_cases import assert_same_contents, farm_cli, farm_main, orbit_spec, store_contents
from tests.helpers.hang_guard import hang_guard

LATENCY_S = 0.2  # a stub task's render time
SHAPES = [GroupShape()] * 2  # two groups of one CPU each: the cluster holds two in all


def test_shares_go_by_priority_then_in_turn():
    cpu = {"CPU": 1.0}
    low, high = Entry("low", 0, 1.0, cpu, 2), Entry("high", 5, 2.0, cpu, 2)
    assert share([low, high], [{"CPU": 2.0}]) == {"low": 0, "high": 2}
    assert share([low, high], [{"CPU": 2.0}, {"CPU": 1.0}]) == {"low": 1, "high": 2}  # what a priority cannot use goes down
    a, b = Entry("a", 0, 1.0, cpu, 3), Entry("b", 0, 2.0, cpu, 3)
    assert share([b, a], [{"CPU": 3.0}]) == {"a": 2, "b": 1}  # in turn, the first queued first
    paused = Entry("high", 5, 2.0, cpu, 2, paused=True)
    assert share([low, paused], [{"CPU": 2.0}]) == {"low": 2, "high": 0}
    assert share([Entry("gpu", 0, 1.0, {"CPU": 1.0, "GPU": 4.0}, 2)], [{"CPU": 8.0, "GPU": 4.0}]) == {"gpu": 1}


def test_groups_are_counted_node_by_node():
    """16 CPUs free as 4 on each of four nodes hold no group of one 8-CPU host; a group spread over
    2 hosts takes two nodes (STRICT_SPREAD), one packed may take one."""
    big = Entry("big", 0, 1.0, {"CPU": 8.0}, 2)
    assert share([big], [{"CPU": 4.0}] * 4) == {"big": 0}
    assert share([big], [{"CPU": 4.0}] * 3 + [{"CPU": 16.0}]) == {"big": 2}
    spread = Entry("spread", 0, 1.0, {"CPU": 2.0}, 3, hosts=2)
    assert share([spread], [{"CPU": 4.0}, {"CPU": 2.0}]) == {"spread": 1}  # node 0's second half: no second node
    assert share([spread], [{"CPU": 4.0}, {"CPU": 4.0}]) == {"spread": 2}
    packed = Entry("packed", 0, 1.0, {"CPU": 2.0}, 3, hosts=2, spread=False)
    assert share([packed], [{"CPU": 4.0}, {"CPU": 2.0}]) == {"packed": 1}  # 3 hosts' worth: one group of 2
    # What is free is counted where the held groups sit; a job's room is what fits there.
    left = free([Entry("held", 9, 0.0, {"CPU": 2.0}, 1, held=1, hosts=2)], [{"CPU": 4.0}, {"CPU": 4.0}])
    assert left == [{"CPU": 2.0}, {"CPU": 2.0}]
    assert room(big, left) == 0 and room(Entry("small", 0, 1.0, {"CPU": 2.0}, 5), left) == 2


@pytest.fixture(scope="module")
def cluster():
    with clusters.two_nodes(cpus=1) as c:
        yield c
    # (the queue's actor is detached: it goes with the cluster)


@pytest.fixture
def commits(monkeypatch):
    """(store URL, task key) of every commit, in order, across the drivers of a test."""
    seen, accept = [], Commits.accept
    monkeypatch.setattr(Commits, "accept",
                        lambda self, task, *a: (seen.append((self.store.url, task.key)), accept(self, task, *a))[1])
    return seen


class _Driver(threading.Thread):
    """A driver attached to the cluster: ``run_job`` of the orbit job into ``store`` with a seat in
    the queue (``seat=False``: none, an uninterrupted reference), on two simulated groups."""

    def __init__(self, store, priority=0, frames=(0, 1), latency_s=LATENCY_S, seat=True):
        super().__init__(daemon=True)
        spec = orbit_spec(store, frames=frames, tile=8, groups=GroupsSpec(count=2, priority=priority))
        self.spec, self.fs = job.prepare(spec)
        self.latency_s, self.with_seat = latency_s, seat
        self.log, self.error, self.ended = [], None, None

    def run(self):
        hosts = Hosts(2, latency_s=self.latency_s)
        seat = Seat(self.fs.url, self.spec.groups.priority, SHAPES, self.fs.paused, self.log.append) \
            if self.with_seat else None
        try:
            run_job(self.spec, self.fs, SHAPES, show_progress=False, log=self.log.append, make_group=hosts.make_group,
                    seat=seat)
            self.ended = time.monotonic()
        except BaseException as e:  # said by the test
            self.error = e
        finally:
            hosts.shutdown()


def _until(condition, what, seconds=120):
    with hang_guard(seconds):
        while not condition():
            time.sleep(0.05)


def _finish(*drivers):
    with hang_guard(300):
        for d in drivers:
            d.join()
    for d in drivers:
        assert d.error is None, (d.error, d.log)




@pytest.fixture(scope="module")
def uninterrupted(cluster, tmp_path_factory):
    """The orbit job's frames 0-1 rendered on two groups without a queue."""
    d = _Driver(tmp_path_factory.mktemp("whole") / "s.zarr", latency_s=0.0, seat=False)
    d.start()
    _finish(d)
    return store_contents(d.fs.url)


def _mine(commits, driver):
    return [key for url, key in commits if url == driver.fs.url]


def test_a_job_of_higher_priority_takes_the_groups_and_ends_first(cluster, tmp_path, commits, uninterrupted):
    low = _Driver(tmp_path / "low.zarr", priority=0, frames=(0, 1))   # 40 tasks
    high = _Driver(tmp_path / "high.zarr", priority=5, frames=(0, 0))  # 20 tasks
    t0 = time.monotonic()
    low.start()
    _until(lambda: len(_mine(commits, low)) >= 4, "the low job's first tasks")
    high.start()
    _finish(low, high)
    order = sorted((d.ended, name) for name, d in (("high", high), ("low", low)))
    print(f"\npriority: ended {[name for _, name in order]}, high after {high.ended - t0:.1f} s, low after "
          f"{low.ended - t0:.1f} s")
    assert [name for _, name in order] == ["high", "low"]
    assert any("queue: letting group-" in m for m in low.log), low.log
    # Once the high job renders, the low one only finishes what its groups had in flight (two each).
    sequence = [url for url, _ in commits]
    first, last = sequence.index(high.fs.url), len(sequence) - 1 - sequence[::-1].index(high.fs.url)
    assert sequence[first:last].count(low.fs.url) <= 4, sequence
    for d in (low, high):
        assert len(_mine(commits, d)) == len(set(_mine(commits, d)))  # each task committed once
    assert_same_contents(store_contents(low.fs.url), uninterrupted)


def test_jobs_of_equal_priority_hold_a_group_each_and_alternate(cluster, tmp_path, commits):
    a, b = _Driver(tmp_path / "a.zarr"), _Driver(tmp_path / "b.zarr")
    a.start()
    _until(lambda: len(_mine(commits, a)) >= 2, "the first job's first tasks")
    b.start()
    queue, held = farm_queue.find_queue(), []

    def one_each():  # the queue, as `farm queue` lists it, once both jobs hold one group each
        rows = ray.get(queue.rows.remote())
        held[:] = [(r["held"], r["share"]) for r in rows]
        return held == [(1, 1), (1, 1)] or a.ended is not None

    _until(one_each, "one group each")
    _finish(a, b)
    assert held == [(1, 1), (1, 1)], held
    sequence = [url for url, _ in commits]
    window = sequence[sequence.index(b.fs.url):]
    window = window[:len(window) - window[::-1].index(a.fs.url)]  # while both rendered
    switches = sum(x != y for x, y in zip(window, window[1:]))
    print(f"\nequal priorities: {len(window)} commits while both rendered, {window.count(a.fs.url)} and "
          f"{window.count(b.fs.url)}, {switches} switches")
    assert min(window.count(a.fs.url), window.count(b.fs.url)) >= len(window) // 3, window
    assert switches >= len(window) // 4, window


def test_a_paused_job_keeps_its_place_and_the_queue_killed_comes_back_to_the_same_bits(
        cluster, tmp_path, commits, uninterrupted):
    b = _Driver(tmp_path / "b.zarr")
    a = _Driver(tmp_path / "a.zarr", priority=1, latency_s=0.3)
    b.start()
    _until(lambda: len(_mine(commits, b)) >= 2, "the first job's first tasks")
    code, _, err = farm_main("pause", b.fs.url)
    assert code == 0 and err.startswith(f"paused: {b.fs.url} keeps its place"), err
    queue = farm_queue.find_queue()
    rows = lambda: {r["store"]: r for r in ray.get(queue.rows.remote())}  # noqa: E731
    _until(lambda: rows().get(b.fs.url, {}).get("held") == 0, "the paused job's groups let go")
    held_back = len(_mine(commits, b))
    a.start()
    _until(lambda: len(_mine(commits, a)) >= 2, "the second job's first tasks")
    pid = ray.get(queue.pid.remote())
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)  # the queue's process, for real; Ray restarts the actor

    def back():  # the same named actor in a new process, the jobs heard again
        try:
            return ray.get(queue.pid.remote()) != pid and b.fs.url in rows() and (a.fs.url in rows() or a.ended)
        except ray.exceptions.RayError:
            return False

    _until(back, "the queue back")
    print(f"\nthe queue killed -> back with the jobs: {time.monotonic() - t0:.1f} s")
    listed = farm_cli("queue", "--address", cluster.address, "--json", timeout=120)
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["store"] == b.fs.url)
    assert (row["paused"], row["held"], row["share"], row["priority"]) == (True, 0, 0, 0), row
    text = farm_cli("queue", "--address", cluster.address, timeout=120)
    assert text.returncode == 0 and f"     0  paused     0/2 group(s), share 0  {b.fs.url}" in text.stdout, text
    _until(lambda: a.ended is not None, "the job of higher priority's end", seconds=300)
    assert len(_mine(commits, b)) == held_back  # paused: nothing rendered meanwhile
    code, _, err = farm_main("unpause", b.fs.url)
    assert code == 0 and err.startswith("unpaused"), err
    _finish(a, b)
    for d in (a, b):
        assert len(_mine(commits, d)) == len(set(_mine(commits, d))) == 40  # each task committed once
        assert_same_contents(store_contents(d.fs.url), uninterrupted)


def test_the_monitor_shows_the_queue_in_order_and_never_starts_one(cluster, tmp_path):
    """``farm serve --address``: the job list shows the queue as ``farm queue`` lists it; where
    no job has started a queue it says so in one line and starts none."""
    root = tmp_path / "jobs"
    ours = job.prepare(orbit_spec(root / "ours.zarr"))[1].url  # a queued store the monitor serves
    stale = farm_queue.find_queue()
    if stale is not None:  # (left by the tests above: detached)
        ray.kill(stale, no_restart=True)
        _until(lambda: farm_queue.find_queue() is None, "the queue gone")
    with served(root, "--address", cluster.address) as (_, port):
        view = get_json(port, "/api/queue")  # the first look waits for `farm queue`'s first answer
        assert (view["address"], view["rows"], view["error"]) == (cluster.address, [], None), view
        page = get(port, "/")[2].decode()
        assert "No shared queue: no farm job is queued on this cluster." in page, page
        assert farm_queue.find_queue() is None  # the monitor looked, and started none

        cpu = {"CPU": 1.0}
        entries = [Entry(ours, 0, 1.0, cpu, 2, held=0), Entry("/elsewhere/high.zarr", 5, 2.0, cpu, 2, held=2),
                   Entry("/elsewhere/held.zarr", 9, 3.0, cpu, 2, paused=True)]
        queue = farm_queue.queue_actor()  # as a driver starts it
        rows = []

        def listed():  # the drivers' reports go on (a job unheard for 10 s leaves the queue)
            ray.get([queue.report.remote(e) for e in entries])
            rows[:] = get_json(port, "/api/queue")["rows"]
            return len(rows) == 3

        _until(listed, "the queue in the monitor", seconds=60)
        assert [(r["store"], r["priority"], r["state"], r["held"], r["wants"], r["share"]) for r in rows] == [
            ("/elsewhere/held.zarr", 9, "paused", 0, 2, 0), ("/elsewhere/high.zarr", 5, "rendering", 2, 2, 2),
            (ours, 0, "waiting", 0, 2, 0)]
        page = get(port, "/")[2].decode()
        table = page.split('<table class="queue">', 1)[1]
        assert table.index("/elsewhere/held.zarr") < table.index("/elsewhere/high.zarr") < table.index(ours), table
        assert f'<a href="/jobs/ours.zarr">{ours}</a>' in table, table  # a store it serves: its page
        for state in ("paused", "rendering", "waiting"):
            assert f'<td class="{state}">{state}</td>' in table, table
