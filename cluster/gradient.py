"""A member's inverse-rendering work (``cluster.member.Member.gradient`` and ``.step``): a tile's
loss and gradient by path replay, and an optimizer step.

Reduction tree (what makes ``farm optimize``'s parameters the same bits on any group): a tile of
``tile_h`` rows is cut into ``n_bands(tile_h)`` bands of ``band_rows(tile_h)`` rows, fixed by
the tile alone, never by the devices. A band is a tile of its own
(``tracer.differentiable.tile_loss``: its pixels' samples and filter margin its own); its loss,
summed over its pixels and channels, and the loss's gradient, are a program's whose bits depend
on the band alone. Band b goes to the group's device ``b % D`` (of D, every member's local devices
in process order), all of them in flight at once:

* On CPUs, one program per process runs a band on each of its devices (``jax.shard_map``, no
  collective), compiled once for all of them. A CPU process always has at least two devices
  (``tracer.runtime.cpu.MIN_CPU_DEVICES``), so the program is always partitioned, and its band
  the same machine code on 2, 3 or 4 devices, one host or several.
* On GPUs and TPUs, where a process may hold one device, each device runs the band program
  compiled for it alone, never partitioned: a partitioned program is compiled otherwise for one
  device than for two (its gradients differed in the last bit).

The bands' answers are gathered to every member and added in band order from zero in float64
(``add_bands``); the loss is a sum over pixels, so they add up to the tile's.

A band of r rows traces r + 2 * margin rows of samples: bands cost what their filter margins
share (the box filter: nothing). An optimizer step runs on the first device of the group's first
member alone (it is small).
"""
from __future__ import annotations

import functools
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

    from tracer.runtime import process as tracer_process

    tracer_process.configure()
    t0 = time.perf_counter()
    rows, count, local = band_rows(task.tile_h), n_bands(task.tile_h), len(scenes)
    devices = local * processes
    # Rows past the bands (the last round of a CPU process's bands may reach there): masked.
    rounds = -(-count // devices)
    target = np.zeros((rounds * devices * rows, task.tile_w, 3), np.float32)
    target[:task.rows, :task.cols] = task.target
    mask = np.zeros((rounds * devices * rows, task.tile_w), bool)
    mask[:task.rows, :task.cols] = True
    mine = {j: range(process * local + j, count, devices) for j in range(local)}  # band b: device b % devices
    on_cpu = jax.tree.leaves(scenes[0])[0].devices().pop().platform == "cpu"
    bands = _cpu_bands if on_cpu else _device_bands
    answers = bands(scenes, task, target, mask, mine, rows, rounds, devices)
    packed = _pack(jax.device_get(answers), task, count, rows)
    if processes > 1:
        from jax.experimental import multihost_utils
        gathered = multihost_utils.process_allgather(packed)  # (processes, count, width)
        packed = np.stack([gathered[(b % devices) // local, b] for b in range(count)])
    losses, grads, images = _unpack(packed, task, rows)
    loss, grad = add_bands(losses, grads)
    image = np.concatenate(images)[:task.rows, :task.cols]
    return TileGradient(loss, tuple((k, grad[k]) for k, _ in task.params), image, time.perf_counter() - t0)


def _cpu_bands(scenes: Sequence[Scene], task: GradientTask, target: np.ndarray, mask: np.ndarray,
               mine: dict[int, range], rows: int, rounds: int, devices: int) -> dict[int, Any]:
    """This process's bands on its CPU devices: one program over all of them (``jax.shard_map``, a
    band a device a call), compiled once. A CPU process has at least two devices
    (``tracer.runtime.cpu.MIN_CPU_DEVICES``), so the program is always partitioned, and the same
    machine code runs a band on any device count (compiled for each device alone, a process of
    8 devices compiled the program 8 times: CPU executables are bound to their device)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array([jax.tree.leaves(s)[0].devices().pop() for s in scenes]), (_BAND_AXIS,))
    replicated, split = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec(_BAND_AXIS))
    scene = jax.tree.map(lambda *copies: jax.make_array_from_single_device_arrays(copies[0].shape, replicated,
                                                                                  list(copies)), *scenes)
    params = jax.device_put({k: v for k, v in task.params}, replicated)
    seed, frame, tile_x = (jax.device_put(np.int32(v), replicated) for v in (task.seed, task.frame, task.tile_x))
    calls = []
    for r in range(rounds):  # round r: band r * devices + (this process's first) + j on local device j
        ys = [b[r] * rows if r < len(b) else rounds * devices * rows - rows for b in mine.values()]
        rows_of = lambda a: np.concatenate([a[y:y + rows] for y in ys])  # noqa: E731
        calls.append(_bands_program()(scene, params, jax.device_put(rows_of(target), split),
                                    jax.device_put(rows_of(mask), split),
                                    jax.device_put(np.array(ys, np.int32) + np.int32(task.tile_y), split),
                                    seed, frame, tile_x, mesh=mesh, spp=task.spp, rows=rows, tile_w=task.tile_w,
                                    loss=task.loss))
    answers = {}
    for r, (loss, image, grads) in enumerate(jax.device_get(calls)):
        for j, b in mine.items():
            if r < len(b):
                answers[b[r]] = ((loss[j], image[j * rows:(j + 1) * rows]), {k: g[j] for k, g in grads.items()})
    return answers


_BAND_AXIS = "bands"


def _one_band_a_device(scene: Scene, params: dict[str, Any], target: Any, mask: Any, band_y: Any, seed: Any,
                       frame: Any, tile_x: Any, *, mesh: Any, spp: int, rows: int, tile_w: int, loss: str) -> Any:
    """(losses (D,), images (D * rows, tile_w, 3), gradients {key: (D, ...)}): device d's band
    is rows [d * rows, (d + 1) * rows) of ``target`` and ``mask``, at tile row ``band_y[d]``."""
    import jax
    from jax.sharding import PartitionSpec

    from tracer.differentiable import tile_loss

    def band(scene, params, target, mask, band_y, seed, frame, tile_x):
        (value, image), grads = jax.value_and_grad(tile_loss, argnums=1, has_aux=True)(
            scene, params, target, mask, seed, frame, band_y[0], tile_x, spp=spp, tile_h=rows, tile_w=tile_w,
            loss=loss)
        return value[None], image, jax.tree.map(lambda g: g[None], grads)

    whole, split = PartitionSpec(), PartitionSpec(_BAND_AXIS)
    return jax.shard_map(band, mesh=mesh, in_specs=(whole, whole, split, split, split, whole, whole, whole),
                         out_specs=(split, split, split), check_vma=False)(scene, params, target, mask, band_y, seed,
                                                                          frame, tile_x)


@functools.cache
def _bands_program() -> Any:
    """The jitted ``_one_band_a_device`` (made on first use: the driver imports this module, without JAX)."""
    import jax

    return jax.jit(_one_band_a_device, static_argnames=("mesh", "spp", "rows", "tile_w", "loss"))


def _device_bands(scenes: Sequence[Scene], task: GradientTask, target: np.ndarray, mask: np.ndarray,
                  mine: dict[int, range], rows: int, rounds: int, devices: int) -> dict[int, Any]:
    """This process's bands on its GPUs or TPUs: the band program compiled for each device alone,
    not partitioned (a process may have one device, and a program partitioned over several
    compiles otherwise than one over one: its gradients differed in the last bit), every band in
    flight at once. The persistent compilation cache keys these programs without their device,
    so the first device's goes first, alone, and the others load it instead of compiling it."""
    import jax

    from tracer.differentiable import tile_loss_and_grad

    params = {k: v for k, v in task.params}

    def run(j: int) -> dict[int, Any]:
        """Local device j's bands, each put there and dispatched (not waited for)."""
        scene, out = scenes[j], {}
        where = jax.tree.leaves(scene)[0].devices().pop()
        put = lambda x: jax.device_put(x, where)  # noqa: E731
        for b in mine[j]:
            y = b * rows
            out[b] = tile_loss_and_grad(
                scene, put(params), put(target[y:y + rows]), put(mask[y:y + rows]),
                *(put(np.int32(v)) for v in (task.seed, task.frame, task.tile_y + y, task.tile_x)),
                spp=task.spp, tile_h=rows, tile_w=task.tile_w, loss=task.loss)
        return out

    answers = run(0)  # compiled alone; a call returns once dispatched
    if len(scenes) > 1:
        with ThreadPoolExecutor(len(scenes) - 1) as pool:
            answers.update({b: a for part in pool.map(run, range(1, len(scenes))) for b, a in part.items()})
    return answers


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
