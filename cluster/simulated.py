"""Simulated worker groups: the driver's whole path without the tracer, for benchmarks and fault tests.

A simulated group is a ``WorkerGroup`` whose one member runs a stub work unit (no JAX): the
scheduler, Ray, the tasks and every write to the store are the real ones. The stub is
deterministic and split-exact like the tracer's: pass ``p`` of pixel (y, x) of frame ``f``
adds ``n * v(f, p, y, x)`` to the value (RGB alike) and ``n`` to the weight, ``n`` being the
pass's samples below the spp, pass by pass in pass order in float32, onto the task's start; so
a tile's bits depend on the passes summed, never on how they were split. ``latency_s`` is the
seconds each task sleeps (a render's time).

Many groups share one process: a ``Hosts`` pool starts ``processes`` threaded actors and gives
each group one of them (``per_process`` groups each), so 256 groups do not need 256 processes.
A fault, for tests: ``after_write='exit'`` ends the member's process right after its first
task's result is written (before it answers), ``'hang'`` makes it wait forever there, having
first created the file ``marker`` (so a test knows when to kill the driver); ``stall_s`` makes
its first task sleep that long before it renders, writes (then creates ``marker``) and answers:
a member that comes back after its task was given up on. A group rebuilt after a fault gets a
process of its own without one.
"""
import itertools
import os
import time
from typing import Any

import numpy as np
import ray
from numpy.typing import ArrayLike

from cluster.group import GroupShape, WorkerGroup
from cluster.member import Member
from cluster.task import TileTask

__all__ = ["Hosts", "SimulatedGroup", "stub_tile"]


def stub_tile(task: TileTask, start: tuple[ArrayLike, ArrayLike]) -> tuple[np.ndarray, np.ndarray]:
    """(value (th, tw, 3), weight (th, tw)) float32: the task's passes added to ``start``."""
    value, weight = (np.array(a, np.float32) for a in start)
    y, x = np.mgrid[task.tile_y:task.tile_y + task.tile_h, task.tile_x:task.tile_x + task.tile_w]
    for p in range(task.first_pass, task.first_pass + task.n_passes):
        n = max(0, min(task.spp, (p + 1) * task.pass_size) - p * task.pass_size)
        v = ((task.frame * 7919 + p * 104729 + y * 31 + x * 17) % 1009).astype(np.float32) / np.float32(1009)
        value += (np.float32(n) * v)[..., None]
        weight += np.float32(n)
    return value, weight


class _SimulatedMember(Member):
    def __init__(self, latency_s=0.0, after_write=None, marker=None, stall_s=0.0):
        super().__init__(0, 1, {})
        self.latency_s, self.after_write, self.marker, self.stall_s = latency_s, after_write, marker, stall_s

    def initialize(self, coordinator, timeout_s, heartbeat_s):
        return dict(rank=0, process_index=0, global_devices=1, local_devices=1, platform="stub")

    def compile_stats(self):
        return None

    def prepare(self, task, compiler=None):
        return None

    def _work(self, task, start):
        if self.latency_s:
            time.sleep(self.latency_s)
        return stub_tile(task, start)

    def render(self, task):
        stall, self.stall_s = self.stall_s, 0.0
        time.sleep(stall)
        answer = super().render(task)
        if stall and self.marker:
            open(self.marker, "w").close()
        if self.after_write and task.out is not None:
            if self.marker:
                open(self.marker, "w").close()
            if self.after_write == "exit":
                os._exit(1)
            time.sleep(10 ** 6)
        return answer


_Actor = ray.remote(max_restarts=0, max_task_retries=0)(_SimulatedMember)


class Hosts:
    """The processes that host simulated groups' members; ``make_group`` is ``run_job``'s."""

    def __init__(self, groups: int, per_process: int = 1, latency_s: float = 0.0, after_write: str | None = None,
                 marker: str | None = None, stall_s: float = 0.0) -> None:
        self.latency_s = latency_s
        processes = -(-groups // per_process)
        self.actors = [_Actor.options(max_concurrency=per_process, num_cpus=0).remote(latency_s, after_write, marker,
                                                                                      stall_s)
                       for _ in range(processes)]
        self.per_process = per_process
        self.users = [0] * processes  # groups on each process now (a group formed again takes the least used)
        self._next = itertools.count()
        self.spares: list[Any] = []  # processes of rebuilt groups (Ray actor handles)
        self.places: dict[Any, tuple[str, str, int]] = {}  # process (actor handle) -> its (node id, IP, pid)

    def where(self, actor: Any) -> tuple[str, str, int]:
        """Where the process ``actor`` runs, asked once (its groups share the answer)."""
        if actor not in self.places:
            self.places[actor] = ray.get(actor.where.remote())
        return self.places[actor]

    def make_group(self, shape: GroupShape, name: str | None = None, init_timeout_s: float = 60) -> "SimulatedGroup":
        return SimulatedGroup(shape, self, next(self._next), name=name, init_timeout_s=init_timeout_s)

    def shutdown(self) -> None:
        for actor in self.actors + self.spares:
            ray.kill(actor, no_restart=True)


class SimulatedGroup(WorkerGroup):
    """A one-member group on a shared process of ``hosts`` (its ``index``-th group)."""

    def __init__(self, shape: GroupShape, hosts: Hosts, index: int, **kwargs: Any) -> None:
        super().__init__(shape, **kwargs)
        self.hosts, self.index = hosts, index

    lent: int | None = None  # the index of the pool's process it holds

    def _start_once(self, port):
        if self.generation == 0:
            users = self.hosts.users
            first = self.index // self.hosts.per_process
            self.lent = first if first < len(users) and users[first] < self.hosts.per_process else \
                users.index(min(users))
            users[self.lent] += 1
            member = self.hosts.actors[self.lent]
        else:  # rebuilt: a process of its own, without the fault
            member = _Actor.options(num_cpus=0).remote(self.hosts.latency_s)
            self.hosts.spares.append(member)
        self.members = [member]
        self.info = [ray.get(member.initialize.remote(None, self.init_timeout_s, self.heartbeat_s))]
        self.where = [self.hosts.where(member)]

    def teardown(self) -> None:
        self.members = []  # the processes are the pool's (``Hosts.shutdown``)
        if self.lent is not None:
            self.hosts.users[self.lent] -= 1
            self.lent = None
