"""Mitsuba 3's parameter keys for a loaded scene (host only): which leaves hold each key's value.

Mitsuba's ``mi.traverse`` names an object by its ``id`` where it is defined at the top of the file,
and a nested one by the path from there (``light.emitter.radiance.value``, ``mat.brdf_0.
reflectance.value``, ``floor.bsdf.reflectance.color1.value``); an object without either is
``object_<address>``, which no other process can know, so it gets no key here. Its loader first
merges plugins (other than shapes and emitters) whose properties are equal into one object
(``transform_merge_equivalent``, ``tracer.io.shape_order.signature``): the first one met keeps
its name, and its key then drives the rows of every copy. Checked against ``mi.traverse`` of
Mitsuba 3.9.1 (tests/tracer/test_parameters.py).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from tracer import scene_parameters as P
from tracer.io.shape_order import signature

if TYPE_CHECKING:
    from tracer.emitters.table import Emitters
    from tracer.io.plugin_node import PluginNode
    from tracer.textures import Textures

__all__ = ["Sources", "name_parameters"]


class Sources(NamedTuple):
    """What the scene's builders made of each plugin node (keyed by ``id(node)``)."""

    bsdf_textures: dict[tuple[int, str], int]  # (bsdf node, parameter) -> texture id
    bsdf_cells: dict[tuple[int, str], list[tuple[str, int]]]  # (bsdf node, parameter) -> (Materials field, row)
    leaf_rows: Callable[[PluginNode], list[int]]  # bsdf node -> its material rows
    node_textures: dict[int, int]                # texture node -> texture id
    bitmap_channels: dict[int, int]              # bitmap texture id -> its file's channels
    emitter_rows: dict[int, int]                 # emitter node -> emitter row


# What Mitsuba names its BSDF parameters that we bake at load, and why they cannot follow.
_BAKED = {
    "roughplastic": {"alpha": "roughplastic's roughness is baked into its rough transmittance table at load",
                     "eta": "roughplastic's index of refraction is baked into its rough transmittance table at load"},
    "plastic": {"eta": "plastic's index of refraction is baked into its internal reflectance at load "
                       "(Mitsuba does not differentiate it either)"},
    "dielectric": {"eta": "the index of refraction is fixed at load (Mitsuba does not differentiate it either)"},
    "thindielectric": {"eta": "the index of refraction is fixed at load (Mitsuba does not differentiate it either)"},
    "roughdielectric": {"eta": "a dielectric's index of refraction is not differentiated here"},
}
# Parameters Mitsuba's traversal lists when the file leaves them at their default (others only when given).
_TRAVERSED_DEFAULTS = {"diffuse": ("reflectance",), "conductor": ("specular_reflectance",)}
_GEOMETRY = "shape geometry is not differentiable here (that needs visibility-discontinuity terms)"
_DEFAULT_BSDF = ("a shape without a bsdf shares one default material with the others here; give it a bsdf "
                 "to differentiate it")
_RADIANCE_NAMES = {"area": "radiance", "constant": "radiance", "point": "intensity", "spot": "intensity",
                   "directional": "irradiance"}


def _channels(node: PluginNode, name: str) -> int:
    """3 for a value given as a colour (Mitsuba's Color3f), 1 for a float or a default (Float)."""
    kind = node.kind_of(name)
    if kind is None:
        child = dict((n, c) for n, c in node.named_children() if n is not None).get(name)
        return 3 if child is not None and child.type not in ("uniform",) else 1
    return 3 if kind in ("rgb", "spectrum") and np.ndim(node.props[name]) > 0 else 1


def _edge(parent: PluginNode, name: str | None, child: PluginNode, index: int) -> str | None:
    """The name Mitsuba's traversal gives ``child`` under ``parent`` (None: not followed here)."""
    if name is not None:
        return name
    if parent.category == "shape" and child.category in ("bsdf", "emitter"):
        return child.category
    if parent.type == "twosided":
        return f"brdf_{index}"
    if parent.type == "blendbsdf":
        return f"bsdf_{index}"
    return None


class _Namer:
    def __init__(self, sources: Sources, textures: Textures, emitters: Emitters):
        self.sources, self.textures, self.emitters = sources, textures, emitters
        self.slots: dict[str, P.Slot] = {}
        self.visited: set[int] = set()
        self.claimed: dict[tuple, str | None] = {}

    def add(self, key, shape, *targets, refused="", scale=1.0):
        old = self.slots.get(key)
        if old is not None and old.shape == shape:  # a merged copy: one key, the rows of both
            targets = tuple(dict.fromkeys((*old.targets, *targets)))
        self.slots[key] = P.Slot(key, shape, tuple(targets), refused, scale)

    def visit(self, node: PluginNode, prefix: str | None, readers: tuple = ()) -> None:
        if id(node) in self.visited:
            return
        self.visited.add(id(node))
        if node.category in ("bsdf", "texture"):
            prefix = self.claimed.setdefault(signature(node), prefix)  # merged: the first copy's name
        if prefix is not None:
            if node.category == "texture":
                self._texture(node, prefix, readers)
            else:
                {"bsdf": self._bsdf, "emitter": self._emitter,
                 "shape": self._shape}.get(node.category, lambda n, p: None)(node, prefix)
        unnamed = 0
        for name, child in node.named_children():
            edge = _edge(node, name, child, unnamed)
            unnamed += name is None and child.category == "bsdf"
            cells = tuple(self.sources.bsdf_cells.get((id(node), name), ())) if name and node.category == "bsdf" else ()
            self.visit(child, f"{prefix}.{edge}" if prefix is not None and edge is not None else None, cells)

    def _bsdf(self, node, prefix):
        named = {n for n, c in node.named_children() if n is not None and c.category == "texture"}
        for (owner, name), tid in self.sources.bsdf_textures.items():
            given = node.has(name) or name in _TRAVERSED_DEFAULTS.get(node.type, ())
            if owner == id(node) and name not in named and given:
                cells = self.sources.bsdf_cells.get((owner, name), [])
                key, shape = f"{prefix}.{name}.value", (_channels(node, name),)
                if cells:
                    self.add(key, shape, *(P.Target(P.MATERIAL_TEXTURE, m, field=f) for f, m in cells))
                else:
                    self.add(key, shape, refused=f"'{node.type}' parameter '{name}' is not differentiable here")
        rows = self.sources.leaf_rows(node)
        if node.type in ("conductor", "roughconductor") and rows:
            preset = node.has("material") and not node.has("eta")
            for name, leaf in (("eta", P.MATERIAL_ETA), ("k", P.MATERIAL_K)):
                shape = (3,) if preset else (_channels(node, name),)
                self.add(f"{prefix}.{name}.value", shape, *(P.Target(leaf, m) for m in rows))
        for name, why in _BAKED.get(node.type, {}).items():
            self.add(f"{prefix}.{name}", (1,), refused=why)

    def _texture(self, node, prefix, readers):
        tid = self.sources.node_textures.get(id(node))
        if tid is None:
            return
        if node.type == "checkerboard":
            for name, leaf in (("color0", P.TEXTURE_COLOR0), ("color1", P.TEXTURE_COLOR1)):
                self.add(f"{prefix}.{name}.value", (_channels(node, name),), P.Target(leaf, tid, readers=readers))
        elif node.type == "bitmap":
            t = self.textures
            h, w = int(np.asarray(t.height)[tid]), int(np.asarray(t.width)[tid])
            self.add(f"{prefix}.data", (h, w, self.sources.bitmap_channels.get(tid, 3)),
                     P.Target(P.TEXELS, int(np.asarray(t.offset)[tid]), h * w, texture=tid, readers=readers))

    def _emitter(self, node, prefix):
        row = self.sources.emitter_rows.get(id(node))
        if row is None:
            return
        if node.type == "envmap":
            h, w = self.emitters.env_rgb.shape[1:]
            scale = float(node.props.get("scale", 1.0))
            self.add(f"{prefix}.data", (h, w + 2, 3), P.Target(P.ENV_RGB, row), scale=scale)
            self.add(f"{prefix}.scale", (1,), P.Target(P.ENV_SCALE, row), scale=scale)
            return
        name = _RADIANCE_NAMES.get(node.type)
        textured = any(n == name for n, c in node.named_children() if c.category == "texture")
        if name is not None and not textured:
            self.add(f"{prefix}.{name}.value", (_channels(node, name),), P.Target(P.EMITTER_RADIANCE, row))

    def _shape(self, node, prefix):
        self.add(f"{prefix}.to_world", (4, 4), refused=_GEOMETRY)
        if not any(child.category == "bsdf" for _, child in node.named_children()):
            self.add(f"{prefix}.bsdf.reflectance.value", (1,), refused=_DEFAULT_BSDF)
        if node.type in ("obj", "ply", "serialized"):
            self.add(f"{prefix}.vertex_positions", (0,), refused=_GEOMETRY)


def name_parameters(root: PluginNode, sources: Sources, textures: Textures, emitters: Emitters) -> tuple[P.Slot, ...]:
    """The ``tracer.scene_parameters.Slot`` of every key Mitsuba gives the scene ``root`` that we know:
    the differentiable ones with the leaves that hold them, the baked ones refused with why."""
    namer = _Namer(sources, textures, emitters)
    for node in root.children:  # top-level definitions first, in file order, as Mitsuba names them
        # (a texture defined at the top is named by its address, not its id, in Mitsuba 3.9.1)
        namer.visit(node, node.id if node.category != "texture" else None)
    return tuple(namer.slots.values())
