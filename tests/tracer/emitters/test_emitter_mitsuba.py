"""Emitters against Mitsuba 3's own plugins, point by point (scalar_rgb variant).

Mitsuba's warps are used where they are simple (delta lights, uniform sphere, sphere cone, disk,
mesh triangle selection), so the same uniforms give the same samples; the envmap maps its
uniforms differently, so there the pdfs and radiance of our samples are compared instead.
"""
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import emitter_cases as C
from tracer.kinds import BitmapFilter, SurfaceKind, WrapMode

mi = pytest.importorskip("mitsuba")

N = 128
RAD = {"type": "area", "radiance": {"type": "rgb", "value": [1.0, 2.0, 3.0]}}


@pytest.fixture(autouse=True)
def _scalar_rgb():
    mi.set_variant("scalar_rgb")


def _vec(v):
    return [float(x) for x in v]


def _interaction(p):
    it = mi.Interaction3f()
    it.p = mi.Point3f(*_vec(p))
    return it


def _mi_samples(emitter, refs, u):
    """Mitsuba's sample_direction per lane: p, n, d (3, N), pdf (N,), weight (3, N)."""
    out = {k: [] for k in ("p", "n", "d", "pdf", "w")}
    for i in range(refs.shape[1]):
        ds, w = emitter.sample_direction(_interaction(refs[:, i]), mi.Point2f(*_vec(u[:, i])))
        for key, value in (("p", _vec(ds.p)), ("n", _vec(ds.n)), ("d", _vec(ds.d)), ("pdf", ds.pdf), ("w", _vec(w))):
            out[key].append(value)
    return {k: np.array(v, np.float64).T for k, v in out.items()}


def _mi_pdfs(emitter, refs, p, n, d, scene=None):
    """Mitsuba's pdf_direction (or the scene's pdf_emitter_direction) for direction samples."""
    pdfs = []
    for i in range(refs.shape[1]):
        ds = mi.DirectionSample3f()
        ds.p, ds.n, ds.d = mi.Point3f(*_vec(p[:, i])), mi.Normal3f(*_vec(n[:, i])), mi.Vector3f(*_vec(d[:, i]))
        ds.dist = float(np.linalg.norm(p[:, i] - refs[:, i]))
        it = _interaction(refs[:, i])
        if scene is None:
            pdfs.append(emitter.pdf_direction(it, ds))
        else:
            ds.emitter = emitter
            pdfs.append(scene.pdf_emitter_direction(it, ds))
    return np.array(pdfs)


def _ours(emitters, refs, u, textures=None, u_select=None):
    textures = C.no_textures() if textures is None else textures
    u_select = np.zeros(refs.shape[1], np.float32) if u_select is None else u_select
    ds, w = C.sample_direction(emitters, textures, jnp.asarray(refs, jnp.float32), jnp.asarray(u_select),
                               jnp.asarray(u, jnp.float32))
    return ds, np.asarray(w)


def _inputs(seed, spread=1.0, center=(0.0, 0.0, 0.0)):
    rng = np.random.default_rng(seed)
    refs = (np.asarray(center)[:, None] + rng.uniform(-spread, spread, (3, N))).astype(np.float32)
    return refs, rng.random((2, N), np.float32)


def _lookat(origin, target, up):
    return mi.ScalarTransform4f().look_at(origin=origin, target=target, up=up)


DELTA_AND_CONSTANT = {
    "point": ('<emitter type="point"><rgb name="intensity" value="1, 2, 3"/><point name="position" x="0.2" y="0.5" z="3"/></emitter>',
              {"type": "point", "intensity": {"type": "rgb", "value": [1, 2, 3]}, "position": [0.2, 0.5, 3]}),
    "spot": ('<emitter type="spot"><rgb name="intensity" value="1, 2, 3"/><float name="cutoff_angle" value="30"/>'
             '<float name="beam_width" value="10"/><transform name="to_world"><lookat origin="0.3, 0.1, 2" target="0, 0, 0" '
             'up="0, 1, 0"/></transform></emitter>',
             {"type": "spot", "intensity": {"type": "rgb", "value": [1, 2, 3]}, "cutoff_angle": 30.0, "beam_width": 10.0,
              "to_world": "lookat"}),
    "directional": ('<emitter type="directional"><rgb name="irradiance" value="1, 2, 3"/><vector name="direction" x="0.2" y="-1" z="0.3"/></emitter>',
                    {"type": "directional", "irradiance": {"type": "rgb", "value": [1, 2, 3]}, "direction": [0.2, -1, 0.3]}),
    "constant": ('<emitter type="constant"><rgb name="radiance" value="1, 2, 3"/></emitter>',
                 {"type": "constant", "radiance": {"type": "rgb", "value": [1, 2, 3]}}),
}


@pytest.mark.parametrize("name", sorted(DELTA_AND_CONSTANT))
def test_delta_and_constant_samples_match_mitsuba(name):
    xml, spec = DELTA_AND_CONSTANT[name]
    spec = dict(spec)
    if spec.get("to_world") == "lookat":
        spec["to_world"] = _lookat([0.3, 0.1, 2], [0, 0, 0], [0, 1, 0])
    emitters = C.table(lambda b: b.add(C.node(xml), None))
    scene = mi.load_dict({"type": "scene", "box": {"type": "cube"}, "em": spec})
    refs, u = _inputs(seed=1)
    ds, w = _ours(emitters, refs, u)
    ref = _mi_samples(scene.emitters()[0], refs, u)
    np.testing.assert_allclose(np.asarray(ds.d), ref["d"], atol=2e-6)
    np.testing.assert_allclose(w, ref["w"], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(np.asarray(ds.pdf), ref["pdf"], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ds.p), ref["p"], rtol=1e-5, atol=1e-5)  # incl. the far points
    if name == "spot":
        assert 0.1 < np.mean(w[0] == 0) < 0.9 and np.any((w[0] > 0) & (w[0] < ref["w"][0].max() * 0.5))


def _obj(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


TRI_V = np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0], [0, 0, 1.5]], float)
TRI_F = np.array([[0, 1, 2], [0, 2, 3], [0, 1, 4]])
SMOOTH_N = np.array([[0.6, 0, 0.8], [0.6, 0, 0.8], [-0.6, 0, 0.8], [-0.6, 0, 0.8]])


def _area_case(name, flip, tmp_path):
    """(our table, Mitsuba shape dict, reference points)."""
    refs, _ = _inputs(seed=2, spread=2.5)
    if name.startswith("sphere"):
        center, radius = np.array([0.3, -0.2, 0.5]), 0.7
        if name == "sphere_inside":
            refs = (center[:, None] + np.random.default_rng(3).uniform(-0.35, 0.35, (3, N))).astype(np.float32)
        analytic = (SurfaceKind.SPHERE, C.sphere_to_world(center, radius))
        spec = {"type": "sphere", "center": center.tolist(), "radius": radius}
        add = dict(analytic=analytic)
    elif name in ("disk", "rectangle"):  # rectangle: its square parametrisation, not its triangles
        t = (mi.ScalarTransform4f().translate([0.1, 0.2, 0.3]) @ mi.ScalarTransform4f().rotate([0.6, 0.8, 0], 30)
             @ mi.ScalarTransform4f().scale([1.5, 0.7, 1]))
        spec = {"type": name, "to_world": t}
        kind = SurfaceKind.DISK if name == "disk" else SurfaceKind.RECTANGLE
        add = dict(analytic=(kind, np.array(t.matrix)))
    elif name.startswith("cylinder"):
        from tracer.shapes import geometry
        t = mi.ScalarTransform4f().translate([0.1, 0.2, 0.3]) @ mi.ScalarTransform4f().rotate([0.6, 0.8, 0], 30)
        if name == "cylinder_mirrored":  # Mitsuba then flips the sampled normals inward
            t = t @ mi.ScalarTransform4f().scale([1, -1, 1])
        p0, p1, radius = [0.2, -0.3, -0.4], [-0.1, 0.4, 0.9], 0.8
        spec = {"type": "cylinder", "p0": p0, "p1": p1, "radius": radius, "to_world": t}
        m = np.array(t.matrix, np.float64) @ geometry.cylinder_to_world(p0, p1, radius)
        # The loader folds a mirroring transform into the cylinder's flip_normals, as Mitsuba.
        add = dict(analytic=(SurfaceKind.CYLINDER, m), flip_normals=flip != (np.linalg.det(m[:3, :3]) < 0))
    elif name == "mesh":
        text = "".join(f"v {x} {y} {z}\n" for x, y, z in TRI_V) + "f 1 2 3\nf 1 3 4\nf 1 2 5\n"
        spec = {"type": "obj", "filename": _obj(tmp_path, "m.obj", text), "face_normals": True}
        p = TRI_V[TRI_F]
        add = dict(triangles=(p[:, 0], p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]))
    else:  # a smooth quad: vertex normals tilted apart
        text = ("".join(f"v {x} {y} {z}\n" for x, y, z in TRI_V[:4]) + "".join(f"vn {x} {y} {z}\n" for x, y, z in SMOOTH_N)
                + "f 1//1 2//2 3//3\nf 1//1 3//3 4//4\n")
        spec = {"type": "obj", "filename": _obj(tmp_path, "s.obj", text)}
        p, n = TRI_V[TRI_F[:2]], SMOOTH_N[TRI_F[:2]]
        add = dict(triangles=(p[:, 0], p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), normals=(n[:, 0], n[:, 1], n[:, 2]))
    spec.update(flip_normals=flip, emitter=RAD)
    add = {"flip_normals": flip, **add}
    emitters = C.table(lambda b: b.add_area(C.area_node(), 0, **add), bounds=(-5 * np.ones(3), 5 * np.ones(3)))
    return emitters, spec, refs


@pytest.mark.parametrize("flip", [False, True])
@pytest.mark.parametrize("name", ["sphere", "sphere_inside", "disk", "rectangle", "cylinder", "cylinder_mirrored",
                                  "mesh", "smooth_mesh"])
def test_area_samples_match_mitsuba(name, flip, tmp_path):
    emitters, spec, refs = _area_case(name, flip, tmp_path)
    u = np.random.default_rng(4).random((2, N), np.float32)
    scene = mi.load_dict({"type": "scene", "s": spec})
    emitter = scene.emitters()[0]
    ds, w = _ours(emitters, refs, u)
    ref = _mi_samples(emitter, refs, u)
    valid = np.asarray(ds.pdf) > 0
    assert valid.any() == (name != "sphere_inside" or flip)  # inside, only inward normals face us
    # Same warps: same points and normals; Mitsuba zeroes only the weight of back-side samples.
    np.testing.assert_allclose(np.asarray(ds.p), ref["p"], atol=2e-5)
    np.testing.assert_allclose(np.asarray(ds.n), ref["n"], atol=2e-5)
    np.testing.assert_array_equal(valid, ref["w"][0] > 0)
    np.testing.assert_allclose(np.asarray(ds.pdf)[valid], ref["pdf"][valid], rtol=1e-4)
    np.testing.assert_allclose(w, ref["w"], rtol=1e-4)
    # The MIS pdf of a hit point, both ways.
    mi_pdf = _mi_pdfs(emitter, refs, np.asarray(ds.p), np.asarray(ds.n), np.asarray(ds.d))
    np.testing.assert_allclose(np.asarray(ds.pdf)[valid], mi_pdf[valid], rtol=1e-4)
    assert np.all(mi_pdf[~valid] == 0)


def _envmap(tmp_path, image):
    path = str(tmp_path / "env.exr")
    mi.Bitmap(image).write(path)
    axis = np.array([1.0, 0.3, 0.0]) / np.linalg.norm([1.0, 0.3, 0.0])
    xml = (f'<emitter type="envmap"><string name="filename" value="{path}"/><float name="scale" value="1.5"/>'
           f'<transform name="to_world"><rotate x="{float(axis[0])!r}" y="{float(axis[1])!r}" angle="40"/></transform></emitter>')
    ours = C.table(lambda b: b.add(C.node(xml), None))  # read with tracer.io.images
    spec = {"type": "envmap", "filename": path, "scale": 1.5,
            "to_world": mi.ScalarTransform4f().rotate(axis=axis.tolist(), angle=40)}
    scene = mi.load_dict({"type": "scene", "box": {"type": "cube"}, "em": spec})
    return ours, scene.emitters()[0]


def test_envmap_eval_pdf_and_samples_match_mitsuba(tmp_path):
    rng = np.random.default_rng(5)
    image = rng.uniform(0.0, 3.0, (6, 10, 3)).astype(np.float32)
    image[2, 3] = 40.0
    ours, emitter = _envmap(tmp_path, image)
    refs, u = _inputs(seed=6)
    d = rng.normal(size=(3, N))
    d = (d / np.linalg.norm(d, axis=0)).astype(np.float32)

    radiance = np.asarray(C.eval_environment(ours, C.no_textures(), jnp.asarray(d)))
    expected = []
    for i in range(N):
        si = mi.SurfaceInteraction3f()
        si.wi = mi.Vector3f(*_vec(-d[:, i]))
        expected.append(_vec(emitter.eval(si)))
    np.testing.assert_allclose(radiance, np.array(expected).T, rtol=2e-5, atol=1e-6)

    env = np.zeros(N, np.int32)
    pdf = np.asarray(C.pdf_direction(ours, jnp.asarray(refs), jnp.asarray(env), jnp.asarray(refs), jnp.asarray(refs),
                                     jnp.asarray(d)))
    np.testing.assert_allclose(pdf, _mi_pdfs(emitter, refs, refs, refs, d), rtol=1e-4)

    ds, w = _ours(ours, refs, u)
    sampled_d = np.asarray(ds.d)
    mi_pdf = _mi_pdfs(emitter, refs, np.asarray(ds.p), np.asarray(ds.n), sampled_d)
    np.testing.assert_allclose(np.asarray(ds.pdf), mi_pdf, rtol=1e-4)
    mi_radiance = []
    for i in range(N):
        si = mi.SurfaceInteraction3f()
        si.wi = mi.Vector3f(*_vec(-sampled_d[:, i]))
        mi_radiance.append(_vec(emitter.eval(si)))
    np.testing.assert_allclose(w, np.array(mi_radiance).T / mi_pdf, rtol=1e-4)
    # The far point: twice the scene's bounding-sphere radius away (the cube's: sqrt(3)).
    ref = _mi_samples(emitter, refs, u)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(ds.p) - refs, axis=0),
                               np.linalg.norm(ref["p"] - refs, axis=0), rtol=1e-5)


def test_scene_pdf_with_sampling_weights_matches_mitsuba(tmp_path):
    quad = np.array([[-1, -1, 2], [1, -1, 2], [1, 1, 2], [-1, 1, 2]], float)
    text = "".join(f"v {x} {y} {z - 2}\n" for x, y, z in quad) + "f 1 2 3\nf 1 3 4\n"
    point_xml = ('<emitter type="point"><rgb name="intensity" value="5"/><point name="position" x="0" y="1" z="1"/>'
                 '<float name="sampling_weight" value="0.5"/></emitter>')
    ours = C.table(
        lambda b: b.add_area(C.area_node(extra='<float name="sampling_weight" value="2"/>'), 0, triangles=C.quad(quad),
                             flip_normals=True),
        lambda b: b.add(C.node(point_xml), None),
        lambda b: b.add(C.node('<emitter type="constant"><rgb name="radiance" value="0.5"/></emitter>'), None),
        bounds=(np.array([-1.0, -1, -1]), np.array([1.0, 1, 2])))
    scene = mi.load_dict({
        "type": "scene", "box": {"type": "cube"},
        "q": {"type": "obj", "filename": _obj(tmp_path, "q.obj", text), "flip_normals": True,
              "to_world": mi.ScalarTransform4f().translate([0, 0, 2]), "emitter": dict(RAD, sampling_weight=2.0)},
        "p": {"type": "point", "intensity": {"type": "rgb", "value": [5, 5, 5]}, "position": [0, 1, 1], "sampling_weight": 0.5},
        "c": {"type": "constant", "radiance": {"type": "rgb", "value": [0.5, 0.5, 0.5]}},
    })
    by_kind = {str(e).split("[")[0]: e for e in scene.emitters()}
    refs, u = _inputs(seed=7)
    u_select = np.random.default_rng(8).random(N, np.float32)
    ds, _ = _ours(ours, refs, u, u_select=u_select)
    chosen = np.asarray(ds.emitter)
    for ours_id, name in ((0, "AreaLight"), (2, "ConstantBackgroundEmitter")):
        lanes = chosen == ours_id
        assert lanes.any()
        pick = lambda a: np.asarray(a)[:, lanes]
        mi_pdf = _mi_pdfs(by_kind[name], refs[:, lanes], pick(ds.p), pick(ds.n), pick(ds.d), scene=scene)
        mine = np.asarray(ds.pdf)[lanes]
        valid = mine > 0
        np.testing.assert_allclose(mine[valid], mi_pdf[valid], rtol=1e-4)


def test_spot_projected_texture_matches_mitsuba(tmp_path):
    from tracer.textures import TextureTableBuilder

    image = np.random.default_rng(9).uniform(0, 1, (4, 5, 3)).astype(np.float32)
    path = str(tmp_path / "spot.exr")
    mi.Bitmap(image).write(path)
    textures = TextureTableBuilder()
    xml = (f'<emitter type="spot"><rgb name="intensity" value="2, 3, 4"/><float name="cutoff_angle" value="50"/>'
           f'<texture type="bitmap" name="texture"><string name="filename" value="{path}"/></texture>'
           '<transform name="to_world"><lookat origin="0, 0, 3" target="0, 0, 0" up="0, 1, 0"/></transform></emitter>')
    ours = C.table(lambda b: b.add(C.node(xml), lambda child: textures.add_bitmap(image, filter=BitmapFilter.BILINEAR, wrap=WrapMode.REPEAT)))
    scene = mi.load_dict({"type": "scene", "em": {
        "type": "spot", "intensity": {"type": "rgb", "value": [2, 3, 4]}, "cutoff_angle": 50.0,
        "texture": {"type": "bitmap", "filename": path, "raw": True}, "to_world": _lookat([0, 0, 3], [0, 0, 0], [0, 1, 0])}})
    refs, u = _inputs(seed=10, spread=1.5)
    _, w = _ours(ours, refs, u, textures=textures.build())
    ref = _mi_samples(scene.emitters()[0], refs, u)
    np.testing.assert_allclose(w, ref["w"], rtol=1e-4, atol=1e-6)
    assert np.mean(ref["w"][0] > 0) > 0.5 and np.std(ref["w"][0] / ref["w"][1]) > 0.01  # really textured
