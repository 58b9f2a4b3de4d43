"""From a spec to a store and a run: validation, store binding, the Ray session, export."""
import dataclasses
import logging
import os

import numpy as np
import ray

from farm.errors import SpecError
from farm.spec import GroupsSpec, JobSpec, film_size, scene_defaults, scene_hash
from farm.store import FrameStore, StoreError

__all__ = ["prepare", "run", "group_shapes", "export_frames", "frame_status"]


def _check_params(spec):
    names = scene_defaults(spec.scene)
    for c in spec.curves:
        if c.name not in names:
            known = ", ".join(sorted(names)) or "none"
            raise SpecError(f"parameter '{c.name}' is not a <default> of {os.path.basename(spec.scene)} (it has: {known})")


def prepare(spec, create=True):
    """Validate ``spec`` and bind it to its store (created, or checked to be this job's).

    On an existing store the reduction tree comes from the store, and a higher spp refines it.
    Returns (planned spec, FrameStore).
    """
    _check_params(spec)
    if FrameStore.exists(spec.store):
        store = FrameStore.open(spec.store)
        stored = JobSpec.from_json(store.spec_json)
        spec = dataclasses.replace(spec, pass_size=spec.pass_size or stored.pass_size,
                                   chunk_passes=stored.chunk_passes).planned()
        store.check_identity(spec.identity(scene_hash(spec.scene)))
        if spec.spp < stored.spp:
            raise SpecError(f"{spec.store} already holds {stored.spp} spp; asking for {spec.spp} is not supported "
                            f"(export fewer samples is not possible from summed passes)")
        if spec.spp > stored.spp or spec.groups != stored.groups or spec.accel != stored.accel:
            n_passes = -(-spec.spp // spec.pass_size)
            store.set_spp(spec.to_json(), -(-n_passes // spec.chunk_passes))
        return spec, store
    if not create:
        raise StoreError(f"{spec.store}: no frame store here")
    spec = spec.planned()
    film = film_size(spec)
    n_passes = -(-spec.spp // spec.pass_size)
    store = FrameStore.create(spec.store, spec.identity(scene_hash(spec.scene)), spec.to_json(), film,
                              spec.n_frames, -(-n_passes // spec.chunk_passes))
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


def run(spec, store, address=None, show_progress=True, log=print):
    """Render what ``store`` lacks, on an embedded local Ray or the cluster at ``address``."""
    from farm.scheduler import run_job

    local = address is None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if local:
        g = spec.groups
        cpus = max(os.cpu_count() or 1, g.count * g.hosts)
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 configure_logging=False)
    else:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        return run_job(spec, store, group_shapes(spec, local), show_progress=show_progress, log=log)
    finally:
        ray.shutdown()


def frame_status(store):
    """Per frame index: the fraction of its tasks' passes done at the job's spp."""
    from farm.planner import plan
    spec = JobSpec.from_json(store.spec_json)
    records = store.all_records()
    out = []
    for f in range(store.n_frames):
        sub = records[f:f + 1]
        one = dataclasses.replace(spec, frames=(spec.frames[0] + f, spec.frames[0] + f))
        p = plan(one, sub, store.tiles_y, store.tiles_x, store.tile_pixels)
        out.append(p.done_units / p.total_units if p.total_units else 1.0)
    return out


def export_frames(store, frames, fmt, out, partial=False):
    """Write frames (numbers) of ``store`` as frame_NNNN.<fmt> in ``out``; returns the paths."""
    from tracer.io.images import write_exr, write_png

    spec = JobSpec.from_json(store.spec_json)
    first, last = frames if frames else spec.frames
    if first < spec.frames[0] or last > spec.frames[1]:
        raise SpecError(f"--frames {first}-{last}: the job has frames {spec.frames[0]}-{spec.frames[1]}")
    status = frame_status(store)
    os.makedirs(out, exist_ok=True)
    paths = []
    for frame in range(first, last + 1):
        f = frame - spec.frames[0]
        if status[f] < 1.0 and not partial:
            raise StoreError(f"frame {frame} is {100 * status[f]:.0f}% rendered; finish it (farm resume) "
                             f"or export with --partial")
        value, weight = store.frame_sums(f)
        safe = np.where(weight > 0, weight, 1.0)
        image = np.where(weight[..., None] > 0, value / safe[..., None], 0.0).astype(np.float32)
        path = os.path.join(out, f"frame_{frame:04d}.{fmt}")
        if fmt == "npy":
            np.save(path, image)
        elif fmt == "exr":
            write_exr(path, image)
        else:
            write_png(path, image)
        paths.append(path)
    return paths
