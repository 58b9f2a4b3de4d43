"""From a spec to a store ready to run: validation, store binding, group shaping, and status.

The Ray session that runs a prepared job is ``farm.session``; export is ``farm.export``.
"""
import dataclasses
import os

from farm.errors import SpecError
from farm.spec import GroupsSpec, JobSpec, film_size, scene_defaults, scene_hash
from farm.store import FrameStore, StoreError

__all__ = ["prepare", "open_store", "group_shapes", "frame_status"]


def _check_params(spec):
    names = scene_defaults(spec.scene)
    for c in spec.curves:
        if c.name not in names:
            known = ", ".join(sorted(names)) or "none"
            raise SpecError(f"parameter '{c.name}' is not a <default> of {os.path.basename(spec.scene)} (it has: {known})")


def _scene_hash(spec):
    return scene_hash(spec.scene, [spec.params_at(frame) for frame in range(spec.frames[0], spec.frames[1] + 1)])


def prepare(spec, create=True):
    """Validate ``spec`` and bind it to its store (created, or checked to be this job's).

    On an existing store the reduction tree comes from the store, and a higher spp refines it.
    Returns (planned spec, FrameStore).
    """
    _check_params(spec)
    if FrameStore.exists(spec.store):
        stored, store = open_store(spec.store, mode="r+")
        spec = dataclasses.replace(spec, pass_size=spec.pass_size or stored.pass_size,
                                   chunk_passes=stored.chunk_passes).planned()
        store.check_identity(spec.identity(_scene_hash(spec)))
        if spec.spp < stored.spp:
            raise SpecError(f"{spec.store} already holds {stored.spp} spp; asking for {spec.spp} is not supported "
                            f"(export fewer samples is not possible from summed passes)")
        if spec.spp > stored.spp or spec.groups != stored.groups or spec.accel != stored.accel:
            store.set_spp(spec.to_json())
        return spec, store
    if not create:
        raise StoreError(f"{spec.store}: no frame store here")
    spec = spec.planned()
    film = film_size(spec)
    store = FrameStore.create(spec.store, spec.identity(_scene_hash(spec)), spec.to_json(), film, spec.n_frames)
    return spec, store


def open_store(url, mode="r"):
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
    if (store.n_frames, store.tile) != (spec.n_frames, spec.tile):
        raise StoreError(f"{url}: damaged store: its arrays hold {store.n_frames} frame(s) in tiles of "
                         f"{store.tile}, its job {spec.n_frames} in tiles of {spec.tile}")
    if spec.resolution and tuple(spec.resolution) != (store.width, store.height):
        raise StoreError(f"{url}: damaged store: its film is {store.width}x{store.height}, its job's "
                         f"{spec.resolution[0]}x{spec.resolution[1]}")
    return spec, store


def group_shapes(spec, local):
    """The worker groups of a job: ``groups.count`` groups of ``groups.hosts`` hosts each; on a
    cluster, a job that names no groups gets one per node (``cluster.group.discover_shapes``)."""
    from cluster.group import GroupShape, discover_shapes
    g = spec.groups
    if not local and g == GroupsSpec():
        return discover_shapes()
    strategy = "PACK" if local else "STRICT_SPREAD"
    from tracer.cpu import cores  # (no JAX there)
    devices = g.devices_per_host
    if local and devices is None and g.platform == "cpu":  # every member shares this machine's cores
        devices = max(1, cores() // (g.count * g.hosts))
    shape = GroupShape(hosts=g.hosts, platform=g.platform, devices_per_host=devices,
                       gpus_per_host=g.gpus_per_host, tpu_topology=g.tpu_topology, tpu_version=g.tpu_version,
                       strategy=strategy)
    return [shape] * g.count


def frame_status(store, spec, records):
    """Per frame index: the fraction of its samples done at the job's spp, as ``records``
    (``FrameStore.verified_records``) have them."""
    from farm.planner import plan
    out = []
    for f in range(store.n_frames):
        one = dataclasses.replace(spec, frames=(spec.frames[0] + f, spec.frames[0] + f))
        p = plan(one, records[f:f + 1], store.tiles_y, store.tiles_x, store.tile_pixels)
        out.append(p.done_units / p.total_units if p.total_units else 1.0)
    return out
