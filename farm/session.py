"""The driver's Ray session: an embedded local Ray, or a connection to a cluster, for one run.

``starting_ray`` starts Ray in a background thread for the length of a ``with`` block and shuts
it down after, whatever happens inside: the driver checks the scene and opens its store while
Ray starts (the two take about as long), and ``run`` waits for Ray only when it needs it.
Locally it gives Ray at least one logical CPU per group member, so that every group of the job
can be placed on this one machine; on a cluster (``address``: ``auto`` or
``ray://head:10001``) the cluster's own resources decide. Ray's dashboard, usage statistics and
worker log forwarding are off: the driver reports through its own progress bar and one-line
errors. The embedded Ray keeps Ray's default token authentication without Ray's notice of it on
every run (a notice meant for clusters that others can reach).

The embedded Ray starts as a minimal installation of Ray would (``pip install ray`` without
``[default]``): its dashboard agent leaves out the metrics and reporting modules. ``ray.init``
waits until the node's agents have started, and the full agent (an HTTP server, gRPC, a
metrics exporter) kept its raylet waiting 10 s on a loaded 2-core machine. With both, a job's
start-up to its first dispatched task took 0.61x the time it took before, measured alternately
on that machine (README, Figures; ``scripts/bench_vs_mitsuba.py`` shows the start-up's steps). Ray decides that a node is minimal by whether ``ray.dashboard.optional_deps`` imports in
the process that starts it; the driver hides that module while ``ray.init`` runs, and only then. Nor does the embedded head
start the autoscaler's monitor (a shutdown took 1.35 s with it and 0.1-0.35 s without, a 2-core
AVX-512 host) or the log monitor (it forwards workers' lines to drivers, which the farm's do not
ask for). Nor, where the raylet can be told its dashboard agent's ports up front (Ray 2.50 on),
the API server, and the agent is an idle process (``_IDLE_AGENT``): the two serve only a
cluster's tools. Nothing of the farm uses what is left out: the jobs API (``farm submit``) is a
cluster's. Otherwise Ray's API server and the node's dashboard agent start at niceness 10 above
the driver's: their start-up, some 2 CPU-seconds of imports, ran beside the compile of a cold
job's work unit and slowed it (``_AGENT_NICENESS``). A 16-frame job of examples/orbit.xml at
128x128, 64 spp, on a 2-core host, cold: its first frame 12.4 s -> 9.7-10.4 s with the niceness
and the preflight change of ``farm.scene_check``. Nor does the head wait, as Ray's does, for its
API server before it starts the raylet, or the raylet for its dashboard agent to say which of
its ports are unused (``_head_started_sooner``): ``ray.init`` on an idle 2-core AVX2 host took
3.7-4.0 s before, 1.8-2.4 s after (five alternating runs each).

The embedded Ray's workers run at the driver's priority, as Mitsuba renders at its caller's:
Ray starts workers at niceness 15 (``RAY_worker_niceness``), meant for a cluster's nodes, so a
local job yielded to every other program. With two busy processes beside it on a 2-core machine,
the farm tests' 3-frame job took 295 s instead of 21 s quiet; at niceness 0, 56 s. A
``RAY_worker_niceness`` of the caller's own is kept.

On a cluster (``address``) the job takes a seat in the cluster's queue (``farm.seat``), which
decides how many of its groups it holds; an embedded Ray is the job's own, and has no queue.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from farm import faults, signals
from farm.errors import FarmError, first_line
from farm.groups import check_fits, group_shapes
from farm.seat import Seat

if TYPE_CHECKING:
    from cluster.group import GroupShape
    from farm.planner import Plan
    from farm.scene_check import Preflight
    from farm.scheduler import RenderAhead
    from farm.spec import GroupsSpec, JobSpec
    from farm.store import FrameStore

__all__ = ["starting_ray", "start_local_ray", "RayStart", "run"]

_TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
_INIT_LOGGER = "ray._private.worker"  # says that a ray.init outside the main thread sets no SIGTERM handler
_DASHBOARD_DEPS = "ray.dashboard.optional_deps"  # what Ray imports to tell a full install from a minimal one
_WORKER_NICENESS = "RAY_worker_niceness"  # the niceness Ray starts its workers at (Ray's default: 15)
# The raylet starts a Python worker a logical CPU when it starts and when the first driver
# connects, for tasks that may come; the farm's groups are actors, started on demand, so on a
# 2-core host one such worker sat idle having spent 0.3 CPU-seconds of imports beside the first
# tasks (16 frames of orbit.xml, warm: 7.94 s against 8.17 s, medians of 6 alternating runs).
_NO_PRESTART = ("RAY_enable_worker_prestart", "RAY_prestart_worker_first_driver")


def start_local_ray(num_cpus: int) -> None:
    """``ray.init`` of a new embedded, minimal Ray with ``num_cpus`` logical CPUs (see above)."""
    import ray  # here, not at the top: in the thread that starts Ray, beside the driver's other imports

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault(_WORKER_NICENESS, "0")  # (read when the raylet starts)
    for name in _NO_PRESTART:
        os.environ.setdefault(name, "0")
    logging.getLogger(_TOKEN_NOTICE_LOGGER).setLevel(logging.ERROR)
    saved = sys.modules.get(_DASHBOARD_DEPS)
    # An import of it now raises ImportError: a minimal node. (None in sys.modules is Python's way to make an
    # import fail; typeshed's sys.modules holds modules only.)
    sys.modules[_DASHBOARD_DEPS] = None  # type: ignore[assignment]
    idle = _unused_ports_can_be_told()  # (else the raylet waits for the agent's ports, and the agent for the API server)
    told = threading.Event()  # set once the ports are told, before the raylet's command, the agent's with it, is made
    try:
        with _head_without(_UNUSED_HEAD_PROCESSES + (("start_api_server",) if idle else ())), \
                _python_services(_AGENT_NICENESS, idle_agent=told), _head_started_sooner(api_server=not idle, told=told):
            # "local": always a new embedded Ray, never a cluster that happens to run on this machine.
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.ERROR, configure_logging=False)
    except (FarmError, OSError):  # (an OSError of the environment is named where it is caught)
        raise
    except Exception as e:  # Ray's own, e.g. a raylet that gave up waiting for its agents on a swamped host
        logs = os.path.join(faults.ray_temp_dir(), "session_latest", "logs")
        raise faults.EnvironmentFault(f"the embedded Ray did not start: {first_line(e)} (Ray's logs: {logs})") from e
    finally:
        if saved is None:
            del sys.modules[_DASHBOARD_DEPS]
        else:
            sys.modules[_DASHBOARD_DEPS] = saved


# The head's processes that a cluster needs and an embedded Ray, the job's own, does not: the
# autoscaler's monitor, which leaves on SIGTERM only after the second of grace ``ray.shutdown``
# gives each process (1.0 of a shutdown's 1.35 s), and the log monitor, which sends the workers'
# log lines to drivers that forward them (``log_to_driver``: the farm's do not; the lines stay in
# Ray's session logs). Ray has no option for either: its head starts them through these methods
# of its Node, left out while the embedded Ray starts. A Ray that renamed one starts it as
# before. (The API server is left out only with the idle agent, ``_IDLE_AGENT``: Ray's own
# agent, without it, asks for its address once a second and logs a traceback each time, some
# 1.5 MB of Ray's logs an hour.)
_UNUSED_HEAD_PROCESSES = ("start_monitor", "start_log_monitor")

# Where the raylet is told its dashboard agent's ports up front (``_agent_ports_unused``), that
# agent serves nothing an embedded Ray uses: a minimal agent's gRPC server answers the API server
# and a cluster's tools (``ray logs``, the state API, the jobs API), none of which the farm calls
# on the job's own Ray. Yet the raylet needs a process there: it ends itself when its agent
# ends (its agent manager's fate sharing). So this stands in: a Python without site packages
# that sleeps until its parent, the raylet, is gone (then it ends within a second, as Ray's own
# agent ends with its raylet), and nothing else. Ray's API server, whose one client the agent
# was, is not started then either (``_head_without``). The two had cost a 16-frame job of
# examples/orbit.xml on 2 cores 3.3 of its 26 CPU-seconds (imports, then polling each other).
_IDLE_AGENT = ("'the embedded Ray, farm.session: an idle dashboard agent'; import os, time; p = os.getppid(); "
               "all(time.sleep(1) or True for _ in iter(lambda: os.getppid() == p, False))")

# Otherwise Ray's API server starts at this niceness above the driver's. Its start-up is some
# CPU-seconds of imports, and a local job's first minutes belong to the compile of its work unit
# (``farm.scene_check``), which runs beside Ray's start: on 2 cores it took 7.8 s of wall time for
# 5.5 s alone. The raylet and the workers, which render, keep the driver's priority (see above),
# and so do the agents, whose ports the raylet waits for at most 15 s and then aborts: niced on a
# busy host, the runtime-env agent missed that (six busy processes on 2 cores: three starts of
# three failed; a CI run's job lost it once).
_AGENT_NICENESS = 10
_NICED_SERVICES = ("dashboard",)  # (Ray's PROCESS_TYPE_DASHBOARD: the API server)
_DASHBOARD_AGENT = "dashboard_agent"  # (Ray's PROCESS_TYPE_DASHBOARD_AGENT)


def _python_services(niceness: int, idle_agent: threading.Event) -> contextlib.AbstractContextManager[None]:
    """While the block runs, Ray's dashboard agent started as ``_IDLE_AGENT`` where ``idle_agent``
    is set when Ray builds its command (the raylet was told its ports: ``_head_started_sooner``;
    Ray appends the agent's script and arguments, which it ignores), and its Python services of
    ``_NICED_SERVICES`` started under ``nice`` (where it is there to start them): Ray builds
    their command lines, and no worker's, with this function of its, whose first argument names
    the service."""
    from ray._private import services

    nice = shutil.which("nice")

    def started(build: Callable[..., list[str]]) -> Callable[..., list[str]]:
        def command(component: str, *args: Any, **kwargs: Any) -> list[str]:
            if idle_agent.is_set() and component == _DASHBOARD_AGENT:
                return [sys.executable, "-S", "-I", "-c", _IDLE_AGENT]
            line = build(component, *args, **kwargs)
            return [nice, "-n", str(niceness), *line] if nice and component in _NICED_SERVICES else line
        return command

    return _replaced(services, {"_build_python_executable_command_memory_profileable": started})


def _head_started_sooner(api_server: bool = True,
                         told: threading.Event | None = None) -> contextlib.AbstractContextManager[None]:
    """Ray's head node with its raylet started beside its API server (``api_server``: where it
    starts one) rather than after it, and told up front the ports its minimal dashboard agent
    leaves unused (``_agent_ports_unused``; ``told`` is set where they were, before the
    raylet's command is made: only then may the agent idle, for the raylet waits for ports
    that nobody told it).

    ``Node.start_api_server`` starts the server and polls until it has published its address
    (its start-up of imports: 1.2 s of ``ray.init``'s 3.5 s on an idle 2-core AVX2 host); here it
    runs in a thread of its own, waited for once the raylet has started, so the node's record of
    its processes is complete before the node goes on, as before. That thread then lives as long
    as the server: Ray's processes die with the thread that started them (``RayStart``)."""
    from ray._private import node, ray_constants

    starts: list[tuple[threading.Event, list[BaseException]]] = []

    def in_background(start: Callable[..., None]) -> Callable[..., None]:
        def begin(self: Any, **kwargs: Any) -> None:
            done, failed = threading.Event(), []

            def serve() -> None:
                try:
                    start(self, **kwargs)
                except BaseException as e:  # raised in the thread that waits for it
                    failed.append(e)
                finally:
                    done.set()
                processes = getattr(self, "all_processes", {}).get(ray_constants.PROCESS_TYPE_DASHBOARD, ())
                for process in processes:
                    process.process.wait()
                if not processes and not failed:  # a Ray that records it elsewhere: never end first
                    threading.Event().wait()

            threading.Thread(target=serve, name="ray-api-server", daemon=True).start()
            starts.append((done, failed))
        return begin

    def beside(start: Callable[..., None]) -> Callable[..., None]:
        def begin(self: Any, *args: Any, **kwargs: Any) -> None:
            try:
                if _agent_ports_unused(self) and told is not None:
                    told.set()
                start(self, *args, **kwargs)
            finally:
                failures: list[BaseException] = []
                while starts:
                    done, failed = starts.pop()
                    done.wait()
                    failures += failed
            if failures:  # (after the raylet's own error, if it raised one: that one is raised)
                raise failures[0]
        return begin

    replacements: dict[str, Callable[[Any], Any]] = {"start_ray_processes": beside}
    if api_server:
        replacements["start_api_server"] = in_background
    return _replaced(node.Node, replacements)


def _agent_ports_unused(node: Any) -> bool:
    """The ports of a minimal node's dashboard agent that nothing of an embedded Ray uses, written
    for the raylet as unused (-1) before it starts: the agent's HTTP server and metrics agent,
    which a minimal agent does not start (it writes -1 for them itself, later), and its metrics
    exporter's, whose Prometheus endpoint only a cluster's scraper would read. The raylet waits
    for all three before it registers the node, and the agent writes the last of them only
    after importing every dashboard module it finds (0.7 s of its 1.7 s start-up, which
    ``ray.init`` waited for on an idle 2-core AVX2 host); the runtime-env agent's port, which
    workers need, it still waits for. Returns whether it wrote them."""
    from ray import _raylet

    session_dir, node_id = getattr(node, "_session_dir", None), getattr(node, "_node_id", None)
    if not _unused_ports_can_be_told() or session_dir is None or node_id is None:
        return False  # a Ray that changed these: it waits for its agent, as it would
    persist = getattr(_raylet, "persist_port")  # (Ray's stubs leave it out)
    for name in _UNUSED_PORT_NAMES:
        persist(session_dir, node_id, getattr(_raylet, name), -1)
    return True


_UNUSED_PORT_NAMES = ("DASHBOARD_AGENT_LISTEN_PORT_NAME", "METRICS_AGENT_PORT_NAME", "METRICS_EXPORT_PORT_NAME")


def _unused_ports_can_be_told() -> bool:
    """Whether this Ray lets ``_agent_ports_unused`` tell the raylet its agent's ports."""
    from ray import _raylet

    return hasattr(_raylet, "persist_port") and all(hasattr(_raylet, n) for n in _UNUSED_PORT_NAMES)


def _head_without(methods: tuple[str, ...]) -> contextlib.AbstractContextManager[None]:
    """Ray's head node starting none of the processes that ``methods`` (of Ray's Node) start."""
    from ray._private import node

    return _replaced(node.Node, {name: lambda _: _start_nothing for name in methods})


@contextlib.contextmanager
def _replaced(owner: object, replacements: dict[str, Callable[[Any], Any]]) -> Iterator[None]:
    """Attributes of ``owner`` (a Ray class or module) replaced while the block runs, each by
    ``replacements[name](its original)``, and restored after. A name it lacks (a Ray that renamed
    it) is left alone: Ray then does as it would."""
    kept = {name: vars(owner)[name] for name in replacements if name in vars(owner)}
    for name, original in kept.items():
        setattr(owner, name, replacements[name](original))
    try:
        yield
    finally:
        for name, original in kept.items():
            setattr(owner, name, original)


def _start_nothing(*args: object, **kwargs: object) -> None:
    return None


def _start(address: str | None, groups: GroupsSpec | None) -> None:
    import ray

    if address is None:
        members = groups.count * groups.hosts if groups is not None else 1
        start_local_ray(max(os.cpu_count() or 1, members))
    else:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)


def _shutdown() -> None:
    import ray

    ray.shutdown()


def _exit_on_sigterm() -> None:
    """What ``ray.init`` does in the main thread, for one it runs in another: a SIGTERM exits
    through Python (``finally`` blocks, then Ray's own shutdown at exit), and Ray's note that it
    set no handler is left unsaid."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
    logging.getLogger(_INIT_LOGGER).addFilter(_not_the_sigterm_note)


def _not_the_sigterm_note(record: logging.LogRecord) -> bool:
    return "SIGTERM handler is not set" not in record.getMessage()


class RayStart:
    """Ray starting in a background thread: ``wait()`` until it is up (its error, if it failed),
    ``close()`` to shut it down. The thread lives until then: Ray's processes are tied to the
    thread that started them (Linux's parent-death signal is per thread), so it must not end
    first. ``eager=False`` starts Ray at the first ``wait()`` instead, in the thread that waits."""

    def __init__(self, address: str | None = None, groups: GroupsSpec | None = None, eager: bool = True):
        self.error: BaseException | None = None
        self.closed = False
        self.eager = eager
        self._where = (address, groups)
        self._up, self._done = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        if eager:
            _exit_on_sigterm()
            self._thread = threading.Thread(target=self._hold, name="ray-start", daemon=True)
            self._thread.start()

    def _start(self) -> None:
        try:
            _start(*self._where)
        except BaseException as e:  # handed to the thread that waits
            self.error = e
        self._up.set()

    def _hold(self) -> None:
        self._start()
        self._done.wait()
        if self.error is None:
            _shutdown()

    def wait(self) -> None:
        if self._thread is None and not self._up.is_set():
            self._start()
        self._up.wait()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Wait for a start under way to end (it cannot be cut short), then shut Ray down (once)."""
        if self.closed:
            return
        self.closed = True
        if self._thread is not None:
            self._done.set()
            self._thread.join()
        elif self._up.is_set() and self.error is None:
            _shutdown()


def _render_ahead(start: RayStart, preflight: Preflight | None, shapes: list[GroupShape]) -> RenderAhead | None:
    """``preflight`` rendering while ``start`` goes on, where it renders and Ray starts in a
    thread of its own; the driver's signals are taken now and again once Ray is up (its core
    worker takes SIGTERM when it starts), so that a stop meanwhile stops the run as it would later.
    Where the job's groups (``shapes``, local) are one group of one member, the child, which runs
    as that member would on the same devices, stands in for it (``RenderAhead.stands_in``) and
    keeps the driver's priority."""
    from farm.scheduler import RenderAhead

    if preflight is None or not preflight.renders or not start.eager or start.closed:
        return None
    signals.take()

    def ray() -> None:  # (in the driver's thread)
        start.wait()
        signals.take()  # back from Ray's core worker, which took SIGTERM when it started

    stands_in = len(shapes) == 1 and shapes[0].hosts == 1
    return RenderAhead(send=functools.partial(preflight.send, yields=not stands_in), answer=preflight.answer,
                       stop=preflight.stop, compiled=preflight.compiled_within, done=preflight.done, ray=ray,
                       stands_in=stands_in)


@contextlib.contextmanager
def starting_ray(address: str | None = None, groups: GroupsSpec | None = None,
                 eager: bool = True) -> Iterator[RayStart]:
    """Ray for a ``with`` block, started in the background: local (``address`` None) with room
    for ``groups`` (a ``GroupsSpec``: ``count * hosts`` members), or the cluster at ``address``.
    Yields the ``RayStart``; pass it to ``run``. ``eager=False``: only once ``run`` needs it (a
    caller that may well stop before, such as tests of refused input)."""
    start = RayStart(address, groups, eager)
    try:
        yield start
    finally:
        start.close()


def run(spec: JobSpec, store: FrameStore, address: str | None = None, show_progress: bool = True,
        log: Callable[[str], object] = print, ray_start: RayStart | None = None,
        ready: Callable[[], object] | None = None, say: Callable[[str], object] | None = None,
        compiler: int | None = None, preflight: Preflight | None = None) -> Plan:
    """Render what ``store`` lacks, on an embedded local Ray or the cluster at ``address`` (or the
    Ray of ``ray_start``, a ``RayStart`` of ``starting_ray``, already on its way); the run's
    phases from the start of Ray on are in the store's progress notes (``farm.progress``).
    ``ready()``: waited for once the groups have formed, before the first task goes out (the
    preflight's compilation, ``farm.scene_check.Preflight.wait``), made meanwhile by the process
    ``compiler`` on this host (``farm.scheduler.run_job``). ``say``: what says each phase
    without the bar (default ``log``; the phases are in the store's log either way).
    ``preflight``: that process, where it renders too (``Preflight.renders``): with Ray starting
    in its own thread (``RayStart.eager``), it renders the job's first tasks meanwhile
    (``farm.scheduler.RenderAhead``)."""
    from farm.progress import RunProgress
    from farm.scheduler import run_job

    progress = RunProgress(store, show_progress, say=say or log)
    try:
        progress.phase("starting Ray")
        ray = contextlib.nullcontext(ray_start) if ray_start else starting_ray(address, spec.groups, eager=False)
        with ray as start:
            shapes = group_shapes(spec, address is None)
            ahead = _render_ahead(start, preflight, shapes) if address is None else None
            if ahead is None:
                start.wait()
                signals.take()  # back from Ray's core worker, which took SIGTERM when it started
            seat = None
            if address is not None:  # (a local Ray is started for the job's groups: farm.job.check_local)
                import ray as ray_api
                check_fits(shapes, [node["Resources"] for node in ray_api.nodes() if node["Alive"]])
                seat = Seat(store.url, spec.groups.priority, shapes, store.paused, log)  # a shared cluster's queue
            try:
                return run_job(spec, store, shapes, log=log, progress=progress, ready=ready, seat=seat,
                               compiler=compiler if address is None else None, ahead=ahead)
            finally:
                if ahead is not None:  # (a run with nothing to render: the child is not kept waiting)
                    ahead.done()
    except BaseException as e:
        # A full or read-only store is named (the run's uncommitted data is gone by now, which frees space).
        fault = faults.named(e, store.url)
        if not progress.ended:  # Ray did not start, or the run stopped outside the scheduler's loop
            progress.fail_quietly(fault or e)
        if fault is not None:
            raise fault from None
        raise
    finally:
        progress.close()
