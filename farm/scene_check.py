"""The job's preflight: its scene checked as the workers will load it, before Ray is up or a store
is made, then its work unit compiled while Ray starts (``cluster.preflight``, in a child process:
the driver never imports JAX).

``tracer.io.scene_info.describe`` reads a scene without JAX but does not build it, so an
unsupported plugin or a bad parameter would otherwise surface only in a worker, after Ray started
and the store was made. And a local job's first task would otherwise wait for its members to
compile the work unit after Ray and the group are up (on a small job, longer than its rendering):
the same child, started in the members' environment, compiles it into the persistent compilation
cache meanwhile, and the run dispatches its first task once that is done. The groups' members
load their first scene meanwhile and wait for that program (``compiling``, the child's pid;
``farm.scheduler``'s ``prepare``), so that its load is not the first task's.

Asked to (``compile(task, ahead=True)``), the child then renders the job's first tasks itself
while Ray starts and the groups form (``send``, ``answer``; ``farm.scheduler.RenderAhead``), one at
a time, writing each to its slot as a member would, until a group has answered (``done``).
"""
from __future__ import annotations

import base64
import importlib.util
import json
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from farm.errors import FarmError, SceneFileError

if TYPE_CHECKING:
    from cluster.task import TileTask
    from farm.spec import JobSpec

__all__ = ["Preflight"]


class Preflight:
    """The preflight child of ``spec``; ``env``: the members' environment, where its program can
    serve them (one host per group, on this machine), else None (the scene is only checked).

    ``checked()`` waits for the check; then ``compile(task)`` asks for the work unit of ``task``'s
    shape (None: nothing more), and ``wait()`` waits for it; with ``ahead``, it then renders
    what ``send(task)`` gives it, one task at a time (each task's ``answer``) until ``done()``.
    ``close()`` stops the child."""

    def __init__(self, spec: JobSpec, env: dict[str, str] | None) -> None:
        first, last = spec.frames
        param_sets = list(dict.fromkeys([spec.params_at(first), spec.params_at(last)]))
        scene = {"path": spec.scene, "resolution": list(spec.resolution) if spec.resolution else None,
                 "accel": spec.accel, "aovs": spec.aovs, "rfilter": spec.rfilter,
                 "param_sets": [list(map(list, p)) for p in param_sets]}
        self.scene, self.env = spec.scene, env
        self.compiling: int | None = None  # the child's pid once ``compile`` asked it for a program
        self.renders = False  # whether the child takes tasks to render once compiled (``compile``'s ``ahead``)
        self._lines: queue.Queue[str] | None = None  # the child's lines after "checked" ("" at its end)
        self._compiled: bool | None = None  # whether it said "compiled" (None: not heard yet)
        self._stderr = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe no one reads while it compiles
        self._child = subprocess.Popen([sys.executable, "-m", "cluster.preflight"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=child_env())
        self._send({"scene": scene, "env": env})

    def _send(self, message: dict[str, Any] | None) -> None:
        stdin = self._child.stdin
        if stdin is None or stdin.closed:
            return
        try:
            if message is not None:
                stdin.write(json.dumps(message) + "\n")
            stdin.close() if message is None else stdin.flush()
        except (BrokenPipeError, OSError):  # the child ended: its exit status says why
            pass

    def checked(self) -> None:
        """Raise ``SceneFileError`` (the loader's one line) unless the scene loads at the job's
        first and last frames."""
        assert self._child.stdout is not None
        if self._child.stdout.readline().strip() == "checked":
            return
        code = self._child.wait()
        self._stderr.seek(0)
        lines = self._stderr.read().strip().splitlines()
        if code == 1 and lines:
            raise SceneFileError(lines[-1])
        raise FarmError(f"checking the scene {self.scene} failed (exit {code}): {(lines or ['no message'])[-1]}")

    def compile(self, task: TileTask | None, ahead: bool = False) -> None:
        """Compile the work unit of ``task``'s shape (None, or no ``env``: nothing more);
        ``ahead``: then render what ``send`` gives, until ``done``."""
        if task is None or self.env is None:
            self._send(None)
            return
        from cluster.preflight import task_json
        self._send({"task": task_json(task)})
        self.renders = ahead
        if not ahead:
            self._send(None)
        self.compiling = self._child.pid
        self._listen()

    def _listen(self) -> None:
        """From now on the child's lines are read in a thread of their own, into ``_lines``."""
        stdout = self._child.stdout
        assert stdout is not None
        lines: queue.Queue[str] = queue.Queue()
        self._lines = lines

        def read() -> None:
            try:
                for line in iter(stdout.readline, ""):
                    lines.put(line)
            except (OSError, ValueError):  # closed by ``close``
                pass
            lines.put("")  # its end

        threading.Thread(target=read, name="preflight-lines", daemon=True).start()

    def _next_line(self, timeout_s: float) -> str | None:
        """The child's next line ("" at its end), or None after ``timeout_s``."""
        assert self._lines is not None
        try:
            return self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def compiled_within(self, timeout_s: float) -> bool | None:
        """Whether the child compiled the work unit asked for: True, False (it ended, or was
        asked for none), or None (not yet, after waiting ``timeout_s``)."""
        if self._compiled is None and self._lines is None:
            self._compiled = False
        if self._compiled is None:
            line = self._next_line(timeout_s)
            if line is None:
                return None
            self._compiled = line.startswith("compiled")
        return self._compiled

    def wait(self, timeout_s: float = 600) -> None:
        """Wait for the compilation asked for, if any: for the child's word that it is done (the
        program is in the cache then) or its end, not for its exit, which then still takes JAX's
        and Embree's teardown (0.7 s on a 2-core host, a cold job's first frame later by as much).
        Its failure is not the job's: a member then compiles the program itself."""
        if self.compiled_within(timeout_s) is None:
            self.close()

    def send(self, task: TileTask, yields: bool = True) -> bool:
        """Have the child render ``task`` (its ``out`` a slot), once it has said that it compiled
        (``compiled_within``); whether it took it (``answer`` then says how it went). ``yields``
        (read with the first task): the child renders at the lowest priority, so that Ray's start
        and the groups' go first; else at the driver's, as a member would."""
        if not self.renders or self._compiled is not True:
            return False
        self._send({"render": base64.b64encode(pickle.dumps(task)).decode(), "yield": yields})
        return True

    def answer(self, timeout_s: float) -> tuple[bool, dict[str, Any] | None]:
        """(whether the task sent last has ended, its answer): after up to ``timeout_s``, (False,
        None) while it renders; (True, its answer: ``crc``, the slot's receipt, ``seconds``,
        ``renderer``, the child's software as a member's), or (True, None) where it could not
        (it failed or ended: it takes no more)."""
        line = self._next_line(timeout_s)
        if line is None:
            return False, None
        try:
            answer = json.loads(line) if line else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self.stop()
            return True, None
        return True, answer

    def stop(self) -> None:
        """Stop the child where it is (a task it renders then is never written whole)."""
        self.renders = False
        self.close()

    def done(self) -> None:
        """No more tasks: the child exits (its exit is not waited for)."""
        self.renders = False
        self._send(None)

    def close(self) -> None:
        """Stop the child (harmless when it has ended)."""
        if self._child.poll() is None:
            self._child.kill()
            self._child.wait()
        for stream in (self._child.stdin, self._child.stdout, self._stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def __enter__(self) -> Preflight:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def child_env():
    """This process's environment, on the CPU, importing the same packages as this process would."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(importlib.util.find_spec("tracer").origin))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    return env
