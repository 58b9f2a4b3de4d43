"""Mitsuba's ``linearcurve`` and ``bsplinecurve``: hits, normals and uvs of the curve kernel
(``tracer.shapes.curves``, jitted alone on rays) against Mitsuba's own (Embree's curves) ray by ray,
the segments' bounds around every hit, one small scene rendered by both, and bad curve files
refused by the loader in one line naming file and line."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tracer.shapes import curves
from tracer.io import curves as curve_files
from tracer.errors import SceneError
from tracer.kinds import SurfaceKind

mi = pytest.importorskip("mitsuba")

FILES = {
    # one straight curve (3 linear segments, 1 B-spline segment)
    "straight": "0 0 0 0.5\n0 0 1 0.5\n0 0 2 0.5\n0 0 3 0.5\n",
    # Mitsuba's documentation curve: tight bends
    "zigzag": "-1 0 -1 0.1\n-0.5 0 1 0.1\n-0.25 0 -1 0.1\n0 0 1 0.1\n0.25 0 -1 0.1\n0.5 0 1 0.1\n1 0 -1 0.1\n",
    # two curves with varying radii (the B-spline one of 5 points: 2 segments)
    "varying": "0 0 0 0.2\n1 0.2 0.5 0.25\n1.5 1 0.2 0.15\n2 1.2 1 0.2\n2.5 0.3 1.5 0.2\n\n-1 -1 0 0.3\n-1 -0.5 1 0.05\n"
               "-1.5 0 1.5 0.1\n-2 0.5 1 0.2\n",
}
PLUGINS = {"linearcurve": (SurfaceKind.LINEAR_CURVE, curves.pack_linear),
           "bsplinecurve": (SurfaceKind.BSPLINE_CURVE, curves.pack_bspline)}
SLOTS = 8      # segments per file, padded (every case then runs the one compiled kernel)
N_RAYS = 600


def _rays(points, radii, n, seed):
    """Rays aimed near ``points`` (within about two radii), from 6 units away."""
    rng = np.random.default_rng(seed)
    target = points[rng.integers(0, len(points), n)] + rng.normal(scale=min(0.3, 2 * radii.max()), size=(n, 3))
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return target - 6.0 * d, d


@jax.jit
def _closest_curve_hit(kind, to_world, to_local, o, d):
    """Closest hits of rays o, d (3, N) with segments ``kind`` (S,), matrices (3, 4, S), both curve
    kinds in the program as in a scene with both: (t, segment, p, n, uv) per ray."""
    t, v = curves.intersect(kind[:, None], to_world[..., None], to_local[..., None], o[:, None], d[:, None],
                            jnp.float32(jnp.inf), SurfaceKind.CURVES)
    best = jnp.argmin(t, axis=0)
    t, v = jnp.min(t, axis=0), jnp.take_along_axis(v, best[None], axis=0)[0]
    p = o + jnp.where(jnp.isfinite(t), t, 0.0) * d
    _, _, n, uv, _, _ = curves.surface(kind[best], SurfaceKind.CURVES, p, to_world[..., best], to_local[..., best], v)
    return t, best, p, n, uv


def _segments(plugin, data):
    """(kind (SLOTS,), to_world (3, 4, SLOTS), to_local (3, 4, SLOTS)) of a file's segments, padded
    with kind -1 (no curve)."""
    kind, pack = PLUGINS[plugin]
    packed = pack(data.points, data.radii, data.starts)
    assert len(packed) <= SLOTS
    kinds = np.full(SLOTS, -1, np.int32)
    kinds[:len(packed)] = kind
    mats = np.zeros((2, 3, 4, SLOTS), np.float32)
    for i, (m, local) in enumerate(packed):
        mats[:, :, :, i] = m[:3], local[:3]
    return kinds, mats[0], mats[1]


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_hits_match_mitsuba(plugin, name, tmp_path):
    path = tmp_path / f"{name}.txt"
    path.write_text(FILES[name])
    data = curve_files.load_curves(str(path), plugin)
    kinds, to_world, to_local = _segments(plugin, data)
    p = data.points  # the curve passes through its points, a B-spline's near (p[i] + 4 p[i + 1] + p[i + 2]) / 6
    aims = p if plugin == "linearcurve" else (p[:-2] + 4 * p[1:-1] + p[2:]) / 6
    n = N_RAYS
    o, d = _rays(aims, data.radii, n, seed=len(name))
    t, segment, hit_p, normal, uv = (np.asarray(a) for a in _closest_curve_hit(
        kinds, to_world, to_local, jnp.asarray(o.T, jnp.float32), jnp.asarray(d.T, jnp.float32)))
    normal, uv = normal.T, uv.T

    scene = mi.load_dict({"type": "scene", "c": {"type": plugin, "filename": str(path)}})
    ref = [scene.ray_intersect(mi.Ray3f(o[i], d[i])) for i in range(n)]
    ref_t = np.array([r.t for r in ref])
    ref_n, ref_uv = np.array([r.n for r in ref]), np.array([r.uv for r in ref])

    both = np.isfinite(t) & np.isfinite(ref_t)
    assert both.sum() > 0.1 * n
    # Embree and we disagree on the odd grazing ray and on the self-intersecting inside of tight bends.
    assert np.sum(np.isfinite(t) != np.isfinite(ref_t)) <= 0.005 * n
    np.testing.assert_allclose(t[both], ref_t[both], atol=2e-4)
    np.testing.assert_allclose(normal[both], ref_n[both], atol=2e-3)
    du = np.abs(uv[both, 0] - ref_uv[both, 0])
    # The angle around the curve wraps at 1. A ray that meets a linear curve exactly at a joint
    # (v = k / segments) takes either segment's angle: 1 or 2 rays in 200, with either rounding.
    assert np.mean(np.minimum(du, 1.0 - du) >= 2e-3) <= 0.01
    np.testing.assert_allclose(uv[both, 1], ref_uv[both, 1], atol=2e-4)
    # The BVH finds a segment only inside its box: every hit point lies in its segment's bounds.
    hit = np.isfinite(t)
    lo, hi = curves.bounds(kinds, to_world, to_local)
    s = segment[hit]
    assert np.all(hit_p.T[hit] >= lo.T[s] - 1e-4) and np.all(hit_p.T[hit] <= hi.T[s] + 1e-4)


SCENE = """<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="4"/></integrator>
    <sensor type="perspective"><float name="fov" value="40"/>
        <transform name="to_world"><lookat origin="0, -5, 3" target="0, 0, 0.5" up="0, 0, 1"/></transform>
        <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="24"/>
            <rfilter type="box"/></film>
        <sampler type="independent"><integer name="sample_count" value="16"/></sampler></sensor>
    <emitter type="constant"><rgb name="radiance" value="0.1"/></emitter>
    <shape type="rectangle"><transform name="to_world"><scale value="3"/></transform>
        <bsdf type="diffuse"><rgb name="reflectance" value="0.6, 0.5, 0.4"/></bsdf></shape>
    <shape type="rectangle"><transform name="to_world"><scale value="0.6"/><rotate x="1" angle="180"/>
        <translate z="3"/></transform>
        <emitter type="area"><rgb name="radiance" value="8, 7, 6"/></emitter></shape>
    <shape type="linearcurve"><string name="filename" value="zigzag.txt"/>
        <transform name="to_world"><scale x="1.5" z="0.4"/><translate y="-0.5" z="0.6"/></transform>
        <bsdf type="twosided"><bsdf type="diffuse"><rgb name="reflectance" value="0.2, 0.3, 0.7"/></bsdf></bsdf></shape>
    <shape type="bsplinecurve"><string name="filename" value="varying.txt"/>
        <transform name="to_world"><translate y="0.8" z="0.3"/></transform>
        <bsdf type="diffuse"><texture name="reflectance" type="checkerboard">
            <transform name="to_uv"><scale x="2" y="6"/></transform></texture></bsdf></shape>
</scene>"""


def test_curves_render_like_mitsuba(tmp_path):
    """Both curve kinds in one scene (by brute force: the BVH's boxes, ``curves.bounds``, are checked
    around every hit above, and its compiled program costs minutes more)."""
    import tracer
    for name in ("zigzag", "varying"):
        (tmp_path / f"{name}.txt").write_text(FILES[name])
    xml = tmp_path / "curves.xml"
    xml.write_text(SCENE)
    scene = tracer.load_scene(str(xml), accel="brute")
    assert scene.geometry.analytic_kinds == SurfaceKind.CURVES
    assert scene.emitters.area_shapes_present == (SurfaceKind.RECTANGLE,)
    ours = np.asarray(tracer.render(scene, spp=256, seed=0))  # 512 spp: 15 s of CPU; 256 uses under 0.3 of the tolerances
    theirs = np.array(mi.render(mi.load_file(str(xml)), spp=8192, seed=3))  # 3 s
    assert np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours.mean((0, 1)), theirs.mean((0, 1)), rtol=0.02)
    block = lambda img: img.reshape(8, 3, 8, 4, -1).mean((1, 3))
    np.testing.assert_allclose(block(ours), block(theirs), rtol=0.1, atol=0.01)


HEAD = '<scene version="3.0.0"><sensor type="perspective"/>'  # line 1
BAD = [
    ("", "empty curve file", None),
    ("0 0 0 0.1\n1 0 0\n", "could not parse control point", 2),
    ("0 0 0 0.1\n1 0 x 0.1\n", "could not parse control point", 2),
    ("0 0 0 0.1\n1 0 nan 0.1\n", "is not finite", 2),
    ("0 0 0 0.1\n1 0 0 -0.1\n", "negative", 2),
    ("0 0 0 0.1\n1 0 0 0.1\n\n2 0 0 0.1\n", "at least 2 control points", 4),
    ("0 0 0 " + "1" * 1100 + "\n", "characters", 1),
]


@pytest.mark.parametrize("text, message, line", BAD)
def test_bad_curve_files_are_refused_by_file_and_line(tmp_path, text, message, line):
    import tracer
    (tmp_path / "c.txt").write_text(text)
    xml = tmp_path / "scene.xml"
    xml.write_text(f'{HEAD}\n<shape type="linearcurve">'
                   '<string name="filename" value="c.txt"/></shape>\n</scene>')
    with pytest.raises(SceneError) as err:
        tracer.load_scene(str(xml))
    text = str(err.value)
    assert "\n" not in text and message in text and "scene.xml:2" in text
    if line is not None:
        assert f"c.txt:{line}:" in text


def test_missing_curve_file_and_curve_light_are_refused(tmp_path):
    import tracer
    xml = tmp_path / "scene.xml"
    xml.write_text(f'{HEAD}\n<shape type="bsplinecurve"><string name="filename" value="nope.txt"/>'
                   '</shape>\n</scene>')
    with pytest.raises(SceneError, match=r"scene.xml:2: .*nope.txt: curve file not found"):
        tracer.load_scene(str(xml))
    (tmp_path / "c.txt").write_text(FILES["straight"])
    xml.write_text(f'{HEAD}\n<shape type="bsplinecurve"><string name="filename" value="c.txt"/>\n'
                   '<emitter type="area"/></shape>\n</scene>')
    with pytest.raises(SceneError, match=r"scene.xml:3: a 'bsplinecurve' cannot carry an area emitter"):
        tracer.load_scene(str(xml))
    (tmp_path / "c.txt").write_text("0 0 0 1\n0 0 1 1\n0 0 2 1\n")
    xml.write_text(f'{HEAD}\n<shape type="bsplinecurve"><string name="filename" value="c.txt"/>'
                   '</shape>\n</scene>')
    with pytest.raises(SceneError, match=r"c.txt:1: a bsplinecurve needs at least 4 control points"):
        tracer.load_scene(str(xml))
