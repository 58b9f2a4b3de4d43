"""Counter-based random numbers addressed by what is rendered.

Every random number of a path is ``uniform(sample_key(seed, frame, pixel, sample), dimension)``:
a pure function of the job seed, the frame, the pixel's linear index, the sample index and the
dimension. Who renders a sample, and in which batch, cannot change it -- that is what makes a
render split over devices, hosts and interruptions bit-identical to an unsplit one.

The hash is Chris Wellons' "lowbias32" (bias 0.17 of the best possible), chained over the
address words; floats take the top 24 bits so they lie in [0, 1) exactly.
"""
import jax.numpy as jnp
import numpy as np

__all__ = ["hash32", "sample_key", "uniform", "uniform2", "Dims"]

_GOLDEN = np.uint32(0x9E3779B9)


def hash32(x):
    """lowbias32 on uint32 arrays."""
    x = jnp.asarray(x, jnp.uint32)
    x = x ^ (x >> 16)
    x = x * np.uint32(0x21F0AAAD)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x735A2D97)
    x = x ^ (x >> 15)
    return x


def _mix(h, word):
    return hash32(h ^ (jnp.asarray(word, jnp.uint32) + _GOLDEN + (h << 6) + (h >> 2)))


def sample_key(seed, frame, pixel, sample):
    """The uint32 key of one pixel sample; arguments broadcast against each other."""
    h = hash32(jnp.asarray(seed, jnp.uint32) ^ np.uint32(0x5BD1E995))
    h = _mix(h, frame)
    h = _mix(h, pixel)
    return _mix(h, sample)


def uniform(key, dim):
    """A float32 in [0, 1) for each key at dimension ``dim`` (a Python or traced integer)."""
    bits = _mix(key, dim)
    return (bits >> 8).astype(jnp.float32) * np.float32(1.0 / (1 << 24))


def uniform2(key, dim):
    """Two uniforms at dimensions dim and dim + 1, stacked to shape (2, ...)."""
    return jnp.stack([uniform(key, dim), uniform(key, dim + 1)])


class Dims:
    """Dimension layout of one path sample: fixed offsets, then a fixed block per bounce.

    Fixing the layout keeps dimension d of bounce k the same number whatever the scene's
    materials or lights, so adding a plugin never reshuffles another plugin's randomness.
    """

    FILM = 0          # 2: position inside the pixel
    APERTURE = 2      # 2: thin-lens aperture
    BOUNCE_BASE = 4
    PER_BOUNCE = 8
    EMITTER_SELECT = 0  # 1: which emitter for next-event estimation
    EMITTER_POINT = 1   # 2: where on it
    BSDF_COMPONENT = 3  # 1: which lobe
    BSDF_DIRECTION = 4  # 2: direction within the lobe
    ROULETTE = 6        # 1: Russian roulette
    SPARE = 7

    @staticmethod
    def bounce(depth, offset):
        return Dims.BOUNCE_BASE + depth * Dims.PER_BOUNCE + offset
