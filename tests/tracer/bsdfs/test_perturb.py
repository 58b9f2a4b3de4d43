"""Normal and bump maps (tracer.bsdfs.perturb) against Mitsuba 3's ``normalmap`` and ``bumpmap``,
point by point: eval, pdf and sample for random shading frames, uv partials, geometric normals
and directions, over anisotropic nested BSDFs (which see the perturbed frame's tangent), loaded
through the scene loader from the same XML Mitsuba loads; then the loader's refusals.

The inputs are Mitsuba's ``SurfaceInteraction3f`` fields: a world shading frame (s, t, n) with s
along dp/du, dp/du, dp/dv and the geometric normal n, uv, and wi, wo local to that frame. Ours
gets the same in local coordinates (``perturb.tangents``); a twosided material's back gets them
mirrored, as the integrator gives them.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import bsdf_cases as bc
from tests.helpers import image_metrics as im
from tests.tracer.bsdfs.test_bsdf_mitsuba import assert_agree
from tracer import bsdfs
from tracer import vecmath as vm
from tracer.bsdfs import perturb
from tracer.errors import SceneError
from tracer.io.scene_loader import _SceneBuilder
from tracer.io.xml import parse_string

mi, VARIANT = bc.import_mitsuba()
N = 2048

ANISO = '<bsdf type="roughconductor"><string name="material" value="Al"/><string name="distribution" value="ggx"/>' \
        '<float name="alpha_u" value="0.3"/><float name="alpha_v" value="0.05"/></bsdf>'
NORMALS = '<texture type="bitmap" name="normalmap"><string name="filename" value="{dir}/normals.exr"/>' \
          '<boolean name="raw" value="true"/></texture>'
HEIGHT = '<texture type="bitmap" name="height"><string name="filename" value="{dir}/height.exr"/>' \
         '<boolean name="raw" value="true"/>{extra}</texture>'
PLASTIC = '<bsdf type="roughplastic"><texture type="checkerboard" name="diffuse_reflectance">' \
          '<rgb name="color0" value="0.8, 0.3, 0.1"/></texture><float name="alpha" value="0.2"/></bsdf>'
CASES = {
    "normalmap_aniso": f'<bsdf type="normalmap">{NORMALS}{ANISO}</bsdf>',
    "normalmap_plain": f'<bsdf type="normalmap">{NORMALS}<boolean name="flip_invalid_normals" value="false"/>'
                       f'<boolean name="use_shadowing_function" value="false"/>{PLASTIC}</bsdf>',
    "bumpmap_aniso": f'<bsdf type="bumpmap"><float name="scale" value="0.3"/>{HEIGHT}{ANISO}</bsdf>',
    "bumpmap_uv_map": '<bsdf type="bumpmap"><float name="scale" value="0.1"/>'
                      + HEIGHT.replace("{extra}", '<transform name="to_uv"><scale x="2" y="3"/></transform>'
                                       '<string name="wrap_mode" value="mirror"/>') + PLASTIC + '</bsdf>',
    "twosided_back_normalmap": f'<bsdf type="twosided"><bsdf type="normalmap">{NORMALS}{ANISO}</bsdf></bsdf>',
    "twosided_back_bumpmap": f'<bsdf type="twosided"><bsdf type="bumpmap">{HEIGHT}{ANISO}</bsdf></bsdf>',
    "normalmap_of_blend": f'<bsdf type="normalmap">{NORMALS}<bsdf type="blendbsdf"><float name="weight" value="0.3"/>'
                          f'{ANISO}<bsdf type="diffuse"/></bsdf></bsdf>',
    "blend_of_bumpmap": f'<bsdf type="blendbsdf"><float name="weight" value="0.6"/><bsdf type="bumpmap">{HEIGHT}'
                        f'{ANISO}</bsdf>{PLASTIC}</bsdf>',
    # Steep bumps, whose frames often leave wi below: a failed sample's direction and pdf, which
    # the blend counts, are Mitsuba's for each kind (tracer.bsdfs: failed samples).
    "blend_of_steep_bumpmap": f'<bsdf type="blendbsdf"><float name="weight" value="0.3"/><bsdf type="bumpmap">'
                              f'<float name="scale" value="2"/>{HEIGHT}{ANISO}</bsdf><bsdf type="diffuse"/></bsdf>',
    "blend_of_bumped_roughplastic": f'<bsdf type="blendbsdf"><float name="weight" value="0.4"/><bsdf type="bumpmap">'
                                    f'<float name="scale" value="2"/>{HEIGHT}{PLASTIC}</bsdf>{ANISO}</bsdf>',
    "blend_of_bumped_diffuse": f'<bsdf type="blendbsdf"><float name="weight" value="0.5"/><bsdf type="bumpmap">'
                               f'<float name="scale" value="2"/>{HEIGHT}<bsdf type="diffuse"/></bsdf>{PLASTIC}</bsdf>',
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("perturb")
    rng = np.random.default_rng(0)
    normals = rng.uniform(0.0, 1.0, (7, 5, 3)).astype(np.float32)
    normals[..., 2] = rng.uniform(0.55, 1.0, (7, 5))  # mostly valid tangent-space normals
    im.write_exr(path / "normals.exr", normals)
    im.write_exr(path / "height.exr", rng.uniform(0.0, 1.0, (6, 9, 1)).astype(np.float32))
    return path


def _xml(name, folder):
    return CASES[name].replace("{dir}", str(folder)).replace("{extra}", "")


def _ours(name, folder):
    """(Materials, Textures, material id, mirror) of the case, through the scene loader."""
    node = parse_string(f'<scene version="3.0.0">{_xml(name, folder)}</scene>').children[0]
    builder = _SceneBuilder(None, "auto", None)
    sides = builder._material(node)
    textures = builder.textures.table.build()
    back = name.startswith("twosided_back")
    return builder.materials.build(textures), textures, sides.back if back else sides.front, back


def _unit(v):
    return v / np.linalg.norm(v, axis=0)


def _inputs(seed, back):
    rng = np.random.default_rng(seed)
    n = _unit(rng.normal(size=(3, N)))
    dp_du, dp_dv = rng.normal(size=(3, N)), rng.normal(size=(3, N))
    ng = _unit(n + 0.3 * rng.normal(size=(3, N)))
    ng = np.where(np.sum(ng * n, axis=0) < 0, -ng, ng)
    s = _unit(dp_du - n * np.sum(n * dp_du, axis=0))
    frame = (s, np.cross(n.T, s.T).T, n)
    wi = _unit(rng.normal(size=(3, N)))
    wi[2] = -np.abs(wi[2]) if back else np.abs(wi[2])
    f32 = lambda a: np.ascontiguousarray(a, np.float32)
    return dict(frame=tuple(map(f32, frame)), dp_du=f32(dp_du), dp_dv=f32(dp_dv), ng=f32(ng), wi=f32(wi),
                wo=f32(_unit(rng.normal(size=(3, N)))), uv=f32(rng.uniform(-1, 2, (2, N))),
                u1=f32(rng.uniform(size=N)), u2=f32(rng.uniform(size=(2, N))))


def _mitsuba(name, folder, x):
    """Mitsuba's eval, pdf and sample (wo, pdf, weight) for inputs ``x``, as numpy."""
    import drjit as dr
    bc.skip_unless_vectorized(VARIANT)
    mi.set_variant(VARIANT)
    bsdf = mi.load_string(_xml(name, folder).replace("<bsdf ", '<bsdf version="3.0.0" ', 1))
    vec = lambda a: mi.Vector3f(*[mi.Float(c) for c in a])
    si = dr.zeros(mi.SurfaceInteraction3f, N)
    si.sh_frame = mi.Frame3f(*map(vec, x["frame"]))
    si.n, si.dp_du, si.dp_dv, si.wi = vec(x["ng"]), vec(x["dp_du"]), vec(x["dp_dv"]), vec(x["wi"])
    si.uv = mi.Point2f(mi.Float(x["uv"][0]), mi.Float(x["uv"][1]))
    ctx = mi.BSDFContext()
    value, pdf = bsdf.eval_pdf(ctx, si, vec(x["wo"]))
    bs, weight = bsdf.sample(ctx, si, mi.Float(x["u1"]), mi.Point2f(mi.Float(x["u2"][0]), mi.Float(x["u2"][1])))
    return dict(value=np.array(value), pdf=np.array(pdf), wo=np.array(bs.wo), sample_pdf=np.array(bs.pdf),
                weight=np.array(weight))


_eval_pdf = jax.jit(bsdfs.eval_pdf)
_sample = jax.jit(bsdfs.sample)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_mitsuba(name, folder):
    materials, textures, mat, back = _ours(name, folder)
    assert materials.perturbation is not None
    x = _inputs(list(CASES).index(name), back)
    ref = _mitsuba(name, folder, x)
    frame = vm.Frame(*(jnp.asarray(a) for a in x["frame"]))
    tangents = perturb.tangents(frame, jnp.asarray(x["dp_du"]), jnp.asarray(x["dp_dv"]), jnp.asarray(x["ng"]))
    mirror = np.array([1, 1, -1 if back else 1], np.float32)[:, None]  # the integrator's mirrored frame
    mats = jnp.full(N, mat, jnp.int32)
    value, pdf = _eval_pdf(materials, textures, mats, x["uv"], x["wi"] * mirror, x["wo"] * mirror, tangents)
    assert np.mean(ref["pdf"] > 0) > 0.2
    assert_agree(np.asarray(value), ref["value"], f"{name} value", rtol=1e-3)
    # Mitsuba's vectorized roughplastic leaves the pdf of some directions below unmasked (as in
    # test_bsdf_mitsuba): every case reflects only, so compare where wo is on wi's side.
    valid = x["wi"][2] * x["wo"][2] > 0
    assert_agree(np.asarray(pdf)[valid], ref["pdf"][valid], f"{name} pdf", rtol=1e-3)
    bs, weight = _sample(materials, textures, mats, x["uv"], x["wi"] * mirror, x["u1"], x["u2"], tangents)
    ok = np.any(ref["weight"] != 0, axis=0)
    assert ok.mean() > 0.2
    np.testing.assert_array_equal(np.any(np.asarray(weight) != 0, axis=0), ok)
    same = np.all(np.abs(np.asarray(bs.wo) * mirror - ref["wo"]) < 2e-4, axis=0)
    same &= np.abs(np.asarray(bs.pdf) - ref["sample_pdf"]) <= 1e-3 * (ref["sample_pdf"] + 1e-3)
    # A blend whose chosen child's sample fails reports the mixture of the others at that sample's
    # direction, counting the failed sample's pdf: both are Mitsuba's (tracer.bsdfs: failed
    # samples), but for one quirk of its vectorized roughplastic, whose pdf is left unmasked where
    # wo falls below (its scalar variant masks it, as we do): 1 of 2,048 samples here.
    allowed = 1 if name == "blend_of_bumped_roughplastic" else 0
    assert np.sum(ok & ~same) <= allowed, f"{name}: {np.sum(ok & ~same)} samples differ"
    ok &= same
    assert_agree(np.asarray(weight)[:, ok], ref["weight"][:, ok], f"{name} sample weight", rtol=1e-3)
    assert_agree(np.asarray(bs.pdf)[ok], ref["sample_pdf"][ok], f"{name} sample pdf", rtol=1e-3)


@pytest.mark.parametrize("xml, message", [
    ('<bsdf type="normalmap"><bsdf type="diffuse"/></bsdf>', "needs a 'normalmap' texture"),
    ('<bsdf type="normalmap"><rgb name="normalmap" value="0.5, 0.5, 1"/></bsdf>', "exactly one nested bsdf"),
    ('<bsdf type="bumpmap"><texture type="checkerboard"/><bsdf type="diffuse"/></bsdf>', "has no gradient"),
    ('<bsdf type="bumpmap"><bsdf type="diffuse"/></bsdf>', "exactly one nested texture"),
    ('<bsdf type="normalmap"><rgb name="normalmap" value="0.5, 0.5, 1"/><bsdf type="normalmap">'
     '<rgb name="normalmap" value="0.5, 0.5, 1"/><bsdf type="diffuse"/></bsdf></bsdf>', "cannot be nested"),
    ('<bsdf type="normalmap"><rgb name="normalmap" value="0.5, 0.5, 1"/><bsdf type="twosided">'
     '<bsdf type="diffuse"/></bsdf></bsdf>', "put the twosided outside"),
    ('<bsdf type="twosided"><bsdf type="normalmap"><rgb name="normalmap" value="0.5, 0.5, 1"/>'
     '<bsdf type="dielectric"/></bsdf></bsdf>', "cannot wrap 'normalmap'"),
    ('<bsdf type="normalmap"><rgb name="normalmap" value="0.5, 0.5, 1"/><float name="strength" value="2"/>'
     '<bsdf type="diffuse"/></bsdf>', "unsupported parameter 'strength'"),
])
def test_refusals(xml, message):
    node = parse_string(f'<scene version="3.0.0">{xml}</scene>').children[0]
    with pytest.raises(SceneError, match=message):
        _SceneBuilder(None, "auto", None)._material(node)


def test_flat_normal_map_is_the_nested_bsdf():
    """A normal map of (0.5, 0.5, 1) everywhere leaves the frame as it is: without the shadowing
    term, the nested BSDF's own values."""
    xml = ('<bsdf type="normalmap"><rgb name="normalmap" value="0.5, 0.5, 1"/>'
           f'<boolean name="use_shadowing_function" value="false"/>{ANISO}</bsdf>')
    node = parse_string(f'<scene version="3.0.0">{xml}{ANISO}</scene>')
    builder = _SceneBuilder(None, "auto", None)
    mapped, plain = (builder._material(child).front for child in node.children)
    textures = builder.textures.table.build()
    materials = builder.materials.build(textures)
    x = _inputs(0, back=False)
    values = [_eval_pdf(materials, textures, jnp.full(N, m, jnp.int32), x["uv"], x["wi"], x["wo"]) for m in (mapped, plain)]
    np.testing.assert_allclose(values[0][0], values[1][0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(values[0][1], values[1][1], rtol=1e-5, atol=1e-7)
