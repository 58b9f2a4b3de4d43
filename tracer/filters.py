"""Mitsuba 3's image reconstruction filters (``rfilter`` plugins), host side: parameters, limits
and the discretized table its ``ImageBlock`` splats with. Numpy only (no JAX: ``farm`` checks a
scene's filter through ``tracer.io.films`` without starting JAX).

Mitsuba's scalar ``ImageBlock::put`` weighs a sample at offset x from a pixel centre by
``eval_discretized(x)``: the filter read from a table of ``RESOLUTION + 1`` values, entry i the
filter at ``radius * i / RESOLUTION`` and the last entry zero, indexed by
``min(int(|x| * RESOLUTION / radius), RESOLUTION)`` (``include/mitsuba/core/rfilter.h``,
``src/core/rfilter.cpp``). ``tracer.film`` evaluates box, tent and gaussian in closed form at
the bin's left end; mitchell, catmullrom and lanczos it reads from the table made here, whose
values are Mitsuba 3.9.1's to the bit (``evaluate``). Mitsuba's JIT variants (``llvm_*``,
``cuda_*``) weigh samples by the filter in closed form instead (``ImageBlock::put``): their images
differ from ``scalar_rgb``'s and ours wherever the filter is not a box (examples/lamp.xml at 16x16,
gaussian: 2e-4 relative MSE, most of it around the small bright lamp), so references are made
with ``scalar_rgb``.

Mitchell-Netravali and Lanczos have negative lobes: a pixel's weights can sum to a negative
number or to nearly zero, and pixel values can be negative, as in Mitsuba (its film divides by
any non-zero weight sum: ``tracer.shared.resolve``).

Limits (Mitsuba has none; ours bound a work unit's time and memory, because every pixel splats
into (2 * ceil(radius - 1/2) + 1)^2 neighbours, a loop unrolled into the compiled program):
a filter's radius is at most ``MAX_RADIUS`` pixels (gaussian: ``stddev`` at most 2; lanczos:
``lobes`` at most 8) and at least ``MIN_RADIUS``; mitchell's B and C lie in [-``MAX_BC``, ``MAX_BC``].
"""
import dataclasses
import math
import numbers

import numpy as np
from numpy.typing import ArrayLike

from tracer.kinds import FilterKind
from tracer.shared import FILTERS

__all__ = ["Filter", "make_filter", "evaluate", "RESOLUTION", "MAX_RADIUS", "MIN_RADIUS", "MAX_BC"]

RESOLUTION = 31       # Mitsuba's MI_FILTER_RESOLUTION: table bins over [0, radius)
MAX_RADIUS = 8.0      # pixels: a pixel's samples reach at most 8 neighbours on each side
MIN_RADIUS = 1e-3     # pixels: zero divides by zero, and a near-zero radius overflows 31 / radius in float32
MAX_BC = 10.0         # |B|, |C| of mitchell: the paper's useful region is [0, 1]^2


@dataclasses.dataclass(frozen=True)
class Filter:
    """A reconstruction filter as the film splats it (hashable: it is static in ``tracer.film.Film``)."""

    kind: int              # FilterKind
    radius: float          # support, pixels
    stddev: float = 0.0    # gaussian
    b: float = 0.0         # mitchell / catmullrom (B, C) = (0, 1/2)
    c: float = 0.0
    table: tuple[float, ...] = ()    # TABULATED kinds: RESOLUTION + 1 float32 values of eval_discretized

    @property
    def margin(self) -> int:
        """Pixels on each side of a pixel reached by its samples' splats."""
        return max(0, math.ceil(self.radius - 0.5))


def _check(name: str, value: float, lo: float, hi: float) -> float:
    if not (isinstance(value, numbers.Real) and math.isfinite(value) and lo <= value <= hi):
        raise ValueError(f"'{name}' must be a finite number in [{lo:g}, {hi:g}], got {value!r}")
    return float(value)


def make_filter(name: str = "gaussian", **params: float) -> Filter:
    """The filter Mitsuba's ``<rfilter type=name>`` makes; ``params`` as in its XML.

    Raises ``ValueError`` naming the parameter that is unknown, not finite or out of its limits.
    """
    known = {"box": (), "tent": ("radius",), "gaussian": ("stddev",), "mitchell": ("B", "C"), "catmullrom": (),
             "lanczos": ("lobes",)}
    if name not in known:
        raise ValueError(f"unknown reconstruction filter {name!r} (expected {', '.join(FILTERS)})")
    extra = sorted(set(params) - set(known[name]))
    if extra:
        raise ValueError(f"rfilter '{name}' has no parameter '{extra[0]}'")
    if name == "gaussian":
        stddev = _check("stddev", params.get("stddev", 0.5), MIN_RADIUS / 4, MAX_RADIUS / 4)
        return Filter(FilterKind.GAUSSIAN, 4.0 * stddev, stddev=stddev)
    if name == "lanczos":
        lobes = params.get("lobes", 3)
        if not isinstance(lobes, int) or isinstance(lobes, bool) or not 1 <= lobes <= MAX_RADIUS:
            raise ValueError(f"'lobes' must be a whole number in [1, {MAX_RADIUS:g}], got {lobes!r}")
        return _tabulated(FilterKind.LANCZOS, float(lobes))
    if name == "box":
        return Filter(FilterKind.BOX, 0.5)  # Mitsuba 3's box has no radius parameter
    if name == "tent":
        return Filter(FilterKind.TENT, _check("radius", params.get("radius", 1.0), MIN_RADIUS, MAX_RADIUS))
    if name == "catmullrom":
        return _tabulated(FilterKind.CATMULLROM, 2.0, 0.0, 0.5)
    b, c = (_check(p, params.get(p, 1 / 3), -MAX_BC, MAX_BC) for p in "BC")
    return _tabulated(FilterKind.MITCHELL, 2.0, b, c)


def _tabulated(kind: int, radius: float, b: float = 0.0, c: float = 0.0) -> Filter:
    f = Filter(kind, radius, b=float(np.float32(b)), c=float(np.float32(c)))
    # Mitsuba's init_discretization, in float32: entry i at (radius * i) / RESOLUTION.
    r = np.float32(radius)
    x = (r * np.arange(RESOLUTION, dtype=np.float32)) / np.float32(RESOLUTION)
    table = np.append(evaluate(f, x), np.float32(0.0))
    return dataclasses.replace(f, table=tuple(float(v) for v in table))


def evaluate(f: Filter, x: ArrayLike) -> np.ndarray:
    """Mitsuba's ``eval(x)`` of a tabulated filter at offsets x (numpy float32), to the bit.

    Mitsuba 3.9.1's scalar variant evaluates mitchell's cubics with fused multiply-adds
    (``dr::fmadd``), and catmullrom's plain expression as its compiler contracted it; lanczos
    through Dr.Jit's sine (Cephes's polynomial with fused multiply-adds). ``_fma`` rounds once to
    float64, then to float32: exact for the products of two float32 values.
    """
    x = np.abs(np.asarray(x, np.float32))
    if f.kind in (FilterKind.MITCHELL, FilterKind.CATMULLROM):
        return _cubic(f, x)
    if f.kind == FilterKind.LANCZOS:
        r = np.float32(f.radius)
        x1 = np.float32(np.pi) * x
        x2 = x1 / r
        with np.errstate(invalid="ignore", divide="ignore"):
            value = (_sin(x1) * _sin(x2)) / (x1 * x2)
        return np.where(x < np.float32(2.0**-24), np.float32(1), np.where(x > r, np.float32(0), value))
    raise ValueError(f"filter kind {f.kind} is evaluated in closed form by tracer.film, not tabulated")


def _fma(a, b, c):
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def _cubic(f, x):
    """Mitchell-Netravali's piecewise cubic (src/rfilters/mitchell.cpp, catmullrom.cpp)."""
    b, c = np.float32(f.b), np.float32(f.c)
    a3, a2, a0 = 12 - 9 * b - 6 * c, -18 + 12 * b + 6 * c, 6 - 2 * b
    b3, b2, b1, b0 = -b - 6 * c, 6 * b + 30 * c, -12 * b - 48 * c, 8 * b + 24 * c
    x2 = x * x
    x3 = x2 * x
    if f.kind == FilterKind.MITCHELL:
        near = _fma(a3, x3, _fma(a2, x2, a0))
        far = _fma(b3, x3, _fma(b2, x2, _fma(b1, x, b0)))
    else:  # a3 * x3 + a2 * x2 + a0, contracted
        near = _fma(a3, x3, a2 * x2) + a0
        far = _fma(b1, x, _fma(b3, x3, b2 * x2)) + b0
    value = np.float32(1 / 6) * np.where(x < 1, near, far)
    return np.where(x < 2, value, np.float32(0))


def _sin(x):
    """Dr.Jit's single-precision sine (drjit/math.h, ``detail::sincos``) for float32 x >= 0."""
    j = (x * np.float32(1.2732395447351626862)).astype(np.int32)  # octant, rounded up to even
    j = (j + 1) & ~1
    y = j.astype(np.float32)
    y = ((x - y * np.float32(0.78515625)) - y * np.float32(2.4187564849853515625e-4)) \
        - y * np.float32(3.77489497744594108e-8)
    z = y * y
    s = _fma(z * z, np.float32(-1.9515295891e-4), _fma(z, np.float32(8.3321608736e-3), np.float32(-1.6666654611e-1)))
    c = _fma(z * z, np.float32(2.443315711809948e-5), _fma(z, np.float32(-1.388731625493765e-3),
                                                           np.float32(4.166664568298827e-2)))
    s = _fma(s * z, y, y)
    c = _fma(c * z, z, _fma(z, np.float32(-0.5), np.float32(1)))
    value = np.where((j & 2) == 0, s, c)
    return np.where((j & 4) != 0, -value, value)
