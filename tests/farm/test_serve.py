"""``farm serve`` and ``farm list`` for real: the server is ``farm serve`` in a subprocess on a free
port, asked through HTTP; the jobs are real stores (one rendered on a local Ray while it is served,
others filled without rendering, damaged, or behind links that lead out of the served folder)."""
import contextlib
import http.client
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from PIL import Image

from farm import job, monitor
from farm.scheduler import run_job
from farm.folding import Folds
from farm.queue_view import QueueWatch
from farm.web import make_app
from farm.planner import plan
from tests.helpers.farm_cases import ROOT, ctrl_c_heard, farm_main, filled_store, orbit_spec
from tests.helpers.hang_guard import hang_guard


@contextlib.contextmanager
def served(root, *args):
    """``farm serve root ARGS --port 0`` in a subprocess: yields (host, port); stopped with Ctrl-C."""
    proc = subprocess.Popen([sys.executable, "-m", "farm.cli", "serve", str(root), "--port", "0", *args],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_heard)
    try:
        with hang_guard(120):
            lines = []
            while not (lines and "serving" in lines[-1]):
                line = proc.stderr.readline()
                assert line, f"farm serve ended: {''.join(lines)}"
                lines.append(line)
        host, port = re.search(r"http://([^:/]+):(\d+)/", lines[-1]).groups()
        yield host, int(port)
    finally:
        proc.send_signal(signal.SIGINT)
        with hang_guard(60):
            assert proc.wait() == 0, proc.stderr.read()
        proc.stderr.close()


def get(port, path):
    """(status, headers, body bytes) of GET ``path``, sent as it is (no normalizing, no quoting)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def get_json(port, path):
    status, _, body = get(port, path)
    assert status == 200, body
    return json.loads(body)


def pixels(png):
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def exported_png(store, frame, tmp_path):
    from farm.export import export_frames
    out = tmp_path / f"export-{len(list(tmp_path.iterdir()))}"
    spec, fs = job.open_store(str(store))
    ((_, path, _),) = export_frames(spec, fs, (frame, frame), "png", str(out))
    return np.asarray(Image.open(path).convert("RGB"))


def is_checker(image):
    return np.isin(image, monitor.NO_SAMPLES).all()


def test_a_render_seen_through_the_monitor_as_samples_arrive(local_ray, tmp_path):
    root = tmp_path / "jobs"
    spec, store = job.prepare(orbit_spec(root / "shots" / "orbit.zarr", frames=(0, 1), spp=4))
    with served(root) as (host, port):
        assert host == "127.0.0.1"  # not told otherwise
        (listed,) = get_json(port, "/api/jobs")
        assert (listed["store"], listed["state"], listed["frames"], listed["frames_done"], listed["spp"],
                listed["samples_done"]) == ("shots/orbit.zarr", "new", 2, 0, 4, 0)
        status, headers, png = get(port, "/api/jobs/shots/orbit.zarr/frames/0.png")
        assert status == 200 and headers["content-type"] == "image/png"
        before = pixels(png)
        assert before.shape == (30, 40, 3) and is_checker(before)  # no samples: the checker, not black

        seen, done = [], threading.Event()
        renderer = threading.Thread(target=lambda: (run_job(spec, store, job.group_shapes(spec, local=True),
                                                            show_progress=False), done.set()))
        renderer.start()
        with hang_guard(600):
            while not done.is_set() and renderer.is_alive():
                seen.append(get_json(port, "/api/jobs")[0]["samples_done"])
            renderer.join()
        assert done.is_set(), "the render failed"
        assert seen == sorted(seen)  # samples only ever arrive
        final = get_json(port, "/api/jobs/shots/orbit.zarr")
        assert (final["state"], final["frames_done"], final["eta_s"]) == ("done", 2, None)
        assert final["samples_done"] == final["samples_total"] == 2 * 40 * 30 * 4
        assert [(f["frame"], f["state"], f["spp"]) for f in final["per_frame"]] == [(0, "done", 4.0),
                                                                                         (1, "done", 4.0)]
        after = pixels(get(port, "/api/jobs/shots/orbit.zarr/frames/0.png")[2])
        assert not is_checker(after)
        np.testing.assert_array_equal(after, exported_png(store.url, 0, tmp_path))  # export's tone mapping

        status, _, page = get(port, "/jobs/shots/orbit.zarr")
        assert status == 200 and b"frame 1" in page and b"/api/jobs/shots/orbit.zarr/frames/1.png?max=" in page


def _record_task(spec, fs, tile, value):
    """Store the result of frame 0's first task on ``tile`` (row, column) as the driver does."""
    records = fs.all_records()
    task = next(t for t in plan(spec, records, fs.tiles_y, fs.tiles_x, fs.tile_pixels).todo
                if t.key == (0, 0, *tile))
    Folds(fs, records, spec.spp).accept(task, np.full((16, 16, 3), value, np.float32), np.ones((16, 16), np.float32))


def _partial_store(path):
    """A store of the orbit job with one task of frame 0 recorded (tile row 0, column 1; value 0.5)."""
    spec, fs = job.prepare(orbit_spec(path))
    _record_task(spec, fs, (0, 1), 0.5)
    return spec, fs


def test_the_preview_follows_the_records_as_tasks_are_written(tmp_path):
    spec, fs = _partial_store(tmp_path / "root" / "p.zarr")
    with served(tmp_path / "root") as (_, port):
        status, headers, first = get(port, "/api/jobs/p.zarr/frames/0.png")
        assert status == 200 and is_checker(pixels(first)[16:])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/api/jobs/p.zarr/frames/0.png", headers={"If-None-Match": headers["etag"]})
        assert conn.getresponse().status == 304  # the same records: the same image
        conn.close()
        # The driver records one more task (its sums first, as it does): the preview shows it.
        _record_task(spec, fs, (1, 0), 0.25)
        status, again, second = get(port, "/api/jobs/p.zarr/frames/0.png")
        assert status == 200 and again["etag"] != headers["etag"]
        image = pixels(second)
        assert (image[:16, 16:32] == 188).all() and (image[16:30, :16] == 137).all()
        assert is_checker(image[16:, 16:]) and is_checker(image[:16, :16])
        assert get_json(port, "/api/jobs/p.zarr")["samples_done"] == (16 * 16 + 14 * 16) * 8


def _snapshot(root):
    """{path: (bytes or None for a folder, mtime in ns)} of everything under ``root``."""
    out = {}
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(here, name)
            st = os.lstat(p)
            data = open(p, "rb").read() if name in files and not os.path.islink(p) else None
            out[p] = (data, st.st_mtime_ns)
    out[str(root)] = (None, os.stat(root).st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A served folder ``root``: a finished store, a partial one, damaged ones, one whose name is
    not UTF-8, and links out of it to ``outside``; served by one ``farm serve`` for the module: yields (base, port)."""
    base = tmp_path_factory.mktemp("serve")
    root, outside = base / "root", base / "outside"
    filled_store(root / "a" / "done.zarr")
    _partial_store(root / "partial.zarr")
    shutil.copytree(root / "a" / "done.zarr", root / "bad.zarr")
    (root / "bad.zarr" / "zarr.json").write_text("{")  # does not parse
    shutil.copytree(root / "a" / "done.zarr", root / "norecords.zarr")
    os.remove(root / "norecords.zarr" / "records" / "zarr.json")
    filled_store(outside / "secret.zarr")
    os.symlink(outside / "secret.zarr", root / "link.zarr")  # a store out of the folder
    shutil.copytree(root / "a" / "done.zarr", root / "evil.zarr")
    shutil.rmtree(root / "evil.zarr" / "state")
    os.symlink(outside / "secret.zarr" / "state", root / "evil.zarr" / "state")  # a store's node out of it
    (root / "notes").mkdir()
    (root / "notes" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    # A store under a name that is not UTF-8 (Latin-1 bytes): passed over, the page still served.
    shutil.copytree(os.fsencode(root / "a" / "done.zarr"), os.fsencode(root) + b"/caf\xe9.zarr")
    before = _snapshot(base)
    with served(root) as (_, port):
        yield base, port
    assert _snapshot(base) == before  # bytes and modification times: nothing written


def test_the_monitor_lists_every_store_and_writes_none(base):
    base, port = base
    before = _snapshot(base)
    jobs = {j["store"]: j for j in get_json(port, "/api/jobs")}
    assert sorted(jobs) == ["a/done.zarr", "bad.zarr", "evil.zarr", "norecords.zarr", "partial.zarr"]
    assert (jobs["a/done.zarr"]["state"], jobs["a/done.zarr"]["frames_done"]) == ("done", 3)
    assert (jobs["partial.zarr"]["state"], jobs["partial.zarr"]["samples_done"]) == ("incomplete", 16 * 16 * 8)
    for name, why in (("bad.zarr", "zarr.json"), ("norecords.zarr", "records"), ("evil.zarr", "link out")):
        assert jobs[name]["state"] == "damaged" and why in jobs[name]["error"], jobs[name]
    status, _, page = get(port, "/")
    assert status == 200 and page.count(b'class="damaged"') == 3 and b"a/done.zarr" in page
    for store, j in jobs.items():
        status, _, page = get(port, f"/jobs/{store}")
        assert status == 200 and j["state"].encode() in page
        for frame in range(3):
            status, _, png = get(port, f"/api/jobs/{store}/frames/{frame}.png?max=16")
            assert status == (409 if j["state"] == "damaged" else 200), (store, status)
    partial = pixels(get(port, "/api/jobs/partial.zarr/frames/0.png")[2])
    assert (partial[:16, 16:32] == 188).all()  # the tile with samples: 0.5 in sRGB
    assert is_checker(np.delete(partial[:16], np.s_[16:32], axis=1)) and is_checker(partial[16:])
    assert pixels(get(port, "/api/jobs/a/done.zarr/frames/2.png?max=20")[2]).shape == (15, 20, 3)
    assert _snapshot(base) == before  # bytes and modification times: nothing written


@pytest.mark.parametrize("path", [
    "/api/jobs/../outside/secret.zarr/frames/0.png",
    "/api/jobs/..%2foutside%2fsecret.zarr/frames/0.png",
    "/api/jobs/%2e%2e/outside/secret.zarr/frames/0.png",
    "/api/jobs/%252e%252e%252foutside%252fsecret.zarr/frames/0.png",  # encoded twice
    "/api/jobs/a/../../outside/secret.zarr/frames/0.png",
    "/api/jobs/a/done.zarr/../../../outside/secret.zarr",
    "/api/jobs//{outside}/secret.zarr/frames/0.png",
    "/api/jobs/{outside}/secret.zarr",
    "/api/jobs/link.zarr/frames/0.png",
    "/api/jobs/link.zarr",
    "/jobs/link.zarr",
    "/jobs/..%2F..%2Foutside%2Fsecret.zarr",
    "/api/jobs/evil.zarr/frames/0.png",
    "/api/jobs/a/done.zarr/frames/3.png",
    "/api/jobs/a/done.zarr/frames/-1.png",
    "/static/../../outside/secret.zarr/zarr.json",
    "/a/done.zarr/zarr.json",
])
def test_nothing_outside_the_folder_is_served(base, path):
    base, port = base
    status, _, body = get(port, path.format(outside=base / "outside"))
    assert status in (404, 409), (status, body[:200])
    listed = [j["store"] for j in get_json(port, "/api/jobs")]
    assert "link.zarr" not in listed and not any("secret" in s for s in listed)


def test_serve_refuses_a_store_and_a_taken_port(base):
    base, port = base
    code, _, err = farm_main("serve", base / "root" / "a" / "done.zarr")
    assert code == 1 and "is a store itself" in err
    code, _, err = farm_main("serve", base / "root" / "nowhere")
    assert code == 1 and err.endswith("nowhere: not a folder\n")
    code, _, err = farm_main("serve", base / "root", "--port", port)
    assert code == 1 and err.count("\n") == 2 and f"cannot serve on 127.0.0.1:{port}" in err


def test_list_shows_a_line_per_job(base, monkeypatch, tmp_path):
    jobs_root = base[0] / "root"
    monkeypatch.setenv("FARM_REGISTRY", str(tmp_path / "registry"))
    from farm import registry
    elsewhere, gone = tmp_path / "elsewhere" / "made.zarr", tmp_path / "gone.zarr"
    _partial_store(elsewhere)
    for store in (elsewhere, jobs_root / "a" / "done.zarr", gone):
        registry.record(str(store))
    code, out, _ = farm_main("list", jobs_root)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 6  # five stores under the folder, one more from the registry; gone.zarr is gone
    assert re.match(rf"^done +3/3 +8 spp +{re.escape(str(jobs_root / 'a' / 'done.zarr'))}$", lines[0])
    assert re.match(r"^damaged +- +- +.*bad\.zarr +\(.*zarr\.json", lines[1])
    assert re.match(rf"^incomplete +0/3 +8 spp +{re.escape(str(elsewhere))}$", lines[-1])


def test_without_an_address_the_monitor_asks_no_cluster_and_says_nothing_of_a_queue(base):
    base, port = base
    status, _, page = get(port, "/")
    assert status == 200 and b"queue" not in page.lower(), page
    assert b'http-equiv="refresh"' not in page  # (no job runs: nothing changes unseen)
    assert get_json(port, "/api/queue") == {"address": None, "rows": [], "error": None, "seen_at": None}


def test_a_cluster_that_does_not_answer_is_one_line_on_the_page(tmp_path):
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    watch = QueueWatch(address)
    try:
        web = make_app(str(tmp_path), watch).test_client()
        page = web.get("/")
        assert page.status_code == 200
        assert '<meta http-equiv="refresh" content="5">' in page.get_data(as_text=True)  # the queue changes unseen
        lines = [line for line in page.get_data(as_text=True).splitlines() if "queue" in line.lower()]
        assert lines == [f"<h2>Queue of the cluster at {address}</h2>",
                         f'<p class="error queue">The queue cannot be read: cannot join the Ray cluster at {address}: '
                         f'nothing answers there (Connection refused)</p>'], lines
        view = web.get("/api/queue").get_json()
        assert (view["address"], view["rows"], view["seen_at"]) == (address, [], None)
        assert view["error"].startswith(f"cannot join the Ray cluster at {address}"), view
    finally:
        watch.close()
