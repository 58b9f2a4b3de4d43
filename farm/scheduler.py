"""The driver loop: keep every worker group busy, retry what fails, fold results into the store.

A queue, not lockstep: each group takes the next task as soon as it hands one back. Where the
workers can reach the store (a local path), each writes its task's result under a key unique
to its dispatch and the driver commits records only (``farm.results``: a tile's next chunk is
sent once its last one is committed); elsewhere (an fsspec URL such as ``memory://``) results
come back to the driver, which folds each tile's chunks in chunk order (``farm.folding``).
Every sending of a task is one ``Dispatch`` record; a result counts only if its dispatch is
still its task's live one, so a task that was given up on and sent elsewhere can never be
written twice when its first group comes back (fencing). A lost member fails its group's task
and the group is rebuilt from new processes; a task that fails ``max_attempts`` times fails the
job with its own error.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np
import ray

from cluster.group import GroupError, GroupFailed, GroupShape, WorkerGroup
from cluster.task import TileTask
from farm import faults, signals, summary
from farm.adaptive import Shot
from farm.errors import FarmError
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
    from farm.spec import JobSpec
    from farm.store import FrameStore

__all__ = ["run_job", "JobFailed", "Cancelled", "SceneChangedError", "Dispatch"]


class JobFailed(FarmError):
    exit_code = 4


class Cancelled(FarmError):
    exit_code = 5


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


@dataclasses.dataclass(eq=False)
class Dispatch:
    """One sending of a task to a group; its answer counts only while it is its task's live one."""

    task: Task
    group: WorkerGroup
    handle: list[ray.ObjectRef]  # the group's handle of the render (``WorkerGroup.submit``)
    generation: int     # the group's generation when sent: an answer of an older one is stale
    started: float      # time.monotonic() when sent
    slot: Slot | None = None  # where its member writes the result (farm.results.Slot), or None: sent back


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

    def popleft(self) -> Task | None:
        return self.front.popleft() if self else None

    def appendleft(self, task: Task) -> None:
        self.front.appendleft(task)

    def extendleft(self, tasks: Iterable[Task]) -> None:
        self.front.extendleft(tasks)


class _JobRun:
    """One run of ``run_job``: the groups, the queue of a plan's tasks, retries and writes to the store."""

    def __init__(self, spec: JobSpec, store: FrameStore, shapes: Sequence[GroupShape], max_attempts: int,
                 max_rebuilds: int, progress: RunProgress, log: Callable[[str], object], init_timeout_s: float,
                 task_timeout_s: float | None, make_group: Callable[..., WorkerGroup] = WorkerGroup,
                 ready: Callable[[], object] | None = None):
        self.spec, self.store, self.shapes, self.make_group = spec, store, shapes, make_group
        self.ready = ready  # waited for before the first dispatch
        self.init_timeout_s, self.task_timeout_s = init_timeout_s, task_timeout_s
        self.slowest = 0.0  # seconds of the slowest task that counted
        self.fenced = 0     # answers dropped because their dispatch had been given up on
        self.max_attempts, self.max_rebuilds = max_attempts, max_rebuilds
        self.progress, self.log = progress, log
        self.th, self.tw = tile_size(spec, store)
        self.queue = _Queue(())  # tasks to send, first first
        # tile -> tasks past its window, in chunk order
        self.parked: collections.defaultdict[tuple[int, int, int], list[Task]] = collections.defaultdict(list)
        self.attempts: collections.Counter[tuple[int, int, int, int]] = collections.Counter()  # task key -> failed dispatches
        self.live: dict[tuple[int, int, int, int], Dispatch] = {}  # task key -> its live Dispatch
        self.inflight: dict[ray.ObjectRef, Dispatch] = {}    # ray ref -> Dispatch not yet answered
        self.load: collections.Counter[WorkerGroup] = collections.Counter()  # group -> dispatches in flight
        self.folds: Commits | Folds | None = None  # Commits (workers write), or Folds (results come back)
        self.folded: set[int] = set()  # frame indexes whose records changed since the summary was written
        self.compiles: dict[str, float] | None = None  # the groups' XLA programs (cluster.bootstrap.compile_stats), summed

    # -- checking what the store has ---------------------------------------------------------

    def verify_store(self):
        """Forget what does not read back intact, and record folds whose state was written.

        Returns (the store's records as they now are, how many were forgotten)."""
        records, damaged = self.store.verified_records(repair=True)
        return records, len(damaged)

    # -- tasks -------------------------------------------------------------------------------

    def tile_task(self, task):
        spec = self.spec
        _, _, ty, tx = task.key
        start, out = None, self.folds.slot(task)
        if out is None and task.continues:
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
        summary.write_all(store, spec, records)
        self.shot = Shot(spec, store)  # a noise target's decisions (farm.adaptive)
        job = plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels, self.shot.tile_spp(records))
        progress.start(job, spec.n_frames)
        if not job.frames:
            progress.phase("finishing")
            progress.finish()
            return job
        groups = []
        try:
            progress.phase("forming groups")
            groups = self.start_groups()
            root = shared_root(store)
            self.folds = Commits(store, records, spec.spp, root) if root else Folds(store, records, spec.spp)
            self.queue = _Queue(job.tasks())
            progress.phase("compiling")  # until the first task comes back: the groups' first tasks compile
            if self.ready is not None:
                self.ready()
            while self.queue or self.inflight or self.parked:
                self.dispatch(groups)
                if not self.inflight:
                    raise JobFailed("no worker group is left to render on")
                ready, rest = ray.wait(list(self.inflight), num_returns=1, timeout=1.0)
                if ready and rest:  # every answer that is in: their commits go in one batch
                    ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
                self.give_up_on_stragglers()
                for ref in ready:
                    self.collect(self.inflight.pop(ref), groups)
                self.commit()
                if progress.note() and store.cancel_requested():
                    raise Cancelled(f"cancelled; `farm resume {store.url}` goes on from here")
            progress.phase("finishing")
            self.compiles = _sum_stats(group.compile_stats() for group in groups)
            self.teardown(groups)
            progress.finish()
            return job
        except (JobFailed, Cancelled, KeyboardInterrupt) as e:
            states = {JobFailed: "failed", Cancelled: "cancelled", SceneChangedError: "stopped"}
            progress.fail(e, states.get(type(e), signals.state()))
            raise
        finally:
            self.teardown(groups)
            if self.folds is not None:
                self.folds.close()

    def teardown(self, groups):
        for group in groups:
            group.teardown()
        groups.clear()

    def dispatch(self, groups):
        """Fill every group up to ``_DEPTH`` dispatches: the next task is already queued in the
        members when one finishes, so groups never wait on the driver."""
        for group in groups:
            while self.load[group] < _DEPTH:
                task = self.next_task()
                if task is None:
                    return
                tile = self.tile_task(task)
                d = Dispatch(task, group, group.submit(tile), group.generation, time.monotonic(), tile.out)
                self.live[task.key] = d
                self.inflight[group.ready_ref(d.handle)] = d
                self.load[group] += 1

    def next_task(self):
        """The first queued task within its tile's window; those past it wait (``parked``)."""
        while self.queue:
            task = self.queue.popleft()
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
            if live:
                self.retry(d.task, str(e))
            # Its other dispatch fails too: rebuild once per failure (generation).
            if d.group in groups and d.generation == d.group.generation:
                self.log(f"{e}; rebuilding it and sending its tasks elsewhere")
                self.rebuild(d.group, groups)
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
                self.retry(d.task, message)
            return
        if not live:
            self.fenced += 1
            if d.slot is not None:
                self.folds.drop(d.slot)
            return  # fenced: this dispatch was given up on
        del self.live[d.task.key]
        self.slowest = max(self.slowest, time.monotonic() - d.started)
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

    def task_timeout(self):
        """How long a dispatch may run before it is given up on: the fixed timeout, or ten times
        the slowest task so far (at least 10 minutes: the first task of a group compiles)."""
        if self.task_timeout_s is not None:
            return self.task_timeout_s
        return max(600.0, 10 * self.slowest)

    def give_up_on_stragglers(self):
        """Send tasks that run too long elsewhere. Their group stays busy until it answers;
        that answer is then fenced off (its dispatch is no longer the task's live one)."""
        now, limit = time.monotonic(), self.task_timeout()
        for d in list(self.inflight.values()):
            if self.live.get(d.task.key) is d and now - d.started > limit:
                task = d.task
                self.log(f"{d.group.name}: task frame {task.frame} chunk {task.chunk} tile {task.key[2:]} "
                         f"ran {now - d.started:.0f} s; sending it elsewhere")
                self.retry(task, f"timed out after {limit:.0f} s")

    def retry(self, task, message):
        """Queue ``task`` again, first, unless it has failed ``max_attempts`` times."""
        self.live.pop(task.key, None)
        self.attempts[task.key] += 1
        if self.attempts[task.key] >= self.max_attempts:
            raise JobFailed(f"task frame {task.frame} chunk {task.chunk} tile {task.key[2:]} failed "
                            f"{self.attempts[task.key]} times; last error: {message}")
        self.queue.appendleft(task)

    def start_groups(self):
        """Form the groups side by side: each waits on its own members (processes, JAX,
        ``jax.distributed``), so a job of many groups starts as fast as one."""
        def start(group):
            try:
                group.start()
                return None
            except GroupError as e:
                return str(e)

        candidates = [self.make_group(shape, name=f"group-{i}", init_timeout_s=self.init_timeout_s)
                      for i, shape in enumerate(self.shapes)]
        if len(candidates) == 1:
            outcomes = [start(candidates[0])]
        else:
            with ThreadPoolExecutor(len(candidates)) as pool:
                outcomes = list(pool.map(start, candidates))
        groups = [g for g, error in zip(candidates, outcomes) if error is None]
        errors = [error for error in outcomes if error is not None]
        if not groups:
            raise JobFailed(f"no worker group could start: {errors[0]}")
        for message in errors:
            self.log(f"going on without a group: {message}")
        return groups

    def rebuild(self, group, groups):
        """Rebuild a failed group, or drop it; returns whether it is back."""
        if group.rebuilds < self.max_rebuilds:
            try:
                group.rebuild()
                return True
            except GroupError as e:
                self.log(f"could not rebuild {group.name}: {e}")
        group.teardown()
        groups.remove(group)
        return False


def _sum_stats(stats):
    stats = [s for s in stats if s]
    return {k: sum(s[k] for s in stats) for k in stats[0]} if stats else None


def run_job(spec: JobSpec, store: FrameStore, shapes: Sequence[GroupShape], max_attempts: int = 3,
            max_rebuilds: int = 3, show_progress: bool = True, log: Callable[[str], object] = print,
            init_timeout_s: float = 60, task_timeout_s: float | None = None,
            make_group: Callable[..., WorkerGroup] = WorkerGroup, progress: RunProgress | None = None,
            ready: Callable[[], object] | None = None) -> Plan:
    """Render what the store lacks of ``spec`` on groups of ``shapes`` (Ray must be initialized).

    ``init_timeout_s`` bounds forming (or re-forming) a group; one that cannot form is dropped.
    ``task_timeout_s`` (default: adaptive) is when a running task is given up on and sent
    elsewhere. ``make_group(shape, name=, init_timeout_s=)`` makes a group (``WorkerGroup``; the
    simulated groups of ``cluster.simulated`` for benchmarks and fault tests). ``ready()`` is waited for once the
    groups have formed, before the first task goes out (the driver's compilation ahead of them). Returns the job's plan; the run's figures are on the plan's ``stats`` (``compile``:
    the groups' XLA programs, how many came from the persistent compilation cache).
    """
    own = progress is None
    progress = RunProgress(store, show_progress) if progress is None else progress
    runner = _JobRun(spec, store, shapes, max_attempts, max_rebuilds, progress, log, init_timeout_s,
                     task_timeout_s, make_group, ready)
    try:
        plan = runner.run()
    finally:
        if own:
            progress.close()
    if runner.compiles:
        c = runner.compiles
        log(f"XLA: {c['programs']} program(s), {c['compiled']} compiled and {c['cache_hits']} loaded from "
            f"the compilation cache, in {c['seconds']:.1f} s")
    return dataclasses.replace(plan, stats={"fenced": runner.fenced, "slowest_s": runner.slowest,
                                            "compile": runner.compiles})
