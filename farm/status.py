"""What ``farm status`` shows of a job: lines for a person, or one JSON object (the one ``farm
serve`` answers at ``/api/jobs/STORE``: ``farm.monitor.JobSummary``), once, or again every
``WATCH_S`` seconds until the job is no longer running (``--watch``; Ctrl-C stops it).

Samples count only where the store's data passes its CRC (the whole store is read, as ``farm
resume`` reads it) and damaged tiles are named, for a store of at most ``VERIFY_TILES`` tiles
with samples (or with ``--verify``); past that, samples done are the driver's per-frame account
(``farm.summary``: what it recorded, a commit behind at most after a kill), so that a job of
100,000 frames shows at once. The state, phase, rate and ETA come from the last run's
progress notes (``farm.progress``).
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from farm.job import open_store
from farm.lease import holder
from farm.monitor import summary_of
from farm.store import StoreError, progress_number

if TYPE_CHECKING:
    from farm.failures import Retries
    from farm.monitor import JobSummary
    from farm.spec import JobSpec
    from farm.store import FrameStore

__all__ = ["show", "spp_text", "WATCH_S"]

WATCH_S = 2.0  # seconds between two looks with --watch (the driver notes its progress as often)
SHOWN = 5      # retried tasks shown in lines (--json has farm.failures.SHOWN_TASKS)


def show(store: str, as_json: bool = False, watch: bool = False, interval: float = WATCH_S,
         verify: bool = False) -> JobSummary | None:
    """Print the job at ``store`` (a path or URL); with ``watch``, again every ``interval``
    seconds while it runs; with ``verify``, counting only what reads back. Returns the last
    ``JobSummary`` (None if Ctrl-C stopped the watch)."""
    try:
        while True:
            summary = _show_once(store, as_json, clear=watch and not as_json and sys.stdout.isatty(), verify=verify)
            if not watch or summary.state != "running":
                return summary
            time.sleep(interval)
            if not as_json:
                click.echo()
    except KeyboardInterrupt:  # how a watch is stopped: not an error
        return None


def _show_once(store: str, as_json: bool, clear: bool, verify: bool) -> JobSummary:
    spec, fs = open_store(store)
    summary = summary_of(store, spec, fs, verify=True if verify else None)
    if summary.state == "damaged":
        raise StoreError(summary.error)
    if as_json:
        click.echo(json.dumps(summary.to_json(frames=True), allow_nan=False))
        return summary
    lines = _lines(store, spec, fs, summary)
    if clear:
        click.clear()
    click.echo("\n".join(lines))
    return summary


def _lines(store, spec, fs, s):
    """The lines of ``farm status`` for the job ``spec`` in ``fs``, summarized as ``s``."""
    lines = [f"store:   {store}", f"scene:   {spec.scene}",
             f"frames:  {spec.frames[0]}-{spec.frames[1]} ({s.frames_done}/{s.frames} finished)",
             f"film:    {fs.width}x{fs.height}, {spp_text(spec, fs)}, tile {spec.tile}, pass {spec.pass_size}, "
             f"chunk {spec.chunk_passes} passes",
             f"samples: {100 * s.samples_done / s.samples_total:.1f}% done"
             + ("" if s.verified else " (as the driver recorded them; --verify checks every tile's data)")]
    if s.cpu_isa:
        lines.append(f"workers: CPU, {s.cpu_isa} arithmetic (every run of the job; --cpu-isa to change)")
    if len(s.renderers) > 1:
        lines.append(f"rendered by {len(s.renderers)} versions of the software (the images agree with one render "
                     f"in expectation, not to the bit): {' | '.join(s.renderers)}")
    elif s.renderers:
        lines.append(f"renderer: {s.renderers[0]}")
    if s.damaged_tasks:
        frames = s.damaged_frames
        shown = ", ".join(map(str, frames[:10])) + (", ..." if len(frames) > 10 else "")
        lines.append(f"damaged: {s.damaged_tasks} tile(s) whose recorded data does not read back (frames {shown}); "
                     f"`farm resume {store}` renders them again")
    line = _last_run(fs.progress(), s)
    if line:
        lines.append(line)
    lines += _failure_lines(s.failures)
    driver = holder(fs.group)
    lines.append("driver:  " + ("none yet" if driver is None else "unknown (its lease does not read)"
                                if driver is False else driver.describe(time.time())))
    for f in s.per_frame:
        estimate = "-" if f.noise is None else f"{f.noise:.4f}"
        lines.append(f"  frame {f.frame}: {f.spp:.1f} spp, noise {estimate}"
                     + (f" ({100 * f.done:.0f}%)" if f.done < 1 else ""))
    return lines


def _failure_lines(f: Retries) -> list[str]:
    """The last run's retries (the most retried tasks first, ``SHOWN`` of them) and hosts left out."""
    lines = []
    if f.count:
        lines.append(f"retries: {f.count} of {f.tasks} task(s) in the last run")
        for t in f.retried[:SHOWN]:
            lines.append(f"  {t.task}: {t.retries}x; " + "; ".join(t.reasons))
        if f.tasks > SHOWN:
            lines.append(f"  and {f.tasks - SHOWN} more task(s) (--json lists {len(f.retried)})")
    for h in f.left_out:
        lines.append(f"left out: {h.host}, after {h.failures} failed task(s) (last: {h.reason})")
    return lines


def spp_text(spec: JobSpec, store: FrameStore) -> str:
    """'64 spp', or with a noise target what a tile gets: 'noise 0.05: 256 to 4096 spp a tile'."""
    if spec.noise is None:
        return f"{spec.spp} spp"
    from farm.adaptive import Shot
    return f"noise {spec.noise:g}: {Shot(spec, store).least} to {spec.spp} spp a tile"


def _last_run(notes: Mapping[str, Any] | None, s: JobSummary) -> str | None:
    """The status line of the last run's progress notes (None before any run); any field may be
    missing or of the wrong type (they are notes, not the job)."""
    if notes is None:
        return "last run: unknown (its progress notes do not read back; the next run writes them again)"
    if not notes:
        return None
    state, updated = str(notes.get("state", "?")), progress_number(notes, "updated")
    line = f"last run: {state}" + (f", {s.phase}" if s.phase else "")
    if updated is not None:
        line += f" ({time.time() - updated:.0f} s ago)"
    if s.rate:
        line += f", {s.rate / 1e6:.2f} M pixel-samples/s"
    if s.eta_s is not None:
        line += f", ETA {s.eta_s:.0f} s"
    error = str(notes.get("error") or "")
    if error.startswith(state):  # "cancelled; `farm resume ...`": the state is said once
        error = error[len(state):].lstrip("; ")
    if error:
        line += f"; {error}"
    return line
