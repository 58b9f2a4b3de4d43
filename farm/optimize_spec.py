"""An inverse-rendering job: a job file's ``[optimize]`` table (``farm optimize JOB.toml``).

The rest of the file is a render job's (``farm.spec.JobSpec``): its frames are the views, each
rendered at its ``spp`` with gradients every iteration. The table::

    [optimize]
    targets = "targets/frame_{frame:04d}.exr"   # a reference a frame: EXR, PNG (sRGB), npy; linear RGB
    parameters = ["left.reflectance.value"]     # keys of tracer.parameters
    iterations = 80
    optimizer = "adam"                          # or "sgd" (optax's)
    learning_rate = 0.03
    loss = "l2"                                 # or "l1": the mean over every frame's pixels and channels

Checked here (no scene needed): the table's own keys, types and ranges; the keys against the
scene and the targets against the film are checked by ``farm.descent`` before anything runs.
"""
from __future__ import annotations

import dataclasses
import math
import os
import string
from typing import Any, Self

from farm.errors import SpecError, shown
from farm.spec import JobSpec, _read_toml
from tracer.shared import LOSSES, MAX_SEED, OPTIMIZERS

__all__ = ["OptimizeSpec", "read_job", "MAX_ITERATIONS"]

MAX_ITERATIONS = 100_000
_KEYS = ("targets", "parameters", "iterations", "optimizer", "learning_rate", "loss")


@dataclasses.dataclass(frozen=True)
class OptimizeSpec:
    targets: str                 # absolute path template, ``{frame}`` formatted (e.g. frame_{frame:04d}.exr)
    parameters: tuple[str, ...]  # keys of tracer.parameters, in the order the store keeps them
    iterations: int
    optimizer: str = "adam"
    learning_rate: float = 0.01
    loss: str = "l2"

    def __post_init__(self) -> None:
        if not isinstance(self.targets, str) or not self.targets:
            raise SpecError(f"optimize.targets must be a path (a template with {{frame}}), got {shown(self.targets)}")
        try:
            self.target(0)
        except (KeyError, IndexError, ValueError) as e:
            raise SpecError(f"optimize.targets: {shown(self.targets)} is not a template of {{frame}} "
                            f"({type(e).__name__}: {e})") from None
        keys = self.parameters
        if not (isinstance(keys, tuple) and keys and all(isinstance(k, str) and k for k in keys)):
            raise SpecError(f"optimize.parameters must be a non-empty list of keys, got {shown(keys)}")
        if len(set(keys)) != len(keys):
            raise SpecError(f"optimize.parameters names '{next(k for k in keys if keys.count(k) > 1)}' twice")
        it = self.iterations
        if not (isinstance(it, int) and not isinstance(it, bool) and 1 <= it <= MAX_ITERATIONS):
            raise SpecError(f"optimize.iterations must be a whole number from 1 to {MAX_ITERATIONS}, got {shown(it)}")
        if self.optimizer not in OPTIMIZERS:
            raise SpecError(f"optimize.optimizer must be one of {', '.join(OPTIMIZERS)}, got {shown(self.optimizer)}")
        if self.loss not in LOSSES:
            raise SpecError(f"optimize.loss must be one of {', '.join(LOSSES)}, got {shown(self.loss)}")
        rate = self.learning_rate
        if not (isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate) and rate > 0):
            raise SpecError(f"optimize.learning_rate must be a number above 0, got {shown(rate)}")

    def target(self, frame: int) -> str:
        """The target file of ``frame``."""
        return self.targets.format(frame=frame)

    def seed(self, spec: JobSpec, iteration: int) -> int:
        """The seed iteration ``iteration`` renders with: each iteration's samples are new."""
        return spec.seed + iteration

    def check_seeds(self, spec: JobSpec) -> None:
        if spec.seed + self.iterations > MAX_SEED:
            raise SpecError(f"seed + optimize.iterations must be at most {MAX_SEED} (each iteration renders with "
                            f"the next seed), got {spec.seed} + {self.iterations}")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "parameters": list(self.parameters)}

    @classmethod
    def from_json(cls, d: object) -> Self:
        if not isinstance(d, dict) or set(d) != set(_KEYS):
            raise SpecError(f"an optimize table must have the keys {', '.join(_KEYS)}, got {shown(d)}")
        params = d["parameters"]
        return cls(**{**d, "parameters": tuple(params) if isinstance(params, list) else params,
                      "learning_rate": float(d["learning_rate"]) if isinstance(d["learning_rate"], int)
                      and not isinstance(d["learning_rate"], bool) else d["learning_rate"]})

    @classmethod
    def from_table(cls, table: object, base: str) -> Self:
        """The ``[optimize]`` table of a job file in the folder ``base``."""
        if not isinstance(table, dict):
            raise SpecError(f"optimize must be a table, got {shown(table)}")
        unknown = sorted(set(table) - set(_KEYS))
        if unknown:
            raise SpecError(f"unknown key 'optimize.{unknown[0]}' (known: {', '.join(_KEYS)})")
        for key in ("targets", "parameters", "iterations"):
            if key not in table:
                raise SpecError(f"'optimize.{key}' is required")
        d = {**{"optimizer": "adam", "learning_rate": 0.01, "loss": "l2"}, **table}
        targets = d["targets"]
        if isinstance(targets, str) and targets and _is_template(targets):
            d["targets"] = os.path.join(base, targets)
        elif isinstance(targets, str) and targets:
            raise SpecError(f"optimize.targets must name {{frame}} (e.g. \"targets/frame_{{frame:04d}}.exr\"), "
                            f"got {shown(targets)}")
        return cls.from_json(d)


def _is_template(text: str) -> bool:
    try:
        return any(field == "frame" for _, field, _, _ in string.Formatter().parse(text) if field is not None)
    except ValueError:
        return False


def read_job(path: str) -> tuple[JobSpec, OptimizeSpec]:
    """(the render job, its ``[optimize]`` table) of the job file at ``path``; errors are one-line
    SpecErrors that start with the path and name the field."""
    doc = _read_toml(path)
    if "optimize" not in doc:
        raise SpecError(f"{path}: an [optimize] table is required (`farm render` renders a job without one)")
    base = os.path.dirname(os.path.abspath(path))
    try:
        opt = OptimizeSpec.from_table(doc.pop("optimize"), base)
        spec = JobSpec._from_toml_doc(doc, base)
        opt.check_seeds(spec)
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None
    return spec, opt
