"""Triangle meshes as Mitsuba 3 builds them: the ``Mesh`` record, the OBJ loader, ``rectangle`` and
``cube`` (PLY: ``tracer.io.ply``, Mitsuba's serialized format: ``tracer.io.serialized``).

Host only (numpy). Loaders return object-space meshes; ``transform_mesh`` applies ``to_world``
the way Mitsuba bakes it into the vertex buffers. Conventions checked against Mitsuba 3.9:

* OBJ (``src/shapes/obj.cpp``): each distinct (position, uv, normal) index triple of the faces
  becomes one vertex, numbered in order of first use; polygons are fans (0, i, i+1); texture
  coordinates are flipped (v -> 1 - v, ``flip_tex_coords``); normals are normalized; negative
  (relative) indices are an error, as in Mitsuba.
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
from typing import cast

import numpy as np
from numpy.typing import ArrayLike

from tracer.errors import SceneError
from tracer.io import reads

__all__ = ["Mesh", "load_obj", "recompute_vertex_normals", "transform_mesh", "rectangle_mesh", "cube_mesh",
           "check_faces", "unit_normals", "fans"]


@dataclasses.dataclass
class Mesh:
    positions: np.ndarray              # (V, 3) float32
    faces: np.ndarray                  # (F, 3) int32 vertex indices, counter-clockwise = front
    normals: np.ndarray | None = None  # (V, 3) float32 unit shading normals
    uvs: np.ndarray | None = None      # (V, 2) float32 texture coordinates
    # Mitsuba's mesh attributes: 'vertex_<name>' (V, dim) or 'face_<name>' (F, dim) float32, dim 1 to 4.
    attributes: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SceneError("mesh file not found", path)
    try:
        return reads.read_file(path)
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


def load_obj(path: str | os.PathLike[str], flip_tex_coords: bool = True) -> Mesh:
    """Mesh of a Wavefront OBJ file, vertex for vertex as Mitsuba's ``obj`` plugin builds it."""
    path = os.fspath(path)
    blocks = _obj_blocks(read_bytes(path))
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
    faces = fans(counts, corner_ids)
    if len(faces) == 0:
        raise SceneError("mesh has no faces", path)
    mesh = Mesh(positions[vkeys[:, 0] - 1], faces)
    if len(texcoords):
        if flip_tex_coords:
            texcoords[:, 1] = np.float32(1.0) - texcoords[:, 1]
        mesh.uvs = np.where(vkeys[:, 1:2] > 0, texcoords[np.maximum(vkeys[:, 1] - 1, 0)], np.float32(0))
    if len(normals):
        unit = unit_normals(normals, path)
        has = vkeys[:, 2] > 0
        mesh.normals = unit[np.maximum(vkeys[:, 2] - 1, 0)]
        if not np.all(has):
            # Mitsuba leaves these uninitialized; the angle-weighted normal is a sane stand-in.
            mesh.normals[~has] = cast(np.ndarray, recompute_vertex_normals(mesh).normals)[~has]
    return mesh


def unit_normals(normals: ArrayLike, path: str) -> np.ndarray:
    """(V, 3) float32 unit normals; a zero or non-finite one is an error (Mitsuba's OBJ loader)."""
    normals = np.asarray(normals, np.float32)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        unit = normals / np.linalg.norm(normals, axis=1, keepdims=True)
    if not np.all(np.isfinite(unit)):
        raise SceneError("mesh contains invalid vertex normal data", path)
    return unit


def check_faces(faces: ArrayLike, n_vertices: int, path: str) -> np.ndarray:
    """(F, 3) int32 vertex indices; no faces, or an index outside [0, n_vertices), is an error."""
    faces = np.asarray(faces).reshape(-1, 3)
    if len(faces) == 0:
        raise SceneError("mesh has no faces", path)
    if n_vertices >= 2**31:
        raise SceneError(f"mesh has {n_vertices} vertices, more than 2^31 - 1", path)
    bad = (faces < 0) | (faces >= n_vertices)
    if np.any(bad):
        raise SceneError(f"face refers to vertex {faces[bad][0]} of {n_vertices}", path)
    return faces.astype(np.int32)


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


def fans(counts: np.ndarray, corner_ids: np.ndarray) -> np.ndarray:
    """Triangles (0, i, i+1) of every polygon, in polygon order: polygon p has ``counts[p]``
    consecutive entries of ``corner_ids``; polygons of fewer than 3 corners give none."""
    starts = np.cumsum(counts) - counts
    ntri = np.maximum(counts - 2, 0)
    polygon = np.repeat(np.arange(len(counts)), ntri)
    j = np.arange(int(ntri.sum())) - np.repeat(np.cumsum(ntri) - ntri, ntri)
    a = starts[polygon]
    corners = np.stack([a, a + j + 1, a + j + 2], axis=1)
    return corner_ids[corners].astype(np.int32).reshape(-1, 3)


# ---------------------------------------------------------------------------------- processing
def recompute_vertex_normals(mesh: Mesh) -> Mesh:
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


def transform_mesh(mesh: Mesh, to_world: ArrayLike, normal_matrix: ArrayLike | None = None) -> Mesh:
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


def rectangle_mesh() -> Mesh:
    """Mitsuba's ``rectangle``: [-1, 1]^2 at z = 0 facing +z, uv = ((x + 1) / 2, (y + 1) / 2), its two
    triangles as there (``rectangle.cpp``: x + y <= 0 is triangle 0, what ``prim_index`` says)."""
    xy = np.array([[-1, -1], [1, -1], [-1, 1], [1, 1]], np.float32)
    return Mesh(positions=np.concatenate([xy, np.zeros((4, 1), np.float32)], axis=1),
                faces=np.array([[1, 2, 0], [1, 3, 2]], np.int32),
                normals=np.tile(np.array([0, 0, 1], np.float32), (4, 1)),
                uvs=(xy + 1) / 2)


def cube_mesh() -> Mesh:
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
