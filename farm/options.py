"""The command-line options that make a job, declared once.

Each ``Option`` is a click option, the ``JobSpec`` field it sets (``GroupsSpec``'s for
``GROUP_OPTIONS``) and how its text becomes that field's value. ``farm render`` and ``farm submit``
take ``JOB_OPTIONS``; ``render`` and ``resume`` take ``GROUP_OPTIONS``; a job file's values are
overridden by the options given (``job_spec``), and ``submit`` passes the options given on to the
``farm render`` it submits (``command_line``). An option left out is None: "not given", never a
default that would override a job file's value.
"""
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import click

from farm.curves import Curve, parse_set
from farm.errors import FarmError, SpecError
from farm.spec import GroupsSpec, JobSpec, parse_frames, parse_res, scene_info
from tracer.shared import ACCELERATOR_TILE, DEFAULT_TILE, FILTERS, ISAS, MAX_FRAME, MAX_SPP, PLATFORMS

__all__ = ["Option", "JOB_OPTIONS", "GROUP_OPTIONS", "SHAPE_OPTIONS", "PRIORITY", "job_options", "group_options", "shape_options", "job_spec", "with_groups",
           "command_line"]


@dataclasses.dataclass(frozen=True)
class Option:
    """One option: ``--flag`` on the command line, the spec ``field`` it sets."""

    flag: str
    field: str
    help: str
    param: str | None = None            # the click parameter's name (default: the flag's)
    type: object = None                 # a click type
    multiple: bool = False              # given once per value (``--set``)
    metavar: str | None = None
    parse: Callable | None = None       # the option's value -> the field's value

    @property
    def name(self) -> str:
        return self.param or self.flag.lstrip("-").replace("-", "_")

    def decorate(self, f: Callable) -> Callable:
        return click.option(self.flag, self.name, type=self.type, default=None, multiple=self.multiple,
                            metavar=self.metavar, help=self.help)(f)

    def given(self, value: object) -> bool:
        return bool(value) if self.multiple else value is not None

    def value(self, given: object) -> object:
        return self.parse(given) if self.parse else given


def _curves(sets: Iterable[str]) -> tuple[Curve, ...]:
    return tuple(parse_set(s) for s in sets)


JOB_OPTIONS = (
    Option("--frames", "frames", f"Frame range FIRST-LAST (inclusive, 0 to {MAX_FRAME}, at most 100000 frames); "
           "default 0.", parse=parse_frames),
    Option("--spp", "spp", f"Samples per pixel, 1 to {MAX_SPP} (default: the scene's sample_count).", type=int),
    Option("--res", "resolution", "Override the film size, WIDTHxHEIGHT (each 1 to 16384).", parse=parse_res),
    Option("--set", "curves", "NAME=VALUE or NAME=FRAME:VALUE,FRAME:VALUE,... (linear): a scene <default>.",
           param="sets", multiple=True, parse=_curves),
    Option("--seed", "seed", "Job seed, 0 to 2147483647 (default 0).", type=int),
    Option("--tile", "tile", f"Tile size in pixels, 8 to 4096 (default on CPUs: the whole frame up to about "
           f"360x360 pixels, else {DEFAULT_TILE}; {ACCELERATOR_TILE} on GPUs and TPUs; a store keeps its own).",
           type=int),
    Option("--noise", "noise", "A noise target (relative RMS error, e.g. 0.05): tiles get samples until their "
           "estimated noise is at most this, --spp then the most a tile gets.", type=float),
    Option("--min-spp", "min_spp", "With --noise: the least a tile gets (default 256).", type=int),
    Option("--aovs", "aovs", "Add AOV channels, as Mitsuba's aov integrator (e.g. albedo:albedo,nn:sh_normal, what "
           "export --denoise needs); after the scene's own if it has one.", metavar="NAME:TYPE,..."),
    Option("--rfilter", "rfilter", "Replace the film's reconstruction filter (box for export --denoise: wider "
           "filters correlate the noise of neighbouring pixels, which the denoiser keeps).",
           type=click.Choice(FILTERS)),
    Option("--accel", "accel", "Intersection backend (default auto: Embree on CPUs).",
           type=click.Choice(["auto", "embree", "warp", "jax"])),
    Option("--out", "store", "The job's Zarr store: a path (on a cluster, one every node sees), or a URL zarr "
           "accepts."),
)
PRIORITY = Option("--priority", "priority", "The job's priority in its cluster's queue, -1000 to 1000 (default 0): "
                  "higher gets groups first (a local render has no queue).", type=int)
GROUP_OPTIONS = (
    Option("--groups", "count", "Worker groups to render on.", type=int),
    Option("--hosts-per-group", "hosts", "Hosts (members) per worker group.", type=int),
    Option("--devices-per-host", "devices_per_host",
           "CPU only: virtual devices per group member, at least 2 (default: one per core).", type=int),
    Option("--platform", "platform", "Device platform of the worker groups (default cpu).",
           type=click.Choice(PLATFORMS)),
    Option("--cpu-isa", "cpu_isa", "CPU instruction set of the job's arithmetic (default: the store's; a new one "
           "this machine's, or AVX2 on a cluster). A host without it refuses the job.",
           type=click.Choice(ISAS, case_sensitive=False), parse=str.upper),
    Option("--task-timeout", "task_timeout", "Seconds a task may run before it is taken from its group (which is "
           "rebuilt) and sent elsewhere (default: 5x the run's median task time, at least 60 s; a group's first "
           "task, which compiles, at least 600 s).", type=float, metavar="SECONDS"),
    Option("--host-failures", "host_failures", "Failed tasks after which a host is left out of the run "
           "(default 3).", type=int),
    PRIORITY,
)


def _decorator(options: Sequence[Option]) -> Callable[[Callable], Callable]:
    def apply(f):
        for option in reversed(options):
            f = option.decorate(f)
        return f
    return apply


job_options = _decorator(JOB_OPTIONS)
group_options = _decorator(GROUP_OPTIONS)
# The groups' shape without how failures are handled (``farm optimize``: no task timeout or host
# leaving out there).
SHAPE_OPTIONS = GROUP_OPTIONS[:5]
shape_options = _decorator(SHAPE_OPTIONS)


def _given(options: Iterable[Option], values: Mapping[str, Any]) -> dict[str, Any]:
    """{field: value} of the ``options`` that ``values`` (click's parameters) give."""
    return {o.field: o.value(values[o.name]) for o in options if o.given(values.get(o.name))}


def job_spec(source: str, values: dict) -> JobSpec:
    """The job of ``farm render SOURCE`` (a scene .xml or a job .toml) with the ``JOB_OPTIONS``
    ``values`` click parsed: a job file's fields, those given replacing them (``--set`` by name)."""
    if source.endswith(".toml"):
        spec = JobSpec.from_toml(source)
        fields = _given(JOB_OPTIONS, values)
        if "curves" in fields:
            named = {c.name: c for c in spec.curves}
            named.update({c.name: c for c in fields["curves"]})
            fields["curves"] = tuple(named.values())
        return dataclasses.replace(spec, **fields)
    if not os.path.isfile(source):
        raise FarmError(f"scene file not found: {source}")
    fields = _given(JOB_OPTIONS, values)
    if "store" not in fields:
        raise SpecError("--out STORE is required with a scene file (a job file names its store)")
    if "spp" not in fields:  # the scene's sampler's (Mitsuba's 4 when it has none)
        fields["spp"] = scene_info(source).spp
    fields.setdefault("frames", parse_frames("0"))  # (the rest default as JobSpec's fields do)
    return JobSpec(scene=os.path.abspath(source), **fields)


def with_groups(spec: JobSpec, values: dict) -> JobSpec:
    """``spec`` with the ``GROUP_OPTIONS`` ``values`` given replacing its groups' fields (a flag's 0
    is refused by ``GroupsSpec``, not taken for "not given"); a GPU group gets a GPU a host."""
    groups = dataclasses.replace(spec.groups, **_given(GROUP_OPTIONS, values))
    if groups.platform == "gpu" and not groups.gpus_per_host:
        groups = dataclasses.replace(groups, gpus_per_host=1)
    return dataclasses.replace(spec, groups=groups)


def command_line(values: dict) -> list[str]:
    """The ``JOB_OPTIONS`` that ``values`` give, as command-line arguments that give them again."""
    args = []
    for option in JOB_OPTIONS:
        given: Any = values.get(option.name)
        if option.given(given):
            for value in (given if option.multiple else (given,)):
                args += [option.flag, str(value)]
    return args
