"""Where the test suite's time goes to XLA: a pytest plugin that times every compile of the test
processes and sums it by module, with the programs compiled more than once.

    PYTHONPATH=scripts .venv/bin/python -m pytest -q -n 2 -p suite_compiles [tests ...]

Each test process (pytest-xdist's workers too) wraps JAX's call into XLA's compiler
(``jax._src.compiler.backend_compile_and_load``, private: a JAX that moves it is said so in one
line and nothing is timed) and writes a line a compile: the running test, the seconds, the
program's name and a digest of its StableHLO. At the end the controller prints, beside the
suite's own time, the compile seconds by module, the slowest programs, and what was compiled
twice (the same digest: a program two tests, or two workers, could have shared). Compiles inside
the tests' subprocesses (farm workers, Ray actors, ``jax.distributed`` members) are not seen.
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
import time

import pytest

_ENV = "SUITE_COMPILES_DIR"  # the run's folder, made by the controller, inherited by the workers
_running = ["(collection)"]


def pytest_configure(config: pytest.Config) -> None:
    if _ENV not in os.environ:  # the controller, or a run without xdist
        os.environ[_ENV] = tempfile.mkdtemp(prefix="suite-compiles-")
    try:
        from jax._src import compiler
        from jax._src.interpreters import mlir
    except ImportError as e:
        print(f"suite_compiles: JAX's compiler is not where this plugin looks ({e}); nothing timed")
        return
    if not hasattr(compiler, "backend_compile_and_load"):
        print("suite_compiles: jax._src.compiler.backend_compile_and_load is gone; nothing timed")
        return
    log = open(pathlib.Path(os.environ[_ENV]) / f"{os.getpid()}.jsonl", "a")
    compile_program = compiler.backend_compile_and_load

    def timed(backend, module, *args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return compile_program(backend, module, *args, **kwargs)
        finally:
            seconds = time.perf_counter() - start
            digest = hashlib.sha1(mlir.module_to_bytecode(module)).hexdigest()[:16]
            name = str(module.operation.attributes["sym_name"]).strip('"')
            log.write(json.dumps({"test": _running[0], "s": seconds, "name": name, "digest": digest}) + "\n")
            log.flush()

    compiler.backend_compile_and_load = timed


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    _running[0] = item.nodeid
    yield


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    if hasattr(config, "workerinput"):  # an xdist worker: the controller reports
        return
    folder = pathlib.Path(os.environ[_ENV])
    rows = [json.loads(line) for path in folder.glob("*.jsonl") for line in path.read_text().splitlines() if line]
    shutil.rmtree(folder, ignore_errors=True)
    write = terminalreporter.write_line
    total = sum(r["s"] for r in rows)
    write(f"\nXLA compiles in the test processes: {len(rows)}, {total:.0f} s "
          f"({sum(r['s'] >= 1 for r in rows)} of a second or more: {sum(r['s'] for r in rows if r['s'] >= 1):.0f} s)")
    by_module: collections.Counter[str] = collections.Counter()
    for r in rows:
        by_module[r["test"].split("::")[0]] += r["s"]
    for module, seconds in by_module.most_common(15):
        write(f"{seconds:8.1f} s  {module}")
    write("slowest programs:")
    for r in sorted(rows, key=lambda r: -r["s"])[:10]:
        write(f"{r['s']:8.1f} s  {r['name']}  {r['test']}")
    programs = collections.defaultdict(list)
    for r in rows:
        programs[r["digest"]].append(r)
    again = [(sum(r["s"] for r in runs[1:]), runs) for runs in programs.values() if len(runs) > 1]
    write(f"compiled more than once: {len(again)} programs, {sum(s for s, _ in again):.0f} s after their first")
    for seconds, runs in sorted(again, key=lambda x: -x[0])[:10]:
        write(f"{seconds:8.1f} s  {runs[0]['name']} x{len(runs)}: {', '.join(sorted({r['test'] for r in runs})[:3])}")
