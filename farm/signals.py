"""SIGTERM and SIGHUP stop a driver as Ctrl-C does: the way service managers, containers and a
closed terminal stop a process.

Each is turned into ``Stopped``, a ``KeyboardInterrupt``, so every path that lets a Ctrl-C go
cleanly (the groups torn down, the run's state written, the lease released) lets these go too;
the process then exits 128 + the signal's number (143, 129). Ray turns an exception raised while
it waits (``ray.wait``) into a plain KeyboardInterrupt, so what stopped the process is asked of
``stopped_by``, not of the exception's type. Ray's core worker installs its own
handler for SIGTERM when it starts (it prints a native stack and exits), so the driver takes the
signals back once Ray is up (``take``, called again there), whoever installed a handler first.

A stop sent to the whole process group (a service manager's, a container's) also stops Ray's own
processes, and the driver's calls into Ray may then wait a minute for a Ray that is gone. So a
stop has a grace of ``GRACE_S``: past it, what was registered with ``on_stop`` runs (the lease
released, the one line said) and the process exits with the signal's code at once.
"""
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["Stopped", "SIGNALS", "GRACE_S", "take", "on_stop", "done", "stopped_by", "how", "state", "exit_code"]

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
GRACE_S = 10.0
_late: list[Callable[[], object]] = []  # what a stop past its grace still does
_lock = threading.Lock()
_received: list[int] = []  # the stopping signals received


class Stopped(KeyboardInterrupt):
    """The driver was asked to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)


def stopped_by() -> str | None:
    """The name of the signal that stopped this process (``SIGTERM``), or None (none did; a
    KeyboardInterrupt is then Ctrl-C's)."""
    return signal.Signals(_received[0]).name if _received else None


def how() -> str:
    """How a KeyboardInterrupt came, for a message: "stopped by SIGTERM", or "interrupted" (Ctrl-C)."""
    name = stopped_by()
    return f"stopped by {name}" if name else "interrupted"


def state() -> str:
    """The run's state after a KeyboardInterrupt: "stopped" (a signal's) or "interrupted" (Ctrl-C's)."""
    return "stopped" if stopped_by() else "interrupted"


def exit_code() -> int:
    """The exit code of a stop: 128 + its signal's number (130, Ctrl-C's, when none was received)."""
    return 128 + (_received[0] if _received else signal.SIGINT)


def _stop(signum: int, _frame: FrameType | None) -> None:
    _received.append(signum)
    timer = threading.Timer(GRACE_S, _exit_late)
    timer.daemon = True
    timer.start()
    raise Stopped(signum)


def _exit_late() -> None:
    with _lock:
        late, _late[:] = list(_late), []
    for callback in late:
        try:
            callback()
        except Exception:  # what can be done is done; the exit must come
            pass
    os._exit(exit_code())


def on_stop(callback: Callable[[], object]) -> None:
    """Run ``callback`` if a stop outlives its grace (before the forced exit)."""
    with _lock:
        _late.append(callback)


def done() -> None:
    """The command has said its last line and released what it held: a late stop only exits."""
    with _lock:
        _late.clear()


def take() -> None:
    """Make SIGTERM and SIGHUP raise ``Stopped`` in this process (only from the main thread:
    Python runs handlers there; elsewhere this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        signal.signal(signum, _stop)
