"""One driver per store: a lease in the store, renewed while the driver runs, with an epoch that fences.

Layout: ``lease/epoch-NNNNNNNNNN.json``, one small JSON document per epoch::

    {"epoch": 7, "host": "render-3", "pid": 4242, "token": "9f2c...", "process": "51ab...",
     "acquired": T0, "renewed": T1, "expires": T1 + duration, "released": false,
     "pid_space": "BOOT-ID pid:[4026531836]", "started": 2179920}

The holder is the document of the highest epoch. A driver takes the store by creating the next
epoch's document with a create-if-absent write (``set_if_not_exists``: an exclusive link on a
local store, so two drivers cannot both create epoch 8) and reading it back; it may do so only
when the highest epoch is expired, released, its own process's, or held by a process that is
gone. While it runs, a heartbeat
thread rewrites its own document every third of the lease (write-then-rename on a local store),
pushing ``expires`` forward; a clean exit, Ctrl-C, a cancel or an error marks it released.

Fencing: a driver writes the job's data only after ``Lease.check``: the highest epoch is still
its own (by number and by token) and its lease has not expired by its own last renewal. A driver
frozen past its lease (SIGSTOP, a VM paused, a stalled disk) therefore finds, when it continues,
either a newer epoch (another driver took over) or its own lease expired, and stops with
``Fenced`` before writing anything. A driver killed outright (``kill -9``, the OOM killer) leaves
its lease live until it expires; where its pids mean what they mean here (``pid_space``: the
same boot of the same kernel and the same pid namespace), a driver that finds no process of that
pid started at that time (``started``: clock ticks after boot, ``/proc/PID/stat``) knows it is
gone and takes over at once. A frozen driver is still there (the same pid and start time), so it
is never taken for gone. Elsewhere only the expiry tells, and the message says since when the
holder has not renewed it. A zombie's late renewal rewrites only its own, older
epoch's document: it can never take the store back.

What this cannot close (a POSIX filesystem has no compare-and-swap on a write): the window
between a check and the write it guards. A driver paused *after* a successful check, for longer
than what was left of its lease (at least two thirds of the lease when its heartbeat is
healthy), while another driver takes over, writes once when it continues: one task's sums and
record, or one progress note. The store's CRCs turn most such writes into a task rendered again
(a record whose sums were overwritten by the other driver does not verify); a record and sums
written together by the late driver verify, and hold its job's samples for that task. Closing the
window needs a store with conditional writes (an object store's If-Match / generation
preconditions) or a lock service. Expiry is wall-clock time: drivers' clocks must agree to well
within the lease (NTP does). ``FARM_LEASE_S`` sets the lease (default 30 s; tests use a few
seconds).
"""
import dataclasses
import json
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Literal, Self

import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore, StorePath

from farm.errors import SpecError, shown
from farm.store import FULL, StoreError, rewrite_in_place

__all__ = ["Lease", "Holder", "LeaseHeld", "Fenced", "holder", "lease_duration", "wait_free", "DEFAULT_LEASE_S"]

DEFAULT_LEASE_S = 30.0
_PREFIX, _SUFFIX = "epoch-", ".json"
_PROCESS = uuid.uuid4().hex
_WAIT_POLL_S = 1.0  # seconds between two looks at a lease that ``wait_free`` waits out


def _pid_space() -> str:
    """Where this process's pids mean what they mean: this boot of the kernel and this pid
    namespace ("" where /proc does not say: another driver's process is then never taken for gone)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot} {os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def _started(pid: int) -> int | None:
    """When the process ``pid`` started (clock ticks after boot, /proc/PID/stat's 22nd field), or
    None where there is no such process, or only its zombie (it has exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (name) ": the name may hold spaces and ')'
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


_PID_SPACE = _pid_space()


class LeaseHeld(StoreError):
    """Another driver's lease on the store is live."""


class Fenced(StoreError):
    """This driver's lease was taken over or expired: it must not write."""


@dataclasses.dataclass(frozen=True)
class Holder:
    """One epoch's lease document (times are wall-clock seconds, ``time.time()``)."""
    epoch: int
    host: str
    pid: int
    token: str          # this epoch's (one driver's hold), unique
    process: str        # the holding process's, unique (a host's pids are reused)
    acquired: float
    renewed: float
    expires: float
    released: bool = False
    pid_space: str = ""  # where its pid means its process (``_pid_space``; "" in documents written before)
    started: int = -1    # when its process started (``_started``; -1: not known)

    def live(self, now: float) -> bool:
        return not self.released and now < self.expires

    def gone(self) -> bool:
        """Whether its process is known to have ended: it ran where this one runs (the same
        kernel boot and pid namespace) and no process of its pid started when it did."""
        return bool(self.pid_space) and self.pid_space == _PID_SPACE and _started(self.pid) != self.started

    def stopped_renewing(self, now: float) -> float | None:
        """Seconds since it should have renewed its lease (it renews every third of it), or None
        while it renews on time."""
        late = now - self.renewed - (self.expires - self.renewed) / 3
        return now - self.renewed if late > 1.0 else None

    def mine(self) -> bool:
        """Whether this process holds it (a process is one driver)."""
        return self.process == _PROCESS

    def who(self) -> str:
        return f"{self.host} pid {self.pid}"

    def describe(self, now: float) -> str:
        """The holder and the state of its lease, for ``farm status``."""
        if self.released:
            return "none"
        if self.gone():
            return (f"none ({self.who()} is gone: it ended without releasing its lease; the next `farm resume` "
                    f"takes over at once)")
        if self.live(now):
            return (f"{self.who()}, lease live (epoch {self.epoch}, renewed {now - self.renewed:.0f} s ago, "
                    f"expires in {self.expires - now:.0f} s)")
        return (f"none live ({self.who()} stopped renewing its lease {now - self.expires:.0f} s ago: it died or "
                f"froze; the next `farm resume` takes over; epoch {self.epoch})")


def lease_duration() -> float:
    """Seconds a lease lasts without renewal: ``FARM_LEASE_S``, else ``DEFAULT_LEASE_S``."""
    text = os.environ.get("FARM_LEASE_S")
    if text is None:
        return DEFAULT_LEASE_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1e6:
        raise SpecError(f"FARM_LEASE_S must be a number of seconds above 0 and below 1e6, got {shown(text)}")
    return value


def _key(epoch: int) -> str:
    return f"{_PREFIX}{epoch:010d}{_SUFFIX}"


def _folder(node: StorePath) -> str | None:
    """The folder of ``node`` where its store is a local filesystem, else None. Reads there skip
    zarr's event loop (a twentieth of the time): a driver checks its lease before every write."""
    if isinstance(node.store, LocalStore):
        return os.path.join(node.store.root, node.path)
    return None


def _epochs(node: StorePath) -> list[int]:
    """The epochs of the documents under ``node`` (a zarr StorePath), highest last."""
    async def listed():
        return [name async for name in node.store.list_dir(node.path)]
    folder = _folder(node)
    try:
        names = os.listdir(folder) if folder else sync(listed())
    except FileNotFoundError:  # the store is gone
        names = []
    found = []
    for name in names:
        if name.startswith(_PREFIX) and name.endswith(_SUFFIX) and name[len(_PREFIX):-len(_SUFFIX)].isdigit():
            found.append(int(name[len(_PREFIX):-len(_SUFFIX)]))
    return sorted(found)


def _read(node: StorePath, epoch: int) -> Holder | None:
    """The document of ``epoch``, or None where it is missing or does not parse."""
    folder = _folder(node)
    text: bytes | None
    try:
        if folder:
            with open(os.path.join(folder, _key(epoch)), "rb") as f:
                text = f.read()
        else:
            buffer = sync((node / _key(epoch)).get())
            text = buffer.to_bytes() if buffer is not None else None
    except FileNotFoundError:
        text = None
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    doc = {**_OPTIONAL, **doc}  # (a document written before they were recorded lacks them)
    fields = [f.name for f in dataclasses.fields(Holder)]
    if not all(_TYPES[name](doc.get(name)) for name in fields):
        return None
    return Holder(**{name: doc[name] for name in fields})


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_TYPES = {"epoch": _whole, "pid": _whole, "host": lambda v: isinstance(v, str), "token": lambda v: isinstance(v, str),
          "process": lambda v: isinstance(v, str), "acquired": _number, "renewed": _number, "expires": _number,
          "released": lambda v: isinstance(v, bool), "pid_space": lambda v: isinstance(v, str), "started": _whole}
_OPTIONAL = {"pid_space": "", "started": -1}


def _write(node: StorePath, holder: Holder, exclusive: bool = False) -> None:
    buffer = default_buffer_prototype().buffer.from_bytes(json.dumps(dataclasses.asdict(holder)).encode())
    path = node / _key(holder.epoch)
    sync(path.set_if_not_exists(buffer) if exclusive else path.set(buffer))


def _top(node: StorePath) -> tuple[int, Holder | None]:
    """(highest epoch or 0, its document or None)."""
    epochs = _epochs(node)
    return (epochs[-1], _read(node, epochs[-1])) if epochs else (0, None)


def holder(group: zarr.Group) -> Holder | Literal[False] | None:
    """The holder of the store whose zarr group is ``group`` (None before any driver held it),
    or False where its document does not read."""
    if "lease" not in group:
        return None
    epoch, doc = _top(group["lease"].store_path)
    return None if epoch == 0 else (doc or False)


def _held(url: str, top: Holder, now: float) -> str:
    """Why ``top``'s live lease refuses another driver, and what to do, in one line."""
    late = top.stopped_renewing(now)
    if late is None:
        return (f"{url}: another driver is rendering this store: {top.who()} (its lease was renewed "
                f"{now - top.renewed:.0f} s ago and lasts {top.expires - now:.0f} s more); `farm cancel {url}` "
                f"stops it")
    return (f"{url}: another driver holds this store: {top.who()}, which stopped renewing its lease {late:.0f} s "
            f"ago (it died or froze; the lease lapses in {top.expires - now:.0f} s); `farm resume --wait {url}` "
            f"takes over then")


def wait_free(group: zarr.Group, url: str, say: Callable[[str], object], poll: float = _WAIT_POLL_S) -> None:
    """Return once no other driver holds the store whose zarr group is ``group`` (its lease
    released, lapsed, or its process gone), saying what it waits for when that changes: first,
    and whenever the holder, or whether it still renews, changes."""
    if "lease" not in group:
        return
    node, said = group["lease"].store_path, None
    while True:
        _, top = _top(node)
        now = time.time()
        if top is None or not top.live(now) or top.mine() or top.gone():
            return
        late = top.stopped_renewing(now)
        if said != (top.epoch, late is None):
            said = (top.epoch, late is None)
            why = "it renews it" if late is None else f"it stopped renewing it {late:.0f} s ago"
            say(f"{url}: waiting for the lease of {top.who()} to lapse ({why}; it lapses in "
                f"{top.expires - now:.0f} s unless it is renewed)")
        time.sleep(min(poll, max(0.0, top.expires - now) + 0.05))


class Lease:
    """This driver's hold on one store: ``acquire``, then ``check`` before every write; ``release``."""

    def __init__(self, node: StorePath, url: str, holder: Holder, duration: float):
        self.node, self.url, self.duration = node, url, duration
        self.holder = holder
        self.expires = holder.expires  # by this driver's last successful renewal
        self.lost: str | None = None   # why it was lost, once it is
        self.took_over: str | None = None  # the line saying whose lease it took over, if its holder was gone
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name=f"lease {url}", daemon=True)

    @classmethod
    def acquire(cls, group: zarr.Group, url: str, duration: float | None = None, heartbeat: bool = True) -> Self:
        """Take the store whose zarr group is ``group`` (at ``url``, for messages), or raise
        LeaseHeld naming the live holder; starts the heartbeat (without it, ``renew`` is the
        caller's)."""
        duration = lease_duration() if duration is None else duration
        node = group.require_group("lease").store_path
        for _ in range(3):
            epoch, top = _top(node)
            now = time.time()
            took_over = None
            if top is not None and top.live(now) and not top.mine():
                if not top.gone():
                    raise LeaseHeld(_held(url, top, now))
                took_over = (f"{url}: took the store over from {top.who()}, which is gone (it ended without "
                             f"releasing its lease; epoch {epoch + 1})")
            mine = Holder(epoch=epoch + 1, host=socket.gethostname(), pid=os.getpid(), token=uuid.uuid4().hex,
                          process=_PROCESS, acquired=now, renewed=now, expires=now + duration,
                          pid_space=_PID_SPACE, started=_started(os.getpid()) or -1)
            _write(node, mine, exclusive=True)
            if _read(node, mine.epoch) == mine:  # not taken by a driver that created it first
                lease = cls(node, url, mine, duration)
                lease.took_over = took_over
                lease._forget_before(mine.epoch - 1)
                if heartbeat:
                    lease._heartbeat.start()
                return lease
        raise LeaseHeld(f"{url}: other drivers keep taking this store's lease; `farm status {url}` shows who holds it")

    def check(self) -> None:
        """Raise Fenced unless this driver may still write: its epoch is the highest, its
        document is its own, and its lease has not expired."""
        if self.lost is None:
            epoch, top = _top(self.node)
            now = time.time()
            if epoch != self.holder.epoch or top is None or top.token != self.holder.token:
                self.lost = f"{top.who()} took it over (epoch {epoch})" if top else f"epoch {epoch} replaced it"
            elif now >= self.expires:
                self.lost = f"it expired {now - self.expires:.0f} s ago: this driver was paused or could not renew it"
        if self.lost is not None:
            raise Fenced(f"{self.url}: this driver lost the store's lease ({self.lost}); "
                         f"it stopped without writing. `farm status {self.url}` shows who holds it")

    def renew(self) -> None:
        """Push this driver's lease forward (after a ``check``)."""
        self.check()
        now = time.time()
        renewed = dataclasses.replace(self.holder, renewed=now, expires=now + self.duration)
        _write(self.node, renewed)
        self.holder, self.expires = renewed, renewed.expires

    def release(self) -> None:
        """Stop the heartbeat and mark the lease released (not if it was lost: it is another's)."""
        self._stop.set()
        if self._heartbeat.is_alive():
            self._heartbeat.join(timeout=self.duration)
        try:
            self.check()
            released = dataclasses.replace(self.holder, released=True, renewed=time.time())
            try:
                _write(self.node, released)
            except OSError as e:  # a full disk: in the document's own blocks (no new file)
                folder = _folder(self.node)
                if folder is None or e.errno not in FULL:
                    raise
                rewrite_in_place(os.path.join(folder, _key(released.epoch)),
                                 json.dumps(dataclasses.asdict(released)).encode())
        except Exception:  # lost, or the store is gone: nothing of ours to release
            pass
        self.lost = self.lost or "it was released"

    def _beat(self) -> None:
        while not self._stop.wait(self.duration / 3):
            try:
                self.renew()
            except Fenced:
                return
            except Exception:  # the store did not answer: try again; ``check`` fails once it expires
                continue

    def _forget_before(self, epoch: int) -> None:
        """Remove the documents of epochs below ``epoch`` (history; the highest two stay)."""
        for old in _epochs(self.node):
            if old < epoch:
                sync((self.node / _key(old)).delete())
