"""The driver of an inverse-rendering job (``farm optimize``): every iteration renders every frame
with gradients over the job's worker groups, sums them in a fixed order, takes one optimizer
step and checkpoints it in the store.

An iteration is split as a render is: a task a tile of a frame (``cluster.gradient_task.
GradientTask``: the tile's image at the iteration's parameters, its loss against the target and
the loss's gradient by path replay), sent to whichever group is free (``run_tasks``, the groups
and their rebuilding as ``farm.scheduler``'s). A task's answer depends only on what it names
(frame, tile, seed, parameters), never on the group that computed it; the driver adds the tiles'
losses and gradients in frame, tile-row, tile-column order (float64, numpy), so the sum, and the
step taken from it (``cluster.gradient_task.StepTask``, on a group: the optimizer's arithmetic
is the members', pinned as theirs is), are the same bits however the tiles were spread or the
run interrupted. Iteration ``i`` renders with the seed ``seed + i``: each iteration's noise is
new, and an iteration done again (after a crash) is the same bits.

The loss is the mean over every frame's pixels and channels; its gradient is the sum of the
tiles' gradients divided by that count.
"""
from __future__ import annotations

import collections
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import ray

from cluster.gradient_task import GradientTask, Params, Stepped, StepTask, TileGradient
from cluster.group import GroupFailed, WorkerGroup
from farm import checkpoint
from farm.checkpoint import Checkpoint, Key, Optimization
from farm.errors import FarmError, SceneFileError, SpecError
from farm.job import scene_ref
from farm.scheduler import Cancelled, JobFailed, start_groups
from farm.scene_check import child_env
from tracer.errors import SceneError

if TYPE_CHECKING:
    from cluster.group import GroupShape
    from farm.optimize_spec import OptimizeSpec
    from farm.spec import JobSpec
    from farm.store import FrameStore

__all__ = ["GRADIENT_TILE", "check_parameters", "targets_hash", "prepare", "gradient_tasks", "reduce", "run", "run_tasks"]

GRADIENT_TILE = 64  # a gradient task's tile edge unless the job names one: its samples are traced in one batch
_DEPTH = 2          # tasks in flight per group (the next one waits in the member)
_MAX_ATTEMPTS = 3   # a task failing that often (not its group: the task itself) fails the job
_LOOK_EVERY_S = 1.0  # seconds between two looks for a cancel
_SAY_EVERY_S = 1.0   # seconds between two lines saying an iteration (and two progress notes)


def check_parameters(spec: JobSpec, opt: OptimizeSpec) -> tuple[tuple[Key, ...], dict[str, np.ndarray], tuple[int, int]]:
    """(the keys with their shapes and ranges, their values in the scene, the film (width, height)),
    from the job's first frame loaded in a child process (``cluster.parameter_check``). A key the
    scene lacks or cannot differentiate is a SpecError naming it; a scene that does not load, a
    SceneFileError."""
    first = spec.frames[0]
    request = {"scene": {"path": spec.scene, "params": [list(p) for p in spec.params_at(first)],
                         "resolution": list(spec.resolution) if spec.resolution else None, "accel": spec.accel},
               "keys": list(opt.parameters)}
    child = subprocess.run([sys.executable, "-m", "cluster.parameter_check"], input=json.dumps(request) + "\n",
                           capture_output=True, text=True, env=child_env())
    lines = child.stderr.strip().splitlines()
    if child.returncode == 1 and lines:
        raise SceneFileError(lines[-1])
    if child.returncode == 2 and lines:
        raise SpecError(lines[-1])
    if child.returncode != 0:
        raise SceneFileError(f"checking the parameters of {spec.scene} failed (exit {child.returncode}): "
                             f"{(lines or ['no message'])[-1]}")
    answer = json.loads(child.stdout)
    keys = tuple(Key(k["key"], tuple(k["shape"]), float(k["range"][0]), float(k["range"][1])) for k in answer["keys"])
    initial = {k["key"]: np.asarray(k["values"], np.float32).reshape(k["shape"]) for k in answer["keys"]}
    return keys, initial, (int(answer["film"][0]), int(answer["film"][1]))


def targets_hash(targets: Sequence[np.ndarray]) -> str:
    """SHA-256 of the targets' values: an optimization resumes only on the targets it began with."""
    h = hashlib.sha256()
    for t in targets:
        h.update(np.ascontiguousarray(t, np.float32).tobytes())
    return h.hexdigest()


def prepare(spec: JobSpec, opt: OptimizeSpec, keys: Sequence[Key], initial: dict[str, np.ndarray],
            targets: Sequence[np.ndarray], replace: bool, local: bool) -> tuple[JobSpec, FrameStore, Optimization]:
    """(planned spec, its store under this driver's lease, the optimization in it): a new store
    (or, ``replace``, one made afresh), or the store of this same optimization to go on with. A
    store of a render job, or of an optimization that differs, is a StoreError naming what differs."""
    from farm import job
    from farm.store import FrameStore, StoreError
    existed = not replace and FrameStore.exists(spec.store)
    spec, store = job.prepare(spec, replace=replace, lease=True, local=local)
    try:
        digest = targets_hash(targets)
        found = None if replace else checkpoint.open_optimization(store)
        if found is None:
            records, _ = store.read_records()
            if existed and (records["folded"] | records["tail_passes"]).any():
                raise StoreError(f"{store.url}: holds a render job's frames, not an optimization (another store, "
                                 f"or --replace)")
            found = checkpoint.create(store, opt, keys, initial, targets, digest)
        _check_same(store.url, found, opt, keys, digest)
        return spec, store, found
    except BaseException:
        if store.lease is not None:
            store.lease.release()
        raise


def finished(spec: JobSpec, opt: OptimizeSpec, keys: Sequence[Key], targets: Sequence[np.ndarray]) -> bool:
    """Whether the store of ``spec`` holds this optimization done to its last iteration, read
    without writing (anything else is for ``prepare`` to say)."""
    from farm.job import bind
    from farm.store import FrameStore
    try:
        if not FrameStore.exists(spec.store):
            return False
        found = checkpoint.open_optimization(bind(spec)[1])
        if found is None:
            return False
        _check_same(spec.store, found, opt, keys, targets_hash(targets))
        return found.done() >= opt.iterations
    except FarmError:
        return False


def _check_same(url: str, found: Optimization, opt: OptimizeSpec, keys: Sequence[Key], digest: str) -> None:
    from farm.store import StoreError
    stored, asked = found.spec.to_json(), opt.to_json()
    for field in asked:
        if stored[field] != asked[field]:
            raise StoreError(f"{url}: holds an optimization whose optimize.{field} is {stored[field]!r}, not "
                             f"{asked[field]!r} (another store, or --replace to start over)")
    if tuple(found.keys) != tuple(keys):
        raise StoreError(f"{url}: its optimization's parameters have other shapes or ranges than the scene's now "
                         f"(--replace to start over)")
    if found.targets_sha256 != digest:
        raise StoreError(f"{url}: the targets ({opt.targets}) are not those its optimization began with "
                         f"(restore them, or --replace to start over)")


# -- the tasks of an iteration --------------------------------------------------------------------

def _pairs(opt: Optimization, params: dict[str, np.ndarray]) -> Params:
    return tuple((k.key, np.asarray(params[k.key], np.float32)) for k in opt.keys)


def gradient_tasks(spec: JobSpec, store: FrameStore, opt: Optimization, targets: Sequence[np.ndarray],
                   iteration: int, params: dict[str, np.ndarray]) -> list[GradientTask]:
    """Iteration ``iteration``'s tasks at ``params``, in the order their answers are added:
    frames, then tile rows, then tile columns."""
    assert spec.tile is not None
    th, tw = min(spec.tile, store.height), min(spec.tile, store.width)
    pairs, seed = _pairs(opt, params), opt.spec.seed(spec, iteration)
    tasks = []
    for f, frame in enumerate(range(spec.frames[0], spec.frames[1] + 1)):
        ref = scene_ref(spec, frame, store.scene_files)
        for y in range(0, store.height, th):
            for x in range(0, store.width, tw):
                rows, cols = min(th, store.height - y), min(tw, store.width - x)
                tasks.append(GradientTask(scene=ref, frame=frame, seed=seed, spp=spec.spp, tile_y=y, tile_x=x,
                                          tile_h=th, tile_w=tw, rows=rows, cols=cols, params=pairs,
                                          target=targets[f][y:y + rows, x:x + cols], loss=opt.spec.loss))
    return tasks


def reduce(tasks: Sequence[GradientTask], answers: Sequence[TileGradient], n_frames: int, height: int,
           width: int) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
    """(the loss, its gradient, the frames' renders (F, H, W, 3)): the tiles' answers added in the
    tasks' order (the fixed order that makes a split run's bits those of any other)."""
    total = n_frames * height * width * 3
    loss = 0.0
    grads = {k: np.zeros(v.shape, np.float64) for k, v in answers[0].grads}
    renders = np.zeros((n_frames, height, width, 3), np.float32)
    first = tasks[0].frame
    for task, answer in zip(tasks, answers):
        loss += answer.loss
        for k, g in answer.grads:
            grads[k] += g
        renders[task.frame - first, task.tile_y:task.tile_y + task.rows, task.tile_x:task.tile_x + task.cols] = answer.image
    return loss / total, {k: (g / total).astype(np.float32) for k, g in grads.items()}, renders


# -- sending tasks to groups ----------------------------------------------------------------------

def run_tasks(groups: list[WorkerGroup], tasks: Sequence[GradientTask | StepTask], log: Callable[[str], object],
              stop: Callable[[], None] = lambda: None, max_rebuilds: int = 3) -> list:
    """Every task's answer, in the tasks' order: each group holds up to ``_DEPTH`` tasks, takes
    the next as one comes back. A group that loses a member is rebuilt (``max_rebuilds`` times,
    then dropped) and its tasks go elsewhere; what it answers after that is never read (fencing:
    only a dispatch still in flight counts). A task whose own error is not the scene's is
    retried, ``_MAX_ATTEMPTS`` in all. ``stop()`` is called about every second (a cancel raises)."""
    answers: list = [None] * len(tasks)
    queue = collections.deque(range(len(tasks)))
    inflight: dict[ray.ObjectRef, tuple[int, WorkerGroup, list[ray.ObjectRef], int]] = {}
    load: collections.Counter[WorkerGroup] = collections.Counter()
    attempts: collections.Counter[int] = collections.Counter()
    while queue or inflight:
        for group in groups:
            while load[group] < _DEPTH and queue:
                i = queue.popleft()
                handle = group.submit(tasks[i])
                inflight[group.ready_ref(handle)] = (i, group, handle, group.generation)
                load[group] += 1
        if not inflight:
            raise JobFailed("no worker group is left to compute on")
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
        for ref in ready:
            if ref not in inflight:  # let go with its group meanwhile
                continue
            i, group, handle, generation = inflight.pop(ref)
            load[group] -= 1
            try:
                answers[i] = group.result(handle)
            except GroupFailed as e:
                _let_go(group, inflight, load, queue)
                queue.appendleft(i)
                if generation == group.generation and group in groups:
                    log(f"{group.name}: {str(e).removeprefix(f'{group.name}: ')}; rebuilding it and sending its "
                        f"tasks elsewhere")
                    _rebuild(group, groups, max_rebuilds, log)
            except ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                message = (str(cause or e).strip().splitlines() or [type(e).__name__])[-1]
                attempts[i] += 1
                if isinstance(cause, (SceneError, ValueError)) or attempts[i] >= _MAX_ATTEMPTS:
                    raise JobFailed(f"a task of {group.name} failed: {message}") from None
                log(f"retry {attempts[i]} of a task of {group.name}: {message}")
                queue.appendleft(i)
        stop()
    return answers


def _let_go(group: WorkerGroup, inflight: dict, load: collections.Counter, queue: collections.deque) -> None:
    """Forget ``group``'s tasks in flight: they go back to the queue, their answers never read."""
    for ref, (i, g, _, _) in list(inflight.items()):
        if g is group:
            del inflight[ref]
            load[group] -= 1
            queue.appendleft(i)


def _rebuild(group: WorkerGroup, groups: list[WorkerGroup], max_rebuilds: int, log: Callable[[str], object]) -> None:
    if group.rebuilds < max_rebuilds:
        try:
            group.rebuild()
            return
        except Exception as e:
            log(f"could not rebuild {group.name}: {e}")
    group.teardown()
    groups.remove(group)


# -- the run --------------------------------------------------------------------------------------

class _Notes:
    """The run's progress notes in the store (``farm status``): the iteration, the loss, the rate."""

    def __init__(self, store: FrameStore, opt: Optimization, start: int):
        self.store, self.opt = store, opt
        self.phase, self.phases = "starting Ray", {"starting Ray": time.time()}
        self.start_iteration = start
        self.started: float | None = None  # (time.monotonic) the rate counts from the first iteration's end
        self.iteration = start
        self.written = 0.0  # (time.monotonic) when the notes were last written

    def write(self, state: str, phase: str | None = None, **fields) -> None:
        self.written = time.monotonic()
        if phase is not None and phase != self.phase:
            self.phase, self.phases[phase] = phase, time.time()
            self.store.log(f"{phase}...")
        rate = None
        if self.started is not None and self.iteration > self.start_iteration + 1:
            rate = (self.iteration - self.start_iteration - 1) / (time.monotonic() - self.started)
        self.store.write_progress(state=state, phase=self.phase, phases=dict(self.phases), iteration=self.iteration,
                                  iterations=self.opt.spec.iterations, rate=rate, kind="optimize", **fields)


def run(spec: JobSpec, store: FrameStore, opt: Optimization, targets: Sequence[np.ndarray],
        shapes: Sequence[GroupShape], log: Callable[[str], object], init_timeout_s: float = 60) -> Checkpoint:
    """Run the optimization in ``store`` from its last checkpoint to its last iteration on groups
    of ``shapes`` (Ray must be up). Returns the last checkpoint."""
    at = opt.latest()
    notes = _Notes(store, opt, at.iteration)
    store.clear_cancel()
    looked, said = 0.0, 0.0  # (time.monotonic) when a cancel was last looked for, an iteration last said

    def stop() -> None:
        nonlocal looked
        if time.monotonic() - looked >= _LOOK_EVERY_S:
            looked = time.monotonic()
            if store.cancel_requested():
                raise Cancelled(f"cancelled; `farm resume {store.url}` goes on from here")

    groups: list[WorkerGroup] = []
    try:
        notes.write("running", "forming groups")
        groups = start_groups(shapes, WorkerGroup, init_timeout_s, log)
        for renderer in dict.fromkeys(g.renderer for g in groups if g.renderer is not None):
            warning = store.note_renderer(renderer, rendered=at.iteration > 0)
            if warning:
                log(f"warning: {warning}")
        notes.write("running", "compiling")
        while at.iteration < opt.spec.iterations:
            at, loss = _iterate(spec, store, opt, targets, at, groups, log, stop)
            notes.iteration = at.iteration
            now = time.monotonic()
            if notes.started is None:
                notes.started = now
            last = at.iteration == opt.spec.iterations
            if now - said >= _SAY_EVERY_S or last:  # (the store's log is rewritten whole at each line)
                said = now
                log(f"iteration {at.iteration}/{opt.spec.iterations}: loss {loss:.6g}")
            if now - notes.written >= _SAY_EVERY_S or notes.phase != "optimizing" or last:
                notes.write("running", "optimizing")
        notes.write("done", "finishing")
        return at
    except (JobFailed, Cancelled) as e:
        notes.write("cancelled" if isinstance(e, Cancelled) else "failed", error=str(e))
        raise
    except KeyboardInterrupt:
        from farm import signals
        notes.write(signals.state(), error=signals.how())
        raise
    finally:
        for group in groups:
            group.teardown()


def _iterate(spec: JobSpec, store: FrameStore, opt: Optimization, targets: Sequence[np.ndarray], at: Checkpoint,
             groups: list[WorkerGroup], log: Callable[[str], object],
             stop: Callable[[], None]) -> tuple[Checkpoint, float]:
    """One iteration from checkpoint ``at``: the gradient, the step, the checkpoint committed;
    returns it and the iteration's loss."""
    params = opt.unravel(at.params)
    tasks = gradient_tasks(spec, store, opt, targets, at.iteration, params)
    answers: list[TileGradient] = run_tasks(groups, tasks, log, stop)
    loss, grads, renders = reduce(tasks, answers, store.n_frames, store.height, store.width)
    s = opt.spec
    step = StepTask(optimizer=s.optimizer, learning_rate=float(s.learning_rate), params=_pairs(opt, params),
                    state=at.state, grads=_pairs(opt, grads), ranges=tuple((k.low, k.high) for k in opt.keys))
    stepped: Stepped = run_tasks(groups, [step], log, stop)[0]
    new = opt.ravel(dict(stepped.params))
    opt.commit(at.iteration + 1, new, stepped.state, loss, renders)
    return Checkpoint(at.iteration + 1, new, stepped.state), loss

