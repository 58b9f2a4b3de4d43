"""Small mesh files written by the tests themselves (no file of Mitsuba's is committed): PLY with
any properties, and Mitsuba's ``serialized`` format (several meshes, versions 3 and 4)."""
import zlib

import numpy as np

PLY_TYPES = {"char": "i1", "uchar": "u1", "short": "i2", "ushort": "u2", "int": "i4", "uint": "u4",
             "float": "f4", "double": "f8", "half": "f2", "long": "i8", "ulong": "u8"}


def ply(fmt, elements, ascii_values=None):
    """A PLY file. ``elements``: [(name, properties, rows)], a property ``(name, type)`` or
    ``(name, "list", count_type, item_type)``, a row one value per property (a list for a list
    property). Ascii values are written with ``repr`` unless ``ascii_values`` (a function of the
    value) says otherwise."""
    lines = ["ply", f"format {fmt} 1.0", "comment written by a test"]
    for name, props, rows in elements:
        lines.append(f"element {name} {len(rows)}")
        lines += [f"property {p[1]} {p[0]}" if len(p) == 2 else f"property list {p[2]} {p[3]} {p[0]}" for p in props]
    header = ("\n".join(lines) + "\nend_header\n").encode()
    order = ">" if fmt == "binary_big_endian" else "<"
    text = ascii_values or (lambda v: repr(v) if isinstance(v, float) else str(v))
    body = []
    for _, props, rows in elements:
        for row in rows:
            for p, value in zip(props, row):
                if len(p) == 2:
                    items = [(p[1], value)]
                else:
                    items = [(p[2], len(value) if not isinstance(value, tuple) else value[0])]
                    items += [(p[3], v) for v in (value if not isinstance(value, tuple) else value[1])]
                for kind, v in items:
                    body.append(text(v).encode() if fmt == "ascii" else np.array(v, order + PLY_TYPES[kind]).tobytes())
            if fmt == "ascii":
                body.append(b"\n")
    separator = b" " if fmt == "ascii" else b""
    return header + separator.join(body).replace(b" \n ", b"\n")


def triangle_ply(fmt, positions, faces, vertex_props=(), vertex_values=None, face_props=(), face_values=None,
                 index_type=("uchar", "int")):
    """A PLY of float x, y, z positions and index lists, with extra ``(name, type)`` properties."""
    vertex_values = np.zeros((len(positions), 0)) if vertex_values is None else vertex_values
    face_values = np.zeros((len(faces), 0)) if face_values is None else face_values
    vertex = ("vertex", [("x", "float"), ("y", "float"), ("z", "float"), *vertex_props],
              [[*map(float, p), *_cast(v, vertex_props)] for p, v in zip(positions, vertex_values)])
    face = ("face", [("vertex_indices", "list", *index_type), *face_props],
            [[list(f), *_cast(v, face_props)] for f, v in zip(faces, face_values)])
    return ply(fmt, [vertex, face])


def _cast(values, props):
    return [int(v) if PLY_TYPES[p[1]][0] in "iu" else float(v) for v, p in zip(values, props)]


# ---------------------------------------------------------------------------------- serialized
def serialized_mesh(positions, faces, normals=None, uvs=None, colors=None, version=4, double=False, extra_flags=0,
                    name=b"mesh"):
    """One mesh of a ``.serialized`` file: its header and zlib stream."""
    flags = (1 if normals is not None else 0) | (2 if uvs is not None else 0) | (8 if colors is not None else 0)
    flags |= extra_flags | (0x2000 if double else 0x1000)
    real = "<f8" if double else "<f4"
    body = np.uint32(flags).tobytes() + (name + b"\0" if version == 4 else b"")
    body += np.array([len(positions), len(faces)], "<u8").tobytes()
    for a in (positions, normals, uvs, colors):
        if a is not None:
            body += np.asarray(a, real).tobytes()
    body += np.asarray(faces, "<u4").tobytes()
    return np.array([0x041C, version], "<u2").tobytes() + zlib.compress(body)


def serialized_file(meshes, version=4):
    """Meshes (from ``serialized_mesh``) and the table of their offsets."""
    data, offsets = b"", []
    for mesh in meshes:
        offsets.append(len(data))
        data += mesh
    return data + np.array(offsets, "<u8" if version == 4 else "<u4").tobytes() + np.uint32(len(meshes)).tobytes()
