"""Mesh loaders and primitives, compared with what Mitsuba 3 builds for the same input."""

import numpy as np
import pytest

from tracer.io import meshes
from tracer.errors import SceneError

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")


def mitsuba_mesh(props):
    """(positions, faces, normals, uvs) of a Mitsuba shape, as numpy arrays (None when absent)."""
    params = mi.traverse(mi.load_dict(props))
    get = lambda key, width: np.array(params[key]).reshape(-1, width) if np.array(params[key]).size else None
    return get("vertex_positions", 3), get("faces", 3), get("vertex_normals", 3), get("vertex_texcoords", 2)


def assert_same(ours, theirs, normal_atol=1e-6):
    positions, faces, normals, uvs = theirs
    np.testing.assert_allclose(ours.positions, positions, atol=1e-6)
    np.testing.assert_array_equal(ours.faces, faces)
    if ours.normals is None:
        ours = meshes.recompute_vertex_normals(ours)
    np.testing.assert_allclose(ours.normals, normals, atol=normal_atol)
    if uvs is None:
        assert ours.uvs is None
    else:
        np.testing.assert_allclose(ours.uvs, uvs, atol=1e-7)


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


# ---------------------------------------------------------------------------------- OBJ
POSITIONS = """# a comment
o thing
v 0 0 0
v 1 0 0
v 1 1 0.1
v 0 1 0
v 0.5 1.5 0.2
v 2 0.5 -0.3
"""
TEXCOORDS = "vt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\nvt 0.5 0.25\n"
NORMALS = "vn 0 0 1\nvn 0 0.2 1\nvn 0.3 0 1\n"
OBJ_HEAD = POSITIONS + TEXCOORDS + NORMALS
# (what the file declares, faces): only what the faces use, since Mitsuba leaves the uvs and
# normals of corners without one uninitialized.
OBJ_CASES = {
    "positions_only": (POSITIONS, "f 1 2 3\nf 1 3 4\nf 2 6 3\n"),
    "v_vt": (POSITIONS + TEXCOORDS, "f 1/1 2/2 3/3\nf 1/1 3/3 4/4\n"),
    "v_vn": (POSITIONS + NORMALS, "f 1//1 2//2 3//1\nf 1//1 3//1 4//3\n"),
    "v_vt_vn": (OBJ_HEAD, "f 1/1/1 2/2/1 3/3/2 4/4/3\nf 4/4/3 3/3/2 5/5/2\n"),
    "polygons": (OBJ_HEAD, "f 1/1/1 2/2/1 3/3/2 4/4/3\nf 4/4/2 3/3/1 5/5/2 1/1/1 2/2/2\ng other\nusemtl x\n"
                           "f 2/2/1 6/5/3 3/3/2\n"),
    "mixed_corner_formats": (OBJ_HEAD, "f 1/1/1 2/2/1 3/3/2\nf 1/1/1 3/3/2 4/4/3 5/5/2\nf 2/2/1 6/5/3 3/3/2\n"),
    "messy_whitespace": (OBJ_HEAD, "f\t1/1/1  2/2/1 3/3/2   \r\n  f 1/1/1 3/3/2 4/4/3 # trailing comment\r\n"),
    "interleaved": (POSITIONS, "f 1 2 3\nv 3 3 3\nf 1 3 7\nv 4 4 4\nf 8 7 3\n"),
    "empty_trailing_slot": (POSITIONS + TEXCOORDS, "f 1/1/ 2/2/ 3/3/\nf 1/1/ 3/3/ 4/4/"),
}


@pytest.mark.parametrize("case", sorted(OBJ_CASES))
def test_obj_matches_mitsuba(tmp_path, case):
    path = write(tmp_path, "m.obj", "".join(OBJ_CASES[case]))
    assert_same(meshes.load_obj(path), mitsuba_mesh({"type": "obj", "filename": path}))


def test_obj_flips_v_and_dedups_by_index_triple(tmp_path):
    path = write(tmp_path, "m.obj", OBJ_HEAD + "f 1/1/1 2/2/1 3/3/2 4/4/3\nf 4/4/2 3/3/1 5/5/2 1/1/1 2/2/2\n")
    mesh = meshes.load_obj(path)
    # Numbered by first use; 4, 3 and 2 come back with other normals, so they are split.
    assert len(mesh.positions) == 8
    np.testing.assert_array_equal(mesh.faces, [[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 0], [4, 0, 7]])
    np.testing.assert_array_equal(mesh.positions[[3, 4]], [[0, 1, 0], [0, 1, 0]])
    np.testing.assert_allclose(mesh.uvs[:4], [[0, 1], [1, 1], [1, 0], [0, 0]])  # v -> 1 - v


def test_obj_transformed_like_mitsuba(tmp_path):
    path = write(tmp_path, "m.obj", "".join(OBJ_CASES["polygons"]))
    to_world = mi.ScalarTransform4f().translate([1, 2, 3]) @ mi.ScalarTransform4f().rotate([0.6, 0.8, 0], 40) \
        @ mi.ScalarTransform4f().scale([-2, 0.5, 3])
    matrix = np.array(to_world.matrix, np.float64)
    ours = meshes.transform_mesh(meshes.load_obj(path), matrix)
    assert_same(ours, mitsuba_mesh({"type": "obj", "filename": path, "to_world": to_world}), normal_atol=2e-6)
    # Without normals, Mitsuba computes them from the world-space positions.
    path = write(tmp_path, "n.obj", "".join(OBJ_CASES["positions_only"]))
    ours = meshes.recompute_vertex_normals(meshes.transform_mesh(meshes.load_obj(path), matrix))
    assert_same(ours, mitsuba_mesh({"type": "obj", "filename": path, "to_world": to_world}), normal_atol=2e-6)


def test_xml_normal_transform_matches_mitsuba(tmp_path):
    from tracer.io.xml import parse_file
    write(tmp_path, "m.obj", "".join(OBJ_CASES["polygons"]))
    xml = write(tmp_path, "s.xml", """<scene version="3.0.0"><shape type="obj" id="m">
        <string name="filename" value="m.obj"/>
        <transform name="to_world"><scale x="2" y="-1"/><rotate x="1" y="1" angle="45"/></transform>
        </shape></scene>""")
    node = parse_file(xml).children[0]
    ours = meshes.transform_mesh(meshes.load_obj(node.get_path("filename")), node.get_transform("to_world"),
                                 node.get_normal_transform("to_world"))
    params = mi.traverse(mi.load_file(xml).shapes()[0])
    np.testing.assert_allclose(ours.positions.ravel(), np.array(params["vertex_positions"]), atol=1e-6)
    np.testing.assert_allclose(ours.normals.ravel(), np.array(params["vertex_normals"]), atol=1e-6)


@pytest.mark.parametrize("text, message", [
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 4\n", "invalid vertex 4"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 0 1 2\n", "invalid vertex 0"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf -3 -2 -1\n", "negative"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1/4 2/1 3/1\nvt 0 0\n", "invalid texture coordinate 4"),
    ("v 0 0 0\nv 1 0 0\n", "no faces"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2\n", "no faces"),
    ("v 0 0 zero\nv 1 0 0\nv 0 1 0\nf 1 2 3\n", "'v'"),
    ("v 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n", "fewer than 3"),
    ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 x\n", "face"),
])
def test_obj_errors(tmp_path, text, message):
    path = write(tmp_path, "bad.obj", text)
    with pytest.raises(SceneError, match=f"bad.obj: .*{message}"):
        meshes.load_obj(path)


def test_missing_mesh_file(tmp_path):
    with pytest.raises(SceneError, match="nope.obj: mesh file not found"):
        meshes.load_obj(tmp_path / "nope.obj")


# ---------------------------------------------------------------------------------- primitives
def test_cube_matches_mitsuba():
    assert_same(meshes.cube_mesh(), mitsuba_mesh({"type": "cube"}))


@pytest.mark.parametrize("kind", ["rectangle", "cube"])
@pytest.mark.parametrize("scale", [(1, 1, 1), (-1, 2, 0.5)])
def test_primitives_hit_like_mitsuba(kind, scale):
    """uv, shading and geometric normal at ray hits, also under a mirroring transform."""
    to_world = mi.ScalarTransform4f().rotate([0.3, 1, 0.2], 25) @ mi.ScalarTransform4f().scale(list(scale))
    matrix = np.array(to_world.matrix, np.float64)
    # A non-unit rotation axis: Mitsuba's normals use its stored (rotation-as-orthogonal) matrix.
    mesh = meshes.transform_mesh(meshes.rectangle_mesh() if kind == "rectangle" else meshes.cube_mesh(), matrix,
                                 np.array(to_world.inverse_transpose, np.float64))
    scene = mi.load_dict({"type": "scene", "s": {"type": kind, "to_world": to_world}})
    rng = np.random.default_rng(0)
    for local in np.concatenate([rng.uniform(-0.9, 0.9, (8, 2)), np.ones((8, 1))], 1):
        origin = (matrix @ [local[0], local[1], 5.0, 1.0])[:3] if kind == "cube" else \
            (matrix @ [local[0], local[1], 3.0, 1.0])[:3]
        target = (matrix @ [local[0], local[1], 0.0 if kind == "rectangle" else 1.0, 1.0])[:3]
        direction = (target - origin) / np.linalg.norm(target - origin)
        si = scene.ray_intersect(mi.Ray3f(origin.tolist(), direction.tolist()))
        hit = _intersect(mesh, origin, direction)
        assert hit is not None
        face, bary = hit
        corners = mesh.faces[face]
        w = np.array([1 - bary.sum(), *bary])
        np.testing.assert_allclose(w @ mesh.uvs[corners], np.array(si.uv), atol=1e-5)
        shading = w @ mesh.normals[corners]
        np.testing.assert_allclose(shading / np.linalg.norm(shading), np.array(si.sh_frame.n), atol=1e-5)
        p = mesh.positions[corners].astype(np.float64)
        geometric = np.cross(p[1] - p[0], p[2] - p[0])
        np.testing.assert_allclose(geometric / np.linalg.norm(geometric), np.array(si.n), atol=1e-5)


def _intersect(mesh, origin, direction):
    """Nearest (face, (b1, b2)) by Moeller-Trumbore over all faces."""
    p = mesh.positions[mesh.faces].astype(np.float64)
    e1, e2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]
    h = np.cross(direction, e2)
    det = np.sum(e1 * h, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = origin - p[:, 0]
        b1 = np.sum(s * h, axis=1) / det
        q = np.cross(s, e1)
        b2 = (q @ direction) / det
        t = np.sum(e2 * q, axis=1) / det
    ok = (np.abs(det) > 1e-12) & (b1 >= -1e-9) & (b2 >= -1e-9) & (b1 + b2 <= 1 + 1e-9) & (t > 0)
    if not ok.any():
        return None
    face = np.flatnonzero(ok)[np.argmin(t[ok])]
    return face, np.array([b1[face], b2[face]])


def test_rectangle_geometry():
    mesh = meshes.rectangle_mesh()
    np.testing.assert_allclose(mesh.uvs, (mesh.positions[:, :2] + 1) / 2)
    p = mesh.positions[mesh.faces]
    np.testing.assert_allclose(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])[:, 2], [4, 4])


def test_recompute_vertex_normals_degenerate():
    mesh = meshes.Mesh(np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0], [5, 5, 5]], np.float32),
                       np.array([[0, 1, 2]], np.int32))
    np.testing.assert_array_equal(meshes.recompute_vertex_normals(mesh).normals, [[1, 0, 0]] * 4)
