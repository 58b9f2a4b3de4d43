"""Triangle meshes as Mitsuba 3 builds them: OBJ and PLY loaders, ``rectangle`` and ``cube``.

Host only (numpy). Loaders return object-space meshes; ``transform_mesh`` applies ``to_world``
the way Mitsuba bakes it into the vertex buffers. Conventions checked against Mitsuba 3.9:

* OBJ (``src/shapes/obj.cpp``): each distinct (position, uv, normal) index triple of the faces
  becomes one vertex, numbered in order of first use; polygons are fans (0, i, i+1); texture
  coordinates are flipped (v -> 1 - v, ``flip_tex_coords``); normals are normalized; negative
  (relative) indices are an error, as in Mitsuba.
* PLY (``src/shapes/ply.h``/``ply.cpp``): x/y/z, nx/ny/nz (normalized), u/v, texture_u/texture_v
  or s/t; uvs are NOT flipped; ascii, binary little and big endian. Mitsuba only reads
  triangles; polygons are fans here.
* Vertex normals of meshes without them: Mitsuba's ``Mesh::recompute_vertex_normals``, face
  normals weighted by the corner angle (Thuermer and Wuethrich 1998); Mitsuba computes them from
  the world-space positions, so call it after ``transform_mesh``.
* A transform with negative determinant flips nothing: positions go through the matrix,
  normals through its inverse transpose, face winding is kept. The geometric normal
  (cross product of the world-space edges) then points against the shading normals, exactly as
  in Mitsuba (for meshes and for its analytic ``rectangle``).
"""
import dataclasses
import os
import re
import warnings

import numpy as np

from tracer.io.errors import SceneError

__all__ = ["Mesh", "load_obj", "load_ply", "recompute_vertex_normals", "transform_mesh", "rectangle_mesh",
           "cube_mesh"]


@dataclasses.dataclass
class Mesh:
    positions: np.ndarray              # (V, 3) float32
    faces: np.ndarray                  # (F, 3) int32 vertex indices, counter-clockwise = front
    normals: np.ndarray | None = None  # (V, 3) float32 unit shading normals
    uvs: np.ndarray | None = None      # (V, 2) float32 texture coordinates


def _read_bytes(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SceneError("mesh file not found", path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SceneError(f"cannot read mesh file: {e.strerror}", path) from None


def _parse_numbers(text, dtype):
    """All whitespace-separated numbers of ``text`` (bytes), or None if one is not a number."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return np.fromstring(text, dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            return None


# ---------------------------------------------------------------------------------- OBJ
_OBJ_KINDS = {b"v": 1, b"vt": 2, b"vn": 3, b"f": 4}


def load_obj(path, flip_tex_coords=True):
    """Mesh of a Wavefront OBJ file, vertex for vertex as Mitsuba's ``obj`` plugin builds it."""
    path = os.fspath(path)
    blocks = _obj_blocks(_read_bytes(path))
    positions = _obj_vectors(blocks[1], 3, "v", path)
    texcoords = _obj_vectors(blocks[2], 2, "vt", path)
    normals = _obj_vectors(blocks[3], 3, "vn", path)
    counts, keys = _obj_faces(blocks[4], path)
    if not np.all(np.isfinite(positions)):
        raise SceneError("mesh contains invalid vertex position data", path)
    for column, size, what in ((0, len(positions), "vertex"), (1, len(texcoords), "texture coordinate"),
                               (2, len(normals), "normal")):
        bad = (keys[:, column] < (1 if column == 0 else 0)) | (keys[:, column] > size)
        if np.any(bad):
            raise SceneError(f"reference to invalid {what} {keys[np.argmax(bad), column]}", path)

    corner_ids, first = _first_use_ids(keys, (len(positions), len(texcoords), len(normals)))
    vkeys = keys[first]
    faces = _fans(counts, corner_ids)
    if len(faces) == 0:
        raise SceneError("mesh has no faces", path)
    mesh = Mesh(positions[vkeys[:, 0] - 1], faces)
    if len(texcoords):
        if flip_tex_coords:
            texcoords[:, 1] = np.float32(1.0) - texcoords[:, 1]
        mesh.uvs = np.where(vkeys[:, 1:2] > 0, texcoords[np.maximum(vkeys[:, 1] - 1, 0)], np.float32(0))
    if len(normals):
        with np.errstate(invalid="ignore", divide="ignore"):
            unit = normals / np.linalg.norm(normals, axis=1, keepdims=True)
        if not np.all(np.isfinite(unit)):
            raise SceneError("mesh contains invalid vertex normal data", path)
        has = vkeys[:, 2] > 0
        mesh.normals = unit[np.maximum(vkeys[:, 2] - 1, 0)]
        if not np.all(has):
            # Mitsuba leaves these uninitialized; the angle-weighted normal is a sane stand-in.
            mesh.normals[~has] = recompute_vertex_normals(mesh).normals[~has]
    return mesh


def _obj_blocks(data):
    """{1: v, 2: vt, 3: vn, 4: f} -> the text of those lines with the keyword blanked out.

    One regex pass finds the runs of consecutive lines of one kind; each run is one slice, so a
    large file costs a few passes over its bytes (numpy per-byte work is much slower here).
    """
    data = data.replace(b"\t", b" ").replace(b"\r", b" ")
    if b"#" in data:
        data = re.sub(rb"#[^\n]*", b"", data)
    if data.startswith(b" ") or b"\n " in data:
        data = re.sub(rb"(?m)^ +", b"", data)
    blocks = {k: [] for k in _OBJ_KINDS.values()}
    for run in re.finditer(rb"(?m)^(vt|vn|v|f) [^\n]*(?:\n\1 [^\n]*)*", data):
        keyword = run.group(1)
        blocks[_OBJ_KINDS[keyword]].append(run.group(0).replace(keyword, b" " * len(keyword)))
    return {k: b"\n".join(texts) for k, texts in blocks.items()}


def _tokens_per_line(text):
    """Byte offsets of the whitespace-separated tokens of ``text`` and the line of each."""
    b = np.frombuffer(text, np.uint8)
    blank = (b == 32) | (b == 10)
    start = ~blank
    start[1:] &= blank[:-1]
    tokens = np.flatnonzero(start)
    return tokens, np.searchsorted(np.flatnonzero(b == 10), tokens)


def _obj_vectors(text, width, keyword, path):
    """(N, width) float32: the first ``width`` numbers of each line (Mitsuba ignores the rest)."""
    if not text:
        return np.zeros((0, width), np.float32)
    values = _parse_numbers(text, np.float64)
    if values is None:
        raise SceneError(f"could not parse the '{keyword}' lines (a value is not a number)", path)
    lines = text.count(b"\n") + 1
    if values.size != width * lines:
        tokens, line = _tokens_per_line(text)
        counts = np.bincount(line, minlength=lines)
        if counts.min() < width:
            raise SceneError(f"a '{keyword}' line has fewer than {width} values", path)
        first = np.cumsum(counts) - counts
        values = values[first[:, None] + np.arange(width)]
    return values.reshape(-1, width).astype(np.float32)


def _obj_faces(text, path):
    """Corners per face (F,) and (v, vt, vn) index keys (C, 3) int64 of every corner; 0 = none."""
    if not text:
        raise SceneError("mesh has no faces", path)
    # An empty slot is index 0, "none": v//vn is v/0/vn, and Mitsuba also reads v/vt/ as v/vt/0.
    text = text.replace(b"//", b"/0/").replace(b"/ ", b"/0 ").replace(b"/\n", b"/0\n")
    if text.endswith(b"/"):
        text += b"0"
    values = _parse_numbers(text.replace(b"/", b" "), np.int64)
    if values is None:
        raise SceneError("could not parse the face ('f') lines", path)
    lines = text.count(b"\n") + 1
    first_line = text[:text.find(b"\n")] if lines > 1 else text
    corners = first_line.split()
    slashes = corners[0].count(b"/") if corners else 0
    # Fast path: every line has the shape of the first (same text once digits are dropped).
    skeleton = text.translate(None, b"0123456789")
    line_skeleton = first_line.translate(None, b"0123456789")
    if (slashes <= 2 and values.size == lines * len(corners) * (slashes + 1)
            and all(c.count(b"/") == slashes for c in corners)
            and skeleton == b"\n".join([line_skeleton] * lines)):
        keys = np.zeros((lines * len(corners), 3), np.int64)
        keys[:, :slashes + 1] = values.reshape(-1, slashes + 1)
        counts = np.full(lines, len(corners), np.int64)
    else:
        counts, keys = _obj_faces_general(text, values, lines, path)
    if np.any(keys < 0):
        raise SceneError("negative (relative) OBJ indices are not supported (nor by Mitsuba)", path)
    return counts, keys


def _obj_faces_general(text, values, lines, path):
    """Faces whose lines differ in corner count or corner format (per-byte numpy, slower)."""
    tokens, line = _tokens_per_line(text)
    counts = np.bincount(line, minlength=lines)
    slash = np.flatnonzero(np.frombuffer(text, np.uint8) == ord("/"))
    slashes = np.bincount(np.searchsorted(tokens, slash, side="right") - 1, minlength=len(tokens))
    if np.any(slashes > 2) or values.size != int(np.sum(slashes + 1)):
        raise SceneError("could not parse the face ('f') lines", path)
    first = np.cumsum(slashes + 1) - (slashes + 1)
    keys = np.zeros((len(tokens), 3), np.int64)
    for width in (1, 2, 3):
        mask = slashes == width - 1
        keys[np.ix_(mask, np.arange(width))] = values[first[mask, None] + np.arange(width)]
    return counts, keys


def _first_use_ids(keys, sizes):
    """Vertex id of every corner, numbering distinct keys by first use; and each id's first corner."""
    nv, nt, nn = (s + 1 for s in sizes)
    if nv * nt * nn < 2**62:
        flat = (keys[:, 0] * nt + keys[:, 1]) * nn + keys[:, 2]
        _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], first[order]


def _fans(counts, corner_ids):
    """Triangles (0, i, i+1) of every polygon; polygons of fewer than 3 corners give none."""
    starts = np.cumsum(counts) - counts
    ntri = np.maximum(counts - 2, 0)
    polygon = np.repeat(np.arange(len(counts)), ntri)
    j = np.arange(int(ntri.sum())) - np.repeat(np.cumsum(ntri) - ntri, ntri)
    a = starts[polygon]
    corners = np.stack([a, a + j + 1, a + j + 2], axis=1)
    return corner_ids[corners].astype(np.int32).reshape(-1, 3)


# ---------------------------------------------------------------------------------- PLY
_PLY_TYPES = {"char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
              "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
              "long": "i8", "int64": "i8", "ulong": "u8", "uint64": "u8", "half": "f2", "float16": "f2",
              "float": "f4", "float32": "f4", "double": "f8", "float64": "f8"}
_UV_NAMES = (("u", "v"), ("texture_u", "texture_v"), ("s", "t"), ("texture_s", "texture_t"))


def load_ply(path):
    """Mesh of a PLY file (ascii or binary), as Mitsuba's ``ply`` plugin reads it."""
    path = os.fspath(path)
    data = _read_bytes(path)
    fmt, elements, body = _ply_header(data, path)
    if fmt == "ascii":
        tokens = _parse_numbers(data[body:], np.float64)
        if tokens is None:
            raise SceneError("malformed ascii PLY body (a value is not a number)", path)
        buffer, endian, offset = tokens.tobytes(), "<", 0
    else:
        buffer, endian, offset = data, "<" if fmt == "binary_little_endian" else ">", body
    values = {}
    for name, count, props in elements:
        if fmt == "ascii":
            props = [(p[0], "f8") if len(p) == 2 else (p[0], "f8", "f8") for p in props]
        values[name], offset = _ply_element(buffer, offset, count, props, endian, path)
    if fmt == "ascii" and offset != len(buffer):
        raise SceneError("trailing values after the last PLY element", path)
    return _ply_mesh(values, path)


def _ply_header(data, path):
    end = re.search(rb"end_header[ \t]*\r?\n", data)
    if not data.startswith(b"ply") or end is None:
        raise SceneError("not a PLY file (no 'ply' ... 'end_header' header)", path)
    fmt, elements = None, []
    for line in data[:end.start()].decode("ascii", errors="replace").splitlines()[1:]:
        words = line.split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "format" and len(words) == 3 and words[2] == "1.0":
            fmt = words[1]
        elif words[0] == "element" and len(words) == 3 and words[2].isdigit():
            elements.append((words[1], int(words[2]), []))
        elif words[0] == "property" and elements and len(words) == 3 and words[1] in _PLY_TYPES:
            elements[-1][2].append((words[2], _PLY_TYPES[words[1]]))
        elif (words[0] == "property" and elements and len(words) == 5 and words[1] == "list"
              and words[2] in _PLY_TYPES and words[3] in _PLY_TYPES):
            elements[-1][2].append((words[4], _PLY_TYPES[words[2]], _PLY_TYPES[words[3]]))
        else:
            raise SceneError(f"invalid PLY header line '{line.strip()}'", path)
    if fmt not in ("ascii", "binary_little_endian", "binary_big_endian"):
        raise SceneError("PLY header has no valid 'format' line", path)
    return fmt, elements, end.end()


def _ply_element(buffer, offset, count, props, endian, path):
    """Read ``count`` records; returns ({property: array}, end offset).

    A list property becomes an (n, k) array when all its lists have length k, else a list of
    arrays. Runs of records with equal list lengths are read as one structured array each.
    """
    columns = {p[0]: [] for p in props}
    fixed = all(len(p) == 2 for p in props)
    done, chunk = 0, (count if fixed else 1024)
    while done < count:
        fields, pos = [], offset
        for p in props:
            if len(p) == 2:
                fields.append((p[0], endian + p[1]))
                pos += np.dtype(p[1]).itemsize
            else:
                if pos + np.dtype(p[1]).itemsize > len(buffer):
                    raise SceneError("PLY file is truncated", path)
                k = int(np.frombuffer(buffer, endian + p[1], 1, pos)[0])
                fields += [(p[0] + ".count", endian + p[1]), (p[0], endian + p[2], (k,))]
                pos += np.dtype(p[1]).itemsize + k * np.dtype(p[2]).itemsize
        dtype = np.dtype(fields)
        n = min(chunk, count - done, (len(buffer) - offset) // dtype.itemsize)
        if n <= 0:
            raise SceneError("PLY file is truncated", path)
        block = np.frombuffer(buffer, dtype, n, offset)
        same = np.ones(n, bool)
        for p in props:
            if len(p) == 3:
                same &= block[p[0] + ".count"] == dtype[p[0]].shape[0]
        m = n if same.all() else int(np.argmin(same))
        for p in props:
            columns[p[0]].append(block[p[0]][:m])
        offset += m * dtype.itemsize
        done += m
        chunk = min(2 * chunk, 1 << 20) if m == n else 1024
    out = {}
    for p in props:
        parts = columns[p[0]]
        if len(p) == 3 and len({a.shape[1] for a in parts}) > 1:
            out[p[0]] = parts
        else:
            out[p[0]] = np.concatenate(parts) if parts else np.zeros((0,) if len(p) == 2 else (0, 3))
    return out, offset


def _ply_mesh(values, path):
    vertex, face = values.get("vertex"), values.get("face")
    if vertex is None or not all(k in vertex for k in "xyz"):
        raise SceneError("PLY file has no vertex element with x, y, z", path)
    positions = np.stack([vertex[k] for k in "xyz"], axis=1).astype(np.float32)
    if not np.all(np.isfinite(positions)):
        raise SceneError("mesh contains invalid vertex position data", path)
    if face is None:
        raise SceneError("mesh has no faces", path)
    lists = face.get("vertex_indices", face.get("vertex_index"))
    if lists is None:
        raise SceneError("PLY face element has no vertex_indices/vertex_index list", path)
    faces = np.concatenate([_fan_block(np.asarray(block)) for block in
                            (lists if isinstance(lists, list) else [lists])])
    if len(faces) == 0:
        raise SceneError("mesh has no faces", path)
    if faces.min() < 0 or faces.max() >= len(positions):
        raise SceneError(f"face refers to vertex {faces.max() if faces.max() >= len(positions) else faces.min()}"
                         f" of {len(positions)}", path)
    mesh = Mesh(positions, faces.astype(np.int32))
    if all(k in vertex for k in ("nx", "ny", "nz")):
        n = np.stack([vertex[k] for k in ("nx", "ny", "nz")], axis=1).astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            mesh.normals = n / np.linalg.norm(n, axis=1, keepdims=True)
    for u, v in _UV_NAMES:
        if u in vertex and v in vertex:
            mesh.uvs = np.stack([vertex[u], vertex[v]], axis=1).astype(np.float32)
            break
    return mesh


def _fan_block(indices):
    """Fans of an (n, k) block of polygons with k corners each."""
    n, k = indices.shape
    if k < 3:
        return np.zeros((0, 3), np.int64)
    j = np.arange(1, k - 1)
    tri = np.stack([np.broadcast_to(indices[:, :1], (n, k - 2)), indices[:, j], indices[:, j + 1]], axis=2)
    return tri.reshape(-1, 3).astype(np.int64)


# ---------------------------------------------------------------------------------- processing
def recompute_vertex_normals(mesh):
    """Mesh with angle-weighted vertex normals, as Mitsuba's ``Mesh::recompute_vertex_normals``.

    Each face's unit normal is added to its three vertices weighted by the corner angle;
    degenerate faces add nothing, and a vertex left with a zero sum gets (1, 0, 0).
    """
    p = mesh.positions.astype(np.float64)
    f = mesh.faces
    v = [p[f[:, 0]], p[f[:, 1]], p[f[:, 2]]]
    n = np.cross(v[1] - v[0], v[2] - v[0])
    length = np.linalg.norm(n, axis=1, keepdims=True)
    valid = length[:, 0] > 0
    n = np.where(valid[:, None], n / np.where(valid[:, None], length, 1.0), 0.0)
    acc = np.zeros((len(p), 3))
    for i in range(3):
        a = _unit(v[(i + 1) % 3] - v[i])
        b = _unit(v[(i + 2) % 3] - v[i])
        angle = _unit_angle(a, b)
        for c in range(3):
            acc[:, c] += np.bincount(f[:, i], weights=n[:, c] * angle, minlength=len(p))
    length = np.linalg.norm(acc, axis=1, keepdims=True)
    normals = np.where(length > 0, acc / np.where(length > 0, length, 1.0), np.array([1.0, 0.0, 0.0]))
    return dataclasses.replace(mesh, normals=normals.astype(np.float32))


def _unit(a):
    length = np.linalg.norm(a, axis=1, keepdims=True)
    return a / np.where(length > 0, length, 1.0)


def _unit_angle(a, b):
    """Angle between unit vectors, accurate near 0 and pi (drjit's ``unit_angle``)."""
    dot = np.sum(a * b, axis=1)
    near = 2.0 * np.arcsin(np.clip(0.5 * np.linalg.norm(b - a, axis=1), 0.0, 1.0))
    far = np.pi - 2.0 * np.arcsin(np.clip(0.5 * np.linalg.norm(a + b, axis=1), 0.0, 1.0))
    return np.where(dot >= 0, near, far)


def transform_mesh(mesh, to_world, normal_matrix=None):
    """Mesh in world space: positions by the affine map, normals by its inverse transpose.

    ``normal_matrix`` (4, 4) replaces ``inv(to_world).T`` for the normals; give the parser's
    ``PluginNode.get_normal_transform('to_world')`` to reproduce Mitsuba exactly after a
    ``rotate`` about a non-unit axis. Winding is kept even when ``det(to_world) < 0`` (see the
    module docstring).
    """
    m = np.asarray(to_world, np.float64).reshape(4, 4)
    positions = mesh.positions.astype(np.float64) @ m[:3, :3].T + m[:3, 3]
    normals = None
    if mesh.normals is not None:
        if normal_matrix is None:
            n = mesh.normals.astype(np.float64) @ np.linalg.inv(m[:3, :3])
        else:
            n = mesh.normals.astype(np.float64) @ np.asarray(normal_matrix, np.float64).reshape(4, 4)[:3, :3].T
        with np.errstate(invalid="ignore", divide="ignore"):
            normals = (n / np.linalg.norm(n, axis=1, keepdims=True)).astype(np.float32)
    return dataclasses.replace(mesh, positions=positions.astype(np.float32), normals=normals)


def rectangle_mesh():
    """Mitsuba's ``rectangle``: [-1, 1]^2 at z = 0 facing +z, uv = ((x + 1) / 2, (y + 1) / 2)."""
    xy = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], np.float32)
    return Mesh(positions=np.concatenate([xy, np.zeros((4, 1), np.float32)], axis=1),
                faces=np.array([[0, 1, 2], [0, 2, 3]], np.int32),
                normals=np.tile(np.array([0, 0, 1], np.float32), (4, 1)),
                uvs=(xy + 1) / 2)


def cube_mesh():
    """Mitsuba's ``cube`` (``src/shapes/cube.cpp``): [-1, 1]^3, 24 vertices, per-face normals."""
    positions = np.array([
        [1, -1, -1], [1, -1, 1], [-1, -1, 1], [-1, -1, -1], [1, 1, -1], [-1, 1, -1], [-1, 1, 1], [1, 1, 1],
        [1, -1, -1], [1, 1, -1], [1, 1, 1], [1, -1, 1], [1, -1, 1], [1, 1, 1], [-1, 1, 1], [-1, -1, 1],
        [-1, -1, 1], [-1, 1, 1], [-1, 1, -1], [-1, -1, -1], [1, 1, -1], [1, -1, -1], [-1, -1, -1], [-1, 1, -1]],
        np.float32)
    face_normals = np.array([[0, -1, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1], [-1, 0, 0], [0, 0, -1]], np.float32)
    uvs = np.tile(np.array([[0, 1], [1, 1], [1, 0], [0, 0]], np.float32), (6, 1))
    faces = np.array([[0, 1, 2], [3, 0, 2]], np.int32)
    faces = (faces[None] + 4 * np.arange(6, dtype=np.int32)[:, None, None]).reshape(12, 3)
    return Mesh(positions, faces, np.repeat(face_normals, 4, axis=0), uvs)
