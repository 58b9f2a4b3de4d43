"""Owen-scrambled Sobol points: a progressive low-discrepancy sequence on uint32 arrays.

Point ``i`` depends on ``i`` and the seeds only, never on how many points are drawn, and every
aligned run of 2^m indices [k 2^m, (k+1) 2^m) -- the first 2^m points in particular -- is a
(t, m, s)-net in base 2: with t = 0 for the 2D points drawn here (dimensions 0 and 1), each of the 2^m
elementary intervals of area 2^-m ([a 2^-p, (a+1) 2^-p) x [b 2^-q, (b+1) 2^-q), p + q = m)
holds exactly one point. That is what makes the farm's refinement exact (32 spp raised to 64
keeps the first 32 points) while each power-of-two prefix is stratified.

The construction is Burley's "Practical Hash-based Owen Scrambling" (JCGT 9(4), 2020): the
index is itself Owen-scrambled (a nested permutation that maps aligned blocks of 2^m indices
onto aligned blocks, so prefixes stay nets; it decorrelates groups that draw the same
dimensions), the Sobol point is computed, and each dimension is Owen-scrambled with a seed of
its own. The scrambling hash is Vegdahl's improved Laine-Karras permutation, as pbrt-v4's
``FastOwenScrambler`` (pbrt-v4 ``util/lowdiscrepancy.h``): in bit-reversed order every step
flips bit k by a function of the bits below it, which is exactly a nested uniform scramble.

Dimensions: 0 is van der Corput (the bit reversal of the index), 1 and 2 are Sobol's next two
(primitive polynomials x + 1 and x^2 + x + 1, Joe and Kuo's direction numbers). The pair (0, 1)
is a (0, 2)-sequence; (0, 2) and (1, 2) have t = 1, and the three together are a (1, 3)-sequence.
Values are 32-bit fractions (bit 31 weighs 1/2); ``tracer.rng`` turns them into floats.
"""
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

__all__ = ["reverse_bits", "owen_scramble", "sobol_bits", "scrambled_sobol", "DIMENSIONS"]

DIMENSIONS = 3
_MASKS = ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF))


def _direction_numbers(degree: int, coefficients: int, initial: Sequence[int]) -> np.ndarray:
    """The 32 columns (uint32, column k for index bit k) of a Sobol generator matrix, from the
    primitive polynomial's degree, its inner coefficients a_1..a_{s-1} as bits and the initial
    m_1..m_s (Joe and Kuo, "Constructing Sobol sequences with better two-dimensional projections",
    SIAM J. Sci. Comput. 30, 2008)."""
    m = list(initial)
    for k in range(degree, 32):
        value = m[k - degree] ^ (m[k - degree] << degree)
        for j in range(1, degree):
            if (coefficients >> (degree - 1 - j)) & 1:
                value ^= m[k - j] << j
        m.append(value)
    return np.array([m[k] << (31 - k) for k in range(32)], np.uint32)


# Joe-Kuo's dimension 3 (s=2, a=1, m=1,3); their dimension 2 is the Pascal matrix (``_pascal``).
_DIM2_COLUMNS = _direction_numbers(2, 1, (1, 3))
_DIM2_REVERSED = np.array([int(f"{c:032b}"[::-1], 2) for c in _DIM2_COLUMNS], np.uint32)


def reverse_bits(x: ArrayLike) -> jax.Array:
    """Bit reversal of uint32 arrays (bit 0 <-> bit 31)."""
    x = jnp.asarray(x, jnp.uint32)
    mask: int | np.uint32
    for shift, mask in _MASKS:
        mask = np.uint32(mask)
        x = ((x >> shift) & mask) | ((x & mask) << shift)
    return (x >> 16) | (x << 16)


def _nested_permutation(v: jax.Array, seed: jax.Array) -> jax.Array:
    """Vegdahl's Laine-Karras-style hash on bit-reversed values: bit k of the result is bit k of
    ``v`` flipped by a function of the seed and of v's bits below k."""
    v = v ^ (v * np.uint32(0x3D20ADEA))
    v = v + seed
    v = v * ((seed >> 16) | np.uint32(1))
    v = v ^ (v * np.uint32(0x05526C56))
    return v ^ (v * np.uint32(0x53A22864))


def owen_scramble(x: ArrayLike, seed: ArrayLike) -> jax.Array:
    """Owen (nested uniform) scrambling of 32-bit fractions ``x`` (uint32), one tree per seed:
    bit 31 - k flips by a function of the seed and the bits above it. Maps aligned blocks of 2^m
    values onto aligned blocks of 2^m values."""
    return reverse_bits(_nested_permutation(reverse_bits(x), jnp.asarray(seed, jnp.uint32)))


def _pascal(index: jax.Array) -> jax.Array:
    """Sobol dimension 1 before its final bit reversal: output bit p is the XOR of the index bits
    k whose positions contain p's bits (the Pascal matrix mod 2, by Lucas' theorem), computed as a
    superset-sum transform over the 5 bits of a bit position."""
    y = index
    for shift, mask in _MASKS:
        y = y ^ ((y >> shift) & np.uint32(mask))
    return y ^ (y >> 16)


def _multiply(columns: np.ndarray, index: jax.Array) -> jax.Array:
    """The generator matrix with these 32 columns times the index's bits, over GF(2)."""
    acc = jnp.zeros_like(index)
    for k in range(32):
        bit = (index >> k) & np.uint32(1)
        acc = acc ^ (np.uint32(columns[k]) * bit)
    return acc


def sobol_bits(index: ArrayLike, width: int) -> jax.Array:
    """Unscrambled Sobol points: (width, N) uint32 fractions of dimensions 0..width-1 of the
    points at ``index`` (N,) uint32."""
    index = jnp.asarray(index, jnp.uint32)
    dims = [reverse_bits(index), reverse_bits(_pascal(index)), _multiply(_DIM2_COLUMNS, index)]
    return jnp.stack(dims[:width])


def scrambled_sobol(reversed_index: ArrayLike, seeds: Sequence[ArrayLike], width: int) -> jax.Array:
    """Shuffled, Owen-scrambled Sobol points (Burley 2020): (width, N) uint32 fractions.

    reversed_index: (N,) uint32 position in the sequence, bit-reversed (``reverse_bits(i)``: a
    sample computes it once for all its groups); seeds: ``width + 1`` uint32 arrays broadcasting
    against it, seeds[0] shuffles the index and seeds[1 + j] scrambles dimension j.
    """
    if not 1 <= width <= DIMENSIONS:
        raise ValueError(f"width must be in [1, {DIMENSIONS}], got {width}")
    seed = lambda j: jnp.asarray(seeds[j], jnp.uint32)
    shuffled = reverse_bits(_nested_permutation(jnp.asarray(reversed_index, jnp.uint32), seed(0)))
    # Each dimension is owen_scramble(d) = reverse_bits(permutation(reverse_bits(d))), with
    # reverse_bits(d) at hand: the van der Corput point is reverse_bits(index), the Pascal product
    # comes out reversed, and dimension 2 multiplies by its matrix's reversed columns (reversal is
    # linear over GF(2)). Four reversals for three dimensions instead of eight.
    dims = [lambda: shuffled,
            lambda: _pascal(shuffled),
            lambda: _multiply(_DIM2_REVERSED, shuffled)]
    return jnp.stack([reverse_bits(_nested_permutation(dims[j](), seed(1 + j))) for j in range(width)])
