"""Mitsuba's texture plugins read into the texture table (host only): ``bitmap``, ``checkerboard``
and ``mesh_attribute``, and the constants a BSDF or emitter gives in their place.

Parameters and defaults are Mitsuba 3.9's (``src/textures/``); a bad value is a ``SceneError``
naming the plugin's line. One ``TextureReader`` serves a whole scene: a bitmap file read with the
same settings is one texture, however many plugins name it.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from tracer.errors import SceneError
from tracer.io.checks import check_texels
from tracer.io.images import load_image
from tracer.io.plugin_node import PluginNode
from tracer.kinds import BitmapFilter, WrapMode
from tracer.textures import TextureTableBuilder

__all__ = ["TextureReader", "BITMAP_FORMATS"]

# A bitmap's storage precision and GPU texture use ('format', 'accel'): texels are float32 here.
BITMAP_FORMATS = ("auto", "variant", "float16", "fp16", "uint8")
_FILTERS = {"bilinear": BitmapFilter.BILINEAR, "nearest": BitmapFilter.NEAREST}
_WRAPS = {"repeat": WrapMode.REPEAT, "mirror": WrapMode.MIRROR, "clamp": WrapMode.CLAMP}


class TextureReader:
    """Texture ids for a scene's texture plugins and constants, in one ``TextureTableBuilder``."""

    def __init__(self) -> None:
        self.table = TextureTableBuilder()
        self.attribute_requests: list[str] = []  # mesh attributes read by textures, in order of request
        self._bitmap_ids: dict[tuple, int] = {}  # (path, raw, filter, wrap, to_uv bytes) -> texture id
        self._attribute_ids: dict[tuple[str, float], int] = {}  # (attribute name, scale) -> texture id
        self.node_textures: dict[int, int] = {}  # id(texture node) -> its texture id (parameter names)
        self.bitmap_channels: dict[int, int] = {}  # bitmap texture id -> the channels of its file

    def add(self, value: PluginNode | ArrayLike | float) -> int:
        """The texture id of a nested texture plugin, an RGB triple or a float."""
        if not isinstance(value, PluginNode):
            return self.table.add_constant(np.broadcast_to(np.asarray(value, np.float64), (3,)))
        node = value
        if node.type == "mesh_attribute":
            tid = self._mesh_attribute(node)
        elif node.type == "checkerboard":
            to_uv = node.get_transform("to_uv")
            tid = self.table.add_checkerboard(node.get_rgb("color0", np.full(3, 0.4)),
                                              node.get_rgb("color1", np.full(3, 0.2)), to_uv)
        elif node.type == "bitmap":
            tid = self._bitmap(node)
        else:
            raise SceneError(f"{node.source}: unsupported texture type '{node.type}'")
        node.check_unused()
        self.node_textures[id(node)] = tid
        return tid

    def _mesh_attribute(self, node):
        name = node.get_string("name")
        if not name.startswith(("vertex_", "face_")):
            raise SceneError(f"{node.source}: invalid mesh attribute name '{name}' (it starts with 'vertex_' "
                             "or 'face_')")
        scale = node.get_float("scale", 1.0)
        if not np.isfinite(scale):
            raise SceneError(f"{node.source}: mesh_attribute 'scale' must be finite, got {scale}")
        self.attribute_requests.append(name)
        if (name, scale) not in self._attribute_ids:
            self._attribute_ids[name, scale] = self.table.add_mesh_attribute(name, scale)
        return self._attribute_ids[name, scale]

    def _bitmap(self, node):
        to_uv = node.get_transform("to_uv")
        path = node.get_path("filename")
        raw = node.get_bool("raw", False)
        filter_name = node.get_string("filter_type", "bilinear")
        wrap_name = node.get_string("wrap_mode", "repeat")
        if filter_name not in _FILTERS:
            raise SceneError(f"{node.source}: unknown filter_type '{filter_name}' (bilinear or nearest)")
        if wrap_name not in _WRAPS:
            raise SceneError(f"{node.source}: unknown wrap_mode '{wrap_name}' (repeat, mirror or clamp)")
        storage = node.get_string("format", "auto")
        if storage not in BITMAP_FORMATS:
            raise SceneError(f"{node.source}: unknown format '{storage}' ({', '.join(BITMAP_FORMATS)})")
        node.get_bool("accel", True)
        key = (path, raw, filter_name, wrap_name, to_uv.tobytes())
        if key not in self._bitmap_ids:
            image = node.load(load_image, path, raw=raw)
            check_texels(node, path, image)
            tid = self.table.add_bitmap(image, _FILTERS[filter_name], _WRAPS[wrap_name], to_uv)
            self.bitmap_channels[tid] = 1 if np.ndim(image) == 2 else min(np.shape(image)[2], 3)
            self._bitmap_ids[key] = tid
        return self._bitmap_ids[key]
