"""Mitsuba's ``serialized`` meshes, against what Mitsuba 3 loads from the same files."""
import os
import zlib

import numpy as np
import pytest

from tests.helpers.mesh_files import serialized_file, serialized_mesh
from tracer.io import meshes, serialized
from tracer.errors import SceneError

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

MITSUBA_MESHES = "/work/mitsuba-data/common/meshes"
RNG = np.random.default_rng(1)
P, N = RNG.uniform(-1, 1, (5, 3)), RNG.normal(size=(5, 3))
UV, COLOR = RNG.uniform(size=(5, 2)), RNG.uniform(size=(5, 3))
F = [[0, 1, 2], [0, 2, 3], [1, 4, 2]]


def mitsuba_arrays(props):
    params = mi.traverse(mi.load_dict(props))
    return {k: np.array(params[k]) for k in ("vertex_positions", "faces", "vertex_normals", "vertex_texcoords")}


def assert_like_mitsuba(ours, theirs):
    np.testing.assert_array_equal(ours.positions.ravel(), theirs["vertex_positions"])
    np.testing.assert_array_equal(ours.faces.ravel(), theirs["faces"])
    if theirs["vertex_normals"].size:
        normals = ours.normals if ours.normals is not None else meshes.recompute_vertex_normals(ours).normals
        np.testing.assert_allclose(normals.ravel(), theirs["vertex_normals"], atol=1e-6)
    else:
        assert ours.normals is None
    if theirs["vertex_texcoords"].size:
        np.testing.assert_array_equal(ours.uvs.ravel(), theirs["vertex_texcoords"])
    else:
        assert ours.uvs is None


@pytest.mark.parametrize("version", [3, 4])
@pytest.mark.parametrize("double", [False, True])
def test_serialized_matches_mitsuba(tmp_path, version, double):
    """Three meshes with every flag (normals, uvs, colors, the file's face-normals flag, which
    Mitsuba ignores), in single and double precision, each by shape_index, with and without the
    plugin's face_normals."""
    path = str(tmp_path / "m.serialized")
    with open(path, "wb") as f:
        f.write(serialized_file([
            serialized_mesh(P, F, N, UV, COLOR, version, double, extra_flags=0x10),
            serialized_mesh(P[::-1], F, None, UV, None, version, double),
            serialized_mesh(P, F[:1], None, None, COLOR, version, double)], version))
    for index in range(3):
        for face_normals in (False, True):
            ours = serialized.load_serialized(path, index, face_normals)
            theirs = mitsuba_arrays({"type": "serialized", "filename": path, "shape_index": index,
                                     "face_normals": face_normals})
            assert_like_mitsuba(ours, theirs)


@pytest.mark.skipif(not os.path.isdir(MITSUBA_MESHES), reason="Mitsuba's data is not unpacked here")
@pytest.mark.parametrize("index", [0, 1, 2])
def test_matpreview_mesh_matches_mitsuba(index):
    path = os.path.join(MITSUBA_MESHES, "matpreview.serialized")  # version 3, three meshes
    assert_like_mitsuba(serialized.load_serialized(path, index),
                        mitsuba_arrays({"type": "serialized", "filename": path, "shape_index": index}))


def _write(tmp_path, data):
    path = tmp_path / "bad.serialized"
    path.write_bytes(data)
    return str(path)


def _stream(body):
    return np.array([0x041C, 4], "<u2").tobytes() + zlib.compress(body)


GOOD = serialized_mesh(P, F, N, UV)
HEADER = np.uint32(0x1003).tobytes() + b"m\0"


@pytest.mark.parametrize("data, index, message", [
    (b"\x1c\x04", 0, "too short"),
    (b"\x1d\x04\x04\x00" + GOOD[4:], 0, "invalid format identifier"),
    (GOOD[:2] + b"\x05\x00" + GOOD[4:], 0, "incompatible serialized file version 5"),
    (serialized_file([GOOD]), 1, "shape_index 1 is out of range: the file holds 1 meshes"),
    (serialized_file([GOOD]), -1, "must be non-negative"),
    (GOOD[:40], 0, "truncated"),
    (GOOD[:4] + b"\x78\x9c\xff\xff" + GOOD[8:], 0, "corrupt compressed mesh data"),
    (_stream(HEADER + np.array([2**40, 1], "<u8").tobytes()), 0, "claims 1099511627776 vertices"),
    (serialized_mesh(P, [[0, 1, 5]]), 0, "face refers to vertex 5 of 5"),
    (serialized_mesh(np.where(np.arange(5)[:, None] == 2, np.nan, P), F), 0, "invalid vertex position data"),
    (serialized_mesh(P, F, np.where(np.arange(5)[:, None] == 1, 0.0, N)), 0, "invalid vertex normal data"),
    (serialized_mesh(P, np.zeros((0, 3))), 0, "no faces"),
    (_stream(np.uint32(0x1003).tobytes() + b"x" * 70000), 0, "name is not terminated"),
])
def test_serialized_errors_name_the_file(tmp_path, data, index, message):
    with pytest.raises(SceneError, match=f"bad.serialized: .*{message}"):
        serialized.load_serialized(_write(tmp_path, data), index)


def test_a_bomb_is_not_inflated_past_what_the_mesh_needs(tmp_path):
    """A stream that would inflate to 128 MiB after a 3-vertex mesh: only the mesh is inflated."""
    import tracemalloc
    body = HEADER + np.array([3, 1], "<u8").tobytes() + P[:3].astype("<f4").tobytes() + N[:3].astype("<f4").tobytes()
    body += UV[:3].astype("<f4").tobytes() + np.array([0, 1, 2], "<u4").tobytes()
    inflate = zlib.compressobj()
    data = np.array([0x041C, 4], "<u2").tobytes() + inflate.compress(body)
    zeros = bytes(1 << 20)
    data += b"".join(inflate.compress(zeros) for _ in range(128)) + inflate.flush()
    path = _write(tmp_path, data)
    tracemalloc.start()
    mesh = serialized.load_serialized(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(mesh.faces, [[0, 1, 2]])
    assert peak < 4 * len(data) + (1 << 20)


def test_serialized_shape_in_a_scene(tmp_path):
    """The loader's hook: shape_index, face_normals and to_world, against Mitsuba's world-space buffers."""
    from tracer.io.xml import parse_file
    from tracer.io.scene_loader import _SceneBuilder
    (tmp_path / "m.serialized").write_bytes(serialized_file([serialized_mesh(P, F, N, UV), serialized_mesh(P, F[1:])]))
    for index, face_normals in ((0, False), (1, False), (0, True)):
        xml = tmp_path / "s.xml"
        xml.write_text(f"""<scene version="3.0.0"><shape type="serialized">
            <string name="filename" value="m.serialized"/><integer name="shape_index" value="{index}"/>
            <boolean name="face_normals" value="{str(face_normals).lower()}"/>
            <transform name="to_world"><scale x="2" y="-1"/><rotate x="1" y="1" angle="45"/></transform>
            </shape></scene>""")
        node = parse_file(str(xml)).children[0]
        ours = _SceneBuilder(None, "auto", None)._mesh(node, node.get_transform("to_world"))
        params = mi.traverse(mi.load_file(str(xml)).shapes()[0])
        np.testing.assert_allclose(ours.positions.ravel(), np.array(params["vertex_positions"]), atol=1e-6)
        if face_normals:
            assert ours.normals is None and not np.array(params["vertex_normals"]).size
        else:
            np.testing.assert_allclose(ours.normals.ravel(), np.array(params["vertex_normals"]), atol=1e-6)
