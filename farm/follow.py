"""Waiting for a job's end and following its log: ``farm wait`` and ``farm logs``.

A local job's end is read from its store: the last run's state (``farm.monitor``) and its
driver's lease (``farm.lease``). A run noted as running whose driver is gone (its process ended
on this machine, or its lease lapsed or was released) has ended too: it failed without a word. A
submitted job's end is its Ray job's (``farm.jobs``), then its store's state where it has one.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from farm import jobs
from farm.errors import FarmError
from farm.job import open_store
from farm.lease import holder
from farm.monitor import summary_of

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

__all__ = ["Ending", "store_ending", "submitted_ending", "wait", "EXIT_CODES", "POLL_S"]

POLL_S = 1.0  # seconds between two looks
# A job's end as an exit code, as `farm render` exits on it (the README's table).
EXIT_CODES = {"done": 0, "failed": 4, "cancelled": 5, "interrupted": 130, "stopped": 143}


@dataclasses.dataclass(frozen=True)
class Ending:
    """How a job ended (None: it has not)."""
    state: str              # done, failed, cancelled, interrupted, stopped
    error: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.state]


def store_ending(store: str) -> Ending | None:
    """How the job of the local store at ``store`` ended, or None while a driver renders it."""
    from farm.checkpoint import open_optimization
    spec, fs = open_store(store)
    optimization = open_optimization(fs)
    if optimization is None:
        summary = summary_of(store, spec, fs)
        state, error = summary.state, summary.error
    else:  # an optimization (farm optimize): done at its last iteration, else as its notes say
        notes = fs.progress() or {}
        done = optimization.done() >= optimization.spec.iterations
        state, error = ("done" if done else str(notes.get("state", ""))), notes.get("error")
    driver, now = holder(fs.group), time.time()
    running = driver is False or (driver is not None and driver.live(now) and not driver.gone())
    if state == "done":
        return Ending("done")
    if running:
        return None
    if state in EXIT_CODES:
        return Ending(state, str(error) if error else None)
    if driver and not driver.released:
        why = "is gone" if driver.gone() else f"stopped renewing its lease {now - driver.renewed:.0f} s ago"
        return Ending("failed", f"its driver, {driver.who()}, {why}; `farm resume {store}` goes on")
    return Ending("failed", f"no driver is rendering it and it is not done; `farm resume {store}` goes on")


def submitted_ending(client: JobSubmissionClient, address: str, store: str) -> Ending | None:
    """How the latest job submitted for ``store`` ended, or None while it is queued or runs."""
    job = jobs.latest(client, address, store)
    if job is None:
        raise FarmError(f"{store}: no job was submitted for it to the cluster at {address}")
    if job.status not in jobs.ENDED:
        return None
    state = jobs.ENDINGS[job.status]
    if state == "done":  # the driver's own end, where the store says more (a cancel ends it with 5)
        try:
            return store_ending(store) or Ending("done")
        except FarmError:
            pass
    why = (job.message or "").strip().splitlines()[:1]
    return Ending(state, f"{why[0] if why else 'its Ray job failed'} (`farm logs {store} --address {address}`)"
                  if state == "failed" else None)


def wait(ending: Callable[[], Ending | None], timeout: float | None, poll: float = POLL_S) -> Ending | None:
    """``ending()`` once it says the job ended, or None once ``timeout`` seconds passed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        end = ending()
        if end is not None or (deadline is not None and time.monotonic() >= deadline):
            return end
        time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
