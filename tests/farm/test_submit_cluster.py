"""``farm submit``, ``wait`` and ``logs`` against a real Ray cluster made with ``ray start``: a head
and a second node (each its own raylet), token authentication as Ray 2.60 sets it up, all in the
test's own HOME and temp dir, stopped by their own processes (never ``ray stop``, which ends
every Ray on the machine). A job renders on both nodes to a local render's bits; then the second
node is killed (its raylet and every process under it, SIGKILL) in the middle of a job, which
still ends in a local render's bits. Minutes on 2 cores: marked ``cluster``, which the default
run skips (``pytest -m cluster`` runs it)."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil
import pytest

from tests.helpers.farm_cases import ORBIT, ROOT, exported, farm_cli, tiles_done

pytestmark = pytest.mark.cluster
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
JOB = ("--frames", "0-1", "--spp", "4", "--res", "32x32", "--tile", "16", "--set", "angle=0:0,1:45")  # 8 tasks
LONG = ("--frames", "0-7", "--spp", "16", "--res", "64x64", "--tile", "16", "--set", "angle=0:0,7:90")  # 128 tasks


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(url, timeout=120):
    """Wait for the dashboard at ``url`` to answer (a 401 too: it wants the token)."""
    import urllib.error
    import urllib.request
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/api/version", timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the dashboard at {url} did not come up")


def _nodes_up(url, home, n, timeout=180):
    """Wait until the dashboard at ``url`` counts ``n`` live nodes (a node's start is slow on a
    loaded machine), asking with the token Ray made in ``home``."""
    import json
    import urllib.request
    token = (home / ".ray" / "auth_token").read_text().strip()
    request = urllib.request.Request(url + "/nodes?view=summary", headers={"Authorization": f"Bearer {token}"})
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                summary = json.load(answer)["data"]["summary"]
            alive = sum(1 for node in summary if node.get("raylet", {}).get("state") == "ALIVE")
        except (OSError, KeyError, ValueError) as e:
            alive = f"not known ({e})"
        if isinstance(alive, int) and alive >= n:
            return
        assert time.monotonic() < deadline, f"{n} nodes did not come up: {alive} alive"
        time.sleep(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(dashboard URL, env with the cluster's HOME, the second node's ``ray start`` process): a head
    and a second node, 2 CPUs each."""
    home = tmp_path_factory.mktemp("home")
    temp = tempfile.mkdtemp(prefix="/tmp/rc")  # short: Ray's socket paths must fit in 107 bytes
    # The farm on the nodes' PATH, as an install on a cluster puts it.
    env = dict(os.environ, HOME=str(home), RAY_USAGE_STATS_ENABLED="0",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True)
    port, dash = _free_port(), _free_port()
    procs = [subprocess.Popen([RAY, "start", "--head", "--block", f"--port={port}", f"--dashboard-port={dash}",
                               "--dashboard-host=127.0.0.1", "--num-cpus=2", f"--temp-dir={temp}"],
                              env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        url = f"http://127.0.0.1:{dash}"
        _up(url)
        # A node joining a cluster of token authentication must be told so (the head turned it on itself,
        # having found the token), else the GCS refuses it.
        procs.append(subprocess.Popen([RAY, "start", "--block", f"--address=127.0.0.1:{port}", "--num-cpus=2"],
                                      env=dict(env, RAY_AUTH_MODE="token"), start_new_session=True, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        _nodes_up(url, home, 2)
        yield url, env, procs[1]
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:  # (the second node may have been killed by a test)
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        for p in psutil.process_iter(["cmdline"]):  # what outlived them: this cluster's own, by its temp dir
            if any(temp in arg for arg in p.info["cmdline"] or ()):
                p.kill()
        shutil.rmtree(temp, ignore_errors=True)


def test_submit_to_a_ray_start_cluster_renders_the_bits_of_a_local_render(cluster, tmp_path):
    url, env, _ = cluster
    store = tmp_path / "sub.zarr"
    bare = dict(env, HOME=str(tmp_path))  # no token here
    refused = farm_cli("submit", ORBIT, *JOB, "--out", str(store), "--address", url, env=bare, timeout=120)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "wants an authentication token" in \
        refused.stderr, refused.stderr
    missing = farm_cli("submit", "nope.xml", "--out", str(store), "--address", url, env=env, timeout=120)
    assert missing.returncode == 1 and f"scene file not found: {ROOT / 'nope.xml'}" in missing.stderr, missing.stderr
    t0 = time.monotonic()
    first = farm_cli("submit", ORBIT, *JOB, "--out", os.path.relpath(store, ROOT), "--address", url, env=env,
                     timeout=120)
    assert first.returncode == 0 and first.stdout.strip().endswith("-1"), first.stderr
    waited = farm_cli("wait", str(store), "--address", url, "--timeout", "400", env=env, timeout=600)
    print(f"submit to done on the ray start cluster: {time.monotonic() - t0:.1f} s")
    assert waited.returncode == 0 and waited.stderr == f"{store}: done\n", waited.stderr
    logs = farm_cli("logs", str(store), "--address", url, env=env, timeout=120)
    assert logs.returncode == 0 and "rendering..." in logs.stdout and f"done: {store}" in logs.stdout, logs.stdout
    where = _tasks_by_host(logs.stdout)
    print(f"tasks by host: {where}")
    assert len(where) == 2 and sum(where.values()) == 8, logs.stdout  # both nodes rendered
    again = farm_cli("submit", ORBIT, *JOB, "--out", str(store), "--address", url, env=env, timeout=120)
    assert again.returncode == 0 and again.stdout.strip().endswith("-2"), again.stderr  # ended: submitted again
    local = tmp_path / "local.zarr"
    result = farm_cli("render", ORBIT, *JOB, "--out", str(local), "--cpu-isa", "AVX2", "--no-progress", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    for got, want in zip(exported(store, tmp_path, "sub"), exported(local, tmp_path, "local")):
        np.testing.assert_array_equal(got, want)


def _tasks_by_host(log):
    """{host: tasks} from the driver's last "tasks by host: node ID at IP: N, ..." line."""
    line = [ln for ln in log.splitlines() if "tasks by host: " in ln][-1].split("tasks by host: ", 1)[1]
    return {host: int(n) for host, n in (part.rsplit(": ", 1) for part in line.split(", "))}


def test_a_node_killed_mid_job_and_the_job_ends_in_the_bits_of_a_local_render(cluster, tmp_path):
    url, env, node = cluster
    store = tmp_path / "long.zarr"
    submitted = farm_cli("submit", ORBIT, *LONG, "--out", str(store), "--address", url, env=env, timeout=120)
    assert submitted.returncode == 0, submitted.stderr
    deadline = time.monotonic() + 400
    while True:  # a fifth of the tiles stored: both groups render (one a node), the job far from done
        try:
            done, total = tiles_done(store)
        except Exception:  # not made yet
            done, total = 0, 1
        if done >= 24:
            break
        assert time.monotonic() < deadline, "the job rendered nothing"
        time.sleep(0.2)
    t0 = time.monotonic()
    under = psutil.Process(node.pid).children(recursive=True)
    os.killpg(node.pid, signal.SIGKILL)
    for p in under:  # the node's raylet and workers, wherever their process group
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    node.wait()
    waited = farm_cli("wait", str(store), "--address", url, "--timeout", "600", env=env, timeout=700)
    print(f"node killed at {done}/{total} tiles -> job done: {time.monotonic() - t0:.1f} s")
    assert waited.returncode == 0 and waited.stderr == f"{store}: done\n", waited.stderr
    logs = farm_cli("logs", str(store), "--address", url, env=env, timeout=120).stdout
    formed = re.findall(r"group-\d+ on (node \w+)", next(ln for ln in logs.splitlines() if "group(s) formed:" in ln))
    failed = re.findall(r"group-\d+ on (node \w+) at [^:]*: task .* failed: .*; rebuilding it", logs)
    assert len(set(formed)) == 2 and failed and set(failed) < set(formed), logs  # the killed node's group failed
    where = _tasks_by_host(logs)
    print(f"groups formed on {formed}; failed on {sorted(set(failed))}; tasks by host: {where}")
    assert sum(where.values()) == 128, logs
    local = tmp_path / "local.zarr"
    result = farm_cli("render", ORBIT, *LONG, "--out", str(local), "--cpu-isa", "AVX2", "--no-progress", timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    for got, want in zip(exported(store, tmp_path, "sub"), exported(local, tmp_path, "local")):
        np.testing.assert_array_equal(got, want)
