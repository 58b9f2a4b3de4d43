"""A render job: what to render (scene, frames, samples, parameters) and how (tiles, groups).

Built from a TOML job file (``JobSpec.from_toml``) or from ``farm render`` flags. ``identity``
is what a store is bound to: a store of another scene, frame range, resolution, seed or
reduction tree (tile, pass and chunk sizes) is refused. ``spp`` is not part of it: raising it
refines a finished job.

Job file (paths relative to the file)::

    scene = "orbit.xml"
    frames = "0-23"               # or [0, 23]
    spp = 64
    resolution = [320, 240]       # optional: overrides the film (a crop window with it)
    store = "renders/orbit.zarr"
    seed = 0
    tile = 128                    # optional
    accel = "auto"                # optional: auto, embree, warp, jax
    [groups]                      # optional
    count = 1
    hosts = 1
    devices_per_host = 2          # optional, CPU: devices per member (default one per core)
    platform = "cpu"              # cpu, gpu, tpu
    [params.angle]                # a keyframed $angle
    keys = [[0, 0.0], [23, 345.0]]
    interpolation = "linear"      # linear, step, smooth
    [params.height]
    value = 1.5
"""
import dataclasses
import hashlib
import os
import tomllib

from farm.curves import INTERPOLATIONS, Curve
from farm.errors import SpecError
from tracer.defaults import DEFAULT_PASS_SIZE, DEFAULT_TILE, MAX_FILM_SIZE, PLATFORMS
from tracer.io.errors import SceneError
from tracer.io.scene_info import describe

__all__ = ["JobSpec", "GroupsSpec", "parse_frames", "parse_res", "scene_info", "scene_defaults", "scene_hash",
           "film_size", "MAX_CHUNKS"]

# A frame's samples are split into at most this many chunks (each is one task per tile, and
# its sums are kept in the store until export): it bounds the store at MAX_CHUNKS images.
MAX_CHUNKS = 64
# A chunk should be at least this many samples per pixel: fewer, larger tasks for animations.
MIN_CHUNK_SPP = 256
ACCELS = ("auto", "embree", "warp", "jax")


def parse_frames(text):
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
    if first < 0 or last < first:
        raise SpecError(f"frames '{text}': need 0 <= FIRST <= LAST")
    return first, last


def parse_res(text):
    if text is None:
        return None
    try:
        w, h = (int(v) for v in str(text).lower().split("x"))
    except ValueError:
        raise SpecError(f"resolution '{text}': expected WIDTHxHEIGHT, e.g. 320x240") from None
    return _check_res((w, h), text)


def _check_res(res, text):
    w, h = res
    if not (1 <= w <= MAX_FILM_SIZE and 1 <= h <= MAX_FILM_SIZE):
        raise SpecError(f"resolution '{text}': width and height must be between 1 and {MAX_FILM_SIZE}")
    return int(w), int(h)


def _whole(value):
    """An int that is not a bool (TOML's ``true`` would otherwise pass as 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class GroupsSpec:
    count: int = 1
    hosts: int = 1
    devices_per_host: int = None  # CPU: None is one device per core (cluster.group.GroupShape)
    platform: str = "cpu"
    gpus_per_host: int = 0
    tpu_topology: str = None
    tpu_version: str = None

    def __post_init__(self):
        counts = ("count", "hosts") + (() if self.devices_per_host is None else ("devices_per_host",))
        for name in counts:
            value = getattr(self, name)
            if not _whole(value) or value < 1:
                raise SpecError(f"groups.{name} must be a whole number >= 1, got {value!r}")
        if self.platform not in PLATFORMS:
            raise SpecError(f"groups.platform must be one of {', '.join(PLATFORMS)}, got {self.platform!r}")


@dataclasses.dataclass(frozen=True)
class JobSpec:
    scene: str                 # absolute path of the scene XML
    frames: tuple              # (first, last), inclusive
    spp: int
    store: str                 # path or URL of the Zarr store
    resolution: tuple = None   # (width, height) override
    seed: int = 0
    tile: int = DEFAULT_TILE
    pass_size: int = None      # default: min(DEFAULT_PASS_SIZE, spp) at creation
    chunk_passes: int = None   # default: chosen from spp at creation (see ``planned``)
    curves: tuple = ()         # farm.curves.Curve
    accel: str = "auto"
    groups: GroupsSpec = GroupsSpec()

    def __post_init__(self):
        if not _whole(self.spp) or self.spp < 1:
            raise SpecError(f"spp must be a whole number >= 1, got {self.spp!r}")
        if not _whole(self.tile) or not 8 <= self.tile <= 4096:
            raise SpecError(f"tile must be a whole number of pixels between 8 and 4096, got {self.tile!r}")
        if not _whole(self.seed) or not 0 <= self.seed < 2**31:
            raise SpecError(f"seed must be a whole number in [0, 2^31), got {self.seed!r}")
        if self.accel not in ACCELS:
            raise SpecError(f"accel must be one of {', '.join(ACCELS)}, got {self.accel!r}")
        if self.pass_size is not None and (not _whole(self.pass_size) or self.pass_size < 1):
            raise SpecError(f"pass_size must be a whole number >= 1, got {self.pass_size!r}")
        names = [c.name for c in self.curves]
        if len(set(names)) != len(names):
            raise SpecError("a parameter is set twice")

    # -- derived -------------------------------------------------------------------------------

    def planned(self):
        """This spec with the reduction tree fixed: pass size and passes per chunk."""
        pass_size = self.pass_size or min(DEFAULT_PASS_SIZE, self.spp)
        n_passes = -(-self.spp // pass_size)
        chunk = self.chunk_passes
        if chunk is None:
            chunk = min(n_passes, max(-(-MIN_CHUNK_SPP // pass_size), -(-n_passes // MAX_CHUNKS)))
        return dataclasses.replace(self, pass_size=pass_size, chunk_passes=chunk)

    @property
    def n_frames(self):
        return self.frames[1] - self.frames[0] + 1

    def params_at(self, frame):
        """The scene's ``$name`` values at ``frame``, as sorted (name, value) pairs."""
        return tuple(sorted((c.name, _param_text(c.at(frame))) for c in self.curves))

    def identity(self, scene_digest):
        """What a store is bound to (JSON-able)."""
        return {
            "scene_hash": scene_digest, "frames": list(self.frames),
            "resolution": list(self.resolution) if self.resolution else None, "seed": self.seed,
            "tile": self.tile, "pass_size": self.pass_size, "chunk_passes": self.chunk_passes,
            "params": [[c.name, c.interpolation, [list(k) for k in c.keys]] for c in self.curves],
        }

    def to_json(self):
        d = dataclasses.asdict(self)
        d["curves"] = [[c.name, c.interpolation, [list(k) for k in c.keys]] for c in self.curves]
        return d

    @classmethod
    def from_json(cls, d):
        d = dict(d)
        d["frames"] = tuple(d["frames"])
        d["resolution"] = tuple(d["resolution"]) if d.get("resolution") else None
        d["curves"] = tuple(Curve(n, tuple(tuple(k) for k in keys), interp) for n, interp, keys in d["curves"])
        d["groups"] = GroupsSpec(**d["groups"])
        return cls(**d)

    @classmethod
    def from_toml(cls, path):
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise SpecError(f"job file not found: {path}") from None
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"{path}: not valid TOML: {e}") from None
        base = os.path.dirname(os.path.abspath(path))
        known = {"scene", "frames", "spp", "resolution", "store", "seed", "tile", "pass_size", "accel", "groups", "params"}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise SpecError(f"{path}: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
        for key in ("scene", "store", "spp"):
            if key not in doc:
                raise SpecError(f"{path}: '{key}' is required")
        frames = doc.get("frames", "0")
        if isinstance(frames, list):
            if len(frames) != 2 or not all(_whole(f) for f in frames):
                raise SpecError(f"{path}: frames must be \"A-B\" or [A, B]")
            frames = f"{frames[0]}-{frames[1]}"
        res = doc.get("resolution")
        if res is not None:
            if not (isinstance(res, list) and len(res) == 2 and all(_whole(v) for v in res)):
                raise SpecError(f"{path}: resolution must be [WIDTH, HEIGHT]")
            res = _check_res(res, res)
        groups = doc.get("groups", {})
        try:
            groups = GroupsSpec(**groups)
        except TypeError as e:
            raise SpecError(f"{path}: [groups]: {e}") from None
        store = doc["store"]
        if "://" not in store:
            store = os.path.join(base, store)
        return cls(scene=os.path.join(base, doc["scene"]), frames=parse_frames(frames), spp=doc["spp"],
                   store=store, resolution=res, seed=doc.get("seed", 0), tile=doc.get("tile", DEFAULT_TILE),
                   pass_size=doc.get("pass_size"), curves=_curves(doc.get("params", {}), path),
                   accel=doc.get("accel", "auto"), groups=groups)


def _param_text(value):
    return repr(float(value)) if isinstance(value, float) else str(value)


def _curves(params, path):
    curves = []
    for name, p in params.items():
        if not isinstance(p, dict) or not ({"value"} <= set(p) or {"keys"} <= set(p)):
            raise SpecError(f"{path}: [params.{name}] needs 'value' or 'keys'")
        interp = p.get("interpolation", "linear")
        if interp not in INTERPOLATIONS:
            raise SpecError(f"{path}: [params.{name}] interpolation must be one of {', '.join(INTERPOLATIONS)}")
        if "value" in p:
            keys = ((0, p["value"]),)
        else:
            try:
                keys = tuple(sorted((int(f), v) for f, v in p["keys"]))
            except (TypeError, ValueError):
                raise SpecError(f"{path}: [params.{name}] keys must be [[FRAME, VALUE], ...]") from None
        curves.append(Curve(name, keys, interp))
    return tuple(curves)


# -- the scene, read on the driver without JAX ------------------------------------------------

def scene_info(path, params=()):
    """``tracer.io.scene_info.describe`` of the scene with ``params`` ((name, value) pairs) set;
    a bad scene is a ``SpecError``."""
    if not os.path.isfile(path):
        raise SpecError(f"scene file not found: {path}")
    try:
        return describe(path, **dict(params))
    except SceneError as e:
        raise SpecError(str(e)) from None


def scene_defaults(path):
    """The names and values of the scene's ``<default>`` parameters (its included files' too)."""
    return scene_info(path).defaults


def scene_hash(path, param_sets=((),)):
    """SHA-256 over the scene XML and every file it reads (includes, spectra, meshes, images), as
    the loader resolves them, for each set of parameters in ``param_sets`` ((name, value) pairs,
    e.g. one per frame): the files of the first set in document order, each as its name and the
    SHA-256 of its bytes, then those that only other sets name. Sets after the first are read
    only when a file name depends on a parameter."""
    param_sets = list(dict.fromkeys(tuple(p) for p in param_sets)) or [()]
    first = scene_info(path, param_sets[0])
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read())
    seen, sums = set(), {}
    for index, params in enumerate(param_sets):
        files = (scene_info(path, params) if index else first).files[1:]  # [0]: the scene, hashed above
        for file in files:
            if index and (file.name, file.path) in seen:
                continue
            seen.add((file.name, file.path))
            if file.path not in sums:
                sums[file.path] = _file_sha256(file.path)
            digest.update(file.name.encode())
            digest.update(sums[file.path])
        if not any(file.varies for file in files):
            break
    return digest.hexdigest()


def _file_sha256(path):
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.digest()


def film_size(spec):
    """(width, height) of the frames: the override, or the size of the scene's film's crop window
    (the whole film unless cropped) at the first frame, with the loader's limits."""
    if spec.resolution:
        return spec.resolution
    size = scene_info(spec.scene, spec.params_at(spec.frames[0])).film_size
    return _check_res(size, f"{size[0]}x{size[1]} (the scene's film)")
