"""Shared fixtures of the BSDF tests: Mitsuba-style parameter dicts turned into our tables,
and (when mitsuba is installed) into Mitsuba's own BSDFs evaluated on the same inputs.

All tests use one material table holding every case of ``CASES`` and one batch size, so that
``sample`` and ``eval_pdf`` are compiled once per test session.
"""
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from tracer import bsdfs
from tracer.io.bsdfs import MaterialTableBuilder
from tracer.errors import SceneError
from tracer.textures import TextureTableBuilder

LLVM_PATH = "/usr/lib/x86_64-linux-gnu/libLLVM.so.19.1"


TEXTURES = ("checkerboard", "bitmap", "rgb")


class FakeNode:
    """The ``PluginNode`` accessors the material builder uses, over a ``mi.load_dict``-style dict."""

    def __init__(self, params, source="test.xml:1"):
        self.type = params["type"]
        self.props = {k: v for k, v in params.items() if k != "type"}
        self.source = source

    def has(self, name):
        return name in self.props

    def child(self, name):
        value = self.props.get(name)
        return FakeNode(value) if isinstance(value, dict) else None

    def _get(self, name, default, kinds):
        value = self.props.get(name, default)
        if not isinstance(value, kinds):
            raise SceneError(f"'{name}' has the wrong type", self.source)
        return value

    def get_float(self, name, default=None):
        return float(self._get(name, default, (int, float)))

    def get_rgb(self, name, default=None):
        value = self._get(name, default, (int, float, list, tuple, np.ndarray))
        return np.broadcast_to(np.asarray(value, np.float64), (3,)).copy()

    def get_string(self, name, default=None):
        return self._get(name, default, str)

    def get_bool(self, name, default=None):
        return bool(self._get(name, default, (bool,)))

    def mark_used(self, *names):
        """(Nothing to record: see ``check_unused``.)"""

    def check_unused(self):
        """(A fake reads only what a case gives it: nothing to report.)"""

    def children_of(self, category):
        """Nested plugins of ``category`` ('bsdf': dicts whose type is not a texture's); the same
        objects on every call, as a parsed tree's (builders cache materials by node identity)."""
        assert category == "bsdf"
        if not hasattr(self, "_children"):
            self._children = [FakeNode(v) for v in self.props.values()
                              if isinstance(v, dict) and v["type"] not in TEXTURES]
        return self._children


def build_tables(param_dicts):
    """(Materials, Textures) holding one material per dict, in order."""
    textures = TextureTableBuilder()

    def add_texture(value):
        if isinstance(value, FakeNode):
            if value.type != "checkerboard":
                raise SceneError(f"test textures: unsupported '{value.type}'")
            return textures.add_checkerboard(value.get_rgb("color0", 0.4), value.get_rgb("color1", 0.2))
        return textures.add_constant(value)

    builder = MaterialTableBuilder()
    ids = [builder.add(FakeNode(p), add_texture) for p in param_dicts]
    assert ids == list(range(len(param_dicts)))
    tex = textures.build()
    return builder.build(tex), tex


def mitsuba_dict(params):
    """The dict for ``mi.load_dict``: RGB triples become ``rgb`` textures."""
    out = {}
    for key, value in params.items():
        if isinstance(value, (list, tuple, np.ndarray)):
            out[key] = {"type": "rgb", "value": [float(v) for v in value]}
        elif isinstance(value, dict):
            out[key] = mitsuba_dict(value)
        else:
            out[key] = value
    return out


def import_mitsuba():
    """mitsuba and the variant to use: the vectorized LLVM RGB one if it runs here, else scalar RGB
    (slow: for small batches only). Skips the calling test module without mitsuba."""
    import pytest
    os.environ.setdefault("DRJIT_LIBLLVM_PATH", LLVM_PATH)
    mi = pytest.importorskip("mitsuba")
    for variant in ("llvm_ad_rgb", "scalar_rgb"):
        try:
            mi.set_variant(variant)
            return mi, variant
        except Exception:  # the LLVM backend may be missing
            continue
    pytest.skip("no usable mitsuba RGB variant", allow_module_level=True)


def skip_unless_vectorized(variant):
    """Skip the calling test where only Mitsuba's scalar variant runs: it queries whole arrays at
    once, which a scalar variant's types do not take."""
    import pytest
    if variant.startswith("scalar"):
        pytest.skip(f"Mitsuba's llvm_ad_rgb variant is not available (it needs libLLVM 19 at {LLVM_PATH})")


class MitsubaBsdf:
    """Mitsuba's BSDF for a parameter dict, evaluated on numpy batches in the local frame.

    The variant is re-selected on every call (other tests may switch it meanwhile); a scalar
    variant is queried one direction at a time."""

    def __init__(self, mi, variant, params):
        self.mi, self.variant = mi, variant
        self.scalar = variant.startswith("scalar")
        mi.set_variant(variant)
        self.bsdf = mi.load_dict(mitsuba_dict(params))

    def _si(self, wi, uv):
        import drjit as dr
        mi = self.mi
        si = dr.zeros(mi.SurfaceInteraction3f) if self.scalar else dr.zeros(mi.SurfaceInteraction3f, wi.shape[-1])
        si.wi = self._vector(wi)
        si.sh_frame = mi.Frame3f(mi.Vector3f(0, 0, 1))
        if uv is not None:
            si.uv = mi.Point2f(*self._floats(uv))
        return si

    def _floats(self, a):
        if self.scalar:
            return [float(x) for x in a]
        return [self.mi.Float(np.ascontiguousarray(c, np.float32)) for c in a]

    def _vector(self, v):
        return self.mi.Vector3f(*self._floats(v))

    def _run(self, fn, *arrays):
        """fn(*arrays) on the whole batch, or per column (scalar variant) stacked along the last axis."""
        self.mi.set_variant(self.variant)
        if not self.scalar:
            return fn(*arrays)
        n = arrays[0].shape[-1]
        rows = [fn(*[None if a is None else a[..., i] for a in arrays]) for i in range(n)]
        return {key: np.stack([r[key] for r in rows], axis=-1) for key in rows[0]}

    def eval_pdf(self, wi, wo, uv=None):
        """(eval (3, N), pdf (N,), eval_pdf's value (3, N), eval_pdf's pdf (N,)) as numpy."""
        def one(wi, wo, uv):
            mi = self.mi
            si, ctx, v = self._si(wi, uv), mi.BSDFContext(), self._vector(wo)
            both_value, both_pdf = self.bsdf.eval_pdf(ctx, si, v)
            return dict(value=np.array(self.bsdf.eval(ctx, si, v)).reshape(3, -1),
                        pdf=np.array(self.bsdf.pdf(ctx, si, v)).reshape(-1),
                        both_value=np.array(both_value).reshape(3, -1), both_pdf=np.array(both_pdf).reshape(-1))
        r = self._run(one, wi, wo, uv)
        n = wo.shape[-1]  # a constant result (e.g. the zero of delta BSDFs) comes back as one value
        shape = lambda a, rows: np.broadcast_to(a.reshape(rows, -1), (rows, n))
        return (shape(r["value"], 3), shape(r["pdf"], 1)[0], shape(r["both_value"], 3), shape(r["both_pdf"], 1)[0])

    def sample(self, wi, u1, u2, uv=None):
        """Dict of numpy arrays (wo, pdf, eta, delta, weight), as ``sample`` above."""
        def one(wi, u1, u2, uv):
            mi = self.mi
            si, ctx = self._si(wi, uv), mi.BSDFContext()
            u1 = float(u1) if self.scalar else mi.Float(np.ascontiguousarray(u1, np.float32))
            bs, weight = self.bsdf.sample(ctx, si, u1, mi.Point2f(*self._floats(u2)))
            flags = np.array(bs.sampled_type).reshape(-1).astype(np.uint32)
            return dict(wo=np.array(bs.wo).reshape(3, -1), pdf=np.array(bs.pdf).reshape(-1),
                        eta=np.array(bs.eta).reshape(-1), delta=(flags & np.uint32(int(mi.BSDFFlags.Delta))) != 0,
                        weight=np.array(weight).reshape(3, -1))
        r = self._run(one, wi, u1, u2, uv)
        n = u1.shape[-1]
        return {k: np.broadcast_to(v.reshape((3, -1) if k in ("wo", "weight") else (-1,)),
                                   (3, n) if k in ("wo", "weight") else (n,)) for k, v in r.items()}


CHECKER = {"type": "checkerboard", "color0": [0.9, 0.6, 0.2], "color1": [0.1, 0.3, 0.7]}
ROUGHNESS_CHECKER = {"type": "checkerboard", "color0": 0.05, "color1": 0.4}

# The principled kinds: every lobe and parameter, textured, Mitsuba's sampling rates, and the IOR
# adjustments it makes for transmission (eta 1, specular 0). Queried from both sides.
PRINCIPLED_CASES = {
    "principled": {"type": "principled"},
    "principled_metal": {"type": "principled", "base_color": [0.9, 0.6, 0.3], "metallic": 0.8, "roughness": 0.3,
                         "anisotropic": 0.6, "spec_tint": [0.2, 0.6, 0.9]},  # RGB: its mean
    "principled_glass": {"type": "principled", "base_color": [0.9, 0.95, 1.0], "spec_trans": 0.9,
                         "roughness": 0.2, "eta": 1.5},
    "principled_full": {"type": "principled", "base_color": [0.2, 0.5, 0.8], "metallic": 0.3, "specular": 0.6,
                        "roughness": 0.4, "spec_tint": 0.4, "anisotropic": 0.5, "sheen": 0.7, "sheen_tint": 0.5,
                        "clearcoat": 0.8, "clearcoat_gloss": 0.6, "spec_trans": 0.4, "flatness": 0.5},
    "principled_textured": {"type": "principled", "base_color": CHECKER, "roughness": ROUGHNESS_CHECKER,
                            "metallic": {"type": "checkerboard", "color0": 0.0, "color1": 0.7},
                            "spec_trans": {"type": "checkerboard", "color0": 0.6, "color1": 0.0},
                            "clearcoat": {"type": "checkerboard", "color0": 1.0, "color1": 0.3},
                            "clearcoat_gloss": {"type": "checkerboard", "color0": 0.2, "color1": 0.9},
                            "sheen": {"type": "checkerboard", "color0": 0.5, "color1": 0.0},
                            "sheen_tint": CHECKER, "spec_tint": CHECKER, "flatness": ROUGHNESS_CHECKER,
                            "anisotropic": {"type": "checkerboard", "color0": 0.8, "color1": 0.1}},
    "principled_rates": {"type": "principled", "base_color": [0.7, 0.3, 0.2], "clearcoat": 0.5, "spec_trans": 0.5,
                         "roughness": 0.6, "main_specular_sampling_rate": 0.5, "clearcoat_sampling_rate": 2.0,
                         "diffuse_reflectance_sampling_rate": 3.0},
    "principled_inverted": {"type": "principled", "spec_trans": 0.7, "eta": 0.8, "roughness": 0.3,
                            "metallic": 0.2, "spec_tint": 0.3},
    "principled_index_matched": {"type": "principled", "spec_trans": 0.5, "eta": 1.0, "roughness": 0.5},
    "principled_specular0": {"type": "principled", "spec_trans": 0.3, "specular": 0.0, "sheen": 0.4},
    "principled_clear": {"type": "principled", "spec_trans": 1.0, "roughness": 0.1, "clearcoat": 1.0,
                         "clearcoat_gloss": 0.9},
    "principledthin": {"type": "principledthin"},
    "principledthin_full": {"type": "principledthin", "base_color": [0.8, 0.4, 0.2], "spec_trans": 0.5,
                            "diff_trans": 0.7, "sheen": 0.6, "sheen_tint": 0.4, "flatness": 0.6, "spec_tint": 0.5,
                            "anisotropic": 0.4, "roughness": 0.3, "eta": 1.33},
    "principledthin_textured": {"type": "principledthin", "base_color": CHECKER, "roughness": ROUGHNESS_CHECKER,
                                "spec_trans": {"type": "checkerboard", "color0": 0.7, "color1": 0.2},
                                "diff_trans": {"type": "checkerboard", "color0": 0.4, "color1": 1.6},
                                "eta": {"type": "checkerboard", "color0": 1.2, "color1": 1.8},
                                "sheen": {"type": "checkerboard", "color0": 0.0, "color1": 0.8},
                                "flatness": {"type": "checkerboard", "color0": 0.9, "color1": 0.1}},
    "principledthin_rates": {"type": "principledthin", "spec_trans": 0.6, "diff_trans": 1.0, "roughness": 0.2,
                             "specular_reflectance_sampling_rate": 2.0, "specular_transmittance_sampling_rate": 0.5,
                             "diffuse_reflectance_sampling_rate": 0.3, "diffuse_transmittance_sampling_rate": 4.0},
    "principledthin_glass": {"type": "principledthin", "base_color": 1.0, "spec_trans": 1.0, "roughness": 0.1,
                             "eta": 1.5},
}

# name -> Mitsuba parameters. "Transmissive" kinds are two-sided; the others are queried from above.
CASES = {
    "diffuse": {"type": "diffuse", "reflectance": [0.2, 0.5, 0.8]},
    "diffuse_white": {"type": "diffuse", "reflectance": 1.0},
    "diffuse_textured": {"type": "diffuse", "reflectance": CHECKER},
    "conductor_au": {"type": "conductor", "material": "Au"},
    "conductor_etak": {"type": "conductor", "eta": [0.2, 0.9, 1.1], "k": [3.9, 2.4, 1.6],
                       "specular_reflectance": [0.9, 0.8, 0.7]},
    "conductor_none": {"type": "conductor"},
    "rough_au_ggx": {"type": "roughconductor", "material": "Au", "distribution": "ggx", "alpha": 0.3},
    "rough_cu_aniso": {"type": "roughconductor", "material": "Cu", "alpha_u": 0.1, "alpha_v": 0.4},
    "rough_al_ggx_all": {"type": "roughconductor", "material": "Al", "distribution": "ggx", "alpha": 0.2,
                         "sample_visible": False},
    "rough_ag_aniso_all": {"type": "roughconductor", "material": "Ag", "alpha_u": 0.05, "alpha_v": 0.3,
                           "sample_visible": False},
    "rough_cr_textured": {"type": "roughconductor", "material": "Cr", "alpha": ROUGHNESS_CHECKER,
                          "specular_reflectance": [0.8, 0.9, 1.0]},
    "rough_mirror_beckmann": {"type": "roughconductor", "alpha": 0.5},
    "rough_mirror_ggx": {"type": "roughconductor", "alpha": 0.5, "distribution": "ggx"},
    "dielectric": {"type": "dielectric"},
    "dielectric_water": {"type": "dielectric", "int_ior": "water", "specular_transmittance": [0.9, 0.8, 0.6]},
    "dielectric_inverted": {"type": "dielectric", "int_ior": 1.0, "ext_ior": 1.5},
    "thindielectric": {"type": "thindielectric", "specular_reflectance": [0.5, 0.7, 0.9]},
    "thindielectric_white": {"type": "thindielectric", "int_ior": "diamond", "ext_ior": "water"},
    "rough_glass": {"type": "roughdielectric", "alpha": 0.1},
    "rough_glass_ggx": {"type": "roughdielectric", "alpha": 0.3, "distribution": "ggx", "int_ior": "diamond"},
    "rough_glass_all": {"type": "roughdielectric", "alpha": 0.5, "sample_visible": False},
    "rough_glass_aniso": {"type": "roughdielectric", "alpha_u": 0.1, "alpha_v": 0.3, "distribution": "ggx",
                          "specular_reflectance": [0.9, 0.9, 0.8], "specular_transmittance": [0.7, 0.8, 0.9]},
    "rough_glass_inverted": {"type": "roughdielectric", "alpha": 0.3, "int_ior": 1.0, "ext_ior": 1.33},
    "rough_glass_ggx_all": {"type": "roughdielectric", "alpha": 0.2, "distribution": "ggx",
                            "sample_visible": False},
    "plastic": {"type": "plastic"},
    "plastic_nonlinear": {"type": "plastic", "diffuse_reflectance": [0.2, 0.5, 0.8], "nonlinear": True,
                          "int_ior": 1.9},
    "plastic_textured": {"type": "plastic", "diffuse_reflectance": CHECKER, "specular_reflectance": 0.5},
    "plastic_white": {"type": "plastic", "diffuse_reflectance": 1.0},
    "rough_plastic": {"type": "roughplastic", "diffuse_reflectance": [0.2, 0.5, 0.8]},
    "rough_plastic_ggx": {"type": "roughplastic", "diffuse_reflectance": [0.6, 0.3, 0.1], "alpha": 0.4,
                          "distribution": "ggx", "nonlinear": True, "specular_reflectance": [0.8, 0.9, 0.7]},
    "rough_plastic_inverted": {"type": "roughplastic", "int_ior": 1.2, "ext_ior": 1.5, "alpha": 0.3},
    "rough_plastic_all": {"type": "roughplastic", "alpha": 0.05, "sample_visible": False, "int_ior": "pet"},
    "rough_plastic_textured": {"type": "roughplastic", "diffuse_reflectance": CHECKER, "alpha": 0.2,
                               "ext_ior": "water", "int_ior": 1.7, "distribution": "ggx"},
    "rough_plastic_white": {"type": "roughplastic", "diffuse_reflectance": 1.0, "alpha": 0.3},
    **PRINCIPLED_CASES,
    # The polarized plugins as Mitsuba's RGB variants render them.
    "pplastic": {"type": "pplastic", "diffuse_reflectance": [0.05, 0.03, 0.1], "alpha": 0.06},
    "pplastic_ggx_textured": {"type": "pplastic", "diffuse_reflectance": CHECKER, "alpha": ROUGHNESS_CHECKER,
                              "distribution": "ggx", "specular_reflectance": [0.8, 0.9, 0.7], "int_ior": 1.7},
    "pplastic_aniso_all": {"type": "pplastic", "alpha_u": 0.1, "alpha_v": 0.3, "sample_visible": False,
                           "eta": 1.33},
    "polarizer": {"type": "polarizer", "theta": 45.0},
    "polarizer_textured": {"type": "polarizer", "transmittance": CHECKER, "polarizing": False},
}
TRANSMISSIVE = ("dielectric", "roughdielectric", "thindielectric", "principled", "principledthin",  # both sides
                "polarizer")
CHUNK = 8192  # the one batch size of the jitted calls


def is_transmissive(name):
    return CASES[name]["type"] in TRANSMISSIVE


@functools.lru_cache(maxsize=None)
def tables():
    return build_tables(list(CASES.values()))


def material_id(name):
    return list(CASES).index(name)


_eval_pdf = jax.jit(bsdfs.eval_pdf)
_sample = jax.jit(bsdfs.sample)


def _chunks(n, *arrays):
    """Pad (..., n) arrays to a multiple of CHUNK and yield (start, count, chunk arrays)."""
    for start in range(0, n, CHUNK):
        count = min(CHUNK, n - start)
        out = []
        for a in arrays:
            piece = a[..., start:start + count]
            pad = [(0, 0)] * (piece.ndim - 1) + [(0, CHUNK - count)]
            out.append(jnp.asarray(np.pad(piece, pad, mode="edge"), jnp.float32))
        yield start, count, out


def _batch(name, n, uv):
    mat = jnp.full(CHUNK, material_id(name), jnp.int32)
    uv = np.zeros((2, n), np.float32) if uv is None else np.asarray(uv, np.float32)
    return mat, uv


def eval_pdf(name, wi, wo, uv=None):
    """Our (value (3, N), pdf (N,)) for material ``name``; wi may be one (3,) direction."""
    wo = np.asarray(wo, np.float32)
    n = wo.shape[1]
    wi = np.broadcast_to(np.asarray(wi, np.float32).reshape(3, -1), (3, n))
    mat, uv = _batch(name, n, uv)
    materials, textures = tables()
    value, pdf = np.zeros((3, n), np.float32), np.zeros(n, np.float32)
    for start, count, (wi_c, wo_c, uv_c) in _chunks(n, wi, wo, uv):
        v, p = _eval_pdf(materials, textures, mat, uv_c, wi_c, wo_c)
        value[:, start:start + count], pdf[start:start + count] = np.asarray(v)[:, :count], np.asarray(p)[:count]
    return value, pdf


def sample(name, wi, u1, u2, uv=None):
    """Our sample for material ``name`` as a dict of numpy arrays (wo, pdf, eta, delta, weight)."""
    u1 = np.asarray(u1, np.float32)
    n = u1.shape[0]
    wi = np.broadcast_to(np.asarray(wi, np.float32).reshape(3, -1), (3, n))
    mat, uv = _batch(name, n, uv)
    materials, textures = tables()
    out = dict(wo=np.zeros((3, n)), pdf=np.zeros(n), eta=np.zeros(n), delta=np.zeros(n, bool),
               weight=np.zeros((3, n)))
    for start, count, (wi_c, u1_c, u2_c, uv_c) in _chunks(n, wi, u1, u2, uv):
        bs, weight = _sample(materials, textures, mat, uv_c, wi_c, u1_c, u2_c)
        got = dict(wo=bs.wo, pdf=bs.pdf, eta=bs.eta, delta=bs.is_delta, weight=weight)
        for key, value in got.items():
            out[key][..., start:start + count] = np.asarray(value)[..., :count]
    return out


def random_directions(rng, n, upper=False):
    v = rng.normal(size=(3, n))
    v /= np.linalg.norm(v, axis=0)
    if upper:
        v[2] = np.abs(v[2])
    return v.astype(np.float32)
