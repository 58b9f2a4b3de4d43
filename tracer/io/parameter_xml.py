"""A Mitsuba 3 scene file with parameter values written in (host only): what ``farm export`` of an
optimization writes, so that the fitted scene renders in Mitsuba or here as it is.

A key (``tracer.scene_parameters``' names, Mitsuba's ``mi.traverse`` keys) is found as Mitsuba
names it: the object with the key's first part as its ``id``, then nested objects by their
``name`` (``reflectance`` of a checkerboard), by their tag (a shape's ``bsdf``, ``emitter``) or by
their place (``brdf_0``, ``bsdf_1``: a twosided's or blend's N-th BSDF), a ``<ref>`` followed to
what it names; then its property, whose value is replaced (an ``<rgb>`` for three values, a
``<float>`` for one), or added where the file left it at its default. A bitmap's texels
(``....data``) cannot be written into XML: they are left out (``write_parameters`` returns them).
Relative file names are made absolute, so that the file can be written anywhere.
"""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from defusedxml.ElementTree import parse as safe_parse

__all__ = ["write_parameters"]

_PLACE = re.compile(r"^(brdf|bsdf)_(\d+)$")


def _by_id(root: ET.Element) -> dict[str, ET.Element]:
    return {e.get("id", ""): e for e in root.iter() if e.get("id") and e.tag != "ref"}


def _child(element: ET.Element, part: str, ids: Mapping[str, ET.Element]) -> ET.Element | None:
    """The nested object ``part`` of ``element`` (refs followed)."""
    children = [ids.get(c.get("id", ""), c) if c.tag == "ref" else c for c in element]
    for c in children:
        if c.get("name") == part:
            return c
    for c in children:
        if c.tag == part:
            return c
    place = _PLACE.match(part)
    if place:
        bsdfs = [c for c in children if c.tag == "bsdf"]
        n = int(place.group(2))
        return bsdfs[n] if n < len(bsdfs) else None
    return None


def _set(element: ET.Element, name: str, values: Sequence[float]) -> None:
    text = ", ".join(repr(float(v)) for v in values)
    tag = "float" if len(values) == 1 else "rgb"
    for c in element:
        if c.get("name") == name and c.tag in ("rgb", "float", "spectrum"):
            c.tag = tag
            c.attrib = {"name": name, "value": text}
            return
    ET.SubElement(element, tag, {"name": name, "value": text})


def _absolute_files(root: ET.Element, folder: str) -> None:
    for e in root.iter():
        is_file = (e.tag == "string" and e.get("name") == "filename") or e.tag == "include"
        value = e.get("value" if e.tag == "string" else "filename")
        if is_file and value and not value.startswith("$") and not os.path.isabs(value):
            e.set("value" if e.tag == "string" else "filename", os.path.normpath(os.path.join(folder, value)))


def write_parameters(scene_path: str, values: Mapping[str, Sequence[float]], out_path: str) -> list[str]:
    """Write the scene at ``scene_path`` with ``values`` (key -> flat values) written in to
    ``out_path``; returns the keys that could not be written (a bitmap's texels, or a key whose
    object the file does not name)."""
    tree = safe_parse(scene_path)
    root = tree.getroot()
    ids = _by_id(root)
    left_out = []
    for key, flat in values.items():
        parts = key.split(".")
        if parts[-1] == "data":
            left_out.append(key)
            continue
        path, name = (parts[:-2], parts[-2]) if parts[-1] == "value" else (parts[:-1], parts[-1])
        element = ids.get(path[0]) if path else None
        for part in path[1:]:
            element = _child(element, part, ids) if element is not None else None
        if element is None:
            left_out.append(key)
            continue
        _set(element, name, list(flat))
    _absolute_files(root, os.path.dirname(os.path.abspath(scene_path)))
    ET.indent(tree)
    tree.write(out_path, encoding="unicode", xml_declaration=False)
    return left_out
