"""Workers write their own results (``farm.results``): killed after writing and before answering,
or hung there past the task timeout, a worker's result is never committed and the job ends in the
bits of an uninterrupted run, each task committed once; a driver killed between its worker's write and its commit leaves an orphan that resume deletes, and
ends in the same bits; a fenced driver's worker's write never becomes committed. The work unit is
``cluster.simulated``'s stub (what is tested is the write path, not the tracer)."""
import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cluster.group import GroupShape
from cluster.simulated import Hosts
from farm import failures, job
from farm.lease import Fenced, Lease
from farm.planner import plan
from farm.records import as_fields
from farm.results import Commits, shared_root
from farm.scheduler import run_job
from farm.store import FrameStore
from farm.tree import STATE_CHANNELS, fold
from tests.helpers.farm_cases import ROOT, assert_same_contents, format_2, orbit_spec, store_contents
from tests.helpers.hang_guard import hang_guard

SPP = 96  # one complete chunk (64 samples) and a tail of 32 a tile: both kinds of commit


def _render(store, spp=SPP, groups=2, task_timeout_s=None, **faults):
    """Render the orbit job's frames 0-1 into ``store`` on simulated groups; (the run's log, its stats)."""
    spec, fs = job.prepare(orbit_spec(store, frames=(0, 1), spp=spp))
    hosts, messages = Hosts(groups, **faults), []
    try:
        done = run_job(spec, fs, [GroupShape()] * groups, show_progress=False, log=messages.append,
                       make_group=hosts.make_group, task_timeout_s=task_timeout_s)
    finally:
        hosts.shutdown()
    return messages, done.stats




def _orphans(store):
    """The dispatch area's chunk files (their keys are flat: ``c.INDEX.0.0.0``)."""
    return glob.glob(os.path.join(store, "dispatch", "*", "c.*"))


@pytest.fixture(scope="module")
def uninterrupted(local_ray, tmp_path_factory):
    store = tmp_path_factory.mktemp("whole") / "s.zarr"
    _render(store)
    return store_contents(store)


def test_a_worker_killed_after_writing_is_never_committed(local_ray, tmp_path, uninterrupted):
    store = tmp_path / "s.zarr"
    with hang_guard(120):
        messages, _ = _render(store, after_write="exit")
    assert any("rebuilding it" in m for m in messages), messages  # both first results were lost
    assert_same_contents(store_contents(store), uninterrupted)
    assert _orphans(str(store)) == []  # what the killed members wrote was deleted


@pytest.mark.parametrize("fault", ["hangs after writing", "writes late"])
def test_a_member_past_the_task_timeout_never_gets_its_result_committed(local_ray, tmp_path, uninterrupted,
                                                                        monkeypatch, fault):
    """Each group's first member either hangs once it has written its first result (it never
    answers), or sleeps past the timeout, then writes and answers: either way its task is sent
    elsewhere and the group rebuilt from a new process at the task timeout; what the member wrote
    is never committed, every task is committed once, and the store holds the bits of an
    uninterrupted run (read again once the late member has written)."""
    store, marker = tmp_path / "s.zarr", tmp_path / "written"
    monkeypatch.setattr(failures, "FIRST_TASK_S", 0.0)  # the stub compiles nothing: no first-task allowance
    committed, accept = [], Commits.accept
    monkeypatch.setattr(Commits, "accept", lambda self, task, *a: (committed.append(task.key), accept(self, task, *a))[1])
    faults = dict(after_write="hang") if fault == "hangs after writing" else dict(stall_s=4.0, latency_s=0.2)
    t0 = time.monotonic()
    with hang_guard(120):
        messages, stats = _render(store, task_timeout_s=1.5, marker=str(marker), **faults)
        print(f"two groups timed out, rebuilt, and the job done in {time.monotonic() - t0:.1f} s")
        while not marker.exists():  # the late member's write, if it comes after the job's end
            time.sleep(0.1)
    assert sum("timed out after 2 s; rebuilding it" in m for m in messages) == 2, messages
    assert stats["failures"].count == 2 and all("timed out" in t.reasons[0] for t in stats["failures"].retried)
    assert stats["fenced"] >= 2  # the timed-out dispatches, and those queued behind them
    assert len(committed) == len(set(committed))  # each task committed once
    assert_same_contents(store_contents(store), uninterrupted)
    if fault == "hangs after writing":
        assert _orphans(str(store)) == []  # the hung members' writes were deleted


def test_the_driver_killed_between_write_and_commit_then_resumed(local_ray, tmp_path, uninterrupted):
    store, marker = tmp_path / "s.zarr", tmp_path / "written"
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.stub_driver", str(store), str(marker), str(SPP)],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, FARM_LEASE_S="2", PYTHONPATH=str(ROOT)))
    try:
        with hang_guard(120):
            while not marker.exists():
                assert proc.poll() is None, "the driver ended before its worker wrote"
                time.sleep(0.1)
        time.sleep(0.2)  # the other group's write too, maybe
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    orphans = _orphans(str(store))
    assert orphans, "a worker wrote, and nothing was committed"
    records, _ = FrameStore.open(str(store), mode="r").verified_records()
    assert not as_fields(records).any()  # what they wrote is not the store's
    time.sleep(2.5)  # the dead driver's lease lapses
    spec, fs = job.prepare(orbit_spec(store, frames=(0, 1), spp=SPP), lease=True)
    hosts = Hosts(2)
    try:
        run_job(spec, fs, [GroupShape()] * 2, show_progress=False, log=lambda m: None, make_group=hosts.make_group)
    finally:
        hosts.shutdown()
        fs.lease.release()
    assert not any(os.path.exists(p) for p in orphans)
    assert_same_contents(store_contents(store), uninterrupted)


def test_a_fenced_drivers_worker_write_is_never_committed(tmp_path):
    """Driver A's worker writes; A's lease lapses and B takes the store; A's commit is refused
    before anything is written, and B's run never names A's data."""
    spec, a = job.prepare(orbit_spec(tmp_path / "s.zarr", frames=(0, 1), spp=SPP))
    a.lease = Lease.acquire(a.group, a.url, duration=0.5, heartbeat=False)
    records, _ = a.verified_records()
    commits = Commits(a, records, spec.spp, shared_root(a))
    task = plan(spec, records, a.tiles_y, a.tiles_x, a.tile_pixels).todo[0]
    slot = commits.slot(task)
    crc = slot.write(np.ones((16, 16, 3), np.float32), np.ones((16, 16), np.float32))  # the worker's write
    assert os.path.exists(slot.path)
    time.sleep(0.6)
    b = FrameStore.open(a.url)
    b.lease = Lease.acquire(b.group, b.url, duration=30, heartbeat=False)
    commits.accept(task, slot, crc)
    with pytest.raises(Fenced):
        commits.flush()
    assert not as_fields(b.all_records()).any()
    # Nothing renamed into place (the member made the folder its chunk would land in: empty).
    assert [files for _, _, files in os.walk(os.path.join(a.url, "state", "c")) if files] == []
    theirs = Commits(b, b.verified_records()[0], spec.spp, shared_root(b))  # B's run starts: A's write is gone
    assert not os.path.exists(slot.path) and theirs.next_index >> 32 != slot.index >> 32
    b.lease.release()


@pytest.mark.parametrize("version", [2, 3])
def test_members_write_and_read_chunks_as_zarr_does(tmp_path, version):
    """A member encodes and decodes its chunks itself (``ChunkFile``): the file it writes is byte
    for byte what zarr writes for the block, and the next chunk folds onto it as read back (an
    edge tile: the chunk past the film is zeros), in a store of either format read."""
    spec, fs = job.prepare(orbit_spec(tmp_path / "s.zarr", frames=(0, 0), spp=128))  # two chunks a tile
    if version == 2:
        format_2(fs)
        fs = FrameStore.open(fs.url)
    records, _ = fs.verified_records()
    commits = Commits(fs, records, spec.spp, shared_root(fs))
    assert commits.files is not None
    rng, state = np.random.default_rng(3), np.zeros((14, 8, STATE_CHANNELS), np.float32)  # tile (1, 2): 14 x 8
    for task in [t for t in plan(spec, records, fs.tiles_y, fs.tiles_x, fs.tile_pixels).todo if t.line == (0, 1, 2)]:
        value, weight = rng.random((16, 16, 3), np.float32), rng.random((16, 16), np.float32)
        slot = commits.slot(task)
        commits.accept(task, slot, slot.write(value, weight))
        commits.flush()
        state = fold(state, value[:14, :8], weight[:14, :8])
    np.testing.assert_array_equal(fs.read_state((0, 1, 2)), state)
    _, other = job.prepare(orbit_spec(tmp_path / "z.zarr", frames=(0, 0), spp=128))
    other.state[0, 16:30, 32:40, :] = state  # through zarr
    chunk = lambda store: os.path.join(store.url, "state", store.state.metadata.encode_chunk_key((0, 1, 2, 0)))
    with open(chunk(fs), "rb") as a, open(chunk(other), "rb") as b:
        assert a.read() == b.read()
    commits.close()


def test_a_member_writes_its_chunk_without_importing_zarr(tmp_path):
    """A member (here a fresh process, as the preflight child or a Ray worker is) unpickles its
    slot and writes the chunk file with no Zarr imported (0.4 s of a first task), at the key
    Zarr gives the dispatch index; the driver's commit of it folds as written."""
    import pickle
    spec, fs = job.prepare(orbit_spec(tmp_path / "s.zarr", frames=(0, 0), spp=64))
    records, _ = fs.verified_records()
    commits = Commits(fs, records, spec.spp, shared_root(fs))
    task = plan(spec, records, fs.tiles_y, fs.tiles_x, fs.tile_pixels).todo[0]
    slot = commits.slot(task)
    area = FrameStore.open(fs.url, mode="r").group["dispatch"][slot.kind]
    assert slot.path == os.path.join(fs.url, "dispatch", slot.kind,
                                     area.metadata.encode_chunk_key((slot.index, 0, 0, 0)))
    (tmp_path / "slot.pickle").write_bytes(pickle.dumps(slot))
    member = ("import pickle, sys; import numpy as np; slot = pickle.load(open(sys.argv[1], 'rb')); "
              "crc = slot.write(np.full((16, 16, 3), 0.5, np.float32), np.ones((16, 16), np.float32)); "
              "print(crc, 'zarr' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", member, str(tmp_path / "slot.pickle")], cwd=ROOT, check=True,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.split()
    assert out[1] == "False", "the member imported Zarr to write its chunk"
    commits.accept(task, slot, int(out[0]))
    commits.flush()
    y0, y1, x0, x1 = fs.tile_box(*task.line[1:])
    h, w = y1 - y0, x1 - x0
    expected = fold(np.zeros((h, w, STATE_CHANNELS), np.float32), np.full((h, w, 3), 0.5, np.float32),
                    np.ones((h, w), np.float32))
    np.testing.assert_array_equal(fs.read_state(task.line), expected)
    commits.close()
