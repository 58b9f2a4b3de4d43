"""Counter-based random numbers addressed by what is rendered.

Every random number of a path is a pure function of the job seed, the frame, the pixel's linear
index, the sample index and the dimension. Who renders a sample, and in which batch, cannot
change it -- that is what makes a render split over devices, hosts and interruptions
bit-identical to an unsplit one. Two samplers, a static setting of the compiled program
(``Settings.sampler``):

* ``independent``: ``uniform(sample_key(seed, frame, pixel, sample), dimension)``, a hash of the
  whole address per number.
* ``sobol``: Owen-scrambled Sobol points (``tracer.sobol``) at the sample index, scrambled per
  pixel and per group of dimensions by the hash of (seed, frame, pixel, first dimension). Each
  group (the pixel position, the lens, a bounce's light sample, its BSDF sample, its roulette)
  is stratified over the pixel's samples -- every prefix of 2^m samples is a net -- and groups are
  padded together at random (pbrt-v4's ``PaddedSobolSampler``, without its permutation over the
  sample count: sample i never depends on the spp, so refining a job continues its sequence).

The hash is Chris Wellons' "lowbias32" (bias 0.17 of the best possible), chained over the
address words; floats take the top 24 bits so they lie in [0, 1) exactly.
"""
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from tracer import sobol
from tracer.pytree import pytree_dataclass, static

__all__ = ["hash32", "sample_key", "uniform", "uniform2", "Dims", "SAMPLERS", "REUSES_EMITTER_SELECT", "SampleKeys",
           "sample_keys", "draw", "draw_bounce"]

SAMPLERS = ("independent", "sobol")
# Whether a sampler's emitter selection is its light point's first coordinate, to be reused by
# the emitter (``emitters.sample_direction(reuse=True)``, as Mitsuba's ``sample_emitter``).
REUSES_EMITTER_SELECT = {"independent": False, "sobol": True}

_GOLDEN = np.uint32(0x9E3779B9)


def hash32(x: ArrayLike) -> jax.Array:
    """lowbias32 on uint32 arrays."""
    x = jnp.asarray(x, jnp.uint32)
    x = x ^ (x >> 16)
    x = x * np.uint32(0x21F0AAAD)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x735A2D97)
    x = x ^ (x >> 15)
    return x


def _mix(h: jax.Array, word: ArrayLike) -> jax.Array:
    return hash32(h ^ (jnp.asarray(word, jnp.uint32) + _GOLDEN + (h << 6) + (h >> 2)))


def _pixel_key(seed: ArrayLike, frame: ArrayLike, pixel: ArrayLike) -> jax.Array:
    h = hash32(jnp.asarray(seed, jnp.uint32) ^ np.uint32(0x5BD1E995))
    h = _mix(h, frame)
    return _mix(h, pixel)


def sample_key(seed: ArrayLike, frame: ArrayLike, pixel: ArrayLike, sample: ArrayLike) -> jax.Array:
    """The uint32 key of one pixel sample; arguments broadcast against each other."""
    return _mix(_pixel_key(seed, frame, pixel), sample)


def _to_unit(bits: jax.Array) -> jax.Array:
    """uint32 -> float32 in [0, 1): the top 24 bits."""
    return (bits >> 8).astype(jnp.float32) * np.float32(1.0 / (1 << 24))


def uniform(key: jax.Array, dim: int | jax.Array) -> jax.Array:
    """A float32 in [0, 1) for each key at dimension ``dim`` (a Python or traced integer)."""
    return _to_unit(_mix(key, dim))


def uniform2(key: jax.Array, dim: int | jax.Array) -> jax.Array:
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
    def bounce(depth: int | jax.Array, offset: int) -> int | jax.Array:
        return Dims.BOUNCE_BASE + depth * Dims.PER_BOUNCE + offset


@pytree_dataclass
class SampleKeys:
    """Where N pixel samples draw their random numbers (``draw``, ``draw_bounce``)."""

    key: jnp.ndarray    # (N,) uint32: independent, the sample's key; sobol, its pixel's key
    index: jnp.ndarray | None  # (N,) uint32 sample index in its pixel, bit-reversed (sobol); None for independent
    sampler: str = static(default="independent")  # one of SAMPLERS


def sample_keys(sampler: str, seed: ArrayLike, frame: ArrayLike, pixel: ArrayLike,
                sample: ArrayLike) -> SampleKeys:
    """The ``SampleKeys`` of pixel samples (uint32 arguments broadcast against each other)."""
    if sampler == "independent":
        return SampleKeys(sample_key(seed, frame, pixel, sample), None, sampler)
    if sampler == "sobol":
        key = _pixel_key(seed, frame, pixel)
        key, index = jnp.broadcast_arrays(key, sobol.reverse_bits(sample))
        return SampleKeys(key, index, sampler)
    raise ValueError(f"unknown sampler {sampler!r} ({', '.join(SAMPLERS)})")


def _sobol_group(keys, dim, width):
    """(width, N) uint32 fractions of the Sobol group whose first dimension is ``dim``."""
    group = _mix(keys.key, dim)
    seeds = [group] + [_mix(group, np.uint32(j + 1)) for j in range(width)]
    return sobol.scrambled_sobol(keys.index, seeds, width)


def draw(keys: SampleKeys, dim: int | jax.Array, width: int = 2) -> jax.Array:
    """(width, N) float32 in [0, 1): dimensions dim .. dim + width - 1, one group of the layout
    (``Dims``; for sobol one group, width 1 to 3)."""
    if keys.sampler == "independent":
        return jnp.stack([uniform(keys.key, dim + j) for j in range(width)])
    return _to_unit(_sobol_group(keys, dim, width))


def draw_bounce(keys: SampleKeys, depth: int | jax.Array) -> jax.Array:
    """(Dims.SPARE, N) float32: the numbers of bounce ``depth`` ((N,) int32 or an int), rows in
    the order of Dims' per-bounce offsets.

    For sobol, each group is stratified over the pixel's samples on its own. The light sample is
    one 2D point whose first coordinate is also the emitter selection, which the emitter reuses
    (``REUSES_EMITTER_SELECT``, as Mitsuba's ``sample_emitter``): the points that land on one
    light remain a net. The BSDF sample (which lobe, which direction) is one 3D group, a (1, 3)-
    sequence: the direction takes Sobol dimensions 0 and 1, a (0, 2)-sequence, the lobe
    dimension 2, so the directions of one lobe stay stratified among themselves too.
    """
    if keys.sampler == "independent":
        return jnp.stack([uniform(keys.key, Dims.bounce(depth, k)) for k in range(Dims.SPARE)])
    rows: list[Any] = [None] * Dims.SPARE  # each filled below
    light = _to_unit(_sobol_group(keys, Dims.bounce(depth, Dims.EMITTER_SELECT), 2))
    rows[Dims.EMITTER_SELECT], rows[Dims.EMITTER_POINT], rows[Dims.EMITTER_POINT + 1] = light[0], light[0], light[1]
    bsdf = _to_unit(_sobol_group(keys, Dims.bounce(depth, Dims.BSDF_COMPONENT), 3))
    rows[Dims.BSDF_COMPONENT], rows[Dims.BSDF_DIRECTION], rows[Dims.BSDF_DIRECTION + 1] = bsdf[2], bsdf[0], bsdf[1]
    rows[Dims.ROULETTE] = _to_unit(_sobol_group(keys, Dims.bounce(depth, Dims.ROULETTE), 1))[0]
    return jnp.stack(rows)
