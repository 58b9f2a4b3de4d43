"""Intel Embree as the triangle intersection engine on CPUs, called from XLA through its FFI.

The jitted program sends a wavefront's rays to Embree in one custom call
(``tracer/accel/native/embree_ffi.cc``, built by ``pip install`` into ``_embree_ffi*.so``):
rays and hits stay in XLA's buffers and no Python runs on the way. The program names a scene by
an int32 handle, so every frame of a job (a new scene each) reuses one compiled program.

Embree's library is the one the ``embreex`` wheel ships; its arithmetic differs between its ISA
paths (hit distances, not ids), so scenes are built on a device pinned to the process's
instruction-set level, the job's (``tracer.runtime.xla_flags``).
"""
import ctypes
import importlib.machinery
import importlib.util
import os
import pathlib
import threading
import weakref
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from tracer.runtime import xla_flags

__all__ = ["available", "unavailable_reason", "build", "EmbreeScene", "closest_hit", "closest_hit_instanced",
           "occluded", "device_config",
           "is_open",
           "MISSING"]

MISSING = "the 'embree' intersection backend is unavailable"
_HERE = pathlib.Path(__file__).resolve().parent
_TARGETS = {"closest": "jaxfarm_embree_closest", "closest_instanced": "jaxfarm_embree_closest_instanced",
            "occluded": "jaxfarm_embree_occluded"}
_EMBREE_ISA = {"AVX": "avx", "AVX2": "avx2", "AVX512": "avx512"}  # XLA's level -> Embree's name

_lock = threading.Lock()
_loaded: ctypes.CDLL | str | None = None  # the extension, or why it could not be loaded


def _extension_path() -> pathlib.Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = _HERE / f"_embree_ffi{suffix}"
        if path.exists():
            return path
    return None


def _embree_library() -> pathlib.Path | None:
    """The Embree 4 library inside the embreex wheel (``embreex.libs/libembree4-*.so*``)."""
    spec = importlib.util.find_spec("embreex")
    if spec is None or not spec.submodule_search_locations:
        return None
    libs = pathlib.Path(next(iter(spec.submodule_search_locations))).parent / "embreex.libs"
    return next(iter(sorted(libs.glob("libembree4*.so*"))), None)


def _load() -> ctypes.CDLL | str:
    """The loaded extension with its XLA targets registered, or a one-line reason it is not."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _open()
        return _loaded


def _open() -> ctypes.CDLL | str:
    extension = _extension_path()
    if extension is None:
        return ("its native extension was not built (tracer/accel/_embree_ffi*.so; "
                "reinstall with a C++ compiler: pip install -e .)")
    embree = _embree_library()
    if embree is None:
        return "Embree's library was not found (it comes with the embreex wheel: pip install embreex)"
    try:
        lib = ctypes.CDLL(str(extension))
    except OSError as e:
        return f"its native extension does not load: {e}"
    lib.jf_embree_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.jf_embree_new_scene.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                                        ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                        ctypes.c_size_t]
    lib.jf_embree_new_scene.restype = ctypes.c_int32
    lib.jf_embree_release_scene.argtypes = [ctypes.c_int32]
    lib.jf_embree_scene_is_open.argtypes = [ctypes.c_int32]
    error = ctypes.create_string_buffer(512)
    if lib.jf_embree_open(os.fsencode(embree), error, len(error)) != 0:
        return error.value.decode(errors="replace")
    for name, target in _TARGETS.items():
        handler = getattr(lib, "JfEmbree" + name.title().replace("_", ""))
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(handler), platform="cpu")
    return lib


def unavailable_reason() -> str | None:
    """Why Embree cannot serve in this process (one line), or None when it can."""
    loaded = _load()
    return loaded if isinstance(loaded, str) else None


def available() -> bool:
    return unavailable_reason() is None


def is_open(handle: int) -> bool:
    """Whether Embree holds a scene under ``handle`` (not yet closed or freed)."""
    lib = _load()
    return not isinstance(lib, str) and bool(lib.jf_embree_scene_is_open(handle))


def device_config(isa: str | None = None) -> str:
    """Embree's device configuration for the instruction-set level ``isa`` (one of
    ``tracer.shared.ISAS``; default: the process's, as its XLA_FLAGS name it, else the host's)."""
    isa = isa or xla_flags.named_isa(os.environ.get("XLA_FLAGS")) or xla_flags.local_isa()
    return f"isa={_EMBREE_ISA[isa]}"


class EmbreeScene:
    """An Embree scene answering the jitted queries under the int32 ``handle`` until ``close()``.
    Closing twice is harmless, and a scene that is dropped unclosed closes itself."""

    def __init__(self, lib: ctypes.CDLL, handle: int) -> None:
        self.handle = handle
        self._finalizer = weakref.finalize(self, lib.jf_embree_release_scene, handle)
        # Not at exit: JAX's own exit hook waits for work in flight that may still ask this scene.
        self._finalizer.atexit = False

    def close(self) -> None:
        """Free Embree's scene; queries under this handle fail from now on."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def build(p0: np.ndarray, p1: np.ndarray, p2: np.ndarray, robust: bool = False, isa: str | None = None,
          groups: Sequence[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = (),
          instances: Sequence[tuple[int, np.ndarray]] = ()) -> EmbreeScene:
    """Host: an Embree scene over world triangles p0, p1, p2 (3, T) on the device of ``isa``
    (``device_config``); ``robust``: Embree's watertight triangle test (Mitsuba's default is
    off: mesh.xml renders 1.04-1.08x faster without it). ``groups``: shape groups of triangles,
    each (the id of its first triangle in the program's tables, p0, p1, p2 in object space);
    ``instances``: (group index, to_world (3, 4)) each, answered by ``closest_hit_instanced`` as
    instance i of the list. Raises ImportError where Embree is unavailable, RuntimeError where
    Embree refuses the scene."""
    lib = _load()
    if isinstance(lib, str):
        raise ImportError(f"{MISSING}: {lib}")
    corners = lambda a, b, c: np.ascontiguousarray(np.stack([a.T, b.T, c.T], axis=1), np.float32)  # (T, 3, 3)
    vertices = corners(p0, p1, p2)
    group_vertices = np.ascontiguousarray(np.concatenate([corners(*g[1:]) for g in groups] or [np.zeros((0, 3, 3), np.float32)]),
                                          np.float32)
    group_counts = np.array([g[1].shape[1] for g in groups] or [0], np.int64)
    group_first = np.array([g[0] for g in groups] or [0], np.int32)
    instance_group = np.array([g for g, _ in instances] or [0], np.int32)
    # Each 3x4 map column after column (Embree's RTC_FORMAT_FLOAT3X4_COLUMN_MAJOR).
    xfm = np.ascontiguousarray(np.array([np.asarray(m, np.float64)[:3, :4].T.reshape(-1) for _, m in instances]
                                        or [np.zeros(12)], np.float32))
    pointer = lambda a: a.ctypes.data
    error = ctypes.create_string_buffer(512)
    handle = lib.jf_embree_new_scene(pointer(vertices), vertices.shape[0], len(groups), pointer(group_vertices),
                                     pointer(group_counts), pointer(group_first), len(instances),
                                     pointer(instance_group), pointer(xfm), int(robust), device_config(isa).encode(),
                                     error, len(error))
    if handle <= 0:
        raise RuntimeError(error.value.decode(errors="replace"))
    return EmbreeScene(lib, handle)


def _query(target: str, results: tuple[jax.ShapeDtypeStruct, ...], handle: jax.Array, o: jax.Array,
           d: jax.Array, t_max: ArrayLike) -> tuple[jax.Array, ...]:
    lib = _load()
    if isinstance(lib, str):
        raise ImportError(f"{MISSING}: {lib}")
    n = o.shape[1]
    t_max = jnp.broadcast_to(jnp.asarray(t_max, jnp.float32), (n,))
    # Each ray is answered on its own: under vmap a batch of batches is still one batch of rays.
    call = jax.ffi.ffi_call(target, results, vmap_method="sequential")
    return tuple(call(jnp.asarray(handle, jnp.int32), o.astype(jnp.float32), d.astype(jnp.float32), t_max))


def closest_hit(handle: jax.Array, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """(t, prim) of rays o, d (3, N) against the scene ``handle``; t = inf, prim = -1 for misses
    and for rays with t_max <= 0 (they ask nothing)."""
    n = o.shape[1]
    t, prim = _query(_TARGETS["closest"], (jax.ShapeDtypeStruct((n,), jnp.float32),
                                           jax.ShapeDtypeStruct((n,), jnp.int32)), handle, o, d, t_max)
    return t, prim


def closest_hit_instanced(handle: jax.Array, o: jax.Array, d: jax.Array,
                          t_max: ArrayLike) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(t, prim, instance) of rays o, d (3, N) against the scene ``handle`` built with instances:
    as ``closest_hit``, with the instance hit (-1 for a world triangle or a miss) and its triangle
    as the program's tables number it."""
    n = o.shape[1]
    t, prim, instance = _query(_TARGETS["closest_instanced"], (jax.ShapeDtypeStruct((n,), jnp.float32),
                                                               jax.ShapeDtypeStruct((n,), jnp.int32),
                                                               jax.ShapeDtypeStruct((n,), jnp.int32)),
                               handle, o, d, t_max)
    return t, prim, instance


def occluded(handle: jax.Array, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> jax.Array:
    """(N,) bool: the scene ``handle`` has a triangle at 0 < t < t_max along the ray."""
    (blocked,) = _query(_TARGETS["occluded"], (jax.ShapeDtypeStruct((o.shape[1],), jnp.bool_),), handle, o, d, t_max)
    return blocked
