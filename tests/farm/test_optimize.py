"""`farm optimize`: an inverse-rendering job run by the real command line on an embedded local Ray
into a real store, on one group of one device and on two groups of two devices, one of them killed
(kill -9 of the driver's process group) mid-optimization and resumed at once on one group of three
devices (a tile's 8 bands spread unevenly): every checkpoint the same bits. Status, export, and the refusals of bad input before anything runs."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import zarr

from farm.lease import holder
from farm.store import FrameStore
from farm.web import make_app
from tests.helpers.farm_cases import ROOT, farm_cli, farm_main, stop_when
from tests.helpers.hang_guard import hang_guard
from tests.helpers.optimize_cases import KEYS, SCENE, make_targets, write_job

ITERATIONS = 6


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("targets")
    make_targets(str(folder))
    return str(folder)


def _checkpoints(store):
    """(params rows, state rows, loss history, record) of the store's optimization, as stored."""
    group = zarr.open_group(str(store), mode="r")["optimize"]
    return (np.asarray(group["params"][...]), np.asarray(group["state"][...]), np.asarray(group["loss"][...]),
            np.asarray(group["record"][...]))


def _kill_a_member(proc):
    """SIGKILL one of the driver ``proc``'s group members (a process of its own Ray); its pid."""
    for p in psutil.Process(proc.pid).children(recursive=True):
        try:
            if "GroupMember" in " ".join(p.cmdline()):
                p.kill()
                return p.pid
        except psutil.Error:
            continue
    return None


def _done(store):
    try:
        return int(zarr.open_group(str(store), mode="r")["optimize/record"][0])
    except Exception:
        return 0


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, targets):
    """One group of one device, start to end."""
    folder = tmp_path_factory.mktemp("one")
    store = folder / "one.zarr"
    job = write_job(folder / "job.toml", store, targets, iterations=ITERATIONS)
    result = farm_cli("optimize", job, "--groups", "1", "--devices-per-host", "1")
    assert result.returncode == 0, result.stderr[-2000:]
    return store


def test_two_groups_killed_and_resumed_end_in_the_bits_of_one_group(tmp_path, targets, uninterrupted):
    store = tmp_path / "two.zarr"
    job = write_job(tmp_path / "job.toml", store, targets, iterations=ITERATIONS)
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", "optimize", job, "--groups", "2", "--devices-per-host",
                             "2"], cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(os.environ, FARM_LEASE_S="600"))
    try:
        first = stop_when(proc, lambda: _done(store), what="an iteration was committed")
        member = _kill_a_member(proc)  # (the driver stopped: it finds the group lost when it goes on)
        os.kill(proc.pid, signal.SIGCONT)
        done = stop_when(proc, lambda: _done(store) > first and _done(store), what="another iteration")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert member is not None and first < done < ITERATIONS
    log = "\n".join(FrameStore.open(str(store), mode="r").logs())
    assert "a member was lost" in log and "rebuilding it and sending its tasks elsewhere" in log
    dead = holder(FrameStore.open(str(store), mode="r").group)
    assert dead.live(time.time()) and dead.gone()  # it died holding the store (a 600 s lease)
    with hang_guard(300):
        resumed = farm_cli("resume", str(store), "--groups", "1", "--devices-per-host", "3")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "took the store over" in resumed.stderr
    assert f"iterations {done + 1}-{ITERATIONS}" in resumed.stderr
    # The same software resumed it: one renderer noted, nothing said of it.
    assert len(FrameStore.open(str(store), mode="r").renderers) == 1 and "not to the bit" not in resumed.stderr
    (p1, s1, l1, r1), (p2, s2, l2, r2) = _checkpoints(uninterrupted), _checkpoints(store)
    assert r1[0] == r2[0] == ITERATIONS
    assert p1.tobytes() == p2.tobytes() and s1.tobytes() == s2.tobytes() and l1.tobytes() == l2.tobytes()
    assert not np.array_equal(p1[0], p1[-1])  # it moved
    # Toward the truth: the light's radiance (too dim at the start) and the loss.
    light = slice(3, 6)
    truth = np.array([10.0, 9.0, 7.0], np.float32)
    assert np.abs(p1[-1, light] - truth).sum() < np.abs(p1[0, light] - truth).sum()
    assert l1[-1] < l1[0]


def test_status_and_export_of_an_optimization(tmp_path, targets, uninterrupted):
    code, out, err = farm_main("status", uninterrupted, "--json")  # (in this process: no interpreter to start)
    assert code == 0, err
    s = json.loads(out)
    params, _, losses, _ = _checkpoints(uninterrupted)
    assert (s["state"], s["iteration"], s["iterations"]) == ("done", ITERATIONS, ITERATIONS)
    assert s["losses"] == losses.tolist() and s["loss"] == losses[-1]
    assert list(s["parameters"]) == list(KEYS)
    assert np.array(sum(s["parameters"].values(), []), np.float32).tobytes() == params[-1].tobytes()
    assert f"iteration:  {ITERATIONS}/{ITERATIONS}, loss" in farm_main("status", uninterrupted)[1]

    out = tmp_path / "out"
    code, _, err = farm_main("export", uninterrupted, "--out", out, "--format", "npy")
    assert code == 0, err
    assert sorted(os.listdir(out)) == ["frame_0000.npy", "frame_0001.npy", "inverse.xml", "parameters.json"]
    written = json.loads((out / "parameters.json").read_text())
    assert written == s["parameters"]
    import tracer  # the exported scene holds the values, to the bit
    scene = tracer.load_scene(str(out / "inverse.xml"), accel="jax", res="16")
    got = tracer.parameters(scene)
    for key in KEYS:
        np.testing.assert_array_equal(np.asarray(got[key]), np.array(written[key], np.float32))
    renders = zarr.open_group(str(uninterrupted), mode="r")["optimize/renders"]
    np.testing.assert_array_equal(np.load(out / "frame_0001.npy"), renders[1])

    code, _, err = farm_main("wait", uninterrupted, "--timeout", "5")
    assert code == 0 and err.strip() == f"{uninterrupted}: done"
    assert f"{ITERATIONS}/{ITERATIONS}     iters  " in farm_main("list", uninterrupted.parent)[1]

    client = make_app(str(uninterrupted.parent)).test_client()  # farm serve's monitor, in this process
    page = client.get("/").get_data(as_text=True)
    assert "No frame stores" not in page and f">{ITERATIONS}/{ITERATIONS}</td>" in page
    page = client.get(f"/jobs/{uninterrupted.name}").get_data(as_text=True)
    assert "<polyline" in page and page.count("<img") == 4  # the loss curve; renders beside targets
    assert client.get(f"/api/jobs/{uninterrupted.name}").get_json() == dict(s, store=uninterrupted.name)
    for kind in ("renders", "targets"):
        png = client.get(f"/api/jobs/{uninterrupted.name}/{kind}/1.png")
        assert png.status_code == 200 and png.mimetype == "image/png"
    assert client.get(f"/api/jobs/{uninterrupted.name}/renders/2.png").status_code == 404

    other = write_job(tmp_path / "other.toml", uninterrupted, targets, iterations=ITERATIONS, learning_rate=0.5)
    code, _, err = farm_main("optimize", other)  # another optimization on its store: refused, the store as it was
    assert code == 3 and "optimize.learning_rate is 0.3, not 0.5" in err.strip().splitlines()[-1], err
    assert _checkpoints(uninterrupted)[0].tobytes() == params.tobytes()
    code, _, err = farm_main("render", SCENE, "--out", uninterrupted, "--res", "16x16", "--spp", "1")
    assert code == 3 and "holds an optimization" in err, err


@pytest.mark.parametrize("change, code, message", [
    (dict(keys=("left.reflectance.value", "nope.value")), 2, "'nope.value': the scene has no such parameter"),
    (dict(keys=("floor.to_world",)), 2, "'floor.to_world' cannot be differentiated: shape geometry"),
    (dict(optimizer="rmsprop"), 2, "optimize.optimizer must be one of adam, sgd, got 'rmsprop'"),
    (dict(loss="l3"), 2, "optimize.loss must be one of l2, l1, got 'l3'"),
    (dict(targets="missing"), 1, "frame_0000.npy: no such file"),
    (dict(targets="small"), 2, "frame_0000.npy is 8x8, the film 16x16"),
])
def test_bad_input_is_refused_by_name_before_anything_runs(tmp_path, targets, change, code, message):
    if change.get("targets") == "small":
        os.makedirs(tmp_path / "small")
        for frame in (0, 1):
            np.save(tmp_path / "small" / f"frame_{frame:04d}.npy", np.zeros((8, 8, 3), np.float32))
    if "targets" in change:
        change = dict(change, targets=str(tmp_path / change["targets"]))
    store = tmp_path / "bad.zarr"
    job = write_job(tmp_path / "job.toml", store, change.pop("targets", targets), **change)
    got, _, err = farm_main("optimize", job)
    assert got == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not store.exists()  # nothing was made
