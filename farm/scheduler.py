"""The driver loop: keep every worker group busy, retry what fails, fold results into the store.

A queue, not lockstep: each group takes the next task as soon as it hands one back. Where the
workers can reach the store (a local path), each writes its task's result under a key unique
to its dispatch and the driver commits records only (``farm.results``: a tile's next chunk is
sent once its last one is committed); elsewhere (an fsspec URL such as ``memory://``) results
come back to the driver, which folds each tile's chunks in chunk order (``farm.folding``).
Every sending of a task is one ``Dispatch`` record; a result counts only if its dispatch is
still its task's live one, so a task that was given up on and sent elsewhere can never be
written twice when its first group comes back (fencing). A lost member, or a task that runs past
its timeout (``farm.failures.TaskClock``), fails its group: the task is retried, first and on
another host where a group there is free, the group's other task goes back to the queue as it
was, and the group is rebuilt from new processes (the old ones killed: a hung member too). Each
failure counts against the task and the group's hosts (``farm.failures.Failures``); a host past
``[groups] host_failures`` is left out (its groups re-formed elsewhere, or dropped), and with
every host left out the job stops (``NoHostLeft``). A task that fails ``max_attempts`` times
fails the job with its own error.

On a shared cluster the job has a seat in the farm's queue (``farm.seat``): its share of groups
may change while it runs. A group above the share is let go at its task boundaries (it gets no
new task, and is torn down once its tasks in flight have come back); one below is formed in the
background as the queue says the resources are free. With no group the job waits its turn.

A local job may render ahead (``RenderAhead``): while Ray starts and its groups form (in a thread
of their own), the driver's preflight child, which has the work unit compiled, renders the
queue's first tasks one at a time, each written to a slot and committed as a group's answer is.
A task it does not answer goes back to the queue, its slot dropped; once the groups are up they
take the rest.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import ray

from cluster.group import GroupError, GroupFailed, GroupShape, WorkerGroup
from cluster.task import TileTask
from farm import faults, signals, summary
from farm.adaptive import Shot
from farm.errors import FarmError, first_line
from farm.failures import Failures, Host, TaskClock, task_label
from farm.folding import Folds
from farm.job import job_samples, scene_ref, tile_size
from farm.tree import split_tail
from farm.planner import Plan, Task, plan
from farm.progress import RunProgress
from farm.records import TileRecord
from farm.results import Commits, shared_root
from tracer.errors import SceneError
from tracer.io.reads import SceneChanged

if TYPE_CHECKING:
    from farm.results import Slot
    from farm.seat import Seat
    from farm.spec import JobSpec
    from farm.store import FrameStore

__all__ = ["run_job", "start_groups", "JobFailed", "NoHostLeft", "Cancelled", "SceneChangedError", "Dispatch",
           "RenderAhead"]


class JobFailed(FarmError):
    exit_code = 4


class Cancelled(FarmError):
    exit_code = 5


class NoHostLeft(JobFailed):
    """Every host the job's groups ran on was left out (``farm.failures``): the run stops, the
    store as the last commit left it."""


class SceneChangedError(JobFailed):
    """A member read a scene file whose bytes are not those the store records: the job stops
    (exit 3, as ``farm resume`` refuses the store then); restoring the file lets it go on."""

    exit_code = 3

    def __init__(self, store: FrameStore, changed: SceneChanged):
        super().__init__(f"{store.url}: scene file {changed.path} changed while the job ran: its frames are "
                         f"stored under the scene as it was; restore the file and `farm resume {store.url}`, "
                         f"or render again with --replace to start over")
        self.path = changed.path


_DEPTH = 2  # dispatches in flight per group


@dataclasses.dataclass(frozen=True)
class RenderAhead:
    """A process on this host that renders tasks while Ray starts and the groups form, until a
    group has answered (the preflight child: ``farm.scene_check.Preflight``).

    ``send(task)``: it takes a ``TileTask`` whose ``out`` is a slot (False: it takes no more);
    ``answer(timeout_s)``: (whether that task has ended, its answer: a dict of ``crc``, the
    slot's receipt, and ``renderer``, its software; None where it could not, and it takes no
    more); ``stop()``: stopped where it is (it writes nothing more); ``compiled(timeout_s)``:
    whether it has the work unit (True), never will (False), or not yet (None); ``done()``: it
    gets no more tasks. ``ray()``, called in the driver's thread, waits for Ray (raising its
    error) and takes the driver's signals back from Ray's core worker.

    ``stands_in``: it is what the job's groups would be, one group of one member on this host
    with the members' environment, on the same devices. Then no group forms while it renders
    (a second process on those devices would only share them), and the job's group forms only
    if it stops with tasks left: it failed, was killed, or overran a task's time limit. Ray's
    failure to start fails the job only then: until then the child renders the job alone. A
    16-frame job of examples/orbit.xml on 2 cores had spent 4.6 of its 28 CPU-seconds on the start
    of a member that rendered what the child would have."""

    send: Callable[[TileTask], bool]
    answer: Callable[[float], tuple[bool, dict | None]]
    stop: Callable[[], object]
    compiled: Callable[[float], bool | None]
    done: Callable[[], object]
    ray: Callable[[], object]
    stands_in: bool = False


@dataclasses.dataclass(eq=False)
class Dispatch:
    """One sending of a task to a group; its answer counts only while it is its task's live one."""

    task: Task
    group: WorkerGroup
    handle: list[ray.ObjectRef]  # the group's handle of the render (``WorkerGroup.submit``)
    generation: int     # the group's generation when sent: an answer of an older one is stale
    started: float      # time.monotonic() when sent
    hosts: tuple[Host, ...]  # where the group's members were when sent
    slot: Slot | None = None  # where its member writes the result (farm.results.Slot), or None: sent back

    @property
    def label(self) -> str:
        return task_label(self.task.frame, self.task.chunk, self.task.key[2:])


def _remote_error(exc: BaseException) -> tuple[str, bool]:
    """One line for a task's own error: a SceneError's message, else the exception's last line."""
    cause = getattr(exc, "cause", None)
    if cause is not None:
        text = str(cause).strip().splitlines()
        return (text[-1] if text else type(cause).__name__), isinstance(cause, SceneError)
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__), False


class _Queue:
    """Tasks to send, first first: those put back in front (retries, a tile's chunks let go),
    then the plan's, made as they are taken (``Plan.tasks``)."""

    def __init__(self, tasks: Iterable[Task]):
        self.front: collections.deque[Task] = collections.deque()
        self.rest: Iterator[Task] | None = iter(tasks)

    def __bool__(self) -> bool:
        if not self.front and self.rest is not None:  # look one ahead
            task = next(self.rest, None)
            if task is None:
                self.rest = None
            else:
                self.front.append(task)
        return bool(self.front)

    def popleft(self, fits: Callable[[Task], bool] = lambda task: True) -> Task | None:
        """The first queued task that ``fits`` (the plan's fresh ones always do), or None."""
        if not self:
            return None
        for i, queued in enumerate(self.front):
            if fits(queued):
                del self.front[i]
                return queued
        fresh = next(self.rest, None) if self.rest is not None else None
        if fresh is None:
            self.rest = None
        return fresh

    def ahead(self, n: int) -> list[Task]:
        """The first ``n`` queued tasks (fewer where fewer are left), left queued."""
        while len(self.front) < n and self.rest is not None:
            task = next(self.rest, None)
            if task is None:
                self.rest = None
            else:
                self.front.append(task)
        return list(itertools.islice(self.front, n))

    def appendleft(self, task: Task) -> None:
        self.front.appendleft(task)

    def extendleft(self, tasks: Iterable[Task]) -> None:
        self.front.extendleft(tasks)


class _JobRun:
    """One run of ``run_job``: the groups, the queue of a plan's tasks, retries and writes to the store."""

    def __init__(self, spec: JobSpec, store: FrameStore, shapes: Sequence[GroupShape], max_attempts: int,
                 max_rebuilds: int, progress: RunProgress, log: Callable[[str], object], init_timeout_s: float,
                 task_timeout_s: float | None, make_group: Callable[..., WorkerGroup] = WorkerGroup,
                 ready: Callable[[], object] | None = None, seat: Seat | None = None, compiler: int | None = None,
                 ahead: RenderAhead | None = None):
        self.spec, self.store, self.shapes, self.make_group = spec, store, shapes, make_group
        self.ahead = ahead  # renders until a group answers (None: it has stopped, or there is none)
        self.ahead_out: tuple[Task, TileTask, float] | None = None  # its task in hand (task, TileTask, sent at)
        self.rendered_ahead = 0  # tasks of this run that ``ahead`` rendered
        self.ahead_compiles: dict[str, float] | None = None  # its XLA programs, as of its last answer
        self.seat = seat  # the job's place in its cluster's queue (None: a job of its own, every group)
        self.spare: list[tuple[str, GroupShape]] = []  # (name, shape) of groups the share leaves unformed
        self.forming: dict[Future, WorkerGroup] = {}   # groups forming in the background (with a seat)
        self.draining: set[WorkerGroup] = set()        # groups let go: no new task, torn down once idle
        self.former: ThreadPoolExecutor | None = None
        self.ready = ready  # waited for before the first dispatch
        self.compiler = compiler  # pid of the local process compiling the work unit meanwhile (the preflight)
        self.init_timeout_s = init_timeout_s
        self.clock = TaskClock(task_timeout_s if task_timeout_s is not None else spec.groups.task_timeout)
        self.failures = Failures(spec.groups.host_failures)
        progress.failures = self.failures  # in the run's notes (farm status, farm serve)
        self.slowest = 0.0  # seconds of the slowest task that counted
        self.by_host: collections.Counter[Host] = collections.Counter()  # tasks that counted, per host they ran on
        self.fenced = 0     # dispatches given up on: a result of theirs, answered or written, never counts
        # group -> when its last answer came (its next task's clock starts then); None: none yet, since it formed
        self.answered: dict[WorkerGroup, float | None] = {}
        self.max_attempts, self.max_rebuilds = max_attempts, max_rebuilds
        self.progress, self.log = progress, log
        self.th, self.tw = tile_size(spec, store)
        self.queue = _Queue(())  # tasks to send, first first
        # tile -> tasks past its window, in chunk order
        self.parked: collections.defaultdict[tuple[int, int, int], list[Task]] = collections.defaultdict(list)
        self.live: dict[tuple[int, int, int, int], Dispatch] = {}  # task key -> its live Dispatch
        self.inflight: dict[ray.ObjectRef, Dispatch] = {}    # ray ref -> Dispatch not yet answered
        self.load: collections.Counter[WorkerGroup] = collections.Counter()  # group -> dispatches in flight
        self.folds: Commits | Folds | None = None  # Commits (workers write), or Folds (results come back)
        self.folded: set[int] = set()  # frame indexes whose records changed since the summary was written
        # the XLA programs of the groups and of ``ahead`` (cluster.bootstrap.compile_stats), summed
        self.compiles: dict[str, float] | None = None

    # -- checking what the store has ---------------------------------------------------------

    def verify_store(self):
        """Forget what does not read back intact, and record folds whose state was written.

        Returns (the store's records as they now are, how many were forgotten)."""
        records, damaged = self.store.verified_records(repair=True)
        return records, len(damaged)

    # -- tasks -------------------------------------------------------------------------------

    def tile_task(self, task, ahead=False):
        """The ``TileTask`` of ``task``; ``ahead``: for ``prepare``, without the sums it
        continues from (its slot is one no dispatch will write: the member loads the code that
        writes slots with it)."""
        spec = self.spec
        _, _, ty, tx = task.key
        start, out = None, self.folds.slot(task)
        if out is None and task.continues and not ahead:
            tail = self.store.read_tail(task.line)
            start = np.zeros((self.th, self.tw, tail.shape[-1]), np.float32)
            start[:tail.shape[0], :tail.shape[1]] = tail
            start = split_tail(start)
        return TileTask(scene=scene_ref(spec, task.frame, self.store.scene_files), frame=task.frame, seed=spec.seed, spp=spec.spp,
                        tile_y=ty * spec.tile, tile_x=tx * spec.tile, tile_h=self.th, tile_w=self.tw,
                        first_pass=task.first_pass, n_passes=task.n_passes, pass_size=spec.pass_size, start=start,
                        out=out, channels=self.store.channels, chunk_passes=spec.chunk_passes,
                        job_samples=job_samples(spec, self.store))

    def units(self, task):
        """Samples x pixels the task adds, for progress."""
        p = self.spec.pass_size
        first = task.first_pass * p
        samples = max(0, min(self.spec.spp, first + task.n_passes * p) - first)
        return samples * self.store.tile_pixels(*task.key[2:])

    # -- the loop ----------------------------------------------------------------------------

    def run(self):
        spec, store, progress = self.spec, self.store, self.progress
        store.clear_cancel()  # a cancel was meant for an earlier run
        records, damaged = self.verify_store()
        if damaged:
            self.log(f"{damaged} stored tile(s) did not read back intact: rendering them again")
        self.shot = Shot(spec, store)  # a noise target's decisions (farm.adaptive)
        spp = self.shot.tile_spp(records)
        summary.write_all(store, spec, records, spp)
        job = plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels, spp)
        progress.start(job, spec.n_frames)
        if not job.frames:
            progress.phase("finishing")
            progress.finish()
            return job
        groups = []
        try:
            root = shared_root(store)
            if self.ahead is not None and root:
                self.folds = Commits(store, records, spec.spp, root)
                self.queue = _Queue(job.tasks())
                groups = self.render_ahead(self.ahead)
            else:
                if self.ahead is not None:  # (a store the child cannot write to: Ray first, as without it)
                    ahead, self.ahead = self.ahead, None
                    ahead.done()
                    ahead.ray()
                progress.phase("forming groups")
                groups = self.start_groups()
                self.folds = Commits(store, records, spec.spp, root) if root else Folds(store, records, spec.spp)
                self.queue = _Queue(job.tasks())
            if not self.rendered_ahead:
                progress.phase("compiling")  # until the first task comes back: the groups' first tasks compile
            if self.compiler is not None:
                self.prepare(groups)
            if self.ready is not None:
                self.ready()
            while self.queue or self.inflight or self.parked or self.ahead_out:
                if self.seat is not None:
                    self.follow_share(groups)
                self.dispatch(groups)
                ready, stepped = [], self.ahead is not None
                if stepped:  # the child, until a group's first answer
                    self.step_ahead(0 if self.inflight else 0.05,
                                    more=all(t is None for t in self.answered.values()))
                if not self.inflight:
                    if not stepped:  # (else its answer may have let a parked task go: dispatched next)
                        self.wait_for_groups()
                else:
                    ready, rest = ray.wait(list(self.inflight), num_returns=1, timeout=0.02 if self.ahead_out else 1.0)
                    if ready and rest:  # every answer that is in: their commits go in one batch
                        ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
                for ref in ready:
                    d = self.inflight.pop(ref, None)
                    if d is not None:  # (None: let go with its group, which failed meanwhile)
                        self.collect(d, groups)
                self.give_up_on_stragglers(groups)
                self.commit()
                if progress.note() and store.cancel_requested():
                    raise Cancelled(f"cancelled; `farm resume {store.url}` goes on from here")
            progress.phase("finishing")
            if self.rendered_ahead:  # (in the store's log: how the run's first tasks went)
                store.log(f"{self.rendered_ahead} task(s) rendered by the driver's preflight process"
                          + (" while Ray started and the groups formed" if groups else ""))
            if self.by_host and self.seat is not None:  # (in the log: where a cluster's job ran)
                self.log(f"tasks by host: {', '.join(f'{h.name}: {n}' for h, n in self.by_host.most_common())}")
            self.compiles = _sum_stats([*(group.compile_stats() for group in groups), self.ahead_compiles])
            self.teardown(groups)
            progress.finish()
            return job
        except (JobFailed, Cancelled, KeyboardInterrupt) as e:
            states = ((SceneChangedError, "stopped"), (JobFailed, "failed"), (Cancelled, "cancelled"))
            progress.fail(e, next((state for kind, state in states if isinstance(e, kind)), signals.state()))
            raise
        finally:
            self.stop_ahead(now=True)
            self.teardown(groups)
            if self.folds is not None:
                self.folds.close()

    def render_ahead(self, ahead):
        """Render the queue's first tasks with ``ahead`` (from a thread of its own) while this
        thread waits for Ray and forms the groups, as it would without it (a Ctrl-C or a stop
        is heard here, and Ray is called from here alone); returns the groups, the task the
        child renders then still in its hands (``step_ahead`` goes on in the run's loop). Each
        answer is committed at once, as a group's; the phases go on as they would, but for the
        first task rendered, which makes it ``rendering``."""
        lock, stop = threading.Lock(), threading.Event()  # the lock: the store's notes and log, one writer at a time
        # Set as the renderer ends, and waited for instead of a join: CPython 3.12 marks a thread
        # dead whose join a signal interrupted (the stop's KeyboardInterrupt) while it still runs
        # (python/cpython#90882), and the run's stop then raced the renderer for the child.
        finished = threading.Event()
        failed: list[BaseException] = []

        def render():
            try:
                while not stop.is_set() and self.ahead is not None:
                    if self.ahead_out is None:
                        compiled = ahead.compiled(0.1)
                        if compiled is None:
                            continue
                        if not compiled:
                            with lock:
                                self.stop_ahead()
                            break
                    self.step_ahead(0.05, more=True, guard=lock)
                    if self.ahead_out is None:  # (none may go until a task in flight is committed)
                        time.sleep(0.05)
                    with lock:
                        if self.progress.note() and self.store.cancel_requested():
                            raise Cancelled(f"cancelled; `farm resume {self.store.url}` goes on from here")
            except BaseException as e:  # (raised in the run's thread once the groups are formed)
                failed.append(e)
            finally:
                finished.set()

        def log(line):
            with lock:
                self.log(line)

        renderer = threading.Thread(target=render, name="render-ahead", daemon=True)
        renderer.start()
        groups, no_ray = [], None
        try:
            try:
                ahead.ray()
            except Exception as e:  # noqa: BLE001  (Ray's start failed: it raises here)
                # One standing in for the job's group needs Ray only to fall back on: a job that
                # it can finish alone is not failed for Ray's sake (its error stands if it cannot).
                if not ahead.stands_in:
                    raise
                no_ray = e
                log(f"{first_line(e)}: the driver's preflight process renders the job alone, with nothing to "
                    f"fall back on")
            if ahead.stands_in:
                with lock:  # Ray is up (or failed): the run waits for the child's program and first task
                    if not self.rendered_ahead:
                        self.progress.phase("compiling")
                while not finished.wait(0.1):  # (with a timeout: a signal is heard meanwhile)
                    pass
                if failed:
                    raise failed[0]
                if not (self.queue or self.parked):
                    return groups
                if no_ray is not None:
                    raise no_ray
                self.log("the driver's preflight process stopped with tasks left: the job's group forms")
            with lock:
                if not self.rendered_ahead:
                    self.progress.phase("forming groups")
            groups = self.start_groups(log=log)
            stop.set()
            finished.wait()
            if failed:
                raise failed[0]
        except BaseException:
            stop.set()
            finished.wait()
            self.stop_ahead(now=True)
            for group in groups:
                group.teardown()
            raise
        return groups

    def step_ahead(self, wait_s, more, guard=None):
        """The child's answer taken in if it has come (waiting up to ``wait_s``) and committed,
        and, ``more``, the next queued task that may go given to it; else, with nothing in its
        hands, it is done. One past its task's time limit is stopped. ``guard``: held while the
        store is written to (``render_ahead``'s thread)."""
        ahead = self.ahead
        if ahead is None:
            return
        ended, answer = False, None
        if self.ahead_out is not None:
            ended, answer = ahead.answer(wait_s)
            # Its first task loads the scene and the program, as a group's first does (one standing
            # in for the group renders the whole job: the rest are timed as a group's are).
            if not ended and time.monotonic() - self.ahead_out[2] > self.clock.limit(self.rendered_ahead == 0):
                ahead.stop()
                ended = True
            if not ended:
                return
        with guard or contextlib.nullcontext():
            if ended:
                task, tile, sent = self.ahead_out
                self.ahead_out = None
                if answer is None:  # whatever it wrote never counts: the task goes back as it was
                    self.folds.drop(tile.out)
                    self.queue.appendleft(task)
                    self.stop_ahead()
                    return
                self.note_renderer(answer.get("renderer"))
                self.ahead_compiles = answer.get("compiles") or self.ahead_compiles
                self.folds.accept(task, tile.out, answer["crc"])
                self.clock.add(time.monotonic() - sent)  # (as a group's task time counts)
                self.rendered_ahead += 1
                self.progress.done(self.units(task), task.key[0])
                self.commit()  # (the tile's next chunk may go then)
            task = self.next_task(None) if more else None
            if task is None:
                if not more or not (self.queue or self.parked):
                    self.stop_ahead()
                return
            tile = self.tile_task(task)
            if not ahead.send(tile):
                self.folds.drop(tile.out)
                self.queue.appendleft(task)
                self.stop_ahead()
                return
            self.ahead_out = (task, tile, time.monotonic())

    def stop_ahead(self, now=False):
        """The child gets no more tasks (``now``: stopped, its task in hand dropped, as the run
        ends)."""
        if self.ahead is None:
            return
        if now and self.ahead_out is not None:
            self.ahead.stop()
            self.folds.drop(self.ahead_out[1].out)
            self.ahead_out = None
        if self.ahead_out is None:
            self.ahead.done()
            self.ahead = None

    def teardown(self, groups):
        for group in groups:
            group.teardown()
        groups.clear()
        if self.former is not None:  # groups still forming: torn down once formed
            for future, group in self.forming.items():
                future.result()
                group.teardown()
            self.forming.clear()
            self.former.shutdown()
            self.former = None
        if self.seat is not None:
            self.seat.leave()

    # -- the job's share of a shared cluster (farm.seat) ---------------------------------------

    def follow_share(self, groups):
        """Bring the job's groups to its share in the queue: those formed since join ``groups``,
        those above it are let go (``draining``), those below it formed where resources are free."""
        for future in [f for f in self.forming if f.done()]:
            group, error = self.forming.pop(future), future.result()
            if error is None:
                groups.append(group)
                self.answered[group] = None
            else:  # (tried again when the share and the resources say so)
                self.log(f"{group.name} could not form: {error}")
                self.spare.append((group.name, group.shape))
        for group in [g for g in self.draining if self.load[g] == 0]:
            self.draining.discard(group)
            group.teardown()
            groups.remove(group)
            self.spare.append((group.name, group.shape))
        self.seat.wants = len(groups) + len(self.forming) + len(self.spare)
        grant = self.seat.poll(len(groups) + len(self.forming))
        if grant is None:  # not heard yet, or the queue is away: keep what is held
            return
        active = [g for g in groups if g not in self.draining]
        over = len(active) + len(self.forming) - grant.share
        for group in active[len(active) - min(over, len(active)):] if over > 0 else ():
            self.draining.add(group)
            why = "the job is paused" if self.seat.was_paused else "a job of higher or equal priority needs it"
            self.log(f"queue: letting {group.name} go at its task boundary ({why}; the job's share is "
                     f"{grant.share} group(s))")
        while over < 0 and self.draining:  # let go, then wanted again: kept
            self.draining.pop()
            over += 1
        for name, shape in self.spare[:min(-over, self.seat.room(grant.free))] if over < 0 else ():
            self.spare.remove((name, shape))
            self.form(name, shape)

    def form(self, name, shape):
        """Form the group ``name`` of ``shape`` in the background (``follow_share`` takes it in)."""
        if self.former is None:
            self.former = ThreadPoolExecutor(max(1, len(self.shapes)), thread_name_prefix="form")
        group = self.make_group(shape, name=name, init_timeout_s=self.init_timeout_s)
        self.forming[self.former.submit(_start_group, group)] = group
        self.log(f"queue: forming {name} (the job's share grew)")

    def wait_for_groups(self):
        """Nothing in flight: with a seat, wait for groups the queue will give; else the job failed."""
        if self.seat is None or not (self.spare or self.forming or self.draining):
            raise JobFailed("no worker group is left to render on")
        time.sleep(0.2)

    def dispatch(self, groups):
        """Fill every group up to ``_DEPTH`` dispatches: the next task is already queued in the
        members when one finishes, so groups never wait on the driver."""
        # A retry goes to a group on a host it has not failed on, where there is one.
        where = {g: _hosts(g) for g in groups} if self.failures.hosts_of else None
        for group in groups:
            while self.load[group] < _DEPTH and group not in self.draining:
                task = self.next_task(group, where)
                if task is None:
                    break
                self.note_renderer(getattr(group, "renderer", None))  # (cluster.simulated's groups have none)
                tile = self.tile_task(task)
                d = Dispatch(task, group, group.submit(tile), group.generation, time.monotonic(), _hosts(group),
                             tile.out)
                self.live[task.key] = d
                self.inflight[group.ready_ref(d.handle)] = d
                self.load[group] += 1

    def prepare(self, groups):
        """While the driver waits for the work unit's compile (``compiler``), each group's members
        load the scene of the task it will be sent first and wait there for the program, instead
        of doing both once the task comes (a cold job's first frame 0.7 s sooner on 2 cores)."""
        first = self.queue.ahead(_DEPTH * len(groups))
        if not first:
            return
        for k, group in enumerate(groups):
            group.prepare(self.tile_task(first[min(k * _DEPTH, len(first) - 1)], ahead=True), self.compiler)

    def note_renderer(self, renderer):
        """Before a task's samples count: the store notes the software that rendered them
        (``renderer``, None: unknown), the first time it is seen (said once where it differs
        from what rendered the store's samples so far)."""
        warning = None if renderer is None else self.store.note_renderer(renderer)  # (noted: nothing read)
        if warning:
            self.log(f"warning: {warning}")

    def next_task(self, group, where=None):
        """The first queued task within its tile's window that may go to ``group`` (``where``:
        every group's hosts, when some task failed: ``Failures.fits``); those past their window
        wait (``parked``)."""
        fits = ((lambda task: self.failures.fits(task.key, where[group], where.values()))
                if where is not None else lambda task: True)
        while (task := self.queue.popleft(fits)) is not None:
            if self.folds.may_start(task):
                return task
            self.parked[task.line].append(task)
        return None

    def collect(self, d, groups):
        """A finished dispatch: a result folded in, a failure retried (its group rebuilt)."""
        self.load[d.group] -= 1
        # Only the task's live dispatch counts, failed or not. A whole answer counts even from
        # a group rebuilt since (the work unit is deterministic); a failure from one sends the
        # task elsewhere like any other.
        live = self.live.get(d.task.key) is d
        try:
            answer = d.group.result(d.handle)
        except GroupFailed as e:
            if d.group in groups and d.generation == d.group.generation:
                self.group_failed(d, str(e), groups)
            elif live:  # of a group failed and rebuilt since: sent again, not counted twice
                del self.live[d.task.key]
                self.queue.appendleft(d.task)
            return
        except ray.exceptions.RayTaskError as e:
            if isinstance(getattr(e, "cause", None), SceneChanged):
                raise SceneChangedError(self.store, e.cause) from None
            fault = faults.named(e, self.store.url)  # a member's write to a full or read-only store
            if fault is not None:
                raise fault from None
            message, deterministic = _remote_error(e)
            if deterministic:
                raise JobFailed(message) from None
            if live:
                self.retry(d, message, groups)
            return
        now = time.monotonic()
        began = self.began(d)
        self.answered[d.group] = now
        if not live:
            self.fenced += 1
            if d.slot is not None:
                self.folds.drop(d.slot)
            return  # fenced: this dispatch was given up on
        del self.live[d.task.key]
        self.by_host.update(d.hosts)
        self.slowest = max(self.slowest, now - d.started)
        self.clock.add(now - began)
        if d.slot is not None:
            self.folds.accept(d.task, d.slot, answer.receipt)
        else:
            self.folded.add(d.task.line[0])  # (its result may be stored now: the summary's row goes after)
            if self.folds.accept(d.task, answer.value, answer.weight):
                self.unpark(d.task.line)
        self.progress.done(self.units(d.task), d.task.key[0])

    def commit(self):
        """Commit the answers collected (workers wrote their data); their tiles' next chunks may
        go; then the summary's rows of the frames that changed (``farm.summary``: after their records)."""
        for line in self.folds.flush():
            self.folded.add(line[0])
            self.unpark(line)
        if self.folded:
            summary.update(self.store, self.spec, self.folds.records, self.folded)
            self.folded.clear()

    def unpark(self, line):
        """The tile at ``line`` has folded a chunk: its parked chunks may go, and a noise target
        may ask for more (decided from the committed record alone)."""
        more = self.shot.more(line, TileRecord.of(self.folds.records[line]))
        self.progress.grow(sum(self.units(t) for t in more), [t.key[0] for t in more])
        self.queue.extendleft(reversed(self.parked.pop(line, []) + more))

    def began(self, d):
        """When ``d`` reached the head of its group's line (a group renders one task at a time)."""
        last = self.answered.get(d.group)
        return d.started if last is None else max(d.started, last)

    def give_up_on_stragglers(self, groups):
        """A task past its timeout fails its group (``group_failed``): it is sent elsewhere, and
        the group rebuilt from new processes, so that a hung member holds nothing."""
        now, heads = time.monotonic(), {}
        for d in self.inflight.values():  # in the order sent: each group's first is the one it renders
            heads.setdefault(d.group, d)
        limits = {first: self.clock.limit(first) for first in (False, True)}  # (one median a look)
        for group, d in heads.items():
            limit = limits[self.answered.get(group) is None]
            ran = now - self.began(d)
            if ran > limit and group in groups and d.generation == group.generation:
                self.group_failed(d, f"timed out after {limit:.0f} s", groups)

    def group_failed(self, d, reason, groups):
        """``d``'s group failed (a member lost, a timeout): its task is retried, its other tasks
        go back to the queue uncounted, and it is rebuilt (unless its host was left out meanwhile)."""
        group = d.group
        reason = reason.removeprefix(f"{group.name}: ")
        self.log(f"{group.name} on {_names(d.hosts)}: task {d.label} failed: {reason}; "
                 f"rebuilding it and sending its tasks elsewhere")
        self.let_go(group, keep=d)
        if self.live.get(d.task.key) is d:
            self.retry(d, reason, groups)
        if group in groups and group.generation == d.generation:  # (not re-formed as its host was left out)
            self.rebuild(group, groups)

    def let_go(self, group, keep=None):
        """Forget ``group``'s dispatches in flight (but ``keep``): whatever they answer or write
        never counts (fenced); their tasks go back to the queue as they were."""
        for ref, d in list(self.inflight.items()):
            if d.group is not group:
                continue
            del self.inflight[ref]
            self.load[group] -= 1
            self.fenced += 1
            if d.slot is not None:
                self.folds.drop(d.slot)
            if d is not keep and self.live.get(d.task.key) is d:
                del self.live[d.task.key]
                self.queue.appendleft(d.task)

    def retry(self, d, message, groups):
        """Queue ``d``'s task again, first, unless it has failed ``max_attempts`` times; the
        failure counts against its group's hosts, which may leave them out."""
        task = d.task
        self.live.pop(task.key, None)
        where = f"{d.group.name} on {_names(d.hosts)}"
        left_out = self.failures.fail(task.key, d.label, task.frame, message, where, d.hosts)
        tries = self.failures.retries(task.key)
        if tries < self.max_attempts:
            self.log(f"retry {tries} of task {d.label}: {message} ({where})")
            self.queue.appendleft(task)
        if left_out:  # (before a task's last error: a host left out is the likelier cause)
            self.leave_out(left_out, groups)
        if tries >= self.max_attempts:
            raise JobFailed(f"task {d.label} failed {tries} times; last error: {message} ({where})")

    def leave_out(self, hosts, groups):
        """Leave ``hosts`` out of the run: no group is placed there again, and those there are
        re-formed elsewhere where the cluster has another node, else dropped."""
        for host in hosts:
            why = self.failures.left_out[host.node]
            self.log(f"{host.name} is left out of the job: its groups failed {why.failures} task(s) "
                     f"(last: {why.reason})")
        avoid = frozenset(self.failures.left_out)
        for group in list(groups):
            group.avoid = avoid
            if not avoid.intersection(h.node for h in _hosts(group)):
                continue
            self.let_go(group)
            if not (_room_elsewhere(group, avoid) and self.rebuild(group, groups)):
                if group in groups:
                    group.teardown()
                    groups.remove(group)
        if not groups:
            raise NoHostLeft(f"no host is left to render on: {self.failures.why_none_left()}; "
                             f"`farm resume {self.store.url}` goes on from here")

    def start_groups(self, log=None):
        """Form the groups side by side: each waits on its own members (processes, JAX,
        ``jax.distributed``), so a job of many groups starts as fast as one. With a seat, only
        its share of them (maybe none: the job waits its turn); the others wait in ``spare``.
        ``log``: what says how it went (default the run's)."""
        log = log or self.log
        named = [(f"group-{i}", shape) for i, shape in enumerate(self.shapes)]
        if self.seat is not None:
            grant = self.seat.join()
            if grant is not None:
                n = min(grant.share, self.seat.room(grant.free))
                named, self.spare = named[:n], named[n:]
                if not named:
                    why = ("the job is paused" if self.seat.was_paused else
                           "jobs of higher or equal priority hold the groups" if grant.share == 0 else
                           "the jobs holding its groups let them go at their task boundaries")
                    log(f"waiting in the cluster's queue: {why}")
                    return []
        candidates = [self.make_group(shape, name=name, init_timeout_s=self.init_timeout_s) for name, shape in named]
        outcomes = _start_all(candidates)
        groups = [g for g, error in zip(candidates, outcomes) if error is None]
        errors = [error for error in outcomes if error is not None]
        if not groups and self.seat is None:
            raise JobFailed(f"no worker group could start: {errors[0]}")
        for group, error in zip(candidates, outcomes):
            if error is not None:
                log(f"going on without a group: {error}")
                if self.seat is not None:  # (formed later, when the queue says so)
                    self.spare.append((group.name, group.shape))
        if not groups and not self.spare:
            raise JobFailed(f"no worker group could start: {errors[0]}")
        if self.seat is not None:  # (in the log: where a cluster's job renders)
            log(f"{len(groups)} of {len(self.shapes)} group(s) formed: "
                     f"{', '.join(f'{g.name} on {_names(_hosts(g))}' for g in groups)}")
        return groups

    def rebuild(self, group, groups):
        """Rebuild a failed group, or drop it; returns whether it is back (one let go is not)."""
        self.answered[group] = None  # its next task compiles (or loads) the program again
        if group in self.draining:  # (let go anyway: formed again when the queue says so)
            self.draining.discard(group)
            group.teardown()
            groups.remove(group)
            self.spare.append((group.name, group.shape))
            return False
        if group.rebuilds < self.max_rebuilds:
            try:
                group.rebuild()
                return True
            except GroupError as e:
                self.log(f"could not rebuild {group.name}: {e}")
        group.teardown()
        groups.remove(group)
        return False


def start_groups(shapes: Sequence[GroupShape], make_group: Callable[..., WorkerGroup], init_timeout_s: float,
                 log: Callable[[str], object]) -> list[WorkerGroup]:
    """Form a group of each of ``shapes`` side by side, outside any queue (``farm optimize``'s):
    those that cannot form are said to ``log`` and left out; none formed is a ``JobFailed``."""
    candidates = [make_group(shape, name=f"group-{i}", init_timeout_s=init_timeout_s) for i, shape in enumerate(shapes)]
    outcomes = _start_all(candidates)
    groups = [g for g, error in zip(candidates, outcomes) if error is None]
    errors = [error for error in outcomes if error is not None]
    if not groups:
        raise JobFailed(f"no worker group could start: {errors[0]}")
    for message in errors:
        log(f"going on without a group: {message}")
    return groups


def _start_all(candidates: Sequence[WorkerGroup]) -> list[str | None]:
    """Start the groups side by side: each waits on its own members (processes, JAX,
    ``jax.distributed``), so a job of many groups starts as fast as one. For each, None or why it
    could not start."""
    if len(candidates) == 1:
        return [_start_group(candidates[0])]
    with ThreadPoolExecutor(len(candidates)) as pool:
        return list(pool.map(_start_group, candidates))


def _start_group(group: WorkerGroup) -> str | None:
    """Start ``group``; None, or why it could not start."""
    try:
        group.start()
        return None
    except GroupError as e:
        return str(e)


def _hosts(group: WorkerGroup) -> tuple[Host, ...]:
    """The hosts of ``group``'s members (those Ray does not name left out)."""
    return tuple(h for h in (Host.of(node, ip) for node, ip in group.nodes()) if h is not None)


def _names(hosts: Sequence[Host]) -> str:
    return ", ".join(h.name for h in hosts) or "an unknown host"


def _room_elsewhere(group: WorkerGroup, avoid: frozenset[str]) -> bool:
    """Whether the cluster has live nodes outside ``avoid`` enough for ``group``'s members, each
    with its bundle's resources (free or not: Ray waits for them, up to the group's init timeout)."""
    bundle = group.shape.bundle()
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("NodeID") not in avoid
             and all(n.get("Resources", {}).get(r, 0) >= v for r, v in bundle.items())]
    return len(nodes) >= group.shape.hosts


def _sum_stats(stats):
    stats = [s for s in stats if s]
    return {k: sum(s[k] for s in stats) for k in stats[0]} if stats else None


def run_job(spec: JobSpec, store: FrameStore, shapes: Sequence[GroupShape], max_attempts: int = 3,
            max_rebuilds: int = 3, show_progress: bool = True, log: Callable[[str], object] = print,
            init_timeout_s: float = 60, task_timeout_s: float | None = None,
            make_group: Callable[..., WorkerGroup] = WorkerGroup, progress: RunProgress | None = None,
            ready: Callable[[], object] | None = None, seat: Seat | None = None, compiler: int | None = None,
            ahead: RenderAhead | None = None) -> Plan:
    """Render what the store lacks of ``spec`` on groups of ``shapes`` (Ray must be initialized).

    ``init_timeout_s`` bounds forming (or re-forming) a group; one that cannot form is dropped.
    ``task_timeout_s`` (default: the job's ``groups.task_timeout``, else ``farm.failures``'s
    default) is when a running task is given up on, its group rebuilt and the task sent elsewhere. ``make_group(shape, name=, init_timeout_s=)`` makes a group (``WorkerGroup``; the
    simulated groups of ``cluster.simulated`` for benchmarks and fault tests). ``ready()`` is waited for once the
    groups have formed, before the first task goes out (the driver's compilation ahead of them);
    ``compiler``: the pid of the process on this host making that compilation, whose program the
    members of one-host groups here wait for while they load their first scene (``prepare``).
    ``seat``: the job's place in a shared cluster's queue (``farm.seat``; joined and left here),
    which decides how many of the groups it holds at a time. ``ahead``: renders the first tasks
    while Ray starts (it need not be up then) and the groups form (``RenderAhead``). Returns the job's plan; the run's figures are on the plan's ``stats`` (``compile``:
    the groups' XLA programs, how many came from the persistent compilation cache).
    """
    own = progress is None
    progress = RunProgress(store, show_progress) if progress is None else progress
    runner = _JobRun(spec, store, shapes, max_attempts, max_rebuilds, progress, log, init_timeout_s,
                     task_timeout_s, make_group, ready, seat, compiler, ahead)
    try:
        plan = runner.run()
    finally:
        if own:
            progress.close()
    if runner.compiles:
        c = runner.compiles
        whole = f"; {c['whole']} work unit(s) loaded compiled, untraced" if c.get("whole") else ""
        log(f"XLA: {c['programs']} program(s), {c['compiled']} compiled and {c['cache_hits']} loaded from "
            f"the compilation cache, in {c['seconds']:.1f} s{whole}")
    return dataclasses.replace(plan, stats={"fenced": runner.fenced, "slowest_s": runner.slowest,
                                            "compile": runner.compiles, "failures": runner.failures.summary(),
                                            "ahead": runner.rendered_ahead})
