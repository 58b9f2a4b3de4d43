"""The farm's queue on a shared cluster: which job may hold how many worker groups.

One detached, named Ray actor per cluster (``FarmQueue``, ``NAME`` in ``NAMESPACE``) is the
farm's scheduler of record. Every driver attached to the cluster (``farm submit``'s, ``farm
render --address``) reports its job's entry about once a second (``farm.seat``): its store,
priority, whether it is paused (both read from its store), what one of its groups costs in Ray
resources, how many groups it wants and how many it holds. The queue answers with the job's
share (``share``, a pure function): higher priorities get groups first; equal priorities take
one group each in turn, in the order they first queued; a paused job gets none and keeps its
place. A driver above its share lets groups go at their task boundaries, one below forms groups
as the resources free up: so a new job of higher priority takes groups from lower ones without
anything lost or counted twice (the store's tree and fencing see to that).

The queue's state is soft: it holds only what drivers report, and forgets a job whose driver
stopped reporting (``STALE_S``). Killed, Ray restarts it (``max_restarts=-1``) and every live
driver's next report puts its job back; for ``RECOVER_S`` after a restart it answers "keep what
you hold", so that a job heard first does not take every group from one heard a moment later.
A local ``farm render`` (an embedded Ray) has no queue.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["Entry", "Grant", "share", "free", "room", "FarmQueue", "NAME", "NAMESPACE", "queue_actor", "find_queue", "listed",
           "watched", "state"]

NAME, NAMESPACE = "jaxfarm-queue", "jaxfarm"
STALE_S = 10.0    # a job whose driver has not reported for this long leaves the queue (back, it keeps its place)
RECOVER_S = 3.0   # after a restart, seconds the queue lets every job keep what it holds
CAPACITY_S = 2.0  # seconds the cluster's resources (ray.nodes) are taken as they were
WATCH_S = 2.0     # seconds between two looks of `farm queue --watch`


@dataclasses.dataclass(frozen=True)
class Entry:
    """A job in the queue, as its driver reports it."""

    store: str
    priority: int
    queued_at: float            # Unix time the driver first queued it: the order among equals
    cost: Mapping[str, float]   # Ray resources of one host of one of its groups
    wants: int                  # groups it would render on
    held: int = 0               # groups it holds (formed, forming or letting go)
    paused: bool = False
    hosts: int = 1              # hosts a group spans, each costing ``cost`` on its node
    spread: bool = True         # each host of a group on a node of its own (Ray's STRICT_SPREAD)


@dataclasses.dataclass(frozen=True)
class Grant:
    """The queue's answer: ``share`` groups for the job, ``free``: each live node's resources not
    held by any job (a driver forms a group only where it fits in them, ``room``)."""

    share: int
    free: Sequence[Mapping[str, float]]


def _fits(cost: Mapping[str, float], left: Mapping[str, float]) -> bool:
    return all(left.get(r, 0.0) >= v for r, v in cost.items())


def _take(left: dict[str, float], cost: Mapping[str, float]) -> None:
    for r, v in cost.items():
        left[r] = left.get(r, 0.0) - v


def _place(e: Entry, nodes: list[dict[str, float]]) -> bool:
    """Take one group of ``e`` from ``nodes`` (each node's resources left), host by host on the
    first node it fits (a node of its own each where the group spreads); False, taking nothing,
    where it does not fit. Resources are counted node by node: 16 CPUs free as 4 on each of four
    nodes hold no group of one 8-CPU host. (Ray's own placement may choose other nodes: this is
    the queue's estimate.)"""
    trial, used = [dict(node) for node in nodes], set()
    for _ in range(e.hosts):
        at = next((i for i, node in enumerate(trial) if not (e.spread and i in used) and _fits(e.cost, node)), None)
        if at is None:
            return False
        _take(trial[at], e.cost)
        used.add(at)
    nodes[:] = trial
    return True


def share(entries: Sequence[Entry], capacity: Sequence[Mapping[str, float]]) -> dict[str, int]:
    """{store: groups} for ``entries`` on a cluster whose live nodes have ``capacity`` (Ray
    resources, a mapping a node).

    Priorities from the highest down; within one, a group to each job in turn (the first queued
    first) while its group fits in what is left and it wants more; what a priority cannot use
    goes to the next. A paused job gets none."""
    left, out = [dict(n) for n in capacity], {e.store: 0 for e in entries}
    for level in sorted({e.priority for e in entries}, reverse=True):
        turn = sorted((e for e in entries if e.priority == level and not e.paused), key=lambda e: e.queued_at)
        while turn:
            for e in list(turn):
                if out[e.store] >= e.wants or not _place(e, left):
                    turn.remove(e)
                    continue
                out[e.store] += 1
    return out


def free(entries: Sequence[Entry], capacity: Sequence[Mapping[str, float]]) -> list[dict[str, float]]:
    """Each node's resources of ``capacity`` that no entry's groups hold (as ``_place`` puts them)."""
    left = [dict(n) for n in capacity]
    for e in entries:
        for _ in range(e.held):
            _place(e, left)
    return left


def room(e: Entry, free: Sequence[Mapping[str, float]]) -> int:
    """How many more groups of ``e`` (at most its ``wants``) fit in the nodes' ``free`` resources."""
    if isinstance(free, Mapping):  # (a queue actor of an earlier version, still running: the cluster's sums)
        free = [free]
    left, n = [dict(node) for node in free], 0
    while n < e.wants and _place(e, left):
        n += 1
    return n


def cluster_capacity() -> list[dict[str, float]]:
    """CPUs and GPUs of each of the cluster's live nodes (what groups are made of)."""
    import ray
    return [{r: node.get("Resources", {}).get(r, 0.0) for r in ("CPU", "GPU")}
            for node in ray.nodes() if node.get("Alive")]


class FarmQueue:
    """The queue's actor (see the module's docstring); every method answers at once."""

    def __init__(self) -> None:
        import ray
        self.entries: dict[str, Entry] = {}
        self.heard: dict[str, float] = {}  # store -> time.monotonic() of its last report
        restarted = ray.get_runtime_context().was_current_actor_reconstructed
        self.recover_until = time.monotonic() + (RECOVER_S if restarted else 0.0)
        self.capacity: list[dict[str, float]] = []
        self.capacity_at = -1e9

    def _capacity(self) -> list[dict[str, float]]:
        now = time.monotonic()
        if now - self.capacity_at > CAPACITY_S:
            self.capacity, self.capacity_at = cluster_capacity(), now
        return self.capacity

    def _current(self) -> list[Entry]:
        now = time.monotonic()
        for store in [s for s, t in self.heard.items() if now - t > STALE_S]:
            del self.entries[store], self.heard[store]
        return list(self.entries.values())

    def report(self, entry: Entry) -> Grant | None:
        """Record ``entry``; its job's grant, or None (just restarted: keep what you hold)."""
        known = self.entries.get(entry.store)
        if known is not None and known.queued_at < entry.queued_at:  # (the first report's place is kept)
            entry = dataclasses.replace(entry, queued_at=known.queued_at)
        self.entries[entry.store], self.heard[entry.store] = entry, time.monotonic()
        if time.monotonic() < self.recover_until:
            return None
        entries, capacity = self._current(), self._capacity()
        return Grant(share(entries, capacity)[entry.store], free(entries, capacity))

    def leave(self, store: str) -> None:
        self.entries.pop(store, None)
        self.heard.pop(store, None)

    def rows(self) -> list[dict[str, object]]:
        """The queue, highest priority and first queued first: each job's entry and share."""
        entries, capacity = self._current(), self._capacity()
        shares = share(entries, capacity)
        entries.sort(key=lambda e: (-e.priority, e.queued_at))
        return [dict(store=e.store, priority=e.priority, paused=e.paused, queued_at=e.queued_at, wants=e.wants,
                     held=e.held, share=shares[e.store]) for e in entries]

    def pid(self) -> int:
        return os.getpid()


def queue_actor() -> Any:
    """The cluster's queue (Ray must be initialized): the running one, else started now.
    Detached (it outlives the driver that started it), restarted by Ray when it dies, and
    holding no CPU (it takes nothing from the groups)."""
    import ray
    actor = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)(FarmQueue)
    return actor.options(name=NAME, namespace=NAMESPACE, lifetime="detached", get_if_exists=True).remote()


def find_queue() -> Any:
    """The cluster's queue, or None where no farm job has started one."""
    import ray
    try:
        return ray.get_actor(NAME, namespace=NAMESPACE)
    except ValueError:
        return None


def listed(address: str) -> list[dict[str, object]] | None:
    """The queue of the cluster at ``address`` (its Ray address: ``auto``, HOST:PORT or
    ``ray://HOST:10001``) as ``FarmQueue.rows`` lists it; None where no farm job has started one."""
    with _joined(address):
        return _rows(address)


def watched(address: str, interval: float = WATCH_S) -> Iterator[list[dict[str, object]] | None]:
    """``listed(address)`` every ``interval`` seconds, on one connection to the cluster (one Ray
    driver however long it is watched, not one a look)."""
    with _joined(address):
        while True:
            yield _rows(address)
            time.sleep(interval)


def state(row: Mapping[str, object]) -> str:
    """A row's job as ``farm queue`` and the monitor name it: paused, rendering (it holds a
    group) or waiting."""
    return "paused" if row["paused"] else "rendering" if row["held"] else "waiting"


@contextlib.contextmanager
def _joined(address: str) -> Iterator[None]:
    """This process's Ray joined to the running cluster at ``address`` (never one started: an
    address where no cluster runs is a FarmError)."""
    import logging

    import ray

    from farm.errors import FarmError, first_line
    from farm.jobs import token_mode
    if address.startswith(("http://", "https://")):
        raise FarmError(f"{address} is a dashboard's address: `farm queue` joins the cluster itself, so give its Ray "
                        f"address (auto on one of its nodes, HOST:6379, or ray://HOST:10001)")
    _check_answers(address)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    token_mode()
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise FarmError(f"cannot join the Ray cluster at {address}: {first_line(e)}") from None
    try:
        yield
    finally:
        ray.shutdown()


def _rows(address: str) -> list[dict[str, object]] | None:
    """The queue's rows (Ray joined to its cluster), found by name: a queue is never started here."""
    import ray

    from farm.errors import FarmError, first_line
    try:
        actor = find_queue()
        return None if actor is None else ray.get(actor.rows.remote(), timeout=60)
    except ray.exceptions.RayError as e:
        raise FarmError(f"the farm's queue on the cluster at {address} did not answer: {first_line(e)}") from None


def _check_answers(address: str) -> None:
    """Refuse a HOST:PORT (or ``ray://HOST:PORT``) where nothing listens, in one line: Ray would
    retry for minutes, printing as it goes."""
    import socket

    from farm.errors import FarmError
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # (auto, or a form Ray itself explains)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise FarmError(f"cannot join the Ray cluster at {address}: nothing answers there "
                        f"({e.strerror or type(e).__name__})") from None
