"""A fuzzer the project keeps: mutated job files and store metadata through the `farm` command line.

Hypothesis mutates one file: a job file, a store's ``zarr.json`` (its group, ``state``,
``tail``, ``records``, ``progress``), or a ``records``, ``state`` or ``tail`` chunk. A mutation
flips a bit, replaces a byte, truncates, or replaces or drops one value of the parsed document (a TOML line, a JSON
node) with a value of another type. The property: each command (``render JOB`` for job files;
``status``, ``export`` and ``resume`` for stores) works (exit 0) or exits with one line
``error: ...`` and one of the project's codes (1, 2, 3), in at most ``BOUND_S`` seconds, never
with an exception it did not expect (``farm.cli.main`` turns those into exit 70); ``status`` and
``export`` never change a store, and a command that refuses one leaves it as it was.

Rendering is not run: ``farm.session.run`` is replaced by what a run does before it starts Ray
(the store's tasks verified and planned), so ``render`` and ``resume`` get as far as a store ready
to render. Issue 37 added: export --name templates (files only inside --out, ending in the
format's extension, the store unchanged), paths that are not UTF-8 (exit 2, nothing made), an
errno of the environment at a write of the store (exit 1 or 3, the store then reads and resumes
to the records it held) and a scene file edited after its job recorded it (a member's load
refuses it, naming the file; ``tests/farm/test_scene_reads.py`` runs one such job). The examples below are the seed corpus (issue 19's cases); ``HYPOTHESIS_PROFILE=explore``
draws afresh. ``pytest --hypothesis-show-statistics`` prints how the mutants were classified.
"""
import errno
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import farm.job
import farm.session
import zarr.storage
from farm.planner import plan
from tests.helpers.farm_cases import ORBIT, farm_main, filled_store, store_files
from tests.helpers.hang_guard import hang_guard
from tests.helpers.mutations import mutate_bytes

BOUND_S = 60.0  # per command, a guard against hangs; they take milliseconds
PROJECT_CODES = {1, 2, 3}

JOB = f"""scene = "{ORBIT}"
frames = [0, 2]
spp = 8
resolution = [40, 30]
store = "job.zarr"
seed = 0
tile = 16
pass_size = 4
accel = "auto"
[groups]
count = 1
platform = "cpu"
[params.angle]
keys = [[0, 0.0], [2, 90.0]]
interpolation = "linear"
"""
STORE_FILES = ("zarr.json", "state/zarr.json", "tail/zarr.json", "records/zarr.json", "progress/zarr.json",
               "records/c/1/0/0/0", "state/c.1.0.1.0", "tail/c.1.0.1.0")
# Values of other types, and numbers past the limits. None that makes a legal but large job:
# those are slow because they are large, not because they are hostile.
JSON_VALUES = (5, -1, 0, 2**31, 2**64, 1.5, math.inf, "x", "", [], {}, None, True, [1, 2], [[0, "a"]], "é" * 300)
TOML_VALUES = ("5", "-1", "0", "2147483648", "99999999999999999999", "1.5", "nan", "inf", '"x"', '""', "[]",
               "[1, 2]", "{}", "true", "1979-05-27", '"0-99999999"', "[[0, 1]]", '"\\u00e9"')

mutation = st.tuples(st.sampled_from(("flip", "byte", "truncate", "value", "drop")), st.integers(0, 2**20),
                     st.integers(0, 255))


def _mutate(data, kind, where, what, values):
    """``data`` (bytes) with one mutation: at ``where`` (taken modulo what there is), ``what``
    picks the bit, the byte or the value (modulo the choices)."""
    if kind in ("value", "drop"):
        edited = _edit_document(data, kind, where, what, values)
        if edited is not None:
            return edited
        kind = "byte" if kind == "value" else "truncate"  # bytes that do not parse: a byte mutation
    return mutate_bytes(data, kind, where, what)


def _edit_document(data, kind, where, what, values):
    """A TOML job file (``key = value`` lines) or JSON metadata with one value replaced or dropped."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    if values is TOML_VALUES:
        lines = text.splitlines()
        assignments = [i for i, line in enumerate(lines) if re.match(r"^\w+ = ", line)]
        if not assignments:
            return None
        i = assignments[where % len(assignments)]
        lines[i:i + 1] = [] if kind == "drop" else [lines[i].split(" = ")[0] + " = " + values[what % len(values)]]
        return "\n".join(lines).encode()
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    nodes = list(_nodes(doc))
    if not nodes:
        return None
    parent, key = nodes[where % len(nodes)]
    if kind == "drop":
        del parent[key]
    else:
        parent[key] = values[what % len(values)]
    return json.dumps(doc).encode()


def _nodes(doc):
    """(container, key) of every value under ``doc``, depth first."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for key, value in list(items):
        yield doc, key
        yield from _nodes(value)


def _without_ray(spec, store, **kw):
    """``farm.session.run`` up to where it would start Ray: the store's tasks verified and planned."""
    records, _ = store.verified_records()
    plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels)


def _run(*args):
    """(exit code, stdout) of ``farm ARGS``, checked: within the bound, one line if it fails."""
    with hang_guard(BOUND_S):
        code, out, err = farm_main(*args)
    if code != 0:
        lines = [line for line in (out + err).splitlines() if line.strip()]
        assert code in PROJECT_CODES and len(lines) == 1 and lines[0].startswith("error: "), (args, code, out + err)
    return code, out


@pytest.fixture(scope="module")
def seed_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "job.zarr"
    filled_store(path, spp=72)  # one chunk folded and a tail
    return path


def _classify(target, outcomes):
    event(f"{target}: " + ", ".join(f"{command} {'works' if code == 0 else f'refused ({code})'}"
                                    for command, code in outcomes))


# The seed corpus: the job file, and issue 19's broken ones.
JOB_SEEDS = (JOB, JOB.replace("orbit", "orb\xe9t"), JOB + "params = 5\n", JOB.replace(f'"{ORBIT}"', "5"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(JOB_SEEDS))), mutations=st.lists(mutation, max_size=3))
@example(seed=1, mutations=[])                      # not UTF-8 (written as latin-1 below)
@example(seed=2, mutations=[])                      # params = 5
@example(seed=3, mutations=[])                      # scene = 5
@example(seed=0, mutations=[("value", 2, 1)])       # spp = -1
@example(seed=0, mutations=[("value", 6, 2)])       # tile = 0
@example(seed=0, mutations=[("value", 2, 4)])       # spp = 99999999999999999999
@example(seed=0, mutations=[("truncate", 40, 0)])
def test_mutated_job_files(seed_store, seed, mutations):
    data = JOB_SEEDS[seed].encode("latin-1" if seed == 1 else "utf-8")
    for kind, where, what in mutations:
        data = _mutate(data, kind, where, what, TOML_VALUES)
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(farm.session, "run", _without_ray):
        (Path(tmp) / "job.toml").write_bytes(data)
        code, _ = _run("render", Path(tmp) / "job.toml", "--out", Path(tmp) / "pinned.zarr", "--no-progress")
    _classify("job.toml", [("render", code)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(STORE_FILES), mutations=st.lists(mutation, min_size=1, max_size=3))
@example(target="zarr.json", mutations=[("truncate", 500, 0)])
@example(target="state/zarr.json", mutations=[("byte", 0, 0xFF)])
@example(target="records/zarr.json", mutations=[("value", 0, 7)])   # shape = "x"
@example(target="zarr.json", mutations=[("drop", 3, 0)])
@example(target="records/c/1/0/0/0", mutations=[("truncate", 5, 0)])
@example(target="state/c.1.0.1.0", mutations=[("flip", 30, 3)])
@example(target="tail/c.1.0.1.0", mutations=[("flip", 30, 3)])
@example(target="progress/zarr.json", mutations=[("byte", 1, 0)])
def test_mutated_stores(seed_store, target, mutations):
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(farm.session, "run", _without_ray):
        store = Path(tmp) / "job.zarr"
        shutil.copytree(seed_store, store)
        data = (store / target).read_bytes()
        for kind, where, what in mutations:
            data = _mutate(data, kind, where, what, JSON_VALUES)
        (store / target).write_bytes(data)
        before = store_files(store)
        outcomes, said = [], {}
        for command, *args in (("status",), ("export", "--out", Path(tmp) / "frames"), ("resume", "--no-progress")):
            code, said[command] = _run(command, store, *args)
            outcomes.append((command, code))
            if command != "resume" or code != 0:  # status and export only read; a refusal changes nothing
                assert store_files(store) == before, (command, code)
        if outcomes[0][1] == 0 and outcomes[1][1] != 0:  # status must not call done what export refuses
            assert "samples: 100.0% done" not in said["status"], said["status"]
    _classify(target, outcomes)


# -- issue 37: export names, paths that are not UTF-8, the environment's errors, edited inputs --

NAME_PIECES = ("{frame}", "{frame:04d}", "{frame!s:.0}", "{frame:x}", "{job}", "{ext}", "{job:>3}", "{}", "{0}",
               "zarr.json", "..", "/", ".", "f", ".png", ".exr", "\x00", "\xe9", "{", "}", " ")


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.sampled_from(NAME_PIECES), min_size=1, max_size=5), fmt=st.sampled_from(("png", "npy")))
@example(pieces=["zarr.json", "{frame!s:.0}"], fmt="png")   # issue 37's store overwrite
@example(pieces=["f", "{frame}", ".txt"], fmt="png")
def test_export_names(seed_store, pieces, fmt):
    """A --name template writes files ending in the format's extension inside --out, or is refused."""
    with tempfile.TemporaryDirectory() as tmp:
        out, before = Path(tmp) / "frames", store_files(seed_store)
        code, _ = _run("export", seed_store, "--out", out, "--format", fmt, "--frames", "0-0", "--name", "".join(pieces))
        assert store_files(seed_store) == before
        written = [p for p in Path(tmp).rglob("*") if p.is_file()]
        assert all(p.parent == out and p.name.endswith("." + fmt) for p in written), written
        assert (code == 0) == bool(written)
    _classify("--name", [("export", code)])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(min_size=1, max_size=4).filter(lambda b: b"\0" not in b and b"/" not in b),
       command=st.sampled_from(("render", "export", "status", "resume")))
@example(raw=b"\xff", command="render")
def test_paths_that_are_not_utf8(seed_store, raw, command):
    """A path the OS gives is refused in one line (exit 2) before anything is made, or works if it is UTF-8."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(farm.session, "run", _without_ray):
        path = os.path.join(tmp, "bad" + os.fsdecode(raw) + ".zarr")
        args = {"render": (ORBIT, "--res", "16x16", "--out", path, "--no-progress"), "status": (path,),
                "export": (seed_store, "--out", path), "resume": (path, "--no-progress")}[command]
        code, _ = _run(command, *args)
        utf8 = True
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            utf8 = False
        if not utf8:
            assert code == 2 and os.listdir(tmp) == []
    _classify("path", [(command, code)])


FAULT_ERRNOS = ("ENOSPC", "EROFS", "EACCES", "EDQUOT", "EIO")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(FAULT_ERRNOS), at=st.integers(0, 6),
       command=st.sampled_from(("render", "resume", "cancel", "redo")))
@example(name="ENOSPC", at=0, command="resume")
@example(name="EROFS", at=0, command="cancel")
def test_the_environments_errors(seed_store, name, at, command):
    """An errno of the environment at the ``at``-th write of the store (zarr's store boundary):
    one line, exit 1 or 3 (or 0 where the command writes less), and the store then reads, and
    resumes to what it held."""
    store_type, calls = zarr.storage.LocalStore, []

    def failing(method):
        real = getattr(store_type, method)

        async def write(self, key, value):
            calls.append(key)
            if len(calls) > at:
                raise OSError(getattr(errno, name), os.strerror(getattr(errno, name)))
            return await real(self, key, value)
        return write

    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(farm.session, "run", _without_ray):
        store = Path(tmp) / "job.zarr"
        shutil.copytree(seed_store, store)
        args = {"render": ("render", _job_file(tmp), "--out", store, "--no-progress"), "cancel": ("cancel", store),
                "resume": ("resume", store, "--no-progress"), "redo": ("resume", store, "--redo", "1", "--no-progress")}
        with mock.patch.object(store_type, "set", failing("set")), \
                mock.patch.object(store_type, "set_if_not_exists", failing("set_if_not_exists")):
            code, _ = _run(*args[command])
        assert code in (0, 1, 3), code
        assert _run("status", store)[0] == 0
        assert _run("resume", store, "--no-progress")[0] == 0
        if command != "redo":  # nothing it refused to write is lost: the tasks stored are those of before
            records, _ = farm.job.open_store(str(store))[1].verified_records()
            seed, _ = farm.job.open_store(str(seed_store))[1].verified_records()
            assert (records == seed).all()
    _classify(name, [(command, code)])


def _job_file(tmp):
    """The seed job as a file in ``tmp`` (its store the one given with --out)."""
    path = Path(tmp) / "job.toml"
    path.write_text(JOB.replace("spp = 8", "spp = 72"))
    return path


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 2**16), mutation=mutation)
def test_edited_inputs(tmp_path_factory, which, mutation):
    """Any file of a scene edited after its job recorded it: a member's load refuses it, naming
    that file (the first read that differs), whether or not the edited file still parses."""
    import tracer
    from farm.spec import scene_digest
    from tests.helpers.farm_cases import ROOT
    from tracer.errors import SceneError
    from tracer.io import reads
    tmp = tmp_path_factory.mktemp("edited")
    shutil.copytree(ROOT / "examples" / "assets", tmp / "assets")
    shutil.copy(ROOT / "examples" / "textures.xml", tmp / "textures.xml")
    recorded = scene_digest(str(tmp / "textures.xml")).files
    edited = sorted(recorded)[which % len(recorded)]
    data = Path(edited).read_bytes()
    kind, where, what = mutation
    changed = mutate_bytes(data, kind if kind in ("flip", "byte", "truncate") else "byte", where, what)
    if changed == data:
        changed = data + b" "
    Path(edited).write_bytes(changed)
    with reads.recording() as read:
        try:
            tracer.load_scene(str(tmp / "textures.xml"), resolution=(16, 16))
        except SceneError:
            pass  # the member checks what it read before it says this (cluster.member.Member._load)
    with pytest.raises(reads.SceneChanged) as e:
        reads.check_reads(read, recorded)
    assert e.value.path == edited  # the first file read that differs: the only one edited
    event(f"edited {Path(edited).suffix}")
