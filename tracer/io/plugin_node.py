"""``PluginNode``: one plugin of a parsed Mitsuba scene, with typed accessors that record what
was read (host only: no JAX here). The parser that builds these is ``tracer.io.xml``."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike

from tracer.io import spectra
from tracer.errors import SceneError
from tracer.io.transforms import inverse_transpose

if TYPE_CHECKING:
    from tracer.io.xml import FileRef

__all__ = ["PluginNode", "MISSING", "resolve_path", "INT32_RANGE"]

INT32_RANGE = (-2**31, 2**31 - 1)  # what get_int returns: Mitsuba's plugins read int (or uint32)
_T = TypeVar("_T")


class _Missing:
    def __repr__(self) -> str:
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


def _infer_kind(value: Any) -> str:
    if isinstance(value, spectra.Spectrum):
        return "spectrum"
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

    ``props`` maps names to float, int, bool, str, (3,) float64 arrays (rgb, point, vector),
    ``spectra.Spectrum`` records or (4, 4) float64 arrays (transforms). ``children`` holds
    nested plugins in document order; a ``<ref>`` puts the referenced node itself there, so shared plugins are the same
    object. A nested plugin's parameter name (``<texture name="reflectance">`` or ``<ref
    name=...>``) belongs to the edge, not the node: ask ``child(name)`` or ``named_children()``;
    ``name`` is the attribute of the defining tag. The typed ``get_*`` accessors record what was
    read, so that ``check_unused()`` can report a parameter the renderer does not understand.

    Colours are converted as Mitsuba's RGB variants convert them (``get_rgb``, ``tracer.io.spectra``);
    a nested constant spectrum plugin (``<spectrum type="d65">``, ``srgb``, ``uniform``, ...) is a
    value there, not a texture: ``child`` does not return it, ``get_rgb`` and ``get_float`` read it.
    """

    category: str                  # the tag: 'scene', 'shape', 'bsdf', 'texture', ...
    type: str                      # the plugin type attribute ('diffuse', 'obj', ...); '' for scene
    id: str | None = None
    name: str | None = None
    props: dict = dataclasses.field(default_factory=dict)
    children: list = dataclasses.field(default_factory=list)
    source: str = "<synthetic>"    # "file.xml:LINE" of the opening tag
    source_dir: str = ""           # absolute folder of the XML file holding the tag
    # Where relative file names are looked for (``resolve_path``'s search, own and top folders);
    # None: the folder of the tag's file.
    search_dirs: tuple | None = None

    def __post_init__(self) -> None:
        self._kinds: dict[str, str] = {}  # property name -> the tag it was given with
        self._where: dict[str, str] = {}  # parameter name -> "file:line"
        self._order: list[str] = []  # parameter names (properties and named children), document order
        self._child_names: list[str | None] = [None] * len(self.children)  # per child: its parameter name, or None
        self._child_where = [self.source] * len(self.children)  # per child: "file:line" of its tag or <ref>
        self._used: set[str] = set()  # parameter names read through an accessor
        self._used_children: set[int] = set()  # indices of ``children`` handed out
        if self.search_dirs is None:
            self.search_dirs = ((), self.source_dir, self.source_dir)
        self._normal_matrices: dict[str, np.ndarray] = {}  # transform name -> the inverse transpose Mitsuba stores
        # The root's only, set by the parser (``tracer.io.xml``): the files the scene names, its <default>s.
        self.files: tuple[FileRef, ...]
        self.defaults: dict[str, str]

    def __repr__(self) -> str:
        return f"PluginNode({self.category} type={self.type!r} id={self.id!r} at {self.source})"

    @classmethod
    def synthetic(cls, category: str, type: str, **props: object) -> Self:
        """A node made in code (a default plugin), e.g. ``synthetic('bsdf', 'diffuse')``."""
        node = cls(category, type)
        for name, value in props.items():
            node.add_property(name, _infer_kind(value), value, node.source)
        return node

    # -- building (the parser, ``tracer.io.xml``)
    def add_property(self, name: str, kind: str, value: object, where: str) -> None:
        """Give the plugin property ``name`` (the tag ``kind``: 'float', 'rgb', ...) at "file:line"
        ``where``; a name given twice is a ``SceneError``."""
        self._claim(name, where)
        self.props[name] = value
        self._kinds[name] = kind

    def add_transform(self, name: str, matrix: np.ndarray, normal_matrix: np.ndarray, where: str) -> None:
        """Give the transform ``name``, (4, 4), with the inverse transpose Mitsuba computed as it
        composed it (``get_normal_transform`` returns that one)."""
        self.add_property(name, "transform", matrix, where)
        self._normal_matrices[name] = normal_matrix

    def add_child(self, child: PluginNode, name: str | None, where: str) -> None:
        """Nest the plugin ``child`` (a ``<ref>``'s target too), as parameter ``name`` or None."""
        if name is not None:
            self._claim(name, where)
        self.children.append(child)
        self._child_names.append(name)
        self._child_where.append(where)

    def _claim(self, name: str, where: str) -> None:
        if name in self._where:
            raise SceneError(f"parameter '{name}' given twice (first at {self._where[name]})", where)
        self._where[name] = where
        self._order.append(name)

    # -- reading
    def describe(self) -> str:
        return "scene" if self.category == "scene" else f"{self.category} '{self.type}'"

    def has(self, name: str) -> bool:
        """Whether a property or a named nested plugin ``name`` was given (reads nothing)."""
        return name in self.props or name in self._child_names

    def kind_of(self, name: str) -> str | None:
        """The tag property ``name`` was given with ('rgb', 'vector', 'float', ...), or None."""
        return self._kinds.get(name)

    def _get(self, name: str, expect: str, default: Any) -> Any:
        if name in self.props:
            kind = self._kinds.get(name) or _infer_kind(self.props[name])
            if kind not in _ACCEPTS[expect]:
                raise SceneError(f"{self.describe()}: parameter '{name}' is a <{kind}>, expected {_EXPECTED[expect]}",
                                 self._where.get(name, self.source))
            self._used.add(name)
            return self.props[name]
        if name in self._child_names:
            child = self.children[self._child_names.index(name)]
            if self._is_value(child) and expect in ("rgb", "float"):
                return self._fold(name, expect)
            raise SceneError(f"{self.describe()}: parameter '{name}' is a nested <{child.category}>, "
                             f"expected {_EXPECTED[expect]}", self._where.get(name, self.source))
        if default is MISSING:
            raise SceneError(f"{self.describe()} is missing required parameter '{name}'", self.source)
        return default

    def get_float(self, name: str, default: float | _Missing = MISSING) -> float:
        return float(self._get(name, "float", default))

    def get_int(self, name: str, default: int | _Missing = MISSING) -> int:
        """An integer that fits 32 bits (what Mitsuba's plugins read; ``<integer>`` holds 64)."""
        value = int(self._get(name, "integer", default))
        if not INT32_RANGE[0] <= value <= INT32_RANGE[1] and name in self.props:
            raise SceneError(f"{self.describe()}: parameter '{name}' = {value} is out of range "
                             f"[{INT32_RANGE[0]}, {INT32_RANGE[1]}]", self._where.get(name, self.source))
        return value

    def get_bool(self, name: str, default: bool | _Missing = MISSING) -> bool:
        return bool(self._get(name, "boolean", default))

    @overload
    def get_string(self, name: str, default: str | _Missing = MISSING) -> str: ...

    @overload
    def get_string(self, name: str, default: None) -> str | None: ...

    def get_string(self, name: str, default: str | _Missing | None = MISSING) -> str | None:
        value = self._get(name, "string", default)
        return value if value is None else str(value)

    def get_rgb(self, name: str, default: ArrayLike | _Missing = MISSING,
                context: spectra.Context | None = None) -> np.ndarray:
        """(3,) float64 linear sRGB of a colour parameter, converted as Mitsuba's RGB variants do.

        ``rgb``, ``float``, ``spectrum`` (uniform, wavelength:value pairs or a file) or a nested
        constant spectrum plugin; ``context`` (a ``spectra.Context``) is how the plugin reads it,
        by default what Mitsuba's plugin of this type does (``spectra.context_of``). A default
        is returned as given.
        """
        context = context or spectra.context_of(self.category, self.type, name)
        if name in self._child_names and self._is_value(self.children[self._child_names.index(name)]):
            return self._fold(name, "rgb", context)
        value = self._get(name, "rgb", default)
        if name not in self.props:
            return _vec3(value)
        kind = self._kinds.get(name) or _infer_kind(value)
        return spectra.to_rgb(value, kind, context, self._where.get(name, self.source))

    def get_point(self, name: str, default: ArrayLike | _Missing = MISSING) -> np.ndarray:
        return _vec3(self._get(name, "point", default))

    get_vector = get_point

    def get_transform(self, name: str, default: ArrayLike | None = None) -> np.ndarray:
        """(4, 4) float64; identity when absent and no default is given."""
        value = self._get(name, "transform", np.eye(4) if default is None else default)
        return np.array(value, np.float64).reshape(4, 4)

    def get_normal_transform(self, name: str) -> np.ndarray:
        """(4, 4) matrix that Mitsuba applies to normals under transform ``name``.

        It is ``inv(M).T`` of ``get_transform(name)``, except after a ``rotate`` about an axis
        that is not unit length, which Mitsuba treats as orthogonal (see ``_transform_op``).
        Pass it to ``meshes.transform_mesh`` to match Mitsuba's shading normals there too.
        """
        matrix = self.get_transform(name)
        if name in self._normal_matrices:
            return self._normal_matrices[name].copy()
        return inverse_transpose(matrix)

    @overload
    def get_path(self, name: str) -> str: ...

    @overload
    def get_path(self, name: str, default: _T) -> str | _T: ...

    def get_path(self, name: str, default: Any = MISSING) -> Any:
        """Absolute path of a file name property (see ``resolve_path`` for the search order)."""
        if not self.has(name) and default is not MISSING:
            return default
        assert self.search_dirs is not None  # (set by __post_init__)
        return resolve_path(self.get_string(name), *self.search_dirs)

    def get_texture(self, name: str, default: ArrayLike | _Missing = MISSING) -> PluginNode | np.ndarray:
        """The nested plugin given as ``name`` if there is one, else ``get_rgb(name, default)``."""
        child = self.child(name)
        return child if child is not None else self.get_rgb(name, default)

    def load(self, loader: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run a file loader this plugin asks for: its ``SceneError`` (naming the file) also names
        this plugin's line."""
        try:
            return loader(*args, **kwargs)
        except SceneError as e:
            raise SceneError(f"{self.source}: {e}") from None

    def mark_used(self, *names: str) -> None:
        """Declare parameters read without an accessor (e.g. ones that change nothing)."""
        self._used.update(names)

    def child(self, name: str) -> PluginNode | None:
        """The nested plugin given with parameter name ``name``, or None (also for a constant
        spectrum plugin, which is a value: see ``get_rgb``)."""
        if name not in self._child_names:
            return None
        index = self._child_names.index(name)
        if self._is_value(self.children[index]):
            return None
        self._used.add(name)
        self._used_children.add(index)
        return self.children[index]

    @staticmethod
    def _is_value(node: PluginNode) -> bool:
        return node.category == "texture" and node.type in spectra.SPECTRUM_PLUGINS

    def _fold(self, name, expect, context=None):
        """The value of the constant spectrum plugin nested as ``name``: (3,) RGB, or a float
        when ``expect`` is 'float' (a gray one only)."""
        index = self._child_names.index(name)
        self._used.add(name)
        self._used_children.add(index)
        rgb = spectra.plugin_rgb(self.children[index], context or spectra.context_of(self.category, self.type, name))
        if expect == "rgb":
            return rgb
        if not np.all(rgb == rgb[0]):
            raise SceneError(f"{self.describe()}: parameter '{name}' must be a gray value, got {rgb.tolist()}",
                             self._child_where[index])
        return float(rgb[0])

    # -- renaming (Mitsuba's upgrade of old scene versions)
    def parameter_names(self) -> list[str]:
        """The names of the parameters given (properties and named nested plugins), in document order."""
        return list(self._order)

    def where(self, name: str) -> str:
        """The "file:line" that gave parameter ``name``."""
        return self._where[name]

    def rename(self, old: str, new: str) -> None:
        """Give parameter ``old`` the name ``new`` (a name given twice is a ``SceneError``)."""
        if new in self._where:
            raise SceneError(f"parameter '{new}' given twice (as '{old}' at {self._where[old]}, "
                             f"first at {self._where[new]})", self._where[old])
        self._where[new] = self._where.pop(old)
        self._order[self._order.index(old)] = new
        if old in self.props:
            self.props[new] = self.props.pop(old)
            self._kinds[new] = self._kinds.pop(old)
            if old in self._normal_matrices:
                self._normal_matrices[new] = self._normal_matrices.pop(old)
        else:
            self._child_names[self._child_names.index(old)] = new

    def remove(self, name: str) -> Any:
        """Take property ``name`` out (it was replaced by another); returns its value."""
        del self._where[name]
        self._order.remove(name)
        self._kinds.pop(name)
        self._normal_matrices.pop(name, None)
        return self.props.pop(name)

    def named_children(self) -> list[tuple[str | None, PluginNode]]:
        """(name or None, node) for every nested plugin, in document order (reads nothing)."""
        return list(zip(self._child_names, self.children))

    def children_of(self, category: str) -> list[PluginNode]:
        """Nested plugins of one category ('bsdf', 'emitter', ...) in document order."""
        found = []
        for index, (name, node) in enumerate(zip(self._child_names, self.children)):
            if node.category == category:
                self._used_children.add(index)
                if name is not None:
                    self._used.add(name)
                found.append(node)
        return found

    def check_unused(self, nested: bool = True) -> None:
        """Raise ``SceneError`` for the first parameter or nested plugin that nothing read;
        ``nested=False``: value parameters only (the ``<scene>``'s own check, whose nested plugins
        are the scene's objects)."""
        name: str | None
        for name in self._order:
            if name not in self._used and (nested or name in self.props):
                raise SceneError(f"{self.describe()} has unsupported parameter '{name}'", self._where[name])
        if not nested:
            return
        for index, (name, node) in enumerate(zip(self._child_names, self.children)):
            if name is None and index not in self._used_children:
                raise SceneError(f"{self.describe()} has unsupported nested <{node.category}> '{node.type}'",
                                 self._child_where[index])


def _vec3(value):
    return value if value is None else np.broadcast_to(np.asarray(value, np.float64), (3,)).copy()


def resolve_path(value: str, search: Iterable[str] = (), own: str = "", top: str = "") -> str:
    """Absolute path of a file name: the folders of ``<path>`` tags (``search``), then the folder
    of the XML file that names it (``own``), then that of the top file (``top``; Mitsuba itself
    looks in ``search`` and ``top`` only); a name found nowhere is taken relative to ``own``."""
    value = os.path.expanduser(value)
    if os.path.isabs(value):
        return os.path.normpath(value)
    for folder in (*search, own, top):
        if os.path.exists(os.path.join(folder, value)):
            return os.path.abspath(os.path.join(folder, value))
    return os.path.abspath(os.path.join(own, value))
