"""From a spec to a store ready to run: validation, store binding, and status (group shaping is
``farm.groups``'s, named here too).

The Ray session that runs a prepared job is ``farm.session``; export is ``farm.export``.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING

from cluster.task import SceneRef, TileTask
from farm.errors import FarmError, SpecError
# (group shaping, in a module of its own that a driver imports before Zarr, and named here too)
from farm.groups import (LOCAL_DEVICES_PER_CORE, LOCAL_MEMBERS_PER_CORE, check_fits, check_local, group_shapes,
                         preflight_env, with_isa)
from farm.lease import Lease, lease_duration
from farm.spec import JobSpec, SceneDigest, film_size, frame_info, scene_defaults, scene_digest
from farm.store import FrameStore, StoreError
from tracer.runtime.xla_flags import local_isa
from tracer.shared import PORTABLE_ISA

if TYPE_CHECKING:
    import numpy as np
    from zarr.core.common import AccessModeLiteral

__all__ = ["prepare", "finished", "bind", "check_params", "check_local", "check_fits", "open_store", "group_shapes",
           "preflight_env", "frame_status", "LOCAL_MEMBERS_PER_CORE", "LOCAL_DEVICES_PER_CORE"]


def check_params(spec: JobSpec) -> None:
    """Refuse a parameter the scene has no <default> of (exit 2: the job, not the scene, is wrong)."""
    names = scene_defaults(spec.scene)
    for c in spec.curves:
        if c.name not in names:
            known = ", ".join(sorted(names)) or "none"
            raise SpecError(f"parameter '{c.name}' is not a <default> of {os.path.basename(spec.scene)} (it has: {known})")


def _scene_digest(spec: JobSpec) -> SceneDigest:
    return scene_digest(spec.scene, [spec.params_at(frame) for frame in range(spec.frames[0], spec.frames[1] + 1)])


def prepare(spec: JobSpec, create: bool = True, redo: Collection[int] = (), replace: bool = False, lease: bool = False,
            local: bool = True) -> tuple[JobSpec, FrameStore]:
    """Validate ``spec`` and bind it to its store (created, or checked to be this job's).

    On an existing store the reduction tree, and the AOVs and filter the job does not name, come
    from the store; a higher spp refines it and a frame range that ends later adds frames (the
    frames stored stay as they are). ``redo`` (frame numbers) discards those frames' data, so
    that they are rendered afresh. ``replace`` replaces a frame store of any job (never anything
    else) with a new one of this job. With ``lease``, the store's lease is taken (``farm.lease``;
    ``store.lease``, the caller releases it) before anything is written to an existing store, and
    every write checks it. A CPU job's instruction-set level (``groups.cpu_isa``, unless the job
    names one): the store's; for a new store this host's when the job renders here (``local``),
    else ``tracer.runtime.xla_flags.PORTABLE_ISA`` (a cluster's hosts may differ).
    Returns (planned spec, FrameStore).
    """
    check_params(spec)
    _check_redo(spec, redo)
    if lease:
        lease_duration()  # a bad FARM_LEASE_S is refused before anything is written
    scene = _scene_digest(spec)
    digest = scene.hash
    if replace or not FrameStore.exists(spec.store):
        if not create and not replace:
            raise StoreError(f"{spec.store}: no frame store here")
        return _with_files(_create(with_isa(spec, local_isa() if local else PORTABLE_ISA), digest, replace, lease),
                           scene)
    hashes = {spec.frames: digest}  # of the frames' scenes, by frame range
    spec, stored, store = _bind(spec, hashes)
    if not lease:
        return _with_files(_edit(spec, stored, store, digest, redo), scene)
    held = Lease.acquire(store.group, store.url)
    try:  # bound again under the lease: another driver may have changed the store meanwhile
        spec, stored, store = _bind(spec, hashes)
        store.lease = held
        return _with_files(_edit(spec, stored, store, digest, redo), scene)
    except BaseException:
        held.release()
        raise


def finished(spec: JobSpec, redo: Collection[int] = (),
             replace: bool = False) -> tuple[JobSpec, FrameStore] | None:
    """(planned spec, its store) where the store of ``spec`` holds the whole job already, read
    without writing (a run would render nothing); else None, and ``prepare`` says what it says of the job. A store
    whose data does not all read back is not finished."""
    from farm.adaptive import Shot
    from farm.planner import plan
    if redo or replace or not FrameStore.exists(spec.store):
        return None
    try:
        spec, stored, store = _bind(spec, {spec.frames: _scene_digest(spec).hash})
    except FarmError:  # refused: said by ``prepare``, in its order
        return None
    if (spec.frames, spec.spp, spec.noise, spec.min_spp) != (stored.frames, stored.spp, stored.noise, stored.min_spp):
        return None
    records, damaged = store.verified_records()
    todo = plan(spec, records, store.tiles_y, store.tiles_x, store.tile_pixels, Shot(spec, store).tile_spp(records))
    return (spec, store) if not damaged and not todo.frames else None


def bind(spec: JobSpec) -> tuple[JobSpec, FrameStore]:
    """(planned spec, its store): the store of ``spec`` checked to be this job's as ``prepare``
    checks it, read without writing; a StoreError or SpecError says what differs."""
    spec, _, store = _bind(spec, {spec.frames: _scene_digest(spec).hash})
    return spec, store


def _with_files(bound: tuple[JobSpec, FrameStore], scene: SceneDigest) -> tuple[JobSpec, FrameStore]:
    """``bound`` with the store's ``scene_files``: the files of ``scene``, whose hash the store now records."""
    bound[1].scene_files = scene.files
    return bound


def _edit(spec: JobSpec, stored: JobSpec, store: FrameStore, digest: str,
          redo: Iterable[int]) -> tuple[JobSpec, FrameStore]:
    """Bind ``store`` (of the job ``stored``) to ``spec`` and discard the frames to ``redo``."""
    if ((spec.frames, spec.groups, spec.accel, spec.noise, spec.min_spp)
            != (stored.frames, stored.groups, stored.accel, stored.noise, stored.min_spp) or spec.spp > stored.spp):
        store.grow(spec.to_json(), spec.identity(digest), spec.n_frames)
    store.forget_frames(sorted({frame - spec.frames[0] for frame in redo}))
    return spec, store


def _check_redo(spec: JobSpec, redo: Iterable[int]) -> None:
    for frame in redo:
        if not spec.frames[0] <= frame <= spec.frames[1]:
            raise SpecError(f"--redo {frame}: the job has frames {spec.frames[0]}-{spec.frames[1]}")


def _create(spec: JobSpec, digest: str, replace: bool, lease: bool) -> tuple[JobSpec, FrameStore]:
    """A new store of ``spec`` (planned here, for its frames' size), or (``replace``) one in place
    of the frame store there."""
    film, info = film_size(spec), frame_info(spec)
    spec = spec.planned(film)
    over = FrameStore.replaceable(spec.store) if replace else None
    held = Lease.acquire(over, spec.store) if lease and over is not None else None
    try:
        if held is not None:
            held.check()
        store = FrameStore.create(spec.store, spec.identity(digest), spec.to_json(), film, spec.n_frames, over=over,
                                  aovs=info.aovs, rfilter=info.rfilter)
        if lease and held is None:
            held = Lease.acquire(store.group, store.url)
    except BaseException:
        if held is not None:
            held.release()
        raise
    store.lease = held
    return spec, store


def _bind(spec: JobSpec, hashes: dict[tuple[int, int], str]) -> tuple[JobSpec, JobSpec, FrameStore]:
    """(planned spec, the stored job, its FrameStore): ``spec`` checked against the store at
    ``spec.store`` without writing anything: the same job, or one that adds frames or samples.
    ``hashes``: scene hashes by frame range, filled in."""
    stored, store = open_store(spec.store, mode="r+")
    # What the job does not say it takes from the store: its instruction-set level (AVX2 for stores made
    # before jobs had one, which were rendered with AVX2 code), its tree, its tile, and its AOVs and
    # filter (the store of a job with others is another job's, refused below by its identity).
    spec = with_isa(spec, stored.groups.cpu_isa or PORTABLE_ISA)
    spec = dataclasses.replace(spec, pass_size=spec.pass_size or stored.pass_size, chunk_passes=stored.chunk_passes,
                               tile=spec.tile or stored.tile,
                               aovs=spec.aovs or stored.aovs, rfilter=spec.rfilter or stored.rfilter).planned()
    # The stored frames must be of this job (their scene and parameters); then only a later end is an edit.
    old = dataclasses.replace(spec, frames=stored.frames)
    if old.frames not in hashes:
        hashes[old.frames] = _scene_digest(old).hash
    store.check_identity(old.identity(hashes[old.frames]))
    if spec.frames != stored.frames:
        if spec.frames[0] != stored.frames[0] or spec.frames[1] < stored.frames[1]:
            raise StoreError(f"{spec.store}: holds frames {stored.frames[0]}-{stored.frames[1]}, not "
                             f"{spec.frames[0]}-{spec.frames[1]}: frames can be added after the last "
                             f"({stored.frames[0]}-N); render into another --out, or add --replace to replace "
                             f"the store's content")
    if spec.spp < stored.spp:
        raise SpecError(f"{spec.store} already holds {stored.spp} spp; asking for {spec.spp} is not supported "
                        f"(export fewer samples is not possible from summed passes; --replace renders afresh)")
    return spec, stored, store


def open_store(url: str, mode: AccessModeLiteral = "r") -> tuple[JobSpec, FrameStore]:
    """(the job, the FrameStore) of the store at ``url``, both checked; the job's store is
    ``url``, wherever the store was made (the path it records is history). A store whose recorded
    job is malformed or does not match its identity or arrays is a StoreError."""
    store = FrameStore.open(url, mode)
    try:
        spec = JobSpec.from_json({**store.spec_json, "store": url})
    except SpecError as e:
        raise StoreError(f"{url}: damaged store: its recorded job: {e}") from None
    identity = store.meta["identity"]
    if spec.pass_size is None or spec.chunk_passes is None or spec.identity(identity.get("scene_hash")) != identity:
        raise StoreError(f"{url}: damaged store: its recorded job does not match its identity")
    # Arrays may hold more frames than the job: they grow before the job that needs them is recorded.
    if store.tile != spec.tile or store.n_frames < spec.n_frames:
        raise StoreError(f"{url}: damaged store: its arrays hold {store.n_frames} frame(s) in tiles of "
                         f"{store.tile}, its job {spec.n_frames} in tiles of {spec.tile}")
    if spec.resolution and tuple(spec.resolution) != (store.width, store.height):
        raise StoreError(f"{url}: damaged store: its film is {store.width}x{store.height}, its job's "
                         f"{spec.resolution[0]}x{spec.resolution[1]}")
    return spec, store


def tile_size(spec: JobSpec, store: FrameStore) -> tuple[int, int]:
    """(height, width) of the job's tasks' tiles (a planned job's): the job's tile, cut to a smaller frame."""
    assert spec.tile is not None, "the job is planned (JobSpec.planned)"
    return min(spec.tile, store.height), min(spec.tile, store.width)


def job_samples(spec: JobSpec, store: FrameStore) -> int:
    """Samples x pixels of the whole job: how long its program serves (``TileTask.job_samples``)."""
    return spec.n_frames * spec.spp * store.width * store.height


def scene_ref(spec: JobSpec, frame: int, files: dict[str, str]) -> SceneRef:
    """How a member loads the scene of ``frame``; ``files``: what it must read (``FrameStore.scene_files``)."""
    return SceneRef(path=spec.scene, params=spec.params_at(frame), resolution=spec.resolution, accel=spec.accel,
                    aovs=spec.aovs, rfilter=spec.rfilter, files=tuple(sorted(files.items())))


def first_task(spec: JobSpec, store: FrameStore) -> TileTask:
    """A task of the (planned) job's work-unit shape (its first frame's first tile and chunk): what every
    task of the job runs, for compiling ahead (``farm.scene_check.Preflight``)."""
    th, tw = tile_size(spec, store)
    assert spec.pass_size is not None and spec.chunk_passes is not None, "the job is planned (JobSpec.planned)"
    return TileTask(scene=scene_ref(spec, spec.frames[0], store.scene_files), frame=spec.frames[0], seed=spec.seed, spp=spec.spp,
                    tile_y=0, tile_x=0, tile_h=th, tile_w=tw, first_pass=0, n_passes=spec.chunk_passes,
                    pass_size=spec.pass_size, channels=store.channels, chunk_passes=spec.chunk_passes,
                    job_samples=job_samples(spec, store))


def frame_status(store: FrameStore, spec: JobSpec, records: np.ndarray, frames: Sequence[int] | None = None,
                 spp: np.ndarray | None = None) -> list[float]:
    """Per frame index (of the job, or ``frames``): the fraction of its samples done at the job's
    spp (with a noise target: at the spp its tiles are decided to get so far, ``farm.adaptive``;
    ``spp``: ``Shot.tile_spp``'s answer for those frames, if it was asked already), as ``records``
    (``FrameStore.verified_records``) have them."""
    from farm.adaptive import Shot
    from farm.planner import frame_states, plan
    frames = range(spec.n_frames) if frames is None else frames
    spp = Shot(spec, store).tile_spp(records, frames) if spp is None else spp
    # Frames with nothing stored or all of it are said at once (a 100,000-frame job's are most);
    # the others (and every frame of a noise target's job) are planned one by one.
    states = frame_states(spec, records[list(frames)]) if spp is None else None
    out = []
    for i, f in enumerate(frames):
        if states is not None and (states[0][i] or states[1][i]):
            out.append(0.0 if states[0][i] else 1.0)  # (fresh, whole)
            continue
        one = dataclasses.replace(spec, frames=(spec.frames[0] + f, spec.frames[0] + f))
        p = plan(one, records[f:f + 1], store.tiles_y, store.tiles_x, store.tile_pixels,
                 None if spp is None else spp[i:i + 1])
        out.append(p.done_units / p.total_units if p.total_units else 1.0)
    return out
