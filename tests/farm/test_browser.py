"""The web monitor in a real browser (issue 35, item 5, in part): Debian's ``chromium``, headless,
loads ``farm serve``'s job list and a job's page (the server a real ``farm serve`` process, the
store a real one that fills while it is watched: tasks folded into it between two looks); the
pages load with no console message, the job's page shows its priority, its pause and its log's tail, the job's thumbnails change as samples arrive (two
screenshots, the same page). That the console is heard at all is checked on a page that logs
an error. (Chromium's log carries what the page's scripts say, not the network's errors, which
only DevTools shows: that the thumbnails load is seen in the screenshots.) Skipped, saying so, where no chromium is installed (``apt-get install
chromium``; CI installs it)."""
import io
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from farm import job
from farm.folding import Folds
from farm.planner import plan
from farm.spec import GroupsSpec
from tests.farm.test_serve import served
from tests.helpers.farm_cases import orbit_spec

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


def test_the_monitor_in_a_browser_shows_the_jobs_and_thumbnails_that_change_as_samples_arrive(tmp_path):
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
        shots = []
        for step in range(2):
            shot = tmp_path / f"shot-{step}.png"
            console = _browse(base + "/jobs/orbit.zarr", tmp_path, f"--screenshot={shot}")[1]
            assert console == [], console
            shots.append(np.asarray(Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")))
            if step == 0:
                _fold(spec, fs, 10 ** 6, 0.75)  # the rest of frame 0 arrives
        changed = np.any(shots[0] != shots[1], axis=-1)
        print(f"\n{changed.sum()} screen pixels changed as frame 0's samples arrived")
        assert changed.sum() > 400, changed.sum()  # (more than the text: the thumbnail)
        # The console is heard: a page that logs an error says so there.
        noisy = tmp_path / "noisy.html"
        noisy.write_text('<!doctype html><script>console.error("heard")</script>')
        _, console = _browse(noisy.as_uri(), tmp_path, "--dump-dom")
        assert any('"heard"' in line for line in console), console
