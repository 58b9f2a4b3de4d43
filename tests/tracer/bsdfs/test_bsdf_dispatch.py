"""The dispatch API: per-ray materials, NEE flags, and what gets traced."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from tests.helpers import bsdf_cases as bc
from tracer import bsdfs
from tracer.bsdfs.table import Materials
from tracer.io.bsdfs import MaterialTableBuilder
from tracer.textures import TextureTableBuilder
from tracer.kinds import BsdfKind


def test_mixed_batch_equals_homogeneous_batches():
    """Each ray gets its own material's result when a batch mixes all kinds."""
    rng = np.random.default_rng(0)
    n = bc.CHUNK
    names = list(bc.CASES)
    ids = rng.integers(0, len(names), n).astype(np.int32)
    wi = bc.random_directions(rng, n)
    wo = bc.random_directions(rng, n)
    uv = rng.random((2, n)).astype(np.float32)
    u1, u2 = rng.random(n).astype(np.float32), rng.random((2, n)).astype(np.float32)
    materials, textures = bc.tables()
    value, pdf = bc._eval_pdf(materials, textures, jnp.asarray(ids), uv, wi, wo)
    bs, weight = bc._sample(materials, textures, jnp.asarray(ids), uv, wi, u1, u2)
    for k, name in enumerate(names):
        sel = ids == k
        ref_value, ref_pdf = bc.eval_pdf(name, wi[:, sel], wo[:, sel], uv[:, sel])
        np.testing.assert_array_equal(np.asarray(value)[:, sel], ref_value)
        np.testing.assert_array_equal(np.asarray(pdf)[sel], ref_pdf)
        ref = bc.sample(name, wi[:, sel], u1[sel], u2[:, sel], uv[:, sel])
        np.testing.assert_array_equal(np.asarray(weight)[:, sel], ref["weight"])
        np.testing.assert_array_equal(np.asarray(bs.wo)[:, sel], ref["wo"])
        np.testing.assert_array_equal(np.asarray(bs.is_delta)[sel], ref["delta"])


def test_eval_and_sample_give_the_bits_of_the_two_calls():
    """A vertex's light-sample evaluation and BSDF sample in one call (one sort by kind on CPUs,
    each group's textures read once) give each lane exactly what ``eval_pdf`` and ``sample`` give
    it, over a batch that mixes every kind."""
    rng = np.random.default_rng(2)
    n = bc.CHUNK
    materials, textures = bc.tables()
    ids = jnp.asarray(rng.integers(0, len(bc.CASES), n).astype(np.int32))
    wi, wo = bc.random_directions(rng, n), bc.random_directions(rng, n)
    uv = rng.random((2, n)).astype(np.float32)
    u1, u2 = rng.random(n).astype(np.float32), rng.random((2, n)).astype(np.float32)
    (value, pdf), (bs, weight) = jax.jit(bsdfs.eval_and_sample)(materials, textures, ids, uv, wi, wo, u1, u2)
    ref_value, ref_pdf = bc._eval_pdf(materials, textures, ids, uv, wi, wo)
    ref_bs, ref_weight = bc._sample(materials, textures, ids, uv, wi, u1, u2)
    assert np.any(np.asarray(pdf) > 0) and np.any(np.asarray(weight) > 0)
    for got, want in ((value, ref_value), (pdf, ref_pdf), (weight, ref_weight), (bs.wo, ref_bs.wo),
                      (bs.pdf, ref_bs.pdf), (bs.eta, ref_bs.eta), (bs.is_delta, ref_bs.is_delta), (bs.null, ref_bs.null)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_constants_read_as_constants_give_the_bits_of_textures(monkeypatch):
    """Each kind group reads a field as a constant unless a material of its own kinds has a
    texture there (here the diffuse's and the rough plastic's reflectance, the rough conductor's
    alphas), with the bits of reading every field of every kind as a texture; a group told wrongly
    would read a checkerboard's first color everywhere."""
    rng = np.random.default_rng(3)
    n = bc.CHUNK
    materials, textures = bc.build_tables([
        {"type": "diffuse", "reflectance": bc.CHECKER}, {"type": "diffuse", "reflectance": [0.3, 0.5, 0.7]},
        {"type": "roughplastic", "diffuse_reflectance": bc.CHECKER, "alpha": 0.2},
        {"type": "roughconductor", "material": "Cr", "alpha": bc.ROUGHNESS_CHECKER}, {"type": "conductor"},
        {"type": "dielectric"}])
    assert materials.textured == (("reflectance", BsdfKind.DIFFUSE), ("reflectance", BsdfKind.ROUGHPLASTIC),
                                  ("alpha_u", BsdfKind.ROUGHCONDUCTOR), ("alpha_v", BsdfKind.ROUGHCONDUCTOR))
    ids = jnp.asarray(rng.integers(0, 6, n).astype(np.int32))
    wi, wo = bc.random_directions(rng, n), bc.random_directions(rng, n)
    uv = rng.random((2, n)).astype(np.float32)
    u1, u2 = rng.random(n).astype(np.float32), rng.random((2, n)).astype(np.float32)
    got = jax.jit(bsdfs.eval_and_sample)(materials, textures, ids, uv, wi, wo, u1, u2)
    # Every field a texture: another static table (another trace), every lookup the full one.
    monkeypatch.setattr(Materials, "is_textured", lambda self, field: True)
    every_field = dataclasses.replace(materials, textured=())
    want = jax.jit(bsdfs.eval_and_sample)(every_field, textures, ids, uv, wi, wo, u1, u2)
    assert np.any(np.asarray(got[0][1]) > 0)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_black_material_is_black():
    builder = MaterialTableBuilder()
    null = builder.add_black()
    builder.add(bc.FakeNode({"type": "diffuse"}), lambda value: 0)
    materials, textures = builder.build(), TextureTableBuilder().build()
    assert materials.kinds_present == (BsdfKind.BLACK, BsdfKind.DIFFUSE)
    rng = np.random.default_rng(1)
    wi, wo = bc.random_directions(rng, 64, upper=True), bc.random_directions(rng, 64, upper=True)
    mat = jnp.full(64, null, jnp.int32)
    value, pdf = jax.jit(bsdfs.eval_pdf)(materials, textures, mat, jnp.zeros((2, 64)), wi, wo)
    bs, weight = jax.jit(bsdfs.sample)(materials, textures, mat, jnp.zeros((2, 64)), wi, jnp.full(64, 0.5),
                                       jnp.full((2, 64), 0.5))
    assert not np.any(value) and not np.any(pdf) and not np.any(weight) and not np.any(bs.pdf)
    assert not np.any(bsdfs.has_nondelta_lobe(materials, mat))


def test_has_nondelta_lobe():
    materials, _ = bc.tables()
    smooth = np.asarray(bsdfs.has_nondelta_lobe(materials, jnp.arange(len(bc.CASES))))
    delta_only = {"conductor", "dielectric", "thindielectric", "polarizer"}
    expected = [params["type"] not in delta_only for params in bc.CASES.values()]
    np.testing.assert_array_equal(smooth, expected)


def _primitives(params, fn=bsdfs.sample):
    materials, textures = bc.build_tables(params)
    n = 8
    args = (materials, textures, jnp.zeros(n, jnp.int32), jnp.zeros((2, n)), jnp.ones((3, n)))
    extra = (jnp.zeros(n), jnp.zeros((2, n))) if fn is bsdfs.sample else (jnp.ones((3, n)),)
    jaxpr = jax.make_jaxpr(fn)(*args, *extra)

    return {eqn.primitive.name for eqn in jaxpr.jaxpr.eqns}  # no control flow: one flat jaxpr


def test_absent_kinds_are_not_traced():
    diffuse = _primitives([{"type": "diffuse"}])
    assert not diffuse & {"erf_inv", "erf", "log", "exp", "rsqrt"}
    ggx = _primitives([{"type": "roughconductor", "distribution": "ggx"}])
    assert "erf_inv" not in ggx and "rsqrt" in ggx
    beckmann = _primitives([{"type": "roughconductor"}])
    assert "erf_inv" in beckmann
    assert len(_primitives([{"type": "diffuse"}], bsdfs.eval_pdf)) < len(
        _primitives([{"type": "diffuse"}, {"type": "roughplastic"}], bsdfs.eval_pdf))


def test_absent_principled_features_are_not_traced():
    """Lobes no principled material has (Mitsuba's m_has_* flags, over the table) cost nothing: the
    clearcoat's GTR1 (log, pow), the transmission's square roots of the base color."""
    plain = _primitives([{"type": "principled"}])
    assert not plain & {"log", "pow"}
    assert {"log", "pow"} <= _primitives([{"type": "principled", "clearcoat": 0.5}])
    assert not _primitives([{"type": "principled"}], bsdfs.eval_pdf) & {"log"}
    count = lambda params: len(jax.make_jaxpr(bsdfs.eval_pdf)(*_args(params)).jaxpr.eqns)
    assert count([{"type": "principled"}]) < count([{"type": "principled", "spec_trans": 0.3, "sheen": 0.2}])
    assert count([{"type": "principledthin"}]) < count([{"type": "principledthin", "diff_trans": 0.3}])


def _args(params, n=8):
    materials, textures = bc.build_tables(params)
    return materials, textures, jnp.zeros(n, jnp.int32), jnp.zeros((2, n)), jnp.ones((3, n)), jnp.ones((3, n))


def test_changing_values_does_not_retrace():
    traces = []

    def counted(*args):
        traces.append(1)
        return bsdfs.eval_pdf(*args)

    f = jax.jit(counted)
    rng = np.random.default_rng(2)
    wi, wo = bc.random_directions(rng, 16, upper=True), bc.random_directions(rng, 16, upper=True)
    for params in ({"type": "roughconductor", "alpha": 0.1, "material": "Au"},
                   {"type": "roughconductor", "alpha": 0.4, "material": "Cu", "specular_reflectance": 0.5}):
        materials, textures = bc.build_tables([params])
        f(materials, textures, jnp.zeros(16, jnp.int32), jnp.zeros((2, 16)), wi, wo)
    assert len(traces) == 1


def test_degenerate_directions_give_finite_results():
    """Grazing and normal incidence, and wo = +-wi, give finite values for every material."""
    special = np.float32([[1, 0, 0], [0, 0, 1], [0, 0, -1], [0.6, 0.8, 0], [0, 1e-8, 1], [0.8, 0, 0.6],
                          [0.8, 0, -0.6]]).T
    k = special.shape[1]
    wi = np.repeat(special, k, axis=1)
    wo = np.concatenate([np.tile(special, k), -np.tile(special, k)], axis=1)
    wi = np.concatenate([wi, wi], axis=1)
    n = wi.shape[1]
    u = np.linspace(0, 1 - 2 ** -24, n, dtype=np.float32)
    for name in bc.CASES:
        value, pdf = bc.eval_pdf(name, wi, wo)
        s = bc.sample(name, wi, u, np.stack([u, u[::-1]]))
        for what, a in [("value", value), ("pdf", pdf), ("wo", s["wo"]), ("weight", s["weight"]), ("pdf", s["pdf"])]:
            assert np.all(np.isfinite(a)), f"{name}: non-finite sample {what}"
        assert np.all(value >= 0) and np.all(pdf >= 0) and np.all(s["weight"] >= 0)
