"""The environment's faults named, not blamed on us (issue 37, item 4): a full disk, a read-only
file system, a folder that is not one, on the store (exit 3) or elsewhere (HOME, Ray's temp
folder, the compilation cache: exit 1), one line naming the path; the lease released and the
run's state "stopped" saying why; the store readable and resumable to the same bits."""
import errno
import os

import numpy as np
import pytest
import zarr.storage

from farm import faults, lease
from farm.job import open_store
from tests.helpers.farm_cases import ORBIT, exported, farm_main, reference

ARGS = ("--frames", "0-1", "--spp", "4", "--res", "16x16", "--tile", "16", "--set", "angle=0:0,1:90", "--no-progress")


def test_errors_of_the_environment_are_named_by_where_they_happened(tmp_path):
    store = tmp_path / "s.zarr"
    store.mkdir()
    (store / "zarr.json").write_text("{}")
    full = faults.named(OSError(errno.ENOSPC, "No space left on device"), str(store))
    assert isinstance(full, faults.StoreFault) and full.exit_code == 3 and str(full) == f"no space left on {store}"
    inside = faults.named(OSError(errno.EROFS, "Read-only file system", str(store / "lease" / "epoch-2.json")))
    assert str(inside) == f"{store} is on a read-only file system (writing lease/epoch-2.json)"
    home = faults.named(OSError(errno.EACCES, "Permission denied", "/home/u/.ray/auth_token"))
    assert isinstance(home, faults.EnvironmentFault) and home.exit_code == 1
    assert str(home) == "permission denied on /home/u/.ray/auth_token"
    assert faults.named(OSError(errno.EINVAL, "Invalid argument"), str(store)) is None  # ours: a bug, 70
    assert faults.named(ValueError("x"), str(store)) is None


@pytest.mark.parametrize("variable, value, says", [
    ("JAXFARM_XLA_CACHE", "file", "the compilation cache (JAXFARM_XLA_CACHE): {} is not a folder"),
    ("RAY_TMPDIR", "file", "Ray's temp folder (RAY_TMPDIR): {} is not a folder"),
    ("HOME", "file", "Ray's folder in HOME: {} is not a folder"),
])
def test_a_folder_the_run_cannot_use_is_named_before_ray_starts(tmp_path, monkeypatch, variable, value, says):
    path = tmp_path / value
    path.write_text("not a folder")
    monkeypatch.setenv("JAXFARM_XLA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(variable, str(path))
    code, _, err = farm_main("render", ORBIT, *ARGS, "--out", tmp_path / "s.zarr")
    assert (code, err) == (1, f"error: {says.format(path)}\n")
    assert not (tmp_path / "s.zarr").exists()


def _full_at_records(real_set):
    """``LocalStore.set`` of a disk that fills once the run has started (its first progress
    note), when the driver commits its first record."""
    started = []

    async def set(self, key, value):
        started.append(key == "progress/zarr.json")
        if any(started) and key.startswith("records/c"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return await real_set(self, key, value)
    return set


def test_a_full_disk_stops_the_run_naming_the_store_and_it_resumes_to_the_same_bits(tmp_path, monkeypatch):
    store = tmp_path / "s.zarr"
    real_set = zarr.storage.LocalStore.set
    with monkeypatch.context() as m:  # the driver's writes, at the zarr store's boundary
        m.setattr(zarr.storage.LocalStore, "set", _full_at_records(real_set))
        code, _, err = farm_main("render", ORBIT, *ARGS, "--out", store)
    assert (code, err.splitlines()[-1]) == (3, f"error: no space left on {store}"), err
    spec, fs = open_store(str(store))
    notes = fs.progress()
    assert (notes["state"], notes["error"]) == ("stopped", f"no space left on {store}")
    assert lease.holder(fs.group).released
    code, _, err = farm_main("resume", store, "--no-progress")
    assert code == 0, err
    for image, want in zip(exported(str(store), tmp_path), reference(spec)):
        np.testing.assert_array_equal(image, want)


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only bind mount needs root")
def test_a_read_only_store_is_named_for_render_resume_and_cancel(tmp_path):
    import subprocess
    folder = tmp_path / "ro"
    folder.mkdir()
    store = folder / "s.zarr"
    assert farm_main("render", ORBIT, *ARGS, "--out", store)[0] == 0
    mounted = subprocess.run(f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}", shell=True)
    if mounted.returncode:
        pytest.skip("mount is not permitted here")
    try:
        for args in (("render", ORBIT, *ARGS, "--spp", "8", "--out", store), ("resume", store, "--redo", "0")):
            code, _, err = farm_main(*args)
            assert code == 3 and err.startswith(f"error: {store} is on a read-only file system (writing "), err
            assert err.count("\n") == 1
        # No driver renders it: a cancel writes nothing (so a read-only store does not matter).
        code, _, err = farm_main("cancel", store)
        assert code == 0 and err.startswith("nothing to cancel: no driver is rendering"), err
    finally:
        subprocess.run(["umount", str(folder)])
    assert farm_main("status", store)[0] == 0
