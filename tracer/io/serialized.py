"""Mitsuba's ``serialized`` mesh format, read as Mitsuba 3.9 reads it (``src/shapes/serialized.cpp``).

Host only (numpy). A file is one or more meshes, each a little-endian header (uint16 0x041C,
uint16 version 3 or 4) followed by a zlib stream::

    uint32 flags        0x1 normals, 0x2 uvs, 0x8 colors, 0x10 face normals, 0x2000 double precision
    (version 4) a NUL-terminated name
    uint64 vertex count, uint64 face count
    positions (V, 3), [normals (V, 3)], [uvs (V, 2)], [colors (V, 3)]  float32, or float64 with 0x2000
    faces (F, 3) uint32

and, after the last mesh, the offset of every mesh (uint64 for version 4, uint32 for 3) and
their uint32 count; ``shape_index`` picks one. As in Mitsuba: uvs are not flipped; colors are
skipped (Mitsuba's loader leaves them unread); the file's face-normals flag is ignored (only the
plugin's ``face_normals`` parameter counts); face indices are uint32 whatever the vertex count.
Unlike Mitsuba, a bad index, a non-finite position or a normal that cannot be normalized is an
error here, and ``shape_index`` equal to the count is refused (Mitsuba reads past its table).
Memory is bounded by what the mesh's counts need: a stream is never decompressed further.
"""
import os
import zlib

import numpy as np

from tracer.errors import SceneError
from tracer.io import reads
from tracer.io.meshes import Mesh, check_faces, unit_normals

__all__ = ["load_serialized"]

MAGIC = 0x041C
VERSIONS = (3, 4)
HAS_NORMALS, HAS_UVS, HAS_COLORS, DOUBLE_PRECISION = 0x0001, 0x0002, 0x0008, 0x2000
# Deflate expands at most about 1032:1; a header claiming more data than that cannot be honest.
_MAX_RATIO = 1032
_NAME_LIMIT = 1 << 16  # version 4 names are read up to this length


def load_serialized(path: str | os.PathLike[str], shape_index: int = 0, face_normals: bool = False) -> Mesh:
    """Object-space ``Mesh`` number ``shape_index`` of a ``.serialized`` file; with
    ``face_normals`` its vertex normals are skipped (Mitsuba's plugin parameter)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SceneError("mesh file not found", path)
    try:
        data = reads.read_file(path)
    except OSError as e:
        raise SceneError(f"cannot read mesh file: {e.strerror}", path) from None
    if shape_index < 0:
        raise SceneError(f"shape_index must be non-negative, got {shape_index}", path)
    version = _check_header(data, 0, path)
    start = _mesh_offset(data, version, shape_index, path) + 4 if shape_index else 4
    return _read_mesh(data, start, version, path, face_normals)


def _check_header(data, at, path):
    if len(data) < at + 4:
        raise SceneError("not a serialized mesh file (too short)", path)
    magic, version = np.frombuffer(data, "<u2", 2, at)
    if magic != MAGIC:
        raise SceneError("not a serialized mesh file (invalid format identifier)", path)
    if version not in VERSIONS:
        raise SceneError(f"incompatible serialized file version {version} (Mitsuba reads 3 and 4)", path)
    return int(version)


def _mesh_offset(data, version, shape_index, path):
    """Where mesh ``shape_index`` starts, from the table at the end of the file."""
    if len(data) < 8:
        raise SceneError("serialized file has no table of meshes", path)
    count = int(np.frombuffer(data, "<u4", 1, len(data) - 4)[0])
    if shape_index >= count:
        raise SceneError(f"shape_index {shape_index} is out of range: the file holds {count} meshes", path)
    width = 8 if version == 4 else 4
    at = len(data) - 4 - width * (count - shape_index)
    if at < 0:
        raise SceneError("serialized file has a truncated table of meshes", path)
    offset = int(np.frombuffer(data, "<u8" if width == 8 else "<u4", 1, at)[0])
    if offset > len(data) - 4:
        raise SceneError(f"mesh {shape_index} starts past the end of the file", path)
    return offset


class _Stream:
    """The decompressed stream of one mesh, inflated only as far as it is read."""

    def __init__(self, data, start, path):
        self.inflate = zlib.decompressobj()
        self.source = memoryview(data)[start:]  # then the inflater's unconsumed tail
        self.compressed = len(self.source)
        self.buffer = b""
        self.path = path

    def read(self, n):
        while len(self.buffer) < n and not self.inflate.eof:
            try:
                chunk = self.inflate.decompress(self.source, n - len(self.buffer))
            except zlib.error as e:
                raise SceneError(f"corrupt compressed mesh data ({e})", self.path) from None
            self.source = self.inflate.unconsumed_tail
            if not chunk:
                break
            self.buffer += chunk
        if len(self.buffer) < n:
            raise SceneError("serialized mesh data is truncated", self.path)
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def name(self):
        chars = b""
        while not chars.endswith(b"\0"):
            if len(chars) >= _NAME_LIMIT:
                raise SceneError("serialized mesh name is not terminated", self.path)
            chars += self.read(1)
        return chars[:-1]


def _read_mesh(data, start, version, path, face_normals):
    stream = _Stream(data, start, path)
    flags = int(np.frombuffer(stream.read(4), "<u4")[0])
    if version == 4:
        stream.name()
    n_vertices, n_faces = (int(c) for c in np.frombuffer(stream.read(16), "<u8"))
    real = np.dtype("<f8" if flags & DOUBLE_PRECISION else "<f4")
    widths = [3] + [w for flag, w in ((HAS_NORMALS, 3), (HAS_UVS, 2), (HAS_COLORS, 3)) if flags & flag]
    needed = n_vertices * sum(widths) * real.itemsize + n_faces * 12
    if n_vertices >= 2**32 or n_faces >= 2**32 or needed > _MAX_RATIO * stream.compressed + 4096:
        raise SceneError(f"serialized mesh header claims {n_vertices} vertices and {n_faces} faces, more than "
                         "the file can hold", path)

    def array(width):
        return np.frombuffer(stream.read(n_vertices * width * real.itemsize), real).reshape(-1, width)

    positions = array(3).astype(np.float32)
    normals = array(3).astype(np.float32) if flags & HAS_NORMALS else None
    uvs = array(2).astype(np.float32) if flags & HAS_UVS else None
    if flags & HAS_COLORS:
        array(3)  # read past, as Mitsuba does
    faces = np.frombuffer(stream.read(n_faces * 12), "<u4").reshape(-1, 3)
    if not np.all(np.isfinite(positions)):
        raise SceneError("mesh contains invalid vertex position data", path)
    faces = check_faces(faces, len(positions), path)
    if normals is not None:
        normals = None if face_normals else unit_normals(normals, path)
    return Mesh(positions, faces, normals, uvs)
