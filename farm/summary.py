"""The frame summary: what each frame of a store holds, one small row a frame, so that ``farm
status`` and the monitor read a 100,000-frame job at once instead of every tile's records and data.

A frame's row is ``FIELDS``: the fraction of its pixel samples done, the samples per pixel it
holds (over its pixels), its noise estimate (``farm.adaptive.frame_noise``; NaN: unknown) and
the pixel samples it is to hold, as ``rows`` computes them from its tiles' records. The store
keeps them (``FrameStore.summary``) beside the records; nothing reads them to decide what to
render: they are the driver's notes, like its progress.

They trail the records and never lead them. The driver writes every row when a run starts (from
the records it has just verified) and a frame's row after each commit that changed the frame,
so a kill between the two leaves a row that counts less than the frame holds, never more; the
next run writes them all again. Anything else that changes records (forgetting frames, repairing
damage) drops the summary first, and rows computed for another job (a refine's spp, more frames)
are not used: readers then compute from the records (``rows``), as they did before there was a
summary. The rows do not check the data's CRCs; ``farm status --verify`` reads every tile, as
``farm resume`` does.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from farm.spec import JobSpec
    from farm.store import FrameStore

__all__ = ["FIELDS", "rows", "write_all", "update", "read", "stored_tiles"]

FIELDS = ("done", "spp", "noise", "total")  # a row's values, in order (float64)


def rows(store: FrameStore, spec: JobSpec, records: np.ndarray, frames: Sequence[int] | None = None,
         spp: np.ndarray | None = None) -> np.ndarray:
    """(n, len(FIELDS)) float64: the rows of the job's frames, or of the frame indexes ``frames``,
    from ``records`` (F, TY, TX) of ``farm.records.RECORD`` (the store's, verified or as read);
    ``spp``: ``Shot.tile_spp``'s answer for those frames, where the caller has it already."""
    from farm.adaptive import Shot, shot_noise
    from farm.job import frame_status
    frames = list(range(spec.n_frames) if frames is None else frames)
    shot = Shot(spec, store)
    if spp is None:
        spp = shot.tile_spp(records, frames)  # (a noise target's decisions, for these frames alone)
    out = np.empty((len(frames), len(FIELDS)), np.float64)
    out[:, 0] = frame_status(store, spec, records, frames, spp)
    noise = shot_noise(store, spec, records, frames)
    out[:, 1] = [n.spp for n in noise]
    out[:, 2] = [np.nan if n.noise is None else n.noise for n in noise]
    out[:, 3] = shot.frame_totals(records[frames], spp)
    return out


def write_all(store: FrameStore, spec: JobSpec, records: np.ndarray, spp: np.ndarray | None = None) -> None:
    """Write the summary of every frame afresh (the driver, once its records are verified);
    ``spp``: ``Shot.tile_spp(records)``, where the driver has decided it already."""
    store.write_summary(rows(store, spec, records, spp=None if spp is None else spp[:spec.n_frames]))


def update(store: FrameStore, spec: JobSpec, records: np.ndarray, frames: Sequence[int]) -> None:
    """Write the rows of the frame indexes ``frames``, whose records (as ``records`` has them)
    were just committed."""
    frames = sorted(set(frames))
    if frames:
        store.update_summary(frames, rows(store, spec, records, frames))


def read(store: FrameStore, spec: JobSpec) -> np.ndarray | None:
    """The rows of the job's frames as the store's summary has them; None where it has none for
    this job (then compute them: ``rows``)."""
    return store.summary(spec.n_frames)


def stored_tiles(store: FrameStore, table: np.ndarray) -> int:
    """At most how many tiles hold samples, by the rows ``table`` (those of frames with any)."""
    return int(np.count_nonzero(table[:, 1] > 0)) * store.tiles_y * store.tiles_x
