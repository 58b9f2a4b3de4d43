"""Our BSDFs against Mitsuba 3's own: eval, pdf and sample on the same random inputs.

Agreement is to float32 round-off: at least 99% of the entries within 1e-4 relative error
(relative to |reference| + 1e-3 of its mean, so that values that vanish do not count as large
relative errors), and none beyond 1e-2 -- the few that exceed 1e-4 sit where the formulas are
ill-conditioned (grazing angles, the edge of total internal reflection) and both renderers
round differently.
"""
import numpy as np
import pytest

from tests.helpers import bsdf_cases as bc

mi, VARIANT = bc.import_mitsuba()
N = 256 if VARIANT.startswith("scalar") else 2048


def _relative_error(ours, ref):
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    floor = 1e-3 * max(np.abs(ref).mean(), 1e-12)
    err = np.abs(ours - ref) / (np.abs(ref) + floor)
    return err.max(axis=0) if err.ndim == 2 else err


def assert_agree(ours, ref, what, rtol=1e-4, quantile=0.99, worst=1e-2):
    err = _relative_error(ours, ref)
    if err.size == 0:
        return
    assert np.quantile(err, quantile) <= rtol, f"{what}: {np.mean(err > rtol):.2%} beyond {rtol}"
    assert err.max() <= worst, f"{what}: worst relative error {err.max():.3g}"


def _inputs(name, seed):
    rng = np.random.default_rng(seed)
    wi = bc.random_directions(rng, N, upper=not bc.is_transmissive(name))
    wo = bc.random_directions(rng, N)
    uv = rng.random((2, N)).astype(np.float32)
    u1, u2 = rng.random(N).astype(np.float32), rng.random((2, N)).astype(np.float32)
    return wi, wo, uv, u1, u2


@pytest.mark.parametrize("name", list(bc.CASES))
def test_eval_pdf(name):
    wi, wo, uv, _, _ = _inputs(name, seed=list(bc.CASES).index(name))
    ref = bc.MitsubaBsdf(mi, VARIANT, bc.CASES[name])
    value, pdf = bc.eval_pdf(name, wi, wo, uv)
    ref_value, ref_pdf, ref_value2, ref_pdf2 = ref.eval_pdf(wi, wo, uv)
    # Mitsuba's vectorized eval_pdf leaves the pdf of some invalid pairs unmasked: compare where
    # its scalar code would run (both directions above for one-sided BSDFs).
    valid = (wi[2] != 0) if bc.is_transmissive(name) else (wi[2] > 0) & (wo[2] > 0)
    assert_agree(value, ref_value2, f"{name} eval_pdf value")
    assert_agree(pdf[valid], ref_pdf2[valid], f"{name} eval_pdf pdf")
    assert_agree(value, ref_value, f"{name} eval")
    assert_agree(pdf[valid], ref_pdf[valid], f"{name} pdf")
    assert np.all(value[:, ~valid] == 0)
    assert np.all(pdf[~valid] == 0)
    if bc.CASES[name]["type"] in ("conductor", "dielectric", "thindielectric", "polarizer"):
        assert np.all(value == 0) and np.all(pdf == 0)


# Sampled directions agree to about 1e-5 (the samplers' sines, erf and square roots round apart);
# where a lobe is very narrow (alpha = roughness^2 <= 0.01) or the refraction Jacobian cancels (eta
# near 1), that moves the density and weight of a few samples by up to a few 1e-3.
SENSITIVE = {"principled_textured": 1e-3, "principled_index_matched": 1e-3, "principled_clear": 1e-3,
             "principledthin_textured": 1e-3, "principledthin_glass": 1e-3}


@pytest.mark.parametrize("name", list(bc.CASES))
def test_sample(name):
    wi, _, uv, u1, u2 = _inputs(name, seed=100 + list(bc.CASES).index(name))
    ref = bc.MitsubaBsdf(mi, VARIANT, bc.CASES[name]).sample(wi, u1, u2, uv)
    ours = bc.sample(name, wi, u1, u2, uv)
    rtol = SENSITIVE.get(name, 1e-4)
    assert_agree(ours["weight"], ref["weight"], f"{name} weight", rtol=rtol)
    ok = ref["weight"].max(axis=0) > 0
    assert np.array_equal(ours["weight"].max(axis=0) > 0, ok)
    assert np.abs(ours["wo"] - ref["wo"])[:, ok].max(initial=0) < 2e-3
    assert np.quantile(np.abs(ours["wo"] - ref["wo"]).max(axis=0)[ok], 0.99) < 1e-4
    assert_agree(ours["pdf"][ok], ref["pdf"][ok], f"{name} pdf", rtol=rtol)
    assert np.array_equal(ours["eta"][ok], ref["eta"][ok])
    assert np.array_equal(ours["delta"][ok], ref["delta"][ok])
