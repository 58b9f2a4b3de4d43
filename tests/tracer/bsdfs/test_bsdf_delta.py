"""Delta lobes: weights and lobe probabilities are the Fresnel terms, computed here independently
with complex arithmetic from the textbook s/p amplitude coefficients (Born & Wolf, section 1.5)."""
import numpy as np
import pytest

from tests.helpers import bsdf_cases as bc

N = 4096


def fresnel_exact(cos_i, n):
    """Unpolarized reflectance of light arriving at |cos_i| on a medium of relative complex IOR n."""
    cos_i = np.abs(np.asarray(cos_i, np.float64)).astype(np.complex128)
    sin2_t = (1 - cos_i ** 2) / n ** 2
    cos_t = np.sqrt(1 - sin2_t)
    r_s = (cos_i - n * cos_t) / (cos_i + n * cos_t)
    r_p = (n * cos_i - cos_t) / (n * cos_i + cos_t)
    return 0.5 * (np.abs(r_s) ** 2 + np.abs(r_p) ** 2)


def _incident(rng, both_sides):
    wi = bc.random_directions(rng, N, upper=True)
    if both_sides:
        wi[:, ::2] *= -1
    return wi


def _spec(name, key):
    """A (3, 1) specular factor of a case (1 when not given)."""
    return np.broadcast_to(np.asarray(bc.CASES[name].get(key, 1.0), np.float64), (3,)).reshape(3, 1)


@pytest.mark.parametrize("name", ["conductor_au", "conductor_etak", "conductor_none"])
def test_conductor_weight_is_fresnel(name):
    rng = np.random.default_rng(1)
    wi = _incident(rng, both_sides=False)
    s = bc.sample(name, wi, rng.random(N, np.float32), rng.random((2, N), np.float32))
    materials = bc.tables()[0]
    m = bc.material_id(name)
    eta, k = np.asarray(materials.eta[:, m], np.float64), np.asarray(materials.k[:, m], np.float64)
    spec = _spec(name, "specular_reflectance")
    expected = spec * np.stack([fresnel_exact(wi[2], eta[c] + 1j * k[c]) for c in range(3)])
    np.testing.assert_allclose(s["weight"], expected, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(s["wo"], wi * np.float32([[-1], [-1], [1]]))
    assert np.all(s["delta"]) and np.all(s["pdf"] == 1) and np.all(s["eta"] == 1)
    if name == "conductor_none":
        assert np.all(s["weight"] == 1)
    # Seen from below, a conductor is black.
    s = bc.sample(name, -wi, rng.random(N, np.float32), rng.random((2, N), np.float32))
    assert np.all(s["weight"] == 0)


@pytest.mark.parametrize("name", ["dielectric", "dielectric_water", "dielectric_inverted"])
def test_dielectric_chooses_reflection_with_probability_fresnel(name):
    rng = np.random.default_rng(2)
    wi = _incident(rng, both_sides=True)
    u1 = rng.random(N, np.float32)
    s = bc.sample(name, wi, u1, rng.random((2, N), np.float32))
    eta = float(bc.tables()[0].eta[0, bc.material_id(name)])
    n = np.where(wi[2] > 0, eta, 1 / eta)  # IOR of the far side relative to the near one
    f = fresnel_exact(wi[2], n)
    reflected = s["wo"][2] * wi[2] > 0
    clear = np.abs(u1 - f) > 1e-5  # away from ties that float32 rounding may decide either way
    np.testing.assert_array_equal(reflected[clear], (u1 <= f)[clear])
    np.testing.assert_allclose(s["pdf"], np.where(reflected, f, 1 - f), rtol=1e-4, atol=1e-6)
    spec_r, spec_t = _spec(name, "specular_reflectance"), _spec(name, "specular_transmittance")
    # Radiance is scaled by (eta_i / eta_t)^2 when refracted; pdf * weight is then F or (1 - F) / n^2.
    expected = np.where(reflected, spec_r, spec_t / n ** 2)
    np.testing.assert_allclose(s["weight"], expected, rtol=1e-5)
    np.testing.assert_allclose(s["eta"], np.where(reflected, 1.0, n), rtol=1e-6)
    # Snell's law: the tangential component shrinks by 1 / n and flips, the normal one crosses.
    t = ~reflected
    np.testing.assert_allclose(s["wo"][:2, t], -wi[:2, t] / n[t], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(s["wo"], axis=0), 1.0, rtol=1e-5)
    assert np.all(s["delta"])


def test_dielectric_reflects_totally_beyond_the_critical_angle():
    eta = float(bc.tables()[0].eta[0, bc.material_id("dielectric")])
    sin_c = 1 / eta
    cos_i = -np.float32(np.sqrt(1 - (sin_c * 1.01) ** 2))  # inside, just past the critical angle
    wi = np.float32([np.sqrt(1 - cos_i ** 2), 0, cos_i])
    s = bc.sample("dielectric", wi, np.full(16, 0.999, np.float32), np.zeros((2, 16), np.float32))
    assert np.all(s["wo"][2] < 0) and np.all(s["pdf"] == 1) and np.all(s["weight"] == 1)


def test_thin_dielectric_sums_the_interreflections():
    name = "thindielectric"
    rng = np.random.default_rng(3)
    wi = _incident(rng, both_sides=True)
    u1 = rng.random(N, np.float32)
    s = bc.sample(name, wi, u1, rng.random((2, N), np.float32))
    eta = float(bc.tables()[0].eta[0, bc.material_id(name)])
    r = fresnel_exact(wi[2], eta)
    r_total = r + (1 - r) ** 2 * r / (1 - r ** 2)  # R + T R T + T R^3 T + ... = 2R / (1 + R)
    reflected = s["wo"][2] * wi[2] > 0
    np.testing.assert_allclose(s["pdf"], np.where(reflected, r_total, 1 - r_total), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(s["wo"][:, ~reflected], -wi[:, ~reflected])
    spec_r = _spec(name, "specular_reflectance")
    np.testing.assert_allclose(s["weight"], np.where(reflected, spec_r, 1.0), rtol=1e-6)
    assert np.all(s["delta"]) and np.all(s["eta"] == 1)


@pytest.mark.parametrize("name", ["plastic", "plastic_nonlinear", "plastic_textured"])
def test_plastic_specular_lobe_is_fresnel(name):
    rng = np.random.default_rng(4)
    wi = _incident(rng, both_sides=False)
    s = bc.sample(name, wi, rng.random(N, np.float32), rng.random((2, N), np.float32))
    eta = float(bc.tables()[0].eta[0, bc.material_id(name)])
    spec = _spec(name, "specular_reflectance")
    d = s["delta"]
    assert 0.02 < d.mean() < 0.98
    np.testing.assert_allclose((s["weight"] * s["pdf"])[:, d], (spec * fresnel_exact(wi[2], eta))[:, d],
                               rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(s["wo"][:, d], (wi * np.float32([[-1], [-1], [1]]))[:, d])
