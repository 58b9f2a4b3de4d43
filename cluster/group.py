"""Worker groups: the hosts that run one JAX program together, as Ray actors in a placement group.

A group is N ``GroupMember`` actors, one per host, placed by a placement group (STRICT_SPREAD
on a real cluster; PACK lets tests put every member on one machine). Rank 0 picks the
coordinator port; every member calls ``jax.distributed.initialize`` and builds one mesh over all
of the group's devices. A one-host group skips ``jax.distributed`` (a GPU node needs none to use
its own GPUs).

``jax.distributed`` cannot lose a member, and a process cannot initialize twice: when any member
dies the whole group is torn down and ``rebuild`` starts new processes. The task in flight fails
(``GroupFailed``) and the caller decides where it goes next. Driver side only: no JAX here.
"""
import dataclasses
import itertools
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, cast

import ray
from ray.util.placement_group import NODE_ID_LABEL_KEY, PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cluster import bootstrap
from cluster.gradient_task import GradientTask, StepTask
from cluster.member import Member
from cluster.task import TileSums, TileTask, TileWritten
from tracer.shared import PLATFORMS

if TYPE_CHECKING:
    from ray.util.tpu import SlicePlacementGroup

__all__ = ["GroupShape", "GroupMember", "WorkerGroup", "GroupError", "GroupFailed", "discover_shapes", "check_one_renderer"]

_names = itertools.count()
NODE_WAIT_S = 10.0  # how long a group waits for room on its shape's node before going elsewhere


class GroupError(Exception):
    """A group could not be formed (placement, coordinator, initialization); one line."""


class GroupFailed(Exception):
    """A member died while the group worked: the group must be rebuilt and its task rerun."""


@dataclasses.dataclass(frozen=True)
class GroupShape:
    """What one group is made of.

    hosts: members (one per host; a TPU slice's VM count). platform: 'cpu', 'gpu' or 'tpu'.
    devices_per_host: CPU only, virtual devices per member (XLA's host platform device count);
    None: one per core the member may run on (XLA runs a device's kernels one at a time, so
    that is what puts every core to work: ``tracer.runtime.cpu``).
    gpus_per_host: GPUs each member holds. tpu_topology / tpu_version: the slice to reserve
    (e.g. '2x2x2', 'v4'). cpus_per_host: Ray CPUs each member holds. strategy: placement across
    nodes (STRICT_SPREAD; PACK to share one machine).
    """

    hosts: int = 1
    platform: str = "cpu"
    devices_per_host: int | None = None
    gpus_per_host: int = 0
    tpu_topology: str | None = None
    tpu_version: str | None = None
    cpus_per_host: float = 1
    strategy: str = "STRICT_SPREAD"
    # CPU: the arithmetic's instruction-set level (None: the host's; tracer.runtime.xla_flags)
    cpu_isa: str | None = None
    # One-host groups: the Ray node id the group is placed on where that node is alive and has room
    # (discover_shapes: one group a node); else, and when rebuilt, wherever it fits
    node: str | None = None

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise GroupError(f"platform must be one of {', '.join(PLATFORMS)}, got {self.platform!r}")
        if self.hosts < 1 or (self.devices_per_host is not None and self.devices_per_host < 1):
            raise GroupError(f"a group needs at least one host and one device per host, got {self.hosts} x {self.devices_per_host}")
        if self.platform == "gpu" and self.gpus_per_host < 1:
            raise GroupError("a GPU group needs gpus_per_host >= 1")
        if self.platform == "tpu" and not (self.tpu_topology and self.tpu_version):
            raise GroupError("a TPU group needs tpu_topology (e.g. 2x2x2) and tpu_version (e.g. v4)")

    @property
    def devices(self) -> int | None:
        """Devices in the group's mesh (CPU: virtual devices; GPU: GPUs); None where unknown until
        started (TPUs, and CPU members that take one device per core)."""
        per_host = {"cpu": self.devices_per_host, "gpu": self.gpus_per_host}.get(self.platform)
        return None if per_host is None else self.hosts * per_host

    def bundle(self) -> dict[str, float]:
        b: dict[str, float] = {"CPU": self.cpus_per_host}
        if self.platform == "gpu":
            b["GPU"] = self.gpus_per_host
        return b

    def env(self) -> dict[str, str]:
        """Environment of every member process, set there before JAX is imported
        (``cluster.bootstrap``: reproducible CPU arithmetic, devices, the compilation cache)."""
        return bootstrap.worker_env(self.platform, self.devices_per_host, isa=self.cpu_isa)


def discover_shapes(nodes: Iterable[Mapping[str, Any]] | None = None) -> list[GroupShape]:
    """Default groups for a running cluster (``ray.nodes()`` by default): one group per GPU node
    holding all its GPUs; without GPUs, one single-host CPU group per node with CPUs. TPU slices
    are not guessed: name their topology in the job's [groups]."""
    nodes = [n for n in (ray.nodes() if nodes is None else nodes) if n.get("Alive", True)]
    gpu = [n for n in nodes if n["Resources"].get("GPU", 0) >= 1]
    if gpu:
        return [GroupShape(hosts=1, platform="gpu", gpus_per_host=int(n["Resources"]["GPU"]), strategy="SPREAD",
                           node=n.get("NodeID")) for n in gpu]
    cpu = [n for n in nodes if n["Resources"].get("CPU", 0) >= 1]
    return [GroupShape(hosts=1, platform="cpu", strategy="SPREAD", node=n.get("NodeID")) for n in cpu] or [GroupShape()]


def check_one_renderer(name: str, info: Sequence[Mapping[str, Any]],
                       where: Sequence[tuple[str | None, str | None, int | None]]) -> None:
    """Refuse (GroupError) a group whose members' ``initialize`` answers (``info``; ``where``: their
    (node, IP, pid)) name different renderers (``cluster.renderer``): their tiles would not be one
    renderer's bits."""
    renderers = {str(i.get("renderer")) for i in info}
    if len(renderers) > 1:
        said = "; ".join(f"{i.get('renderer')} on {ip or 'a host'}" for i, (_, ip, _) in zip(info, where))
        raise GroupError(f"{name}: its hosts render with different software ({said}): install the same tracer, "
                         f"jax and jaxlib on every host")


@ray.remote(max_restarts=0, max_task_retries=0)
class GroupMember(Member):
    """The Ray actor of ``cluster.member.Member`` (its process title names
    ``GroupMember.render`` while it renders)."""


class WorkerGroup:
    """A started group: ``submit(task)`` renders one ``cluster.task.TileTask`` on all members.

    init_timeout_s bounds forming the group (placement, then ``jax.distributed``);
    heartbeat_s is how long JAX waits before declaring a silent member dead.
    """

    where: list[tuple[str | None, str | None, int | None]]  # (node id, node IP, pid) per member, once started

    def __init__(self, shape: GroupShape, name: str | None = None, init_timeout_s: float = 60, heartbeat_s: float = 20,
                 start_attempts: int = 3) -> None:
        self.shape = shape
        self.name = name or f"group-{next(_names)}"
        self.init_timeout_s, self.heartbeat_s, self.start_attempts = init_timeout_s, heartbeat_s, start_attempts
        self.members: list[Any] = []  # the members' Ray actor handles, by rank
        self.info: list[dict[str, int | str]] = []  # what each member's ``initialize`` answered
        self.generation = 0  # bumped by every (re)build: results of an older generation are stale
        self.rebuilds = 0    # times ``rebuild`` was called
        self.avoid: frozenset[str] = frozenset()  # Ray node ids no member may be placed on (hosts left out)
        self._pg: PlacementGroup | None = None
        self._slice: "SlicePlacementGroup | None" = None

    # -- forming and tearing down ------------------------------------------------------------

    def start(self, port: int | None = None) -> Self:
        """Place, spawn and initialize the members. ``port`` forces the coordinator port (tests)."""
        last = None
        for _ in range(self.start_attempts):
            try:
                self._start_once(port)
                self.generation += 1
                return self
            except GroupError as e:
                last = e
                self.teardown()
                if port is not None:  # a forced port will not free itself
                    break
        raise cast(GroupError, last)

    def _start_once(self, port):
        deadline = time.monotonic() + self.init_timeout_s
        pg = self._place(deadline)
        env = self.shape.env()
        n = self.shape.hosts
        self.members = []
        for rank in range(n):
            # The environment goes to the member as an argument, not as Ray's runtime_env: Ray
            # then places the member in one of its idle worker processes instead of starting a
            # new one for that environment (JAX has not started there; bootstrap checks).
            options = dict(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank),
                           num_cpus=self.shape.cpus_per_host,
                           name=f"{self.name}-{rank}-{os.getpid()}-{time.monotonic_ns()}")
            if self.shape.platform == "gpu":
                options["num_gpus"] = self.shape.gpus_per_host
            if self.shape.platform == "tpu":
                options["resources"] = {"TPU": self._slice.chips_per_host}
            self.members.append(GroupMember.options(**options).remote(rank, n, env))
        coordinator = None
        if n > 1:  # (one member needs no jax.distributed, so no coordinator)
            coordinator = self._get(self.members[0].reserve_port.remote(port), deadline, "reserving the coordinator port")
        refs = [m.initialize.remote(coordinator, max(1, deadline - time.monotonic()), self.heartbeat_s)
                for m in self.members]
        self.info = self._get(refs, deadline, f"initializing jax.distributed at {coordinator}" if n > 1 else "starting JAX")
        self.where = self._get([m.where.remote() for m in self.members], deadline, "locating members")
        check_one_renderer(self.name, self.info, self.where)

    @property
    def renderer(self) -> str | None:
        """What renders this group's samples (``cluster.renderer.describe``); None before it started."""
        return str(self.info[0]["renderer"]) if self.info and "renderer" in self.info[0] else None

    def _place(self, deadline):
        if self.shape.platform == "tpu":
            from ray.util.tpu import SlicePlacementGroup
            self._slice = SlicePlacementGroup(topology=self.shape.tpu_topology,
                                              accelerator_version=self.shape.tpu_version, strategy="STRICT_SPREAD")
            if self._slice.num_hosts != self.shape.hosts:
                raise GroupError(f"a {self.shape.tpu_version} {self.shape.tpu_topology} slice has "
                                 f"{self._slice.num_hosts} hosts, the group shape says {self.shape.hosts}")
            self._pg = self._slice.placement_group
        elif self._placed_on_its_node(deadline):
            return self._pg
        else:
            # Ray labels every node with its id: a selector keeps the members off the nodes to avoid.
            avoid = ([{NODE_ID_LABEL_KEY: f"!in({','.join(sorted(self.avoid))})"}] * self.shape.hosts
                     if self.avoid else None)
            self._pg = placement_group([self.shape.bundle()] * self.shape.hosts, strategy=self.shape.strategy,
                                       bundle_label_selector=avoid)
        try:
            ray.get(self._pg.ready(), timeout=max(1, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            raise GroupError(f"{self.name}: the cluster cannot place {self.shape.hosts} x {self.shape.bundle()} "
                             f"({self.shape.strategy}) within {self.init_timeout_s} s; it has "
                             f"{ray.available_resources()}") from None
        return self._pg

    def _placed_on_its_node(self, deadline):
        """Place a one-host group on its shape's node (each group of a job on a node of its own,
        which Ray's SPREAD does not promise for groups formed at once), where that node is alive,
        not avoided, and has room within ``NODE_WAIT_S``; else, and when rebuilt, leave it to Ray."""
        node = self.shape.node
        if node is None or self.shape.hosts != 1 or self.generation > 0 or node in self.avoid or \
                not any(n.get("NodeID") == node and n.get("Alive") for n in ray.nodes()):
            return False
        self._pg = placement_group([self.shape.bundle()], bundle_label_selector=[{NODE_ID_LABEL_KEY: node}])
        try:
            ray.get(self._pg.ready(), timeout=max(0.1, min(NODE_WAIT_S, deadline - time.monotonic())))
            return True
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(self._pg)
            self._pg = None
            return False

    def _get(self, refs, deadline, what):
        try:
            return ray.get(refs, timeout=max(1, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            raise GroupError(f"{self.name}: timed out {what} after {self.init_timeout_s} s") from None
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as e:
            cause = str(getattr(e, "cause", None) or e).strip().splitlines()
            raise GroupError(f"{self.name}: failed {what}: {cause[-1] if cause else type(e).__name__}") from None

    def teardown(self) -> None:
        """Kill every member and release the placement: a group cannot outlive a lost member."""
        for m in self.members:
            try:
                ray.kill(m, no_restart=True)
            except Exception:  # already gone
                pass
        self.members = []
        if self._slice is not None:
            self._slice.shutdown()
            self._slice = None
        elif self._pg is not None:
            try:
                remove_placement_group(self._pg)
            except Exception:
                pass
        self._pg = None

    def rebuild(self) -> Self:
        """New member processes in place of the old ones (``jax.distributed`` cannot re-form)."""
        self.rebuilds += 1
        self.teardown()
        return self.start()

    # -- work --------------------------------------------------------------------------------

    def submit(self, task: TileTask | GradientTask | StepTask) -> list[ray.ObjectRef]:
        """Start ``task`` on every member (an optimizer step: on the first member alone,
        ``cluster.gradient``); returns a handle for ``result``/``ready_ref``."""
        if isinstance(task, GradientTask):
            return [m.gradient.remote(task) for m in self.members]
        if isinstance(task, StepTask):
            return [self.members[0].step.remote(task)]
        return [m.render.remote(task) for m in self.members]

    def prepare(self, task: TileTask, compiler: int | None = None) -> None:
        """Have every member get ready for ``task`` ahead of it (``Member.prepare``; ``compiler``:
        the pid of the process on the members' host compiling its work unit). Nothing is waited
        for: the members do it before whatever is sent them next."""
        for m in self.members:
            m.prepare.remote(task, compiler)

    @staticmethod
    def ready_ref(handle: list[ray.ObjectRef]) -> ray.ObjectRef:
        """The object to ``ray.wait`` on: rank 0's answer (it fails too when any member dies,
        since JAX aborts the survivors of a lost member)."""
        return handle[0]

    def result(self, handle: list[ray.ObjectRef]) -> Any:
        """A finished task's answer (``cluster.task.TileSums`` or ``TileWritten``; for the tasks of
        ``cluster.gradient_task``, ``TileGradient`` or ``Stepped``); ``GroupFailed`` if a member died."""
        try:
            out = ray.get(handle[0])
            ray.get(handle[1:])
            return out
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                ray.exceptions.ObjectLostError, ray.exceptions.OwnerDiedError) as e:
            raise GroupFailed(f"{self.name}: a member was lost ({type(e).__name__})") from None
        except ray.exceptions.RayTaskError:
            # A survivor's collective fails when its peer dies: that is the group's failure,
            # not the task's. With every member alive, the error is the task's own.
            if not self.alive():
                raise GroupFailed(f"{self.name}: a member was lost mid-task") from None
            raise

    def alive(self, timeout_s: float = 10) -> bool:
        """Whether every member still answers."""
        try:
            ray.get([m.where.remote() for m in self.members], timeout=timeout_s)
            return True
        except Exception:
            return False

    def compile_stats(self, timeout_s: float = 10) -> dict[str, float] | None:
        """Rank 0's XLA programs so far (``cluster.bootstrap.compile_stats``; every member makes
        the same ones), or None if it does not answer."""
        try:
            return ray.get(self.members[0].compile_stats.remote(), timeout=timeout_s)
        except Exception:
            return None

    def nodes(self) -> list[tuple[str | None, str | None]]:
        """(Ray node id, IP) of each member, as placed when the group (re)formed."""
        return [(node, ip) for node, ip, _ in getattr(self, "where", [])]

    def member_pids(self) -> list[int | None]:
        return [pid for _, _, pid in self.where]
