"""The farm end to end on a real local Ray and real Zarr stores: bits equal to the tracer's own
render, a worker killed mid-task, a driver killed mid-job, refinement, and bad inputs."""
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

from farm import job
from farm.curves import Curve
from farm.errors import SceneFileError, SpecError
from farm import lease as lease_module
from farm.lease import Lease, holder
from farm import scheduler
from farm.progress import NOTE_EVERY_S
from farm.results import Commits
from farm.scheduler import run_job
from farm.spec import GroupsSpec, JobSpec
from farm.store import FrameStore, StoreError
from tests.helpers.farm_cases import (ORBIT, ROOT, ctrl_c_heard, exported, farm_cli, farm_main, filled_store, orbit_spec,
                                     reference, stop_when_rendered, store_files, tiles_done)
from tests.helpers.hang_guard import hang_guard


def test_job_renders_the_bits_of_the_tracer_and_refines(local_ray, tmp_path):
    spec, store = job.prepare(orbit_spec(tmp_path / "a.zarr"))
    assert (spec.pass_size, spec.chunk_passes) == (4, 16)
    assert (store.width, store.height, store.tiles_y, store.tiles_x) == (40, 30, 2, 3)
    plan = run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    assert len(plan.todo) == 3 * 1 * 6 and all(t.tail for t in plan.todo)
    images = exported(store.url, tmp_path)
    ref = reference(spec)
    for got, want in zip(images, ref):
        assert got.shape == (30, 40, 3) and got.mean() > 0.01
        np.testing.assert_array_equal(got, want)
    assert np.abs(images[0] - images[2]).mean() > 0.01  # the camera moved
    # The store notes what rendered it: the members' tracer, jax and jaxlib, and the arithmetic.
    import jax
    import jaxlib
    (renderer,) = store.renderers
    assert f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, cpu {spec.groups.cpu_isa}" in renderer
    # Nothing left: a second run renders nothing.
    assert run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False).todo == []
    # Samples of other software: a refine is told, once, and the status names both.
    other = "tracer 0123456789ab, jax 0.1, jaxlib 0.1, cpu AVX2"
    store.group.attrs["farm"] = dict(store.meta, renderers=[other])
    # More samples, twice: 20 spp continue the stored tail (its passes were whole); 70 spp
    # complete chunk 0 (folded) and start a tail whose last pass is cut. Each time the result
    # is the bits of a job rendered at that spp from the start.
    for spp, chunks, continues in ((20, {0}, True), (70, {0, 1}, True)):
        more, store = job.prepare(dataclasses.replace(orbit_spec(tmp_path / "a.zarr"), spp=spp))
        said = []
        plan = run_job(more, store, job.group_shapes(more, local=True), show_progress=False, log=said.append)
        assert {t.chunk for t in plan.todo} == chunks and any(t.continues for t in plan.todo) == continues
        warned = [line for line in said if "not to the bit" in line]  # (said once)
        assert len(warned) == (spp == 20) and (spp != 20 or other in warned[0] and renderer in warned[0])
        for got, want in zip(exported(store.url, tmp_path, f"more{spp}"), reference(more)):
            np.testing.assert_array_equal(got, want)
    assert FrameStore.open(store.url, "r").renderers == [other, renderer]
    code, out, _ = farm_main("status", store.url)
    assert code == 0 and f"rendered by 2 versions of the software" in out and other in out and renderer in out
    assert store.all_records()["folded"].tolist() == np.ones((3, 2, 3), int).tolist()  # one chunk folded


def _kill_a_rendering_member(stop, killed):
    """Kill the first process seen running GroupMember.render (a real worker process of this
    test's own Ray: a descendant of this process, never another run's worker on the machine)."""
    while not stop.is_set() and not killed:
        for p in psutil.Process().children(recursive=True):
            try:
                cmdline = " ".join(p.cmdline())
            except psutil.Error:
                continue
            if "GroupMember.render" in cmdline:  # killed at once: a warm cache renders a task in no time
                try:
                    p.kill()
                    killed.append(p.pid)
                except psutil.Error:
                    continue
                return
        time.sleep(0.05)


def test_a_worker_killed_mid_task_changes_no_bit(local_ray, tmp_path):
    spec = dataclasses.replace(orbit_spec(tmp_path / "b.zarr", frames=(0, 1), spp=64), pass_size=16)
    spec, store = job.prepare(spec)
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=_kill_a_rendering_member, args=(stop, killed))
    killer.start()
    messages = []
    try:
        run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False, log=messages.append)
    finally:
        stop.set()
        killer.join()
    assert killed, "no worker was killed"
    assert any("rebuilding" in m for m in messages)
    for got, want in zip(exported(store.url, tmp_path), reference(spec)):
        np.testing.assert_array_equal(got, want)


def test_driver_killed_mid_job_is_taken_over_at_once_and_resumed_to_the_same_bits(tmp_path):
    """kill -9 of a driver's process group (Ray's processes too) mid-job: its lease (600 s) is
    live, but its process is gone from this machine, so `farm cancel` says there is nothing to
    cancel and `farm resume` takes over at once, saying so, and ends in an uninterrupted job's bits."""
    store = tmp_path / "c.zarr"
    args = ["render", ORBIT, "--frames", "0-3", "--spp", "32", "--res", "40x30", "--tile", "16",
            "--set", "angle=0:0,3:90", "--out", str(store), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, FARM_LEASE_S="600"))  # only its death can free the store
    try:
        done, tiles = stop_when_rendered(proc, store, tiles=3)  # stopped: it dies mid-job, however fast
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = time.monotonic()
    assert 3 <= done < tiles and tiles_done(store) == (done, tiles)
    group = FrameStore.open(str(store), mode="r").group
    dead = holder(group)
    assert dead.pid == proc.pid and dead.live(time.time()) and dead.gone()  # it died holding the store
    resume = subprocess.Popen([sys.executable, "-m", "farm.cli", "resume", str(store), "--no-progress"], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    with hang_guard(300):
        for line in resume.stderr:
            lines.append(line)
            if "took the store over" in line:
                took_over, taken_at = time.monotonic() - killed, time.time()
                break
        lines += resume.stderr.readlines()
        resume.wait()
    print(f"kill -9 to the resume taking over: {took_over:.2f} s")
    assert resume.returncode == 0, "".join(lines)[-2000:]
    took = [line for line in lines if "took the store over" in line]
    assert took == [f"{store}: took the store over from {dead.who()}, which is gone (it ended without releasing "
                    f"its lease; epoch 2)\n"] and taken_at < dead.expires, lines  # at once: its lease still ran
    assert holder(group).epoch == 2 and holder(group).released
    spec = JobSpec.from_json(FrameStore.open(str(store), mode="r").spec_json)
    for got, want in zip(exported(store, tmp_path), reference(spec)):
        np.testing.assert_array_equal(got, want)


def test_cancel_and_status_of_a_store_whose_driver_died_say_so_and_change_nothing(tmp_path):
    spec, fs = filled_store(tmp_path / "k.zarr", frames=(0, 0))
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = Lease.acquire(fs.group, fs.url, duration=600, heartbeat=False)
    lease_module._write(gone.node, dataclasses.replace(gone.holder, pid=dead.pid))
    before = store_files(tmp_path / "k.zarr")
    code, _, err = farm_main("cancel", fs.url)
    assert code == 0 and err == (f"nothing to cancel: no driver is rendering {fs.url} ({gone.holder.host} pid "
                                 f"{dead.pid} is gone: it ended without releasing its lease); the store is left as "
                                 f"it is (`farm resume {fs.url}` goes on)\n"), err
    assert store_files(tmp_path / "k.zarr") == before  # no cancel node, the lease as it was
    code, out, _ = farm_main("status", fs.url)
    assert code == 0 and f"driver:  none ({gone.holder.host} pid {dead.pid} is gone: it ended without releasing " \
        f"its lease; the next `farm resume` takes over at once)" in out, out


def test_corrupted_chunks_are_reported_refused_and_rendered_again(local_ray, tmp_path):
    spec, store = job.prepare(orbit_spec(tmp_path / "d.zarr", frames=(1, 1)))
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    before = exported(store.url, tmp_path, "before")[0]
    (tmp_path / "d.zarr" / "tail" / "c.0.0.0.0").write_bytes(b"\x00garbage" * 3)  # does not decode
    store.tail[0, 16:30, 32:40, 0] += 1.0  # decodes, fails its CRC
    with pytest.raises(StoreError, match=r"2 tile\(s\) whose recorded data"):
        exported(store.url, tmp_path, "broken")
    code, out, _ = farm_main("status", store.url, "--verify")
    assert code == 0 and "damaged: 2 tile(s) whose recorded data does not read back (frames 1)" in out, out
    messages = []
    plan = run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False, log=messages.append)
    assert sorted(t.key for t in plan.todo) == [(0, 0, 0, 0), (0, 0, 1, 2)] and "2 stored tile" in messages[0]
    np.testing.assert_array_equal(exported(store.url, tmp_path, "after")[0], before)
    assert "damaged" not in farm_main("status", store.url, "--verify")[1]


def test_ctrl_c_says_how_to_resume_and_a_copy_of_the_store_resumes_where_it_is(tmp_path):
    store, copy = tmp_path / "h.zarr", tmp_path / "elsewhere" / "copy.zarr"
    args = ["render", ORBIT, "--frames", "0-3", "--spp", "32", "--res", "40x30", "--tile", "16",
            "--set", "angle=0:0,3:90", "--out", str(store), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_heard)
    try:
        stop_when_rendered(proc, store, tiles=3)  # stopped mid-job, however fast it renders
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
        os.kill(proc.pid, signal.SIGCONT)  # the driver takes it as it continues
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == f"error: interrupted; `farm resume {store}` goes on from here"
    assert "Traceback" not in stderr and FrameStore.open(str(store), mode="r").progress()["state"] == "interrupted"
    assert holder(FrameStore.open(str(store), mode="r").group).released
    shutil.copytree(store, copy)
    original = store_files(store)
    result = farm_cli("resume", str(copy), "--no-progress")
    assert result.returncode == 0, result.stderr[-2000:]
    assert store_files(store) == original  # the store recorded in the copy is not the one resumed
    spec, _ = job.open_store(str(copy))
    assert spec.store == str(copy)
    for got, want in zip(exported(copy, tmp_path), reference(spec)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sig, whole_group", [(signal.SIGTERM, True), (signal.SIGHUP, False)])
def test_sigterm_and_sighup_stop_a_driver_as_ctrl_c_does(tmp_path, sig, whole_group):
    """A service manager's stop (SIGTERM to the process group: Ray's own processes stop too, and
    the driver's calls into Ray would wait a minute for it) and a closed terminal (SIGHUP to the
    driver): one line, exit 128 + the signal, the state "stopped", the lease released; the
    stopped job resumes to the bits of an uninterrupted render."""
    store = tmp_path / "t.zarr"
    args = ["render", ORBIT, "--frames", "0-3", "--spp", "32", "--res", "40x30", "--tile", "16",
            "--set", "angle=0:0,3:90", "--out", str(store), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        stop_when_rendered(proc, store, tiles=3)
        (os.killpg if whole_group else os.kill)(proc.pid, sig)
        os.kill(proc.pid, signal.SIGCONT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    name = signal.Signals(sig).name
    assert proc.returncode == 128 + sig, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == f"error: stopped by {name}; `farm resume {store}` goes on from here"
    assert FrameStore.open(str(store), mode="r").progress()["state"] == "stopped"
    assert holder(FrameStore.open(str(store), mode="r").group).released
    if not whole_group:
        return
    result = farm_cli("resume", str(store), "--no-progress")
    assert result.returncode == 0, result.stderr[-2000:]
    spec, _ = job.open_store(str(store))
    for got, want in zip(exported(store, tmp_path), reference(spec)):
        np.testing.assert_array_equal(got, want)


def test_a_store_of_another_job_is_refused_and_left_alone(tmp_path):
    spec, store = job.prepare(orbit_spec(tmp_path / "e.zarr"))
    attrs = dict(FrameStore.open(store.url).group.attrs)
    for other, message in ((dataclasses.replace(spec, seed=5), "different job: seed"),
                           (dataclasses.replace(spec, frames=(1, 5)), "holds frames 0-2, not 1-5"),
                           (dataclasses.replace(spec, scene=str(ROOT / "examples" / "cbox.xml"), curves=()),
                            "different job: scene")):
        with pytest.raises(StoreError, match=message):
            job.prepare(other)
    with pytest.raises(SpecError, match="already holds 8 spp"):
        job.prepare(dataclasses.replace(spec, spp=4))
    assert dict(FrameStore.open(store.url).group.attrs) == attrs
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    with pytest.raises(StoreError, match="not a farm frame store"):
        FrameStore.open(str(tmp_path / "plain"))


@pytest.mark.parametrize("args,code,message", [
    (("render", "missing.xml", "--out", "x.zarr"), 1, "scene file not found"),
    (("render", "examples/cbox.xml", "--frames", "5-2", "--out", "x.zarr"), 2, "FIRST <= LAST"),
    (("render", "examples/cbox.xml", "--res", "0x10", "--out", "x.zarr"), 2, "between 1 and 16384"),
    (("render", "examples/orbit.xml", "--set", "angel=3", "--out", "x.zarr"), 2, "'angel' is not a <default>"),
    (("render", "examples/cbox.xml", "--spp", "0", "--out", "x.zarr"), 2, "spp must be"),
    (("resume", "nowhere.zarr"), 3, "no frame store here"),
    (("export", "nowhere.zarr", "--out", "x"), 3, "no frame store here"),
])
def test_bad_input_is_one_line_and_an_exit_code(tmp_path, args, code, message):
    result = farm_cli(*args, timeout=120)
    assert result.returncode == code, result.stderr
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (ROOT / "x.zarr").exists()


def test_job_file(tmp_path):
    (tmp_path / "job.toml").write_text(f"""
scene = "{ORBIT}"
frames = [0, 4]
spp = 32
resolution = [64, 48]
store = "out.zarr"
[groups]
count = 2
[params.angle]
keys = [[0, 0.0], [4, 40.0]]
interpolation = "smooth"
""")
    spec = JobSpec.from_toml(str(tmp_path / "job.toml"))
    assert spec.store == str(tmp_path / "out.zarr") and spec.frames == (0, 4) and spec.groups == GroupsSpec(count=2)
    assert dict(spec.params_at(2))["angle"] == "20.0" and dict(spec.params_at(1))["angle"] != "10.0"
    (tmp_path / "bad.toml").write_text('scene = "x.xml"\nspp = 4\nstore = "s"\nframs = "0-3"\n')
    with pytest.raises(SpecError, match="unknown key 'frams'"):
        JobSpec.from_toml(str(tmp_path / "bad.toml"))
    big = dataclasses.replace(spec, spp=65536, frames=(0, 0)).planned()
    assert big.tree.n_chunks(65536) == 1024  # a still spreads over its chunks x tiles


@pytest.mark.parametrize("groups, message", [
    ("count = 0", "groups.count must be a whole number >= 1, got 0"),
    ("hosts = 1.5", "groups.hosts must be a whole number >= 1, got 1.5"),
    ("devices_per_host = '2'", "groups.devices_per_host must be a whole number >= 1, got '2'"),
    ("devices_per_host = true", "groups.devices_per_host must be a whole number >= 1, got True"),
    ("platform = 'quantum'", "groups.platform must be one of"),
])
def test_job_file_groups_are_checked(tmp_path, groups, message):
    (tmp_path / "job.toml").write_text(f'scene = "{ORBIT}"\nspp = 4\nstore = "s.zarr"\n[groups]\n{groups}\n')
    with pytest.raises(SpecError) as failure:
        JobSpec.from_toml(str(tmp_path / "job.toml"))
    assert message in str(failure.value) and "\n" not in str(failure.value)


def test_a_task_given_up_on_is_written_once_when_its_first_group_answers(local_ray, tmp_path, monkeypatch):
    # The first look for stragglers gives up on every group's task then in flight (whether it
    # compiles or loads its program from a warm cache): the groups are rebuilt and their tasks sent
    # again; whatever their killed members wrote must never be committed.
    spec = dataclasses.replace(orbit_spec(tmp_path / "f.zarr", frames=(0, 1)), groups=GroupsSpec(count=2))
    spec, store = job.prepare(spec)
    writes = []  # the results committed (the workers write them, the driver commits: farm.results)
    accept = Commits.accept
    monkeypatch.setattr(Commits, "accept", lambda self, task, *a: (writes.append(task.line), accept(self, task, *a))[1])
    failed, group_failed = [], scheduler._JobRun.group_failed
    monkeypatch.setattr(scheduler._JobRun, "group_failed", lambda run, *a: (failed.append(a), group_failed(run, *a)))
    monkeypatch.setattr(scheduler.TaskClock, "limit", lambda self, first: 600.0 if failed else 0.0)
    messages = []
    plan = run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False, log=messages.append)
    assert any("timed out after 0 s; rebuilding it and sending its tasks elsewhere" in m for m in messages), messages
    assert plan.stats["fenced"] >= 1 and plan.stats["failures"].count == len(failed) >= 1
    assert all(t.tail for t in plan.todo)
    assert sorted(writes) == sorted(t.line for t in plan.todo)  # every task written exactly once
    for got, want in zip(exported(store.url, tmp_path), reference(spec)):
        np.testing.assert_array_equal(got, want)


def test_a_store_at_an_fsspec_url(local_ray, tmp_path):
    url = f"memory://farm-test/{tmp_path.name}/job.zarr"
    assert not FrameStore.exists(url)
    spec, store = job.prepare(orbit_spec(url, frames=(2, 2)))
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    assert FrameStore.exists(url)
    got = exported(url, tmp_path)[0]
    np.testing.assert_array_equal(got, reference(spec)[0])


def test_cancel_stops_a_running_driver_and_leaves_a_resumable_store(tmp_path):
    store = tmp_path / "g.zarr"
    args = ["render", ORBIT, "--frames", "0-29", "--spp", "32", "--res", "40x30", "--tile", "16",
            "--out", str(store), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", *args], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        stop_when_rendered(proc, store)  # stopped mid-job, however fast it renders
        stopped = time.monotonic()
        result = farm_cli("cancel", str(store), timeout=60)
        assert result.returncode == 0, result.stderr
        # Stopped for longer than the driver's checks are apart: it looks for a cancel as soon as it continues.
        time.sleep(max(0.0, NOTE_EVERY_S - (time.monotonic() - stopped)))
        os.kill(proc.pid, signal.SIGCONT)
        t0 = time.monotonic()
        proc.wait(timeout=60)
        assert time.monotonic() - t0 < 30
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stderr = proc.stderr.read()
    assert proc.returncode == 5 and "cancelled" in stderr.strip().splitlines()[-1], stderr[-2000:]
    fs = FrameStore.open(str(store), mode="r")
    assert fs.progress()["state"] == "cancelled" and holder(fs.group).released
    done, tiles = tiles_done(store)
    assert 0 < done < tiles
    status = farm_cli("status", str(store), timeout=60)
    assert status.returncode == 0 and status.stdout.count("cancelled") == 1, status.stdout  # said once
    assert re.search(r"^last run: cancelled \(\d+ s ago\)(, .*)?; `farm resume .*` goes on from here$", status.stdout,
                     re.M) and "\ndriver:  none\n" in status.stdout, status.stdout  # no lease of a driver gone


def test_local_groups_share_the_cores_one_device_each(tmp_path):
    """A job that names no device count gets one CPU device per core, split among its groups."""
    cores = len(os.sched_getaffinity(0))
    spec = orbit_spec(tmp_path / "a.zarr")
    assert [s.devices_per_host for s in job.group_shapes(spec, local=True)] == [cores]
    two = dataclasses.replace(spec, groups=GroupsSpec(count=2))
    assert [s.devices_per_host for s in job.group_shapes(two, local=True)] == [max(1, cores // 2)] * 2
    named = dataclasses.replace(spec, groups=GroupsSpec(devices_per_host=3))
    assert [s.devices_per_host for s in job.group_shapes(named, local=True)] == [3]


def _cropped_cbox(tmp_path, crop=(9, 5, 20, 18)):
    """The Cornell box on a film of its own size ($res, no --res), cropped to a window."""
    names = ("crop_offset_x", "crop_offset_y", "crop_width", "crop_height")
    window = "".join(f'<integer name="{n}" value="{v}"/>' for n, v in zip(names, crop))
    text = (ROOT / "examples" / "cbox.xml").read_text()
    path = tmp_path / "cropped.xml"
    path.write_text(text.replace('<rfilter type="gaussian"/>', window + '<rfilter type="gaussian"/>'))
    return str(path)


def test_a_cropped_scene_is_stored_at_its_window_and_rendered_as_the_tracer_does(local_ray, tmp_path):
    spec = dataclasses.replace(orbit_spec(tmp_path / "crop.zarr", frames=(1, 1), spp=4), scene=_cropped_cbox(tmp_path),
                               resolution=None, curves=(Curve("res", ((0, "36"),)),))
    spec, store = job.prepare(spec)
    assert (store.width, store.height, store.tiles_y, store.tiles_x) == (20, 18, 2, 2)
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    got, = exported(store.url, tmp_path)
    want, = reference(spec)
    assert got.shape == (18, 20, 3) and got.mean() > 0.01
    np.testing.assert_array_equal(got, want)


def test_a_scene_film_past_the_limits_is_refused_before_a_store_exists(tmp_path):
    spec = dataclasses.replace(orbit_spec(tmp_path / "huge.zarr", frames=(0, 0)), scene=_cropped_cbox(tmp_path),
                               resolution=None, curves=(Curve("res", ((0, "2147483647"),)),))
    with pytest.raises(SceneFileError) as failure:
        job.prepare(spec)
    assert "film width must be between 1 and 16384 pixels, got 2147483647" in str(failure.value)
    assert "cropped.xml:" in str(failure.value) and "\n" not in str(failure.value)
    assert not (tmp_path / "huge.zarr").exists()
