"""A job's place in its cluster's queue (``farm.queue``), from its driver's side.

The driver's loop asks ``poll(held)`` at each turn; about once a second (``REPORT_S``) that
sends the job's entry to the queue (its pause read from the store then) without waiting for the
answer, and takes the answer of the report before. While the queue does not answer (restarting,
or its node gone) the job keeps what it holds: the queue can slow a job down, never stop it.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from farm.queue import Entry, Grant, queue_actor, room

if TYPE_CHECKING:
    from cluster.group import GroupShape

__all__ = ["Seat", "REPORT_S"]

REPORT_S = 1.0     # seconds between a driver's reports
JOIN_S = 60.0      # how long the first answer may take (the queue's actor may be starting)


class Seat:
    """The job of ``store`` in the queue: ``priority``, groups of ``shapes`` (their first's cost
    stands for all), paused while ``paused()`` says so (the store's flag)."""

    def __init__(self, store: str, priority: int, shapes: Sequence[GroupShape], paused: Callable[[], bool],
                 log: Callable[[str], object] = print):
        self.store, self.priority, self.paused, self.log = store, priority, paused, log
        first = shapes[0]
        self.cost, self.hosts, self.spread = first.bundle(), first.hosts, first.strategy == "STRICT_SPREAD"
        self.wants = len(shapes)
        self.queued_at = time.time()
        self.actor: Any = None
        self.pending: Any = None     # the ObjectRef of the report sent last, not yet answered
        self.sent = -1e9             # time.monotonic() of that report
        self.grant: Grant | None = None  # the last answer (None: none yet, or "keep what you hold")
        self.away = False            # the queue did not answer the last report
        self.was_paused = False

    def entry(self, held: int) -> Entry:
        self.was_paused = self.paused()
        return self._entry(held, self.was_paused)

    def _entry(self, held: int, paused: bool) -> Entry:
        return Entry(self.store, self.priority, self.queued_at, self.cost, self.wants, held, paused, self.hosts,
                     self.spread)

    def join(self) -> Grant | None:
        """Queue the job (starting the cluster's queue if it is not running); its first grant,
        or None where the queue did not answer in ``JOIN_S`` (the job goes on without it)."""
        import ray
        try:
            self.actor = queue_actor()
            self.grant = ray.get(self.actor.report.remote(self.entry(0)), timeout=JOIN_S)
        except Exception as e:  # whatever it is, the queue never stops a job
            self.log(f"the farm's queue did not answer ({type(e).__name__}); rendering on every group of the job")
            self.actor, self.away = None, True
        self.sent = time.monotonic()
        return self.grant

    def poll(self, held: int) -> Grant | None:
        """The latest grant (None: keep what is held), reporting ``held`` when it is time."""
        import ray
        if self.actor is None:
            return None
        if self.pending is not None and ray.wait([self.pending], timeout=0)[0]:
            try:
                self.grant, back = ray.get(self.pending), self.away
                self.away = False
                if back:
                    self.log("the farm's queue answers again")
            except ray.exceptions.RayError:
                if not self.away:
                    self.log("the farm's queue does not answer: keeping the groups held until it does")
                self.away, self.grant = True, None
            self.pending = None
        if self.pending is None and time.monotonic() - self.sent >= REPORT_S:
            self.sent = time.monotonic()
            try:
                self.pending = self.actor.report.remote(self.entry(held))
            except Exception:  # (not sent: the next turn tries again)
                self.pending = None
        return None if self.away else self.grant

    def room(self, free: Sequence[Mapping[str, float]]) -> int:
        """How many of the job's groups fit in ``free`` resources (a mapping a node)."""
        return room(self._entry(0, False), free)

    def leave(self) -> None:
        """Out of the queue (the job ended, or its driver stops): its groups go to others at once."""
        if self.actor is not None:
            try:
                self.actor.leave.remote(self.store)
            except Exception:  # a queue that is gone forgets the job by itself (farm.queue.STALE_S)
                pass
