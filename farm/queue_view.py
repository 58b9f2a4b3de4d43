"""The web monitor's view of a shared cluster's queue (``farm serve --address``).

The monitor watches the queue as a user would: ``farm queue --address A --json --watch`` in a
child process, one JSON line every 2 s, the latest kept. A child, not Ray in the server: a Ray
driver's process is ended when its cluster's node goes away, and the monitor must outlive the
cluster it watches; a child also keeps Ray's threads and logs out of the server's. One child the
whole time (not one a page): every ``ray.init`` is a job in the cluster's records.

It only reads: ``farm queue`` joins a cluster that runs (an address where none does is its
one-line error, never a Ray started) and finds the queue's actor by name (never starting one).
A child that ends (the cluster gone, a wrong address) leaves its last line as the view's error;
a page after ``RETRY_S`` starts another. A page never waits on the child, but for the first
answer (at most ``FIRST_S``).
"""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import threading
import time

from farm.queue import state

__all__ = ["QueueView", "QueueWatch", "FIRST_S", "RETRY_S"]

FIRST_S = 20.0  # how long the first page waits for the queue's first answer (importing and joining Ray)
RETRY_S = 10.0  # seconds after a child ended before a page starts another


@dataclasses.dataclass(frozen=True)
class QueueView:
    """The queue as last seen: its rows (``farm queue --json``'s, highest priority and first
    queued first, each with its ``state``), or the one line that says why it cannot be read."""

    address: str | None  # the cluster's Ray address (None: the monitor was given none)
    rows: tuple[dict[str, object], ...] = ()
    error: str | None = None
    seen_at: float | None = None  # Unix time of the rows (None: no answer yet)

    def to_json(self) -> dict[str, object]:
        return {"address": self.address, "rows": list(self.rows), "error": self.error, "seen_at": self.seen_at}


class QueueWatch:
    """``farm queue --watch`` of the cluster at ``address`` in a child process, started by the
    first ``view()``; ``close()`` ends it."""

    def __init__(self, address: str):
        self.address = address
        self.command = [sys.executable, "-m", "farm.cli", "queue", "--address", address, "--json", "--watch"]
        self.lock = threading.Condition()
        self.child: subprocess.Popen[str] | None = None
        self.ended_at = -1e9           # time.monotonic() the last child ended
        self.seen = QueueView(address)

    def view(self) -> QueueView:
        with self.lock:
            if self.child is None and time.monotonic() - self.ended_at >= RETRY_S:
                self._start()
            if self.child is not None and self.seen.seen_at is None and self.seen.error is None:
                self.lock.wait_for(lambda: self.seen.seen_at is not None or self.seen.error is not None, FIRST_S)
            return self.seen

    def close(self) -> None:
        with self.lock:
            child, self.child = self.child, None
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()

    def _start(self) -> None:
        try:
            self.child = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
        except OSError as e:
            self.seen, self.ended_at = QueueView(self.address, error=f"cannot start `farm queue`: {e}"), time.monotonic()
            return
        threading.Thread(target=self._follow, args=(self.child,), daemon=True, name="queue-watch").start()

    def _follow(self, child: subprocess.Popen[str]) -> None:
        """Keep each line ``child`` prints: a JSON array (the rows), else what it says (its
        ``error:`` line, or its last, is the view's error once it ends)."""
        said, error = None, None
        assert child.stdout is not None
        for line in child.stdout:
            line = line.strip()
            rows = _rows(line)
            if rows is not None:
                self._set(child, QueueView(self.address, rows, None, time.time()))
            elif line.startswith("error: "):
                error = line.removeprefix("error: ")
            elif line:  # Ray's own (its log's prefix left out), or a traceback's last line
                said = re.sub(r"^\[[^]]*\] [\w.]+:\d+: ", "", line)
        said = error or said
        code = child.wait()
        with self.lock:
            if self.child is child:
                self.child, self.ended_at = None, time.monotonic()
                self.seen = QueueView(self.address, error=said or f"`farm queue` ended (exit {code})")
                self.lock.notify_all()

    def _set(self, child: subprocess.Popen[str], seen: QueueView) -> None:
        with self.lock:
            if self.child is child:
                self.seen = seen
                self.lock.notify_all()


def _rows(line: str) -> tuple[dict[str, object], ...] | None:
    """The rows of a ``farm queue --json`` line, each with its ``state``; None for any other line."""
    try:
        rows = json.loads(line) if line.startswith("[") else None
    except ValueError:
        return None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return None
    return tuple(dict(row, state=state(row)) for row in rows)
