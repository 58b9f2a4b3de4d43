"""Failures in view: when a task has run too long, what each task's retries were and why, and
the hosts left out of a run because their groups kept failing.

A task times out (``TaskClock``) after the job's ``[groups] task_timeout`` seconds, or by
default ``TIMEOUT_FACTOR`` times the run's median task time, at least ``MIN_TIMEOUT_S``. Its
clock starts when it reaches the head of its group's line (a group renders its tasks one at a
time, and the driver keeps two in flight: ``farm.scheduler``). A group's first task after it
formed loads or compiles the job's program: it gets at least ``FIRST_TASK_S``, as every task
does until ``MIN_TIMES`` tasks have come back (no median yet).

Every failure of a task that is not the task's own (a timeout, a member lost, an error a retry
may not repeat) counts against the task (its retries, with their reasons) and against each host
its group ran on (``Failures``); a host with ``host_failures`` of them is left out of the run.
A retry waits for a group on a host it has not failed on where there is one (``Failures.fits``;
the groups meanwhile take the plan's next tasks). It is all per run: a resumed job starts with
every host back and no retries counted.

The counts go into the run's progress notes (``Failures.notes``), read back by ``farm status``,
``--json`` and ``farm serve`` as ``Retries`` (``read_notes``; notes of any shape read as none).
"""
from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["TaskClock", "Failures", "Host", "RetriedTask", "LeftOut", "Retries", "read_notes", "task_label",
           "TIMEOUT_FACTOR", "MIN_TIMEOUT_S", "FIRST_TASK_S", "MIN_TIMES", "SHOWN_TASKS"]

TIMEOUT_FACTOR = 5     # a task past this many times the median task time is taken away
MIN_TIMEOUT_S = 60.0   # the default timeout at least (a loaded machine's tasks vary)
FIRST_TASK_S = 600.0   # a group's first task, and any before the median is known, at least
MIN_TIMES = 3          # task times before the median is taken
_TIMES = 1000          # the most recent task times the median is taken over
SHOWN_TASKS = 50       # retried tasks kept in the notes, the most retried first
_REASONS = 3           # reasons kept a task (the last ones)


class TaskClock:
    """How long a task may run: the fixed ``timeout_s``, or the default of this module's docstring."""

    def __init__(self, timeout_s: float | None = None):
        self.timeout_s = timeout_s
        self.times: collections.deque[float] = collections.deque(maxlen=_TIMES)  # seconds of tasks that counted

    def add(self, seconds: float) -> None:
        self.times.append(seconds)

    def median(self) -> float | None:
        return statistics.median(self.times) if len(self.times) >= MIN_TIMES else None

    def limit(self, first: bool) -> float:
        """Seconds a task may run from the head of its group's line; ``first``: its group's first."""
        median = self.median()
        if self.timeout_s is not None:
            limit = self.timeout_s
        elif median is None:
            return FIRST_TASK_S
        else:
            limit = max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * median)
        return max(limit, FIRST_TASK_S) if first else limit


@dataclasses.dataclass(frozen=True)
class Host:
    """A host a group ran on: Ray's node id, and how it is shown (its address and the id's start)."""

    node: str
    name: str

    @classmethod
    def of(cls, node: str | None, ip: str | None) -> Host | None:
        """The host of a member at (``node``, ``ip``) (``WorkerGroup.where``); None where unknown."""
        if node is None:
            return None
        return cls(node, f"node {node[:8]} at {ip or 'an unknown address'}")


def task_label(frame: int, chunk: int, tile: Sequence[int]) -> str:
    return f"frame {frame} chunk {chunk} tile ({tile[0]}, {tile[1]})"


@dataclasses.dataclass(frozen=True)
class RetriedTask:
    task: str                # "frame F chunk C tile (TY, TX)"
    frame: int               # frame number
    retries: int             # times it failed and was sent again
    reasons: tuple[str, ...]  # why, and where, the last few, oldest first


@dataclasses.dataclass(frozen=True)
class LeftOut:
    host: str                # Host.name
    failures: int            # failed tasks of its groups
    reason: str              # the last one's


@dataclasses.dataclass(frozen=True)
class Retries:
    """A run's failures as its notes keep them."""

    count: int = 0                           # retries, all tasks
    tasks: int = 0                           # tasks retried
    retried: tuple[RetriedTask, ...] = ()    # the most retried (at most SHOWN_TASKS)
    left_out: tuple[LeftOut, ...] = ()       # hosts left out of the run


class Failures:
    """A run's failed tasks, by task and by host; hosts past ``host_failures`` are left out."""

    def __init__(self, host_failures: int):
        self.host_failures = host_failures
        self.by_task: dict[tuple[int, ...], list[str]] = {}    # task key -> reasons, all of them
        self.labels: dict[tuple[int, ...], tuple[str, int]] = {}  # task key -> (label, frame number)
        self.hosts_of: dict[tuple[int, ...], set[str]] = collections.defaultdict(set)  # task key -> nodes it failed on
        self.by_host: collections.Counter[str] = collections.Counter()  # node -> failed tasks
        self.last: dict[str, str] = {}                         # node -> the last failure's reason
        self.names: dict[str, str] = {}                        # node -> Host.name
        self.left_out: dict[str, LeftOut] = {}                 # node -> why it is left out

    def fail(self, key: tuple[int, ...], label: str, frame: int, reason: str, where: str,
             hosts: Iterable[Host]) -> list[Host]:
        """Count a failure (``reason``) of the task ``key`` (``label``, of frame number ``frame``)
        on ``hosts`` (``where``: its group and them, said with the task's reasons); returns the
        hosts it leaves out."""
        self.by_task.setdefault(key, []).append(f"{reason} ({where})")
        self.labels[key] = (label, frame)
        out = []
        for host in hosts:
            self.hosts_of[key].add(host.node)
            self.names[host.node] = host.name
            self.by_host[host.node] += 1
            self.last[host.node] = reason
            if host.node not in self.left_out and self.by_host[host.node] >= self.host_failures:
                self.left_out[host.node] = LeftOut(host.name, self.by_host[host.node], reason)
                out.append(host)
        return out

    def retries(self, key: tuple[int, ...]) -> int:
        return len(self.by_task.get(key, ()))

    def fits(self, key: tuple[int, ...], hosts: Iterable[Host], others: Iterable[Iterable[Host]]) -> bool:
        """Whether the task ``key`` may go to a group on ``hosts``: not one it failed on, unless
        every group (the hosts of each: ``others``) is on one it failed on."""
        failed = self.hosts_of.get(key)
        clear = lambda hs: not failed or not any(h.node in failed for h in hs)  # noqa: E731
        return clear(hosts) or not any(clear(hs) for hs in others)

    def why_none_left(self) -> str:
        """What left every host out, for the run's one-line error."""
        return "; ".join(f"{h.host} left out after {_tasks(h.failures)} (last: {h.reason})"
                         for h in self.left_out.values())

    def summary(self) -> Retries:
        tasks = sorted(self.by_task.items(), key=lambda kv: -len(kv[1]))
        shown = tuple(RetriedTask(self.labels[k][0], self.labels[k][1], len(r), tuple(r[-_REASONS:]))
                      for k, r in tasks[:SHOWN_TASKS])
        return Retries(sum(len(r) for r in self.by_task.values()), len(tasks), shown, tuple(self.left_out.values()))

    def notes(self) -> dict[str, Any]:
        """The progress notes' ``failures`` (JSON-able)."""
        return dataclasses.asdict(self.summary())


def _tasks(n: int) -> str:
    return f"{n} failed task{'s' if n != 1 else ''}"


def read_notes(notes: Mapping[str, Any]) -> Retries:
    """The ``Retries`` of a run's progress notes (``FrameStore.progress``); notes of another
    shape (an older run's, or damaged) read as none."""
    value = notes.get("failures")
    if not isinstance(value, dict):
        return Retries()
    try:
        retried = tuple(RetriedTask(str(t["task"]), int(t["frame"]), int(t["retries"]),
                                    tuple(str(r) for r in t["reasons"])) for t in value.get("retried", ()))
        left = tuple(LeftOut(str(h["host"]), int(h["failures"]), str(h["reason"])) for h in value.get("left_out", ()))
        return Retries(int(value.get("count", 0)), int(value.get("tasks", 0)), retried, left)
    except (KeyError, TypeError, ValueError):
        return Retries()
