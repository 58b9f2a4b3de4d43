"""The jitted work unit, and whole-image rendering built from it.

A work unit is one output tile of one frame for a run of sample passes. Its shapes depend only
on the tile size, the pass size and the scene's static structure, so every tile, frame and pass
range of a job reuses one compiled program (frame, seed, tile origin and pass range are traced).

Reduction tree (what makes split renders bit-identical): a pass is ``pass_size`` consecutive
sample indices; within a pass, samples are summed in sample order per source pixel and the
filter splats are added in a fixed order; passes are added to the accumulator one at a time in
pass order, starting from the accumulator given. Samples at or past ``spp`` are masked out, so a
short last pass adds exact zeros.
"""
from __future__ import annotations

import dataclasses
import functools
import numbers
from typing import TYPE_CHECKING, Self

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from tracer import camera as cameras
from tracer import film as films
from tracer import rng
from tracer.integrators import aov
from tracer.integrators import volpath, volpathmis
from tracer.integrators.direct import trace_direct
from tracer.integrators.path import DEFAULT_POOL, DRAIN_PHASES, drain_phases, pool_size, trace_paths
from tracer.pytree import pytree_dataclass
from tracer.rng import Dims
from tracer.runtime import compilation_cache, compiled, process
from tracer.runtime.programs import KeptPrograms
from tracer.shared import (DEFAULT_PASS_SIZE, DEFAULT_TILE, MAX_FILM_SIZE, MAX_FRAME, MAX_PASS_SIZE, MAX_SEED, MAX_SPP,
                           TRACE_SAMPLES, aov_channel_count, fitting_tile, pass_samples, resolve)

if TYPE_CHECKING:
    from tracer.film import Film
    from tracer.scene import Scene

__all__ = ["local_mesh", "WorkShape", "WorkItem", "plan_work", "render_tile", "render", "trace_passes", "trace_samples",
           "whole_image_tile",
           "TRACE_SAMPLES", "ACCELERATOR_TRACE_SAMPLES",
           "DEFAULT_PASS_SIZE", "DEFAULT_TILE"]

RAY_AXIS = "rays"
LANE_BLOCK = 64  # rays a device traces come in whole blocks of this many (_render_passes)


def local_mesh() -> Mesh:
    """A one-axis mesh over this process's devices; ray batches are split along it."""
    return Mesh(np.array(jax.local_devices()), (RAY_AXIS,))


# Samples one work unit traces as one batch at most. On a CPU a sample keeps its ray, key and
# radiance (~60 bytes) while a pool of some thousands of lanes a device traces the paths. On GPUs
# and TPUs every sample is a lane in flight (``tracer.integrators.path.pool_size``), about 0.9 KB of path state
# each (one pool for 2^23 samples, on a CPU: 9 GB), and the batch is what fills the chip: on an
# H100 the Cornell box at 1024x1024 traced 36 Msamples/s in units of 2^18 samples, 62 at 2^20,
# 83 at 2^22 and 94 at 2^24.
ACCELERATOR_TRACE_SAMPLES = 1 << 23  # where the device's memory is not known
_MAX_ACCELERATOR_TRACE_SAMPLES = 1 << 24
_BYTES_A_LANE = 2048  # device memory a lane may take: twice the ~0.9 KB measured, for scenes that keep more


def trace_samples(platform: str | None = None) -> int:
    """Samples a work unit traces as one batch at most: ``TRACE_SAMPLES`` on CPUs; on GPUs and
    TPUs the largest power of two up to 2^24 whose lanes fit the device's memory at 2 KB each
    (80 GB: 2^24; 16 GB: 2^22), ``ACCELERATOR_TRACE_SAMPLES`` where that is unknown.
    ``platform``: JAX's platform name, default this process's backend (another platform's
    budget is ``ACCELERATOR_TRACE_SAMPLES``)."""
    backend = jax.default_backend()
    platform = backend if platform is None else platform
    if platform == "cpu":
        return TRACE_SAMPLES
    stats = (jax.local_devices()[0].memory_stats() or {}) if platform == backend else {}
    if not stats.get("bytes_limit"):
        return ACCELERATOR_TRACE_SAMPLES
    lanes = stats["bytes_limit"] // _BYTES_A_LANE
    return max(1 << 16, min(_MAX_ACCELERATOR_TRACE_SAMPLES, 1 << (max(1, lanes).bit_length() - 1)))


def trace_passes(chunk_passes: int, pass_size: int, tile_h: int, tile_w: int, film: Film,
                 platform: str | None = None) -> int:
    """Passes a work unit traces as one batch: the largest divisor of ``chunk_passes`` (the passes
    a work unit usually adds) within ``trace_samples(platform)``. One batch drains its path pool
    once: a pool's last bounces run mostly idle lanes (orbit.xml: a third of all lanes traced), so
    fewer, larger batches waste less. The bits do not depend on it (a path's arithmetic is its
    own; each pass is splatted and added alone, in order)."""
    chunk_passes = max(1, chunk_passes)
    fits = max(1, trace_samples(platform) // pass_samples(pass_size, tile_h, tile_w, film.margin))
    return max(d for d in range(1, min(chunk_passes, fits) + 1) if chunk_passes % d == 0)


@dataclasses.dataclass(frozen=True)
class WorkShape:
    """What a work unit's compiled program depends on besides the scene's structure and the mesh:
    static, so one program serves every task of a job. The sizes in pixels and samples decide the
    bits (the reduction tree); ``path_pool``, ``passes_traced`` and ``drain_phases`` only the
    speed and the compile time."""

    tile_h: int                        # output tile, pixels
    tile_w: int
    pass_size: int                     # samples per pixel in a pass
    path_pool: int = DEFAULT_POOL      # paths in flight per device (integrators.path.pool_size)
    passes_traced: int = 1             # passes traced as one batch (trace_passes)
    drain_phases: int = DRAIN_PHASES   # integrators.path.drain_phases of the samples the program traces in all


@pytree_dataclass
class WorkItem:
    """Which samples a work unit adds: int32 scalars, traced (a job's every frame, tile and pass
    range runs one program). (tile_y, tile_x) is the tile's top-left pixel in the film's crop
    window; passes [first_pass, first_pass + n_passes) of ``WorkShape.pass_size`` samples, those
    at or past ``spp`` masked out."""

    frame: jnp.ndarray | np.int32  # np.int32 on the host (``of``), arrays in the traced program
    seed: jnp.ndarray | np.int32
    tile_y: jnp.ndarray | np.int32
    tile_x: jnp.ndarray | np.int32
    first_pass: jnp.ndarray | np.int32
    n_passes: jnp.ndarray | np.int32
    spp: jnp.ndarray | np.int32

    @classmethod
    def of(cls, frame: int, seed: int, tile_y: int, tile_x: int, first_pass: int, n_passes: int, spp: int) -> Self:
        """A work item from host integers (as numpy int32 scalars)."""
        return cls(*(np.int32(v) for v in (frame, seed, tile_y, tile_x, first_pass, n_passes, spp)))


def plan_work(scene: Scene, tile_h: int, tile_w: int, pass_size: int, chunk_passes: int, job_samples: int,
              platform: str | None = None) -> WorkShape:
    """The ``WorkShape`` of a job's work unit in this process: tiles of ``tile_h`` x ``tile_w``,
    ``chunk_passes`` passes of ``pass_size`` a work unit usually adds, ``job_samples`` samples in
    the job (``tracer.integrators.path.drain_phases``)."""
    return WorkShape(tile_h, tile_w, pass_size, path_pool=pool_size(scene),
                     passes_traced=trace_passes(chunk_passes, pass_size, tile_h, tile_w, scene.film, platform),
                     drain_phases=drain_phases(job_samples))


def _render_passes(scene: Scene, frame: jax.Array, seed: jax.Array, tile_y: jax.Array, tile_x: jax.Array,
                   first_sample: jax.Array, live: jax.Array, spp: jax.Array, *, tile_h: int, tile_w: int,
                   pass_size: int, passes: int, mesh: Mesh, path_pool: int,
                   phases: int) -> tuple[jax.Array, jax.Array]:
    """The splats of ``passes`` consecutive passes from ``first_sample``, traced as one batch:
    value (passes, tile_h, tile_w, C) and weight (passes, tile_h, tile_w). Passes at or past
    ``live`` (traced) trace nothing (their samples are invalid) and are to be left out."""
    film = scene.film
    m = film.margin
    gh, gw = tile_h + 2 * m, tile_w + 2 * m
    shape = (passes * pass_size, gh, gw)
    n = passes * pass_size * gh * gw
    n_dev = mesh.devices.size
    # A device's rays, rounded up to whole blocks of LANE_BLOCK: XLA's CPU code computes an
    # array's last partial vector in a remainder loop, whose rounding can differ from the vector
    # loop's (measured: 22 camera rays a pass an ulp apart between 2 and 3 devices on a 17-row
    # tile). In whole blocks, every ray is a vector loop's on any device count.
    per_device = -(-n // (n_dev * LANE_BLOCK)) * LANE_BLOCK

    # Everything runs inside shard_map, nothing is left to XLA's partitioner (which may split a
    # reduction differently for different device counts). Device i traces the rays
    # [i * per_device, (i + 1) * per_device) of the batch's flat (sample, y, x) grid; then every
    # device gathers all their radiance and splats its band of the tile's rows.
    def pass_on_device(scene, frame, seed, tile_y, tile_x, first_sample, live, spp):
        def samples(s, gy, gx):
            """Pixel, validity and key of pass sample s at source grid (gy, gx) (broadcast)."""
            py, px = film.crop_y + tile_y - m + gy, film.crop_x + tile_x - m + gx
            sample = first_sample + s
            valid = ((gy < gh) & (py >= 0) & (py < film.height) & (px >= 0) & (px < film.width) & (sample < spp)
                     & (s < live * pass_size))
            keys = rng.sample_keys(scene.settings.sampler, seed, frame, (py * film.width + px).astype(jnp.uint32),
                                   sample.astype(jnp.uint32))
            return py, px, valid, keys

        device = jax.lax.axis_index(RAY_AXIS)

        def batch_samples(j):
            """Pixel, validity and key of this device's batch samples j (the flat (sample, y, x) grid)."""
            flat = device * per_device + j
            rest = flat % (gh * gw)
            py, px, valid, keys = samples(flat // (gh * gw), rest // gw, rest % gw)
            return py, px, valid & (flat < n), keys

        def camera(j):
            """Keys and camera rays of this device's batch samples j."""
            py, px, _, keys = batch_samples(j)
            offset = rng.draw(keys, Dims.FILM)
            film_uv = jnp.stack([(px.astype(jnp.float32) + offset[0]) / film.width,
                                 (py.astype(jnp.float32) + offset[1]) / film.height])
            return (keys, *cameras.generate_rays(scene.camera, film_uv, rng.draw(keys, Dims.APERTURE)))

        everyone = jnp.arange(per_device, dtype=jnp.int32)
        valid = batch_samples(everyone)[2]
        # Each device's path loop ends when its own paths do; the path integrators make each
        # camera ray as a lane takes its sample, the others take the batch's rays at once.
        if scene.settings.integrator in ("volpath", "volpathmis"):
            module = volpath if scene.settings.integrator == "volpath" else volpathmis
            radiance = trace_paths(scene, camera, valid, pool=path_pool, phases=phases,
                                   start=module.start, step=module.step)
        elif scene.settings.integrator != "direct":
            radiance = trace_paths(scene, camera, valid, pool=path_pool, phases=phases)
        if scene.settings.integrator == "direct" or scene.settings.aovs:
            keys, origin, direction, t_max = camera(everyone)
            if scene.settings.integrator == "direct":
                radiance = trace_direct(scene, keys, origin, direction, t_max, valid)
        if scene.settings.aovs:  # Mitsuba's aov integrator: its AOVs after the RGB, splatted alike
            radiance = jnp.concatenate([radiance, aov.evaluate(scene, origin, direction, t_max, valid, radiance)])
        radiance = jnp.where(jnp.isfinite(radiance), radiance, 0.0)  # as Mitsuba's film, drop NaN/inf samples

        # Each device splats its own band of output rows from every device's samples, then the
        # bands are gathered: a pixel's sum runs in the same order whichever device makes it.
        # Only radiance crosses devices; the band's positions and validity are recomputed (the
        # same integer hashes), which halves what the gather moves.
        rows = -(-tile_h // n_dev)
        first_row = device * rows
        radiance = jax.lax.all_gather(radiance, RAY_AXIS, axis=1, tiled=True)[:, :n].reshape(-1, *shape)
        radiance = jax.lax.dynamic_slice_in_dim(jnp.pad(radiance, [(0, 0), (0, 0), (0, n_dev * rows - tile_h), (0, 0)]),
                                                first_row, rows + 2 * m, axis=2)

        def splat(k):  # pass k's samples, splatted alone
            first = k * pass_size
            grid = (first + jnp.arange(pass_size, dtype=jnp.int32)[:, None, None],
                    first_row + jnp.arange(rows + 2 * m, dtype=jnp.int32)[None, :, None],
                    jnp.arange(gw, dtype=jnp.int32)[None, None, :])
            _, _, band_valid, band_keys = samples(*grid)
            band = jax.lax.dynamic_slice_in_dim(radiance, first, pass_size, axis=1)
            return films.splat_tile(film, rng.draw(band_keys, Dims.FILM), band, band_valid, rows, tile_w)

        value, weight = jax.lax.map(splat, jnp.arange(passes, dtype=jnp.int32))
        whole = lambda a: jax.lax.all_gather(a, RAY_AXIS, axis=1, tiled=True)[:, :tile_h]
        return whole(value), whole(weight)

    replicated = PartitionSpec()
    run = jax.shard_map(pass_on_device, mesh=mesh, in_specs=(replicated,) * 8, out_specs=(replicated, replicated),
                        check_vma=False)
    return run(scene, frame, seed, tile_y, tile_x, first_sample, live, spp)


def _work_unit(scene: Scene, item: WorkItem, value: jax.Array, weight: jax.Array, *, shape: WorkShape,
               mesh: Mesh) -> tuple[jax.Array, jax.Array]:
    """Add the passes of ``item`` (a ``WorkItem``) of one tile to the accumulator (value, weight).

    scene: tracer.scene.Scene; shape: the ``WorkShape`` (static); mesh: the devices' mesh (one
    axis, ``RAY_AXIS``). value (tile_h, tile_w, C) and weight (tile_h, tile_w) float32: the sums
    of filter-weighted radiance and of filter weights so far; C = 3 channels of RGB, then the
    scene's AOV channels (``tracer.integrators.aov``; ``tracer.shared``). Pixels of the tile outside the film
    get zeros; those outside the crop window but inside the film are rendered, and left out of the
    image by whoever assembles it. Returns the new (value, weight).
    """
    batch = shape.passes_traced

    def one_batch(b, acc):
        live = jnp.minimum(item.n_passes - b * batch, batch)
        first_sample = (item.first_pass + b * batch) * shape.pass_size
        v, w = _render_passes(scene, item.frame, item.seed, item.tile_y, item.tile_x, first_sample, live, item.spp,
                              tile_h=shape.tile_h, tile_w=shape.tile_w, pass_size=shape.pass_size, passes=batch,
                              mesh=mesh, path_pool=shape.path_pool, phases=shape.drain_phases)
        for k in range(batch):  # one pass at a time, in pass order; passes past n_passes not at all
            acc = (jnp.where(k < live, acc[0] + v[k], acc[0]), jnp.where(k < live, acc[1] + w[k], acc[1]))
        return acc

    return jax.lax.fori_loop(0, (item.n_passes + batch - 1) // batch, one_batch, (value, weight))


# The jitted work unit: render_tile(scene, item, value, weight, shape=, mesh=). Eight programs
# kept: a job needs one, and each holds hundreds of memory maps.
render_tile = KeptPrograms(_work_unit, static_argnames=("shape", "mesh"), keep=8,
                           hold=lambda args, kwargs: [(args[0] if args else kwargs["scene"]).geometry.host_scene])


def whole_image_tile(film: Film, pass_size: int, platform: str | None = None) -> int:
    """``tracer.render``'s tile: the film's crop window whole where a pass of it (grown by the
    filter's margin) fits ``trace_samples(platform)``, else the largest power-of-two tile from
    ``DEFAULT_TILE`` up whose pass fits (``DEFAULT_TILE`` on CPUs: the farm's)."""
    platform = jax.default_backend() if platform is None else platform
    return fitting_tile(film.crop_width, film.crop_height, pass_size, trace_samples(platform), film.margin,
                        grow=platform != "cpu")


def _whole(name, value, low, high):
    """``value`` as an int, refused unless a whole number (not a bool) in [low, high]: the
    traced program takes these as int32 or as static shapes."""
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)) or not low <= value <= high:
        raise ValueError(f"tracer.render: {name} must be a whole number from {low} to {high}, got {value!r}")
    return int(value)


def render(scene: Scene, spp: int | None = None, seed: int = 0, frame: int = 0, tile: int | None = None,
           pass_size: int | None = None, mesh: Mesh | None = None, chunk_passes: int | None = None,
           path_pool: int | None = None) -> np.ndarray:
    """Render the whole image, the film's crop window: linear radiance, numpy float32 (H, W, 3),
    followed by the AOV channels of a scene with Mitsuba's ``aov`` integrator ((H, W, 3 + K), as
    ``mitsuba.render`` gives them; ``tracer.shared.aov_channel_names`` names them).

    ``spp`` defaults to the scene's sampler ``sample_count``; ``pass_size`` to
    ``min(DEFAULT_PASS_SIZE, spp)`` (a pass size given is kept, past the spp too: its samples
    past the spp are masked out). ``chunk_passes`` splits the passes into chunks, each summed
    from zero and the chunks added in order (in float32 numpy): the farm's reduction tree
    (``farm.tree``), so that this gives a farm job's bits (same pass and chunk size; the tile and
    the batching change the speed, never the bits).
    ``tile`` defaults to the whole image where a pass of it fits ``trace_samples()`` (one work
    unit drains its path pool once, where tiles would each), else ``DEFAULT_TILE`` on CPUs (the
    farm's) and the largest power of two from it whose pass fits on GPUs and TPUs.
    ``path_pool`` defaults to ``tracer.integrators.path.pool_size(scene)``.
    """
    process.configure()
    spp = _whole("spp", scene.settings.spp if spp is None else spp, 1, MAX_SPP)
    seed, frame = _whole("seed", seed, 0, MAX_SEED), _whole("frame", frame, 0, MAX_FRAME)
    pass_size = min(DEFAULT_PASS_SIZE, spp) if pass_size is None else _whole("pass_size", pass_size, 1, MAX_PASS_SIZE)
    tile = whole_image_tile(scene.film, pass_size) if tile is None else _whole("tile", tile, 1, MAX_FILM_SIZE)
    if chunk_passes is not None:
        chunk_passes = _whole("chunk_passes", chunk_passes, 1, MAX_SPP)
    film = scene.film
    mesh = local_mesh() if mesh is None else mesh
    path_pool = pool_size(scene) if path_pool is None else path_pool
    n_passes = -(-spp // pass_size)
    height, width = film.crop_height, film.crop_width
    th, tw = min(tile, height), min(tile, width)
    channels = 3 + aov_channel_count(scene.settings.aovs)
    image = np.zeros((height, width, channels), np.float32)
    chunk = n_passes if chunk_passes is None else chunk_passes
    # The program serves this process's later calls too, their number unknown: at least two phases.
    shape = WorkShape(th, tw, pass_size, path_pool=path_pool,
                      passes_traced=trace_passes(chunk, pass_size, th, tw, film),
                      drain_phases=max(DRAIN_PHASES, drain_phases(spp * height * width)))
    # Copied, not made by jnp.zeros, which compiles a small program a process (three: 0.1 s).
    zeros = jax.device_put((np.zeros((th, tw, channels), np.float32), np.zeros((th, tw), np.float32)))
    folder = compilation_cache.default_folder()
    if folder is not None and scene.geometry.accel in compiled.SHARED_ACCELS:
        # Loaded whole where an earlier process compiled it (no tracing), else compiled and kept.
        compiled.program(render_tile, folder, (scene, WorkItem.of(frame, seed, 0, 0, 0, chunk, spp), *zeros),
                         dict(shape=shape, mesh=mesh))
    for y in range(0, height, th):
        for x in range(0, width, tw):
            value, weight = np.zeros((th, tw, channels), np.float32), np.zeros((th, tw), np.float32)
            for first in range(0, n_passes, chunk):
                item = WorkItem.of(frame, seed, y, x, first, min(chunk, n_passes - first), spp)
                v, w = render_tile(scene, item, *zeros, shape=shape, mesh=mesh)
                value, weight = value + np.asarray(v), weight + np.asarray(w)
            h, w = min(th, height - y), min(tw, width - x)
            image[y:y + h, x:x + w] = resolve(value[:h, :w], weight[:h, :w])
    return image
