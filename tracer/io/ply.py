"""PLY meshes as Mitsuba 3.9's ``ply`` plugin reads them (``src/shapes/ply.cpp``, ``ply.h``).

Host only (numpy). Conventions checked against Mitsuba 3.9.1:

* Vertices: x/y/z; nx/ny/nz, normalized (not read with ``face_normals``); uvs from u/v, else
  texture_u/texture_v, else s/t, not flipped unless ``flip_tex_coords``.
* Every other vertex and face property becomes a mesh attribute the way Mitsuba groups them
  (``find_other_fields``): r/g/b[/a] or red/green/blue[/alpha] is ``{vertex|face}_color``; a run
  of 1 or 3 fields ``{prefix}_{x|r|0|1}``, ``_{y|g|1|2}``, ``_{z|b|2|3}`` is
  ``{vertex|face}_{prefix}`` (``..._color`` for the r/g/b postfixes); anything else is skipped, as
  Mitsuba skips it with a warning.
* Values are float32. Integer properties (positions and normals too) go through Mitsuba's
  conversion: char, short, ushort, int, uint and ulong are divided by their type's maximum and
  then decoded from sRGB to linear; uchar and long keep their values (``_as_float``).
* ASCII values are parsed by their declared type, as Mitsuba's ``parse_ascii``: an integer
  property takes integer literals in its type's range only (so a list count of ``2.5`` is an
  error), ``float`` rounds the decimal once to float32, ``double`` to float64 (then float32).
* Mitsuba reads triangles only (a face of another length is an error there); polygons are fans
  (0, i, i + 1) here, and a polygon's face attributes repeat over its triangles.
* Stricter than Mitsuba: a normal that cannot be normalized is an error (Mitsuba's PLY loader
  makes it NaN; its OBJ loader refuses it with this message), as are non-finite values in the
  properties a mesh uses, list counts that are not non-negative integers, and face indices out
  of range.

A record with a list has a variable size. ``_record_starts`` finds every record of an element
without a loop over records: runs of equal size in one step, and mixed sizes (triangles among
quads) by pointer doubling over a window of the file: a record's start determines its end, so
the starts are the orbit of the first start under "end of the record starting here", found in
log2(records) vectorized steps.
"""
import os
import warnings
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from tracer.errors import SceneError
from tracer.io.meshes import Mesh, check_faces, fans, read_bytes, unit_normals

__all__ = ["load_ply"]

_TYPES = {"char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
          "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
          "long": "i8", "int64": "i8", "ulong": "u8", "uint64": "u8", "half": "f2", "float16": "f2",
          "float": "f4", "float32": "f4", "double": "f8", "float64": "f8"}
_UV_NAMES = (("u", "v"), ("texture_u", "texture_v"), ("s", "t"))
_WINDOW = 1 << 20  # units (bytes or ascii values) searched at once for mixed-size records


def _byte_table(chars):
    table = np.zeros(256, bool)
    table[np.frombuffer(chars, np.uint8)] = True
    return table


_BYTES_SPACE = _byte_table(b" \t\n\r\v\f")
_BYTES_NUMBER = _byte_table(b"0123456789+-.eE")
_BYTES_DIGIT = _byte_table(b"0123456789")
_BYTES_SIGN = _byte_table(b"+-")


class _Property(NamedTuple):
    name: str
    type: str               # numpy type code of the value, or of a list's items
    count_type: str | None  # a list's count type; None for a scalar


class _Element(NamedTuple):
    name: str
    count: int  # type: ignore[assignment]  # shadows tuple.count: the header's element count, by name
    properties: list


def load_ply(path: str | os.PathLike[str], face_normals: bool = False, flip_tex_coords: bool = False) -> Mesh:
    """Object-space ``Mesh`` of a PLY file (ascii or binary), with Mitsuba's mesh attributes."""
    path = os.fspath(path)
    data = read_bytes(path)
    fmt, elements, body = _header(data, path)
    source = _Ascii(data[body:], path) if fmt == "ascii" else _Binary(data, fmt == "binary_big_endian", path)
    offset = 0 if fmt == "ascii" else body
    values = {}
    for element in elements:
        if element.name in values:
            raise SceneError(f"PLY header declares element '{element.name}' twice", path)
        values[element.name], offset = _read_element(source, offset, element, path)
    if offset != source.size:
        raise SceneError("invalid PLY file: trailing content after the last element", path)
    return _mesh(values, elements, path, face_normals, flip_tex_coords)


def _header(data, path):
    """(format, [_Element], offset of the body)."""
    end = data.find(b"end_header")
    newline = data.find(b"\n", end)
    if not data.startswith(b"ply") or end < 0 or newline < 0 or data[end + 10:newline].strip():
        raise SceneError("not a PLY file (no 'ply' ... 'end_header' header)", path)
    fmt, elements = None, []
    for line in data[:end].decode("ascii", errors="replace").splitlines()[1:]:
        words = line.split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "format" and len(words) == 3 and words[2] == "1.0":
            fmt = words[1]
        elif words[0] == "element" and len(words) == 3 and words[2].isdigit() and words[2].isascii():
            elements.append(_Element(words[1], int(words[2]), []))
        elif words[0] == "property" and elements and len(words) == 3 and words[1] in _TYPES:
            elements[-1].properties.append(_Property(words[2], _TYPES[words[1]], None))
        elif (words[0] == "property" and elements and len(words) == 5 and words[1] == "list"
              and words[2] in _TYPES and words[3] in _TYPES):
            elements[-1].properties.append(_Property(words[4], _TYPES[words[3]], _TYPES[words[2]]))
        else:
            raise SceneError(f"invalid PLY header line '{line.strip()[:80]}'", path)
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise SceneError("PLY header has no valid 'format' line", path)
    return fmt, elements, newline + 1


# ---------------------------------------------------------------------------------- bodies
class _Binary:
    """A binary body: positions are byte offsets into the file."""

    def __init__(self, data, big_endian, path):
        self.data, self.size, self.path = data, len(data), path
        self.order = ">" if big_endian else "<"

    def unit(self, code):
        return np.dtype(code).itemsize

    def _at(self, positions, code):
        """Values of type ``code`` at byte offsets (each readable), through a view that starts a
        value at every byte."""
        dtype = np.dtype(self.order + code)
        every_byte = np.ndarray((max(self.size - dtype.itemsize + 1, 0),), dtype, self.data, 0, (1,))
        return every_byte[positions]

    def counts(self, positions, code):
        """List counts at ``positions`` (int64), -1 where unreadable or not a count."""
        readable = positions + self.unit(code) <= self.size
        raw = self._at(np.where(readable, positions, 0), code)
        ok = readable & (raw >= 0) & (raw <= self.size)
        if code[0] == "f":
            ok &= np.isfinite(raw) & (raw == np.floor(raw))
        return np.where(ok, np.where(ok, raw, 0).astype(np.int64), -1)

    def read(self, positions, code, name):
        """Values at ``positions``, in their type (native byte order)."""
        return self._at(positions, code).astype(code)


class _Ascii:
    """An ascii body: positions are indices of its whitespace-separated values."""

    def __init__(self, body, path):
        self.path = path
        text = np.frombuffer(body, np.uint8)
        space = _BYTES_SPACE[text]
        self.first = np.flatnonzero(~space & np.concatenate([[True], space[:-1]]))  # each value's first byte
        self.stop = np.flatnonzero(~space & np.concatenate([space[1:], [True]])) + 1  # one past its last
        # Per value (bytes counted up to the next value: the spaces between add nothing): bytes
        # that are not digits, signs, '.', 'e' or 'E' (nan, inf and hex, which Mitsuba's stream
        # parse refuses), and bytes that are not digits (integer properties).
        per_value = lambda mask: (np.add.reduceat(mask, self.first, dtype=np.int32) if self.first.size
                                  else np.zeros(0, np.int32))
        values = None
        if not np.any(per_value(~_BYTES_NUMBER[text] & ~space)):
            values = _parse_numbers(body)
        if values is None or values.size != self.first.size:
            raise SceneError("malformed ascii PLY body (a value is not a number)", path)
        self.values, self.body, self.size = values, body, values.size
        self.nondigit = per_value(~_BYTES_DIGIT[text] & ~space)
        self.signed = _BYTES_SIGN[text[self.first]]

    def unit(self, code):
        return 1

    def counts(self, positions, code):
        readable = positions < self.size
        raw = self.values[np.where(readable, positions, 0)]
        ok = readable & (raw >= 0) & (raw <= self.size) & (raw == np.floor(raw))
        return np.where(ok, np.where(ok, raw, 0).astype(np.int64), -1)

    def read(self, positions, code, name):
        """Values at ``positions``: integers as exact float64 (checked against their type), floats
        in their type."""
        values = self.values[positions]
        if code[0] in "iu":
            return self._integers(positions, values, code, name)
        if code == "f8":
            return values
        values32 = self._float32(positions, values, name)
        return values32.astype(np.float16) if code == "f2" else values32

    def _token(self, position):
        return self.body[self.first[position]:self.stop[position]].decode("ascii")

    def _integers(self, positions, values, code, name):
        first, stop = self.first[positions], self.stop[positions]
        signed = self.signed[positions]
        not_digits = self.nondigit[positions] - signed
        info = np.iinfo(code)
        bad = (not_digits != 0) | (stop - first == signed) | (values < info.min) | (values > info.max)
        if np.any(bad):
            token = self._token(positions[np.argmax(bad)])
            raise SceneError(f"could not parse '{token[:40]}' as a '{np.dtype(code).name}' value of PLY property "
                             f"'{name}'", self.path)
        return values

    def _float32(self, positions, values, name):
        """The decimals rounded once to float32 (as strtof): through float64, with the rare
        double-rounding cases (the float64 falls exactly halfway between two float32) redone
        from the decimal's exact value."""
        with np.errstate(over="ignore"):
            single = values.astype(np.float32)
        if not np.all(np.isfinite(single)):
            token = self._token(positions[np.argmax(~np.isfinite(single))])
            raise SceneError(f"value '{token[:40]}' of PLY property '{name}' is out of the float range", self.path)
        back = single.astype(np.float64)
        toward = np.nextafter(single, np.where(values > back, np.float32(np.inf), np.float32(-np.inf)))
        tie = (values != back) & (back + toward.astype(np.float64) == 2.0 * values)
        for i in np.flatnonzero(tie):
            exact = Fraction(self._token(positions[i]))
            if (exact > Fraction(float(values[i]))) == (toward[i] > single[i]) and exact != Fraction(float(values[i])):
                single[i] = toward[i]
        return single


def _parse_numbers(text):
    """All whitespace-separated numbers of ``text`` as float64, or None if one is not a number."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=np.float64, sep=" ")
        except (ValueError, DeprecationWarning):
            return None


# ---------------------------------------------------------------------------------- records
def _record_end(source, starts, properties):
    """End (one past) of the records starting at ``starts`` (int64), -1 where a count is invalid
    or the record runs past the body."""
    cursor = starts.copy()
    bad = np.zeros(starts.shape, bool)
    for prop in properties:
        if prop.count_type is None:
            cursor += source.unit(prop.type)
        else:
            k = source.counts(cursor, prop.count_type)
            bad |= k < 0
            cursor += source.unit(prop.count_type) + np.maximum(k, 0) * source.unit(prop.type)
    return np.where(bad | (cursor > source.size), -1, cursor)


def _record_starts(source, offset, element, path):
    """(starts (count,) int64, end): where each record of ``element`` begins, from ``offset``."""
    props, count = element.properties, element.count
    smallest = sum(source.unit(p.count_type or p.type) for p in props)
    if count * smallest > source.size - offset:
        raise SceneError(f"PLY file is truncated (element '{element.name}')", path)
    if all(p.count_type is None for p in props):
        return offset + np.arange(count, dtype=np.int64) * smallest, offset + count * smallest
    parts, position, left, run, window = [np.zeros(0, np.int64)], offset, count, 1024, _WINDOW
    while left:
        end = _record_end(source, np.array([position]), props)[0]
        if end < 0:
            raise SceneError(f"PLY element '{element.name}' has an invalid list count or is truncated", path)
        size = end - position
        candidates = position + np.arange(min(left, run, (source.size - position) // size)) * size
        fits = _record_end(source, candidates, props) == candidates + size
        same = candidates.size if fits.all() else int(np.argmin(fits))
        parts.append(candidates[:same])
        position, left = position + same * size, left - same
        run = 2 * run if same == candidates.size else 1024
        if left and same < 64:  # sizes vary here: find the next records by pointer doubling
            starts, position, window = _orbit(source, position, left, props, window, element, path)
            parts.append(starts)
            left -= starts.size
    return np.concatenate(parts), position


def _orbit(source, position, left, props, window, element, path):
    """Up to ``left`` record starts from ``position`` within one window, by pointer doubling.

    Returns (starts, where the next record begins, the window to use next).
    """
    end = _record_end(source, np.array([position]), props)[0]
    if end < 0:
        raise SceneError(f"PLY element '{element.name}' has an invalid list count or is truncated", path)
    # No wider than the records left need (at four times this one's size), so that a few last
    # records do not cost a whole window.
    width = int(min(window, source.size - position, max(4096, 4 * left * (end - position))))
    ends = _record_end(source, position + np.arange(width, dtype=np.int64), props) - position
    whole = (ends > 0) & (ends <= width)  # records that end inside the window
    jump = np.append(np.where(whole, ends, width), width)  # 'width' absorbs: the orbit left the window
    reached = np.zeros(width + 1, bool)
    reached[0] = True
    while True:  # after step l, reached holds the first 2^l starts of the orbit
        new = jump[reached]
        if reached[new].all():
            break
        reached[new] = True
        jump = jump[jump]
    orbit = np.flatnonzero(reached[:width])
    complete = orbit[whole[orbit]]
    take = complete[:left]
    if take.size == left:
        return position + take, position + ends[take[-1]], window
    last = orbit[-1]
    if whole[last]:
        return position + take, position + width, window
    if last > 0:
        return position + take, position + last, window
    return take, position, max(2 * window, int(end - position))  # a record wider than the window


def _read_element(source, offset, element, path):
    """({property: values}, end): a scalar's values (count,), a list's (counts (count,), items)."""
    if not element.properties:
        return {}, offset
    starts, end = _record_starts(source, offset, element, path)
    columns, cursor = {}, starts
    for prop in element.properties:
        if prop.count_type is None:
            columns[prop.name] = _as_float(source.read(cursor, prop.type, prop.name), prop.type)
            cursor = cursor + source.unit(prop.type)
            continue
        k = source.read(cursor, prop.count_type, prop.name + " (list count)").astype(np.int64)
        first = cursor + source.unit(prop.count_type)
        item = np.arange(int(k.sum()), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
        columns[prop.name] = (k, source.read(np.repeat(first, k) + item * source.unit(prop.type), prop.type, prop.name))
        cursor = first + k * source.unit(prop.type)
    return columns, end


# ---------------------------------------------------------------------------------- the mesh
# Mitsuba converts integer properties to float with its struct converter's 'normalized, gamma'
# flags (set on every integer property of a PLY header): value / (type max), then sRGB to linear.
# Measured on Mitsuba 3.9.1, uchar and long properties keep their values.
_NORMALIZED = ("i1", "i2", "i4", "u2", "u4", "u8")


def _as_float(values, code):
    """float32 values of a scalar property, as Mitsuba's conversion makes them."""
    if code not in _NORMALIZED:
        with np.errstate(over="ignore"):  # out of float range: inf, refused where the value is used
            return values.astype(np.float32)
    v = values.astype(np.float64) / np.iinfo(code).max
    curve = ((np.maximum(v, 0.04045) + 0.055) / 1.055) ** 2.4
    return np.where(v <= 0.04045, v / 12.92, curve).astype(np.float32)


def _mesh(values, elements, path, face_normals, flip_tex_coords):
    vertex, face = values.get("vertex"), values.get("face")
    if vertex is None or not all(k in vertex and not isinstance(vertex[k], tuple) for k in "xyz"):
        raise SceneError("PLY file has no vertex element with x, y, z", path)
    names = [p.name for e in elements if e.name == "vertex" for p in e.properties if p.count_type is None]
    positions = _floats(vertex, "xyz", path)
    if not np.all(np.isfinite(positions)):
        raise SceneError("mesh contains invalid vertex position data", path)
    mesh = Mesh(positions, np.zeros((0, 3), np.int32))
    reserved = {"x", "y", "z", "nx", "ny", "nz", "u", "v"}
    if not face_normals and all(k in names for k in ("nx", "ny", "nz")):
        mesh.normals = unit_normals(_floats(vertex, ("nx", "ny", "nz"), path), path)
    for u, v in _UV_NAMES:
        if u in names and v in names:
            uvs = _floats(vertex, (u, v), path, "texture coordinate")
            if flip_tex_coords:
                uvs[:, 1] = np.float32(1.0) - uvs[:, 1]
            mesh.uvs = uvs
            reserved |= {u, v}
            break
    attributes = _attributes("vertex_", vertex, names, reserved, path)

    if face is None:
        raise SceneError("mesh has no faces", path)
    index_name = "vertex_index" if isinstance(face.get("vertex_index"), tuple) else "vertex_indices"
    if not isinstance(face.get(index_name), tuple):
        raise SceneError("PLY face element has no vertex_indices/vertex_index list", path)
    counts, indices = face[index_name]
    if indices.dtype.kind == "f" and not np.all(indices == np.floor(indices)):
        raise SceneError("PLY face indices are not integers", path)
    if indices.dtype.kind == "f" or indices.dtype == np.uint64:  # no index reaches 2^63 in a valid file
        indices = np.where((indices >= 0) & (indices < 2**62), indices, -1)
    mesh.faces = check_faces(fans(counts, indices.astype(np.int64)), len(positions), path)
    face_names = [p.name for e in elements if e.name == "face" for p in e.properties if p.count_type is None]
    per_triangle = np.maximum(counts - 2, 0)
    for name, value in _attributes("face_", face, face_names, set(), path).items():
        attributes[name] = np.repeat(value, per_triangle, axis=0)
    mesh.attributes = attributes
    return mesh


def _floats(columns, names, path, what=None):
    """(N, len(names)) float32 of scalar properties; non-finite values are an error when ``what``
    names the data."""
    out = np.stack([columns[k] for k in names], axis=1)
    if what and not np.all(np.isfinite(out)):
        raise SceneError(f"mesh contains invalid {what} data", path)
    return out


_POSTFIXES = ("xr01", "yg12", "zb23", "wa34")  # the four fields of an attribute, by naming scheme


def _attributes(kind, columns, names, reserved, path):
    """Mitsuba's ``find_other_fields``: {attribute name: (N, dim) float32} of an element whose
    scalar properties are ``names`` (in file order), those in ``reserved`` excepted."""
    names = list(names)
    groups = []  # (attribute name, [field names])
    renamed = {}
    if not all(c in names for c in "rgb") and all(c in names for c in ("red", "green", "blue")):
        renamed = {"red": "r", "green": "g", "blue": "b", "alpha": "a"}
        names = [renamed.get(n, n) for n in names]
        columns = {renamed.get(k, k): v for k, v in columns.items()}
    if all(c in names for c in "rgb"):
        groups.append((kind + "color", [c for c in "rgba" if c in names]))
    reserved = reserved | set("rgba")
    groups += _suffix_groups(kind, names, reserved)
    out = {}
    for name, fields in groups:
        if name in out:
            raise SceneError(f"PLY attribute '{name}' is defined twice", path)
        if not all(f in columns for f in fields):
            raise SceneError(f"PLY attribute '{name}' names a field the file lacks", path)
        out[name] = _floats(columns, fields, path, f"'{name}' attribute")
    return out


def _suffix_groups(kind, names, reserved):
    """The ``{prefix}_{postfix}`` runs of ``find_other_fields``, transcribed with its state machine
    (quirks included, so that odd files group as in Mitsuba)."""
    groups, seen = [], set()
    state = {"prefix": "", "scheme": 0, "level": 0, "reading": False}

    def reset():
        state.update(prefix="", scheme=0, level=0, reading=False)

    def flush():
        if state["level"] in (1, 3):
            prefix, scheme, level = state["prefix"], state["scheme"], state["level"]
            suffix = "_color" if scheme == 1 else ""
            groups.append((kind + prefix + suffix, [f"{prefix}_{_POSTFIXES[i][scheme]}" for i in range(level)]))
            seen.add(prefix)
        reset()

    i = 0
    while i < len(names):
        name = names[i]
        if name in reserved:
            i += 1
            continue
        cut = name.rfind("_")
        if cut < 0 or len(name) - cut - 1 != 1:
            if state["reading"]:
                flush()
            i += 1
            continue
        prefix, postfix = name[:cut], name[cut + 1]
        if state["reading"] and prefix != state["prefix"]:
            flush()
        if not state["reading"] and prefix in seen:
            while i < len(names) and names[i].startswith(prefix):
                i += 1
            i += 1  # Mitsuba's loop increments once more
            continue
        if not state["reading"]:
            scheme = _POSTFIXES[0].find(postfix)
            if scheme < 0:
                i += 1
                continue
            state.update(reading=True, scheme=scheme, prefix=prefix)
        elif state["level"] > 3 or postfix != _POSTFIXES[state["level"]][state["scheme"]]:
            reset()
            while i < len(names) and names[i].startswith(prefix):
                i += 1
            if i == len(names):
                break
        state["level"] += 1
        i += 1
    if state["reading"]:
        flush()
    return groups
