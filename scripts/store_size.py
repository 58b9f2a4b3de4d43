"""Bytes a finished frame takes in a store, against the frame's own float32 RGBA size.

A stub work unit stands in for the renderer (rendering 1080p at 4096 spp here would take
hours): every task's result is noise of the tile's size, folded by the real ``farm.folding``
into a real store, so the store holds what a finished job of that spp holds. Prints the layout
(uncompressed) and the bytes on disk (Zstandard-compressed noise: about the worst case), and
the peak of results held in memory while folding (the chunks in flight).

    python scripts/store_size.py [--res 1920x1080] [--spp 4096] [--frames 1]
"""
import argparse
import dataclasses
import pathlib
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from farm import job  # noqa: E402
from farm.folding import Folds  # noqa: E402
from farm.planner import plan  # noqa: E402
from farm.spec import JobSpec  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def disk_bytes(path):
    return sum(p.stat().st_size for p in pathlib.Path(path).rglob("*") if p.is_file())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--res", default="1920x1080")
    parser.add_argument("--spp", type=int, default=4096)
    parser.add_argument("--frames", type=int, default=1)
    args = parser.parse_args()
    width, height = map(int, args.res.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        spec = JobSpec(scene=str(ROOT / "examples" / "cbox.xml"), frames=(0, args.frames - 1), spp=args.spp,
                       store=f"{tmp}/job.zarr", resolution=(width, height))
        spec, store = job.prepare(spec)
        records = store.all_records()
        folds = Folds(store, records, spec.spp)
        todo = plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels).todo
        rng = np.random.default_rng(0)
        t, peak, t0 = spec.tile, 0, time.perf_counter()
        # Results come back out of order: chunk c + 1 of every tile before chunk c.
        block = 2 * store.tiles_y * store.tiles_x
        for i in range(0, len(todo), block):
            for task in reversed(todo[i:i + block]):
                value = rng.random((t, t, 3), dtype=np.float32)
                folds.accept(task, value, np.full((t, t), 1.0, np.float32))
                peak = max(peak, folds.held())
        seconds = time.perf_counter() - t0
        frame = width * height * 4 * 4  # float32 RGBA
        layout = (store.state.nbytes + store.tail.nbytes + store.records.nbytes) / args.frames
        on_disk = disk_bytes(f"{tmp}/job.zarr") / args.frames
        print(f"{width}x{height}, {spec.spp} spp, {args.frames} frame(s), tile {t}, pass {spec.pass_size}, "
              f"chunk {spec.chunk_passes} passes: {len(todo)} tasks folded in {seconds:.1f} s "
              f"({len(todo) / seconds:.0f} folds/s on this machine)")
        print(f"frame (float32 RGBA): {frame:,} bytes")
        print(f"store per frame, layout: {layout:,.0f} bytes ({layout / frame:.2f}x the frame)")
        print(f"store per frame, on disk: {on_disk:,.0f} bytes ({on_disk / frame:.2f}x the frame)")
        print(f"results held at once while folding: at most {peak}")


if __name__ == "__main__":
    main()
