"""A jitted function that keeps only the compiled programs it used last.

``jax.jit`` keeps every program it compiles for as long as the jitted function lives, and XLA's
CPU backend maps each program's machine code into the process as a few hundred separate memory
maps (about 560 for the Cornell box's work unit), released only with the program. Linux allows
a process 65,530 maps (``vm.max_map_count``); past them LLVM cannot place code and the process
aborts. A process that renders some hundred scene structures or tile sizes (a notebook session,
a test session, a long-lived worker) would get there. ``KeptPrograms`` gives each argument
structure a ``jax.jit`` of its own and drops the least recently used past ``keep``, so the
programs they hold are freed (a dropped structure that comes back is compiled again, or loaded
from JAX's persistent compilation cache where that is on).
"""
import atexit
import collections
import functools
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any

import jax

__all__ = ["KeptPrograms"]


class KeptPrograms:
    """``jax.jit(fn, static_argnames=...)``, keeping the programs of the ``keep`` argument
    structures (pytree structure, leaf shapes and dtypes, static arguments) used last.

    ``hold(args, kwargs)``: host objects a call's program uses by reference (a host engine's
    scene, named in the program by a handle), kept alive until its outputs are ready. A caller
    that drops its scene while the program runs (JAX dispatches asynchronously) would otherwise
    free the scene under the program: the callback on one device fails, the others wait for it in
    their next collective, and XLA aborts the process.
    """

    def __init__(self, fn: Callable[..., Any], static_argnames: Iterable[str], keep: int,
                 hold: Callable[[tuple[Any, ...], dict[str, Any]], Iterable[object]] | None = None) -> None:
        self._fn, self._static, self._keep, self._hold = fn, tuple(static_argnames), keep, hold
        self._jitted: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        # queue of (outputs, held objects) for the thread that lets them go
        self._in_flight: queue.SimpleQueue[tuple[Any, list[object]] | None] | None = None
        self.programs_made = 0  # traces so far, over every structure (dropped ones included)
        functools.update_wrapper(self, fn)

    def _traced(self, *args: Any, **kwargs: Any) -> Any:
        """``fn``, counting its traces (jax.jit runs the Python function only to trace it)."""
        with self._lock:
            self.programs_made += 1
        return self._fn(*args, **kwargs)

    def jit(self) -> jax.stages.Wrapped:
        """A plain ``jax.jit`` of the function: for lowering and ``jax.export`` (which compile nothing)."""
        return jax.jit(self._fn, static_argnames=self._static)

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        dynamic = {k: v for k, v in kwargs.items() if k not in self._static}
        leaves, tree = jax.tree.flatten((args, dynamic))
        avals = tuple((getattr(x, "shape", ()), str(getattr(x, "dtype", type(x)))) for x in leaves)
        return tree, avals, tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static))

    def _program(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The jitted function kept for this argument structure (made if new, now the latest used)."""
        key = self._key(args, kwargs)
        with self._lock:
            jitted = self._jitted.pop(key, None)
            if jitted is None:
                # A fresh partial per structure: JAX's own caches are keyed weakly by the function,
                # so they let go of its programs when the jitted wrapper goes.
                jitted = jax.jit(functools.partial(self._traced), static_argnames=self._static)
            self._keep_latest(key, jitted)
        return jitted

    def _keep_latest(self, key: tuple[Any, ...], program: Any) -> None:
        """``program`` for ``key``, now the latest used; the least recently used past ``keep``
        dropped (their programs freed). Under ``_lock``."""
        self._jitted.pop(key, None)
        self._jitted[key] = program
        while len(self._jitted) > self._keep:
            self._jitted.popitem(last=False)

    def compile(self, *args: Any, **kwargs: Any) -> jax.stages.Compiled:
        """Compile the program of these arguments without running it: the program a call with
        them runs, so JAX's persistent compilation cache (where on) then holds it for any process
        that calls with arguments of the same structure, shardings and flags. The compiled
        program serves this structure's later calls (``adopt``)."""
        program = self._program(args, kwargs)
        if isinstance(program, _Adopted):
            return program.compiled
        compiled = program.lower(*args, **kwargs).compile()
        self.adopt(compiled, args, kwargs)
        return compiled

    def signature(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """What picks this structure's program, as text: the arguments' tree (its static fields
        included), each leaf's shape, dtype and sharding, and the static arguments."""
        tree, avals, statics = self._key(args, kwargs)
        leaves = jax.tree.leaves((args, {k: v for k, v in kwargs.items() if k not in self._static}))
        shardings = tuple(repr(getattr(x, "sharding", None)) for x in leaves)
        return repr((self._fn.__module__, self._fn.__qualname__, tree, avals, shardings, statics))

    def has_program(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether a program for this structure is compiled or adopted in this process."""
        with self._lock:
            program = self._jitted.get(self._key(args, kwargs))
        return isinstance(program, _Adopted)

    def adopt(self, compiled: jax.stages.Compiled, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Serve this structure's calls with ``compiled`` (a program compiled for it here or in
        another process: ``tracer.runtime.compiled``) instead of tracing the function."""
        key = self._key(args, kwargs)
        with self._lock:
            self._keep_latest(key, _Adopted(compiled, self._static))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self._program(args, kwargs)(*args, **kwargs)
        held = [h for h in self._hold(args, kwargs) if h is not None] if self._hold is not None else []
        if held:
            with self._lock:
                if self._in_flight is None:
                    self._in_flight = queue.SimpleQueue()
                    holder = threading.Thread(target=_release_when_ready, args=(self._in_flight,), daemon=True,
                                              name="kept-programs-hold")
                    holder.start()
                    atexit.register(_drain_at_exit, self._in_flight, holder)
            self._in_flight.put((out, held))
        return out


class _Adopted:
    """A compiled program in ``KeptPrograms``' place of a jitted function: called with the
    function's arguments less the static ones (compiled in)."""

    def __init__(self, compiled: jax.stages.Compiled, static: tuple[str, ...]) -> None:
        self.compiled, self._static = compiled, static

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.compiled(*args, **{k: v for k, v in kwargs.items() if k not in self._static})


# How long a process's exit waits for the programs still running (then it exits regardless).
_EXIT_WAIT_S = 120.0


def _release_when_ready(in_flight: queue.SimpleQueue[tuple[Any, list[object]] | None]) -> None:
    """Let each call's held objects go once its outputs are ready (in call order); return at None."""
    while True:
        item = in_flight.get()
        if item is None:
            return
        out, held = item
        del item  # (else the last call's objects would be held until the next call)
        try:
            jax.block_until_ready(out)
        except Exception:  # noqa: BLE001 (the caller meets the error where it reads the outputs)
            pass
        del out, held


def _drain_at_exit(in_flight: queue.SimpleQueue[tuple[Any, list[object]] | None], holder: threading.Thread) -> None:
    """At the process's exit, wait for the holding thread to let go of the programs still running.
    A daemon thread that is inside JAX's ``block_until_ready`` when Python finalizes is ended by
    ``pthread_exit`` once the wait returns, and the unwinding through jaxlib's C++ aborts the whole
    process (glibc's "FATAL: exception not rethrown", exit status 134): 1 exit in 3 with a program
    in flight, measured. (Registered after JAX's own exit hooks, so it runs before them.)"""
    in_flight.put(None)
    holder.join(_EXIT_WAIT_S)
