"""PLY meshes and their attributes, compared with what Mitsuba 3 loads from the same files; and
hostile PLY input, each case a one-line SceneError naming the file."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.hang_guard import hang_guard
from tests.helpers.mesh_files import ply, triangle_ply
from tracer.io import meshes
from tracer.errors import SceneError
from tracer.io.ply import load_ply

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

FORMATS = ["ascii", "binary_little_endian", "binary_big_endian"]


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def mitsuba_mesh(props):
    """(positions, faces, normals, uvs) of a Mitsuba shape, as numpy arrays (None when absent)."""
    params = mi.traverse(mi.load_dict(props))
    get = lambda key, width: np.array(params[key]).reshape(-1, width) if np.array(params[key]).size else None
    return get("vertex_positions", 3), get("faces", 3), get("vertex_normals", 3), get("vertex_texcoords", 2)


def assert_same(ours, theirs):
    positions, faces, normals, uvs = theirs
    np.testing.assert_array_equal(ours.positions, positions)
    np.testing.assert_array_equal(ours.faces, faces)
    if ours.normals is None:
        ours = meshes.recompute_vertex_normals(ours)
    np.testing.assert_allclose(ours.normals, normals, atol=1e-6)
    if uvs is None:
        assert ours.uvs is None
    else:
        np.testing.assert_array_equal(ours.uvs, uvs)


def ply_bytes(fmt, vertex_props, vertices, faces, face_extra=None):
    """A PLY file: ``vertices`` (N, P) floats, ``faces`` list of index lists."""
    lines = ["ply", f"format {fmt} 1.0", "comment made by a test", f"element vertex {len(vertices)}"]
    lines += [f"property float {p}" for p in vertex_props]
    lines += [f"element face {len(faces)}", "property list uchar int vertex_indices"]
    if face_extra:
        lines.append("property uchar flags")
    header = ("\n".join(lines) + "\nend_header\n").encode()
    if fmt == "ascii":
        body = "".join(" ".join(f"{x:.9g}" for x in v) + "\n" for v in vertices)
        body += "".join(f"{len(f)} " + " ".join(map(str, f)) + (" 7" if face_extra else "") + "\n" for f in faces)
        return header + body.encode()
    e = "<" if fmt == "binary_little_endian" else ">"
    body = np.asarray(vertices, e + "f4").tobytes()
    for f in faces:
        body += np.uint8(len(f)).tobytes() + np.asarray(f, e + "i4").tobytes()
        if face_extra:
            body += b"\x07"
    return header + body


RNG = np.random.default_rng(3)
PLY_VERTS = np.concatenate([RNG.uniform(-1, 1, (6, 3)), RNG.normal(size=(6, 3)), RNG.uniform(0, 1, (6, 2))], 1)
PLY_TRIS = [[0, 1, 2], [0, 2, 3], [3, 2, 4], [4, 5, 0]]


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
@pytest.mark.parametrize("props", [("x", "y", "z"), ("x", "y", "z", "nx", "ny", "nz", "u", "v"),
                                   ("x", "y", "z", "nx", "ny", "nz", "s", "t")])
def test_ply_matches_mitsuba(tmp_path, fmt, props):
    columns = {"x": 0, "y": 1, "z": 2, "nx": 3, "ny": 4, "nz": 5, "u": 6, "v": 7, "s": 6, "t": 7}
    vertices = PLY_VERTS[:, [columns[p] for p in props]]
    path = write(tmp_path, "m.ply", ply_bytes(fmt, props, vertices, PLY_TRIS))
    ours = load_ply(path)
    assert_same(ours, mitsuba_mesh({"type": "ply", "filename": path}))
    if "u" in props or "s" in props:  # PLY texture coordinates are not flipped
        np.testing.assert_allclose(ours.uvs, PLY_VERTS[:, 6:8], atol=1e-7)


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
def test_ply_polygons_become_fans(tmp_path, fmt):
    faces = [[0, 1, 2, 3], [3, 2, 4], [0, 1, 2, 4, 5], [1, 2, 3]]
    path = write(tmp_path, "p.ply", ply_bytes(fmt, ("x", "y", "z", "texture_u", "texture_v"),
                                              PLY_VERTS[:, [0, 1, 2, 6, 7]], faces, face_extra=True))
    mesh = load_ply(path)
    np.testing.assert_array_equal(mesh.faces, [[0, 1, 2], [0, 2, 3], [3, 2, 4], [0, 1, 2], [0, 2, 4],
                                               [0, 4, 5], [1, 2, 3]])
    np.testing.assert_allclose(mesh.uvs, PLY_VERTS[:, 6:8], atol=1e-7)
    assert mesh.normals is None


@pytest.mark.parametrize("data, message", [
    (b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nend_header\n0\n1\n2\n", "x, y, z"),
    (b"ply\nformat ascii 2.0\nend_header\n", "format"),
    (b"ply\nformat ascii 1.0\nelement vertex 1\nproperty floaty x\nend_header\n", "header line"),
    (b"hello", "not a PLY"),
])
def test_ply_header_errors(tmp_path, data, message):
    with pytest.raises(SceneError, match=f"bad.ply: .*{message}"):
        load_ply(write(tmp_path, "bad.ply", data))


def test_ply_body_errors(tmp_path):
    good = ply_bytes("binary_little_endian", ("x", "y", "z"), PLY_VERTS[:, :3], PLY_TRIS)
    with pytest.raises(SceneError, match="truncated"):
        load_ply(write(tmp_path, "t.ply", good[:-5]))
    bad_index = ply_bytes("ascii", ("x", "y", "z"), PLY_VERTS[:, :3], [[0, 1, 6]])
    with pytest.raises(SceneError, match="vertex 6 of 6"):
        load_ply(write(tmp_path, "i.ply", bad_index))
    no_faces = ply_bytes("ascii", ("x", "y", "z"), PLY_VERTS[:, :3], [])
    with pytest.raises(SceneError, match="no faces"):
        load_ply(write(tmp_path, "n.ply", no_faces))


def test_million_triangle_ply_loads(tmp_path):
    n = 710
    x, y = np.meshgrid(np.linspace(0, 1, n), np.linspace(0, 1, n))
    vertices = np.stack([x.ravel(), y.ravel(), np.sin(7 * x).ravel()], 1)
    i = np.arange(n * n).reshape(n, n)
    a, b, c, d = i[:-1, :-1].ravel(), i[:-1, 1:].ravel(), i[1:, 1:].ravel(), i[1:, :-1].ravel()
    tris = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    records = np.zeros(len(tris), [("n", "u1"), ("i", "<i4", 3)])
    records["n"], records["i"] = 3, tris
    header = (f"ply\nformat binary_little_endian 1.0\nelement vertex {len(vertices)}\nproperty float x\n"
              f"property float y\nproperty float z\nelement face {len(tris)}\n"
              "property list uchar int vertex_indices\nend_header\n").encode()
    path = write(tmp_path, "big.ply", header + vertices.astype("<f4").tobytes() + records.tobytes())
    mesh = meshes.recompute_vertex_normals(load_ply(path))
    assert mesh.faces.shape == (len(tris), 3) and len(tris) > 1_000_000
    np.testing.assert_array_equal(mesh.faces, tris)




# ---------------------------------------------------------------------------------- attributes
def mitsuba_attributes(path):
    params = mi.traverse(mi.load_dict({"type": "ply", "filename": path}))
    standard = {"vertex_positions", "vertex_normals", "vertex_texcoords", "faces"}
    return {k: np.array(params[k]) for k in params.keys() if k.startswith(("vertex_", "face_")) and k not in standard}


VERTEX_PROPS = [("nx", "float"), ("ny", "float"), ("nz", "float"), ("red", "uchar"), ("green", "uchar"),
                ("blue", "uchar"), ("alpha", "uchar"), ("temp_x", "float"), ("q_0", "double"), ("q_1", "double"),
                ("q_2", "double"), ("w_a", "short"), ("flags", "int"), ("tint_r", "float"), ("tint_g", "float"),
                ("tint_b", "float"), ("pair_x", "float"), ("pair_y", "float"), ("u", "float"), ("v", "float"),
                ("s", "float"), ("t", "float")]
FACE_PROPS = [("weight_0", "float"), ("r", "uchar"), ("g", "uchar"), ("b", "uchar"), ("id_1", "int")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_ply_attributes_match_mitsuba(tmp_path, fmt):
    """Which properties become attributes, their names and values, vertex and face, as Mitsuba
    groups them; u/v win over s/t."""
    rng = np.random.default_rng(5)
    positions = rng.uniform(-1, 1, (6, 3))
    vertex = rng.uniform(0.1, 1, (6, len(VERTEX_PROPS)))
    vertex[:, 3:7] = rng.integers(0, 256, (6, 4))
    vertex[:, 11:13] = rng.integers(-100, 100, (6, 2))
    face = np.concatenate([rng.uniform(0, 1, (4, 1)), rng.integers(0, 256, (4, 3)), rng.integers(0, 9, (4, 1))], 1)
    path = write(tmp_path, "a.ply", triangle_ply(fmt, positions, [[0, 1, 2], [0, 2, 3], [3, 2, 4], [4, 5, 0]],
                                                 VERTEX_PROPS, vertex, FACE_PROPS, face))
    ours, theirs = load_ply(path), mitsuba_attributes(path)
    assert sorted(ours.attributes) == sorted(theirs) == [
        "face_color", "face_id", "face_weight", "vertex_color", "vertex_q", "vertex_temp", "vertex_tint_color"]
    for name, value in ours.attributes.items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value.ravel(), theirs[name], err_msg=name)
    assert ours.attributes["vertex_color"].shape == (6, 4)  # red, green, blue, alpha
    np.testing.assert_array_equal(ours.uvs, vertex[:, 18:20].astype(np.float32))


@pytest.mark.parametrize("fmt", ["ascii", "binary_big_endian"])
def test_integer_properties_convert_like_mitsuba(tmp_path, fmt):
    """Mitsuba's struct conversion: most integer types normalized by their maximum and decoded
    from sRGB (positions too), uchar and long as they are."""
    types = ["char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "half", "double"]
    props = [("x", "short"), ("y", "char"), ("z", "float")] + [(f"a{i}_0", t) for i, t in enumerate(types)]
    rows = [[-5, 3, 0.0, -1, 200, -1, 1, -7, 7, -7, 7, 0.5, 0.25],
            [3, -128, 0.0, -128, 255, -32768, 65535, -2**31, 2**32 - 1, 2**40, 2**40, 2.0, 1e-3],
            [32767, 127, 1.0, 127, 0, 32767, 100, 2**31 - 1, 100, 5, 5, -3.0, 1e30]]
    face = ("face", [("vertex_indices", "list", "uchar", "int")], [[[0, 1, 2]]])
    path = write(tmp_path, "t.ply", ply(fmt, [("vertex", props, rows), face]))
    params = mi.traverse(mi.load_dict({"type": "ply", "filename": path}))
    ours = load_ply(path)
    np.testing.assert_allclose(ours.positions.ravel(), np.array(params["vertex_positions"]), rtol=2e-7)
    for i in range(len(types)):
        np.testing.assert_allclose(ours.attributes[f"vertex_a{i}"].ravel(), np.array(params[f"vertex_a{i}"]),
                                   rtol=2e-7, err_msg=types[i])


def test_ply_attribute_quirks_match_mitsuba(tmp_path):
    """Runs that break Mitsuba's naming rules (two fields, a prefix seen twice, a bad sequence)."""
    props = [("a_x", "float"), ("a_y", "float"), ("b_0", "float"), ("c_1", "float"), ("c_2", "float"),
             ("c_3", "float"), ("c_4", "float"), ("b_1", "float"), ("d_x", "float"), ("d_z", "float"),
             ("e_x", "float"), ("long_name_0", "float"), ("f_xx", "float"), ("g_1", "float")]
    values = np.random.default_rng(2).uniform(size=(3, len(props)))
    path = write(tmp_path, "q.ply", triangle_ply("binary_little_endian", np.eye(3), [[0, 1, 2]], props, values))
    ours, theirs = load_ply(path), mitsuba_attributes(path)
    assert sorted(ours.attributes) == sorted(theirs)
    for name, value in ours.attributes.items():
        np.testing.assert_array_equal(value.ravel(), theirs[name], err_msg=name)


def test_polygon_face_attributes_repeat_over_their_triangles(tmp_path):
    faces = [[0, 1, 2, 3], [3, 2, 4], [0, 1, 2, 4, 5]]
    path = write(tmp_path, "p.ply", triangle_ply("ascii", PLY_VERTS[:, :3], faces, face_props=[("k_0", "uchar")],
                                                 face_values=[[7], [8], [9]]))
    mesh = load_ply(path)
    np.testing.assert_array_equal(mesh.attributes["face_k"][:, 0], [7, 7, 8, 9, 9, 9])
    assert len(mesh.faces) == 6


# ---------------------------------------------------------------------------------- ascii values
def test_ascii_floats_round_once_like_mitsuba(tmp_path):
    """A decimal just above a float32 midpoint whose float64 lands on it: rounding twice (to
    float64, then float32) gives the even neighbour, strtof (Mitsuba) the upper one."""
    x = ["1.0000000596046448", "1.00000005960464477539062501", "-3.0000001788139343", "0.1", "16777217", "5e-45"]
    text = ("ply\nformat ascii 1.0\nelement vertex 6\nproperty float x\nproperty float y\nproperty double z\n"
            "element face 2\nproperty list uchar int vertex_indices\nend_header\n"
            + "".join(f"{v} {v} {v}\n" for v in x) + "3 0 1 2\n3 3 4 5\n")
    path = write(tmp_path, "f.ply", text)
    ours = load_ply(path)
    theirs = mitsuba_mesh({"type": "ply", "filename": path})[0]
    np.testing.assert_array_equal(ours.positions, theirs)
    assert ours.positions[0, 0] == np.nextafter(np.float32(1), np.float32(2))  # not 1.0
    assert ours.positions[0, 2] == np.float32(1.0)  # a double, then cast: rounded twice, as Mitsuba


# ---------------------------------------------------------------------------------- mixed lists
def _naive_faces(fmt, data, n_vertices, n_faces, with_attribute):
    """Reference: the face element read record by record."""
    body = data[data.index(b"end_header\n") + 11:]
    faces, attribute = [], []
    if fmt == "ascii":
        tokens = body.split()[3 * n_vertices:]
        for _ in range(n_faces):
            k = int(tokens[0])
            faces.append([int(t) for t in tokens[1:1 + k]])
            attribute.append(float(tokens[1 + k]) if with_attribute else None)
            tokens = tokens[1 + k + with_attribute:]
    else:
        order = "<" if fmt == "binary_little_endian" else ">"
        at = 12 * n_vertices
        for _ in range(n_faces):
            k = body[at]
            faces.append(list(np.frombuffer(body, order + "i4", k, at + 1)))
            at += 1 + 4 * k
            if with_attribute:
                attribute.append(float(np.frombuffer(body, order + "f4", 1, at)[0]))
                at += 4
    return faces, attribute


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mixed_polygons_read_like_record_by_record(tmp_path, fmt, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    sizes = rng.choice([3, 4, 5, 3, 3, 4], n) if seed else 3 + (np.arange(n) % 2)  # seed 0: alternating
    faces = [list(rng.integers(0, 50, k)) for k in sizes]
    with_attribute = seed != 1
    face_props = [("w_0", "float")] if with_attribute else ()
    values = rng.uniform(size=(n, 1)) if with_attribute else None
    data = triangle_ply(fmt, rng.uniform(size=(50, 3)), faces, face_props=face_props, face_values=values)
    mesh = load_ply(write(tmp_path, "m.ply", data))
    polygons, attribute = _naive_faces(fmt, data, 50, n, with_attribute)
    expected = [[p[0], p[j], p[j + 1]] for p in polygons for j in range(1, len(p) - 1)]
    np.testing.assert_array_equal(mesh.faces, expected)
    if with_attribute:
        repeat = [a for p, a in zip(polygons, attribute) for _ in range(len(p) - 2)]
        np.testing.assert_array_equal(mesh.attributes["face_w"][:, 0], np.float32(repeat))


def test_million_mixed_polygons_load_without_a_loop_over_records(tmp_path):
    """Quads after a triangle, alternating (the worst case for runs of equal size)."""
    n = 600_000
    sizes = np.where(np.arange(n) % 2 == 0, 3, 4)
    records = np.zeros(n // 2, [("n3", "u1"), ("i3", "<i4", 3), ("n4", "u1"), ("i4", "<i4", 4)])
    records["n3"], records["n4"] = 3, 4
    records["i3"] = np.arange(3)
    records["i4"] = np.arange(4)
    header = (f"ply\nformat binary_little_endian 1.0\nelement vertex 4\nproperty float x\nproperty float y\n"
              f"property float z\nelement face {n}\nproperty list uchar int vertex_indices\nend_header\n").encode()
    path = write(tmp_path, "big.ply", header + np.eye(4, 3, dtype="<f4").tobytes() + records.tobytes())
    with hang_guard(120):  # (a loop over records took minutes)
        mesh = load_ply(path)
    assert len(mesh.faces) == int(np.sum(sizes - 2))


# ---------------------------------------------------------------------------------- hostile input
def _ascii_triangle(count, count_type="uchar"):
    return ("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
            f"element face 1\nproperty list {count_type} int vertex_indices\nend_header\n"
            f"0 0 0\n1 0 0\n0 1 0\n{count} 0 1 2\n")


def _binary_triangle(count, count_type):
    header = ("ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
              f"property float z\nelement face 1\nproperty list {count_type} int vertex_indices\nend_header\n")
    code = {"float": "<f4", "double": "<f8", "char": "i1", "int": "<i4"}[count_type]
    return (header.encode() + np.eye(3, dtype="<f4").tobytes() + np.array(count, code).tobytes()
            + np.array([0, 1, 2], "<i4").tobytes())


HOSTILE = {
    "fractional count": _ascii_triangle("2.5"),
    "count 3.0 as a uchar": _ascii_triangle("3.0"),
    "count nan": _ascii_triangle("nan"), "count inf": _ascii_triangle("inf"), "count -3": _ascii_triangle("-3"),
    "count 1e30": _ascii_triangle("1e30"), "count 256 as a uchar": _ascii_triangle("256"),
    "float count 2.5": _ascii_triangle("2.5", "float"), "float count nan": _ascii_triangle("nan", "float"),
    "float count -3": _ascii_triangle("-3", "float"), "float count 1e30": _ascii_triangle("1e30", "float"),
    "float count 1e39": _ascii_triangle("1e39", "float"),
    **{f"binary {t} count {c}": _binary_triangle(c, t) for t in ("float", "double")
       for c in (np.nan, np.inf, -3.0, 1e30, 2.5)},
    "binary char count -3": _binary_triangle(-3, "char"), "binary int count 2^31-1": _binary_triangle(2**31 - 1, "int"),
    "a huge element count": ("ply\nformat binary_little_endian 1.0\nelement vertex 99999999999999999999\n"
                             "property float x\nend_header\n"),
    "zero normal": ("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
                    "property float nx\nproperty float ny\nproperty float nz\nelement face 1\n"
                    "property list uchar int vertex_indices\nend_header\n0 0 0 0 0 1\n1 0 0 0 0 0\n0 1 0 0 0 1\n"
                    "3 0 1 2\n"),
    "a nan texture coordinate": triangle_ply("binary_little_endian", np.eye(3), [[0, 1, 2]],
                                             [("u", "float"), ("v", "float")], [[0, 0], [1, np.nan], [0, 1]]),
    "an inf attribute": triangle_ply("binary_little_endian", np.eye(3), [[0, 1, 2]], [("c_0", "float")],
                                     [[0], [np.inf], [1]]),
    "a hex value": _ascii_triangle("3").replace("1 0 0", "0x1 0 0"),
    "trailing binary content": _binary_triangle(3, "int") + b"\0",
    "a fractional index": _ascii_triangle("3").replace("3 0 1 2", "3 0 1.5 2"),
    "an index past the vertices": _ascii_triangle("3").replace("3 0 1 2", "3 0 1 3"),
    "a duplicate element": _ascii_triangle("3").replace("element face 1", "element vertex 1\nproperty float x\n"
                                                        "element face 1"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_ply_is_one_line_scene_error(tmp_path, case):
    path = write(tmp_path, "bad.ply", HOSTILE[case])
    with hang_guard(), pytest.raises(SceneError, match=r"^\S*bad.ply: ") as error:
        load_ply(path)
    assert "\n" not in str(error.value)


def test_flip_tex_coords_and_face_normals_like_mitsuba(tmp_path):
    props = [("nx", "float"), ("ny", "float"), ("nz", "float"), ("u", "float"), ("v", "float")]
    values = np.concatenate([np.random.default_rng(0).normal(size=(6, 3)), PLY_VERTS[:, 6:8]], 1)
    path = write(tmp_path, "m.ply", triangle_ply("binary_little_endian", PLY_VERTS[:, :3], PLY_TRIS, props, values))
    ours = load_ply(path, face_normals=True, flip_tex_coords=True)
    theirs = mitsuba_mesh({"type": "ply", "filename": path, "face_normals": True, "flip_tex_coords": True})
    assert ours.normals is None and theirs[2] is None
    np.testing.assert_array_equal(ours.uvs, theirs[3])


MUTANT_TOKENS = ["nan", "inf", "-3", "1e30", "2.5", "0", "4", "255", "99999999999", "-0", "x", "1e-50", ""]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(FORMATS), st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(MUTANT_TOKENS)),
                                          min_size=1, max_size=4), st.integers(0, 10**6))
def test_mutated_ply_loads_or_is_a_scene_error(tmp_path_factory, fmt, mutations, cut):
    """Ascii tokens replaced by hostile ones, binary bytes overwritten, the file cut short: a
    mesh or a SceneError, quickly."""
    faces = [[0, 1, 2, 3], [3, 2, 4], [0, 1, 2], [4, 5, 0]]
    data = triangle_ply(fmt, PLY_VERTS[:, :3], faces, [("red", "uchar"), ("s_0", "float")],
                        np.stack([np.arange(6), np.arange(6) / 7], 1), [("w_0", "float")], [[1], [2], [3], [4]])
    head = data.index(b"end_header\n") + 11
    body = data[head:]
    for where, token in mutations:
        if fmt == "ascii":
            tokens = body.split(b" ")
            tokens[where % len(tokens)] = token.encode()
            body = b" ".join(tokens)
        else:
            at = where % len(body)
            body = body[:at] + np.array(float(token or 0) if token not in ("x",) else 7,
                                        "<f4").tobytes()[:2] + body[at + 2:]
    data = data[:head] + body
    if cut % 5 == 0:
        data = data[:head + cut % max(len(body), 1)]
    path = tmp_path_factory.mktemp("fuzz") / "m.ply"
    path.write_bytes(data)
    try:
        with hang_guard():
            mesh = load_ply(str(path))
        assert np.all(np.isfinite(mesh.positions)) and mesh.faces.min() >= 0
    except SceneError as e:
        assert "m.ply" in str(e) and "\n" not in str(e)
