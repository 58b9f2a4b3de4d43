"""A job's changes to a parsed scene, made before it is built or described (host only: no JAX).

Two changes a render job can ask for without editing the scene file:

- ``aovs`` (Mitsuba's ``"name:type,name:type"``, ``tracer.io.aovs``): the scene's integrator is
  rendered as if wrapped in ``<integrator type="aov">`` with these AOVs, so that the image gets
  their channels after its RGB. A scene that already has an ``aov`` integrator keeps it: its
  own AOVs come first, the job's after them; a job's AOV that takes a name the scene's (or
  another of the job's) already has is refused, as two channels would have one name. A scene
  without an integrator gets Mitsuba's default ``path`` inside the wrapper.
- ``rfilter`` (a name of ``tracer.shared.FILTERS``): the film's reconstruction filter, with
  Mitsuba's default parameters, in place of the scene's. ``box`` keeps each sample in its pixel:
  denoisers (Open Image Denoise) need that, as any wider filter spreads a sample's noise over
  neighbouring pixels, which they then keep as detail.

``tracer.load_scene`` and ``tracer.io.scene_info.describe`` both apply them here, so the farm
reads the channels a job's frames will have from the same change the workers render.
"""
from tracer.io.aovs import parse_aovs
from tracer.errors import SceneError
from tracer.io.plugin_node import PluginNode
from tracer.shared import FILTERS

__all__ = ["apply", "check_rfilter", "AOVS_WHERE", "RFILTER_WHERE"]

AOVS_WHERE = "the job's aovs"         # how errors name the options
RFILTER_WHERE = "the job's rfilter"


def check_rfilter(name: str) -> str:
    """``name`` if it is a filter of ``tracer.filters``; a ``SceneError`` otherwise."""
    if name not in FILTERS:
        raise SceneError(f"{RFILTER_WHERE}: unknown reconstruction filter {name!r} ({', '.join(FILTERS)})")
    return name


def apply(root: PluginNode, aovs: str | None = None, rfilter: str | None = None) -> PluginNode:
    """Change the parsed scene ``root`` (in place) as a job's ``aovs`` and ``rfilter`` ask
    (each None: no change). Raises ``SceneError`` naming the option."""
    if aovs:
        _wrap_integrator(root, aovs)
    if rfilter:
        _replace_rfilter(root, check_rfilter(rfilter))
    return root


def _wrap_integrator(root, text):
    pairs = parse_aovs(text, AOVS_WHERE)
    index, node = _only(root, "integrator")
    own = node.props.get("aovs") if node is not None and node.type == "aov" else None
    taken = {name: node.source for name, _ in parse_aovs(own, node.source)} if isinstance(own, str) else {}
    for name, _ in pairs:
        if name in taken:
            where = "given twice" if taken[name] == AOVS_WHERE else f"taken by the scene's aov integrator ({taken[name]})"
            raise SceneError(f"{AOVS_WHERE}: AOV name '{name}' is {where}: give it another name")
        taken[name] = AOVS_WHERE
    if node is not None and node.type == "aov":  # the scene's own: the job's AOVs after its
        node.props["aovs"] = f"{own},{text}" if isinstance(own, str) and own.strip() else text
        return
    wrapper = _synthetic("integrator", "aov", AOVS_WHERE, aovs=text)
    wrapper.add_child(node if node is not None else _synthetic("integrator", "path", AOVS_WHERE), None, AOVS_WHERE)
    if index is None:
        root.add_child(wrapper, None, AOVS_WHERE)
    else:
        root.children[index] = wrapper


def _replace_rfilter(root, name):
    _, sensor = _only(root, "sensor")
    if sensor is None:
        return  # no sensor: describe and the loader refuse the scene for that
    index, film = _only(sensor, "film")
    if film is None:
        film = _synthetic("film", "hdrfilm", RFILTER_WHERE)
        sensor.add_child(film, None, RFILTER_WHERE)
    index, old = _only(film, "rfilter")
    new = _synthetic("rfilter", name, RFILTER_WHERE)
    if old is None:
        film.add_child(new, None, RFILTER_WHERE)
    else:
        film.children[index] = new


def _only(node, category):
    """(index, child) of ``node``'s one child of ``category`` ((None, None) for none; the builder
    refuses two, so the first is taken here). Reads nothing (``check_unused`` is unaffected)."""
    for index, (_, child) in enumerate(node.named_children()):
        if child.category == category:
            return index, child
    return None, None


def _synthetic(category, type, where, **props):
    node = PluginNode.synthetic(category, type, **props)
    node.source = where
    return node
