"""Counter-based random numbers: addressed, reproducible, uniform."""
import jax.numpy as jnp
import numpy as np

from tracer import rng


def test_same_address_same_number_and_different_addresses_differ():
    key = rng.sample_key(3, 1, jnp.arange(1000, dtype=jnp.uint32), 5)
    a = np.asarray(rng.uniform(key, 7))
    b = np.asarray(rng.uniform(rng.sample_key(3, 1, jnp.arange(1000, dtype=jnp.uint32), 5), 7))
    np.testing.assert_array_equal(a, b)
    for other in (rng.sample_key(4, 1, jnp.arange(1000, dtype=jnp.uint32), 5),
                  rng.sample_key(3, 2, jnp.arange(1000, dtype=jnp.uint32), 5),
                  rng.sample_key(3, 1, jnp.arange(1000, dtype=jnp.uint32), 6)):
        assert np.mean(np.asarray(rng.uniform(other, 7)) == a) < 0.01
    assert np.mean(np.asarray(rng.uniform(key, 8)) == a) < 0.01


def test_uniform_in_unit_interval_and_uniformly_spread():
    key = rng.sample_key(0, 0, jnp.arange(200_000, dtype=jnp.uint32), 0)
    u = np.asarray(rng.uniform(key, 0))
    assert u.min() >= 0.0 and u.max() < 1.0
    counts, _ = np.histogram(u, bins=50, range=(0, 1))
    expected = len(u) / 50
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 100, chi2  # 49 dof: p < 1e-4 above ~95
    # Neighbouring dimensions are uncorrelated.
    v = np.asarray(rng.uniform(key, 1))
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.01
