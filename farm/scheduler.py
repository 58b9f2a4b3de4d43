"""The driver loop: keep every worker group busy, retry what fails, write results to the store.

A queue, not lockstep: each group takes the next task as soon as it hands one back. The driver
is the store's only writer. Every dispatch of a task gets a fresh token; a result counts only if
its token is still the task's current one, so a task that was given up on and sent elsewhere can
never be written twice when its first group comes back (fencing). A lost member fails its
group's task and the group is rebuilt from new processes; a task that fails ``max_attempts``
times fails the job with its own error.
"""
import collections
import dataclasses
import itertools
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import ray
from tqdm import tqdm

from cluster.group import GroupError, GroupFailed, WorkerGroup
from cluster.task import SceneRef, TileTask
from farm.errors import FarmError
from farm.planner import covered, plan

__all__ = ["run_job", "JobFailed", "Cancelled"]


class JobFailed(FarmError):
    exit_code = 4


class Cancelled(FarmError):
    exit_code = 5


_tokens = itertools.count(1)
_DEPTH = 2  # dispatches in flight per group


def _remote_error(exc):
    """One line for a task's own error: a SceneError's message, else the exception's last line."""
    cause = getattr(exc, "cause", None)
    if cause is not None:
        text = str(cause).strip().splitlines()
        return (text[-1] if text else type(cause).__name__), type(cause).__name__ == "SceneError"
    text = str(exc).strip().splitlines()
    return (text[-1] if text else type(exc).__name__), False


class _JobRun:
    """One run of ``run_job``: the groups, the queue of a plan's tasks, retries and writes to the store."""

    def __init__(self, spec, store, shapes, max_attempts, max_rebuilds, show_progress, log, init_timeout_s,
                 task_timeout_s):
        self.spec, self.store, self.shapes = spec, store, shapes
        self.init_timeout_s, self.task_timeout_s = init_timeout_s, task_timeout_s
        self.slowest = 0.0  # seconds of the slowest task that counted
        self.fenced = 0     # answers dropped because their dispatch had been given up on
        self.max_attempts, self.max_rebuilds = max_attempts, max_rebuilds
        self.show_progress, self.log = show_progress, log
        self.th, self.tw = min(spec.tile, store.height), min(spec.tile, store.width)
        self.compiles = None  # the groups' XLA programs (cluster.bootstrap.compile_stats), summed

    # -- checking what the store has ---------------------------------------------------------

    def verify_store(self):
        """Forget recorded tasks whose records or sums do not read back intact.

        Returns (the store's records as they now are, how many were forgotten)."""
        records, damaged = self.store.verified_records(self.spec.n_chunks)
        for key in damaged:
            self.store.forget_task(key)
        return records, len(damaged)

    # -- tasks -------------------------------------------------------------------------------

    def tile_task(self, task):
        spec = self.spec
        _, _, ty, tx = task.key
        start = None
        if task.continues:
            value, weight = self.store.read_task(task.key)
            pv = np.zeros((self.th, self.tw, 3), np.float32)
            pw = np.zeros((self.th, self.tw), np.float32)
            pv[:value.shape[0], :value.shape[1]] = value
            pw[:weight.shape[0], :weight.shape[1]] = weight
            start = (pv, pw)
        scene = SceneRef(path=spec.scene, params=spec.params_at(task.frame), resolution=spec.resolution,
                         accel=spec.accel)
        return TileTask(scene=scene, frame=task.frame, seed=spec.seed, spp=spec.spp, tile_y=ty * spec.tile,
                        tile_x=tx * spec.tile, tile_h=self.th, tile_w=self.tw, first_pass=task.first_pass,
                        n_passes=task.n_passes, pass_size=spec.pass_size, start=start)

    def units(self, task):
        samples = covered(task.first_pass, task.n_passes, self.spec.spp, self.spec.pass_size)
        return samples * self.store.tile_pixels(*task.key[2:])

    # -- the loop ----------------------------------------------------------------------------

    def run(self):
        spec, store = self.spec, self.store
        store.clear_cancel()  # a cancel was meant for an earlier run
        records, damaged = self.verify_store()
        if damaged:
            self.log(f"{damaged} stored task(s) did not read back intact: rendering them again")
        job = plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels)
        if not job.todo:
            store.write_progress(state="done", done_units=job.total_units, total_units=job.total_units)
            return job
        groups = self.start_groups()
        queue = collections.deque(job.todo)
        attempts = collections.Counter()
        current = {}       # task key -> token of its live dispatch
        started = {}       # token -> when it was dispatched
        inflight = {}      # ray ref -> (group, handle, task, token, generation)
        load = collections.Counter()  # dispatches in flight per group
        done_units = job.done_units
        frames_left = collections.Counter(t.key[0] for t in job.todo)
        t_start, last_progress = time.monotonic(), 0.0
        bar = tqdm(total=job.total_units, initial=job.done_units, unit="px-sample", unit_scale=True,
                   desc="rendering", disable=not self.show_progress, dynamic_ncols=True)
        try:
            while queue or inflight:
                for group in groups:
                    # Two dispatches per group: the next task is already queued in the members
                    # when one finishes, so groups never wait on the driver.
                    while load[group] < _DEPTH and queue:
                        task = queue.popleft()
                        token = next(_tokens)
                        current[task.key] = token
                        handle = group.submit(self.tile_task(task))
                        inflight[group.ready_ref(handle)] = (group, handle, task, token, group.generation)
                        started[token] = time.monotonic()
                        load[group] += 1
                if not inflight:
                    raise JobFailed("no worker group is left to render on")
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
                self.give_up_on_stragglers(inflight, started, current, queue, attempts)
                for ref in ready:
                    group, handle, task, token, generation = inflight.pop(ref)
                    load[group] -= 1
                    elapsed = time.monotonic() - started.pop(token)
                    try:
                        value, weight, _ = group.result(handle)
                    except GroupFailed as e:
                        self.retry(task, queue, attempts, current, str(e))
                        # Its other dispatch fails too: rebuild once per failure (generation).
                        if group in groups and generation == group.generation:
                            self.log(f"{e}; rebuilding it and sending its tasks elsewhere")
                            self.rebuild(group, groups)
                        continue
                    except ray.exceptions.RayTaskError as e:
                        message, deterministic = _remote_error(e)
                        if deterministic:
                            raise JobFailed(message) from None
                        self.retry(task, queue, attempts, current, message)
                        continue
                    if current.get(task.key) != token or generation != group.generation:
                        self.fenced += 1
                        continue  # fenced: this dispatch was given up on
                    del current[task.key]
                    self.slowest = max(self.slowest, elapsed)
                    store.write_task(task.key, value, weight, passes_done=task.chunk_end, spp_cut=spec.spp)
                    units = self.units(task)
                    done_units += units
                    bar.update(units)
                    frames_left[task.key[0]] -= 1
                now = time.monotonic()
                if now - last_progress > 2.0 or not (queue or inflight):
                    last_progress = now
                    frames_done = spec.n_frames - sum(1 for v in frames_left.values() if v > 0)
                    rate = (done_units - job.done_units) / max(now - t_start, 1e-9)
                    eta = (job.total_units - done_units) / rate if rate > 0 else None
                    bar.set_postfix_str(f"frames {frames_done}/{spec.n_frames}")
                    store.write_progress(state="running", done_units=done_units, total_units=job.total_units,
                                         frames_done=frames_done, n_frames=spec.n_frames, rate=rate, eta_s=eta)
                    if store.cancel_requested():
                        raise Cancelled(f"cancelled; `farm resume {store.url}` goes on from here")
            store.write_progress(state="done", done_units=done_units, total_units=job.total_units,
                                 frames_done=spec.n_frames, n_frames=spec.n_frames,
                                 rate=(done_units - job.done_units) / max(time.monotonic() - t_start, 1e-9), eta_s=0)
            self.compiles = _sum_stats(group.compile_stats() for group in groups)
            return job
        except (JobFailed, Cancelled, KeyboardInterrupt) as e:
            state = {JobFailed: "failed", Cancelled: "cancelled"}.get(type(e), "interrupted")
            store.write_progress(state=state, error=str(e), done_units=done_units, total_units=job.total_units)
            raise
        finally:
            bar.close()
            for group in groups:
                group.teardown()

    def task_timeout(self):
        """How long a dispatch may run before it is given up on: the fixed timeout, or ten times
        the slowest task so far (at least 10 minutes: the first task of a group compiles)."""
        if self.task_timeout_s is not None:
            return self.task_timeout_s
        return max(600.0, 10 * self.slowest)

    def give_up_on_stragglers(self, inflight, started, current, queue, attempts):
        """Send tasks that run too long elsewhere. Their group stays busy until it answers;
        that answer is then fenced off (its token is no longer the task's)."""
        now, limit = time.monotonic(), self.task_timeout()
        for group, _, task, token, _ in list(inflight.values()):
            if current.get(task.key) == token and now - started[token] > limit:
                self.log(f"{group.name}: task frame {task.frame} chunk {task.chunk} tile {task.key[2:]} "
                         f"ran {now - started[token]:.0f} s; sending it elsewhere")
                self.retry(task, queue, attempts, current, f"timed out after {limit:.0f} s")

    def retry(self, task, queue, attempts, current, message):
        current.pop(task.key, None)
        attempts[task.key] += 1
        if attempts[task.key] >= self.max_attempts:
            raise JobFailed(f"task frame {task.frame} chunk {task.chunk} tile {task.key[2:]} failed "
                            f"{attempts[task.key]} times; last error: {message}")
        queue.appendleft(task)

    def start_groups(self):
        """Form the groups side by side: each waits on its own members (processes, JAX,
        ``jax.distributed``), so a job of many groups starts as fast as one."""
        def start(group):
            try:
                group.start()
                return None
            except GroupError as e:
                return str(e)

        candidates = [WorkerGroup(shape, name=f"group-{i}", init_timeout_s=self.init_timeout_s)
                      for i, shape in enumerate(self.shapes)]
        if len(candidates) == 1:
            outcomes = [start(candidates[0])]
        else:
            with ThreadPoolExecutor(len(candidates)) as pool:
                outcomes = list(pool.map(start, candidates))
        groups = [g for g, error in zip(candidates, outcomes) if error is None]
        errors = [error for error in outcomes if error is not None]
        for group in groups:
            group.rebuilds = 0
        if not groups:
            raise JobFailed(f"no worker group could start: {errors[0]}")
        for message in errors:
            self.log(f"going on without a group: {message}")
        return groups

    def rebuild(self, group, groups):
        """Rebuild a failed group, or drop it; returns whether it is back."""
        group.rebuilds += 1
        if group.rebuilds <= self.max_rebuilds:
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


def run_job(spec, store, shapes, max_attempts=3, max_rebuilds=3, show_progress=True, log=print, init_timeout_s=60,
            task_timeout_s=None):
    """Render what the store lacks of ``spec`` on groups of ``shapes`` (Ray must be initialized).

    ``init_timeout_s`` bounds forming (or re-forming) a group; one that cannot form is dropped.
    ``task_timeout_s`` (default: adaptive) is when a running task is given up on and sent
    elsewhere. Returns the job's plan; the run's figures are on the plan's ``stats`` (``compile``:
    the groups' XLA programs, how many came from the persistent compilation cache).
    """
    runner = _JobRun(spec, store, shapes, max_attempts, max_rebuilds, show_progress, log, init_timeout_s,
                     task_timeout_s)
    plan = runner.run()
    if runner.compiles:
        c = runner.compiles
        log(f"XLA: {c['programs']} program(s), {c['compiled']} compiled and {c['cache_hits']} loaded from "
            f"the compilation cache, in {c['seconds']:.1f} s")
    return dataclasses.replace(plan, stats={"fenced": runner.fenced, "slowest_s": runner.slowest,
                                            "compile": runner.compiles})
