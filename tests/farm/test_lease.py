"""One driver per store: the lease refuses a second driver, is taken over once its holder stops
renewing it, and fences a driver that lost it before it writes anything. The first tests drive
``farm.lease`` in this process (another driver is this process under another identity); the
last runs real drivers as subprocesses and freezes one with SIGSTOP."""
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

from farm import lease as lease_module
from farm.lease import Fenced, Lease, LeaseHeld, holder
from farm.records import TileRecord
from farm.store import FrameStore
from tests.helpers.farm_cases import ORBIT, ROOT, farm_cli, farm_main, filled_store, stop_when, store_files, tiles_done
from tests.helpers.hang_guard import hang_guard

ME = f"{socket.gethostname()} pid {os.getpid()}"


def _another_driver(monkeypatch):
    """From here on this process acquires as another driver would (another process's identity)."""
    monkeypatch.setattr(lease_module, "_PROCESS", "another driver's process")


def _wait_until(condition, poll=0.1):
    while not condition():
        time.sleep(poll)


def _data_files(store):
    """The store's files other than its lease and the workers' uncommitted writes (``dispatch/``,
    which no record names): the job's data and the driver's notes."""
    return {path: data for path, data in store_files(store).items() if not path.startswith(("lease", "dispatch"))}


@pytest.mark.parametrize("where", ["path", "memory"])
def test_a_live_lease_is_refused_naming_its_holder_and_a_released_one_is_taken_at_once(tmp_path, monkeypatch, where):
    url = str(tmp_path / "s.zarr") if where == "path" else f"memory://lease-test/{tmp_path.name}/s.zarr"
    group = zarr.open_group(url, mode="w-")
    assert holder(group) is None
    first = Lease.acquire(group, "s.zarr", duration=600)
    assert holder(group) == first.holder and first.holder.epoch == 1
    again = Lease.acquire(group, "s.zarr", duration=600)  # the same process: the same driver, a new epoch
    with pytest.raises(Fenced, match=r"lost the store's lease \(.* took it over \(epoch 2\)\)"):
        first.check()
    _another_driver(monkeypatch)
    with pytest.raises(LeaseHeld) as refused:
        Lease.acquire(group, "s.zarr", duration=600)
    message = str(refused.value)
    assert f"another driver is rendering this store: {ME}" in message and "\n" not in message
    assert refused.value.exit_code == 3 and holder(group).epoch == 2
    again.release()
    assert holder(group).released and holder(group).describe(time.time()) == "none"  # no driver shown once it ends
    with pytest.raises(Fenced, match="released"):
        again.check()
    other = Lease.acquire(group, "s.zarr", duration=600)
    assert other.holder.epoch == 3 and holder(group) == other.holder
    other.check()
    other.release()
    first.release()  # lost: it writes nothing, and its heartbeat stops
    assert lease_module._epochs(group["lease"].store_path) == [2, 3]  # older epochs are history


def test_an_expired_lease_is_taken_over_and_its_zombie_cannot_take_it_back(tmp_path, monkeypatch):
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w-")
    frozen = Lease.acquire(group, "s.zarr", duration=0.5, heartbeat=False)  # renews nothing, as if frozen
    frozen.check()
    _wait_until(lambda: time.time() > frozen.expires)
    assert "stopped renewing its lease" in holder(group).describe(time.time())
    with pytest.raises(Fenced, match="expired .* ago: this driver was paused"):
        frozen.check()
    _another_driver(monkeypatch)
    taker = Lease.acquire(group, "s.zarr", duration=600)
    assert taker.holder.epoch == 2
    with pytest.raises(Fenced):
        frozen.renew()
    # A renewal that had passed its check before the takeover lands late: it rewrites only the
    # zombie's own epoch, which no longer counts.
    lease_module._write(frozen.node, dataclasses.replace(frozen.holder, expires=time.time() + 600))
    taker.check()
    assert holder(group) == taker.holder
    taker.release()


def _dead_pid():
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("how", ["no such process", "another process of its pid", "an older lease document"])
def test_a_lease_of_a_driver_gone_from_this_machine_is_taken_over_at_once(tmp_path, monkeypatch, how):
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w-")
    held = Lease.acquire(group, "s.zarr", duration=600, heartbeat=False)
    doc = {"no such process": dict(pid=_dead_pid()), "another process of its pid": dict(started=held.holder.started - 1),
           "an older lease document": dict(pid=_dead_pid(), pid_space="", started=-1)}[how]
    gone = dataclasses.replace(held.holder, **doc)
    lease_module._write(held.node, gone)
    _another_driver(monkeypatch)
    if how == "an older lease document":  # (where its pid means nothing, only the expiry tells)
        with pytest.raises(LeaseHeld, match="another driver is rendering this store"):
            Lease.acquire(group, "s.zarr", duration=600, heartbeat=False)
        return
    assert gone.gone() and f"{gone.who()} is gone" in gone.describe(time.time())
    taker = Lease.acquire(group, "s.zarr", duration=600, heartbeat=False)
    assert taker.holder.epoch == 2 and taker.took_over == (
        f"s.zarr: took the store over from {gone.who()}, which is gone (it ended without releasing its lease; epoch 2)")
    assert not taker.holder.gone()  # this process: alive, and started when it did
    with pytest.raises(Fenced, match="took it over"):  # the one that held it is fenced, as ever
        held.check()


def test_a_driver_elsewhere_that_stopped_renewing_is_waited_out(tmp_path, monkeypatch):
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w-")
    monkeypatch.setattr(lease_module, "_PID_SPACE", "another machine's")
    elsewhere = Lease.acquire(group, "s.zarr", duration=3.0, heartbeat=False)  # renews nothing: it died there
    monkeypatch.undo()
    _another_driver(monkeypatch)
    assert not holder(group).gone()  # its pid means nothing here
    _wait_until(lambda: holder(group).stopped_renewing(time.time()) is not None)
    with pytest.raises(LeaseHeld) as refused:
        Lease.acquire(group, "s.zarr", duration=600, heartbeat=False)
    assert re.search(rf"s.zarr: another driver holds this store: {ME}, which stopped renewing its lease \d+ s ago "
                     rf"\(it died or froze; the lease lapses in \d+ s\); `farm resume --wait s.zarr` takes over then",
                     str(refused.value)), str(refused.value)
    said = []
    lease_module.wait_free(group, "s.zarr", said.append, poll=0.1)
    assert time.time() >= elsewhere.expires and len(said) == 1, said
    assert said[0].startswith(f"s.zarr: waiting for the lease of {ME} to lapse (it stopped renewing it ")
    assert Lease.acquire(group, "s.zarr", duration=600, heartbeat=False).holder.epoch == 2


def test_a_fenced_driver_writes_nothing_to_the_store(tmp_path, monkeypatch):
    spec, store = filled_store(tmp_path / "f.zarr", frames=(0, 1))
    store.lease = Lease.acquire(store.group, store.url, duration=0.5, heartbeat=False)
    store.write_progress(state="running")  # while it holds the lease, it writes
    _wait_until(lambda: time.time() > store.lease.expires)
    _another_driver(monkeypatch)
    taker = Lease.acquire(store.group, store.url, duration=600)
    before = _data_files(tmp_path / "f.zarr")
    block = np.ones((spec.tile, spec.tile, 3), np.float32)
    record = TileRecord.of(store.all_records()[0, 0, 0])
    for write in (lambda: store.write_tail((0, 0, 0), record, block, block[..., 0], 2, spec.spp),
                  lambda: store.fold_tile((0, 0, 0), record, np.zeros((spec.tile, spec.tile, 10), np.float32)),
                  lambda: store.forget_frames([1]), lambda: store.write_progress(state="running"),
                  lambda: store.set_spp(spec.to_json())):
        with pytest.raises(Fenced, match=f"took it over .*; it stopped without writing"):
            write()
    assert _data_files(tmp_path / "f.zarr") == before
    taker.release()


@pytest.mark.parametrize("text", [b"\x00garbage", b"[]", b'{"epoch": 1}', "bad expiry"])
def test_a_lease_document_that_does_not_read_holds_nothing(tmp_path, monkeypatch, text):
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w-")
    first = Lease.acquire(group, "s.zarr", duration=600, heartbeat=False)
    if text == "bad expiry":
        text = json.dumps(dict(dataclasses.asdict(first.holder), expires="later")).encode()
    (tmp_path / "s.zarr" / "lease" / "epoch-0000000001.json").write_bytes(text)
    assert holder(group) is False
    with pytest.raises(Fenced, match="epoch 1 replaced it"):
        first.check()
    _another_driver(monkeypatch)
    assert Lease.acquire(group, "s.zarr", duration=600, heartbeat=False).holder.epoch == 2


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "soon"])
def test_a_bad_lease_duration_is_refused_before_a_store_exists(tmp_path, monkeypatch, value):
    monkeypatch.setenv("FARM_LEASE_S", value)
    code, _, err = farm_main("render", ORBIT, "--frames", "0", "--spp", "1", "--res", "8x8", "--out", tmp_path / "x")
    assert code == 2 and err.count("\n") == 1 and "FARM_LEASE_S must be a number of seconds" in err, err
    assert not (tmp_path / "x").exists()


def _render(store, frames, env):
    args = ["render", ORBIT, "--frames", frames, "--spp", "32", "--res", "40x30", "--tile", "16",
            "--set", "angle=0:0,3:90", "--out", str(store), "--no-progress"]
    return subprocess.Popen([sys.executable, "-m", "farm.cli", *args], cwd=ROOT, start_new_session=True, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _recorded(store):
    """Tiles of the store that hold some samples."""
    if not FrameStore.exists(str(store)):
        return 0
    return tiles_done(store)[0]


def test_a_second_driver_is_refused_and_a_frozen_driver_is_fenced(tmp_path):
    store = tmp_path / "l.zarr"
    # A lease of 20 s, renewed every 7: the driver must outlive a loaded machine's stalls. The job
    # (2,880 tiles) is far longer than its first renewal, however fast the machine and warm the
    # cache: it is frozen there, so its length costs nothing.
    frames = 480
    proc = _render(store, f"0-{frames - 1}", dict(os.environ, FARM_LEASE_S="20"))
    try:
        with hang_guard(400):
            def renewed_while_rendering():
                driver = holder(FrameStore.open(str(store), mode="r").group) if _recorded(store) else None
                return driver and driver.renewed > driver.acquired
            # Looked at with the driver stopped, and stopped there (the driver alone: its workers
            # go on and answer): mid-job however fast it renders.
            stop_when(proc, renewed_while_rendering, timeout=300, what="the lease was renewed")
            assert proc.poll() is None and _recorded(store) < frames * 6, "the job ended before it could be frozen"
            # Frozen, its lease is live until it expires: a second driver is refused at once.
            second = farm_cli("resume", str(store), "--no-progress", timeout=120)
            assert second.returncode == 3, second.stderr[-2000:]
            lines = second.stderr.strip().splitlines()
            # Which words it uses depends on how long the second CLI took to start: within a renewal
            # period of the last renewal the driver still looks alive, past it the lease says it froze.
            who = f"{socket.gethostname()} pid {proc.pid}"
            assert len(lines) == 1 and (f"another driver is rendering this store: {who} (its lease was renewed"
                                        in lines[0] or f"another driver holds this store: {who}, which stopped "
                                        f"renewing its lease" in lines[0]), second.stderr
            group = FrameStore.open(str(store), mode="r").group
            _wait_until(lambda: not holder(group).live(time.time()))
            taken = Lease.acquire(FrameStore.open(str(store)).group, str(store), duration=600, heartbeat=False)
            before = _data_files(store)
            os.kill(proc.pid, signal.SIGCONT)
            _, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 3, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == (
        f"error: {store}: this driver lost the store's lease ({ME} took it over (epoch 2)); it stopped without "
        f"writing. `farm status {store}` shows who holds it") and "Traceback" not in stderr
    # Not a byte of data or notes once it was fenced; the one write it may have passed its check
    # for before it was frozen (the window farm/lease.py documents) is all that can land.
    after = _data_files(store)
    changed = {path for path in set(before) | set(after) if before.get(path) != after.get(path)}
    assert len(changed) <= 1, sorted(changed)
    assert not FrameStore.open(str(store), mode="r").verified_records()[1]
    status = farm_cli("status", str(store), timeout=120)
    assert f"driver:  {ME}, lease live (epoch 2" in status.stdout, status.stdout
    taken.release()
