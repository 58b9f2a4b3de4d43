"""Host-side construction of the material table from parsed Mitsuba XML ``<bsdf>`` nodes.

Parameters, defaults and checks follow Mitsuba 3's plugin constructors; the load-time
precomputations (IOR lookups, conductor presets, the plastics' diffuse Fresnel factors,
sampling weights and rough transmittance tables) happen here in numpy.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from tracer.bsdfs import precompute
from tracer.bsdfs.fresnel import diffuse_reflectance
from tracer.bsdfs.layers import Layers
from tracer.bsdfs.perturb import Perturbations
from tracer.bsdfs.table import (PRINCIPLED_FEATURES, PRINCIPLED_TEXTURES, TEXTURE_READS, TRANSMITTANCE_RES, Materials,
                                Principled, Rate)
from tracer.bsdfs.tables_data import CONDUCTORS, IOR
from tracer.constants import LUMINANCE_WEIGHTS
from tracer.errors import SceneError
from tracer.kinds import BsdfKind, Microfacet, Perturbation, TextureKind
from tracer.table_rows import column, stacked

if TYPE_CHECKING:
    from tracer.io.xml import PluginNode
    from tracer.textures import Textures

__all__ = ["MaterialTableBuilder", "MaterialRow", "PrincipledRow", "lookup_ior", "conductor_ior", "has_transmission"]

# add_texture(value): the texture id of a nested texture plugin, an RGB triple or a float.
AddTexture = Callable[["PluginNode | ArrayLike | float"], int]


def lookup_ior(name: str, where: str | None = None) -> np.float32:
    """Mitsuba's named dielectric IOR (case-insensitive), as a float32."""
    key = str(name).lower()
    if key not in IOR:
        raise SceneError(f"unknown IOR name '{name}'; valid names: {', '.join(IOR)}", where)
    return np.float32(IOR[key])


def conductor_ior(material: str, where: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(eta, k) RGB float32 arrays of a Mitsuba conductor preset."""
    if material not in CONDUCTORS:
        raise SceneError(f"unknown conductor material '{material}'; valid names: {', '.join(CONDUCTORS)}", where)
    eta, k = CONDUCTORS[material]
    return np.array(eta, np.float32), np.array(k, np.float32)


def _ones3():
    return np.ones(3, np.float32)


def _zeros3():
    return np.zeros(3, np.float32)


def _no_transmittance():
    return np.zeros(TRANSMITTANCE_RES, np.float32)


def _no_rates():
    return np.zeros(Rate.COUNT, np.float32)


@dataclasses.dataclass(frozen=True)
class PrincipledRow:
    """The ``Principled`` entries of one principled or principledthin material: texture ids (0 where
    the kind reads none), the sampling rates and Mitsuba's ``m_has_*`` flags."""

    roughness: int = 0
    anisotropic: int = 0
    metallic: int = 0
    spec_trans: int = 0
    spec_tint: int = 0
    sheen: int = 0
    sheen_tint: int = 0
    flatness: int = 0
    clearcoat: int = 0
    clearcoat_gloss: int = 0
    diff_trans: int = 0
    eta: int = 0
    rates: np.ndarray = dataclasses.field(default_factory=_no_rates)  # (Rate.COUNT,) float32
    features: frozenset[str] = frozenset()  # the PRINCIPLED_FEATURES whose flag is set

    @property
    def has_spec_trans(self) -> bool:
        return "spec_trans" in self.features


@dataclasses.dataclass(frozen=True)
class MaterialRow:
    """One material, a column entry of each ``Materials`` field; texture fields hold texture ids
    (0, the first texture, where the kind reads none)."""

    kind: int                          # a BsdfKind
    reflectance: int = 0               # texture ids
    specular_reflectance: int = 0
    specular_transmittance: int = 0
    alpha_u: int = 0
    alpha_v: int = 0
    eta: np.ndarray = dataclasses.field(default_factory=_ones3)   # (3,) float32 relative IOR
    k: np.ndarray = dataclasses.field(default_factory=_zeros3)    # (3,) float32 conductor absorption
    distribution: int = Microfacet.BECKMANN
    sample_visible: bool = True
    nonlinear: bool = False
    specular_weight: float = 0.0       # plastics: from ``means`` once the textures are known
    internal_reflectance: float = 0.0
    transmittance: np.ndarray = dataclasses.field(default_factory=_no_transmittance)  # (TRANSMITTANCE_RES,)
    means: tuple[int, int] | None = None  # plastics: the (diffuse, specular) texture ids to weight by
    principled: PrincipledRow | None = None  # the principled kinds' other parameters
    perturbation: PerturbRow | None = None   # a normalmap or bumpmap above the leaf


class PerturbRow(NamedTuple):
    """The ``Perturbations`` entries of a leaf under a ``normalmap`` or ``bumpmap``."""

    kind: int            # a Perturbation
    texture: int         # texture id: the normal map, or the height (a bitmap)
    scale: float         # bumpmap's gradient scale (1 for normalmap)
    flip_invalid: bool   # Mitsuba's flip_invalid_normals
    shadowing: bool      # Mitsuba's use_shadowing_function


class _Reader:
    """Typed access to one ``<bsdf>`` node, with Mitsuba's defaults and errors."""

    def __init__(self, node: PluginNode, add_texture: AddTexture, known_means: dict[int, float],
                 sources: dict[tuple[int, str], int] | None = None):
        self.node, self.add_texture, self.known_means = node, add_texture, known_means
        self.sources = {} if sources is None else sources  # (id(node), parameter) -> texture id

    def _texture(self, name, value):
        """The texture id of parameter ``name`` given as ``value`` (a nested plugin or a constant),
        recorded for the parameter names (``tracer.io.parameter_names``)."""
        tid = self.add_texture(value)
        self.sources[id(self.node), name] = tid
        return tid

    def error(self, message):
        return SceneError(f"bsdf '{self.node.type}': {message}", self.node.source)

    def spectrum(self, name, default):
        """Texture id of an RGB parameter: a nested texture or a value (recording its mean)."""
        child = self.node.child(name)
        if child is not None:
            return self._texture(name, child)
        value = np.broadcast_to(np.asarray(self.node.get_rgb(name, np.full(3, default)), np.float64), (3,))
        tid = self._texture(name, value)
        self.known_means[tid] = float(np.mean(value))
        return tid

    def float_texture(self, name, default):
        """Texture id of a float-valued parameter (Mitsuba's ``eval_1``): a nested texture, a float, or
        an RGB value as the gray of its mean (what Mitsuba's rgb texture gives)."""
        child = self.node.child(name)
        if child is not None:
            return self._texture(name, child)
        value = self.node.get_rgb(name, np.full(3, default))
        return self._texture(name, float(value[0] if np.all(value == value[0]) else np.mean(value)))

    def scalar(self, name, default):
        child = self.node.child(name)
        if child is not None:
            return self._texture(name, child)
        return self._texture(name, float(self.node.get_float(name, default)))

    def flag(self, name):
        """Mitsuba's ``get_flag`` of the principled BSDFs: the parameter is given, and not as a float
        equal to zero (a texture or an RGB value sets it, whatever its value)."""
        if not self.node.has(name):
            return False
        if self.node.child(name) is not None:
            return True
        try:
            return self.node.get_float(name, 0.0) != 0.0
        except (SceneError, TypeError, ValueError):
            return True

    def rgb(self, name, default):
        if self.node.child(name) is not None:
            raise self.error(f"'{name}' cannot be a texture here (only constant values are supported)")
        return np.broadcast_to(np.asarray(self.node.get_rgb(name, np.full(3, default)), np.float32), (3,)).copy()

    def ior(self, name, default):
        """int_ior / ext_ior: a float or a name from Mitsuba's IOR table."""
        if not self.node.has(name):
            return lookup_ior(default)
        try:
            return np.float32(self.node.get_float(name, 0.0))
        except (SceneError, TypeError, ValueError):
            return lookup_ior(self.node.get_string(name, default), self.node.source)

    def eta(self, check_distinct=False, default="bk7"):
        int_ior, ext_ior = self.ior("int_ior", default), self.ior("ext_ior", "air")
        if int_ior < 0 or ext_ior < 0 or (check_distinct and int_ior == ext_ior):
            raise self.error("the interior and exterior indices of refraction must be positive"
                             + (" and differ" if check_distinct else ""))
        return np.float32(int_ior / ext_ior)

    def distribution(self):
        name = self.node.get_string("distribution", "beckmann").lower()
        if name not in ("beckmann", "ggx"):
            raise self.error(f"invalid distribution '{name}', must be 'beckmann' or 'ggx'")
        return Microfacet.GGX if name == "ggx" else Microfacet.BECKMANN

    def alphas(self):
        """(alpha_u, alpha_v) texture ids: 'alpha' (default 0.1) or both 'alpha_u' and 'alpha_v'."""
        has = {n: self.node.has(n) for n in ("alpha", "alpha_u", "alpha_v")}
        if has["alpha_u"] or has["alpha_v"]:
            if not (has["alpha_u"] and has["alpha_v"]):
                raise self.error("both 'alpha_u' and 'alpha_v' must be specified")
            if has["alpha"]:
                raise self.error("specify either 'alpha' or 'alpha_u'/'alpha_v'")
            return self.scalar("alpha_u", 0.1), self.scalar("alpha_v", 0.1)
        alpha = self.scalar("alpha", 0.1)
        return alpha, alpha

    def microfacet(self):
        """The microfacet fields of a ``MaterialRow``, as keyword arguments."""
        au, av = self.alphas()
        return dict(alpha_u=au, alpha_v=av, distribution=self.distribution(),
                    sample_visible=bool(self.node.get_bool("sample_visible", True)))


def _diffuse(r):
    return MaterialRow(BsdfKind.DIFFUSE, reflectance=r.spectrum("reflectance", 0.5))


def _conductor(r, rough=False):
    material = r.node.get_string("material", "none")
    if r.node.has("eta") or material == "none":
        if material != "none":
            raise r.error("specify either (eta, k) or material, not both")
        eta, k = r.rgb("eta", 0.0), r.rgb("k", 1.0)
    else:
        eta, k = conductor_ior(material, r.node.source)
    row = MaterialRow(BsdfKind.ROUGHCONDUCTOR if rough else BsdfKind.CONDUCTOR, eta=eta, k=k,
                      specular_reflectance=r.spectrum("specular_reflectance", 1.0))
    if rough:
        row = dataclasses.replace(row, **r.microfacet())
    return row


def _dielectric(r, kind):
    eta = r.eta(check_distinct=kind == BsdfKind.ROUGHDIELECTRIC)
    row = MaterialRow(kind, eta=np.full(3, eta, np.float32),
                      specular_reflectance=r.spectrum("specular_reflectance", 1.0),
                      specular_transmittance=r.spectrum("specular_transmittance", 1.0))
    if kind == BsdfKind.ROUGHDIELECTRIC:
        row = dataclasses.replace(row, **r.microfacet())
    return row


def _plastic(r, rough=False):
    int_ior, ext_ior = r.ior("int_ior", "polypropylene"), r.ior("ext_ior", "air")
    if int_ior < 0 or ext_ior < 0 or (rough and int_ior == ext_ior):
        raise r.error("the interior and exterior indices of refraction must be positive"
                      + (" and differ" if rough else ""))
    eta = np.float32(int_ior / ext_ior)
    diffuse, specular = r.spectrum("diffuse_reflectance", 0.5), r.spectrum("specular_reflectance", 1.0)
    row = MaterialRow(BsdfKind.ROUGHPLASTIC if rough else BsdfKind.PLASTIC, eta=np.full(3, eta, np.float32),
                      reflectance=diffuse, specular_reflectance=specular,
                      nonlinear=bool(r.node.get_bool("nonlinear", False)), means=(diffuse, specular))
    if not rough:
        return dataclasses.replace(row, internal_reflectance=diffuse_reflectance(1.0 / np.float64(eta)))
    has = {n: r.node.has(n) for n in ("alpha", "alpha_u", "alpha_v")}
    if any(r.node.child(n) is not None for n in has):
        raise r.error("'alpha' must be a float (Mitsuba's roughplastic takes no roughness texture)")
    if has["alpha"]:
        if has["alpha_u"] or has["alpha_v"]:
            raise r.error("specify either 'alpha' or 'alpha_u'/'alpha_v'")
        alpha = np.float32(r.node.get_float("alpha", 0.1))
    elif has["alpha_u"] or has["alpha_v"]:
        if not (has["alpha_u"] and has["alpha_v"]):
            raise r.error("both 'alpha_u' and 'alpha_v' must be specified")
        alpha = np.float32(r.node.get_float("alpha_u", 0.1))
        if max(alpha, 1e-4) != max(np.float32(r.node.get_float("alpha_v", 0.1)), 1e-4):
            raise r.error("anisotropic roughness is not supported (as in Mitsuba)")
    else:
        alpha = np.float32(0.1)
    alpha = np.float32(max(alpha, np.float32(1e-4)))
    distribution = r.distribution()
    table, internal = precompute.rough_transmittance(alpha, eta, distribution == Microfacet.GGX)
    alpha_tid = r.add_texture(float(alpha))
    return dataclasses.replace(row, alpha_u=alpha_tid, alpha_v=alpha_tid, distribution=distribution,
                               sample_visible=bool(r.node.get_bool("sample_visible", True)),
                               internal_reflectance=internal, transmittance=table.astype(np.float32))


def _principled_row(r, names, rates):
    """The ``PrincipledRow`` of a principled kind: its float textures ``names`` (0 by default) and
    roughness, the sampling rates named by ``rates`` (in ``Rate`` order, 1 by default), its flags."""
    features = frozenset(f for f in PRINCIPLED_FEATURES if f in names and r.flag(f))
    row = {name: r.float_texture(name, 0.0) for name in names}
    values = np.zeros(Rate.COUNT, np.float32)
    values[:len(rates)] = [r.node.get_float(name, 1.0) for name in rates]
    return PrincipledRow(roughness=r.float_texture("roughness", 0.5), **row, rates=values, features=features)


# The float textures each principled kind reads besides roughness (its other ids stay 0).
_PRINCIPLED_FLOATS = ("anisotropic", "metallic", "spec_trans", "spec_tint", "sheen", "sheen_tint", "flatness",
                      "clearcoat", "clearcoat_gloss")
_PRINCIPLEDTHIN_FLOATS = ("anisotropic", "spec_trans", "spec_tint", "sheen", "sheen_tint", "flatness", "diff_trans")
_PRINCIPLED_READS = {BsdfKind.PRINCIPLED: ("roughness", *_PRINCIPLED_FLOATS),
                     BsdfKind.PRINCIPLEDTHIN: ("roughness", *_PRINCIPLEDTHIN_FLOATS, "eta")}


def _principled(r):
    """Mitsuba's ``principled``: its IOR from 'eta' or from 'specular' (not both)."""
    if r.node.has("eta") and r.node.has("specular"):
        raise r.error("specify either 'eta' or 'specular' (the same index of refraction), not both")
    extra = _principled_row(r, _PRINCIPLED_FLOATS,
                            ("main_specular_sampling_rate", "clearcoat_sampling_rate",
                             "diffuse_reflectance_sampling_rate"))
    one = np.float32(1.0)
    if r.node.has("eta"):
        eta = np.float32(r.node.get_float("eta"))
        if extra.has_spec_trans and eta == one:
            eta = np.float32(1.001)  # as Mitsuba: no transmission through an index-matched boundary
    else:
        specular = np.float32(r.node.get_float("specular", 0.5))
        if extra.has_spec_trans and specular == 0:
            specular = np.float32(1e-3)
        eta = np.float32(2.0) * (one / (one - np.sqrt(np.float32(0.08) * specular))) - one
    return MaterialRow(BsdfKind.PRINCIPLED, reflectance=r.spectrum("base_color", 0.5), eta=np.full(3, eta, np.float32),
                       principled=extra)


def _principledthin(r):
    """Mitsuba's ``principledthin``: a two-sided sheet, its IOR a texture."""
    extra = _principled_row(r, _PRINCIPLEDTHIN_FLOATS,
                            ("specular_reflectance_sampling_rate", "specular_transmittance_sampling_rate",
                             "diffuse_reflectance_sampling_rate", "diffuse_transmittance_sampling_rate"))
    extra = dataclasses.replace(extra, eta=r.float_texture("eta", 1.5))
    return MaterialRow(BsdfKind.PRINCIPLEDTHIN, reflectance=r.spectrum("base_color", 0.5), principled=extra)


def _pplastic(r):
    """Mitsuba's ``pplastic`` (tracer.bsdfs.pplastic): 'eta', or 'int_ior' / 'ext_ior'."""
    if r.node.has("eta"):
        if r.node.has("int_ior"):
            raise r.error("specify either 'eta' or 'int_ior' and 'ext_ior', not both")
        if r.node.child("eta") is not None:
            raise r.error("'eta' must be a float (a textured index of refraction is not supported)")
        eta = np.float32(r.node.get_float("eta"))
    else:
        eta = r.eta(check_distinct=True, default="polypropylene")
    diffuse, specular = r.spectrum("diffuse_reflectance", 0.5), r.spectrum("specular_reflectance", 1.0)
    return MaterialRow(BsdfKind.PPLASTIC, reflectance=diffuse, specular_reflectance=specular,
                       eta=np.full(3, eta, np.float32), means=(diffuse, specular), **r.microfacet())


def _polarizer(r):
    """Mitsuba's ``polarizer`` in RGB: a pass-through of half the light times 'transmittance'; its
    analyzer angle 'theta' and 'polarizing' change nothing without polarization."""
    r.node.mark_used(*(name for name in ("theta", "polarizing") if r.node.has(name)))
    return MaterialRow(BsdfKind.POLARIZER, specular_transmittance=r.spectrum("transmittance", 1.0))


def has_transmission(node: PluginNode) -> bool:
    """Whether Mitsuba's BSDF for the ``<bsdf>`` node has a transmission lobe (its ``twosided``
    refuses those): the dielectrics, principledthin, and principled with 'spec_trans'."""
    if node.type == "principled":
        return _Reader(node, lambda value: 0, {}).flag("spec_trans")
    if node.type in _PERTURBERS:
        return any(has_transmission(child) for child in node.children_of("bsdf"))
    return node.type in ("dielectric", "roughdielectric", "thindielectric", "principledthin", "polarizer")


_ADDERS = {
    "diffuse": _diffuse,
    "conductor": _conductor,
    "roughconductor": lambda r: _conductor(r, rough=True),
    "dielectric": lambda r: _dielectric(r, BsdfKind.DIELECTRIC),
    "roughdielectric": lambda r: _dielectric(r, BsdfKind.ROUGHDIELECTRIC),
    "thindielectric": lambda r: _dielectric(r, BsdfKind.THINDIELECTRIC),
    "plastic": _plastic,
    "roughplastic": lambda r: _plastic(r, rough=True),
    "principled": _principled,
    "principledthin": _principledthin,
    "pplastic": _pplastic,
    "polarizer": _polarizer,
}


def texture_mean(textures: Textures, tid: int) -> float:
    """Mitsuba's ``Texture::mean()`` in RGB mode: the channel average of a constant, the average of a
    checkerboard's two colors, the mean luminance of a bitmap."""
    kind = int(np.asarray(textures.kind)[tid])
    c0 = np.asarray(textures.color0)[:, tid].astype(np.float64)
    if kind == TextureKind.CHECKERBOARD:
        return 0.5 * (c0.mean() + np.asarray(textures.color1)[:, tid].astype(np.float64).mean())
    if kind == TextureKind.BITMAP:
        start = int(np.asarray(textures.offset)[tid])
        count = int(np.asarray(textures.width)[tid]) * int(np.asarray(textures.height)[tid])
        texels = np.asarray(textures.texels)[:, start:start + count].astype(np.float64)
        return float((np.array(LUMINANCE_WEIGHTS) @ texels).mean())
    return float(c0.mean())


class Slot(NamedTuple):
    """One leaf of a material seen from one side (tracer.bsdfs.layers)."""

    leaf: int                               # material id of a leaf row
    factors: tuple[tuple[int, bool], ...]   # (float texture id, take 1 - value)


class MaterialTableBuilder:
    """Host-side accumulator: ``add_side`` returns a material id; ``build()`` makes the table."""

    def __init__(self) -> None:
        self._rows: list[MaterialRow] = []
        self._known_means: dict[int, float] = {}  # texture id -> mean, for the constants added here
        # (id(node), perturbation) -> (node, kept so the id stays its, leaf row)
        self._leaves: dict[tuple, tuple[PluginNode, int]] = {}
        self._slots: dict[int, tuple[Slot, ...]] = {}  # composite row -> its slots
        self._black: int | None = None
        self._null: int | None = None
        self.parameter_textures: dict[tuple[int, str], int] = {}  # (id(node), parameter) -> texture id
        # (id(node), parameter) -> the (Materials field, row) cells that read it
        self.parameter_cells: dict[tuple[int, str], list[tuple[str, int]]] = {}

    def add_black(self) -> int:
        """The material of the back of one-sided BSDFs: black everywhere."""
        if self._black is None:
            self._black = self._append(MaterialRow(BsdfKind.BLACK))
        return self._black

    def _null_leaf(self) -> int:
        """The one row of Mitsuba's ``null``: a plugin of its own, and a mask's pass-through."""
        if self._null is None:
            self._null = self._append(MaterialRow(BsdfKind.NULL))
        return self._null

    def add(self, node: PluginNode, add_texture: AddTexture, perturbation: PerturbRow | None = None) -> int:
        """Material id of a leaf ``<bsdf>`` node (under a normal or bump map's ``perturbation``);
        nested textures go to ``add_texture``."""
        key = (id(node), perturbation)
        if key in self._leaves:
            return self._leaves[key][1]
        adder = _ADDERS.get(node.type)
        if adder is None:
            raise SceneError(f"unsupported bsdf type '{node.type}' (supported: "
                             f"{', '.join([*_ADDERS, *_COMPOSITES, *_PERTURBERS, 'null', 'twosided'])})",
                             node.source)
        made = adder(_Reader(node, add_texture, self._known_means, self.parameter_textures))
        row = self._append(dataclasses.replace(made, perturbation=perturbation))
        for (owner, name), tid in self.parameter_textures.items():
            if owner == id(node):  # the cells of the table that read the parameter (constants are shared)
                cells = [(f, row) for f in _PARAMETER_FIELDS.get(name, ()) if getattr(made, f) == tid]
                self.parameter_cells[owner, name] = self.parameter_cells.get((owner, name), []) + cells
        self._leaves[key] = (node, row)
        node.check_unused()
        return row

    def leaf_rows(self, node: PluginNode) -> list[int]:
        """The material rows made of the leaf ``<bsdf>`` ``node`` (one per normal or bump map over it)."""
        return [row for (key, _), (_, row) in self._leaves.items() if key == id(node)]

    def add_side(self, node: PluginNode, back: bool, add_texture: AddTexture) -> tuple[int, bool]:
        """(material id, mirror) of what a ray arriving on the front (or ``back``) of a surface
        with the bsdf ``node`` meets; mirror: the frame is mirrored there (a twosided material's
        back). Composite materials get a COMPOSITE row and their slots."""
        slots, mirror = self._resolve(node, back, add_texture)
        if len(slots) == 1 and not slots[0].factors:
            return slots[0].leaf, bool(mirror)
        row = self._append(MaterialRow(BsdfKind.COMPOSITE))
        self._slots[row] = slots
        return row, bool(mirror)

    def _resolve(self, node, back, add_texture, perturbation=None):
        """(slots, mirror) of one side of ``node`` (under a normal or bump map's ``perturbation``);
        mirror None where no leaf depends on it."""
        reader = _Reader(node, add_texture, self._known_means, self.parameter_textures)
        if node.type in _PERTURBERS:
            if perturbation is not None:
                raise reader.error("cannot be nested in another normalmap or bumpmap")
            perturbation, child = _perturbation(reader)
            slots, mirror = self._resolve(child, back, add_texture, perturbation)
            node.check_unused()
            return slots, mirror
        if node.type == "twosided" and perturbation is not None:
            raise reader.error("cannot be nested in a normalmap or bumpmap (put the twosided outside)")
        if node.type == "twosided":
            inner = node.children_of("bsdf")
            if not 1 <= len(inner) <= 2:
                raise reader.error(f"takes one or two nested bsdfs, got {len(inner)}")
            child = inner[-1] if back else inner[0]
            slots, _ = self._resolve(child, False, add_texture)
            if has_transmission(child) or any(self._rows[s.leaf].kind in _PASSING for s in slots):
                raise reader.error(f"cannot wrap '{child.type}': only materials without transmission can be nested")
            node.check_unused()
            return slots, True if back else None
        if node.type == "null":
            node.check_unused()
            return (Slot(self._null_leaf(), ()),), None
        if node.type in _COMPOSITES:
            return self._composite(node, reader, back, add_texture, perturbation)
        leaf = self.add(node, add_texture, perturbation)
        # On the back of a one-sided leaf wi is below: black. Under a normal or bump map that
        # flips invalid normals too (the perturbed wi stays below); without the flip it may not.
        if back and self._rows[leaf].kind not in _BOTH_SIDES and (perturbation is None or perturbation.flip_invalid):
            return (Slot(self.add_black(), ()),), None
        return (Slot(leaf, ()),), False

    def _composite(self, node, reader, back, add_texture, perturbation):
        children = node.children_of("bsdf")
        if node.type == "blendbsdf":
            if len(children) != 2:
                raise reader.error(f"needs two nested bsdfs, got {len(children)}")
            if not node.has("weight"):
                raise reader.error("needs a 'weight'")
            weight = reader.scalar("weight", 0.5)
            # The second child first: Mitsuba picks it for u <= weight, the first for u > weight.
            parts = [(self._resolve(child, back, add_texture, perturbation), (weight, complement))
                     for child, complement in ((children[1], False), (children[0], True))]
            slots = [s._replace(factors=(factor, *s.factors)) for (child_slots, _), factor in parts for s in child_slots]
            mirror = _combined_mirror(reader, [m for (_, m), _ in parts])
        else:  # mask
            if len(children) != 1:
                raise reader.error(f"needs one nested bsdf, got {len(children)}")
            opacity = reader.scalar("opacity", 0.5)
            child_slots, mirror = self._resolve(children[0], back, add_texture, perturbation)
            slots = [s._replace(factors=((opacity, False), *s.factors)) for s in child_slots]
            slots.append(Slot(self._null_leaf(), ((opacity, True),)))
        if len(slots) > MAX_SLOTS:
            raise reader.error(f"the material has more than {MAX_SLOTS} leaves")
        node.check_unused()
        return tuple(slots), mirror

    def _append(self, row):
        self._rows.append(row)
        return len(self._rows) - 1

    def _weighted(self, row, textures):
        """``row`` with a plastic's specular sampling weight, from its textures' means."""
        if row.means is None:
            return row
        d_mean, s_mean = (self._mean(t, textures) for t in row.means)
        return dataclasses.replace(row, specular_weight=s_mean / (d_mean + s_mean))

    def _mean(self, tid, textures):
        if tid in self._known_means:
            return self._known_means[tid]
        if textures is None:
            raise ValueError("a plastic material has a textured reflectance: pass the built Textures "
                             "table to MaterialTableBuilder.build(textures) for its sampling weight")
        return texture_mean(textures, tid)

    def build(self, textures: Textures | None = None) -> Materials:
        """The ``Materials`` table. ``textures`` (the scene's built ``tracer.textures.Textures``) is
        needed only when a plastic's reflectance is a nested texture (for its sampling weight)."""
        rows = [self._weighted(row, textures) for row in self._rows or [MaterialRow(BsdfKind.BLACK)]]
        rough = [r for r in rows if r.kind in BsdfKind.ROUGH]
        layers = self._layers(rows) if self._slots else None
        return Materials(
            kind=column(rows, "kind", np.int32), reflectance=column(rows, "reflectance", np.int32),
            specular_reflectance=column(rows, "specular_reflectance", np.int32),
            specular_transmittance=column(rows, "specular_transmittance", np.int32),
            alpha_u=column(rows, "alpha_u", np.int32), alpha_v=column(rows, "alpha_v", np.int32),
            eta=stacked(rows, "eta"), k=stacked(rows, "k"), distribution=column(rows, "distribution", np.int32),
            sample_visible=column(rows, "sample_visible", bool), nonlinear=column(rows, "nonlinear", bool),
            specular_weight=column(rows, "specular_weight", np.float32),
            internal_reflectance=column(rows, "internal_reflectance", np.float32),
            transmittance=stacked(rows, "transmittance"),
            kinds_present=tuple(sorted({r.kind for r in rows})),
            distributions_present=tuple(sorted({r.distribution for r in rough})),
            all_normals=any(not r.sample_visible for r in rough),
            layers=layers, textured=_textured_fields(rows, textures),
            principled=_principled_table(rows, textures), perturbation=_perturbation_table(rows),
        )

    def _layers(self, rows):
        """The ``Layers`` table: composite rows' slots; a leaf row is its own single slot."""
        slots = [self._slots.get(m, (Slot(m, ()),)) for m in range(len(rows))]
        n_slots = max(len(s) for s in slots)
        n_factors = max(1, max(len(slot.factors) for s in slots for slot in s))
        leaf = np.full((n_slots, len(rows)), -1, np.int32)
        factor = np.full((n_slots, n_factors, len(rows)), -1, np.int32)
        complement = np.zeros((n_slots, n_factors, len(rows)), bool)
        for m, material in enumerate(slots):
            for i, slot in enumerate(material):
                leaf[i, m] = slot.leaf
                for d, (tid, take_complement) in enumerate(slot.factors):
                    factor[i, d, m], complement[i, d, m] = tid, take_complement
        nondelta = [any(rows[s.leaf].kind in BsdfKind.WITH_NONDELTA_LOBE for s in material) for material in slots]
        j = jnp.asarray
        return Layers(leaf=j(leaf), factor=j(factor), complement=j(complement), nondelta=j(np.array(nondelta, bool)))


def _combined_mirror(reader, mirrors):
    """One mirror flag for a side whose leaves have ``mirrors`` (None: any)."""
    known = {m for m in mirrors if m is not None}
    if len(known) > 1:
        raise reader.error("mixes a twosided material's back with a one-sided transmissive one on one side; "
                           "this combination is not supported")
    return known.pop() if known else None


_COMPOSITES = ("blendbsdf", "mask")
_PERTURBERS = ("normalmap", "bumpmap")
# Leaves a ray may pass through: a twosided material cannot wrap them (as in Mitsuba).
_PASSING = (*BsdfKind.DIELECTRICS, *BsdfKind.PASS_THROUGH)
# Leaves that see both sides themselves (wi below the surface is inside): the same on the back.
_BOTH_SIDES = (*BsdfKind.DIELECTRICS, *BsdfKind.PRINCIPLEDS, BsdfKind.POLARIZER)
MAX_SLOTS = 64  # leaves of one composite material: each is evaluated for every light sample


# The ``Materials`` texture fields a leaf's Mitsuba parameter fills (tracer.io.parameter_names).
_PARAMETER_FIELDS = {"reflectance": ("reflectance",), "diffuse_reflectance": ("reflectance",),
                     "specular_reflectance": ("specular_reflectance",),
                     "specular_transmittance": ("specular_transmittance",), "alpha": ("alpha_u", "alpha_v"),
                     "alpha_u": ("alpha_u",), "alpha_v": ("alpha_v",)}


def _textured_fields(rows, textures):
    """``Materials.textured``: the (field, kind) pairs where a material of that kind reads a
    non-constant texture in that field (every pair that reads, unknown textures). A field a kind
    does not read holds texture 0, which may be any texture: it does not count."""
    if textures is None:
        return TEXTURE_READS
    kinds = np.asarray(textures.kind)
    return tuple((f, k) for f, k in TEXTURE_READS
                 if any(r.kind == k and kinds[getattr(r, f)] != TextureKind.CONSTANT for r in rows))


def _principled_table(rows, textures):
    """The ``Principled`` table, or None when no material is a principled kind."""
    own = [r.principled for r in rows if r.principled is not None]
    if not own:
        return None
    extras = [r.principled or PrincipledRow() for r in rows]
    ids = {name: column(extras, name, np.int32) for name in PRINCIPLED_TEXTURES}
    if textures is None:
        textured = PRINCIPLED_TEXTURES
    else:  # a field the row's kind does not read holds texture 0, whatever that is: it does not count
        kinds = np.asarray(textures.kind)
        reads = lambda r, f: f in _PRINCIPLED_READS.get(r.kind, PRINCIPLED_TEXTURES)
        textured = tuple(f for f in PRINCIPLED_TEXTURES
                         if any(reads(r, f) and kinds[getattr(r.principled, f)] != TextureKind.CONSTANT
                                for r in rows if r.principled is not None))
    return Principled(**ids, rates=stacked(extras, "rates"), has_spec_trans=column(extras, "has_spec_trans", bool),
                      features=tuple(f for f in PRINCIPLED_FEATURES if any(f in p.features for p in own)),
                      textured=textured)


def _perturbation(r):
    """(PerturbRow, the nested bsdf node) of a ``normalmap`` or ``bumpmap`` node, with Mitsuba's
    parameters and checks (a bump map's height needs a gradient: only bitmaps have one)."""
    node = r.node
    children = node.children_of("bsdf")
    if len(children) != 1:
        raise r.error(f"needs exactly one nested bsdf, got {len(children)}")
    flags = dict(flip_invalid=bool(node.get_bool("flip_invalid_normals", True)),
                 shadowing=bool(node.get_bool("use_shadowing_function", True)))
    if node.type == "normalmap":
        if not node.has("normalmap"):
            raise r.error("needs a 'normalmap' texture")
        return PerturbRow(Perturbation.NORMALMAP, r.add_texture(node.get_texture("normalmap")), 1.0, **flags), children[0]
    textures = node.children_of("texture")
    if len(textures) != 1:
        raise r.error(f"needs exactly one nested texture (the height), got {len(textures)}")
    if textures[0].type != "bitmap":
        raise r.error(f"the height texture must be a 'bitmap' (Mitsuba's '{textures[0].type}' has no gradient)")
    scale = float(node.get_float("scale", 1.0))
    return PerturbRow(Perturbation.BUMPMAP, r.add_texture(textures[0]), scale, **flags), children[0]


def _perturbation_table(rows):
    """The ``Perturbations`` table, or None when no leaf has a normal or bump map."""
    if all(r.perturbation is None for r in rows):
        return None
    none = PerturbRow(Perturbation.NONE, 0, 1.0, False, False)
    own = [r.perturbation or none for r in rows]
    j = jnp.asarray
    return Perturbations(kind=j(np.array([p.kind for p in own], np.int32)),
                         texture=j(np.array([p.texture for p in own], np.int32)),
                         scale=j(np.array([p.scale for p in own], np.float32)),
                         flip_invalid=j(np.array([p.flip_invalid for p in own], bool)),
                         shadowing=j(np.array([p.shadowing for p in own], bool)),
                         kinds_present=tuple(sorted({p.kind for p in own} - {Perturbation.NONE})))
