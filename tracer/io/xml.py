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
import os
import re
import xml.sax

import numpy as np
from defusedxml import sax as safe_sax
from defusedxml.common import DefusedXmlException

from tracer.io.errors import SceneError
from tracer.io.plugin_node import MISSING, PluginNode
from tracer.io.transforms import inverse_transpose, lookat_matrix, rotation_matrix

__all__ = ["PluginNode", "MISSING", "parse_file", "parse_string", "lookat_matrix", "rotation_matrix"]

OBJECT_TAGS = frozenset({"scene", "bsdf", "emitter", "shape", "texture", "sensor", "film", "rfilter",
                         "sampler", "integrator", "medium", "phase", "volume", "field"})
VALUE_TAGS = frozenset({"float", "integer", "boolean", "string", "rgb", "spectrum", "point", "vector"})
TRANSFORM_OPS = frozenset({"translate", "rotate", "scale", "lookat", "matrix"})
MAX_INCLUDE_DEPTH = 15


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
        return m, inverse_transpose(m)
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
        return m, inverse_transpose(m)
    if tag == "matrix":
        _check_attrs(el, attrs, where, required=("value",))
        values = _floats(attrs["value"], (16, 9), where, "<matrix>")
        m = np.eye(4)
        n = 4 if values.size == 16 else 3
        m[:n, :n] = values.reshape(n, n)
        return m, inverse_transpose(m)
    raise SceneError(f"unexpected <{tag}> inside <transform>", where)
