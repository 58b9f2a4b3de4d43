"""One host's member of a worker group: what its Ray actor (``cluster.group.GroupMember``) does
to join the group's JAX program and render.

Every member runs the same jitted work unit on a ``Mesh`` over all of the group's devices
(``jax.devices()`` after ``jax.distributed.initialize``): the tracer's ray batch is sharded over
the mesh axis, and the tile's sums come back replicated, so rank 0 alone hands them back.

JAX is imported in the actor process only, by ``cluster.bootstrap.start_jax`` with the
environment the driver computed for the group (virtual CPU devices, platform, compilation
cache): the driver never imports it.
"""
from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from cluster import bootstrap, renderer
from cluster.gradient_task import GradientTask, Stepped, StepTask, TileGradient
from cluster.task import SceneRef, TileSums, TileTask, TileWritten

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from tracer.scene import Scene

__all__ = ["Member"]

def _free_port(host: str) -> int:
    """A port that was free a moment ago (another process may still take it: callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Member:
    """A member's work (``cluster.group.GroupMember`` is the Ray actor; ``cluster.simulated``
    replaces the work unit). Ray is imported only where a method asks Ray: the driver's
    preflight child (``cluster.preflight``) runs a ``Member`` outside Ray, and Ray's import was
    0.55 s of its start-up, on the way to a local job's first task."""

    def __init__(self, rank: int, size: int, env: dict[str, str]) -> None:
        """``env``: the process's environment for JAX (``cluster.bootstrap.worker_env``)."""
        self.rank, self.size, self.env = rank, size, env
        self.mesh: Mesh | None = None
        self._scene_key: SceneRef | None = None
        self._scene: tuple[Scene, Scene] | None = None
        self._whole = 0  # work units loaded compiled (tracer.runtime.compiled)
        self._scene_copies: list[Scene] | None = None  # the loaded scene on each local device (gradients)

    def where(self) -> tuple[str, str, int]:
        """(node id, node IP, pid) of this member."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), os.getpid()

    def compile_stats(self) -> dict[str, float] | None:
        """This member's XLA programs so far (``cluster.bootstrap.compile_stats``), and ``whole``:
        work units it loaded compiled, without tracing them (``tracer.runtime.compiled``)."""
        return dict(bootstrap.compile_stats(), whole=self._whole)

    def reserve_port(self, port: int | None = None) -> str:
        """Rank 0: the coordinator address the group will meet at."""
        import ray

        ip = ray.util.get_node_ip_address()
        return f"{ip}:{port or _free_port(ip)}"

    def initialize(self, coordinator: str | None, timeout_s: float, heartbeat_s: float) -> dict[str, int | str]:
        """Join the group's JAX program and build its mesh; returns what this member sees."""
        jax = bootstrap.start_jax(self.env)
        from jax.sharding import Mesh

        from tracer.rendering import RAY_AXIS

        bootstrap.join_group(coordinator, self.size, self.rank, timeout_s, heartbeat_s)
        self.mesh = Mesh(np.array(jax.devices()), (RAY_AXIS,))
        return dict(rank=self.rank, process_index=jax.process_index(), global_devices=jax.device_count(),
                    local_devices=jax.local_device_count(), platform=jax.default_backend(),
                    renderer=renderer.describe())

    def _replicate(self, tree):
        """Host values (the same on every member) as global arrays replicated over the mesh."""
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        sharding = NamedSharding(self.mesh, PartitionSpec())
        if self.size == 1:  # one transfer for the whole tree (a frame's scene: 8 -> 5 ms, 109 leaves)
            return jax.device_put(jax.tree.map(np.asarray, tree), sharding)
        return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)

    def _load(self, ref: SceneRef) -> Scene:
        """The scene of ``ref`` (a cluster.task.SceneRef) as replicated global arrays; the last one is kept."""
        import tracer
        from tracer.errors import SceneError
        from tracer.io import reads

        if ref != self._scene_key:
            if self._scene is not None:
                self._scene[0].close()  # the previous frame's Embree scene goes first
                self._scene, self._scene_key, self._scene_copies = None, None, None  # (a failed load leaves none)
            with reads.recording() as read:
                try:
                    scene = tracer.load_scene(ref.path, resolution=ref.resolution, accel=ref.accel,
                                              aovs=ref.aovs, rfilter=ref.rfilter, **dict(ref.params))
                except SceneError:
                    reads.check_reads(read, dict(ref.files))  # a file that changed is why, if one did
                    raise
            try:  # the bytes loaded must be those the store records
                reads.check_reads(read, dict(ref.files))
            except reads.SceneChanged:
                scene.close()
                raise
            # The replicated copy names the host engine's scene by handle; the original owns it.
            self._scene = (scene, self._replicate(scene))
            self._scene_key, self._scene_copies = ref, None
        assert self._scene is not None  # (loaded above, or by an earlier call)
        return self._scene[1]

    def render(self, task: TileTask) -> TileSums | TileWritten | None:
        """Render a ``cluster.task.TileTask``. Rank 0 returns its ``TileSums``, or, for a task
        with an ``out``, its ``TileWritten`` once its result is written there; others return None."""
        t0 = time.perf_counter()
        if task.start is not None:
            start = tuple(np.asarray(a, np.float32) for a in task.start)
        elif task.out is not None:
            start = task.out.start(task.tile_h, task.tile_w)
        else:
            start = _zeros(task)
        out = self._work(task, start)
        if self.rank != 0:
            return None
        assert out is not None  # (rank 0's work unit returns its sums)
        if task.out is not None:
            return TileWritten(task.out.write(*out), time.perf_counter() - t0)
        return TileSums(*out, time.perf_counter() - t0)

    def gradient(self, task: GradientTask) -> TileGradient | None:
        """A tile's loss and gradient (``cluster.gradient``) on every device of the group: rank 0
        returns it, others None."""
        import jax

        from cluster.gradient import tile_gradient

        scene = self._load(task.scene)
        if self._scene_copies is None:  # the replicated scene's copy on each local device
            shards = [{s.device: s.data for s in a.addressable_shards} for a in jax.tree.leaves(scene)]
            treedef = jax.tree.structure(scene)
            self._scene_copies = [jax.tree.unflatten(treedef, [s[d] for s in shards]) for d in jax.local_devices()]
        answer = tile_gradient(self._scene_copies, task, jax.process_index(), jax.process_count())
        return answer if self.rank == 0 else None

    def step(self, task: StepTask) -> Stepped:
        """One optimizer step (``cluster.gradient``), on this member's first device."""
        from cluster.gradient import optimizer_step

        return optimizer_step(task)

    def _arguments(self, task: TileTask, start: tuple[np.ndarray, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The work unit's arguments for ``task`` from ``start``: (args, keyword args) of ``render_tile``."""
        from tracer.rendering import WorkItem, plan_work

        scene = self._load(task.scene)
        shape = plan_work(scene, task.tile_h, task.tile_w, task.pass_size, task.chunk_passes, task.job_samples)
        item = WorkItem.of(task.frame, task.seed, task.tile_y, task.tile_x, task.first_pass, task.n_passes, task.spp)
        item, value, weight = self._replicate((item, *start))
        return (scene, item, value, weight), dict(shape=shape, mesh=self.mesh)

    def compile(self, task: TileTask) -> None:
        """Compile (not run) the work unit of ``task``'s shape, leaving it in the persistent
        compilation cache and whole beside it for the members that will render (``cluster.preflight``);
        where it is there whole already, nothing."""
        args, kwargs = self._arguments(task, _zeros(task))
        self._program(args, kwargs, for_others=True)

    def prepare(self, task: TileTask, compiler: int | None = None) -> None:
        """What ``task`` will need before it renders, done ahead of it while the driver waits for
        its preflight: its scene loaded and, in a one-process group, its work unit; ``compiler``:
        the pid of the process on this host compiling it (the preflight), whose program is
        waited for while that process lives, instead of compiled here. Any error is left for the
        task itself to meet and report."""
        try:
            args, kwargs = self._arguments(task, _zeros(task))
            if self.size == 1:
                self._program(args, kwargs, awaiting=None if compiler is None else lambda: _running(compiler))
        except Exception:  # noqa: BLE001
            # What failed the task does again, and fails with its own error (a scene that did not
            # load is not kept; one that did is the task's).
            pass

    def _program(self, args: tuple[Any, ...], kwargs: dict[str, Any], for_others: bool = False,
                 awaiting: Callable[[], bool] | None = None) -> None:
        """The work unit's program for these arguments, loaded compiled where this host has it
        (``tracer.runtime.compiled``; not for scenes whose rays a Python callback answers).
        ``for_others`` (the preflight's): compiled by XLA even where JAX's cache has it, so that
        it can be kept whole, and not loaded where it is kept whole already (a group's members
        compile side by side, and take JAX's entry); ``awaiting``: ``compiled.program``'s."""
        from tracer.runtime import compiled
        from tracer.rendering import render_tile

        if args[0].geometry.accel in compiled.SHARED_ACCELS:
            self._whole += compiled.program(render_tile, bootstrap.cache_dir(), args, kwargs, past_cache=for_others,
                                            for_others=for_others, awaiting=awaiting) == "loaded"

    def _work(self, task: TileTask, start: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        """The work unit: (value, weight) of the task's passes added to ``start``, host numpy on
        rank 0 (others: None)."""
        import jax

        from tracer.rendering import render_tile

        args, kwargs = self._arguments(task, start)
        self._program(args, kwargs)
        value, weight = render_tile(*args, **kwargs)
        if self.size > 1 and not value.is_fully_replicated:
            from jax.experimental import multihost_utils
            value, weight = multihost_utils.process_allgather((value, weight), tiled=True)
        value, weight = jax.block_until_ready((value, weight))
        if self.rank != 0:
            return None
        local = lambda a: np.asarray(a.addressable_data(0)) if isinstance(a, jax.Array) else np.asarray(a)
        return local(value), local(weight)


def _running(pid: int) -> bool:
    """Whether the process ``pid`` is running: not ended, nor ended and not yet reaped by its parent."""
    if not os.path.isdir("/proc"):  # (not Linux: whether it is there at all)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"  # (the state follows the command's name)
    except OSError:
        return False


def _zeros(task: TileTask) -> tuple[np.ndarray, np.ndarray]:
    """A fresh accumulator of ``task``'s tile: value (tile_h, tile_w, channels), weight (tile_h, tile_w)."""
    return (np.zeros((task.tile_h, task.tile_w, task.channels), np.float32),
            np.zeros((task.tile_h, task.tile_w), np.float32))

