"""Textures: constant RGB, checkerboard, bitmap and mesh attribute, evaluated for batches of points.

All textures of a scene live in one ``Textures`` table; a material or emitter refers to a
texture by its integer id. Bitmaps are packed into one flat texel array so that any number of
images costs the same compiled program shape. Evaluation follows Mitsuba 3's ``bitmap`` and
``checkerboard`` plugins: uv is mapped by ``to_uv`` first, bitmaps are sampled at texel centers
``uv * res - 0.5`` (v = 0 is the first row), nearest or bilinear, with repeat, mirror or clamp.
A ``mesh_attribute`` texture (Mitsuba's ``mesh_attribute.cpp``) reads an attribute of the hit
mesh, interpolated by ``geometry.surface_interaction`` (``TexturePoint.attributes``), times its
``scale``; an attribute of width 1 is gray.
"""
import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from tracer import lanes
from tracer import vecmath as vm
from tracer.kinds import BitmapFilter, TextureKind, WrapMode
from tracer.pytree import pytree_dataclass, static
from tracer.table_rows import column, on_device, stacked

if TYPE_CHECKING:
    from tracer.shapes.geometry import AttributeSlot

__all__ = [
    "Textures", "TextureRow", "TextureTableBuilder", "TexturePoint", "texture_point", "eval_rgb", "eval_float",
    "eval_gradient",
]


@pytree_dataclass
class Textures:
    """K textures; vectors are stored components-first, (3, K)."""

    kind: jnp.ndarray          # (K,) int32 a TextureKind
    color0: jnp.ndarray        # (3, K) the constant value, or the checkerboard's color0
    color1: jnp.ndarray        # (3, K) the checkerboard's color1
    to_uv: jnp.ndarray         # (2, 3, K) affine map applied to the surface uv
    offset: jnp.ndarray        # (K,) int32 first texel of the bitmap in ``texels``
    width: jnp.ndarray         # (K,) int32
    height: jnp.ndarray        # (K,) int32
    filter: jnp.ndarray        # (K,) int32 a BitmapFilter
    wrap: jnp.ndarray          # (K,) int32 a WrapMode
    texels: jnp.ndarray        # (3, M) linear RGB of all bitmaps, row-major, rows top to bottom
    channels: jnp.ndarray      # (3, K) int32 mesh attributes: the attribute channels of R, G, B
    kinds_present: tuple[int, ...] = static(default=())  # which kinds occur, so absent ones cost nothing
    # The bitmaps' wrap modes and filters that occur: a lookup computes only those.
    wraps_present: tuple[int, ...] = static(default=(WrapMode.REPEAT, WrapMode.MIRROR, WrapMode.CLAMP))
    filters_present: tuple[int, ...] = static(default=(BitmapFilter.NEAREST, BitmapFilter.BILINEAR))


def _black() -> np.ndarray:
    return np.zeros(3, np.float32)


def _identity_uv() -> np.ndarray:
    return np.array([[1, 0, 0], [0, 1, 0]], np.float32)


def _no_channels() -> np.ndarray:
    return np.zeros(3, np.int32)


@pytree_dataclass
class TexturePoint:
    """Where N textures are evaluated, when the scene has mesh attributes (else uv alone)."""

    uv: jnp.ndarray          # (2, N) surface uv
    attributes: jnp.ndarray  # (C, N) the geometry's attribute channels at the hits


def texture_point(uv: jnp.ndarray, attributes: jnp.ndarray | None = None) -> jnp.ndarray | TexturePoint:
    """What the textures of a surface read: uv (2, N), or a ``TexturePoint`` with the hits'
    attribute channels (C, N) when there are any (``SurfaceInteraction.attributes``)."""
    return uv if attributes is None else TexturePoint(uv=uv, attributes=attributes)


@dataclasses.dataclass(frozen=True)
class TextureRow:
    """One texture, a column entry of each ``Textures`` array field; the defaults are neutral
    (black, the identity uv map, no texels)."""

    kind: int                                                       # a TextureKind
    color0: np.ndarray = dataclasses.field(default_factory=_black)  # (3,) float32
    color1: np.ndarray = dataclasses.field(default_factory=_black)  # (3,) float32
    to_uv: np.ndarray = dataclasses.field(default_factory=_identity_uv)  # (2, 3) float32
    offset: int = 0                                                 # bitmaps: first texel, size, lookup
    width: int = 1
    height: int = 1
    filter: int = BitmapFilter.NEAREST
    wrap: int = WrapMode.REPEAT
    channels: np.ndarray = dataclasses.field(default_factory=_no_channels)  # (3,) int32 mesh attributes


class TextureTableBuilder:
    """Host-side accumulator: ``add_*`` returns a texture id; ``build()`` makes the table."""

    def __init__(self) -> None:
        self._rows: list[TextureRow] = []
        self._attributes: dict[int, str] = {}  # mesh_attribute texture id -> attribute name
        self._texels: list[np.ndarray] = []
        self._n_texels = 0
        self._constants: dict[tuple[float, ...], int] = {}

    def add_constant(self, rgb: ArrayLike) -> int:
        rgb = tuple(float(c) for c in np.broadcast_to(np.asarray(rgb, np.float64), (3,)))
        if rgb not in self._constants:
            self._constants[rgb] = self._add(TextureKind.CONSTANT, color0=rgb)
        return self._constants[rgb]

    def add_checkerboard(self, color0: ArrayLike, color1: ArrayLike, to_uv: ArrayLike | None = None) -> int:
        return self._add(TextureKind.CHECKERBOARD, color0=color0, color1=color1, to_uv=to_uv)

    def resolution(self, tid: int) -> tuple[int, int]:
        """(width, height) of texture ``tid``: a bitmap's pixels, (1, 1) otherwise (Mitsuba's
        ``Texture::resolution``)."""
        row = self._rows[tid]
        return row.width, row.height

    def add_bitmap(self, image: ArrayLike, filter: int = BitmapFilter.BILINEAR, wrap: int = WrapMode.REPEAT,
                   to_uv: ArrayLike | None = None) -> int:
        """image: (H, W, 3) linear float RGB (or (H, W) / (H, W, 1) gray)."""
        image = np.asarray(image, np.float32)
        if image.ndim == 2:
            image = image[:, :, None]
        if image.shape[2] == 1:
            image = np.repeat(image, 3, axis=2)
        image = image[:, :, :3]
        h, w, _ = image.shape
        tid = self._add(TextureKind.BITMAP, offset=self._n_texels, width=w, height=h, filter=filter, wrap=wrap,
                        to_uv=to_uv)
        self._texels.append(image.reshape(-1, 3))
        self._n_texels += h * w
        return tid

    def add_mesh_attribute(self, name: str, scale: float = 1.0) -> int:
        """Mitsuba's ``mesh_attribute``: attribute ``name`` ('vertex_*' or 'face_*') of the hit mesh,
        times ``scale``; its channels are assigned by ``build``."""
        tid = self._add(TextureKind.MESH_ATTRIBUTE, color0=(scale, scale, scale))
        self._attributes[tid] = name
        return tid

    @property
    def attribute_names(self) -> tuple[str, ...]:
        """The mesh attributes that textures read (for ``geometry.build_geometry``)."""
        return tuple(sorted(set(self._attributes.values())))

    def _add(self, kind, color0=(0, 0, 0), color1=(0, 0, 0), to_uv=None, **bitmap):
        """Append a row; ``to_uv`` may be a (2, 3), (3, 3) or (4, 4) affine map of uv, or None."""
        if to_uv is None:
            to_uv = _identity_uv()
        to_uv = np.asarray(to_uv, np.float32)
        if to_uv.shape == (4, 4) or to_uv.shape == (3, 3):
            to_uv = np.stack([to_uv[0, [0, 1, -1]], to_uv[1, [0, 1, -1]]])
        self._rows.append(TextureRow(kind, color0=np.broadcast_to(np.asarray(color0, np.float32), (3,)),
                                     color1=np.broadcast_to(np.asarray(color1, np.float32), (3,)),
                                     to_uv=to_uv, **bitmap))
        return len(self._rows) - 1

    def build(self, attribute_slots: Iterable["AttributeSlot"] = ()) -> Textures:
        """The table; ``attribute_slots``: the geometry's ``AttributeSlot``s, which hold every
        attribute a mesh_attribute texture reads."""
        if not self._rows:
            self.add_constant((0.0, 0.0, 0.0))
        slots = {slot.name: slot for slot in attribute_slots}
        rows = list(self._rows)
        for tid, name in self._attributes.items():
            first, width = slots[name].first, slots[name].width
            channels = first + np.arange(3, dtype=np.int32) * (width > 1)  # R, G, B; one channel thrice
            rows[tid] = dataclasses.replace(rows[tid], channels=channels.astype(np.int32))
        texels = np.concatenate(self._texels, axis=0) if self._texels else np.zeros((1, 3), np.float32)
        bitmaps = [r for r in rows if r.kind == TextureKind.BITMAP]
        return Textures(
            kind=column(rows, "kind", np.int32),
            color0=stacked(rows, "color0"), color1=stacked(rows, "color1"), to_uv=stacked(rows, "to_uv"),
            offset=column(rows, "offset", np.int32), width=column(rows, "width", np.int32),
            height=column(rows, "height", np.int32), filter=column(rows, "filter", np.int32),
            wrap=column(rows, "wrap", np.int32),
            texels=on_device(texels.T.copy()),
            channels=on_device(np.stack([r.channels for r in rows], axis=1), np.int32),
            kinds_present=tuple(sorted({r.kind for r in rows})),
            wraps_present=tuple(sorted({r.wrap for r in bitmaps})),
            filters_present=tuple(sorted({r.filter for r in bitmaps})),
        )


def _mod(i, n):
    """i mod n in [0, n) for int32 i, n > 0. Through float32, exact for |i| < 2^24: XLA's
    integer division is a scalar instruction per element, this vectorizes (a bilinear lookup
    wraps ten coordinates twice)."""
    q = jnp.floor(i.astype(jnp.float32) / n.astype(jnp.float32)).astype(jnp.int32)
    r = i - q * n
    return jnp.where(r < 0, r + n, jnp.where(r >= n, r - n, r))


def wrap_index(i: jax.Array, n: jax.Array, mode: jax.Array | int, present: tuple[int, ...]) -> jax.Array:
    """Coordinate i wrapped into [0, n) by ``mode``; ``present`` (static): the modes that occur."""
    wrapped = []
    if WrapMode.REPEAT in present:
        wrapped.append((WrapMode.REPEAT, _mod(i, n)))
    if WrapMode.MIRROR in present:
        period = _mod(i, 2 * n)
        wrapped.append((WrapMode.MIRROR, jnp.where(period >= n, 2 * n - 1 - period, period)))
    if WrapMode.CLAMP in present:
        wrapped.append((WrapMode.CLAMP, jnp.clip(i, 0, n - 1)))
    result = wrapped[-1][1]
    for m, value in reversed(wrapped[:-1]):
        result = jnp.where(mode == m, value, result)
    return result


class _Texels:
    """Wrapped texel lookups of bitmaps ``tid`` (N,) at texel coordinates px, py (N,) = uv * res."""

    def __init__(self, textures, tid, uv):
        self.w, self.h = textures.width[tid], textures.height[tid]
        self.wrap, self.base, self.modes = textures.wrap[tid], textures.offset[tid], textures.wraps_present
        self.texels = textures.texels
        self.px = uv[0] * self.w.astype(jnp.float32)
        self.py = uv[1] * self.h.astype(jnp.float32)

    def fetch(self, x, y):
        """RGB (3, N) of the texels at integer coordinates (N,), wrapped."""
        x, y = wrap_index(x, self.w, self.wrap, self.modes), wrap_index(y, self.h, self.wrap, self.modes)
        return self.texels[:, self.base + y * self.w + x]

    def nearest(self):
        return self.fetch(jnp.floor(self.px).astype(jnp.int32), jnp.floor(self.py).astype(jnp.int32))

    def corners(self):
        """(tx, ty, c00, c10, c01, c11): the bilinear weights of the upper texels (Mitsuba's
        ``bilinear_weights`` w1, around the texel centers uv * res - 0.5) and the four texels."""
        fx, fy = self.px - 0.5, self.py - 0.5
        x0, y0 = jnp.floor(fx), jnp.floor(fy)
        tx, ty = fx - x0, fy - y0
        x0, y0 = x0.astype(jnp.int32), y0.astype(jnp.int32)
        return tx, ty, self.fetch(x0, y0), self.fetch(x0 + 1, y0), self.fetch(x0, y0 + 1), self.fetch(x0 + 1, y0 + 1)


def _bitmap(textures, tid, uv):
    texels = _Texels(textures, tid, uv)
    if BitmapFilter.BILINEAR not in textures.filters_present:
        return texels.nearest()
    tx, ty, c00, c10, c01, c11 = texels.corners()
    bilinear = (1 - tx) * (1 - ty) * c00 + tx * (1 - ty) * c10 + (1 - tx) * ty * c01 + tx * ty * c11
    if BitmapFilter.NEAREST not in textures.filters_present:
        return bilinear
    return jnp.where(textures.filter[tid] == BitmapFilter.BILINEAR, bilinear, texels.nearest())


def eval_gradient(textures: Textures, tid: jnp.ndarray, at: jnp.ndarray | TexturePoint) -> jnp.ndarray:
    """(d/du, d/dv) (2, N) of the scalar value of bitmaps ``tid`` (N,), as Mitsuba's
    ``bitmap::eval_1_grad``: the derivative of the bilinear interpolation of the texels'
    luminance, zero for a nearest-neighbour lookup. The uv map's linear part is applied as
    Mitsuba applies it (its transpose, then a scale by the resolution per axis). Only bitmaps
    have a gradient (Mitsuba's other textures raise); other ids give zero."""
    uv = at.uv if isinstance(at, TexturePoint) else at
    m = lanes.take(textures.to_uv, tid)
    uv = jnp.stack([m[0, 0] * uv[0] + m[0, 1] * uv[1] + m[0, 2], m[1, 0] * uv[0] + m[1, 1] * uv[1] + m[1, 2]])
    texels = _Texels(textures, tid, uv)
    tx, ty, *corners = texels.corners()
    f00, f10, f01, f11 = (vm.luminance(c) for c in corners)
    df_x = (1 - ty) * (f10 - f00) + ty * (f11 - f01)
    df_y = (1 - tx) * (f01 - f00) + tx * (f11 - f10)
    grad = jnp.stack([texels.w.astype(jnp.float32) * (m[0, 0] * df_x + m[1, 0] * df_y),
                      texels.h.astype(jnp.float32) * (m[0, 1] * df_x + m[1, 1] * df_y)])
    smooth = (textures.kind[tid] == TextureKind.BITMAP) & (textures.filter[tid] == BitmapFilter.BILINEAR)
    return jnp.where(smooth, grad, 0.0)


def _eval(textures, tid, at, checker_swapped, constant):
    if constant:
        return lanes.take(textures.color0, tid)
    uv, attributes = (at.uv, at.attributes) if isinstance(at, TexturePoint) else (at, None)
    kind = lanes.take(textures.kind, tid)
    m = lanes.take(textures.to_uv, tid)
    uv = jnp.stack([m[0, 0] * uv[0] + m[0, 1] * uv[1] + m[0, 2], m[1, 0] * uv[0] + m[1, 1] * uv[1] + m[1, 2]])
    c0 = lanes.take(textures.color0, tid)
    result = c0
    if TextureKind.CHECKERBOARD in textures.kinds_present:
        frac = uv - jnp.floor(uv)
        # Mitsuba: color0 where both or neither fractional coordinate exceeds one half.
        odd = (frac[0] > 0.5) != (frac[1] > 0.5)
        checker = vm.select(odd != checker_swapped, lanes.take(textures.color1, tid), c0)
        result = vm.select(kind == TextureKind.CHECKERBOARD, checker, result)
    if TextureKind.BITMAP in textures.kinds_present:
        result = vm.select(kind == TextureKind.BITMAP, _bitmap(textures, tid, uv), result)
        # Materialize the lookup: fused into each consumer, XLA would redo its gathers and index
        # arithmetic per use (a textured roughplastic's eval ran 20x slower).
        result = jax.lax.optimization_barrier(result)
    if TextureKind.MESH_ATTRIBUTE in textures.kinds_present and attributes is not None:
        value = jnp.take_along_axis(attributes, textures.channels[:, tid], axis=0) * c0
        result = vm.select(kind == TextureKind.MESH_ATTRIBUTE, value, result)
    return result


def eval_rgb(textures: Textures, tid: jnp.ndarray, at: jnp.ndarray | TexturePoint,
             constant: bool = False) -> jnp.ndarray:
    """RGB (3, N) of textures ``tid`` (N,) at surface uv (2, N), or at a ``TexturePoint`` (the
    only way to reach mesh attributes). ``constant`` (static): the caller knows every id is a
    constant texture, so only its value is read."""
    return _eval(textures, tid, at, checker_swapped=False, constant=constant)


def eval_float(textures: Textures, tid: jnp.ndarray, at: jnp.ndarray | TexturePoint, constant: bool = False,
               checker_mean: bool = False) -> jnp.ndarray:
    """Scalar (N,) texture values as Mitsuba's ``Texture::eval_1``: the luminance of the RGB value
    (a bitmap's, and a constant's: the value itself, to rounding, for the gray ones that float
    parameters give), except that its checkerboard swaps the two colors. ``checker_mean`` (static):
    a checkerboard gives its colors' channel mean, as Mitsuba's does (the colors' ``eval_1``); the
    principled kinds ask for it, the older ones read its luminance (the same for gray colors).
    (A mesh attribute of width 3 read as a float is its luminance here; Mitsuba refuses it.)"""
    rgb = _eval(textures, tid, at, checker_swapped=True, constant=constant)
    value = vm.luminance(rgb)
    if checker_mean and not constant and TextureKind.CHECKERBOARD in textures.kinds_present:
        value = jnp.where(textures.kind[tid] == TextureKind.CHECKERBOARD, (rgb[0] + rgb[1] + rgb[2]) / 3.0, value)
    return value
