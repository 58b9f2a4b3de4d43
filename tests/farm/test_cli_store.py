"""`farm status`, `resume`, `export` and `cancel` on damaged stores, in this process and without Ray:
one line, the store problem's exit code, and the store left as it was; `status` reports the
tasks that do not read back, and `export` refuses them."""
import json
import os
import shutil

import numpy as np
import pytest
import zarr
from PIL import Image

from farm.export import NO_SAMPLES
from farm.job import open_store
from tests.helpers.farm_cases import farm_main, filled_store, orbit_spec, store_files

COMMANDS = (("status",), ("resume", "--no-progress"), ("export", "--out", "{tmp}/frames"), ("cancel",))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished store (filled, not rendered: one chunk folded and a tail), copied by each test
    that changes it."""
    path = tmp_path_factory.mktemp("finished") / "job.zarr"
    filled_store(path, spp=72)
    return path


def _copy(finished, tmp_path):
    store = tmp_path / "job.zarr"
    shutil.copytree(finished, store)
    return store


def _run(command, store, tmp_path):
    args = [a.format(tmp=tmp_path) for a in command[1:]]
    return farm_main(command[0], store, *args)


def _one_line(code, out, err, want_code, message):
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert code == want_code and len(lines) == 1 and message in lines[0], (code, out + err)


def _edit_json(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


DAMAGES = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:len(p.read_bytes()) // 2]),
    "garbage": lambda p: p.write_bytes(b"\x00\xff garbage \xfe"),
    "not UTF-8": lambda p: p.write_bytes(p.read_bytes().replace(b'"', b'"\xe9', 1)),
    "empty": lambda p: p.write_bytes(b""),
    "a JSON list": lambda p: p.write_text("[]"),
    "shape a string": lambda p: _edit_json(p, lambda d: d.update(shape="x", attributes=5)),
}


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("node", ["", "state/", "tail/", "records/"])
def test_metadata_that_does_not_read_is_one_line_exit_3_and_left_alone(finished, tmp_path, node, damage):
    store = _copy(finished, tmp_path)
    DAMAGES[damage](store / node / "zarr.json")
    before = store_files(store)
    for command in COMMANDS:
        code, out, err = _run(command, store, tmp_path)
        _one_line(code, out, err, 3, f"{store}: ")
        assert "zarr.json" in err or "damaged store" in err, err
        assert store_files(store) == before
    assert not (tmp_path / "frames").exists()


def _farm(change):
    return lambda p: _edit_json(p, lambda d: change(d["attributes"]["farm"]))


@pytest.mark.parametrize("change, message", [
    (_farm(lambda f: f.update(film="32x24")), "film is '32x24', not [WIDTH, HEIGHT]"),
    (_farm(lambda f: f.update(film=[10**6, 30])), "film is [1000000, 30]"),
    (_farm(lambda f: f["identity"].update(tile=0)), "tile is 0"),
    (_farm(lambda f: f.pop("spec")), "no job identity and spec"),
    (_farm(lambda f: f["spec"].update(spp="8")), "its recorded job: spp must be a whole number"),
    (_farm(lambda f: f["spec"].update(params=5)), "its recorded job: unknown field 'params'"),
    (_farm(lambda f: f["spec"].update(tile=32)), "its recorded job does not match its identity"),
    (_farm(lambda f: f.update(format="jaxfarm-frames/1")), 'store format "jaxfarm-frames/1" is not read by this farm'),
    (_farm(lambda f: f["spec"]["curves"][0][2].append([1, 2])), "keys must be in frame order"),
    (lambda p: _edit_json(p, lambda d: d.update(shape=[3, 30, 40, 3])), "'state' is float32 (3, 30, 40, 3)"),
    (lambda p: _edit_json(p, lambda d: d.update(shape=[10**9, 30, 40, 10])), "'tail' is float32 (3, 30, 40, 4)"),
])
def test_attributes_and_arrays_that_do_not_fit_are_one_line_exit_3(finished, tmp_path, change, message):
    store = _copy(finished, tmp_path)
    change(store / ("state/zarr.json" if "'state'" in message or "'tail'" in message else "zarr.json"))
    before = store_files(store)
    for command in COMMANDS:
        _one_line(*_run(command, store, tmp_path), 3, message)
    assert store_files(store) == before


def test_progress_notes_that_do_not_read_are_reported_and_written_again(finished, tmp_path):
    store = _copy(finished, tmp_path)
    (store / "progress" / "zarr.json").write_bytes(b"{\"attrib")
    code, out, err = farm_main("status", store)
    assert code == 0 and "last run: unknown (its progress notes do not read back" in out, out + err
    (store / "progress" / "zarr.json").write_text(json.dumps(
        {"zarr_format": 3, "node_type": "group", "attributes": {"progress": {"state": 5, "rate": "x", "updated": []}}}))
    code, out, err = farm_main("status", store)
    assert code == 0 and "last run: 5" in out and "samples: 100.0% done" in out, out + err
    spec, fs = open_store(str(store), mode="r+")
    fs.write_progress(state="done")
    assert fs.progress()["state"] == "done"


def test_a_cancel_node_that_does_not_read_is_a_pending_cancel(finished, tmp_path):
    store = _copy(finished, tmp_path)
    (store / "cancel").mkdir()
    (store / "cancel" / "zarr.json").write_bytes(b"\xff")
    _, fs = open_store(str(store), mode="r+")
    assert fs.cancel_requested()
    fs.clear_cancel()
    assert not fs.cancel_requested() and not (store / "cancel").exists()
    fs.request_cancel()  # (``farm cancel`` writes one only while a driver renders)
    assert fs.cancel_requested()


def _chunk(store, array, key):
    return store / array / zarr.open_array(store / array, mode="r").metadata.encode_chunk_key(key)


def test_status_and_export_check_what_is_recorded_reads_back(finished, tmp_path):
    store = _copy(finished, tmp_path)
    _chunk(store, "state", (1, 0, 1, 0)).write_bytes(b"\x00garbage" * 3)         # does not decode
    _chunk(store, "records", (2, 0, 0, 0)).write_bytes(b"\x28\xb5\x2f\xfd\x00")  # torn Zstd: frame 2's records
    _, writer = open_store(str(store), mode="r+")
    writer.state[0, 16:30, 0:16, :] = writer.state[0, 16:30, 0:16, :] + 1.0      # decodes, fails its CRC
    before = store_files(store)
    code, out, err = farm_main("status", store, "--verify")
    assert code == 0 and "frames:  0-2 (0/3 finished)" in out, out + err
    assert f"damaged: 8 tile(s) whose recorded data does not read back (frames 0, 1, 2); `farm resume {store}` renders them again" \
        in out
    assert "Traceback" not in out + err
    code, out, err = farm_main("export", store, "--out", tmp_path / "frames")
    _one_line(code, out, err, 3, "rendered (1 tile(s) whose recorded data does not read back); finish it "
                                 f"(farm resume {store}) or export with --partial")
    assert err.startswith("error: frame 0 is 81% rendered"), err
    assert not (tmp_path / "frames").exists()
    code, out, err = farm_main("export", store, "--partial", "--format", "npy", "--out", tmp_path / "part")
    assert code == 0, out + err
    frame = np.load(tmp_path / "part" / "frame_0001.npy")
    assert np.all(frame[0:16, 16:32] == 0) and np.all(frame[16:, :] > 0)  # the broken tile is left out
    assert "partial (tiles without samples are a grey checker in PNGs, zeros in EXR/npy): frame 0 (81%)" in err
    code, out, err = farm_main("export", store, "--partial", "--format", "png", "--out", tmp_path / "png")
    png = np.asarray(Image.open(tmp_path / "png" / "frame_0001.png").convert("RGB"))
    assert set(np.unique(png[0:16, 16:32])) == set(NO_SAMPLES) and len(np.unique(png[16:, :])) > 2
    assert store_files(store) == before


def test_export_partial_never_writes_a_frame_without_samples(tmp_path):
    from farm import job
    job.prepare(orbit_spec(tmp_path / "new.zarr", frames=(0, 1)))
    code, out, err = farm_main("export", tmp_path / "new.zarr", "--partial", "--out", tmp_path / "frames")
    assert code == 0 and "wrote 0 frame(s)" in err and "not written, no samples yet: frame 0, 1" in err, err
    assert not list((tmp_path / "frames").iterdir())


def test_export_into_a_file_or_a_folder_it_cannot_write_is_one_line(finished, tmp_path):
    (tmp_path / "file").write_text("x")
    _one_line(*farm_main("export", finished, "--out", tmp_path / "file" / "sub"), 1,
              f"--out {tmp_path}/file/sub: cannot make the folder: Not a directory")
    _one_line(*farm_main("export", finished, "--out", tmp_path / "file"), 2, "is a file")
    # Root writes anywhere but in /sys.
    locked = tmp_path / "locked" if os.geteuid() else "/sys/farm-export-test"
    if os.geteuid():
        locked.mkdir(mode=0o500)
    code, out, err = farm_main("export", finished, "--out", f"{locked}/frames")
    _one_line(code, out, err, 1, "cannot make the folder: ")
    assert "Permission denied" in err or "Operation not permitted" in err
