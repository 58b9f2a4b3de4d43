"""Host side: Mitsuba ``<medium>``, ``<volume>`` and ``<phase>`` plugins -> the ``Media`` table.

``MediumTableBuilder.add`` takes a medium node (a shape's ``interior``/``exterior``, the sensor's
``medium``; one row per node, however many refer to it) and returns its row. Mitsuba 3.9's
``homogeneous`` and ``heterogeneous`` media are read with their parameters and defaults
(``sigma_t`` 1, ``albedo`` 0.75, ``scale`` 1, ``sample_emitters`` and ``has_spectral_extinction``
on), their values given as a float, an ``rgb``, a ``spectrum``, a ``constvolume`` or a
``gridvolume`` of Mitsuba's binary ``.vol`` format (``tracer.io.vol``; its ``wrap_mode`` clamp,
repeat or mirror; a homogeneous medium's albedo only, read at each collision as Mitsuba's);
phase functions ``isotropic`` (the default), ``hg``, ``rayleigh`` and a ``blendphase`` of two of
those (its two in document order, as Mitsuba takes them; its ``weight`` a float, a ``constvolume``
or a one-channel ``gridvolume``). Other media, volumes and phase functions, and a blend inside a
blend, are refused by name.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from tracer import media as md
from tracer import volumes as vol
from tracer.errors import SceneError
from tracer.io import vol as vol_files
from tracer.kinds import WrapMode
from tracer.table_rows import column, on_device, stacked

if TYPE_CHECKING:
    from tracer.io.xml import PluginNode

__all__ = ["MediumTableBuilder"]

KINDS = {"homogeneous": md.MediumKind.HOMOGENEOUS, "heterogeneous": md.MediumKind.HETEROGENEOUS}
WRAP_MODES = {"clamp": WrapMode.CLAMP, "repeat": WrapMode.REPEAT, "mirror": WrapMode.MIRROR}  # a gridvolume's
MAX_VOXELS = 1 << 28  # every grid of a scene together: 1 GiB of float32
_IDENTITY = np.eye(4)


@dataclasses.dataclass(frozen=True)
class MediumRow:
    kind: int
    sigma_t: np.ndarray        # constant, or what multiplies the sigma_t volume
    albedo: np.ndarray
    sigma_t_volume: int
    albedo_volume: int
    majorant: float
    lo: np.ndarray
    hi: np.ndarray
    phase: _Phase
    spectral: bool
    sample_emitters: bool


@dataclasses.dataclass(frozen=True)
class _Phase:
    """A medium's phase function: one (kind, g), or a blend of two with the second's chance."""

    kind: int
    g: float
    kind_b: int
    g_b: float
    blend: float = 0.0         # the constant chance of the second, or what multiplies its grid's
    blend_volume: int = -1     # a row of the Volumes, or -1
    is_blend: bool = False


@dataclasses.dataclass(frozen=True)
class _Volume:
    """A medium parameter as read: a constant, or a grid (``grid`` >= 0, a row of the Volumes)."""

    value: np.ndarray          # the constant (3,), or ones for a grid
    grid: int
    largest: float             # Mitsuba's Volume::max()
    to_world: np.ndarray       # (4, 4) where the unit cube is (Mitsuba's volume bbox)


class MediumTableBuilder:
    def __init__(self) -> None:
        self.rows: list[MediumRow] = []
        self.ids: dict[int, int] = {}  # id(node) -> row
        self.grids: list[vol_files.Grid] = []
        self.grid_to_local: list[np.ndarray] = []
        self.nearest: list[bool] = []
        self.wraps: list[int] = []

    def add(self, node: PluginNode) -> int:
        """The row of medium ``node`` (read the first time it is seen)."""
        if id(node) not in self.ids:
            self.ids[id(node)] = len(self.rows)
            self.rows.append(self._read(node))
        return self.ids[id(node)]

    def build(self, sensor: int) -> md.Media:
        if not self.rows:
            return md.no_media()
        rows = self.rows
        phases = [row.phase for row in rows]
        return md.Media(sigma_t=stacked(rows, "sigma_t"), albedo=stacked(rows, "albedo"),
                        g=column(phases, "g", np.float32), phase=column(phases, "kind", np.int32),
                        g_b=column(phases, "g_b", np.float32), phase_b=column(phases, "kind_b", np.int32),
                        blend=column(phases, "blend", np.float32), blend_volume=column(phases, "blend_volume", np.int32),
                        spectral=column(rows, "spectral", bool), sample_emitters=column(rows, "sample_emitters", bool),
                        sensor=on_device(sensor, np.int32), kind=column(rows, "kind", np.int32),
                        sigma_t_volume=column(rows, "sigma_t_volume", np.int32),
                        albedo_volume=column(rows, "albedo_volume", np.int32),
                        majorant=column(rows, "majorant", np.float32), lo=stacked(rows, "lo"), hi=stacked(rows, "hi"),
                        volumes=self._volumes(), count=len(rows),
                        phases_present=tuple(sorted({k for f in phases for k in (f.kind, f.kind_b)})),
                        blends_present=any(f.is_blend for f in phases),
                        kinds_present=tuple(sorted({row.kind for row in rows})))

    def _volumes(self) -> vol.Volumes:
        if not self.grids:
            return vol.no_volumes()
        sizes = [g.data.size for g in self.grids]
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)
        return vol.Volumes(data=on_device(np.concatenate([g.data.ravel() for g in self.grids]), np.float32),
                           offset=on_device(offsets), res=on_device(np.stack([g.res for g in self.grids], axis=1), np.int32),
                           channels=on_device([g.channels for g in self.grids], np.int32),
                           nearest=on_device(self.nearest, bool), wrap=on_device(self.wraps, np.int32),
                           wraps_present=tuple(sorted(set(self.wraps))),
                           to_local=on_device(np.stack([m[:3, :4] for m in self.grid_to_local], axis=-1), np.float32),
                           count=len(self.grids))

    def _read(self, node: PluginNode) -> MediumRow:
        if node.type not in KINDS:
            raise SceneError(f"{node.source}: unsupported medium '{node.type}' ({', '.join(KINDS)})")
        kind = KINDS[node.type]
        scale = node.get_float("scale", 1.0)
        sigma_t = self._volume(node, "sigma_t", 1.0, kind)
        albedo = self._volume(node, "albedo", 0.75, kind)
        if not (np.isfinite(scale) and scale >= 0):
            raise SceneError(f"{node.source}: the medium's scale must be finite and >= 0, got {scale}")
        for name, part in (("sigma_t", sigma_t), ("albedo", albedo)):
            if not (np.all(np.isfinite(part.value)) and np.all(part.value >= 0) and part.largest >= 0):
                raise SceneError(f"{node.source}: the medium's {name} must be finite and >= 0")
        lo, hi = _world_bounds(sigma_t.to_world)
        phase = self._phase(node)
        spectral = node.get_bool("has_spectral_extinction", True)
        sample_emitters = node.get_bool("sample_emitters", True)
        node.check_unused()
        return MediumRow(kind=kind, sigma_t=(sigma_t.value * scale).astype(np.float32),
                         albedo=albedo.value.astype(np.float32), sigma_t_volume=sigma_t.grid, albedo_volume=albedo.grid,
                         majorant=float(scale * sigma_t.largest), lo=lo, hi=hi, phase=phase, spectral=spectral,
                         sample_emitters=sample_emitters)

    def _volume(self, node: PluginNode, name: str, default: float, kind: int) -> _Volume:
        """A medium's volume parameter: a constant given directly or as a ``constvolume``, or (for a
        heterogeneous medium) a ``gridvolume``."""
        child = node.child(name)
        if child is None:
            value = node.get_rgb(name, default)  # as Mitsuba reads a plain value: a reflectance, in [0, 1]
            return _Volume(value, -1, float(np.max(value)), _IDENTITY)
        if child.category != "volume" or child.type not in ("constvolume", "gridvolume"):
            raise SceneError(f"{child.source}: unsupported {child.describe()} as the medium's '{name}' (a constant, "
                             "a constvolume or a gridvolume)")
        to_world = child.get_transform("to_world")
        if child.type == "constvolume":
            value = child.get_rgb("value", 1.0)
            child.check_unused()
            return _Volume(value, -1, float(np.max(value)), to_world)
        if kind != md.MediumKind.HETEROGENEOUS and name != "albedo":
            raise SceneError(f"{child.source}: a homogeneous medium's '{name}' cannot be a gridvolume (Mitsuba "
                             "samples its flights with the value at the origin); a heterogeneous medium's can")
        filter_type = child.get_string("filter_type", "trilinear")
        if filter_type not in ("trilinear", "nearest"):
            raise SceneError(f"{child.source}: gridvolume filter_type must be 'trilinear' or 'nearest', got "
                             f"'{filter_type}'")
        wrap = child.get_string("wrap_mode", "clamp")
        if wrap not in WRAP_MODES:
            raise SceneError(f"{child.source}: gridvolume wrap_mode must be one of {', '.join(WRAP_MODES)}, got '{wrap}'")
        grid = child.load(vol_files.read, child.get_path("filename"))
        if child.get_bool("use_grid_bbox", False):
            to_world = to_world @ grid.bbox_to_world()
        largest = child.get_float("max_value", grid.largest)
        child.mark_used("raw", "accel")  # (RGB: the values as they are; how Dr.Jit looks them up)
        child.check_unused()
        if sum(g.data.size for g in self.grids) + grid.data.size > MAX_VOXELS:
            raise SceneError(f"{child.source}: the scene's grid volumes hold more than {MAX_VOXELS} values")
        if abs(np.linalg.det(to_world[:3, :3])) == 0:
            raise SceneError(f"{child.source}: the gridvolume's to_world is singular")
        self.grids.append(grid)
        self.grid_to_local.append(np.linalg.inv(to_world))
        self.nearest.append(filter_type == "nearest")
        self.wraps.append(WRAP_MODES[wrap])
        return _Volume(np.ones(3), len(self.grids) - 1, largest, to_world)

    def _phase(self, node: PluginNode) -> _Phase:
        """The medium's phase function (Mitsuba's default: isotropic)."""
        phases = node.children_of("phase")
        if len(phases) > 1:
            raise SceneError(f"{phases[1].source}: a medium takes one phase function, got {len(phases)}")
        if not phases:
            return _Phase(md.Phase.ISOTROPIC, 0.0, md.Phase.ISOTROPIC, 0.0)
        phase = phases[0]
        if phase.type != "blendphase":
            kind, g = _leaf(phase)
            return _Phase(kind, g, kind, g)
        nested = phase.children_of("phase")
        if len(nested) != 2:
            raise SceneError(f"{phase.source}: a blendphase takes two phase functions, got {len(nested)}")
        (kind, g), (kind_b, g_b) = (_leaf(p) for p in nested)  # (in document order, as Mitsuba pairs them)
        weight = self._weight(phase)
        phase.check_unused()
        return _Phase(kind, g, kind_b, g_b, blend=float(weight.value[0]), blend_volume=weight.grid, is_blend=True)

    def _weight(self, phase: PluginNode) -> _Volume:
        """A blendphase's weight: a float (required, as Mitsuba requires it), a constvolume or a
        one-channel gridvolume, read as a medium's volume is (the grid at the medium's points)."""
        if not phase.has("weight"):
            raise SceneError(f"{phase.source}: a blendphase needs a 'weight' (the chance of its second phase function)")
        child = phase.child("weight")
        if child is None:
            value = phase.get_float("weight")
            if not np.isfinite(value):
                raise SceneError(f"{phase.source}: the blendphase's weight must be finite, got {value}")
            return _Volume(np.full(3, value), -1, value, _IDENTITY)
        weight = self._volume(phase, "weight", 0.5, md.MediumKind.HETEROGENEOUS)
        if weight.grid >= 0 and self.grids[weight.grid].channels != 1:
            raise SceneError(f"{child.source}: a blendphase's weight grid must have one channel, got "
                             f"{self.grids[weight.grid].channels}")
        if weight.grid < 0 and not np.all(weight.value == weight.value[0]):
            raise SceneError(f"{child.source}: a blendphase's weight must be one value, not a colour")
        return weight


def _world_bounds(to_world: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The world box (lo, hi) (3,) of the unit cube under ``to_world`` (4, 4), as Mitsuba's
    ``Volume::update_bbox``: where a heterogeneous medium lives."""
    corners = np.array([[x, y, z, 1.0] for x in (0, 1) for y in (0, 1) for z in (0, 1)]) @ to_world.T
    return corners[:, :3].min(axis=0).astype(np.float32), corners[:, :3].max(axis=0).astype(np.float32)


def _leaf(phase: PluginNode) -> tuple[int, float]:
    """(Phase kind, g) of a phase function that is not a blend."""
    if phase.type in ("isotropic", "rayleigh"):
        phase.check_unused()
        return (md.Phase.ISOTROPIC if phase.type == "isotropic" else md.Phase.RAYLEIGH), 0.0
    if phase.type == "hg":
        g = phase.get_float("g", 0.8)
        if not -1 < g < 1:
            raise SceneError(f"{phase.source}: the hg phase function's g must lie in (-1, 1), got {g}")
        phase.check_unused()
        return md.Phase.HG, g
    if phase.type == "blendphase":
        raise SceneError(f"{phase.source}: a blendphase inside a blendphase is not rendered yet")
    raise SceneError(f"{phase.source}: unsupported phase function '{phase.type}' (isotropic, hg, rayleigh, blendphase)")
