"""A member's inverse-rendering work (``cluster.member.Member.gradient`` and ``.step``): a tile's
loss and gradient by path replay, and an optimizer step.

Reduction tree (what makes ``farm optimize``'s parameters the same bits on any group): a tile of
``tile_h`` rows is cut into ``n_bands(tile_h)`` bands of ``band_rows(tile_h)`` rows, fixed by
the tile alone, never by the devices. A band is a tile of its own
(``tracer.differentiable.tile_loss``: its pixels' samples and filter margin its own); its loss,
summed over its pixels and channels, and the loss's gradient are one jitted program's. Band b goes
to the group's device ``b % D`` (of D, every member's local devices in process order), all of them
in flight at once; each device runs the job's one program, compiled alone (no collective, no
partitioning: the same machine code on 1, 2, 3 or 4 devices, on one host or several; a program
partitioned over the devices, ``jax.shard_map``, was compiled otherwise for one device than for
two, and its gradients differed in the last bit). The bands' answers are gathered to every member and added in band order from zero in
float64 (``add_bands``); the loss is a sum over pixels, so they add up to the tile's.

A band of r rows traces r + 2 * margin rows of samples: bands cost what their filter margins
share (the box filter: nothing). An optimizer step runs on the first device of the group's first
member alone (it is small).
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from cluster.gradient_task import GradientTask, Stepped, StepTask, TileGradient

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["GRADIENT_BANDS", "band_rows", "n_bands", "add_bands", "tile_gradient", "optimizer_step"]

GRADIENT_BANDS = 8  # bands a tile is cut into (at most): the devices of a group one task keeps busy


def band_rows(tile_h: int) -> int:
    """Rows of a band of a tile ``tile_h`` rows high."""
    return -(-tile_h // GRADIENT_BANDS)


def n_bands(tile_h: int) -> int:
    """Bands of a tile ``tile_h`` rows high (the last may reach past the tile: padding, masked)."""
    return -(-tile_h // band_rows(tile_h))


def add_bands(losses: Sequence[float], grads: Sequence[dict[str, np.ndarray]]) -> tuple[float, dict[str, np.ndarray]]:
    """(the tile's loss, its gradient {key: float64}): the bands' answers added in band order from
    zero in float64 (the order that makes the sum the same bits however the bands were spread)."""
    loss = 0.0
    total = {k: np.zeros(np.shape(g), np.float64) for k, g in grads[0].items()}
    for value, g in zip(losses, grads):
        loss += float(value)
        for k in total:
            total[k] += g[k]
    return loss, total


def tile_gradient(scenes: Sequence[Scene], task: GradientTask, process: int, processes: int) -> TileGradient:
    """``task``'s answer: its bands computed on ``scenes`` (the frame's scene on each of this
    member's local devices, in order), those of the other ``processes`` members (this one is
    ``process``) gathered from them (every member calls this)."""
    import jax

    from tracer.differentiable import tile_loss_and_grad
    from tracer.runtime import process as tracer_process

    tracer_process.configure()
    t0 = time.perf_counter()
    rows, count, local = band_rows(task.tile_h), n_bands(task.tile_h), len(scenes)
    devices = local * processes
    target = np.zeros((count * rows, task.tile_w, 3), np.float32)
    target[:task.rows, :task.cols] = task.target
    mask = np.zeros((count * rows, task.tile_w), bool)
    mask[:task.rows, :task.cols] = True
    params = {k: v for k, v in task.params}

    def run(j: int) -> dict[int, Any]:
        """Local device j's bands, each put there and dispatched (not waited for)."""
        scene, out = scenes[j], {}
        where = jax.tree.leaves(scene)[0].devices().pop()
        put = lambda x: jax.device_put(x, where)  # noqa: E731
        for b in range(process * local + j, count, devices):
            y = b * rows
            out[b] = tile_loss_and_grad(
                scene, put(params), put(target[y:y + rows]), put(mask[y:y + rows]),
                *(put(np.int32(v)) for v in (task.seed, task.frame, task.tile_y + y, task.tile_x)),
                spp=task.spp, tile_h=rows, tile_w=task.tile_w, loss=task.loss)
        return out

    # JAX keys an executable by its device: each device's first band compiles the job's program
    # for it. On GPUs the persistent compilation cache keys a program without its device, so the
    # first device's goes first, alone, and the others load it instead of compiling it again; on
    # CPUs (whose executables are bound to their device) they all compile, side by side. A call
    # returns once dispatched.
    alone = jax.tree.leaves(scenes[0])[0].devices().pop().platform == "gpu"
    answers = run(0) if alone else {}
    rest = range(1 if alone else 0, local)
    if rest:
        with ThreadPoolExecutor(len(rest)) as pool:
            answers.update({b: a for part in pool.map(run, rest) for b, a in part.items()})
    packed = _pack(jax.device_get(answers), task, count, rows)
    if processes > 1:
        from jax.experimental import multihost_utils
        gathered = multihost_utils.process_allgather(packed)  # (processes, count, width)
        packed = np.stack([gathered[(b % devices) // local, b] for b in range(count)])
    losses, grads, images = _unpack(packed, task, rows)
    loss, grad = add_bands(losses, grads)
    image = np.concatenate(images)[:task.rows, :task.cols]
    return TileGradient(loss, tuple((k, grad[k]) for k, _ in task.params), image, time.perf_counter() - t0)


def _pack(answers: dict[int, Any], task: GradientTask, count: int, rows: int) -> np.ndarray:
    """The bands' answers as one float32 array (count, 1 + parameters + image): one gather."""
    width = 1 + sum(v.size for _, v in task.params) + rows * task.tile_w * 3
    packed = np.zeros((count, width), np.float32)
    for b, ((loss, image), grads) in answers.items():
        packed[b] = np.concatenate([np.ravel(loss), *(np.ravel(grads[k]) for k, _ in task.params), np.ravel(image)])
    return packed


def _unpack(packed: np.ndarray, task: GradientTask,
            rows: int) -> tuple[list[float], list[dict[str, np.ndarray]], list[np.ndarray]]:
    losses, grads, images = [], [], []
    for row in packed:
        losses.append(float(row[0]))
        at, grad = 1, {}
        for k, v in task.params:
            grad[k] = row[at:at + v.size].reshape(v.shape)
            at += v.size
        grads.append(grad)
        images.append(row[at:].reshape(rows, task.tile_w, 3))
    return losses, grads, images


def optimizer_step(task: StepTask) -> Stepped:
    from tracer import optimizer

    params = dict(task.params)
    if task.state:
        state = optimizer.state_from_bytes(task.optimizer, task.learning_rate, params, task.state)
    else:
        state = optimizer.init_state(task.optimizer, task.learning_rate, params)
    ranges = {k: r for (k, _), r in zip(task.params, task.ranges)}
    new, state = optimizer.step(task.optimizer, task.learning_rate, params, state, dict(task.grads), ranges)
    return Stepped(tuple((k, new[k]) for k, _ in task.params), optimizer.state_bytes(state))
