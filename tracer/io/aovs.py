"""Mitsuba's ``aov`` integrator, as its scene files describe it (host only: no JAX).

``<string name="aovs" value="dd.y:depth,nn:sh_normal"/>`` lists ``name:type`` pairs; each type
gives the image one or more channels, named ``name.SUFFIX`` as Mitsuba names them
(``src/integrators/aov.cpp``): ``dd.y.T``, ``nn.X``, ``nn.Y``, ``nn.Z``. The nested integrator's
RGB comes first, then the AOVs in the order given: ``tracer.render`` returns (H, W, 3 + K), as
``mitsuba.render`` does for such a scene. The farm reads a scene's AOVs from here without building
it (``tracer.io.scene_info``); their channels' layout is ``tracer.shared``'s.

Mitsuba's ``moment`` integrator adds channels of the same kind: per sample, the XYZ of its
nested integrator's radiance and their squares (``src/integrators/moment.cpp``), named
``NAME.X/Y/Z`` and ``m2_NAME.X/Y/Z`` with NAME the nested integrator's ``name`` (``_arg_0``
without one). Filtered like the rest, a pixel's ``m2_`` channels are its samples' mean second
moments: minus the first moments squared, the per-sample variance. They are the AOV types
``moment_xyz`` and ``moment_m2``, which a scene's ``aovs`` list cannot name.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tracer.errors import SceneError
from tracer.shared import AOV_TYPES

if TYPE_CHECKING:
    from tracer.io.plugin_node import PluginNode

__all__ = ["parse_aovs", "integrator_aovs"]


def parse_aovs(text: str, where: str) -> tuple[tuple[str, str], ...]:
    """((name, type), ...) from Mitsuba's ``aovs`` string ``"name:type, name:type"`` (tokens split
    at commas and spaces, as Mitsuba's ``string::tokenize``). ``where`` ("file:line" or a flag's
    name) goes into the ``SceneError`` for a malformed pair or a type Mitsuba does not have."""
    pairs = []
    for token in text.replace(",", " ").split():
        name, colon, kind = token.partition(":")
        if not colon or not name or not kind or ":" in kind:
            raise SceneError(f"{where}: AOV '{token}' is not a name:type pair")
        if kind not in AOV_TYPES:
            raise SceneError(f"{where}: unsupported AOV type '{kind}' in '{token}' ({', '.join(AOV_TYPES)})")
        pairs.append((name, kind))
    return tuple(pairs)


def integrator_aovs(node: PluginNode | None) -> tuple[tuple[str, str], ...]:
    """The (name, type) channels after the RGB that the ``<integrator>`` ``node`` (or None) gives:
    an ``aov``'s nested integrator's, then its list; a ``moment``'s two triples; none for the
    others. A malformed ``aovs`` list, or a ``moment`` over other than one integrator that is not an
    ``aov`` or a ``moment``, is a ``SceneError``."""
    if node is None or node.type not in ("aov", "moment"):
        return ()
    inner = node.children_of("integrator")
    if node.type == "aov":
        nested = integrator_aovs(inner[0]) if inner else ()
        return nested + parse_aovs(node.get_string("aovs"), node.source)
    if len(inner) != 1:
        raise SceneError(f"{node.source}: 'moment' takes one nested integrator, got {len(inner)}")
    if inner[0].type in ("aov", "moment"):
        raise SceneError(f"{inner[0].source}: a 'moment' integrator over an '{inner[0].type}' integrator is not "
                         "supported")
    name = inner[0].name or "_arg_0"
    return ((name, "moment_xyz"), (f"m2_{name}", "moment_m2"))
