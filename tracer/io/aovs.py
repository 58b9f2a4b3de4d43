"""Mitsuba's ``aov`` integrator, as its scene files describe it (host only: no JAX).

``<string name="aovs" value="dd.y:depth,nn:sh_normal"/>`` lists ``name:type`` pairs; each type
gives the image one or more channels, named ``name.SUFFIX`` as Mitsuba names them
(``src/integrators/aov.cpp``): ``dd.y.T``, ``nn.X``, ``nn.Y``, ``nn.Z``. The nested integrator's
RGB comes first, then the AOVs in the order given: ``tracer.render`` returns (H, W, 3 + K), as
``mitsuba.render`` does for such a scene. The farm reads the channel names from here without
building the scene (``tracer.io.scene_info``).

Mitsuba's ``moment`` integrator adds channels of the same kind: per sample, the XYZ of its
nested integrator's radiance and their squares (``src/integrators/moment.cpp``), named
``NAME.X/Y/Z`` and ``m2_NAME.X/Y/Z`` with NAME the nested integrator's ``name`` (``_arg_0``
without one). Filtered like the rest, a pixel's ``m2_`` channels are its samples' mean second
moments: minus the first moments squared, the per-sample variance. They are the AOV types
``moment_xyz`` and ``moment_m2``, which a scene's ``aovs`` list cannot name.
"""
from tracer.io.errors import SceneError

__all__ = ["SUFFIXES", "TYPES", "MOMENT_TYPES", "parse_aovs", "integrator_aovs", "channel_names", "channel_count",
           "find"]

# Each AOV type and the suffixes of its channels, as Mitsuba's aov.cpp names them.
SUFFIXES = {
    "albedo": ("R", "G", "B"),
    "depth": ("T",),
    "position": ("X", "Y", "Z"),
    "uv": ("U", "V"),
    "geo_normal": ("X", "Y", "Z"),
    "sh_normal": ("X", "Y", "Z"),
    "dp_du": ("X", "Y", "Z"),
    "dp_dv": ("X", "Y", "Z"),
    "duv_dx": ("U", "V"),
    "duv_dy": ("U", "V"),
    "prim_index": ("I",),
    "shape_index": ("I",),
}
TYPES = tuple(SUFFIXES)  # what an aov integrator's list may name
MOMENT_TYPES = ("moment_xyz", "moment_m2")
SUFFIXES.update({kind: ("X", "Y", "Z") for kind in MOMENT_TYPES})


def parse_aovs(text, where):
    """((name, type), ...) from Mitsuba's ``aovs`` string ``"name:type, name:type"`` (tokens split
    at commas and spaces, as Mitsuba's ``string::tokenize``). ``where`` ("file:line" or a flag's
    name) goes into the ``SceneError`` for a malformed pair or a type Mitsuba does not have."""
    pairs = []
    for token in text.replace(",", " ").split():
        name, colon, kind = token.partition(":")
        if not colon or not name or not kind or ":" in kind:
            raise SceneError(f"{where}: AOV '{token}' is not a name:type pair")
        if kind not in TYPES:
            raise SceneError(f"{where}: unsupported AOV type '{kind}' in '{token}' ({', '.join(TYPES)})")
        pairs.append((name, kind))
    return tuple(pairs)


def integrator_aovs(node):
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


def channel_names(aovs):
    """The AOV channels' names (Mitsuba's ``aov_names``), after the image's R, G, B."""
    return tuple(f"{name}.{suffix}" for name, kind in aovs for suffix in SUFFIXES[kind])


def channel_count(aovs):
    return sum(len(SUFFIXES[kind]) for _, kind in aovs)


def find(aovs, *kinds):
    """The channel offset (after R, G, B: 3 + ...) of the first AOV of the first of ``kinds``
    the list has, or None."""
    for kind in kinds:
        offset = 3
        for _, k in aovs:
            if k == kind:
                return offset
            offset += len(SUFFIXES[k])
    return None
