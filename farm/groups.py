"""A job's worker groups: their shapes, what this machine takes as a local job, and the members'
environment for the driver's preflight child. Kept apart from ``farm.job``, which imports Zarr
(0.45 s): ``farm render`` starts its preflight child before that import (``farm.cli``).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from farm.errors import SpecError
from farm.spec import GroupsSpec, JobSpec
from tracer.runtime.xla_flags import local_isa

if TYPE_CHECKING:
    from cluster.group import GroupShape

__all__ = ["group_shapes", "check_local", "check_fits", "preflight_env", "with_isa", "LOCAL_MEMBERS_PER_CORE",
           "LOCAL_DEVICES_PER_CORE"]

# Members (JAX processes) and CPU devices a core of this machine takes in a local job.
LOCAL_MEMBERS_PER_CORE, LOCAL_DEVICES_PER_CORE = 4, 16


def group_shapes(spec: JobSpec, local: bool) -> list[GroupShape]:
    """The worker groups of a job: ``groups.count`` groups of ``groups.hosts`` hosts each; on a
    cluster, a job that names no groups gets one per node (``cluster.group.discover_shapes``)."""
    from cluster.group import GroupShape, discover_shapes
    g = spec.groups
    if not local and dataclasses.replace(g.shape_only(), cpu_isa=None) == GroupsSpec():
        return [dataclasses.replace(s, cpu_isa=g.cpu_isa) for s in discover_shapes()]
    strategy = "PACK" if local else "STRICT_SPREAD"
    devices = _devices_per_host(g, local)
    shape = GroupShape(hosts=g.hosts, platform=g.platform, devices_per_host=devices,
                       gpus_per_host=g.gpus_per_host, tpu_topology=g.tpu_topology, tpu_version=g.tpu_version,
                       strategy=strategy, cpu_isa=g.cpu_isa)
    return [shape] * g.count


def with_isa(spec: JobSpec, isa: str) -> JobSpec:
    """``spec`` with ``isa`` as its CPU instruction-set level unless it names one."""
    if spec.groups.platform != "cpu" or spec.groups.cpu_isa is not None:
        return spec
    return dataclasses.replace(spec, groups=dataclasses.replace(spec.groups, cpu_isa=isa))


def preflight_env(spec: JobSpec, local: bool) -> dict[str, str] | None:
    """The members' environment of a job whose work unit the driver's preflight child can
    compile for them (``farm.scene_check.Preflight``): a local CPU job of one host per group, with
    the compilation cache on; else None. Before ``prepare``, a job that names no instruction-set
    level is taken to have this host's (a store of another level gives another environment:
    ``prepare``'s spec then tells, and nothing is compiled ahead)."""
    from cluster.bootstrap import cache_dir, worker_env
    g = with_isa(spec, local_isa()).groups
    if not local or g.platform != "cpu" or g.hosts != 1 or cache_dir() is None:
        return None
    return worker_env(g.platform, _devices_per_host(g, local), isa=g.cpu_isa)  # as GroupShape.env() makes it


def check_local(g: GroupsSpec, cores: int | None = None) -> None:
    """Refuse (before Ray starts) groups that this machine's ``cores`` cannot run as a local job:
    more members (JAX processes) or CPU devices than a few a core."""
    cores = cores or os.cpu_count() or 1
    members = g.count * g.hosts
    if members > LOCAL_MEMBERS_PER_CORE * cores:
        raise SpecError(f"groups.count x groups.hosts is {members} members: a local job on this machine's {cores} "
                        f"core(s) takes at most {LOCAL_MEMBERS_PER_CORE * cores} (a JAX process each); "
                        f"--address renders on a Ray cluster")
    if g.devices_per_host is not None and members * g.devices_per_host > LOCAL_DEVICES_PER_CORE * cores:
        raise SpecError(f"groups.devices_per_host: {members} member(s) x {g.devices_per_host} devices is more than "
                        f"a local job on this machine's {cores} core(s) takes ({LOCAL_DEVICES_PER_CORE * cores})")


def check_fits(shapes: Sequence[GroupShape], nodes: Sequence[Mapping[str, float]]) -> None:
    """Refuse groups of ``shapes`` that the cluster's live ``nodes`` (each its Ray resources,
    ``{"CPU": 8, "GPU": 2, ...}``) cannot hold, before any is made (Ray would wait for them)."""
    for shape in {s: None for s in shapes}:
        fitting = [n for n in nodes if all(n.get(r, 0) >= v for r, v in shape.bundle().items())]
        if shape.strategy == "STRICT_SPREAD" and shape.hosts > len(fitting):
            raise SpecError(f"groups.hosts is {shape.hosts}, one member a node: the cluster has {len(fitting)} "
                            f"node(s) with {_bundle_text(shape.bundle())}")
    for resource in sorted({r for s in shapes for r in s.bundle()}):
        need = sum(s.hosts * s.bundle().get(resource, 0) for s in shapes)
        have = sum(n.get(resource, 0) for n in nodes)
        if need > have:
            raise SpecError(f"groups.count x groups.hosts: {len(shapes)} group(s) of {shapes[0].hosts} member(s) "
                            f"need {need:g} {resource}, the cluster has {have:g}")


def _bundle_text(bundle: Mapping[str, float]) -> str:
    return ", ".join(f"{v:g} {r}" for r, v in bundle.items())


def _devices_per_host(g: GroupsSpec, local: bool) -> int | None:
    """The CPU devices of each member: the job's count, or, for a local job, a device per core,
    the cores split among every member (they share this machine's cores)."""
    from cluster.bootstrap import local_devices_per_member
    if local and g.devices_per_host is None and g.platform == "cpu":
        return local_devices_per_member(g.count * g.hosts)
    return g.devices_per_host
