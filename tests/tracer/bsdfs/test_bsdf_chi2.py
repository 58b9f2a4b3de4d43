"""Chi-square tests: the directions ``sample`` draws follow the density ``eval_pdf`` reports.

As Mitsuba's ``src/bsdfs/tests``: for a fixed incident direction, successful non-delta samples
are binned over (phi, cos theta) and compared with the density integrated over each cell.
"""
import numpy as np
import pytest

from tests.helpers import bsdf_cases as bc
from tests.helpers import chi2

SAMPLES = 250_000


def _unit(*v):
    v = np.asarray(v, np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


CASES = [
    ("diffuse", _unit(0.3, 0.2, 0.93)),
    ("rough_au_ggx", _unit(0.5, 0.0, 0.5)),
    ("rough_cu_aniso", _unit(0.3, -0.6, 0.5)),
    ("rough_al_ggx_all", _unit(0.8, 0.3, 0.4)),
    ("rough_ag_aniso_all", _unit(0.2, 0.5, 0.7)),
    ("rough_mirror_beckmann", _unit(0.8, 0.3, 0.05)),
    ("rough_mirror_ggx", _unit(-0.4, 0.1, 0.2)),
    ("rough_glass_ggx", _unit(0.5, 0.0, 0.5)),
    ("rough_glass_ggx", _unit(0.8, 0.3, -0.05)),      # from inside, mostly total internal reflection
    ("rough_glass_all", _unit(0.2, -0.6, -0.5)),       # from inside, all normals
    ("rough_glass_all", _unit(0.5, 0.0, 0.5)),
    ("rough_glass_inverted", _unit(0.2, -0.6, 0.5)),   # from the denser side
    ("rough_glass_ggx_all", _unit(-0.5, -0.5, 0.1)),
    ("plastic", _unit(0.3, 0.2, 0.9)),                 # the diffuse lobe (the other is a delta)
    ("plastic_textured", _unit(-0.7, 0.1, 0.2)),
    ("rough_plastic_ggx", _unit(0.5, 0.0, 0.5)),
    ("rough_plastic_textured", _unit(0.1, 0.6, 0.3)),
    ("pplastic", _unit(0.3, 0.2, 0.9)),
    ("pplastic", _unit(-0.7, 0.1, 0.2), 16),          # a narrow lobe (alpha 0.06) at grazing incidence
    ("pplastic_ggx_textured", _unit(0.1, 0.6, 0.3)),
    ("pplastic_aniso_all", _unit(0.5, -0.3, 0.4)),
]


# (name, wi[, ires]): a narrow lobe needs a finer integration of the density over each cell.
@pytest.mark.parametrize("name,wi,ires", [(*case, 6)[:3] for case in CASES],
                         ids=[f"{case[0]}-{i}" for i, case in enumerate(CASES)])
def test_sampling_matches_pdf(name, wi, ires):
    rng = np.random.default_rng(sum(map(ord, name)) + int(1000 * wi[2]))
    uv = np.broadcast_to(np.float32([[0.3], [0.6]]), (2, SAMPLES))
    s = bc.sample(name, wi, rng.random(SAMPLES, np.float32), rng.random((2, SAMPLES), np.float32), uv)
    kept = (s["weight"].max(axis=0) > 0) & ~s["delta"]
    assert kept.mean() > 0.05

    def pdf(directions):
        n = directions.shape[1]
        return bc.eval_pdf(name, wi, directions, np.broadcast_to(uv[:, :1], (2, n)))[1]

    result = chi2.chi2_test(s["wo"][:, kept], pdf, SAMPLES, res=40, ires=ires, test_count=len(CASES))
    assert result.passed, result.message


# The principled kinds from both sides, at a uv of the textured ones' rougher checker cell. Lobes
# that put a large share of the samples into a few cells (the refraction into a denser outside, a
# roughness of 0.1) need a finer integration of the density over each cell (ires). (Near eta = 1,
# as principled_index_matched and principled_specular0, the transmission is all but a delta.)
UV_ROUGH = (0.3, 0.3)
PRINCIPLED = [
    ("principled", _unit(0.3, 0.2, 0.9), UV_ROUGH, 6),
    ("principled_metal", _unit(0.5, 0.1, 0.5), UV_ROUGH, 6),              # anisotropic, metallic
    ("principled_glass", _unit(0.5, 0.0, 0.5), UV_ROUGH, 6),
    ("principled_glass", _unit(0.2, -0.6, -0.5), UV_ROUGH, 6),            # from inside
    ("principled_full", _unit(0.4, 0.3, 0.6), UV_ROUGH, 6),               # every lobe
    ("principled_full", _unit(0.4, 0.3, -0.6), UV_ROUGH, 6),
    ("principled_textured", _unit(0.1, 0.6, 0.3), UV_ROUGH, 6),
    ("principled_rates", _unit(-0.6, 0.1, 0.4), UV_ROUGH, 6),
    ("principled_inverted", _unit(0.3, 0.3, 0.5), UV_ROUGH, 6),           # eta < 1
    ("principled_inverted", _unit(0.3, 0.3, -0.5), UV_ROUGH, 16),
    ("principledthin", _unit(0.3, 0.2, 0.9), UV_ROUGH, 6),
    ("principledthin_full", _unit(0.5, 0.1, 0.4), UV_ROUGH, 6),
    ("principledthin_full", _unit(0.5, 0.1, -0.4), UV_ROUGH, 6),         # from below: mirrored
    ("principledthin_textured", _unit(0.2, 0.6, 0.3), UV_ROUGH, 6),
    ("principledthin_rates", _unit(-0.3, 0.5, 0.5), UV_ROUGH, 6),
    ("principledthin_glass", _unit(0.6, 0.0, -0.6), UV_ROUGH, 16),
]


@pytest.mark.parametrize("name,wi,uv,ires", PRINCIPLED, ids=[f"{n}-{i}" for i, (n, *_) in enumerate(PRINCIPLED)])
def test_principled_sampling_matches_pdf(name, wi, uv, ires):
    rng = np.random.default_rng(sum(map(ord, name)) + int(1000 * wi[2]))
    uv = np.broadcast_to(np.float32(uv).reshape(2, 1), (2, SAMPLES))
    s = bc.sample(name, wi, rng.random(SAMPLES, np.float32), rng.random((2, SAMPLES), np.float32), uv)
    kept = s["weight"].max(axis=0) > 0
    assert kept.mean() > 0.9 and not np.any(s["delta"])

    def pdf(directions):
        n = directions.shape[1]
        return bc.eval_pdf(name, wi, directions, np.broadcast_to(uv[:, :1], (2, n)))[1]

    result = chi2.chi2_test(s["wo"][:, kept], pdf, SAMPLES, res=40, ires=ires, test_count=len(PRINCIPLED))
    assert result.passed, result.message


def test_chi2_rejects_a_wrong_density():
    """The test has power: cosine-weighted samples are not uniform on the hemisphere."""
    rng = np.random.default_rng(0)
    s = bc.sample("diffuse", _unit(0, 0, 1), rng.random(SAMPLES, np.float32), rng.random((2, SAMPLES), np.float32))
    uniform = lambda d: np.where(d[2] > 0, 1.0 / (2.0 * np.pi), 0.0)
    assert not chi2.chi2_test(s["wo"], uniform, SAMPLES, res=40).passed
