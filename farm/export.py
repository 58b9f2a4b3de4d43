"""From a store to image files: each tile's folded sums plus its tail (``farm.tree``), resolved.

A frame is exported only when every tile of it holds the job's spp and reads back with its CRC
(``partial`` exports what the tiles hold). Pixel values come from ``tracer.shared.resolve``, the same function that
``tracer.render`` ends with, so an exported npy or EXR frame has the bits of the tracer's own
render with the job's reduction tree (``.npy``: linear float32 (H, W, 3 + K), RGB then the
scene's K AOV channels as ``tracer.render`` returns them; ``.png``: the RGB tone-mapped to sRGB).

An EXR holds R, G, B, then each AOV of the scene's ``aov`` integrator as a layer named as Mitsuba
names its channels (``albedo.R``, ``N.X``, ``dd.y.T``), then ``variance.R/G/B``: the per-pixel
variance of the RGB estimate (``farm.tree.variance``), where every tile of the frame has folded
at least two chunks (otherwise the layer is left out, said on the terminal).

``denoise`` replaces the RGB by Intel Open Image Denoise's (``pyoidn``, its ``RT`` filter, HDR,
high quality) fed with the job's albedo and normal AOVs (the first ``albedo``, and the first
``sh_normal`` or else ``geo_normal``: its scene's ``aov`` integrator's, or the job's option
``aovs``); a job without both is refused before anything is written. OIDN takes the noise of
each pixel to be its own: a film filter wider than the box (Mitsuba's default is a gaussian)
shares samples between pixels, and OIDN then removes little noise, which ``filter_warning``
says (the job option ``rfilter = "box"`` renders for it). OIDN on the CPU gives the same bits
on every run for the same input.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from farm.errors import FarmError, SpecError
from farm.job import frame_status
from farm.names import DEFAULT_TEMPLATE, frame_names, job_name
from farm.records import has_samples
from farm.store import StoreError
from farm.tree import variance
from tracer.shared import aov_channel_names, find_aov, resolve

if TYPE_CHECKING:
    from farm.spec import JobSpec
    from farm.store import FrameStore

__all__ = ["export_frames", "checkered", "denoise", "filter_warning", "NO_SAMPLES", "AUX_HINT"]

# What a job needs for --denoise (farm.spec: the job options aovs and rfilter), said when it lacks it.
DENOISE_OPTIONS = "--aovs albedo:albedo,nn:sh_normal --rfilter box"
AUX_HINT = (f"render the job into another store with {DENOISE_OPTIONS} (a job file: "
            f"aovs = \"albedo:albedo,nn:sh_normal\" and rfilter = \"box\")")

NO_SAMPLES = (96, 136)  # the 8-bit greys of the checker shown where a tile has no samples yet
CHECKER = 8              # its squares' side in pixels


def export_frames(spec: JobSpec, store: FrameStore, frames: tuple[int, int] | None, fmt: str, out: str,
                  partial: bool = False, denoised: bool = False,
                  name: str = DEFAULT_TEMPLATE) -> list[tuple[int, str | None, float]]:
    """Write frames (numbers) of ``store`` (its job ``spec``, ``farm.job.open_store``) in ``out``,
    named by the template ``name`` (``farm.names``). A frame with tiles that do not read back
    (``FrameStore.verified_records``) is not finished. ``partial`` exports what unfinished frames
    hold, never a frame with no samples (it is skipped); in a partial PNG the tiles without
    samples are a grey checker (``NO_SAMPLES``), in EXR and npy they are zeros. ``denoised``:
    the RGB denoised (see the module's docstring).
    Returns [(frame, path or None where skipped, fraction of its samples done)]."""
    first, last = frames if frames else spec.frames
    if first < spec.frames[0] or last > spec.frames[1]:
        raise SpecError(f"--frames {first}-{last}: the job has frames {spec.frames[0]}-{spec.frames[1]}")
    names = frame_names(name, job_name(store.url), range(first, last + 1), fmt)
    _refuse_a_store(out)
    aux = _aux_channels(store) if denoised else None
    records, damaged = store.verified_records()
    status = frame_status(store, spec, records)
    for frame in range(first, last + 1):
        f = frame - spec.frames[0]
        if status[f] < 1.0 and not partial:
            bad = sum(1 for key in damaged if key[0] == f)
            why = f" ({bad} tile(s) whose recorded data does not read back)" if bad else ""
            raise StoreError(f"frame {frame} is {100 * status[f]:.0f}% rendered{why}; finish it "
                             f"(farm resume {store.url}) or export with --partial")
    _make_folder(out)
    written: list[tuple[int, str | None, float]] = []
    for frame in range(first, last + 1):
        f = frame - spec.frames[0]
        if status[f] <= 0.0:
            written.append((frame, None, 0.0))
            continue
        path = os.path.join(out, names[frame])
        image = resolve(*store.frame_sums(f, records[f]))
        if aux is not None:
            image[..., :3] = denoise(image, *aux)
        sampled = has_samples(records[f])
        if fmt == "exr":
            _write(path, _exr_channels(store, f, records[f], image), fmt)
        else:
            _write(path, image if fmt == "npy" else image[..., :3], fmt, None if status[f] >= 1.0 else sampled,
                   store.tile)
        written.append((frame, path, status[f]))
    return written


def _aux_channels(store: FrameStore) -> tuple[int, int]:
    """(albedo offset, normal offset) of the store's AOVs, or a StoreError naming what is missing."""
    albedo, normal = find_aov(store.aovs, "albedo"), find_aov(store.aovs, "sh_normal", "geo_normal")
    if albedo is None or normal is None:
        missing = " and no ".join(w for w, c in (("albedo", albedo), ("normal", normal)) if c is None)
        raise FarmError(f"{store.url}: --denoise needs an albedo and a normal AOV, and this job has no {missing} "
                        f"AOV: {AUX_HINT}")
    return albedo, normal


def filter_warning(store: FrameStore) -> str | None:
    """A line saying why denoising the store's frames gains little, or None: a film whose
    reconstruction filter is not a box (Mitsuba's default is a gaussian) spreads each sample over
    neighbouring pixels, and OIDN keeps noise that is correlated across pixels as detail
    (measured on the Cornell box at 4 spp: 1.1x less error with the gaussian, 6-8x with a box)."""
    if store.rfilter in (None, "box"):
        return None
    return (f"warning: {store.url} was rendered with a {store.rfilter} reconstruction filter, whose noise spans "
            f"neighbouring pixels: the denoiser removes little of it (render with --rfilter box)")


def denoise(image: np.ndarray, albedo: int, normal: int) -> np.ndarray:
    """The RGB of ``image`` (H, W, 3 + K) denoised by Open Image Denoise, with its albedo and
    normal channels at offsets ``albedo`` and ``normal``: (H, W, 3) float32. Inputs are clipped
    to what OIDN takes (colour >= 0, albedo in [0, 1], normals in [-1, 1])."""
    import pyoidn

    color = np.ascontiguousarray(np.maximum(image[..., :3], 0.0), np.float32)
    a = np.ascontiguousarray(np.clip(image[..., albedo:albedo + 3], 0.0, 1.0), np.float32)
    n = np.ascontiguousarray(np.clip(image[..., normal:normal + 3], -1.0, 1.0), np.float32)
    return np.asarray(pyoidn.denoise(color, a, n, hdr=True, quality="high"), np.float32)


def _exr_channels(store, f, records, image):
    """{channel name: (H, W)} of an EXR frame: R, G, B, the AOVs, and variance.R/G/B where
    every tile has folded at least two chunks."""
    channels = {c: image[..., i] for i, c in enumerate(("R", "G", "B", *aov_channel_names(store.aovs)))}
    folded = records["folded"]
    if folded.min() >= 2:
        var = np.zeros((store.height, store.width, 3), np.float32)
        for ty in range(store.tiles_y):
            for tx in range(store.tiles_x):
                y0, y1, x0, x1 = store.tile_box(ty, tx)
                var[y0:y1, x0:x1] = variance(store.read_state((f, ty, tx)), int(folded[ty, tx]))
        channels.update({f"variance.{c}": var[..., i] for i, c in enumerate("RGB")})
    return channels


def checkered(pixels: np.ndarray, sampled: np.ndarray, tile: int) -> np.ndarray:
    """8-bit ``pixels`` (H, W, 3) with the tiles where ``sampled`` (TY, TX) is False as a grey
    checker: what has no samples yet is never shown as black."""
    h, w = pixels.shape[:2]
    y, x = np.mgrid[:h, :w]
    checker = np.where((y // CHECKER + x // CHECKER) % 2 == 0, *NO_SAMPLES).astype(np.uint8)
    empty = np.repeat(np.repeat(~sampled, tile, axis=0), tile, axis=1)[:h, :w]
    pixels = pixels.copy()
    pixels[empty] = checker[empty, None]
    return pixels


def _refuse_a_store(out: str) -> None:
    """Refuse an output folder that is, or lies inside, a Zarr hierarchy (a frame store, this one
    or another): nothing writes inside a store but the store's code. Links are followed: the
    folder is judged where it resolves to."""
    if "://" in out:
        return
    here = os.path.realpath(out)
    while True:
        if os.path.isfile(os.path.join(here, "zarr.json")):
            where = "is" if here == os.path.realpath(out) else f"lies inside {here}, which is"
            raise SpecError(f"--out {out} {where} a Zarr store: exports go to a folder outside any store")
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def _make_folder(out: str) -> None:
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise FarmError(f"--out {out}: cannot make the folder: {e.strerror or e}") from None


def _write(path, image, fmt, sampled=None, tile=None):
    from PIL import Image

    from tracer.io.images import srgb8, write_exr_channels
    try:
        if fmt == "npy":
            np.save(path, image)
        elif fmt == "exr":
            write_exr_channels(path, image)
        else:
            pixels = srgb8(image)
            Image.fromarray(pixels if sampled is None else checkered(pixels, sampled, tile)).save(path)
    except (OSError, RuntimeError) as e:  # OpenEXR raises RuntimeError
        text = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FarmError(f"{path}: cannot write: {text}") from None
