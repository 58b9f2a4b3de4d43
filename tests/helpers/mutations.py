"""Mutations the fuzzers apply (``tests/farm/test_cli_fuzz.py``, ``tests/tracer/test_scene_fuzz.py``).

A mutation is ``(kind, where, what)``: ``where`` (taken modulo what there is) picks the byte,
token, element or attribute, ``what`` picks the bit, the byte or the value from a list. Each
function returns new bytes and never fails on what it is given.
"""
import copy
import re
import xml.etree.ElementTree as ET

__all__ = ["BYTE_KINDS", "NUMBERS", "mutate_bytes", "mutate_number", "mutate_xml", "XML_KINDS"]

BYTE_KINDS = ("flip", "byte", "truncate", "insert")
# Numbers no scene can mean, numbers at the edges of int32 and float32, and ordinary ones in
# the wrong place.
NUMBERS = ("nan", "inf", "-inf", "0", "-0", "-1", "-3", "1e-30", "1e30", "3e38", "1e300", "2147483648",
           "4294967295", "-2147483649", "2.5", "180", "1e6", "65536", "1" * 400)
XML_KINDS = ("number", "string", "delete", "duplicate", "retype", "retag", "ref", "move")
# Values of the wrong kind for any attribute, and $parameters that do not exist.
STRINGS = ("", "x", "true", "$nothing", "1 2", "1, 2, 3, 4", "\\$x", "../" * 40 + "etc/passwd", "é" * 300)
# Plugin types of every category, for any plugin: wrong plugin types, and unsupported ones.
PLUGIN_TYPES = ("diffuse", "twosided", "blendbsdf", "mask", "null", "dielectric", "roughconductor", "plastic",
                "principled", "normalmap", "sphere", "rectangle", "ply", "obj", "cube", "instance", "area", "point",
                "envmap", "constant", "spot", "bitmap", "checkerboard", "mesh_attribute", "perspective",
                "thinlens", "orthographic", "path", "direct", "moment", "volpath", "box", "gaussian", "tent",
                "hdrfilm", "independent", "stratified", "ldsampler", "srgb", "d65", "blackbody", "homogeneous")
TAGS = ("float", "integer", "boolean", "string", "rgb", "spectrum", "point", "vector", "transform", "bsdf",
        "shape", "texture", "emitter", "sensor", "film", "rfilter", "sampler", "integrator", "ref", "lookat",
        "scale", "include", "default", "path", "alias", "medium", "scene")


def mutate_bytes(data, kind, where, what):
    """``data`` with one bit flipped, one byte replaced or inserted (``what``), or cut at ``where``."""
    if not data:
        return bytes([what % 256])
    i = where % len(data)
    if kind == "flip":
        return data[:i] + bytes([data[i] ^ (1 << (what % 8))]) + data[i + 1:]
    if kind == "byte":
        return data[:i] + bytes([what % 256]) + data[i + 1:]
    if kind == "insert":
        return data[:i] + bytes([what % 256]) + data[i:]
    return data[:i]


_NUMBER = re.compile(rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def mutate_number(data, where, what, end=None):
    """``data`` with its ``where``-th number token (in ``data[:end]``) replaced by ``NUMBERS[what]``."""
    found = list(_NUMBER.finditer(data[:end]))
    if not found:
        return mutate_bytes(data, "byte", where, what)
    m = found[where % len(found)]
    return data[:m.start()] + NUMBERS[what % len(NUMBERS)].encode() + data[m.end():]


def mutate_xml(data, kind, where, what):
    """Scene XML ``data`` (bytes) with one structural mutation of ``XML_KINDS``; XML that no longer
    parses (after a byte mutation) gets a byte mutation instead."""
    try:
        root = ET.fromstring(data.decode())
    except (UnicodeDecodeError, ET.ParseError):
        return mutate_bytes(data, "byte", where, what)
    parents = {child: parent for parent in root.iter() for child in parent}
    elements = list(parents)  # document order, the root left out
    if not elements:
        return data
    el = elements[where % len(elements)]
    attributes = [(e, key) for e in [root, *elements] for key in e.attrib]
    if kind == "number":
        numeric = [(e, k) for e, k in attributes if _NUMBER.search(e.attrib[k].encode())]
        if numeric:
            e, k = numeric[where % len(numeric)]
            e.attrib[k] = mutate_number(e.attrib[k].encode(), what // len(NUMBERS), what).decode()
    elif kind == "string":
        e, k = attributes[where % len(attributes)]
        e.attrib[k] = STRINGS[what % len(STRINGS)]
    elif kind == "delete":
        parents[el].remove(el)
    elif kind == "duplicate":
        parent = parents[el]
        parent.insert(list(parent).index(el) + 1, copy.deepcopy(el))
    elif kind == "retype":
        el.attrib["type"] = PLUGIN_TYPES[what % len(PLUGIN_TYPES)]
    elif kind == "retag":
        el.tag = TAGS[what % len(TAGS)]
    elif kind == "ref":
        _mutate_ref(root, parents, elements, el, what)
    elif kind == "move":
        target = [root, *elements][what % (len(elements) + 1)]
        if el not in target.iter():  # not into itself
            parents[el].remove(el)
            target.append(el)
    return ET.tostring(root, encoding="unicode").encode()


def _mutate_ref(root, parents, elements, el, what):
    """Replace ``el`` by a <ref> to an id (one that exists, or not), or make it refer to itself
    or to an ancestor (a cycle)."""
    ids = [e.attrib["id"] for e in elements if "id" in e.attrib]
    choice = what % 3
    if choice == 0 or not ids:  # a ref to el itself, from inside el: a cycle
        el.attrib.setdefault("id", "self")
        el.append(ET.Element("ref", id=el.attrib["id"]))
    elif choice == 1:
        parent = parents[el]
        ref = ET.Element("ref", id=ids[what % len(ids)], **({"name": el.attrib["name"]} if "name" in el.attrib else {}))
        parent.insert(list(parent).index(el), ref)
        parent.remove(el)
    else:
        el.append(ET.Element("ref", id="missing" if what % 2 else ids[(what // 3) % len(ids)]))
