"""``PluginNode``: one plugin of a parsed Mitsuba scene, with typed accessors that record what
was read (host only: no JAX here). The parser that builds these is ``tracer.io.xml``."""
import dataclasses
import os

import numpy as np

from tracer.io.errors import SceneError
from tracer.io.transforms import inverse_transpose

__all__ = ["PluginNode", "MISSING"]


class _Missing:
    def __repr__(self):
        return "MISSING"


MISSING = _Missing()

# What each accessor accepts: the tags a property may have been given with.
_EXPECTED = {"float": "a float", "integer": "an integer", "boolean": "a boolean", "string": "a string",
             "rgb": "an rgb color", "point": "a point or vector", "transform": "a transform"}
_ACCEPTS = {
    "float": ("float", "integer"),
    "integer": ("integer",),
    "boolean": ("boolean",),
    "string": ("string",),
    "rgb": ("rgb", "spectrum", "float", "integer"),
    "point": ("point", "vector"),
    "transform": ("transform",),
}


def _infer_kind(value):
    if isinstance(value, (bool, np.bool_)):
        return "boolean"
    if isinstance(value, (int, np.integer)):
        return "integer"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "string"
    shape = np.shape(value)
    return {(3,): "rgb", (4, 4): "transform"}.get(shape, "unknown")


@dataclasses.dataclass(eq=False, repr=False)
class PluginNode:
    """One plugin of the scene (``<bsdf type="diffuse">``): its properties and nested plugins.

    ``props`` maps names to float, int, bool, str, (3,) float64 arrays (rgb, spectrum, point,
    vector) or (4, 4) float64 arrays (transforms). ``children`` holds nested plugins in document
    order; a ``<ref>`` puts the referenced node itself there, so shared plugins are the same
    object. A nested plugin's parameter name (``<texture name="reflectance">`` or ``<ref
    name=...>``) belongs to the edge, not the node: ask ``child(name)`` or ``named_children()``;
    ``name`` is the attribute of the defining tag. The typed ``get_*`` accessors record what was
    read, so that ``check_unused()`` can report a parameter the renderer does not understand.
    """

    category: str                  # the tag: 'scene', 'shape', 'bsdf', 'texture', ...
    type: str                      # the plugin type attribute ('diffuse', 'obj', ...); '' for scene
    id: str | None = None
    name: str | None = None
    props: dict = dataclasses.field(default_factory=dict)
    children: list = dataclasses.field(default_factory=list)
    source: str = "<synthetic>"    # "file.xml:LINE" of the opening tag
    source_dir: str = ""           # absolute folder of the XML file holding the tag

    def __post_init__(self):
        self._kinds = {}           # property name -> the tag it was given with
        self._where = {}           # parameter name -> "file:line"
        self._order = []           # parameter names (properties and named children), document order
        self._child_names = [None] * len(self.children)  # per child: its parameter name, or None
        self._child_where = [self.source] * len(self.children)  # per child: "file:line" of its tag or <ref>
        self._used = set()         # parameter names read through an accessor
        self._used_children = set()  # indices of ``children`` handed out
        self._search_dirs = ((), self.source_dir, self.source_dir)
        self._normal_matrices = {}  # transform name -> the inverse transpose Mitsuba stores with it

    def __repr__(self):
        return f"PluginNode({self.category} type={self.type!r} id={self.id!r} at {self.source})"

    @classmethod
    def synthetic(cls, category, type, **props):
        """A node made in code (a default plugin), e.g. ``synthetic('bsdf', 'diffuse')``."""
        node = cls(category, type)
        for name, value in props.items():
            node._set(name, _infer_kind(value), value, node.source)
        return node

    # -- building (the parser)
    def _set(self, name, kind, value, where):
        self._claim(name, where)
        self.props[name] = value
        self._kinds[name] = kind

    def _add_child(self, child, name, where):
        if name is not None:
            self._claim(name, where)
        self.children.append(child)
        self._child_names.append(name)
        self._child_where.append(where)

    def _claim(self, name, where):
        if name in self._where:
            raise SceneError(f"parameter '{name}' given twice (first at {self._where[name]})", where)
        self._where[name] = where
        self._order.append(name)

    # -- reading
    def describe(self):
        return "scene" if self.category == "scene" else f"{self.category} '{self.type}'"

    def has(self, name):
        """Whether a property or a named nested plugin ``name`` was given (reads nothing)."""
        return name in self.props or name in self._child_names

    def _get(self, name, expect, default):
        if name in self.props:
            kind = self._kinds.get(name) or _infer_kind(self.props[name])
            if kind not in _ACCEPTS[expect]:
                raise SceneError(f"{self.describe()}: parameter '{name}' is a <{kind}>, expected {_EXPECTED[expect]}",
                                 self._where.get(name, self.source))
            self._used.add(name)
            return self.props[name]
        if name in self._child_names:
            child = self.children[self._child_names.index(name)]
            raise SceneError(f"{self.describe()}: parameter '{name}' is a nested <{child.category}>, "
                             f"expected {_EXPECTED[expect]}", self._where.get(name, self.source))
        if default is MISSING:
            raise SceneError(f"{self.describe()} is missing required parameter '{name}'", self.source)
        return default

    def get_float(self, name, default=MISSING):
        return float(self._get(name, "float", default))

    def get_int(self, name, default=MISSING):
        return int(self._get(name, "integer", default))

    def get_bool(self, name, default=MISSING):
        return bool(self._get(name, "boolean", default))

    def get_string(self, name, default=MISSING):
        value = self._get(name, "string", default)
        return value if value is None else str(value)

    def get_rgb(self, name, default=MISSING):
        """(3,) float64 from an ``rgb``, a uniform ``spectrum`` or a ``float`` (gray)."""
        return _vec3(self._get(name, "rgb", default))

    def get_point(self, name, default=MISSING):
        return _vec3(self._get(name, "point", default))

    get_vector = get_point

    def get_transform(self, name, default=None):
        """(4, 4) float64; identity when absent and no default is given."""
        value = self._get(name, "transform", np.eye(4) if default is None else default)
        return np.array(value, np.float64).reshape(4, 4)

    def get_normal_transform(self, name):
        """(4, 4) matrix that Mitsuba applies to normals under transform ``name``.

        It is ``inv(M).T`` of ``get_transform(name)``, except after a ``rotate`` about an axis
        that is not unit length, which Mitsuba treats as orthogonal (see ``_transform_op``).
        Pass it to ``meshes.transform_mesh`` to match Mitsuba's shading normals there too.
        """
        matrix = self.get_transform(name)
        if name in self._normal_matrices:
            return self._normal_matrices[name].copy()
        return inverse_transpose(matrix)

    def get_path(self, name, default=MISSING):
        """Absolute path of a file name property (see the module docstring for the search order)."""
        if not self.has(name) and default is not MISSING:
            return default
        value = os.path.expanduser(self.get_string(name))
        if os.path.isabs(value):
            return os.path.normpath(value)
        search, own, top = self._search_dirs
        for folder in (*search, own, top):
            if os.path.exists(os.path.join(folder, value)):
                return os.path.abspath(os.path.join(folder, value))
        return os.path.abspath(os.path.join(own, value))

    def get_texture(self, name, default=MISSING):
        """The nested plugin given as ``name`` if there is one, else ``get_rgb(name, default)``."""
        child = self.child(name)
        return child if child is not None else self.get_rgb(name, default)

    def mark_used(self, *names):
        """Declare parameters read without an accessor (e.g. ones that change nothing)."""
        self._used.update(names)

    def child(self, name):
        """The nested plugin given with parameter name ``name``, or None."""
        if name not in self._child_names:
            return None
        index = self._child_names.index(name)
        self._used.add(name)
        self._used_children.add(index)
        return self.children[index]

    def named_children(self):
        """(name or None, node) for every nested plugin, in document order (reads nothing)."""
        return list(zip(self._child_names, self.children))

    def children_of(self, category):
        """Nested plugins of one category ('bsdf', 'emitter', ...) in document order."""
        found = []
        for index, (name, node) in enumerate(zip(self._child_names, self.children)):
            if node.category == category:
                self._used_children.add(index)
                if name is not None:
                    self._used.add(name)
                found.append(node)
        return found

    def check_unused(self):
        """Raise ``SceneError`` for the first parameter or nested plugin that nothing read."""
        for name in self._order:
            if name not in self._used:
                raise SceneError(f"{self.describe()} has unsupported parameter '{name}'", self._where[name])
        for index, (name, node) in enumerate(zip(self._child_names, self.children)):
            if name is None and index not in self._used_children:
                raise SceneError(f"{self.describe()} has unsupported nested <{node.category}> '{node.type}'",
                                 self._child_where[index])


def _vec3(value):
    return value if value is None else np.broadcast_to(np.asarray(value, np.float64), (3,)).copy()
