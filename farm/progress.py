"""A run's progress as its user sees it: the phase it is in, the steady-state rate and ETA, the
bar, and the notes in the store that ``farm status`` and ``farm serve`` read from other processes.

Phases, in order (``PHASES``): ``starting Ray`` (the session), ``forming groups`` (worker
processes, JAX, ``jax.distributed``), ``compiling`` (until the first task comes back: a group's
first tasks wait on XLA), ``rendering``, ``finishing`` (the groups torn down, the last notes
written). A run whose first tasks the driver's preflight process renders while Ray starts
(``farm.scheduler.RenderAhead``) goes to ``rendering`` with the first of them, leaving out the
phases it had not reached. The notes (``FrameStore.write_progress``) hold the phase and when each phase began.

The rate counts only the steady state (``Throughput``): the first task's samples are left out
(its time is start-up and compilation), and the rate is taken over the tasks finished in the
last ``WINDOW_S`` seconds. No ETA is given until ``MIN_TASKS`` tasks have come back after the
first: before that, any figure would be start-up divided by a guess.
"""
from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from farm import signals
from farm.errors import FarmError
from farm.faults import EnvironmentFault, StoreFault
from farm.store import error_line

if TYPE_CHECKING:
    from farm.failures import Failures
    from farm.planner import Plan
    from farm.store import FrameStore

__all__ = ["PHASES", "Throughput", "RunProgress", "WINDOW_S", "MIN_TASKS", "NOTE_EVERY_S"]

PHASES = ("starting Ray", "forming groups", "compiling", "rendering", "finishing")
WINDOW_S = 30.0     # seconds of finished tasks the rate is taken over
MIN_TASKS = 3       # tasks finished after the first before a rate (and an ETA) is given
NOTE_EVERY_S = 2.0  # seconds between progress notes in the store (and checks for a cancel)


class Throughput:
    """Pixel samples per second in the steady state, and the time left at that rate.

    ``add(units, now)`` for each task that comes back (``now``: its time on any monotonic clock).
    The first task is the anchor: its units are not counted, since its time is start-up and
    compilation. The rate is over the tasks of the last ``window_s`` seconds (at least
    ``min_tasks`` of them), so a slow start is forgotten as the run goes on."""

    def __init__(self, window_s: float = WINDOW_S, min_tasks: int = MIN_TASKS):
        self.window_s, self.min_tasks = window_s, min_tasks
        # (time, units counted up to then), the anchor first
        self.points: collections.deque[tuple[float, int]] = collections.deque()
        self.counted = 0                   # tasks after the anchor

    def add(self, units: int, now: float) -> None:
        total = self.points[-1][1] + units if self.points else 0
        if self.points:
            self.counted += 1
        self.points.append((now, total))
        while len(self.points) > self.min_tasks + 1 and self.points[1][0] <= now - self.window_s:
            self.points.popleft()

    def rate(self) -> float | None:
        """Units per second, or None before ``min_tasks`` tasks came back after the first."""
        if self.counted < self.min_tasks:
            return None
        (t0, u0), (t1, u1) = self.points[0], self.points[-1]
        return (u1 - u0) / (t1 - t0) if t1 > t0 else None

    def eta(self, left: float, now: float) -> float | None:
        """Seconds until ``left`` more units are done (counted from the last task back), or None."""
        rate = self.rate()
        if rate is None or rate <= 0:
            return None
        return max(0.0, left / rate - (now - self.points[-1][0]))


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class RunProgress:
    """One run's progress: the bar (``show``; else each phase said to ``say`` in a line) and the
    store's notes, written at each phase and then every ``NOTE_EVERY_S`` seconds (when a cancel
    is looked for too)."""

    _BAR = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"

    def __init__(self, store: FrameStore, show: bool = True, clock: Callable[[], float] = time.monotonic,
                 say: Callable[[str], object] | None = None):
        self.store, self.clock = store, clock
        self.say = None if show else say  # without the bar, each phase is said in a line
        self.phase_name: str | None = None  # the phase,
        self.phases: dict[str, float] = {}  # and when each began (Unix time)
        self.total_units = self.done_units = 0
        self.n_frames = 0
        self.frames_left: collections.Counter[int] = collections.Counter()
        self.throughput = Throughput()
        self.last_note: float | None = None
        self.ended = False  # the run's last notes (done, or how it failed) are written
        self.failures: Failures | None = None  # the run's retries and hosts left out (the scheduler's), noted too
        self.bar = tqdm(total=None, unit="px-sample", unit_scale=True, desc="starting", disable=not show,
                        dynamic_ncols=True, bar_format=self._BAR)

    def start(self, job: Plan, n_frames: int) -> None:
        """The plan is known: ``job`` (``farm.planner.plan``) of ``n_frames`` frames."""
        self.total_units, self.done_units, self.n_frames = job.total_units, job.done_units, n_frames
        self.frames_left = job.frame_tasks()
        self.bar.reset(total=job.total_units)
        self.bar.update(job.done_units)

    def phase(self, name: str) -> None:
        """Enter the phase ``name`` (one of ``PHASES``): shown at once, and noted in the store."""
        self.phase_name = name
        self.phases[name] = time.time()
        self.bar.set_description_str(name)
        self.store.log(f"{name}...")
        if self.say is not None:
            self.say(f"{name}...")
        self.note(force=True)

    def done(self, units: int, frame_index: int) -> None:
        """A task of frame index ``frame_index`` came back with ``units`` pixel samples."""
        if self.phase_name != "rendering":
            self.phase("rendering")
        self.throughput.add(units, self.clock())
        self.done_units += units
        self.bar.update(units)
        self.frames_left[frame_index] -= 1

    def grow(self, units: int, frame_indexes: Iterable[int]) -> None:
        """A noise target asked for more (``farm.adaptive``): ``units`` more pixel samples, in
        tasks of ``frame_indexes``."""
        self.total_units += units
        self.bar.total = self.total_units
        self.frames_left.update(frame_indexes)

    def frames_done(self) -> int:
        return self.n_frames - sum(1 for v in self.frames_left.values() if v > 0)

    def note(self, force: bool = False) -> bool:
        """Write the notes if ``NOTE_EVERY_S`` passed (or ``force``); a cancel found then raises."""
        now = self.clock()
        if not force and self.last_note is not None and now - self.last_note < NOTE_EVERY_S:
            return False
        self.last_note = now
        rate, eta = self.throughput.rate(), self.throughput.eta(self.total_units - self.done_units, now)
        shown = [f"frames {self.frames_done()}/{self.n_frames}"] if self.n_frames else []
        if rate:
            shown.append(f"{tqdm.format_sizeof(rate)}px-sample/s")
        if eta is not None:
            shown.append(f"ETA {_clock(eta)}")
        self.bar.set_postfix_str(", ".join(shown))
        self.write("running", rate=rate, eta_s=eta)
        return True

    def write(self, state: str, **fields: Any) -> None:
        """The store's notes: ``state`` and this run's phase, samples, frames and failures, and ``fields``."""
        if self.failures is not None:
            fields["failures"] = self.failures.notes()
        self.store.write_progress(state=state, phase=self.phase_name, phases=dict(self.phases),
                                  done_units=self.done_units, total_units=self.total_units,
                                  frames_done=self.frames_done(), n_frames=self.n_frames, **fields)

    def finish(self) -> None:
        self.ended = True
        self.write("done", rate=self.throughput.rate(), eta_s=0)

    def fail(self, error: BaseException | str, state: str) -> None:
        self.ended = True
        text = str(error)
        self.store.log(text if text.startswith(state) else f"{state}: {text}")  # why the run ended (farm logs)
        self.write(state, error=text, rate=self.throughput.rate())

    def fail_quietly(self, error: BaseException) -> None:
        """``fail`` for an error from outside the render loop; nothing is written where the
        store refuses it (a lease lost is one such error)."""
        interrupted = isinstance(error, KeyboardInterrupt)  # Ctrl-C, or a signal (farm.signals)
        try:
            message = str(error) if isinstance(error, FarmError) else error_line(error)
            stopped = isinstance(error, (StoreFault, EnvironmentFault))  # by the environment, not failed
            self.fail(signals.how() if interrupted else message,
                      signals.state() if interrupted else "stopped" if stopped else "failed")
        except Exception:
            pass

    def close(self) -> None:
        self.bar.close()
