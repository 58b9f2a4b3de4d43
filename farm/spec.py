"""A render job: what to render (scene, frames, samples, parameters) and how (tiles, groups).

Built from a TOML job file (``JobSpec.from_toml``) or from ``farm render`` flags. ``identity``
is what a store is bound to: a store of another scene, frame range, resolution, seed, AOVs,
reconstruction filter or reduction tree (tile, pass and chunk sizes, none of them chosen from the spp: ``farm.tree``) is
refused. ``spp`` is not part of it: raising it refines a finished job, to the bits of a job
rendered at the new spp from the start.

Job file (paths relative to the file)::

    scene = "orbit.xml"
    frames = "0-23"               # or [0, 23]
    spp = 64
    resolution = [320, 240]       # optional: overrides the film (a crop window with it)
    store = "renders/orbit.zarr"
    seed = 0
    tile = 128                    # optional (a store keeps its own): tracer.shared.default_tile
    accel = "auto"                # optional: auto, embree, warp, jax
    noise = 0.05                  # optional: a noise target, spp then the most a tile gets (farm.adaptive)
    min_spp = 256                 # optional, with noise: the least a tile gets
    aovs = "albedo:albedo,nn:sh_normal"  # optional: AOV channels, as Mitsuba's aov integrator's
    rfilter = "box"               # optional: the film's reconstruction filter (box for denoising)
    [groups]                      # optional
    count = 1
    hosts = 1
    devices_per_host = 2          # optional, CPU: devices per member (default one per core)
    platform = "cpu"              # cpu, gpu, tpu
    cpu_isa = "AVX2"              # optional, CPU: AVX, AVX2, AVX512 (default: a store keeps its own;
                                  # a new one this machine's locally, AVX2 on a cluster: tracer.runtime.xla_flags)
    task_timeout = 300            # optional: seconds a task may run before it is sent elsewhere
                                  # (default: 5x the run's median task time, at least 60 s: farm.failures)
    host_failures = 3             # optional: failed tasks after which a host is left out of the run
    priority = 0                  # optional: the job's priority in a shared cluster's queue (farm.queue)
    [params.angle]                # a keyframed $angle
    keys = [[0, 0.0], [23, 345.0]]
    interpolation = "linear"      # linear, step, smooth
    [params.height]
    value = 1.5

Limits (each refused by name, before a store exists): spp 1 to 2^30 (``MAX_SPP``); frame numbers
0 to 2^31 - 1 (``MAX_FRAME``: the traced program takes both as int32), at most 100,000 frames a
job (``MAX_FRAMES``); noise above 0 and at most 1e6, min_spp 1 to the spp (and only with noise);
tile 8 to 4096 pixels; pass_size 1 to 1024; seed 0 to 2^31 - 1; groups.task_timeout above 0 and
at most a week (seconds), groups.host_failures 1 to 10^6, groups.priority -1000 to 1000; film width and height 1 to 16384
(``MAX_FILM_SIZE``); a job file at most 1 MiB of UTF-8 TOML. A value of the wrong type
(``scene = 5``, ``params = 5``) is a ``SpecError`` naming the field.
"""
import dataclasses
import hashlib
import os
import tomllib
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Self, TypeGuard

from farm.curves import Curve
from farm.errors import SceneFileError, SpecError, shown
from farm.tree import CHUNK_SPP, NOISE_CHUNK_SPP, Tree
from tracer.shared import (DEFAULT_PASS_SIZE, FILTERS, ISAS, MAX_FILM_SIZE, MAX_FRAME, MAX_PASS_SIZE, MAX_SEED, MAX_SPP,
                           PLATFORMS, default_tile)
from tracer.io import reads
from tracer.io.aovs import parse_aovs
from tracer.errors import SceneError
from tracer.io.scene_info import SceneInfo, describe

__all__ = ["JobSpec", "GroupsSpec", "parse_frames", "parse_frame_list", "parse_res", "scene_info", "scene_defaults",
           "scene_hash", "scene_digest", "SceneDigest", "film_size", "frame_info", "MAX_FRAMES", "MIN_TILE", "MAX_TILE", "MAX_PASS_SIZE"]

ACCELS = ("auto", "embree", "warp", "jax")
# A job's frames are planned, hashed and recorded one by one on the driver: longer films are
# several jobs.
MAX_FRAMES = 100_000
MIN_TILE, MAX_TILE = 8, 4096
# A job's groups, members and devices at most, on any cluster (what one has is checked when it runs:
# farm.job.check_local, check_fits): Ray would otherwise start worker after worker for minutes.
MAX_GROUPS = {"count": 1024, "hosts": 1024, "devices_per_host": 1024}
MAX_TASK_TIMEOUT = 7 * 24 * 3600  # seconds: groups.task_timeout at most (a week)
MAX_HOST_FAILURES = 1_000_000     # groups.host_failures at most
MAX_PRIORITY = 1000               # groups.priority from -MAX_PRIORITY to MAX_PRIORITY
MAX_JOB_FILE = 1 << 20   # bytes
MAX_NOISE = 1e6          # a noise target past any image's (it is a relative error)


def parse_frames(text: str | int) -> tuple[int, int]:
    """'A-B' or 'A' -> (first, last)."""
    text = str(text).strip()
    try:
        if "-" in text.lstrip("-"):
            a, b = text.split("-", 1)
            first, last = int(a), int(b)
        else:
            first = last = int(text)
    except ValueError:
        raise SpecError(f"frames '{text}': expected FIRST-LAST or one frame number") from None
    return _check_frames((first, last), text)


def _check_frames(frames: Sequence[int], text: str) -> tuple[int, int]:
    first, last = frames
    if first < 0 or last < first:
        raise SpecError(f"frames '{text}': need 0 <= FIRST <= LAST")
    if last > MAX_FRAME:
        raise SpecError(f"frames '{text}': frame numbers go up to {MAX_FRAME}")
    if last - first >= MAX_FRAMES:
        raise SpecError(f"frames '{text}': at most {MAX_FRAMES} frames a job (split longer films into jobs)")
    return first, last


def parse_frame_list(text: str) -> tuple[int, ...]:
    """'3,7-9' -> (3, 7, 8, 9): frame numbers and inclusive ranges, sorted, each once."""
    frames: set[int] = set()
    for part in str(text).split(","):
        try:
            first, last = parse_frames(part) if part.strip() else (None, None)
        except SpecError as e:
            raise SpecError(f"--redo '{text}': {e}") from None
        if first is None or last is None:  # (both or neither)
            raise SpecError(f"--redo '{text}': expected frames like 3,7-9")
        frames.update(range(first, last + 1))
        if len(frames) > MAX_FRAMES:
            raise SpecError(f"--redo '{text}': at most {MAX_FRAMES} frames")
    return tuple(sorted(frames))


def parse_res(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        w, h = (int(v) for v in str(text).lower().split("x"))
    except ValueError:
        raise SpecError(f"resolution '{text}': expected WIDTHxHEIGHT, e.g. 320x240") from None
    return _check_res((w, h), text)


def _check_res(res: Sequence[int], text: str) -> tuple[int, int]:
    w, h = res
    if not (1 <= w <= MAX_FILM_SIZE and 1 <= h <= MAX_FILM_SIZE):
        raise SpecError(f"resolution '{text}': width and height must be between 1 and {MAX_FILM_SIZE}")
    return int(w), int(h)


def _whole(value: object) -> TypeGuard[int]:
    """An int that is not a bool (TOML's ``true`` would otherwise pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_count(name: str, value: object, low: int, high: int, unit: str = "") -> None:
    if not _whole(value) or not low <= value <= high:
        raise SpecError(f"{name} must be a whole number{unit} from {low} to {high}, got {shown(value)}")


@dataclasses.dataclass(frozen=True)
class GroupsSpec:
    count: int = 1
    hosts: int = 1
    devices_per_host: int | None = None  # CPU: None is one device per core (cluster.group.GroupShape)
    platform: str = "cpu"
    gpus_per_host: int = 0
    tpu_topology: str | None = None
    tpu_version: str | None = None
    cpu_isa: str | None = None  # CPU: the instruction-set level of the job's arithmetic (tracer.runtime.xla_flags.ISAS)
    task_timeout: float | None = None  # seconds a task may run before it is sent elsewhere (None: farm.failures')
    host_failures: int = 3  # failed tasks after which a host is left out of the run (farm.failures)
    priority: int = 0  # in a shared cluster's queue: higher gets groups first (farm.queue)

    def __post_init__(self) -> None:
        if self.cpu_isa is not None and self.cpu_isa not in ISAS:
            raise SpecError(f"groups.cpu_isa must be one of {', '.join(ISAS)}, got {shown(self.cpu_isa)}")
        counts = ("count", "hosts") + (() if self.devices_per_host is None else ("devices_per_host",))
        for name in counts:
            value = getattr(self, name)
            if not _whole(value) or value < 1:
                raise SpecError(f"groups.{name} must be a whole number >= 1, got {shown(value)}")
            if value > MAX_GROUPS[name]:
                raise SpecError(f"groups.{name} must be at most {MAX_GROUPS[name]}, got {shown(value)}")
        if not isinstance(self.platform, str) or self.platform not in PLATFORMS:
            raise SpecError(f"groups.platform must be one of {', '.join(PLATFORMS)}, got {shown(self.platform)}")
        if not _whole(self.gpus_per_host) or self.gpus_per_host < 0:
            raise SpecError(f"groups.gpus_per_host must be a whole number >= 0, got {shown(self.gpus_per_host)}")
        for name in ("tpu_topology", "tpu_version"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise SpecError(f"groups.{name} must be a string, got {shown(getattr(self, name))}")
        self._check_failures()

    def _check_failures(self) -> None:
        t = self.task_timeout
        if t is not None and not (isinstance(t, (int, float)) and not isinstance(t, bool)
                                  and 0 < t <= MAX_TASK_TIMEOUT):
            raise SpecError(f"groups.task_timeout must be a number of seconds above 0 and at most "
                            f"{MAX_TASK_TIMEOUT}, got {shown(t)}")
        _check_count("groups.host_failures", self.host_failures, 1, MAX_HOST_FAILURES)
        _check_count("groups.priority", self.priority, -MAX_PRIORITY, MAX_PRIORITY)

    def shape_only(self) -> "GroupsSpec":
        """These groups with what is not their shape (how failures are handled, the priority) at its defaults."""
        return dataclasses.replace(self, task_timeout=None, host_failures=3, priority=0)


@dataclasses.dataclass(frozen=True)
class JobSpec:
    scene: str                 # absolute path of the scene XML
    frames: tuple[int, int]    # (first, last), inclusive
    spp: int
    store: str                 # path or URL of the Zarr store
    resolution: tuple[int, int] | None = None  # (width, height) override
    seed: int = 0
    tile: int | None = None    # default: tracer.shared.default_tile of the groups' platform (planned)
    pass_size: int | None = None  # default: DEFAULT_PASS_SIZE (whatever the spp)
    chunk_passes: int | None = None  # default: farm.tree.CHUNK_SPP samples, NOISE_CHUNK_SPP with noise
                                     # (whatever the spp)
    curves: tuple[Curve, ...] = ()  # farm.curves.Curve
    accel: str = "auto"
    groups: GroupsSpec = GroupsSpec()
    noise: float | None = None  # a noise target (farm.adaptive): spp is then the most a tile gets
    min_spp: int | None = None  # with noise: the least a tile gets (default farm.adaptive.DEFAULT_MIN_SPP)
    aovs: str | None = None    # AOVs added to the scene's image (tracer.io.overrides), e.g. "albedo:albedo"
    rfilter: str | None = None  # the film's reconstruction filter in place of the scene's (tracer.filters)

    def __post_init__(self) -> None:
        for name in ("scene", "store"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "\0" in value:
                raise SpecError(f"{name} must be a path (a non-empty string), got {shown(value)}")
        if not (isinstance(self.frames, tuple) and len(self.frames) == 2 and all(map(_whole, self.frames))):
            raise SpecError(f"frames must be two whole numbers (first, last), got {shown(self.frames)}")
        _check_frames(self.frames, shown(list(self.frames)))
        if self.resolution is not None:
            if not (isinstance(self.resolution, tuple) and len(self.resolution) == 2
                    and all(map(_whole, self.resolution))):
                raise SpecError(f"resolution must be two whole numbers (width, height), "
                                f"got {shown(self.resolution)}")
            _check_res(self.resolution, shown(list(self.resolution)))
        _check_count("spp", self.spp, 1, MAX_SPP)
        if self.tile is not None:
            _check_count("tile", self.tile, MIN_TILE, MAX_TILE, " of pixels")
        _check_count("seed", self.seed, 0, MAX_SEED)
        if self.pass_size is not None:
            _check_count("pass_size", self.pass_size, 1, MAX_PASS_SIZE)
        if self.chunk_passes is not None:
            _check_count("chunk_passes", self.chunk_passes, 1, MAX_SPP)
        if not isinstance(self.accel, str) or self.accel not in ACCELS:
            raise SpecError(f"accel must be one of {', '.join(ACCELS)}, got {shown(self.accel)}")
        if not (isinstance(self.curves, tuple) and all(isinstance(c, Curve) for c in self.curves)):
            raise SpecError(f"curves must be a tuple of farm.curves.Curve, got {shown(self.curves)}")
        names = [c.name for c in self.curves]
        if len(set(names)) != len(names):
            raise SpecError("a parameter is set twice")
        if not isinstance(self.groups, GroupsSpec):
            raise SpecError(f"groups must be a GroupsSpec, got {shown(self.groups)}")
        self._check_noise()
        self._check_overrides()

    def _check_noise(self) -> None:
        noise = self.noise
        if noise is not None and not (isinstance(noise, (int, float)) and not isinstance(noise, bool)
                                      and 0 < noise <= MAX_NOISE):
            raise SpecError(f"noise must be a number above 0 and at most {MAX_NOISE:g}, got {shown(noise)}")
        if self.min_spp is not None:
            if noise is None:
                raise SpecError("min_spp is only for a noise target (set noise too)")
            _check_count("min_spp", self.min_spp, 1, self.spp, " of samples (at most the spp)")

    def _check_overrides(self) -> None:
        """The scene overrides (``tracer.io.overrides``): aovs a list Mitsuba reads, rfilter a
        filter we have; their names against the scene's are checked with the scene."""
        if self.aovs is not None:
            try:
                pairs = parse_aovs(self.aovs, "aovs") if isinstance(self.aovs, str) else ()
            except SceneError as e:
                raise SpecError(str(e)) from None
            names = [name for name, _ in pairs]
            if len(set(names)) != len(names):
                raise SpecError(f"aovs: an AOV name is given twice in {shown(self.aovs)}")
            if not pairs:
                raise SpecError(f"aovs must be \"NAME:TYPE,...\" (e.g. \"albedo:albedo,nn:sh_normal\"), "
                                f"got {shown(self.aovs)}")
        if self.rfilter is not None and (not isinstance(self.rfilter, str) or self.rfilter not in FILTERS):
            raise SpecError(f"rfilter must be one of {', '.join(FILTERS)}, got {shown(self.rfilter)}")

    # -- derived -------------------------------------------------------------------------------

    def planned(self, film: tuple[int, int] | None = None) -> Self:
        """This spec with the reduction tree and tiles fixed: pass size and passes per chunk, neither
        chosen from the spp (a job below one pass still renders whole passes, masked); a job made
        with a noise target gets smaller chunks; the tile its groups' platform's default, for frames
        of ``film`` ((width, height), when known: ``film_size``) (on an existing store the store's
        tree and tile are kept)."""
        pass_size = self.pass_size or DEFAULT_PASS_SIZE
        chunk = self.chunk_passes or -(-(CHUNK_SPP if self.noise is None else NOISE_CHUNK_SPP) // pass_size)
        tile = self.tile or default_tile(self.groups.platform, film if self.noise is None else None, pass_size)
        return dataclasses.replace(self, pass_size=pass_size, chunk_passes=chunk, tile=tile)

    @property
    def n_frames(self) -> int:
        return self.frames[1] - self.frames[0] + 1

    @property
    def tree(self) -> Tree:
        """The reduction tree (of a planned spec): ``farm.tree.Tree``."""
        assert self.pass_size is not None and self.chunk_passes is not None  # planned
        return Tree(self.pass_size, self.chunk_passes)

    def params_at(self, frame: int) -> tuple[tuple[str, str], ...]:
        """The scene's ``$name`` values at ``frame``, as sorted (name, value) pairs."""
        return tuple(sorted((c.name, _param_text(c.at(frame))) for c in self.curves))

    def identity(self, scene_digest: str) -> dict[str, Any]:
        """What a store is bound to (JSON-able)."""
        return {
            "scene_hash": scene_digest, "frames": list(self.frames),
            "resolution": list(self.resolution) if self.resolution else None, "seed": self.seed,
            "tile": self.tile, "pass_size": self.pass_size, "chunk_passes": self.chunk_passes,
            "params": [[c.name, c.interpolation, [list(k) for k in c.keys]] for c in self.curves],
            # (only when given: the stores of jobs without them keep the identity they were made with)
            **({"aovs": [list(p) for p in parse_aovs(self.aovs, "aovs")]} if self.aovs else {}),
            **({"rfilter": self.rfilter} if self.rfilter else {}),
        }

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["curves"] = [[c.name, c.interpolation, [list(k) for k in c.keys]] for c in self.curves]
        return d

    @classmethod
    def from_json(cls, d: object) -> Self:
        """The spec ``to_json`` gave (a store records it); a malformed one is a SpecError."""
        if not isinstance(d, dict):
            raise SpecError(f"a job spec must be a JSON object, got {shown(d)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise SpecError(f"unknown field '{unknown[0]}'")
        d = dict(d)
        for name in ("frames", "resolution"):
            if isinstance(d.get(name), list):
                d[name] = tuple(d[name])
        curves = d.get("curves", [])
        if not (isinstance(curves, list) and all(isinstance(c, list) and len(c) == 3 for c in curves)):
            raise SpecError(f"curves must be [[NAME, INTERPOLATION, KEYS], ...], got {shown(curves)}")
        d["curves"] = tuple(Curve(n, _pairs(keys), interp) for n, interp, keys in curves)
        d["groups"] = _groups(d.get("groups", {}))
        try:
            return cls(**d)
        except TypeError:  # a required field is missing
            raise SpecError(f"a job spec needs {', '.join(sorted(fields - set(d)))}") from None

    @classmethod
    def from_toml(cls, path: str) -> Self:
        """The job file at ``path`` (format in this module's docstring); errors are one-line
        SpecErrors that start with the path and name the field."""
        doc = _read_toml(path)
        try:
            return cls._from_toml_doc(doc, os.path.dirname(os.path.abspath(path)))
        except SpecError as e:
            raise SpecError(f"{path}: {e}") from None

    @classmethod
    def _from_toml_doc(cls, doc: dict[str, Any], base: str) -> Self:
        known = {"scene", "frames", "spp", "resolution", "store", "seed", "tile", "pass_size", "accel", "groups",
                 "params", "noise", "min_spp", "aovs", "rfilter"}
        unknown = sorted(set(doc) - known)
        if "optimize" in unknown:
            raise SpecError("an [optimize] table is an inverse-rendering job: run it with `farm optimize`")
        if unknown:
            raise SpecError(f"unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
        for key in ("scene", "store", "spp"):
            if key not in doc:
                raise SpecError(f"'{key}' is required")
        for key in ("scene", "store"):
            if not isinstance(doc[key], str) or not doc[key]:
                raise SpecError(f"{key} must be a path (a non-empty string), got {shown(doc[key])}")
        frames = doc.get("frames", "0")
        if isinstance(frames, list):
            if len(frames) != 2 or not all(_whole(f) for f in frames):
                raise SpecError(f"frames must be \"A-B\" or [A, B], got {shown(frames)}")
            frames = _check_frames(frames, shown(frames))
        elif isinstance(frames, str) or _whole(frames):
            frames = parse_frames(frames)
        else:
            raise SpecError(f"frames must be \"A-B\" or [A, B], got {shown(frames)}")
        res = doc.get("resolution")
        if res is not None:
            if not (isinstance(res, list) and len(res) == 2 and all(_whole(v) for v in res)):
                raise SpecError(f"resolution must be [WIDTH, HEIGHT], got {shown(res)}")
            res = _check_res(res, shown(res))
        store = doc["store"]
        if "://" not in store:
            store = os.path.join(base, store)
        return cls(scene=os.path.join(base, doc["scene"]), frames=frames, spp=doc["spp"], store=store,
                   resolution=res, seed=doc.get("seed", 0), tile=doc.get("tile"),
                   pass_size=doc.get("pass_size"), curves=_curves(doc.get("params", {})),
                   accel=doc.get("accel", "auto"), groups=_groups(doc.get("groups", {})), noise=doc.get("noise"),
                   min_spp=doc.get("min_spp"), aovs=doc.get("aovs"), rfilter=doc.get("rfilter"))


def _read_toml(path: str) -> dict[str, Any]:
    """The TOML document at ``path``, read whole (at most ``MAX_JOB_FILE`` bytes of UTF-8)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JOB_FILE + 1)
    except FileNotFoundError:
        raise SpecError(f"job file not found: {path}") from None
    except OSError as e:
        raise SpecError(f"{path}: cannot read the job file: {e.strerror or e}") from None
    if len(data) > MAX_JOB_FILE:
        raise SpecError(f"{path}: a job file is at most {MAX_JOB_FILE >> 20} MiB")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not UTF-8 text (byte {e.start} is {data[e.start]:#04x})") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise SpecError(f"{path}: not a job file: TOML nested too deeply") from None
    except ValueError as e:  # e.g. an integer past Python's digit limit
        raise SpecError(f"{path}: not valid TOML: {e}") from None


def _pairs(items):
    """[[A, B], ...] -> ((A, B), ...) (two-element lists only; anything else is left for checks)."""
    if not isinstance(items, list):
        return items
    return tuple(tuple(k) if isinstance(k, list) else k for k in items)


def _groups(table: object) -> GroupsSpec:
    """A [groups] table (or the groups of a recorded spec) as a GroupsSpec."""
    if not isinstance(table, dict):
        raise SpecError(f"[groups] must be a table, got {shown(table)}")
    known = {f.name for f in dataclasses.fields(GroupsSpec)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise SpecError(f"[groups]: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
    return GroupsSpec(**table)


def _param_text(value: float | str) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def _curves(params):
    """[params.NAME] tables (``value = V``, or ``keys = [[FRAME, V], ...]`` and ``interpolation``) as Curves."""
    if not isinstance(params, dict):
        raise SpecError(f"params must be [params.NAME] tables, got {shown(params)}")
    curves = []
    for name, p in params.items():
        if not isinstance(p, dict) or not ({"value"} <= set(p) or {"keys"} <= set(p)):
            raise SpecError(f"[params.{name}] needs 'value' or 'keys'")
        unknown = sorted(set(p) - {"value", "keys", "interpolation"})
        if unknown or {"value", "keys"} <= set(p):
            raise SpecError(f"[params.{name}]: one of 'value' or 'keys', and 'interpolation' (got {', '.join(p)})")
        if "value" in p:
            keys = ((0, p["value"]),)
        else:
            keys = p["keys"]
            if not (isinstance(keys, list) and all(isinstance(k, list) and len(k) == 2 for k in keys)):
                raise SpecError(f"[params.{name}] keys must be [[FRAME, VALUE], ...], got {shown(keys)}")
            keys = tuple(sorted((tuple(k) for k in keys), key=lambda k: _frame_order(k[0])))
        curves.append(Curve(name, keys, p.get("interpolation", "linear")))
    return tuple(curves)


def _frame_order(frame):
    """Sort key of a key's frame: whole numbers first in order, anything else (refused by Curve) after."""
    return (0, frame) if _whole(frame) else (1, 0)


# -- the scene, read on the driver without JAX ------------------------------------------------

def scene_info(path: str, params: Iterable[tuple[str, float | str]] = (), aovs: str | None = None,
               rfilter: str | None = None) -> SceneInfo:
    """``tracer.io.scene_info.describe`` of the scene with ``params`` ((name, value) pairs) set
    and a job's ``aovs`` and ``rfilter`` applied; a bad scene is a ``SceneFileError``."""
    if not os.path.isfile(path):
        raise SceneFileError(f"scene file not found: {path}")
    try:
        return describe(path, aovs=aovs, rfilter=rfilter, **dict(params))
    except SceneError as e:
        raise SceneFileError(str(e)) from None


def scene_defaults(path: str) -> dict[str, str]:
    """The names and values of the scene's ``<default>`` parameters (its included files' too)."""
    return scene_info(path).defaults


class SceneDigest(NamedTuple):
    """What a job's store records of its scene, and what members check the files they load against."""

    hash: str               # the store's identity's scene_hash (``scene_hash``)
    files: dict[str, str]   # absolute path -> SHA-256 hex of every file the hash covers


def scene_hash(path: str, param_sets: Iterable[Iterable[tuple[str, float | str]]] = ((),)) -> str:
    """SHA-256 over the scene XML and every file it reads (includes, spectra, meshes, images), as
    the loader resolves them, for each set of parameters in ``param_sets`` ((name, value) pairs,
    e.g. one per frame): the files of the first set in document order, each as its name and the
    SHA-256 of its bytes, then those that only other sets name. Sets after the first are read
    only when a file name depends on a parameter."""
    return scene_digest(path, param_sets).hash


def scene_digest(path: str, param_sets: Iterable[Iterable[tuple[str, float | str]]] = ((),)) -> SceneDigest:
    """``scene_hash``, and the SHA-256 of each file behind it by absolute path: the digests a
    member's loader takes of the bytes it reads (``tracer.io.reads``) must be these."""
    param_sets = list(dict.fromkeys(tuple(p) for p in param_sets)) or [()]
    first = scene_info(path, param_sets[0])
    try:
        data = reads.read_file(path)
    except OSError as e:
        raise SceneFileError(f"{path}: cannot read the scene file: {e.strerror}") from None
    digest = hashlib.sha256(data)
    seen, sums = set(), {os.path.abspath(path): hashlib.sha256(data).digest()}
    for index, params in enumerate(param_sets):
        files = (scene_info(path, params) if index else first).files[1:]  # [0]: the scene, hashed above
        for file in files:
            if index and (file.name, file.path) in seen:
                continue
            seen.add((file.name, file.path))
            key = os.path.abspath(file.path)
            if key not in sums:
                sums[key] = _file_sha256(file.path)
            digest.update(file.name.encode())
            digest.update(sums[key])
        if not any(file.varies for file in files):
            break
    return SceneDigest(digest.hexdigest(), {key: sum_.hex() for key, sum_ in sums.items()})


def _file_sha256(path: str) -> bytes:
    try:
        return hashlib.sha256(reads.read_file(path)).digest()
    except OSError as e:
        raise SceneFileError(f"{path}: cannot read a file of the scene: {e.strerror}") from None


def frame_info(spec: JobSpec) -> SceneInfo:
    """``scene_info`` of the job's first frame as the workers render it, the job's ``aovs`` and
    ``rfilter`` applied (``tracer.io.overrides``): its ``aovs`` are the scene's then the job's
    (a job's AOV name the scene has too is a ``SceneFileError``), its ``rfilter`` the job's or
    the scene's."""
    return scene_info(spec.scene, spec.params_at(spec.frames[0]), spec.aovs, spec.rfilter)


def film_size(spec: JobSpec) -> tuple[int, int]:
    """(width, height) of the frames: the override, or the size of the scene's film's crop window
    (the whole film unless cropped) at the first frame, with the loader's limits."""
    if spec.resolution:
        return spec.resolution
    size = scene_info(spec.scene, spec.params_at(spec.frames[0])).film_size
    return _check_res(size, f"{size[0]}x{size[1]} (the scene's film)")
