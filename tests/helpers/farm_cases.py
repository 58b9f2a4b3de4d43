"""The farm tests' small job and its independent reference: the orbit scene (3 frames of a turntable
at 40x30, tiles of 16, passes of 4 samples), the tracer's own render of it in this process, the
frames a store exports, stores filled without rendering, and the ``farm`` command line run as a
subprocess or in this process."""
import contextlib
import functools
import io
import os
import pathlib
import signal
import subprocess
import sys
import time
from unittest import mock

import numpy as np

from farm import job, session
from farm.cli import main
from farm.curves import Curve
from farm.export import export_frames
from farm.folding import Folds
from farm.job import open_store
from farm.planner import plan
from farm.spec import JobSpec

ROOT = pathlib.Path(__file__).resolve().parents[2]
ORBIT = str(ROOT / "examples" / "orbit.xml")


def orbit_spec(store, frames=(0, 2), spp=8, tile=16, **kw):
    """A ``JobSpec`` of the orbit scene into ``store``, the camera turning 90 degrees over frames 0-2."""
    return JobSpec(scene=ORBIT, frames=frames, spp=spp, store=str(store), resolution=(40, 30), tile=tile,
                   pass_size=4, curves=(Curve("angle", ((0, 0.0), (2, 90.0))),), **kw)


def farm_cli(*args, timeout=600, **kw):
    """``python -m farm.cli ARGS`` from the repository root: the ``CompletedProcess``, output as text."""
    return subprocess.run([sys.executable, "-m", "farm.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kw)


def reference(spec):
    """The frames as tracer.render gives them with the job's reduction tree (this process, 1 device)."""
    import tracer
    spec, out = spec.planned(), []
    for frame in range(spec.frames[0], spec.frames[1] + 1):
        scene = tracer.load_scene(spec.scene, resolution=spec.resolution, aovs=spec.aovs, rfilter=spec.rfilter,
                                  **dict(spec.params_at(frame)))
        out.append(tracer.render(scene, spp=spec.spp, seed=spec.seed, frame=frame, tile=spec.tile,
                                 pass_size=spec.pass_size, chunk_passes=spec.chunk_passes))
    return out


def exported(store, tmp_path, name="npy"):
    """Every frame of the store at URL ``store``, exported as npy under ``tmp_path / name`` and read back."""
    written = export_frames(*open_store(str(store)), None, "npy", str(tmp_path / name))
    return [np.load(path) for _, path, _ in written]


def farm_main(*args):
    """``farm ARGS`` in this process: (exit code, stdout, stderr). ``farm.cli.main`` turns every
    exception into one line; 70 is its code for one it did not expect (a traceback, before).
    Ray starts only once a run needs it (not beside the scene check: most of these are refused)."""
    out, err = io.StringIO(), io.StringIO()
    lazy = functools.partial(session.starting_ray, eager=False)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            mock.patch.object(session, "starting_ray", lazy):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def filled_store(store, **kw):
    """The store of ``orbit_spec(store, **kw)`` made without rendering: every task's result
    made up (seeded) and folded, a finished job as far as the store can tell. Returns (spec, FrameStore)."""
    spec, fs = job.prepare(orbit_spec(store, **kw))
    rng = np.random.default_rng(0)
    records = fs.all_records()
    folds = Folds(fs, records, spec.spp, window=10**9)
    for task in plan(spec, records, fs.tiles_y, fs.tiles_x, fs.tile_pixels).todo:
        value = rng.random((spec.tile, spec.tile, 3), dtype=np.float32)
        folds.accept(task, value, np.full((spec.tile, spec.tile), 8.0, np.float32))
    return spec, fs


def tiles_done(url):
    """Tiles of the store at ``url`` that hold some samples (folded chunks or a tail)."""
    from farm.records import has_samples
    from farm.store import FrameStore
    records = FrameStore.open(str(url), mode="r").all_records()
    return int(np.count_nonzero(has_samples(records))), records.size


def store_files(store):
    """{path relative to the store: bytes} of every file of a local store (to show it unchanged)."""
    root = pathlib.Path(store)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def ctrl_c_heard():
    """A child's ``preexec_fn`` for tests that press Ctrl-C (SIGINT): SIGINT back to its default,
    which Python turns into KeyboardInterrupt. A test run started in the background (``cmd &``,
    ``nohup``) ignores SIGINT, and its children would inherit that and never hear the key."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_when_rendered(proc, store, tiles=1, timeout=300):
    """Stop the driver ``proc`` (a ``farm render`` subprocess; SIGSTOP) once the store at
    ``store`` holds samples of ``tiles`` tiles; returns (tiles with samples, tiles) as they are
    with the driver stopped (see ``stop_when``)."""
    def rendered():
        try:
            done, total = tiles_done(store)
        except Exception:  # not made yet, or half made
            return None
        return (done, total) if done >= tiles else None
    return stop_when(proc, rendered, timeout, f"{tiles} tile(s) were rendered")


def stop_when(proc, condition, timeout=300, what="the condition held"):
    """Stop the driver ``proc`` (SIGSTOP) once ``condition()``, called with the driver stopped,
    returns something true; returns it, the driver left stopped. The driver runs 20 ms between
    two looks and is the store's only writer, so what is read stays true until it continues, and
    it cannot finish a job of more than a few tiles between two looks however fast its workers
    are (a warm compilation cache, a fast machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        os.kill(proc.pid, signal.SIGSTOP)
        found = condition()
        if found:
            return found
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError(f"the job ended (exit {proc.poll()}) or took {timeout} s before {what}")


def format_2(store):
    """Make ``store`` (a new one) a format-2 store: a Zarr chunk of records per tile, a folder per
    tile in state/ and tail/ (zarr's default chunk keys)."""
    for name in ("state", "tail", "records"):
        array = store.group[name]
        chunks = (1, 1, 1, array.shape[-1]) if name == "records" else array.chunks
        del store.group[name]
        store.group.create_array(name, shape=array.shape, chunks=chunks, dtype=array.dtype, fill_value=0,
                                 dimension_names=array.metadata.dimension_names)
    store.group.attrs["farm"] = dict(store.meta, format="jaxfarm-frames/2")


def store_contents(url, frames=2):
    """(records, each frame's sums with the weight as a last channel) of the store at ``url``,
    verified undamaged: what two renders of a job must match bit for bit."""
    from farm.store import FrameStore
    fs = FrameStore.open(str(url), mode="r")
    records, damaged = fs.verified_records()
    assert damaged == []
    return records, [np.concatenate([v, w[..., None]], -1) for v, w in (fs.frame_sums(f, records[f]) for f in range(frames))]


def assert_same_contents(got, want):
    """``store_contents`` of two stores, equal bit for bit."""
    np.testing.assert_array_equal(got[0], want[0])
    for a, b in zip(got[1], want[1]):
        np.testing.assert_array_equal(a, b)
