"""The order of a scene's shapes in Mitsuba 3.9.1's ``scene->shapes()`` (host only: no JAX).

What the ``shape_index`` AOV counts (1 + the place of the shape hit, or of the instance it was
hit through) and what ``prim_index`` is relative to. Mitsuba's loader does not keep the file's
order (``src/core/parser.cpp``, ``src/shapes/merge.cpp``):

1. ``transform_merge_equivalent``: plugins other than shapes and emitters whose properties are
   equal become one object, so two meshes whose BSDFs are written alike share one BSDF;
2. ``transform_merge_meshes``: the world's shapes go into one ``merge`` shape, which keeps
   shapes that are not meshes (spheres, disks, cylinders, curves, instances) and meshes with
   mesh attributes as they are, in the file's order, and merges the other meshes (``obj``,
   ``ply``, ``serialized``, ``rectangle``, ``cube``) that share a BSDF, an emitter (so an
   emitting mesh stays alone), uvs or not, and face normals or not, into one mesh each, their
   triangles in file order; the merged meshes come after the others.

Mitsuba holds the merged groups in a hash table keyed by pointers: with a few groups it gives
them in the reverse of their first appearance (followed here), with more its order is its
hash table's, which nothing outside that process can know. A shape without a BSDF gets a
default one of its own, so it is never merged with another.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tracer.io.plugin_node import PluginNode

__all__ = ["WorldShape", "signature", "mitsuba_order"]


@dataclasses.dataclass(frozen=True)
class WorldShape:
    """A shape or instance of the world, in file order."""

    key: tuple | None = None  # what Mitsuba merges it by; None: kept on its own, in file order
    triangles: int = 0        # its primitives (a merged mesh numbers its members' in turn)


def _value(value):
    if isinstance(value, np.ndarray):
        return ("array", value.shape, tuple(np.asarray(value, np.float64).ravel().tolist()))
    if isinstance(value, (tuple, list)):
        return tuple(_value(v) for v in value)
    return (type(value).__name__, value if isinstance(value, (str, int, float, bool)) else repr(value))


def signature(node: PluginNode) -> tuple[str, str, tuple[Any, ...], tuple[Any, ...]]:
    """A hashable description of plugin ``node`` and what it nests, equal for nodes Mitsuba's
    ``transform_merge_equivalent`` makes one object (its ``id`` does not count, as there)."""
    props = tuple(sorted((name, _value(value)) for name, value in node.props.items()))
    nested = tuple((name or "", signature(child)) for name, child in node.named_children())
    return (node.category, node.type, props, tuple(sorted(nested)))


def mitsuba_order(shapes: Sequence[WorldShape]) -> tuple[list[int], list[int]]:
    """(ranks, prim_offsets), one each per world shape: its 1-based place in Mitsuba's
    ``scene->shapes()`` (members of one merged mesh share it), and the number of primitives its
    merged mesh holds before its own (0 for shapes kept as they are)."""
    kept = [i for i, shape in enumerate(shapes) if shape.key is None]
    groups: dict[tuple, list[int]] = {}
    for i, shape in enumerate(shapes):
        if shape.key is not None:
            groups.setdefault(shape.key, []).append(i)
    ranks, offsets = [0] * len(shapes), [0] * len(shapes)
    for place, i in enumerate(kept):
        ranks[i] = place + 1
    for place, members in enumerate(reversed(list(groups.values()))):
        total = 0
        for i in members:
            ranks[i], offsets[i] = len(kept) + place + 1, total
            total += shapes[i].triangles
    return ranks, offsets
