"""Mitsuba 3 XML scene files -> a tree of ``PluginNode`` (host only: no JAX here).

The parser is generic: it knows Mitsuba's tags and value syntax, not what any plugin means.
It follows Mitsuba 3.9's ``src/core/parser.cpp``:

* ``$name`` in any attribute is replaced by a keyword argument or an earlier ``<default>``
  (longest names first; ``\\$`` escapes a dollar); a ``$name`` left over is an error.
* ``<transform>`` operations are left-multiplied in document order (later ones apply after
  earlier ones), in double precision; ``rotate`` takes degrees about an axis that is not
  normalized (Mitsuba's ``dr::rotate``), ``lookat`` builds the columns (left, up, dir, origin)
  with ``left = normalize(cross(up, dir))`` and, for a missing or zero ``up``, Duff et al.'s
  ``coordinate_system(dir)``; ``matrix`` takes 16 (or 9) values row by row. Mitsuba also keeps
  the inverse transpose it transforms normals with, which is not ``inv(M).T`` after a rotation
  about a non-unit axis; ``PluginNode.get_normal_transform`` returns that one.
* ``<ref>`` may point forward; the tree then holds the referenced node itself (shared).
* ``<include>`` is relative to the including file; a ``scene`` root is spliced into the parent.

Relative file names are resolved by ``PluginNode.get_path``: the folders of ``<path>`` tags,
then the folder of the XML file holding the tag, then the folder of the top file (Mitsuba itself
resolves against the latter only); the result is an absolute path. XML is read with defusedxml:
entity declarations and external references are refused. Every error is a ``SceneError`` that
names file and line.
"""
import dataclasses
import math
import os
import re
import xml.sax

import numpy as np
from defusedxml import sax as safe_sax
from defusedxml.common import DefusedXmlException

from tracer.io.errors import SceneError

__all__ = ["PluginNode", "MISSING", "parse_file", "parse_string", "lookat_matrix", "rotation_matrix"]

OBJECT_TAGS = frozenset({"scene", "bsdf", "emitter", "shape", "texture", "sensor", "film", "rfilter",
                         "sampler", "integrator", "medium", "phase", "volume", "field"})
VALUE_TAGS = frozenset({"float", "integer", "boolean", "string", "rgb", "spectrum", "point", "vector"})
TRANSFORM_OPS = frozenset({"translate", "rotate", "scale", "lookat", "matrix"})
MAX_INCLUDE_DEPTH = 15


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
        return _inverse_transpose(matrix)

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



def parse_file(path, **params):
    """The root ``scene`` node of a Mitsuba 3 XML file; ``params`` override its ``<default>``s."""
    path = os.fspath(path)
    parser = _Parser(params, top_dir=os.path.dirname(os.path.abspath(path)))
    root = parser.run(lambda: parser.file_root(path, depth=0))
    return root


def parse_string(text, base_dir=".", **params):
    """Like ``parse_file`` for XML text; relative paths resolve against ``base_dir``."""
    base_dir = os.path.abspath(os.fspath(base_dir))
    parser = _Parser(params, top_dir=base_dir)
    data = text.encode() if isinstance(text, str) else bytes(text)
    return parser.run(lambda: parser.document_root(data, "<string>", base_dir, depth=0))


# ---------------------------------------------------------------------------------- transforms
def rotation_matrix(axis, angle_deg):
    """4x4 rotation by ``angle_deg`` degrees about ``axis`` (not normalized, as Mitsuba's)."""
    x, y, z = (float(a) for a in axis)
    s, c = math.sin(math.radians(angle_deg)), math.cos(math.radians(angle_deg))
    m = 1.0 - c
    return np.array([[x * x * m + c, x * y * m - z * s, x * z * m + y * s, 0.0],
                     [x * y * m + z * s, y * y * m + c, y * z * m - x * s, 0.0],
                     [x * z * m - y * s, y * z * m + x * s, z * z * m + c, 0.0],
                     [0.0, 0.0, 0.0, 1.0]])


def _coordinate_system(n):
    """First tangent of Duff et al. 2017, as Mitsuba's ``coordinate_system``."""
    sign = 1.0 if n[2] >= 0 else -1.0
    a = -1.0 / (sign + n[2])
    b = n[0] * n[1] * a
    return np.array([1.0 + sign * n[0] * n[0] * a, sign * b, -sign * n[0]])


def lookat_matrix(origin, target, up=None):
    """Camera-to-world matrix of Mitsuba's ``Transform4f::look_at`` (+z looks at the target)."""
    origin, target = np.asarray(origin, np.float64), np.asarray(target, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        direction = (target - origin) / np.linalg.norm(target - origin)
        if up is None or not np.any(np.asarray(up, np.float64)):
            up = _coordinate_system(direction)
        left = np.cross(up, direction)
        left = left / np.linalg.norm(left)
    new_up = np.cross(direction, left)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = left, new_up, direction, origin
    return m


# ---------------------------------------------------------------------------------- raw XML
class _Element:
    __slots__ = ("tag", "attrs", "line", "children")

    def __init__(self, tag, attrs, line):
        self.tag, self.attrs, self.line, self.children = tag, attrs, line, []


class _TreeBuilder(xml.sax.ContentHandler):
    """Elements with their line numbers (ElementTree drops them); text content is ignored."""

    def __init__(self):
        super().__init__()
        self.stack, self.root, self.locator = [], None, None

    def setDocumentLocator(self, locator):
        self.locator = locator

    def startElement(self, name, attrs):
        element = _Element(name, dict(attrs.items()), self.locator.getLineNumber() if self.locator else 0)
        if self.stack:
            self.stack[-1].children.append(element)
        else:
            self.root = element
        self.stack.append(element)

    def endElement(self, name):
        self.stack.pop()


def _read_xml(data, display):
    builder = _TreeBuilder()
    try:
        safe_sax.parseString(data, builder, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except xml.sax.SAXParseException as e:
        raise SceneError(f"malformed XML: {e.getMessage()}", f"{display}:{e.getLineNumber()}") from None
    except DefusedXmlException as e:
        line = builder.locator.getLineNumber() if builder.locator else None
        where = f"{display}:{line}" if line else display
        raise SceneError(f"refused XML entity or external reference ({type(e).__name__})", where) from None
    if builder.root is None:
        raise SceneError("empty XML document", display)
    return builder.root


# ---------------------------------------------------------------------------------- values
def _tokens(value):
    return [t for t in re.split(r"[\s,;]+", value.strip()) if t]


def _float(value, where):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SceneError(f"could not parse floating point value '{value}'", where) from None


def _floats(value, counts, where, what):
    tokens = _tokens(value)
    if len(tokens) not in counts:
        expected = " or ".join(str(c) for c in counts)
        raise SceneError(f"{what} needs {expected} values, got '{value}'", where)
    return np.array([_float(t, where) for t in tokens], np.float64)


def _xyz(attrs, default, where):
    """A 3-vector from ``value`` (1 or 3 numbers) or from ``x``/``y``/``z`` (missing -> default)."""
    if "value" in attrs:
        if any(k in attrs for k in "xyz"):
            raise SceneError("cannot mix 'value' and 'x'/'y'/'z' attributes", where)
        return np.broadcast_to(_floats(attrs["value"], (1, 3), where, "'value'"), (3,)).copy()
    return np.array([_float(attrs[k], where) if k in attrs else default for k in "xyz"])


def _check_attrs(el, attrs, where, required=(), optional=()):
    for key in attrs:
        if key not in required and key not in optional:
            raise SceneError(f"unexpected attribute '{key}' in <{el.tag}>", where)
    for key in required:
        if key not in attrs:
            raise SceneError(f"missing attribute '{key}' in <{el.tag}>", where)


def _check_version(el, attrs, where):
    version = attrs.get("version")
    if version is None:
        raise SceneError(f"missing version attribute in root element <{el.tag}>", where)
    match = re.fullmatch(r"\s*(\d+)(\.\d+){0,2}\s*", version)
    if not match:
        raise SceneError(f"invalid version number '{version}'", where)
    if int(match.group(1)) != 3:
        raise SceneError(f"scene version {version.strip()} is not supported: only Mitsuba 3 scenes "
                         "(version=\"3.x.y\") can be loaded", where)


# ---------------------------------------------------------------------------------- parser
class _File:
    """Where the elements of one XML file come from."""

    def __init__(self, display, directory, search):
        self.display, self.directory, self.search = display, directory, search

    def where(self, el):
        return f"{self.display}:{el.line}"


class _Ref:
    __slots__ = ("id", "where")

    def __init__(self, ref_id, where):
        self.id, self.where = ref_id, where


class _Parser:
    def __init__(self, params, top_dir):
        self.params = {str(k): str(v) for k, v in params.items()}
        self.top_dir = top_dir
        self.search = []          # folders of <path> tags, most recent first (shared by all files)
        self.ids = {}             # id -> PluginNode
        self.nodes = []           # every object node, for resolving refs

    def run(self, parse):
        root = parse()
        self._resolve_refs()
        return root

    # -- files
    def file_root(self, path, depth):
        if not os.path.isfile(path):
            raise SceneError("file not found", path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise SceneError(f"cannot read file: {e.strerror}", path) from None
        return self.document_root(data, path, os.path.dirname(os.path.abspath(path)), depth)

    def document_root(self, data, display, directory, depth):
        if depth >= MAX_INCLUDE_DEPTH:
            raise SceneError(f"<include> nested deeper than {MAX_INCLUDE_DEPTH} levels", display)
        el = _read_xml(data, display)
        source = _File(display, directory, self.search)
        attrs = self._substitute(el, source)
        _check_version(el, attrs, source.where(el))
        attrs.pop("version")
        if depth == 0 and el.tag != "scene":
            raise SceneError(f"the root element must be <scene>, got <{el.tag}>", source.where(el))
        return self._object(el, attrs, source, depth)

    # -- elements
    def _substitute(self, el, source):
        """Attributes of ``el`` with ``$name`` parameters replaced (Mitsuba's rules)."""
        out = {}
        for key, value in el.attrs.items():
            if "$" in value:
                value = self._substitute_value(value, source.where(el))
            out[key] = value
        return out

    def _substitute_value(self, value, where):
        for name in sorted(self.params, key=len, reverse=True):
            value = re.sub(r"(?<!\\)\$" + re.escape(name), lambda _, v=self.params[name]: v, value)
        leftover = re.search(r"(?<!\\)\$(\w*)", value)
        if leftover:
            raise SceneError(f"undefined parameter ${leftover.group(1)} (no <default> and no argument)", where)
        return value.replace("\\$", "$")

    def _object(self, el, attrs, source, depth):
        where = source.where(el)
        category = "texture" if el.tag == "spectrum" else el.tag
        if el.tag == "scene":
            _check_attrs(el, attrs, where, optional=("id", "name", "type"))
        else:
            _check_attrs(el, attrs, where, required=("type",), optional=("id", "name"))
        node = PluginNode(category=category, type=attrs.get("type", "") if el.tag != "scene" else "",
                          id=attrs.get("id"), name=attrs.get("name"), source=where,
                          source_dir=source.directory)
        node._search_dirs = (source.search, source.directory, self.top_dir)
        if node.id is not None:
            if node.id in self.ids:
                raise SceneError(f"duplicate id '{node.id}' (first defined at {self.ids[node.id].source})", where)
            self.ids[node.id] = node
        self.nodes.append(node)
        for child in el.children:
            self._member(child, source, node, depth)
        return node

    def _member(self, el, source, node, depth):
        """One child element of an object: a property, a nested object, a ref, or a directive."""
        where = source.where(el)
        attrs = self._substitute(el, source)
        tag = el.tag
        if tag in OBJECT_TAGS or (tag == "spectrum" and "type" in attrs):
            if tag == "scene":
                raise SceneError("<scene> can only be the root element", where)
            child = self._object(el, attrs, source, depth)
            node._add_child(child, attrs.get("name"), where)
        elif tag in VALUE_TAGS:
            _no_children(el, where)
            kind, value = _value(el, attrs, where)
            node._set(attrs["name"], kind, value, where)
        elif tag == "transform":
            _check_attrs(el, attrs, where, required=("name",))
            matrix, normal = np.eye(4), np.eye(4)
            for op in el.children:
                m, n = _transform_op(op, self._substitute(op, source), source.where(op))
                matrix, normal = m @ matrix, n @ normal
            node._set(attrs["name"], "transform", matrix, where)
            node._normal_matrices[attrs["name"]] = normal
        elif tag == "ref":
            _check_attrs(el, attrs, where, required=("id",), optional=("name",))
            _no_children(el, where)
            node._add_child(_Ref(attrs["id"], where), attrs.get("name"), where)
        elif tag == "default":
            _check_attrs(el, attrs, where, required=("name", "value"))
            if not attrs["name"]:
                raise SceneError("<default>: name must be non-empty", where)
            self.params.setdefault(attrs["name"], attrs["value"])
        elif tag == "include":
            _check_attrs(el, attrs, where, required=("filename",), optional=("name",))
            self._include(attrs, source, node, depth, where)
        elif tag == "alias":
            _check_attrs(el, attrs, where, required=("id", "as"))
            if attrs["as"] in self.ids:
                raise SceneError(f"alias destination id '{attrs['as']}' already exists", where)
            if attrs["id"] not in self.ids:
                raise SceneError(f"alias source id '{attrs['id']}' not found", where)
            self.ids[attrs["as"]] = self.ids[attrs["id"]]
        elif tag == "path":
            _check_attrs(el, attrs, where, required=("value",))
            if node.category != "scene":
                raise SceneError("<path> can only be a child of <scene>", where)
            folder = os.path.join(source.directory, attrs["value"])
            if not os.path.isdir(folder):
                raise SceneError(f"<path>: folder '{attrs['value']}' not found", where)
            self.search.insert(0, os.path.abspath(folder))
        elif tag in TRANSFORM_OPS:
            raise SceneError(f"<{tag}> can only appear inside a <transform>", where)
        else:
            raise SceneError(f"unknown tag <{tag}>", where)

    def _include(self, attrs, source, node, depth, where):
        filename = attrs["filename"]
        base = source.directory if source.display == "<string>" else os.path.dirname(source.display)
        path = filename if os.path.isabs(filename) else os.path.normpath(os.path.join(base, filename))
        if not os.path.isfile(path):
            raise SceneError(f"included file '{filename}' not found", where)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise SceneError(f"cannot read included file '{filename}': {e.strerror}", where) from None
        el = _read_xml(data, path)
        included = _File(path, os.path.dirname(os.path.abspath(path)), self.search)
        root_attrs = self._substitute(el, included)
        _check_version(el, root_attrs, included.where(el))
        root_attrs.pop("version")
        if depth + 1 >= MAX_INCLUDE_DEPTH:
            raise SceneError(f"<include> nested deeper than {MAX_INCLUDE_DEPTH} levels", where)
        if el.tag == "scene":
            _check_attrs(el, root_attrs, included.where(el), optional=("id", "name", "type"))
            for child in el.children:
                self._member(child, included, node, depth + 1)
        elif el.tag in OBJECT_TAGS:
            child = self._object(el, root_attrs, included, depth + 1)
            node._add_child(child, attrs.get("name"), where)
        else:
            raise SceneError(f"the root of an included file must be an object, got <{el.tag}>", included.where(el))

    # -- references
    def _resolve_refs(self):
        for node in self.nodes:
            for i, child in enumerate(node.children):
                if isinstance(child, _Ref):
                    if child.id not in self.ids:
                        raise SceneError(f"reference to undefined id '{child.id}'", child.where)
                    node.children[i] = self.ids[child.id]
        state = {}  # id(node) -> 1 while on the DFS stack, 2 when done

        def visit(node):
            state[id(node)] = 1
            for child in node.children:
                mark = state.get(id(child))
                if mark == 1:
                    raise SceneError(f"circular reference to id '{child.id}'", node.source)
                if mark is None:
                    visit(child)
            state[id(node)] = 2

        for node in self.nodes:
            if id(node) not in state:
                visit(node)


def _no_children(el, where):
    if el.children:
        raise SceneError(f"<{el.children[0].tag}> cannot occur inside <{el.tag}>", where)


def _value(el, attrs, where):
    """(kind, value) of a property tag."""
    tag = el.tag
    if tag in ("point", "vector"):
        _check_attrs(el, attrs, where, required=("name",), optional=("value", "x", "y", "z"))
        return tag, _xyz(attrs, 0.0, where)
    if tag == "spectrum":
        _check_attrs(el, attrs, where, required=("name",), optional=("value", "filename"))
        if "filename" in attrs or "value" not in attrs:
            raise SceneError("unsupported <spectrum>: only a single uniform value is supported "
                             "(this renderer works in RGB)", where)
        tokens = _tokens(attrs["value"])
        if len(tokens) != 1 or ":" in tokens[0]:
            raise SceneError("unsupported <spectrum> with wavelength:value pairs: only a single uniform value "
                             "is supported (this renderer works in RGB)", where)
        return "spectrum", np.full(3, _float(tokens[0], where))
    _check_attrs(el, attrs, where, required=("name", "value"))
    value = attrs["value"]
    if tag == "float":
        return "float", _float(value, where)
    if tag == "integer":
        if not re.fullmatch(r"\s*[+-]?\d+\s*", value):
            raise SceneError(f"could not parse integer value '{value}'", where)
        return "integer", int(value)
    if tag == "boolean":
        if value.strip().lower() not in ("true", "false"):
            raise SceneError(f"could not parse boolean value '{value}': must be 'true' or 'false'", where)
        return "boolean", value.strip().lower() == "true"
    if tag == "rgb":
        return "rgb", np.broadcast_to(_floats(value, (1, 3), where, "<rgb>"), (3,)).copy()
    return "string", value


def _transform_op(el, attrs, where):
    """(matrix, normal matrix) of one operation inside <transform>.

    The normal matrix is the inverse transpose that Mitsuba stores with it: exact for every
    operation except ``rotate`` about an axis that is not unit length, where Mitsuba keeps the
    (then not orthogonal) rotation matrix itself.
    """
    tag = el.tag
    _no_children(el, where)
    if tag == "translate":
        _check_attrs(el, attrs, where, optional=("value", "x", "y", "z"))
        m = np.eye(4)
        m[:3, 3] = _xyz(attrs, 0.0, where)
        return m, _inverse_transpose(m)
    if tag == "scale":
        _check_attrs(el, attrs, where, optional=("value", "x", "y", "z"))
        v = _xyz(attrs, 1.0, where)
        with np.errstate(divide="ignore"):
            return np.diag([*v, 1.0]), np.diag([*(1.0 / v), 1.0])
    if tag == "rotate":
        _check_attrs(el, attrs, where, required=("angle",), optional=("value", "x", "y", "z"))
        axis = _xyz(attrs, 0.0, where)
        if not np.any(axis):
            raise SceneError("rotation axis cannot be zero", where)
        m = rotation_matrix(axis, _float(attrs["angle"], where))
        return m, m
    if tag == "lookat":
        _check_attrs(el, attrs, where, required=("origin", "target"), optional=("up",))
        origin = _floats(attrs["origin"], (3,), where, "'origin'")
        target = _floats(attrs["target"], (3,), where, "'target'")
        up = _floats(attrs["up"], (3,), where, "'up'") if attrs.get("up", "").strip() else None
        m = lookat_matrix(origin, target, up)
        if not np.all(np.isfinite(m)):
            raise SceneError("invalid lookat transformation (origin equals target, or up is parallel "
                             "to the view direction)", where)
        return m, _inverse_transpose(m)
    if tag == "matrix":
        _check_attrs(el, attrs, where, required=("value",))
        values = _floats(attrs["value"], (16, 9), where, "<matrix>")
        m = np.eye(4)
        n = 4 if values.size == 16 else 3
        m[:n, :n] = values.reshape(n, n)
        return m, _inverse_transpose(m)
    raise SceneError(f"unexpected <{tag}> inside <transform>", where)


def _inverse_transpose(m):
    try:
        return np.linalg.inv(m).T
    except np.linalg.LinAlgError:
        return np.full((4, 4), np.nan)
