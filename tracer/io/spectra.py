"""Spectra in RGB, converted as Mitsuba 3's ``*_rgb`` variants convert them (host only, numpy).

A colour parameter reaches a Mitsuba plugin through one of three accessors of ``Properties``
(``src/core/properties.cpp``, ``get_texture_impl``), and the accessor decides the conversion:

========================  =================  =====================  ==============================
value                     reflectance        emission               unbounded (IORs)
                          (``get_texture``)  (``..._emissive_..``)  (``get_unbounded_texture``)
========================  =================  =====================  ==============================
float, integer            gray               gray                   gray
``<rgb>``                 as is, in [0, 1]   as is                  as is
uniform ``<spectrum>``    gray               v * xyz_to_srgb(1)     gray
wavelength:value pairs    D65-weighted,      unweighted,            D65-weighted,
or a spectrum file        clamped to [0, 1]  negatives clamped      negatives clamped
========================  =================  =====================  ==============================

Pairs are integrated against the CIE 1931 curves in 1,000 steps over 360-830 nm with linear
interpolation, and nothing outside the given wavelengths (``spectrum_list_to_srgb``,
``src/core/spectrum.cpp``); a D65 weight makes a unit reflectance white, while an emitter's
spectrum is absolute, so a uniform emitter is the "purple-ish" ``xyz_to_srgb(1, 1, 1)`` of a
flat spectrum under sRGB's D65 white. Which accessor a plugin uses is data (``context_of``).

Spectrum plugins nested as values (``<spectrum type="...">`` or ``<texture type="...">``):
``uniform``, ``rawconstant``, ``srgb`` and ``d65`` are what Mitsuba's RGB variants make of them.
``regular``, ``irregular`` and ``blackbody`` load in Mitsuba's RGB variants but cannot be
evaluated there ("Not implemented for non-spectral modes"); here they are tabulated spectra
converted by the rule of their context, which for an emitter is the colour Mitsuba's spectral
variants converge to. A blackbody (Planck's law, W m^-2 sr^-1 nm^-1, as ``blackbody.cpp``) is
an emission spectrum only.
"""
from __future__ import annotations

import dataclasses
import enum
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from tracer.io.cie_data import CIE_X, CIE_Y, CIE_Z, D65
from tracer.errors import SceneError
from tracer.io import reads

if TYPE_CHECKING:
    from tracer.io.plugin_node import PluginNode

__all__ = ["Context", "Spectrum", "context_of", "parse_spectrum", "read_spectrum_file", "to_rgb",
           "spectrum_to_srgb", "blackbody", "plugin_rgb", "SPECTRUM_PLUGINS"]

CIE_MIN, CIE_MAX, CIE_SAMPLES = 360.0, 830.0, 95
CIE_Y_NORMALIZATION = 1.0 / 106.7502593994140625     # a unit spectrum integrates to luminance 1
CIE_D65_NORMALIZATION = 1.0 / 98.99741751876255
# XYZ -> linear sRGB (Rec. 709), Mitsuba's float constants.
XYZ_TO_SRGB = np.array([[3.240479, -1.537150, -0.498535],
                        [-0.969256, 1.875991, 0.041556],
                        [0.055648, -0.204043, 1.057311]], np.float32)
_STEPS = 1000
_GRID = CIE_MIN + (np.arange(_STEPS) / float(_STEPS - 1)) * (CIE_MAX - CIE_MIN)  # nm, float64
SPECTRUM_PLUGINS = frozenset({"uniform", "rawconstant", "srgb", "d65", "regular", "irregular", "blackbody"})
MAX_SPECTRUM_FILE = 16 << 20  # bytes; a measured spectrum is a few kilobytes


class Context(enum.Enum):
    """How a plugin reads a colour parameter (the ``Properties`` accessor it calls)."""

    REFLECTANCE = "reflectance"   # get_texture: bounded to [0, 1], D65-weighted
    EMISSION = "emission"         # get_emissive_texture: absolute, negatives clamped
    UNBOUNDED = "unbounded"       # get_unbounded_texture (IORs): D65-weighted, negatives clamped
    RAW = "raw"                   # a plugin's own colour field (``srgb``'s ``color``): as given


# The parameters Mitsuba 3.9's plugins read with get_emissive_texture / get_unbounded_texture.
_EMISSION = frozenset({"radiance", "intensity", "irradiance"})
_ALPHAS = frozenset({"alpha", "alpha_u", "alpha_v"})
_UNBOUNDED = {
    ("bsdf", "conductor"): frozenset({"eta", "k"}),
    ("bsdf", "roughconductor"): frozenset({"eta", "k"}) | _ALPHAS,
    ("bsdf", "roughdielectric"): _ALPHAS,
    ("bsdf", "pplastic"): frozenset({"eta"}) | _ALPHAS,
    ("bsdf", "principledthin"): frozenset({"eta"}),
    ("bsdf", "hair"): frozenset({"sigma_a"}),
    ("bsdf", "polarizer"): frozenset({"theta"}),
    ("bsdf", "retarder"): frozenset({"theta", "delta"}),
    ("volume", "constvolume"): frozenset({"value"}),
}


def context_of(category: str, plugin_type: str, name: str) -> Context:
    """The ``Context`` in which plugin ``plugin_type`` of ``category`` reads parameter ``name``."""
    if category == "emitter" and name in _EMISSION:
        return Context.EMISSION
    if name in _UNBOUNDED.get((category, plugin_type), ()):
        return Context.UNBOUNDED
    return Context.REFLECTANCE


@dataclasses.dataclass(frozen=True)
class Spectrum:
    """A ``<spectrum>`` property: one uniform value, or values at increasing wavelengths (nm)."""

    values: tuple[float, ...]
    wavelengths: tuple[float, ...] = ()

    @property
    def uniform(self) -> bool:
        return not self.wavelengths

    def __post_init__(self) -> None:
        if self.wavelengths:
            if len(self.wavelengths) < 2 or len(self.wavelengths) != len(self.values):
                raise ValueError("a spectrum needs at least two wavelength:value pairs")
            if any(b <= a for a, b in zip(self.wavelengths, self.wavelengths[1:])):
                raise ValueError("wavelengths must be given in increasing order")
        elif len(self.values) != 1:
            raise ValueError("a uniform spectrum has one value")
        if not all(math.isfinite(v) for v in (*self.values, *self.wavelengths)):
            raise ValueError("spectrum values and wavelengths must be finite")


def _number(token: str, what: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise ValueError(f"could not parse {what} '{token}'") from None
    if not math.isfinite(value):
        raise ValueError(f"{what} '{token}' is not finite")
    return value


def parse_spectrum(text: str) -> Spectrum:
    """A ``<spectrum value=...>``: one number, or ``wavelength:value`` pairs (Mitsuba's syntax)."""
    tokens = [t for t in text.replace(",", " ").split() if t]
    if len(tokens) == 1 and ":" not in tokens[0]:
        return Spectrum((_number(tokens[0], "spectrum value"),))
    wavelengths, values = [], []
    for token in tokens:
        pair = [p for p in token.split(":") if p]
        if len(pair) != 2:
            raise ValueError(f"invalid spectrum value '{token}' (expected wavelength:value pairs)")
        wavelengths.append(_number(pair[0], "wavelength"))
        values.append(_number(pair[1], "spectrum value"))
    return Spectrum(tuple(values), tuple(wavelengths))


def read_spectrum_file(path: str | os.PathLike[str]) -> Spectrum:
    """The spectrum of a text file of ``wavelength value`` lines, as Mitsuba reads ``.spd`` files:
    lines starting with '#' and empty lines are skipped, anything after the two numbers ignored."""
    try:
        if os.path.getsize(path) > MAX_SPECTRUM_FILE:
            raise ValueError(f"larger than {MAX_SPECTRUM_FILE >> 20} MiB")
        text = reads.read_file(path).decode("latin-1")
    except OSError as e:
        raise ValueError(e.strerror) from None
    wavelengths, values = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line[0] in "#\r":
            continue
        fields = line.split()
        if len(fields) < 2:
            raise ValueError(f"line {number}: expected 'wavelength value', got '{line.strip()[:40]}'")
        wavelengths.append(_number(fields[0], f"wavelength on line {number}"))
        values.append(_number(fields[1], f"value on line {number}"))
    return Spectrum(tuple(values), tuple(wavelengths))


# ---------------------------------------------------------------------------------- conversion
def _lookup(table, w):
    """Mitsuba's linear interpolation of a 95-entry table at wavelengths ``w`` (float64)."""
    t = (w - CIE_MIN) * ((CIE_SAMPLES - 1) / (CIE_MAX - CIE_MIN))
    i0 = np.clip(t.astype(np.int64), 0, CIE_SAMPLES - 2)
    w1 = t - i0
    w0 = 1.0 - w1
    return w0 * table[i0].astype(np.float64) + w1 * table[i0 + 1].astype(np.float64)


_CMF = np.stack([_lookup(CIE_X, _GRID), _lookup(CIE_Y, _GRID), _lookup(CIE_Z, _GRID)], axis=1)  # (1000, 3)
_D65 = _lookup(D65, _GRID) * CIE_D65_NORMALIZATION


def _integrate(values_on_grid: np.ndarray, d65: bool) -> np.ndarray:
    """Linear sRGB (float64) of a spectrum sampled on the 1,000-step grid (NaN: not given there)."""
    given = ~np.isnan(values_on_grid)
    terms = _CMF[given] * values_on_grid[given, None]
    if d65:
        terms = terms * _D65[given, None]
    xyz = np.cumsum(terms, axis=0)[-1] if len(terms) else np.zeros(3)  # in order, as Mitsuba sums
    xyz = xyz * ((CIE_MAX - CIE_MIN) * CIE_Y_NORMALIZATION / _STEPS)
    return XYZ_TO_SRGB.astype(np.float64) @ xyz


def spectrum_to_srgb(wavelengths: ArrayLike, values: ArrayLike, bounded: bool, d65: bool) -> np.ndarray:
    """Mitsuba's ``spectrum_list_to_srgb``: linear sRGB of a tabulated spectrum, as float32."""
    wl, v = np.asarray(wavelengths, np.float64), np.asarray(values, np.float64)
    on_grid = np.full(_STEPS, np.nan)
    inside = (_GRID >= wl[0]) & (_GRID <= wl[-1])
    w = _GRID[inside]
    index = np.clip(np.searchsorted(wl, w, side="right") - 1, 0, len(wl) - 2)
    w0, w1, v0, v1 = wl[index], wl[index + 1], v[index], v[index + 1]
    on_grid[inside] = ((w - w1) * v0 + (w0 - w) * v1) / (w0 - w1)
    rgb = _integrate(on_grid, d65)
    rgb = np.clip(rgb, 0.0, 1.0) if bounded else np.maximum(rgb, 0.0)
    return rgb.astype(np.float32)


def to_rgb(value: Any, kind: str, context: Context, where: str | None = None) -> np.ndarray:
    """(3,) float64 RGB of a property value of tag ``kind`` read in ``context`` (see the table)."""
    if kind in ("float", "integer"):
        return np.full(3, float(value))
    if kind == "spectrum":
        if value.uniform:
            if context is Context.EMISSION:
                white = XYZ_TO_SRGB.sum(axis=1, dtype=np.float32)  # xyz_to_srgb(Color3f(1))
                return (np.float32(value.values[0]) * white).astype(np.float64)
            return np.full(3, value.values[0])
        if context is Context.RAW:
            raise SceneError("expected an rgb color, got a spectrum", where)
        return spectrum_to_srgb(value.wavelengths, value.values, bounded=context is Context.REFLECTANCE,
                                d65=context is not Context.EMISSION).astype(np.float64)
    rgb = np.broadcast_to(np.asarray(value, np.float64), (3,)).copy()
    if context is Context.REFLECTANCE and kind == "rgb" and np.any((rgb < 0) | (rgb > 1)):
        raise SceneError(f"invalid RGB reflectance value {rgb.tolist()}: must be in [0, 1]", where)
    return rgb


# ---------------------------------------------------------------------------------- plugins
# Physical constants of Mitsuba's blackbody (float32, as its ScalarFloat constants are computed).
_C = np.float32(2.99792458e8)
_H = np.float32(6.62607004e-34)
_K = np.float32(1.38064852e-23)
_C0 = np.float32(2) * _H * _C * _C
_C1 = _H * _C / _K


def blackbody(wavelengths: ArrayLike, temperature: float) -> np.ndarray:
    """Planck's law at ``wavelengths`` (nm): spectral radiance in W m^-2 sr^-1 nm^-1 (float64)."""
    lam = np.asarray(wavelengths, np.float64) * 1e-9
    with np.errstate(over="ignore"):
        return 1e-9 * float(_C0) / (lam ** 5 * np.expm1(float(_C1) / (lam * temperature)))


def _blackbody_rgb(node: PluginNode) -> np.ndarray:
    temperature = node.get_float("temperature")
    lo, hi = node.get_float("wavelength_min", CIE_MIN), node.get_float("wavelength_max", CIE_MAX)
    if not (temperature > 0 and math.isfinite(temperature)):
        raise SceneError(f"blackbody: temperature must be positive and finite, got {temperature}", node.source)
    on_grid = np.where((_GRID >= lo) & (_GRID <= hi), blackbody(_GRID, temperature), np.nan)
    return np.maximum(_integrate(on_grid, d65=False), 0.0).astype(np.float32).astype(np.float64)


def _tabulated(node: PluginNode) -> Spectrum:
    """The Spectrum of a ``regular`` or ``irregular`` plugin."""
    try:
        if node.type == "regular":
            values = [_number(t, "value") for t in node.get_string("values").replace(",", " ").split()]
            lo, hi = node.get_float("wavelength_min"), node.get_float("wavelength_max")
            if len(values) < 2:
                raise ValueError("a regular spectrum needs at least two values")
            step = (hi - lo) / (len(values) - 1)
            return Spectrum(tuple(values), tuple(lo + step * i for i in range(len(values))))
        wavelengths = [_number(t, "wavelength") for t in node.get_string("wavelengths").replace(",", " ").split()]
        values = [_number(t, "value") for t in node.get_string("values").replace(",", " ").split()]
        if len(wavelengths) != len(values):
            raise ValueError(f"'wavelengths' and 'values' have different sizes ({len(wavelengths)} vs {len(values)})")
        return Spectrum(tuple(values), tuple(wavelengths))
    except ValueError as e:
        raise SceneError(f"texture '{node.type}': {e}", node.source) from None


def plugin_rgb(node: PluginNode, context: Context) -> np.ndarray:
    """(3,) float64 RGB of a nested spectrum plugin (``SPECTRUM_PLUGINS``) read in ``context``."""
    kind = node.type
    if kind == "rawconstant" and node.kind_of("value") in ("vector", "point"):
        value = node.get_point("value")  # Mitsuba's rawconstant takes a 3-vector too (a normal map's)
        node.mark_used(*(n for n in ("wavelength_min", "wavelength_max") if node.has(n)))
    elif kind in ("uniform", "rawconstant"):
        value = node.get_rgb("value", context=Context.RAW) if kind == "rawconstant" else \
            np.full(3, node.get_float("value"))
        node.mark_used(*(n for n in ("wavelength_min", "wavelength_max") if node.has(n)))
    elif kind == "srgb":
        value = node.get_rgb("color", context=Context.RAW)
        unbounded = node.get_bool("unbounded", False)
        if np.any((value < 0) | (value > 1)) and not unbounded:
            raise SceneError(f"texture 'srgb': invalid RGB reflectance value {value.tolist()}: must be in [0, 1] "
                             "(or set 'unbounded')", node.source)
    elif kind == "d65":
        if node.children:
            raise SceneError("texture 'd65' with a nested texture is not supported", node.source)
        scale = node.get_float("scale", 1.0)
        value = node.get_rgb("color", np.ones(3), context=Context.RAW) * scale
    elif kind == "blackbody":
        if context is not Context.EMISSION:
            raise SceneError("a blackbody spectrum can only give an emitter's radiance, intensity or irradiance",
                             node.source)
        value = _blackbody_rgb(node)
    elif kind in ("regular", "irregular"):
        value = to_rgb(_tabulated(node), "spectrum", context, node.source)
    else:
        raise SceneError(f"unsupported spectrum plugin '{kind}'", node.source)
    if not np.all(np.isfinite(value)):
        raise SceneError(f"texture '{kind}': values must be finite, got {value.tolist()}", node.source)
    node.check_unused()
    return value
