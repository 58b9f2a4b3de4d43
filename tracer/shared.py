"""What the farm and the tracer must agree on, in one module that imports nothing heavy.

``farm`` imports this module (no JAX, numpy only), as do the tracer's own modules, so each of
these is written once:

* a job's limits and default split (tile, pass size): a job's tile and pass sizes are part of
  its reduction tree (``tracer.rendering``), so ``tracer.render`` with these defaults gives the
  bits of a farm job made with them;
* the names a job may give: device platforms, reconstruction filters (``tracer.filters``),
  instruction-set levels (``tracer.runtime.xla_flags``);
* the last step of every reduction tree, ``resolve`` (pixels from a film's sums), which
  ``tracer.render`` applies to its tiles and the farm to its stores' frames;
* the layout of a film's AOV channels after its RGB (``tracer.integrators.aov`` fills them; the farm's store
  and export name them).
"""
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["OPTIMIZERS", "LOSSES", "DEFAULT_TILE", "ACCELERATOR_TILE", "TRACE_SAMPLES", "DEFAULT_PASS_SIZE", "PLATFORMS", "MAX_FILM_SIZE",
           "MAX_SPP", "MAX_FRAME", "MAX_SEED", "MAX_PASS_SIZE", "FILTERS", "ISAS", "PORTABLE_ISA", "pass_samples",
           "fitting_tile", "default_tile", "resolve", "AOV_SUFFIXES", "AOV_TYPES", "MOMENT_TYPES", "aov_channel_names",
           "aov_channel_count", "find_aov"]

DEFAULT_TILE = 128       # output tile edge, pixels: one work unit renders one tile
# A farm job's tile on GPUs and TPUs: their work unit wants millions of samples in flight (an H100
# traced the Cornell box at 36 Msamples/s in 128-pixel tiles of 16 spp, 83 in 512-pixel ones).
ACCELERATOR_TILE = 512
# Samples a CPU work unit traces as one batch at most (tracer.rendering.trace_samples).
TRACE_SAMPLES = 1 << 21
_MARGIN = 4  # pixels a tile's samples reach past it at most (the filter's radius; tracer.filters)
DEFAULT_PASS_SIZE = 16   # samples per pixel in one pass, the unit passes are summed in
PLATFORMS = ("cpu", "gpu", "tpu")  # device platforms a worker group may run on
MAX_FILM_SIZE = 16384    # pixels, a film's width and height at most (a scene's own film and --res alike)
# The traced program takes frame numbers and sample indices as int32: a frame number past
# MAX_FRAME, or a sample index past 2^31 - 1 (spp plus a pass's slack), would wrap around.
MAX_SPP = 2**30          # samples per pixel at most
MAX_FRAME = 2**31 - 1    # the largest frame number
MAX_SEED = 2**31 - 1     # the largest seed (int32 too)
MAX_PASS_SIZE = 1024     # samples per pixel in one pass (a static shape of the compiled program)
# Mitsuba's reconstruction filters (``rfilter`` plugins) that a job may name (tracer.filters).
FILTERS = ("box", "tent", "gaussian", "mitchell", "catmullrom", "lanczos")
OPTIMIZERS = ("adam", "sgd")  # inverse rendering's optimizers (optax's; tracer.optimizer)
LOSSES = ("l2", "l1")  # inverse rendering's losses: the mean over pixels and channels (tracer.differentiable)
ISAS = ("AVX", "AVX2", "AVX512")  # XLA's names for a CPU job's instruction-set level, lowest first
PORTABLE_ISA = "AVX2"  # a cluster job's level: every x86-64 CPU since 2013-2015 (tracer.runtime.xla_flags)


def pass_samples(pass_size: int, tile_h: int, tile_w: int, margin: int = _MARGIN) -> int:
    """Samples one pass of a tile traces: its source grid is the tile grown by the filter's margin."""
    return pass_size * (tile_h + 2 * margin) * (tile_w + 2 * margin)


def fitting_tile(width: int, height: int, pass_size: int, budget: int, margin: int = _MARGIN,
                 grow: bool = False) -> int:
    """The frame's longer edge where one pass of the whole frame fits ``budget`` samples (one
    work unit drains its path pool once, where tiles would each), else ``DEFAULT_TILE``; with
    ``grow``, that doubled while a pass of it still fits and it is smaller than the frame."""
    if pass_samples(pass_size, height, width, margin) <= budget:
        return max(width, height)
    tile = DEFAULT_TILE
    while grow and tile * 2 < max(width, height) and pass_samples(pass_size, tile * 2, tile * 2, margin) <= budget:
        tile *= 2
    return tile


def default_tile(platform: str, film: tuple[int, int] | None = None, pass_size: int = DEFAULT_PASS_SIZE) -> int:
    """A new job's tile when it names none (the tile does not change a pixel's bits, only how the
    work is split): ``ACCELERATOR_TILE`` on GPUs and TPUs. On CPUs the whole frame where one pass
    of it fits ``TRACE_SAMPLES`` (``film``: its (width, height); None for a job with a noise
    target, whose tiles are where its samples go), else ``DEFAULT_TILE``: a 160x120 frame in
    128-pixel tiles is two work units, the second a quarter used."""
    if platform != "cpu":
        return ACCELERATOR_TILE
    if film is None or max(film) <= DEFAULT_TILE:
        return DEFAULT_TILE
    return fitting_tile(*film, pass_size, TRACE_SAMPLES)


# ------------------------------------------------------------------------- the reduction's last step
def resolve(value: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Pixel values from a film's accumulated sums (numpy): sum(f L) / sum(f), zero where sum(f) is zero.

    A film accumulates, per pixel, the sum of filter-weighted radiance ``sum(f L)`` and the sum of
    filter weights ``sum(f)`` (Mitsuba's ``ImageBlock``); the pixel's value is their ratio, as
    Mitsuba's film develops it (negative-lobed filters, mitchell and lanczos, can make the sum of
    weights negative: Mitsuba divides by any non-zero sum).

    value: (..., C) float32, weight: (...) float32. Returns (..., C) float32.
    """
    safe = np.where(weight != 0, weight, 1.0)
    return np.where(weight[..., None] != 0, value / safe[..., None], 0.0).astype(np.float32)


# ------------------------------------------------------------------------- AOV channels
# Each AOV type of Mitsuba's ``aov`` integrator and the suffixes of its channels, as its aov.cpp
# names them: an AOV ``nn:sh_normal`` gives the channels ``nn.X``, ``nn.Y``, ``nn.Z`` after R, G, B.
AOV_SUFFIXES = {
    "albedo": ("R", "G", "B"),
    "depth": ("T",),
    "position": ("X", "Y", "Z"),
    "uv": ("U", "V"),
    "geo_normal": ("X", "Y", "Z"),
    "sh_normal": ("X", "Y", "Z"),
    "dp_du": ("X", "Y", "Z"),
    "dp_dv": ("X", "Y", "Z"),
    "duv_dx": ("U", "V"),
    "duv_dy": ("U", "V"),
    "prim_index": ("I",),
    "shape_index": ("I",),
}
AOV_TYPES = tuple(AOV_SUFFIXES)  # what an aov integrator's list may name
# Mitsuba's ``moment`` integrator: the XYZ of its nested integrator's radiance and their squares
# (tracer.io.aovs), types a scene's ``aovs`` list cannot name.
MOMENT_TYPES = ("moment_xyz", "moment_m2")
AOV_SUFFIXES.update({kind: ("X", "Y", "Z") for kind in MOMENT_TYPES})


def aov_channel_names(aovs: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The AOV channels' names (Mitsuba's ``aov_names``) of ((name, type), ...), after R, G, B."""
    return tuple(f"{name}.{suffix}" for name, kind in aovs for suffix in AOV_SUFFIXES[kind])


def aov_channel_count(aovs: Iterable[tuple[str, str]]) -> int:
    """How many channels the AOVs ((name, type), ...) add after R, G, B."""
    return sum(len(AOV_SUFFIXES[kind]) for _, kind in aovs)


def find_aov(aovs: Sequence[tuple[str, str]], *kinds: str) -> int | None:
    """The channel offset (after R, G, B: 3 + ...) of the first AOV of the first of ``kinds``
    the list has, or None."""
    for kind in kinds:
        offset = 3
        for _, k in aovs:
            if k == kind:
                return offset
            offset += len(AOV_SUFFIXES[k])
    return None
