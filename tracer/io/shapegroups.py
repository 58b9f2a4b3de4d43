"""Mitsuba's ``shapegroup`` and ``instance`` plugins: what the scene file may say, checked.

A shape group holds shapes that are not rendered on their own; each ``instance`` places the
group with its ``to_world`` (``src/shapes/shapegroup.cpp``, ``instance.cpp``; ``ShapeGroup``'s
constructor in ``src/render/shapegroup.cpp``). As in Mitsuba, a group cannot hold another group,
an instance, or a shape with an emitter ("Instancing of emitters is not supported"); an
instance holds exactly one group (by a ``<ref>`` or nested) and nothing else, so its material is
its group's shapes'. Where Mitsuba would render an empty group as nothing, and accept any
matrix, we refuse an empty group and a transform that cannot be inverted: both are one-line
``SceneError``s.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracer.errors import SceneError

if TYPE_CHECKING:
    from tracer.io.plugin_node import PluginNode

__all__ = ["group_shapes", "instanced_group", "instance_to_world"]

# A to_world whose 3x3 part has a condition number past this is singular in float32 (its
# inverse, which every ray goes through, would have no correct digit).
MAX_CONDITION = 1e7


def group_shapes(node: PluginNode) -> list[PluginNode]:
    """The shape nodes of the ``shapegroup`` ``node``, each checked to be one it may hold."""
    shapes = []
    for child in node.children:
        if child.category != "shape":
            raise SceneError(f"{child.source}: a shapegroup holds shapes only, got <{child.category}> '{child.type}'")
        if child.type == "shapegroup":
            raise SceneError(f"{child.source}: nested shapegroups are not permitted (nor in Mitsuba)")
        if child.type == "instance":
            raise SceneError(f"{child.source}: an instance inside a shapegroup is not permitted (nested instancing; "
                             "nor in Mitsuba)")
        for grandchild in child.children:
            if grandchild.category in ("emitter", "sensor"):
                raise SceneError(f"{grandchild.source}: instancing of {grandchild.category}s is not supported (nor "
                                 f"in Mitsuba): a shape inside a shapegroup cannot have an <{grandchild.category}>")
        shapes.append(child)
    if not shapes:
        raise SceneError(f"{node.source}: shapegroup has no shapes")
    node.children_of("shape")  # (marks them read)
    node.check_unused()
    return shapes


def instanced_group(node: PluginNode) -> PluginNode:
    """The ``shapegroup`` node the ``instance`` ``node`` places."""
    groups = []
    for child in node.children:
        if child.category != "shape" or child.type != "shapegroup":
            raise SceneError(f"{child.source}: an instance takes only a shapegroup, got <{child.category}> "
                             f"'{child.type}'")
        groups.append(child)
    if len(groups) != 1:
        what = "no shapegroup" if not groups else f"{len(groups)} shapegroups"
        raise SceneError(f"{node.source}: an instance needs a reference to one shapegroup, got {what}")
    node.children_of("shape")  # (marks it read)
    return groups[0]


def instance_to_world(node: PluginNode) -> np.ndarray:
    """The instance's ``to_world`` (4, 4): finite, affine, and invertible."""
    m = node.get_transform("to_world")
    if not np.all(np.isfinite(m)) or not np.array_equal(m[3], [0.0, 0.0, 0.0, 1.0]):
        raise SceneError(f"{node.source}: an instance's 'to_world' must be a finite affine transform")
    with np.errstate(all="ignore"):
        condition = np.linalg.cond(m[:3, :3])
    if not condition < MAX_CONDITION:
        raise SceneError(f"{node.source}: an instance's 'to_world' is singular (a zero scale, or one "
                         f"{MAX_CONDITION:.0e} times smaller than another)")
    return m
