"""A member's inverse-rendering work (``cluster.member.Member.gradient`` and ``.step``): a tile's
loss and gradient by path replay, and an optimizer step.

Both run on the first device of the group's first member, whatever the group's shape: the
answer is then the same bits on any group of the job (a gradient sharded over a group's devices
would sum its samples in another order). A tile's program is compiled once per job: the tile's
place, the frame, the seed, the parameters' values and the target are its arguments.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from cluster.gradient_task import GradientTask, Stepped, StepTask, TileGradient

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["tile_gradient", "optimizer_step"]


def tile_gradient(scene: Scene, task: GradientTask) -> TileGradient:
    """``task``'s answer on ``scene`` (its frame's, loaded as the member loads it)."""
    import jax
    import jax.numpy as jnp

    from tracer.differentiable import tile_loss_and_grad
    from tracer.runtime import process

    process.configure()
    t0 = time.perf_counter()
    target = np.zeros((task.tile_h, task.tile_w, 3), np.float32)
    target[:task.rows, :task.cols] = task.target
    mask = np.zeros((task.tile_h, task.tile_w), bool)
    mask[:task.rows, :task.cols] = True
    params = {k: jnp.asarray(v, jnp.float32) for k, v in task.params}
    (loss, image), grads = tile_loss_and_grad(
        scene, params, jnp.asarray(target), jnp.asarray(mask), jnp.int32(task.seed), jnp.int32(task.frame),
        jnp.int32(task.tile_y), jnp.int32(task.tile_x), spp=task.spp, tile_h=task.tile_h, tile_w=task.tile_w,
        loss=task.loss)
    loss, image, grads = jax.device_get((loss, image, grads))
    return TileGradient(float(loss), tuple((k, np.asarray(grads[k], np.float32)) for k, _ in task.params),
                        np.asarray(image[:task.rows, :task.cols], np.float32), time.perf_counter() - t0)


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
