"""A job's preflight, in a child process of the driver (``python -m cluster.preflight``): its scene
checked as the workers will load it, then, while Ray starts, its work unit compiled into the
persistent compilation cache, so that the members load it instead of compiling it.

The driver never imports JAX, and Ray and a new store take seconds: the scene is checked first,
at the job's first and last frames, so that a scene the workers would refuse (an unsupported
plugin, a bad parameter, a broken mesh) is a one-line error at once. The process then runs as a
member of the job's groups would (the members' environment, ``cluster.bootstrap``; the member's
own code, ``cluster.member.Member.compile``), so the program it compiles is the one they look up.

Protocol, one JSON object a line on stdin:

1. ``{"scene": {...}, "env": {...} | null}``: ``scene`` as ``tracer.io.validate`` reads it; ``env``
   the members' environment (``cluster.group.GroupShape.env``), or null to check only. Answer on
   stdout: ``checked``, or exit 1 with the scene's one-line error on stderr.
2. ``{"task": ...}`` (a ``cluster.task.TileTask`` as ``task_json`` writes it): compile its work
   unit and answer ``compiled SECONDS``; an empty line or the end of stdin: exit 0.
3. Then, any number of times, ``{"render": ..., "yield": true|false}`` (a whole ``TileTask``,
   its ``out`` a slot of ``farm.results``, pickled and in base64: from the driver that started
   this process): render it as a member would and answer ``{"crc": ..., "seconds": ...,
   "renderer": ..., "compiles": ...}`` (``compiles``: ``Member.compile_stats``), one JSON line
   (``farm.scheduler.RenderAhead``: the job's first tasks while Ray starts and the groups form,
   or all of them where it stands in for the job's one group). A first such line with ``yield``
   (the default) renices every thread of the process to 19, so that Ray's start and the groups'
   go first; without it the process keeps the driver's priority, as a member would. An empty
   line or the end of stdin: exit 0; a task's error: exit 1, its traceback on stderr.
"""
import base64
import dataclasses
import json
import os
import pickle
import sys
import time
from typing import Any

from cluster.task import SceneRef, TileTask, TileWritten

__all__ = ["task_json", "task_from_json", "main"]


def task_json(task: TileTask) -> dict[str, Any]:
    """A TileTask without its accumulator or output (a work unit's shape and scene) as JSON."""
    return dataclasses.asdict(dataclasses.replace(task, start=None, out=None))  # the scene as a dict too


def task_from_json(fields: dict[str, Any]) -> TileTask:
    scene = dict(fields["scene"])
    scene["params"] = tuple((name, value) for name, value in scene["params"])
    scene["resolution"] = tuple(scene["resolution"]) if scene.get("resolution") else None
    scene["files"] = tuple((path, sha256) for path, sha256 in scene.get("files", ()))
    return TileTask(**dict(fields, scene=SceneRef(**scene)))


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> int:
    from tracer.errors import SceneError
    from tracer.io.validate import check_job

    job = json.loads(sys.stdin.readline())
    env = job.get("env")
    if env is not None:  # JAX starts as in a member, before anything imports it
        from cluster import bootstrap
        bootstrap.start_jax(env)
    try:
        check_job(job["scene"])
    except SceneError as e:
        print(str(e), file=sys.stderr)
        return 1
    _say("checked")
    line = sys.stdin.readline().strip()
    if not line or env is None:
        return 0
    from cluster.member import Member

    t0 = time.perf_counter()
    member = Member(0, 1, env)
    renderer = member.initialize(None, timeout_s=60, heartbeat_s=20)["renderer"]
    member.compile(task_from_json(json.loads(line)["task"]))
    _say(f"compiled {time.perf_counter() - t0:.2f}")
    for k, line in enumerate(iter(sys.stdin.readline, "")):
        if not line.strip():
            break
        asked = json.loads(line)
        if k == 0 and asked.get("yield", True):
            _renice(19)
        task = pickle.loads(base64.b64decode(asked["render"]))  # (the driver's own, trusted)
        written = member.render(task)
        assert isinstance(written, TileWritten)  # (rank 0 of one, its task with a slot)
        _say(json.dumps({"crc": written.receipt, "seconds": written.seconds, "renderer": renderer,
                         "compiles": member.compile_stats()}))
    return 0


def _renice(niceness: int) -> None:
    """Every thread of this process (XLA's pools included; threads made later inherit it) at
    ``niceness``: on Linux a niceness is a thread's, and ``os.nice`` sets the caller's alone."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # (not Linux)
        threads = [0]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except OSError:  # a thread that ended meanwhile
            pass


if __name__ == "__main__":
    sys.exit(main())
