"""A black tile is stored like any other, without the farm setting zarr's process-wide options:
zarr leaves all-zero chunks out unless an array is told otherwise, and completion is checked by
reading the data back."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = textwrap.dedent("""
    import os, sys, numpy as np, zarr
    from farm.records import TileRecord
    from farm.store import FrameStore
    from farm.tree import STATE_CHANNELS
    assert zarr.config.get("array.write_empty_chunks") is False, "importing the store changed zarr's options"
    url = sys.argv[1]
    store = FrameStore.create(url, {"tile": 8}, {}, (16, 8), 1)
    store.fold_tile((0, 0, 1), TileRecord(), np.zeros((8, 8, STATE_CHANNELS), np.float32))
    print(sorted(os.listdir(os.path.join(url, "state"))))
    print(zarr.config.get("array.write_empty_chunks"))
""")


def test_a_black_tile_is_written_and_zarrs_options_are_left_alone(tmp_path):
    url = str(tmp_path / "s.zarr")
    result = subprocess.run([sys.executable, "-c", SCRIPT, url], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    chunks, option = result.stdout.split("\n")[:2]
    assert "c.0.0.1.0" in chunks
    assert option == "False"
