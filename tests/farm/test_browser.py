"""The web monitor in a real browser (issue 35, item 5): Debian's ``chromium``, headless, loads
``farm serve``'s pages (the server a real ``farm serve`` process). A live render: a real ``farm
render`` into a store of the served folder, its job page loaded while it renders (the driver held
with SIGSTOP for each look, so that a look sees what it was taken for: some samples of frame 0,
then all of them), shows more samples and another thumbnail the second time. A store filled by
the test: the job list and the job's page with its priority, its pause and its log's tail. Every
page loads with no console message; that the console is heard at all is checked on a page that
logs an error. (Chromium's log carries what the page's scripts say, not the network's errors,
which only DevTools shows: that the thumbnails load is seen in the screenshots.) Skipped, saying
so, where no chromium is installed (``apt-get install chromium``; CI installs it)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from farm import job
from farm.folding import Folds
from farm.planner import plan
from farm.spec import GroupsSpec
from tests.farm.test_serve import get, get_json, served
from tests.helpers.farm_cases import ORBIT, ROOT, orbit_spec, stop_when
from tests.helpers.hang_guard import hang_guard

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no chromium on this machine: `apt-get install chromium` "
                                                         "(CI installs it)")


def _browse(url, tmp_path, *what):
    """Chromium, headless, at ``url`` with ``what`` (``--dump-dom``, ``--screenshot=PATH``):
    (stdout, the console's messages)."""
    result = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                             "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,800",
                             *what, url], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout, [line for line in result.stderr.splitlines() if ":CONSOLE" in line]


def _fold(spec, fs, tasks, value):
    """Fold ``tasks`` of frame 0 (the plan's first, as the driver would) with ``value`` everywhere."""
    records = fs.all_records()
    folds = Folds(fs, records, spec.spp, window=10 ** 9)
    for task in [t for t in plan(spec, records, fs.tiles_y, fs.tiles_x, fs.tile_pixels).todo if t.frame == 0][:tasks]:
        folds.accept(task, np.full((16, 16, 3), value, np.float32), np.full((16, 16), float(spec.spp), np.float32))


def test_the_monitor_in_a_browser_shows_the_jobs_priority_pause_and_log(tmp_path):
    root = tmp_path / "jobs"
    spec, fs = job.prepare(orbit_spec(root / "orbit.zarr", frames=(0, 1), groups=GroupsSpec(priority=7)))
    _fold(spec, fs, 1, 0.25)
    fs.log("rendering...")
    fs.set_paused(True)
    with served(root) as (_, port):
        base = f"http://127.0.0.1:{port}"
        listing, console = _browse(base + "/", tmp_path, "--dump-dom")
        assert 'href="/jobs/orbit.zarr"' in listing and "orbit.xml" in listing, listing
        assert console == [], console
        page, console = _browse(base + "/jobs/orbit.zarr", tmp_path, "--dump-dom")
        assert page.count('src="/api/jobs/orbit.zarr/frames/') == 2 and "frame 1" in page, page
        assert '<td class="priority">7 in a shared cluster' in page and "paused" in page, page
        assert "rendering..." in page.split('<pre class="log">', 1)[1], page  # the log's tail
        assert console == [], console
        # The console is heard: a page that logs an error says so there.
        noisy = tmp_path / "noisy.html"
        noisy.write_text('<!doctype html><script>console.error("heard")</script>')
        _, console = _browse(noisy.as_uri(), tmp_path, "--dump-dom")
        assert any('"heard"' in line for line in console), console


def _frame_0(port, enough, phases=("rendering", "finishing", None)):
    """The job's JSON where it is in one of ``phases`` and ``enough(frame 0's JSON)`` (else None,
    as while the store is not made yet)."""
    try:
        status, _, body = get(port, "/api/jobs/orbit.zarr")
        job = json.loads(body) if status == 200 else None
        return job if job and job.get("phase") in phases and enough(job["per_frame"][0]) else None
    except (OSError, ValueError):
        return None


def test_a_live_render_in_the_browser_its_thumbnail_changing_as_samples_arrive(tmp_path):
    root = tmp_path / "jobs"
    root.mkdir()
    log = open(tmp_path / "render.log", "w")
    # The render starts first: Ray's start (most of this test's time) goes on while the server starts.
    render = subprocess.Popen([sys.executable, "-m", "farm.cli", "render", ORBIT, "--frames", "0-1", "--spp", "32",
                               "--res", "40x30", "--tile", "16", "--out", str(root / "orbit.zarr"), "--no-progress"],
                              cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                              # (held stopped for each look, which may take long on a loaded machine:
                              # past a 30 s lease the driver stops, having lost its store)
                              env=dict(os.environ, FARM_LEASE_S="600"))
    looks = []
    try:
        with served(root) as (_, port):
            with hang_guard(300):  # Ray's start, unstopped: no sample arrives before the first task compiles
                while render.poll() is None and not _frame_0(port, lambda f: True, phases=("compiling", "rendering")):
                    time.sleep(0.05)
            # Each look with the driver stopped (the store's only writer): what the page shows stays so.
            for enough in (lambda f: 0 < f["spp"] and f["done"] < 1, lambda f: f["done"] == 1):
                job = stop_when(render, lambda: _frame_0(port, enough), timeout=300, what="frame 0's samples")
                try:
                    shot = tmp_path / f"live-{len(looks)}.png"
                    page, console = _browse(f"http://127.0.0.1:{port}/jobs/orbit.zarr", tmp_path, "--dump-dom",
                                            f"--screenshot={shot}")
                finally:
                    os.kill(render.pid, signal.SIGCONT)
                assert console == [], console
                thumbnail = re.search(r'src="(/api/jobs/orbit\.zarr/frames/0\.png\?max=\d+)"', page).group(1)
                samples = int(re.search(r"\((\d+) of \d+ pixel samples\)", page).group(1))
                assert samples == job["samples_done"], (samples, job)  # the page shows what the store holds
                looks.append((samples, get(port, thumbnail)[2], np.asarray(Image.open(shot).convert("RGB"))))
            with hang_guard(300):
                assert render.wait() == 0, (tmp_path / "render.log").read_text()[-3000:]
            final = get_json(port, "/api/jobs/orbit.zarr")
    finally:
        if render.poll() is None:
            os.kill(render.pid, signal.SIGCONT)
            render.kill()
            render.wait()
        log.close()
    assert (final["state"], final["samples_done"]) == ("done", 2 * 40 * 30 * 32), final
    (before, thumb_before, shot_before), (after, thumb_after, shot_after) = looks
    assert 0 < before < after, (before, after)  # the sample count shown grows
    assert thumb_before != thumb_after
    changed = np.any(shot_before != shot_after, axis=-1).sum()
    print(f"\nlive render: {before} then {after} pixel samples shown; {changed} screen pixels changed")
    assert changed > 10_000, changed  # (far more than the text's: the thumbnail, 240 pixels wide)
