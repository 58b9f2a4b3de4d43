"""What frame stores say about their jobs, for ``farm serve`` and ``farm list``: the one place
where they read stores.

Read-only: a store is opened with mode ``"r"`` (``farm.job.open_store``) and nothing here writes
to it. Progress counts the samples a store's tile records hold (``FrameStore.read_records``: a
record that does not decode counts as nothing done, and as damaged); the CRCs of a tile's state
and tail are checked where its pixels are shown (``preview``), and by ``farm status`` and ``farm
resume`` for the whole store.
The state of a job comes from its records and from the last run's progress notes (``FrameStore
.progress``): a run that has not written notes for ``STALE_S`` seconds is ``stalled`` (its driver
may be gone).

Stores under a root: directories holding a ``zarr.json`` that is a frame store's (or that does not
read: a damaged store), not looked inside further; hidden directories (``.name``) are skipped and
symbolic links are not followed, and a store with a link in it that leads out of the root is
shown as damaged and none of it is read (a store is walked for links at most every
``LINK_CHECK_S`` seconds).
"""
from __future__ import annotations

import dataclasses
import io
import math
import os
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from farm import summary
from farm.errors import FarmError
from farm.export import NO_SAMPLES, checkered
from farm.failures import Retries, read_notes
from farm.job import open_store
from farm.names import is_utf8
from farm.records import TileRecord, has_samples
from farm.store import FrameStore, StoreError, error_line, progress_number
from tracer.shared import resolve

if TYPE_CHECKING:
    from farm.spec import JobSpec

__all__ = ["JobSummary", "FrameProgress", "find_stores", "store_path", "summarize", "summarize_url", "summary_of",
           "preview", "optimization", "optimization_image", "STALE_S", "NO_SAMPLES", "VERIFY_TILES"]

STALE_S = 120.0  # seconds without progress notes after which a running job is called stalled
# Tiles with samples up to which `farm status` checks a store's data by default (a few seconds);
# past them it shows the store's frame summary (farm.summary) unless asked to --verify.
VERIFY_TILES = 2048
LINK_CHECK_S = 2.0  # seconds a store's walk for links out of the root is taken as still true


@dataclasses.dataclass(frozen=True)
class FrameProgress:
    frame: int              # frame number
    done: float             # fraction of the frame's pixel samples recorded, 0 to 1
    spp: float              # samples per pixel recorded, on average over the film
    noise: float | None     # its estimated noise (farm.adaptive.frame_noise; None below two chunks a tile)
    state: str              # done; while its job runs: rendering, waiting; else: partial, empty
    eta_s: float | None     # seconds until it is done at the run's rate (frames render in order)


@dataclasses.dataclass(frozen=True)
class JobSummary:
    store: str              # as asked for: the path relative to the root, or a URL
    state: str              # new, running, stalled, done, incomplete, failed, cancelled, interrupted, damaged
    phase: str | None = None          # while it runs: one of farm.progress.PHASES
    error: str | None = None          # the last run's error, or why the store does not read
    scene: str | None = None
    first_frame: int | None = None
    frames: int | None = None         # how many frames
    frames_done: int | None = None
    spp: int | None = None            # with a noise target: the most a tile gets
    noise_target: float | None = None  # farm.adaptive
    width: int | None = None
    height: int | None = None
    samples_done: int | None = None   # pixel samples recorded, all frames
    samples_total: int | None = None  # pixel samples of the whole job
    rate: float | None = None         # pixel samples per second of the last run, in its steady state
    eta_s: float | None = None        # seconds left, while it runs (None until the rate is known)
    updated: float | None = None      # Unix time of the last run's last progress note
    damaged_tasks: int = 0            # records that do not decode (or, verified, tiles that do not read back)
    damaged_frames: tuple[int, ...] = ()  # the frame numbers of those
    per_frame: tuple[FrameProgress, ...] = ()  # FrameProgress per frame
    cpu_isa: str | None = None        # a CPU job's arithmetic: its instruction-set level (tracer.runtime.xla_flags)
    renderers: tuple[str, ...] = ()   # the software that rendered its samples (FrameStore.renderers), first to last
    failures: Retries = Retries()     # the last run's retries, per task with their reasons, and hosts left out
    verified: bool = False            # samples counted where the data passes its CRC (else: as recorded)

    def to_json(self, frames: bool = False) -> dict[str, Any]:
        """A dict for JSON (``farm status --json``, ``farm serve``'s API); ``per_frame`` with ``frames``."""
        out = dataclasses.asdict(self)
        out.pop("per_frame")
        if frames:
            out["per_frame"] = [dataclasses.asdict(p) for p in self.per_frame]
        return out


# -- stores under a root ---------------------------------------------------------------------

def find_stores(root: str) -> list[str]:
    """The stores under the folder ``root``: their paths relative to it ('/'-separated), sorted."""
    root = os.path.realpath(root)
    found = []
    for here, dirs, files in os.walk(root):  # links to folders are listed in dirs, never entered
        # Hidden folders, and names that are not UTF-8 (no store of ours is named so), are passed over.
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and is_utf8(d))
        if "zarr.json" not in files or here == root:
            continue
        dirs[:] = []  # a Zarr hierarchy: a store, or not one, as a whole
        if _is_store(here, root):
            found.append(os.path.relpath(here, root).replace(os.sep, "/"))
    return sorted(found)


def _is_store(path: str, root: str) -> bool:
    if _leads_out(os.path.join(path, "zarr.json"), root):
        return True  # listed, and shown damaged: its metadata is not read
    try:
        return FrameStore.exists(path)
    except StoreError:
        return True  # its metadata does not read: a damaged store


def _leads_out(path: str, root: str) -> bool:
    return os.path.islink(path) and os.path.commonpath([root, os.path.realpath(path)]) != root


def _link_out(path: str, root: str) -> str | None:
    """The first entry under ``path`` that is a symbolic link leading out of ``root`` (None if none)."""
    root, folders = os.path.realpath(root), [path]
    while folders:  # scandir knows links without a stat of each entry (a store has a file per chunk)
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    if _leads_out(entry.path, root):
                        return entry.path
                elif entry.is_dir():
                    folders.append(entry.path)
    return None


# store path -> (when, _link_out's answer): one walk of a store serves a page's thumbnails
_links_seen: dict[str, tuple[float, str | None]] = {}


def _recent_link_out(path: str, root: str) -> str | None:
    """``_link_out``, walked again once its last answer is ``LINK_CHECK_S`` old."""
    now = time.monotonic()
    when, answer = _links_seen.get(path, (-LINK_CHECK_S, None))
    if now - when >= LINK_CHECK_S:
        if len(_links_seen) > 1024:
            _links_seen.clear()
        answer = _link_out(path, root)
        _links_seen[path] = (now, answer)
    return answer


def store_path(root: str, store: str) -> str:
    """The path of the store ``store`` (relative to ``root``, as ``find_stores`` names it); a
    LookupError for any other name (so nothing outside the root is ever opened)."""
    if store not in find_stores(root):
        raise LookupError(f"no store {store!r} under the root")
    return os.path.join(os.path.realpath(root), *store.split("/"))


def _open(root: str, store: str) -> tuple[JobSpec, FrameStore]:
    """(spec, FrameStore) of a store under ``root``, opened read-only; StoreError if it does not read."""
    path = store_path(root, store)
    outside = _recent_link_out(path, root)
    if outside is not None:
        raise StoreError(f"{store}: {os.path.relpath(outside, path)} is a link out of the served folder")
    return open_store(path, mode="r")


@dataclasses.dataclass(frozen=True)
class JobNotes:
    """What a job's page shows beside its summary: its place in a shared cluster's queue (the
    priority it was last run with, whether ``farm pause`` holds it) and the tail of its log."""

    priority: int
    paused: bool
    log_tail: tuple[str, ...]


LOG_TAIL = 20  # log lines a job's page shows


def job_notes(root: str, store: str) -> JobNotes | None:
    """The ``JobNotes`` of ``store`` under ``root``; None where the store does not read."""
    try:
        spec, fs = _open(root, store)
        return JobNotes(spec.groups.priority, fs.paused(), tuple(fs.logs()[-LOG_TAIL:]))
    except Exception:  # (a damaged store's page says why from its summary)
        return None


# -- a job's summary -------------------------------------------------------------------------

def summarize(root: str, store: str, now: float | None = None) -> JobSummary:
    """The ``JobSummary`` of ``store`` under ``root``: state ``damaged`` (with the reason in
    ``error``) where the store does not read; a LookupError if there is no such store."""
    store_path(root, store)
    return _summarize(store, lambda: _open(root, store), now, hide=os.path.realpath(root) + os.sep)


def summarize_url(url: str, now: float | None = None, verify: bool = False) -> JobSummary:
    """The ``JobSummary`` of the store at ``url`` (any path or URL ``farm status`` takes). With
    ``verify``, what is done counts only tiles whose data passes its CRC (the whole store is read;
    ``damaged_tasks``: tiles that do not read back), as ``farm resume`` would count it."""
    return _summarize(url, lambda: open_store(url, mode="r"), now, verify=verify)


def _summarize(name: str, opener: Callable[[], tuple[JobSpec, FrameStore]], now: float | None, hide: str | None = None,
               verify: bool = False) -> JobSummary:
    try:
        spec, fs = opener()
    except FarmError as e:
        error = str(e)
    except Exception as e:  # a store no check foresaw: still one job shown damaged, not a broken page
        error = f"{name}: does not read ({error_line(e)})"
    else:
        return _summary(name, spec, fs, time.time() if now is None else now, verify)
    return JobSummary(store=name, state="damaged", error=error.replace(hide, "") if hide else error)


def summary_of(name: str, spec: JobSpec, fs: FrameStore, now: float | None = None,
               verify: bool | None = False) -> JobSummary:
    """The ``JobSummary`` of an open store (``open_store``'s pair), named ``name``; ``verify``: as
    ``summarize_url``'s, or None: verified where the store has a summary of at most
    ``VERIFY_TILES`` tiles with samples, or none (``farm status``)."""
    return _summary(name, spec, fs, time.time() if now is None else now, verify)


def _summary(name: str, spec: JobSpec, fs: FrameStore, now: float, verify: bool | None = False) -> JobSummary:
    try:
        bad: list[tuple[int, ...]] = []
        table = None if verify else summary.read(fs, spec)  # the driver's notes of each frame
        if verify is None:  # what a small store holds is checked; a large one's summary is shown
            verify = table is None or summary.stored_tiles(fs, table) <= VERIFY_TILES
            table = None if verify else table
        if table is None:
            records, bad = fs.verified_records() if verify else fs.read_records()
            table = summary.rows(fs, spec, records)
        done, totals = table[:, 0].tolist(), [int(t) for t in table[:, 3].tolist()]
        notes = fs.progress()
    except Exception as e:  # sums or records that zarr cannot read at all: damaged, not a broken page
        return JobSummary(store=name, state="damaged", error=f"{name}: damaged store: {error_line(e)}")
    notes = notes if notes is not None else {}
    finished = sum(1 for d in done if d >= 1.0)
    state = _state(notes, finished == len(done), any(d > 0 for d in done), now)
    rate = progress_number(notes, "rate")
    running = state == "running"
    phase = notes.get("phase") if running and isinstance(notes.get("phase"), str) else None
    updated, eta = progress_number(notes, "updated"), progress_number(notes, "eta_s")
    if running and eta is not None and updated is not None:
        eta = max(0.0, eta - max(0.0, now - updated))  # counted down from when it was noted
    return JobSummary(
        store=name, state=state, phase=phase, error=str(notes["error"]) if notes.get("error") else None,
        scene=spec.scene, first_frame=spec.frames[0], frames=spec.n_frames, frames_done=finished, spp=spec.spp,
        noise_target=spec.noise, width=fs.width, height=fs.height,
        samples_done=round(sum(d * t for d, t in zip(done, totals))), samples_total=sum(totals), rate=rate,
        eta_s=eta if running else None, updated=updated,
        damaged_tasks=len(bad), damaged_frames=tuple(sorted({spec.frames[0] + int(key[0]) for key in bad})),
        per_frame=_frames(spec.frames[0], table, eta if running else None, running),
        cpu_isa=spec.groups.cpu_isa if spec.groups.platform == "cpu" else None, renderers=tuple(fs.renderers),
        failures=read_notes(notes),
        verified=bool(verify))


def _state(notes: Mapping[str, Any], finished: bool, started: bool, now: float) -> str:
    last = str(notes.get("state", ""))
    if finished:
        return "done"
    if last == "running":
        updated = progress_number(notes, "updated")
        return "stalled" if updated is None or now - updated > STALE_S else "running"
    if last in ("failed", "cancelled", "interrupted", "stopped"):
        return last
    return "incomplete" if started or last == "done" else "new"


def _frames(first: int, table: np.ndarray, eta: float | None, running: bool) -> tuple[FrameProgress, ...]:
    """FrameProgress per frame of ``table`` (its ``farm.summary`` rows; the first is frame number
    ``first``); ``eta``: the job's, shared out by what each frame and those before it have left
    (frames render in order)."""
    done, totals = table[:, 0].tolist(), table[:, 3].tolist()
    out, left, total_left = [], 0.0, sum((1.0 - d) * t for d, t in zip(done, totals))
    for i, (d, spp, noise, total) in enumerate(table.tolist()):
        left += (1.0 - d) * total
        if d >= 1.0:
            state = "done"
        elif running:
            state = "rendering" if d > 0 else "waiting"
        else:
            state = "partial" if d > 0 else "empty"
        frame_eta = eta * left / total_left if eta is not None and d < 1.0 and total_left > 0 else None
        out.append(FrameProgress(frame=first + i, done=d, spp=spp, noise=None if math.isnan(noise) else noise,
                                 state=state, eta_s=frame_eta))
    return tuple(out)


# -- a frame's preview -----------------------------------------------------------------------

def preview(root: str, store: str, frame: int, max_size: int | None = None,
            cache: MutableMapping[tuple[str, str, str], bytes] | None = None) -> tuple[bytes, str]:
    """(PNG bytes, tag) of frame number ``frame`` of ``store`` under ``root``, tone-mapped as
    ``farm export`` makes PNGs, from the tasks recorded so far whose sums pass their CRC; a tile
    with none is a grey checker (``NO_SAMPLES``). ``max_size`` bounds the longer side (a
    thumbnail). ``tag`` names the records the image comes from: while they stay the same, so does
    the image, and ``cache`` (a dict, or None) keeps it by tag. A LookupError if there is no such
    store or frame; a StoreError if the store does not read."""
    spec, fs = _open(root, store)
    f = frame - spec.frames[0]
    if not 0 <= f < spec.n_frames:
        raise LookupError(f"{store} has no frame {frame}")
    records = fs.frame_records(f)[0]  # (a record that does not decode: zeros, nothing done)
    tag = f"{frame}-{max_size}-{_digest(records)}"
    key = (os.path.realpath(root), store, tag)
    if cache is not None and key in cache:
        return cache[key], tag
    for ty, tx in np.ndindex(records.shape[:2]):
        records[ty, tx] = fs.verify_tile((f, ty, tx), TileRecord.of(records[ty, tx]))[0]
    png = _png(fs, resolve(*fs.frame_sums(f, records)), has_samples(records), max_size)
    if cache is not None:
        cache[key] = png
    return png, tag


def optimization(root: str, store: str) -> dict[str, Any] | None:
    """The ``farm status --json`` object of ``store`` under ``root`` where it holds an
    optimization (``farm optimize``), else None; a LookupError if there is no such store."""
    from farm.checkpoint import open_optimization
    from farm.optimization_view import summary
    try:
        spec, fs = _open(root, store)
        opt = open_optimization(fs)
    except StoreError:  # a damaged store: the render jobs' summary says so
        return None
    return None if opt is None else summary(store, spec, fs, opt)


def optimization_image(root: str, store: str, kind: str, frame: int, max_size: int | None = None) -> bytes:
    """PNG bytes of frame number ``frame``'s ``kind`` (``render``: the last iteration's, or
    ``target``) of the optimization ``store`` under ``root``, tone-mapped as ``farm export`` makes
    PNGs; a LookupError where there is no such store, optimization, frame or render yet."""
    from farm.checkpoint import open_optimization
    spec, fs = _open(root, store)
    opt = open_optimization(fs)
    f = frame - spec.frames[0]
    if opt is None or not 0 <= f < spec.n_frames or kind not in ("render", "target"):
        raise LookupError(f"{store} has no {kind} of frame {frame}")
    image = opt.target(f) if kind == "target" else opt.render(f)
    if image is None:
        raise LookupError(f"{store} has no render yet")
    return _png(fs, image, np.ones((fs.tiles_y, fs.tiles_x), bool), max_size)


def _digest(records: np.ndarray) -> str:
    import hashlib
    return hashlib.sha256(records.tobytes()).hexdigest()[:16]


def _png(fs: FrameStore, image: np.ndarray, sampled: np.ndarray, max_size: int | None) -> bytes:
    """PNG bytes of the linear ``image``, tiles where ``sampled`` (TY, TX) is False as a checker."""
    from PIL import Image

    from tracer.io.images import srgb8
    picture = Image.fromarray(checkered(srgb8(image), sampled, fs.tile))
    if max_size and max(fs.width, fs.height) > max_size:
        picture.thumbnail((max_size, max_size), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()
