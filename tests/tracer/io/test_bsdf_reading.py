"""The host-side material builder: Mitsuba's defaults, presets, precomputed data and errors."""
import dataclasses

import numpy as np
import pytest

from tests.helpers import bsdf_cases as bc
from tracer.bsdfs import precompute, table
from tracer.io import bsdfs as build
from tracer.bsdfs.tables_data import CONDUCTORS, IOR
from tracer.errors import SceneError
from tracer.textures import TextureTableBuilder
from tracer.kinds import BsdfKind, Microfacet


def _one(params):
    materials, textures = bc.build_tables([params])
    return materials


def test_defaults_follow_mitsuba():
    m = _one({"type": "dielectric"})
    assert float(m.eta[0, 0]) == np.float32(np.float32(1.5046) / np.float32(1.000277))
    m = _one({"type": "roughconductor"})
    assert int(m.kind[0]) == BsdfKind.ROUGHCONDUCTOR and int(m.distribution[0]) == Microfacet.BECKMANN
    np.testing.assert_array_equal(np.asarray(m.eta[:, 0]), 0.0)  # material 'none': a perfect mirror
    np.testing.assert_array_equal(np.asarray(m.k[:, 0]), 1.0)
    assert bool(m.sample_visible[0]) and m.distributions_present == (Microfacet.BECKMANN,) and not m.all_normals
    m = _one({"type": "plastic"})
    assert float(m.eta[0, 0]) == np.float32(np.float32(1.49) / np.float32(1.000277))
    assert float(m.specular_weight[0]) == pytest.approx(1 / 1.5)  # s_mean 1, d_mean 0.5


def test_named_iors_and_conductors():
    assert build.lookup_ior("BK7") == np.float32(1.5046)
    eta, k = build.conductor_ior("Au")
    assert eta.dtype == np.float32 and eta.shape == (3,) and np.all(k > 1)
    m = _one({"type": "dielectric", "int_ior": "water", "ext_ior": 1.2})
    assert float(m.eta[0, 0]) == np.float32(np.float32(1.333) / np.float32(1.2))


def test_table_flags_name_what_is_present():
    materials, _ = bc.build_tables([{"type": "diffuse"}, {"type": "roughdielectric", "distribution": "ggx",
                                                          "sample_visible": False}])
    assert materials.kinds_present == (BsdfKind.DIFFUSE, BsdfKind.ROUGHDIELECTRIC)
    assert materials.distributions_present == (Microfacet.GGX,) and materials.all_normals
    assert materials.transmittance.shape == (table.TRANSMITTANCE_RES, 2)


def test_textured_names_only_the_kinds_that_read_the_texture():
    """A field a kind does not read holds texture 0, here the diffuse's checkerboard: it is not
    counted, so the conductors' constants are read as constants."""
    materials, textures = bc.build_tables([{"type": "diffuse", "reflectance": bc.CHECKER}, {"type": "conductor"},
                                           {"type": "roughconductor", "alpha": bc.ROUGHNESS_CHECKER}])
    assert int(materials.alpha_u[1]) == 0 and int(textures.kind[0]) != 0  # the conductor's unread alpha: the checker
    assert materials.textured == (("reflectance", BsdfKind.DIFFUSE), ("alpha_u", BsdfKind.ROUGHCONDUCTOR),
                                  ("alpha_v", BsdfKind.ROUGHCONDUCTOR))
    assert materials.is_textured("reflectance") and not materials.is_textured("specular_reflectance")
    rough_group = dataclasses.replace(materials, kinds_present=(BsdfKind.ROUGHCONDUCTOR,))
    assert rough_group.is_textured("alpha_u") and not rough_group.is_textured("reflectance")
    # The principled kinds' own fields alike: a principled reads no 'eta' or 'diff_trans' texture,
    # a principledthin no 'metallic' or clearcoat one.
    materials, _ = bc.build_tables([{"type": "diffuse", "reflectance": bc.CHECKER},
                                    {"type": "principled", "metallic": 0.5, "clearcoat": 0.3},
                                    {"type": "principledthin", "diff_trans": 0.5}])
    assert int(materials.principled.eta[1]) == 0 and int(materials.principled.metallic[2]) == 0
    assert materials.principled.textured == ()


def test_plastic_sampling_weight_uses_texture_means():
    checker = {"type": "checkerboard", "color0": [0.2, 0.5, 0.8], "color1": [0.9, 0.1, 0.1]}
    m = _one({"type": "plastic", "diffuse_reflectance": checker})
    d_mean = 0.5 * (0.5 + 1.1 / 3)
    assert float(m.specular_weight[0]) == pytest.approx(1 / (1 + d_mean), rel=1e-6)
    builder = build.MaterialTableBuilder()
    ids = iter(range(10))
    builder.add(bc.FakeNode({"type": "plastic", "diffuse_reflectance": checker}), lambda value: next(ids))
    with pytest.raises(ValueError, match="Textures"):
        builder.build()


def test_rough_transmittance_limits():
    table_, internal = precompute.rough_transmittance(1e-4, 1.5, ggx=True)
    # A nearly smooth coating transmits 1 - F(cos theta); its internal diffuse reflectance is Fdr(1/eta).
    mu = np.maximum(np.linspace(0, 1, precompute.RES), 1e-6)
    sin2_t = (1 - mu ** 2) / 1.5 ** 2
    cos_t = np.sqrt(1 - sin2_t)
    f = 0.5 * (((mu - 1.5 * cos_t) / (mu + 1.5 * cos_t)) ** 2 + ((1.5 * mu - cos_t) / (1.5 * mu + cos_t)) ** 2)
    np.testing.assert_allclose(table_[8:], 1 - f[8:], atol=2e-3)
    from tracer.bsdfs.fresnel import diffuse_reflectance
    assert internal == pytest.approx(diffuse_reflectance(1 / 1.5), abs=0.01)


BAD = [
    ({"type": "hair"}, "unsupported bsdf type"),
    ({"type": "conductor", "material": "Unobtainium"}, "unknown conductor material"),
    ({"type": "conductor", "material": "Au", "eta": 1.5}, "either"),
    ({"type": "roughconductor", "alpha": 0.1, "alpha_u": 0.1, "alpha_v": 0.2}, "either 'alpha'"),
    ({"type": "roughconductor", "alpha_u": 0.1}, "both 'alpha_u' and 'alpha_v'"),
    ({"type": "roughdielectric", "distribution": "phong"}, "invalid distribution"),
    ({"type": "roughdielectric", "int_ior": 1.3, "ext_ior": 1.3}, "must be positive and differ"),
    ({"type": "dielectric", "int_ior": -1.5}, "must be positive"),
    ({"type": "dielectric", "int_ior": "kryptonite"}, "unknown IOR name"),
    ({"type": "roughplastic", "alpha_u": 0.1, "alpha_v": 0.3}, "anisotropic"),
    ({"type": "roughplastic", "alpha": {"type": "checkerboard"}}, "must be a float"),
    ({"type": "conductor", "eta": {"type": "checkerboard"}}, "cannot be a texture"),
    ({"type": "principled", "eta": 1.5, "specular": 0.3}, "either 'eta' or 'specular'"),
    ({"type": "principled", "eta": [1.5, 1.5, 1.5]}, "wrong type"),        # a float, as in Mitsuba
    ({"type": "principled", "clearcoat_sampling_rate": [1, 2, 3]}, "wrong type"),
]


@pytest.mark.parametrize("params,message", BAD, ids=[f"{p['type']}-{i}" for i, (p, _) in enumerate(BAD)])
def test_bad_parameters_raise_scene_errors(params, message):
    with pytest.raises(SceneError, match=message) as info:
        bc.build_tables([params])
    assert "test.xml:1" in str(info.value)


def test_tables_match_mitsuba():
    """tables_data.py is what scripts/extract_mitsuba_tables.py reads from the installed Mitsuba."""
    mi, variant = bc.import_mitsuba()
    import pathlib
    mi.set_variant(variant)
    presets = {p.name[:-len(".eta.spd")] for p in (pathlib.Path(mi.__file__).parent / "data" / "ior").glob("*.eta.spd")}
    assert presets | {"none"} == set(CONDUCTORS)
    for name in ("Au", "Cu", "Al", "Ag", "Cr", "CuO", "none"):
        ref = bc.MitsubaBsdf(mi, variant, {"type": "conductor", "material": name})
        params = mi.traverse(ref.bsdf)
        for key, ours in zip(("eta.value", "k.value"), CONDUCTORS[name]):
            theirs = np.broadcast_to(np.array(params[key], np.float64).ravel(), (3,))  # 'none': one float
            np.testing.assert_allclose(theirs, ours, rtol=1e-7)
    for name in ("bk7", "water", "diamond", "air", "acrylic glass"):
        ref = bc.MitsubaBsdf(mi, variant, {"type": "dielectric", "int_ior": name, "ext_ior": 1.0})
        assert np.float32(mi.traverse(ref.bsdf)["eta"]) == np.float32(IOR[name])


def test_reads_parsed_xml_nodes():
    """The builder reads every parameter it supports from real parsed nodes (none left unused)."""
    xml = pytest.importorskip("tracer.io.xml")
    root = xml.parse_string("""<scene version="3.0.0">
      <bsdf type="roughconductor"><string name="material" value="Au"/><float name="alpha_u" value="0.1"/>
        <float name="alpha_v" value="0.3"/><string name="distribution" value="GGX"/>
        <boolean name="sample_visible" value="false"/><rgb name="specular_reflectance" value="0.9"/></bsdf>
      <bsdf type="dielectric"><string name="int_ior" value="water"/><float name="ext_ior" value="1.1"/>
        <rgb name="specular_transmittance" value="0.5, 0.6, 0.7"/></bsdf>
      <bsdf type="roughplastic"><rgb name="diffuse_reflectance" value="0.2, 0.3, 0.4"/><float name="alpha" value="0.2"/>
        <boolean name="nonlinear" value="true"/><string name="int_ior" value="pet"/></bsdf>
      <bsdf type="plastic"><texture type="checkerboard" name="diffuse_reflectance">
        <rgb name="color0" value="0.1"/><rgb name="color1" value="0.5"/></texture></bsdf>
      <bsdf type="conductor"><rgb name="eta" value="0.2, 0.3, 0.4"/><spectrum name="k" value="3"/></bsdf>
      <bsdf type="roughdielectric"><texture type="checkerboard" name="alpha">
        <float name="color0" value="0.1"/><float name="color1" value="0.5"/></texture></bsdf>
      <bsdf type="thindielectric"><float name="int_ior" value="1.7"/></bsdf>
      <bsdf type="diffuse"/>
      <bsdf type="principled"><rgb name="base_color" value="0.2, 0.3, 0.4"/><float name="roughness" value="0.3"/>
        <float name="anisotropic" value="0.2"/><float name="metallic" value="0.1"/><float name="spec_trans" value="0.4"/>
        <float name="specular" value="0.6"/><float name="spec_tint" value="0.1"/><float name="sheen" value="0.2"/>
        <rgb name="sheen_tint" value="0.3"/><float name="flatness" value="0.5"/><float name="clearcoat" value="0.6"/>
        <texture type="checkerboard" name="clearcoat_gloss"><float name="color0" value="0.1"/>
          <float name="color1" value="0.9"/></texture><float name="main_specular_sampling_rate" value="2"/>
        <float name="clearcoat_sampling_rate" value="3"/><float name="diffuse_reflectance_sampling_rate" value="4"/>
      </bsdf>
      <bsdf type="principledthin"><texture type="checkerboard" name="eta"><float name="color0" value="1.2"/>
          <float name="color1" value="1.6"/></texture><float name="diff_trans" value="1.5"/>
        <float name="spec_trans" value="0.3"/><float name="anisotropic" value="0.2"/><float name="roughness" value="0.3"/>
        <float name="spec_tint" value="0.1"/><float name="sheen" value="0.2"/><float name="sheen_tint" value="0.3"/>
        <float name="flatness" value="0.5"/><rgb name="base_color" value="0.5"/>
        <float name="specular_reflectance_sampling_rate" value="2"/>
        <float name="specular_transmittance_sampling_rate" value="3"/>
        <float name="diffuse_reflectance_sampling_rate" value="4"/>
        <float name="diffuse_transmittance_sampling_rate" value="5"/></bsdf>
    </scene>""")
    textures = TextureTableBuilder()

    def add_texture(value):
        if isinstance(value, xml.PluginNode):
            return textures.add_checkerboard(value.get_rgb("color0"), value.get_rgb("color1"))
        return textures.add_constant(value)

    builder = build.MaterialTableBuilder()
    for node in root.children_of("bsdf"):
        builder.add(node, add_texture)
        node.check_unused()
    m = builder.build(textures.build())
    assert [BsdfKind.NAMES[k] for k in np.asarray(m.kind)] == [n.type for n in root.children_of("bsdf")]
    np.testing.assert_array_equal(np.asarray(m.principled.rates[:, 8:]), [[2, 2], [3, 3], [4, 4], [0, 5]])
    assert m.principled.textured == ("clearcoat_gloss", "eta")
    assert int(m.distribution[0]) == Microfacet.GGX and not bool(m.sample_visible[0])
    assert float(m.eta[0, 1]) == np.float32(np.float32(1.333) / np.float32(1.1))
    assert float(m.specular_weight[3]) == pytest.approx(1 / 1.3)
    np.testing.assert_allclose(np.asarray(m.k[:, 4]), 3.0)


def test_texture_means_match_mitsuba():
    """The plastics' sampling weight uses Mitsuba's ``Texture::mean()``: per-channel average for
    constants and checkerboards, average luminance for bitmaps."""
    mi, variant = bc.import_mitsuba()
    mi.set_variant(variant)
    image = np.random.default_rng(0).random((4, 5, 3)).astype(np.float32)
    textures = TextureTableBuilder()
    ids = [textures.add_constant([0.2, 0.5, 0.9]), textures.add_checkerboard([0.2, 0.5, 0.8], [0.9, 0.1, 0.1]),
           textures.add_bitmap(image)]
    ours = [build.texture_mean(textures.build(), tid) for tid in ids]
    theirs = [mi.load_dict({"type": "rgb", "value": [0.2, 0.5, 0.9]}).mean(),
              mi.load_dict(bc.mitsuba_dict({"type": "checkerboard", "color0": [0.2, 0.5, 0.8],
                                            "color1": [0.9, 0.1, 0.1]})).mean(),
              mi.load_dict({"type": "bitmap", "bitmap": mi.Bitmap(image)}).mean()]
    np.testing.assert_allclose(ours, [float(np.ravel(t)[0]) for t in theirs], rtol=1e-6)


def _principled(params):
    materials = _one(params)
    return materials, materials.principled


def test_principled_follows_mitsuba():
    """IOR from 'specular' (0.5 gives 1.5) or 'eta', adjusted when transmitting; flags as Mitsuba's
    get_flag: given, and not as a float zero."""
    m, p = _principled({"type": "principled"})
    assert float(m.eta[0, 0]) == 1.5 and p.features == () and not bool(p.has_spec_trans[0])
    np.testing.assert_array_equal(np.asarray(p.rates[:, 0]), [1, 1, 1, 0])
    assert _one({"type": "diffuse"}).principled is None  # no leaves: the same compiled program as before
    m, p = _principled({"type": "principled", "specular": 0.0})
    assert float(m.eta[0, 0]) == 1.0
    m, p = _principled({"type": "principled", "specular": 0.0, "spec_trans": 0.5})
    s = np.float32(1e-3)
    assert float(m.eta[0, 0]) == np.float32(2) * (np.float32(1) / (np.float32(1) - np.sqrt(np.float32(0.08) * s))) - 1
    m, p = _principled({"type": "principled", "eta": 1.0, "spec_trans": 0.5})
    assert float(m.eta[0, 0]) == np.float32(1.001) and bool(p.has_spec_trans[0])
    m, p = _principled({"type": "principled", "eta": 1.0, "metallic": 0.0, "sheen": {"type": "checkerboard"},
                        "clearcoat": [0.0, 0.0, 0.0], "spec_trans": 0.0})
    assert float(m.eta[0, 0]) == 1.0 and p.features == ("sheen", "clearcoat") and p.textured == ("sheen",)
    materials, _ = bc.build_tables([{"type": "principledthin", "diff_trans": 0.5}, {"type": "principled",
                                                                                    "metallic": 0.2}])
    assert materials.kinds_present == (BsdfKind.PRINCIPLED, BsdfKind.PRINCIPLEDTHIN)
    assert materials.principled.features == ("metallic", "diff_trans")


def test_float_parameters_are_mitsubas_eval_1():
    """The principled kinds' float textures as Mitsuba's ``eval_1``: an RGB value's channel mean, a
    checkerboard's channel means (its colors swapped), a bitmap's luminance; a float itself."""
    import jax.numpy as jnp

    from tracer import textures as tx
    mi, variant = bc.import_mitsuba()
    bc.skip_unless_vectorized(variant)
    mi.set_variant(variant)
    import drjit as dr
    image = np.random.default_rng(0).random((4, 5, 3)).astype(np.float32)
    checker = {"type": "checkerboard", "color0": [0.2, 0.5, 0.8], "color1": [0.9, 0.1, 0.1]}
    textures = TextureTableBuilder()

    def add_texture(value):
        if isinstance(value, bc.FakeNode):
            return textures.add_bitmap(image) if value.type == "bitmap" else textures.add_checkerboard(
                value.get_rgb("color0"), value.get_rgb("color1"))
        return textures.add_constant(value)

    builder = build.MaterialTableBuilder()
    params = [{"type": "principled", "metallic": [0.2, 0.5, 0.9]}, {"type": "principled", "metallic": checker},
              {"type": "principled", "metallic": {"type": "bitmap"}}, {"type": "principled", "metallic": 0.37}]
    for p in params:
        builder.add(bc.FakeNode(p), add_texture)
    table = textures.build()
    materials = builder.build(table)
    uv = np.float32([[0.1, 0.3, 0.6, 0.8, 0.45], [0.2, 0.7, 0.3, 0.9, 0.55]])
    refs = [mi.load_dict({"type": "rgb", "value": [0.2, 0.5, 0.9]}), mi.load_dict(bc.mitsuba_dict(checker)),
            mi.load_dict({"type": "bitmap", "bitmap": mi.Bitmap(image)}), mi.load_dict({"type": "uniform", "value": 0.37})]
    for k, ref in enumerate(refs):
        tid = jnp.full(uv.shape[1], materials.principled.metallic[k])
        ours = np.asarray(tx.eval_float(table, tid, jnp.asarray(uv), checker_mean=True))  # as disney.gather
        si = dr.zeros(mi.SurfaceInteraction3f, uv.shape[1])
        si.uv = mi.Point2f(uv[0], uv[1])
        theirs = np.broadcast_to(np.array(ref.eval_1(si)), ours.shape)  # a constant comes back as one value
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, err_msg=str(params[k]["metallic"]))
