"""Host side: Mitsuba ``<medium>`` and ``<phase>`` plugins -> the ``Media`` table (numpy only).

``MediumTableBuilder.add`` takes a medium node (a shape's ``interior``/``exterior``, the sensor's
``medium``; one row per node, however many refer to it) and returns its row. Mitsuba 3.9's
``homogeneous`` medium is read with its parameters and defaults (``sigma_t`` 1, ``albedo`` 0.75,
``scale`` 1, ``sample_emitters`` and ``has_spectral_extinction`` on), its values given as a float,
an ``rgb``, a ``spectrum`` or a ``constvolume``; phase functions ``isotropic`` (the default) and
``hg``. Other media, volumes and phase functions are refused by name.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import jax.numpy as jnp
import numpy as np

from tracer import media as md
from tracer.errors import SceneError
from tracer.io import spectra
from tracer.table_rows import column, stacked

if TYPE_CHECKING:
    from tracer.io.xml import PluginNode

__all__ = ["MediumTableBuilder"]

SUPPORTED = ("homogeneous",)


@dataclasses.dataclass(frozen=True)
class MediumRow:
    sigma_t: np.ndarray
    albedo: np.ndarray
    g: float
    phase: int
    spectral: bool
    sample_emitters: bool


class MediumTableBuilder:
    def __init__(self) -> None:
        self.rows: list[MediumRow] = []
        self.ids: dict[int, int] = {}  # id(node) -> row

    def add(self, node: PluginNode) -> int:
        """The row of medium ``node`` (read the first time it is seen)."""
        if id(node) not in self.ids:
            self.ids[id(node)] = len(self.rows)
            self.rows.append(_read(node))
        return self.ids[id(node)]

    def build(self, sensor: int) -> md.Media:
        if not self.rows:
            return md.no_media()
        rows = self.rows
        return md.Media(sigma_t=stacked(rows, "sigma_t"), albedo=stacked(rows, "albedo"),
                        g=column(rows, "g", np.float32), phase=column(rows, "phase", np.int32),
                        spectral=column(rows, "spectral", bool), sample_emitters=column(rows, "sample_emitters", bool),
                        sensor=jnp.int32(sensor), count=len(rows),
                        phases_present=tuple(sorted({row.phase for row in rows})))


def _read(node: PluginNode) -> MediumRow:
    if node.type not in SUPPORTED:
        raise SceneError(f"{node.source}: unsupported medium '{node.type}' (supported: {', '.join(SUPPORTED)}; "
                         "heterogeneous media and grid volumes are not rendered yet)")
    scale = node.get_float("scale", 1.0)
    sigma_t = _volume_rgb(node, "sigma_t", 1.0) * scale
    albedo = _volume_rgb(node, "albedo", 0.75)
    if not (np.all(np.isfinite(sigma_t)) and np.all(sigma_t >= 0)):
        raise SceneError(f"{node.source}: the medium's sigma_t times scale must be finite and >= 0, got {sigma_t}")
    if not (np.all(np.isfinite(albedo)) and np.all(albedo >= 0)):
        raise SceneError(f"{node.source}: the medium's albedo must be finite and >= 0, got {albedo}")
    phase, g = _phase(node)
    spectral = node.get_bool("has_spectral_extinction", True)
    sample_emitters = node.get_bool("sample_emitters", True)
    node.check_unused()
    return MediumRow(sigma_t.astype(np.float32), albedo.astype(np.float32), g, phase, spectral, sample_emitters)


def _volume_rgb(node: PluginNode, name: str, default: float) -> np.ndarray:
    """A medium's volume parameter as RGB: a constant given directly or as a ``constvolume``."""
    child = node.child(name)
    if child is None:
        return node.get_rgb(name, default)  # as Mitsuba reads a plain value: a reflectance, in [0, 1]
    if child.category != "volume" or child.type != "constvolume":
        raise SceneError(f"{child.source}: unsupported {child.describe()} as the medium's '{name}' (a constant, "
                         "or a constvolume; grid volumes are not rendered yet)")
    value = child.get_rgb("value", 1.0)
    child.mark_used("to_world")  # a constant is the same everywhere
    child.check_unused()
    return value


def _phase(node: PluginNode) -> tuple[int, float]:
    """(Phase kind, g) of the medium's phase function (Mitsuba's default: isotropic)."""
    phases = node.children_of("phase")
    if len(phases) > 1:
        raise SceneError(f"{phases[1].source}: a medium takes one phase function, got {len(phases)}")
    if not phases:
        return md.Phase.ISOTROPIC, 0.0
    phase = phases[0]
    if phase.type == "isotropic":
        phase.check_unused()
        return md.Phase.ISOTROPIC, 0.0
    if phase.type == "hg":
        g = phase.get_float("g", 0.8)
        if not -1 < g < 1:
            raise SceneError(f"{phase.source}: the hg phase function's g must lie in (-1, 1), got {g}")
        phase.check_unused()
        return md.Phase.HG, g
    raise SceneError(f"{phase.source}: unsupported phase function '{phase.type}' (isotropic, hg)")
