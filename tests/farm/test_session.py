"""The driver's Ray session: the embedded Ray starts in the background, minimal, its workers at
the driver's priority, and stays up until it is closed (``farm.session``)."""
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest
import ray
from ray import _raylet
from ray._private import ray_constants

from farm import faults, session
from tests.helpers.hang_guard import hang_guard


def test_a_lazy_start_that_is_never_waited_on_starts_no_ray():
    with session.starting_ray(eager=False) as start:
        pass
    assert start.closed and not ray.is_initialized()


def test_a_failed_start_is_raised_by_wait_as_one_line_and_leaves_the_dashboard_module_importable(monkeypatch):
    def refuse(**kw):
        assert sys.modules[session._DASHBOARD_DEPS] is None  # hidden while ray.init runs
        raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "init", refuse)
    with session.starting_ray() as start:
        # Ray's words, said as the environment's fault (exit 1) with where its logs are, not as a bug of ours.
        with pytest.raises(faults.EnvironmentFault, match=r"^the embedded Ray did not start: The current node timed out "
                           r"during startup\. This could happen because \.\.\. \(Ray's logs: .*/ray/session_latest/logs\)$"):
            start.wait()
    assert sys.modules.get(session._DASHBOARD_DEPS, sys) is not None


@pytest.mark.parametrize("told", [True, False])
def test_the_dashboard_agent_idles_where_the_raylet_is_told_its_ports(monkeypatch, told):
    """The raylet aborts when an agent it waits for is slow to say its ports (15 s): the agents
    are never niced, and the dashboard agent is an idle process where its ports are told up front
    (the API server, niced, is then not started)."""
    from ray._private import services
    assert session._unused_ports_can_be_told()  # (this Ray's: the embedded Ray's test below relies on it)
    monkeypatch.setattr(session, "_unused_ports_can_be_told", lambda: told)
    ports_told = threading.Event()
    if told:
        ports_told.set()
    with session._python_services(7, idle_agent=ports_told):
        build = services._build_python_executable_command_memory_profileable
        lines = {c: build(c, "s") for c in (ray_constants.PROCESS_TYPE_DASHBOARD, ray_constants.PROCESS_TYPE_DASHBOARD_AGENT,
                                           ray_constants.PROCESS_TYPE_RUNTIME_ENV_AGENT)}
    niced = {c for c, line in lines.items() if line[1:3] == ["-n", "7"]}
    assert niced == {"dashboard"}, lines
    idle = lines["dashboard_agent"] == [sys.executable, "-S", "-I", "-c", session._IDLE_AGENT]
    assert idle == told and lines["runtime_env_agent"][0] == sys.executable, lines
    # A node whose session or id this Ray keeps elsewhere is told nothing: its agent stays Ray's own.
    assert session._agent_ports_unused(object()) is False


def test_the_idle_agent_ends_once_its_parent_has_ended():
    """As Ray's agent ends with its raylet (killed, say), and not before it (the raylet would end too)."""
    parent = subprocess.run([sys.executable, "-c", "import subprocess, sys, time; "
                             f"agent = subprocess.Popen([sys.executable, '-S', '-I', '-c', {session._IDLE_AGENT!r}]); "
                             "print(agent.pid, flush=True); time.sleep(2); print(agent.poll(), flush=True)"],
                            capture_output=True, text=True, timeout=60)
    pid, alive = parent.stdout.split()
    assert alive == "None", parent.stdout + parent.stderr  # still there after 2 s, its parent alive
    deadline = time.monotonic() + 5
    while _running(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(int(pid))  # (it looks once a second)


def _running(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # (an orphan's end, where nothing reaps it)
    except psutil.NoSuchProcess:
        return False


def _agent_command():
    """How this Ray's raylet starts its dashboard agent."""
    raylet = ray._private.worker._global_node.all_processes["raylet"][0].process
    return next(a for a in raylet.args if a.startswith("--dashboard_agent_command="))


def test_the_embedded_ray_starts_in_the_background_minimal_and_outlives_the_thread_that_waited(monkeypatch):
    monkeypatch.delenv(session._WORKER_NICENESS, raising=False)
    with hang_guard(120), session.starting_ray() as start:
        start.wait()
        assert ray.is_initialized() and sys.modules.get(session._DASHBOARD_DEPS, sys) is not None
        # Nor the autoscaler's monitor or the log monitor, which a cluster needs and the job's own
        # Ray does not, and Ray's Node starts them again for a Ray started after; nor the API
        # server, whose one client, the dashboard agent, idles (``_IDLE_AGENT``).
        node = ray._private.worker._global_node
        assert not {"monitor", "log_monitor", "dashboard"} & set(node.all_processes), sorted(node.all_processes)
        assert {"raylet", "gcs_server"} <= set(node.all_processes)
        from ray._private import services
        from ray._private.node import Node
        assert all(Node.__dict__[name] is not session._start_nothing
                   for name in (*session._UNUSED_HEAD_PROCESSES, "start_api_server"))
        assert session._IDLE_AGENT in _agent_command()
        # The raylet at the driver's priority, and the runtime-env agent, whose port the raylet
        # waits for 15 s at most; the idle agent spends nothing; and Ray's command builder restored.
        raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
        titles = {p: " ".join(p.cmdline()).strip() for p in raylet.children()}  # (an agent's: "ray::RuntimeEnvAgent")
        agents = {title: p.nice() for p, title in titles.items() if title.endswith("Agent")}
        assert agents == {"ray::RuntimeEnvAgent": os.nice(0)}, titles
        idle = [p for p, title in titles.items() if session._IDLE_AGENT in title]
        assert len(idle) == 1 and sum(idle[0].cpu_times()[:2]) < 0.5, titles
        assert raylet.nice() == os.nice(0)
        assert services._build_python_executable_command_memory_profileable(ray_constants.PROCESS_TYPE_DASHBOARD, "s")[0] == sys.executable
        # Ray's processes die with the thread that started them: it must still be there, long after.
        assert ray.get(ray.remote(lambda: 6 * 7).remote(), timeout=60) == 42
        assert idle[0].is_running() and not any(t.name == "ray-api-server" for t in threading.enumerate())
        # The ports the minimal agent leaves unused, told to the raylet before the agent said them.
        for name in ("DASHBOARD_AGENT_LISTEN_PORT_NAME", "METRICS_AGENT_PORT_NAME"):
            port_file = os.path.join(node.get_session_dir_path(), _raylet.get_port_filename(node.node_id, getattr(_raylet, name)))
            assert open(port_file).read().strip() == "-1", name
        # Its workers at the driver's priority (Ray's own default, 15, yields to every other program).
        assert ray.get(ray.remote(lambda: os.nice(0)).remote(), timeout=60) == os.nice(0)
    assert start.closed and not ray.is_initialized()
