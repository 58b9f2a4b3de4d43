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
* ``<include>`` and ``<path>`` are looked for as Mitsuba's file resolver looks for them: next
  to the file that names them, then next to the files including it, in the ``<path>`` folders
  and next to the top file. An included ``scene`` root is spliced into the parent.
* ``version`` is three numbers (``util::Version``). Any is read; the plugins of a file older than
  2.0.0 are upgraded as Mitsuba 3's ``upgrade_from_v1`` does: camelCase parameter names become
  snake_case (``intIOR`` -> ``int_ior``), a diffuse ``diffuse_reflectance`` is its
  ``reflectance``, and ``uoffset``/``voffset``/``uscale``/``vscale`` become ``to_uv``.
* ``<spectrum>`` holds a uniform value, wavelength:value pairs, or a spectrum file read while
  parsing (a ``spectra.Spectrum``); ``PluginNode.get_rgb`` converts it as Mitsuba's RGB
  variants do.

Beyond Mitsuba (hostile input): numbers must be finite, integers fit 64 bits (32 when a plugin
reads them), plugins nest at most ``MAX_NESTING`` levels (through ``<ref>``s too), XML files are
at most ``MAX_XML_BYTES``, and a keyword argument that the scene neither declares as a
``<default>`` nor uses as ``$name`` is an error.

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

from tracer.io import reads, spectra
from tracer.errors import SceneError
from tracer.io.plugin_node import MISSING, PluginNode, resolve_path
from tracer.io.transforms import inverse_transpose, lookat_matrix, rotation_matrix

__all__ = ["PluginNode", "MISSING", "FileRef", "parse_file", "parse_string", "lookat_matrix", "rotation_matrix",
           "MAX_NESTING", "MAX_XML_BYTES"]

OBJECT_TAGS = frozenset({"scene", "bsdf", "emitter", "shape", "texture", "sensor", "film", "rfilter",
                         "sampler", "integrator", "medium", "phase", "volume", "field"})
VALUE_TAGS = frozenset({"float", "integer", "boolean", "string", "rgb", "spectrum", "point", "vector"})
TRANSFORM_OPS = frozenset({"translate", "rotate", "scale", "lookat", "matrix"})
MAX_INCLUDE_DEPTH = 15
MAX_NESTING = 100                 # plugins inside plugins, <ref>s followed
MAX_XML_BYTES = 256 << 20
LEGACY_VERSION = (2, 0, 0)        # files older than this are upgraded (upgrade_from_v1)
# Tags of Mitsuba 0.x that Mitsuba 3 no longer reads, and what it reads instead.
_OLD_TAGS = {"blackbody": '<spectrum type="blackbody" name=...> with <float name="temperature">',
             "srgb": "<rgb>", "cmulticolor": "<rgb>"}


@dataclasses.dataclass(frozen=True)
class FileRef:
    """A file that a scene names, in document order (``root.files``)."""

    kind: str            # 'xml' (the top file, an <include>), 'spectrum' (read while parsing), 'resource'
    name: str            # as written, after $ substitution
    where: str           # "file:line" of the tag that names it
    path: str | None     # absolute path; None for a resource, which its node resolves (get_path)
    node: PluginNode | None = None  # a resource's plugin; its parameter is 'filename'
    varies: bool = False  # its name (or a <path> folder) comes from a $parameter


def parse_file(path: str | os.PathLike[str], **params: object) -> PluginNode:
    """The root ``scene`` node of a Mitsuba 3 XML file; ``params`` override its ``<default>``s.

    The root also carries ``files`` (a tuple of ``FileRef``: the XML files, spectrum files and
    resources the scene names, in document order) and ``defaults`` (each ``<default>``'s name and
    value as written, the first of each name).
    """
    path = os.fspath(path)
    parser = _Parser(params, top_dir=os.path.dirname(os.path.abspath(path)))
    root = parser.run(lambda: parser.file_root(path, depth=0), path)
    return root


def parse_string(text: str | bytes, base_dir: str | os.PathLike[str] = ".", **params: object) -> PluginNode:
    """Like ``parse_file`` for XML text; relative paths resolve against ``base_dir``."""
    base_dir = os.path.abspath(os.fspath(base_dir))
    parser = _Parser(params, top_dir=base_dir)
    data = text.encode() if isinstance(text, str) else bytes(text)
    return parser.run(lambda: parser.document_root(data, "<string>", base_dir, depth=0), "<string>")


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


def _read_file(path, what, where):
    """The bytes of an XML file (at most ``MAX_XML_BYTES``)."""
    if not os.path.isfile(path):
        raise SceneError(f"{what} not found", where)
    try:
        if os.path.getsize(path) > MAX_XML_BYTES:
            raise SceneError(f"{what} is larger than {MAX_XML_BYTES >> 20} MiB", where)
        return reads.read_file(path)
    except OSError as e:
        raise SceneError(f"cannot read {what}: {e.strerror}", where) from None


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


def _clip(text, size=40):
    """``text`` for a one-line message: a 5,000-digit value is shown by its start."""
    text = str(text)
    return text if len(text) <= size else f"{text[:size]}... ({len(text)} characters)"


def _float(value, where, name=None):
    """A finite float; ``name``, the parameter's, goes into the message."""
    what = f"'{name}': " if name else ""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SceneError(f"{what}could not parse floating point value '{_clip(value)}'", where) from None
    if not math.isfinite(number):
        raise SceneError(f"{what}value '{_clip(value)}' is not a finite number", where)
    return number


def _integer(value, where, name=None):
    """Mitsuba's ``<integer>``: a signed 64-bit integer, surrounded by white space or not."""
    text = value.strip()
    if not re.fullmatch(r"[+-]?\d{1,19}", text) or not -2**63 <= int(text) < 2**63:
        what = f"'{name}': " if name else ""
        raise SceneError(f"{what}could not parse integer value '{_clip(value)}' (a 64-bit integer)", where)
    return int(text)


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


def _version(el, attrs, where):
    """The root's ``version`` (taken out of ``attrs``) as (major, minor, patch), as Mitsuba's
    ``util::Version`` reads it: three numbers separated by periods or spaces."""
    version = attrs.pop("version", None)
    if version is None:
        raise SceneError(f"missing version attribute in root element <{el.tag}>", where)
    parts = [p for p in re.split(r"[ .]", version) if p]
    if len(parts) != 3 or not all(re.fullmatch(r"\d{1,9}", p) for p in parts):
        raise SceneError(f"invalid version number '{_clip(version)}' (expected MAJOR.MINOR.PATCH)", where)
    return tuple(int(p) for p in parts)


def _snake_case(name):
    """Mitsuba's ``camel_to_underscore_case``: 'intIOR' -> 'int_ior', 'toWorld' -> 'to_world'."""
    out, i = [], 0
    while i < len(name):
        c = name[i]
        if i > 0 and name[i - 1] in _LOWER and c in _UPPER:
            out.append("_" + c.lower())
            while i + 1 < len(name) and name[i + 1] in _UPPER:
                i += 1
                out.append(name[i].lower())
        else:
            out.append(c)
        i += 1
    return "".join(out)


_LOWER, _UPPER = frozenset("abcdefghijklmnopqrstuvwxyz"), frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _upgrade_v1(node):
    """Mitsuba 3's ``upgrade_from_v1`` of one plugin of a file older than 2.0.0."""
    for name in node.parameter_names():
        if _snake_case(name) != name:
            node.rename(name, _snake_case(name))
    if node.type == "diffuse" and "diffuse_reflectance" in node.parameter_names():
        node.rename("diffuse_reflectance", "reflectance")
    uv = [n for n in ("uoffset", "voffset", "uscale", "vscale") if n in node.props]
    if uv:
        where = node.where(uv[0])
        values = {}
        for name in uv:
            if node.kind_of(name) not in ("float", "integer"):
                raise SceneError(f"{node.describe()}: parameter '{name}' must be a float", node.where(name))
            values[name] = float(node.remove(name))
        scale = np.diag([values.get("uscale", 1.0), values.get("vscale", 1.0), 1.0, 1.0])
        translate = np.eye(4)
        translate[:2, 3] = values.get("uoffset", 0.0), values.get("voffset", 0.0)
        node.add_property("to_uv", "transform", scale @ translate, where)


# ---------------------------------------------------------------------------------- parser
class _File:
    """Where the elements of one XML file come from."""

    def __init__(self, display, directory, search, version=(3, 0, 0)):
        self.display, self.directory, self.search = display, directory, search
        self.legacy = version < LEGACY_VERSION   # its plugins are upgraded (upgrade_from_v1)

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
        self.include_dirs = []    # folders of the files being included, outermost first
        self.ids = {}             # id -> PluginNode
        self.nodes = []           # every object node, for resolving refs
        self.arguments = set(self.params)  # names given by the caller
        self.used = set()         # parameter names substituted somewhere
        self.defaults = {}        # <default> name -> value, the first of each name
        self.files = []           # FileRef, in document order
        self.path_varies = False  # a <path> folder comes from a $parameter

    def run(self, parse, display):
        root = parse()
        self._resolve_refs()
        unknown = sorted(self.arguments - self.used - set(self.defaults))
        if unknown:
            raise SceneError(f"unknown scene parameter '{unknown[0]}' (the scene has no <default> or "
                             f"${unknown[0]} of that name)", display)
        if self.path_varies:
            self.files = [dataclasses.replace(f, varies=True) if f.kind != "xml" else f for f in self.files]
        root.files, root.defaults = tuple(self.files), dict(self.defaults)
        return root

    # -- files
    def file_root(self, path, depth):
        data = _read_file(path, "file", path)
        self.files.append(FileRef("xml", path, path, os.path.abspath(path)))
        return self.document_root(data, path, os.path.dirname(os.path.abspath(path)), depth)

    def document_root(self, data, display, directory, depth):
        if depth >= MAX_INCLUDE_DEPTH:
            raise SceneError(f"<include> nested deeper than {MAX_INCLUDE_DEPTH} levels", display)
        el = _read_xml(data, display)
        attrs = self._substitute(el, _File(display, directory, self.search))
        source = _File(display, directory, self.search, _version(el, attrs, f"{display}:{el.line}"))
        if depth == 0 and el.tag != "scene":
            raise SceneError(f"the root element must be <scene>, got <{el.tag}>", source.where(el))
        return self._object(el, attrs, source, depth, level=0)

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
            value, count = re.subn(r"(?<!\\)\$" + re.escape(name), lambda _, v=self.params[name]: v, value)
            if count:
                self.used.add(name)
        leftover = re.search(r"(?<!\\)\$(\w*)", value)
        if leftover:
            raise SceneError(f"undefined parameter ${leftover.group(1)} (no <default> and no argument)", where)
        return value.replace("\\$", "$")

    def _object(self, el, attrs, source, depth, level):
        where = source.where(el)
        if level >= MAX_NESTING:
            raise SceneError(f"plugins nested deeper than {MAX_NESTING} levels", where)
        category = "texture" if el.tag == "spectrum" else el.tag
        if el.tag == "scene":
            _check_attrs(el, attrs, where, optional=("id", "name", "type"))
        else:
            _check_attrs(el, attrs, where, required=("type",), optional=("id", "name"))
        node = PluginNode(category=category, type=attrs.get("type", "") if el.tag != "scene" else "",
                          id=attrs.get("id"), name=attrs.get("name"), source=where,
                          source_dir=source.directory, search_dirs=(source.search, source.directory, self.top_dir))
        if node.id is not None:
            if node.id in self.ids:
                raise SceneError(f"duplicate id '{node.id}' (first defined at {self.ids[node.id].source})", where)
            self.ids[node.id] = node
        self.nodes.append(node)
        for child in el.children:
            self._member(child, source, node, depth, level)
        if source.legacy:
            _upgrade_v1(node)
        return node

    def _member(self, el, source, node, depth, level):
        """One child element of an object: a property, a nested object, a ref, or a directive."""
        where = source.where(el)
        attrs = self._substitute(el, source)
        tag = el.tag
        if tag in OBJECT_TAGS or (tag == "spectrum" and "type" in attrs):
            if tag == "scene":
                raise SceneError("<scene> can only be the root element", where)
            child = self._object(el, attrs, source, depth, level + 1)
            node.add_child(child, attrs.get("name"), where)
        elif tag == "spectrum":
            _check_attrs(el, attrs, where, required=("name",), optional=("value", "filename"))
            _no_children(el, where)
            node.add_property(attrs["name"], "spectrum", self._spectrum(attrs, source, where, _varies(el, "filename")), where)
        elif tag in VALUE_TAGS:
            _no_children(el, where)
            kind, value = _value(el, attrs, where)
            node.add_property(attrs["name"], kind, value, where)
            if kind == "string" and attrs["name"] == "filename":
                self.files.append(FileRef("resource", value, where, None, node, _varies(el, "value")))
        elif tag == "transform":
            _check_attrs(el, attrs, where, required=("name",))
            matrix, normal = np.eye(4), np.eye(4)
            for op in el.children:
                m, n = _transform_op(op, self._substitute(op, source), source.where(op))
                with np.errstate(over="ignore", invalid="ignore"):  # checked below
                    matrix, normal = m @ matrix, n @ normal
            if not np.all(np.isfinite(matrix)):
                raise SceneError(f"transform '{attrs['name']}' is not finite (its operations overflow)", where)
            node.add_transform(attrs["name"], matrix, normal, where)
        elif tag == "ref":
            _check_attrs(el, attrs, where, required=("id",), optional=("name",))
            _no_children(el, where)
            node.add_child(_Ref(attrs["id"], where), attrs.get("name"), where)
        elif tag == "default":
            _check_attrs(el, attrs, where, required=("name", "value"))
            if not attrs["name"]:
                raise SceneError("<default>: name must be non-empty", where)
            self.params.setdefault(attrs["name"], attrs["value"])
            self.defaults.setdefault(attrs["name"], attrs["value"])
        elif tag == "include":
            _check_attrs(el, attrs, where, required=("filename",), optional=("name",))
            self._include(el, attrs, source, node, depth, level, where)
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
            folder = self._find(attrs["value"], source, os.path.isdir)
            if folder is None:
                raise SceneError(f"<path>: folder '{attrs['value']}' not found", where)
            self.search.insert(0, os.path.abspath(folder))
            self.path_varies |= _varies(el, "value")
        elif tag in TRANSFORM_OPS:
            raise SceneError(f"<{tag}> can only appear inside a <transform>", where)
        elif tag in _OLD_TAGS:
            raise SceneError(f"unknown tag <{tag}> (a Mitsuba 0.x tag; Mitsuba 3 reads {_OLD_TAGS[tag]})", where)
        else:
            raise SceneError(f"unknown tag <{_clip(tag)}>", where)

    def _spectrum(self, attrs, source, where, varies):
        """The ``spectra.Spectrum`` of a ``<spectrum>`` property (a file is read now, as Mitsuba)."""
        if ("value" in attrs) == ("filename" in attrs):
            raise SceneError("<spectrum> needs either a 'value' or a 'filename' attribute (not both)", where)
        try:
            if "value" in attrs:
                return spectra.parse_spectrum(attrs["value"])
            path = resolve_path(attrs["filename"], source.search, source.directory, self.top_dir)
            if not os.path.isfile(path):
                raise SceneError(f"spectrum file '{attrs['filename']}' not found", where)
            self.files.append(FileRef("spectrum", attrs["filename"], where, path, varies=varies))
            return spectra.read_spectrum_file(path)
        except ValueError as e:
            what = f"spectrum file '{attrs['filename']}'" if "filename" in attrs else "<spectrum>"
            raise SceneError(f"{what}: {e}", where) from None

    def _find(self, name, source, exists):
        """Where Mitsuba's file resolver finds an <include> or <path> ``name`` while ``source`` is
        read: in the folder of that file, of the files that include it, of <path> tags, of the
        top file (the first where ``exists``); None if nowhere."""
        if os.path.isabs(name):
            return name if exists(name) else None
        own = source.directory if source.display == "<string>" else os.path.dirname(source.display)
        for folder in (own, *reversed(self.include_dirs), *self.search, self.top_dir):
            if exists(os.path.join(folder, name)):
                return os.path.normpath(os.path.join(folder, name))
        return None

    def _include(self, el, attrs, source, node, depth, level, where):
        filename = attrs["filename"]
        path = self._find(filename, source, os.path.isfile)
        if path is None:
            raise SceneError(f"included file '{filename}' not found", where)
        if depth + 1 >= MAX_INCLUDE_DEPTH:
            raise SceneError(f"<include> nested deeper than {MAX_INCLUDE_DEPTH} levels", where)
        data = _read_file(path, f"included file '{filename}'", where)
        self.files.append(FileRef("xml", filename, where, os.path.abspath(path), varies=_varies(el, "filename")))
        el = _read_xml(data, path)
        root_attrs = self._substitute(el, _File(path, os.path.dirname(os.path.abspath(path)), self.search))
        version = _version(el, root_attrs, f"{path}:{el.line}")
        included = _File(path, os.path.dirname(os.path.abspath(path)), self.search, version)
        self.include_dirs.append(included.directory)
        if el.tag == "scene":
            _check_attrs(el, root_attrs, included.where(el), optional=("id", "name", "type"))
            for child in el.children:
                self._member(child, included, node, depth + 1, level)
        elif el.tag in OBJECT_TAGS:
            child = self._object(el, root_attrs, included, depth + 1, level + 1)
            node.add_child(child, attrs.get("name"), where)
        else:
            raise SceneError(f"the root of an included file must be an object, got <{el.tag}>", included.where(el))
        self.include_dirs.pop()

    # -- references
    def _resolve_refs(self):
        for node in self.nodes:
            for i, child in enumerate(node.children):
                if isinstance(child, _Ref):
                    if child.id not in self.ids:
                        raise SceneError(f"reference to undefined id '{child.id}'", child.where)
                    node.children[i] = self.ids[child.id]
        self._check_graph()

    def _check_graph(self):
        """No circular references, and no chain of nested plugins deeper than ``MAX_NESTING``
        once refs are followed (iteratively: a chain of 3,000 refs must not exhaust Python's
        stack here, nor in the builders that recurse through it later)."""
        height = {}  # id(node) -> plugins on the longest chain from it down, once done
        for start in self.nodes:
            if id(start) in height:
                continue
            stack, on_stack = [(start, iter(start.children))], {id(start)}
            while stack:
                node, pending = stack[-1]
                child = next(pending, None)
                if child is None:
                    stack.pop()
                    on_stack.discard(id(node))
                    height[id(node)] = 1 + max((height[id(c)] for c in node.children), default=0)
                    if height[id(node)] > MAX_NESTING:
                        raise SceneError(f"plugins nested deeper than {MAX_NESTING} levels (following <ref>s)",
                                         node.source)
                elif id(child) in on_stack:
                    raise SceneError(f"circular reference to id '{child.id}'", node.source)
                elif id(child) not in height:
                    stack.append((child, iter(child.children)))
                    on_stack.add(id(child))


def _varies(el, key):
    """Whether attribute ``key`` of ``el`` names a $parameter (before substitution)."""
    return re.search(r"(?<!\\)\$", el.attrs.get(key, "")) is not None


def _no_children(el, where):
    if el.children:
        raise SceneError(f"<{el.children[0].tag}> cannot occur inside <{el.tag}>", where)


def _value(el, attrs, where):
    """(kind, value) of a property tag other than ``<spectrum>``."""
    tag = el.tag
    if tag in ("point", "vector"):
        _check_attrs(el, attrs, where, required=("name",), optional=("value", "x", "y", "z"))
        return tag, _xyz(attrs, 0.0, where)
    _check_attrs(el, attrs, where, required=("name", "value"))
    value = attrs["value"]
    if tag == "float":
        return "float", _float(value, where, attrs["name"])
    if tag == "integer":
        return "integer", _integer(value, where, attrs["name"])
    if tag == "boolean":
        if value.strip().lower() not in ("true", "false"):
            raise SceneError(f"could not parse boolean value '{_clip(value)}': must be 'true' or 'false'", where)
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
