"""Composite materials (Mitsuba's ``blendbsdf`` and ``mask``) as weighted leaves.

A composite material is a tree of leaf BSDFs (any kind of the table, including ``null``, which
lets the ray pass) under blends and masks. Flattened on the host, it is a list of L slots, each
a leaf material and a product of D factors: a float texture's value w, or 1 - w (clamped to
[0, 1], as Mitsuba's ``eval_weight`` and ``eval_opacity``). ``blendbsdf(w, a, b)`` gives a's
slots the factor 1 - w and b's the factor w; ``mask(opacity, a)`` gives a's slots the factor
opacity and adds a ``null`` slot with 1 - opacity.

Mitsuba 3.9's composites evaluate the weighted sum of their children (value and pdf alike), and
sample one child chosen with its weight; the sample then reports the mixture at its direction:
pdf = sum of w_i pdf_i, where the sampled child counts with the pdf of its sample (for a delta
lobe, the lobe's probability) and the others with their pdf towards that direction, and weight
= (the same sum of w_i f_i cos) / pdf (checked against Mitsuba 3.9.1: a mask's pass-through
then reports 1 - opacity). ``weights`` and ``choose`` give what tracer.bsdfs needs for both,
so the images match Mitsuba's whatever the nesting.
"""
import itertools

import jax.numpy as jnp

from tracer import textures as tx
from tracer import lanes
from tracer import vecmath as vm
from tracer.pytree import pytree_dataclass

__all__ = ["Layers", "weights", "choose"]


@pytree_dataclass
class Layers:
    """M materials as up to L weighted leaf slots of up to D factors (a leaf material is its
    own slot 0 with no factor)."""

    leaf: jnp.ndarray        # (L, M) int32 leaf material of each slot, -1 for an unused slot
    factor: jnp.ndarray      # (L, D, M) int32 float texture of each factor, -1 for none
    complement: jnp.ndarray  # (L, D, M) bool: the factor is 1 - value
    nondelta: jnp.ndarray    # (M,) bool: some slot's leaf has a non-delta lobe (Mitsuba's Smooth flag)


def weights(layers: Layers, textures: tx.Textures, mat: jnp.ndarray, at: jnp.ndarray | tx.TexturePoint) -> jnp.ndarray:
    """Slot weights (L, N) of the materials ``mat`` (N,) at the texture point ``at`` (uv, or uv
    and mesh attributes: tracer.textures.texture_point)."""
    factor = lanes.take(layers.factor, mat)
    n_slots, n_factors = factor.shape[:2]
    # One lookup per (slot, factor): texture lookups take one id per ray.
    value = jnp.stack([jnp.stack([tx.eval_float(textures, jnp.maximum(factor[slot, d], 0), at)
                                  for d in range(n_factors)]) for slot in range(n_slots)])
    value = jnp.clip(value, 0.0, 1.0)
    value = jnp.where(layers.complement[:, :, mat], 1.0 - value, value)
    value = jnp.where(factor >= 0, value, 1.0)
    weight = vm.fold(jnp.multiply, value, axis=1)
    return jnp.where(layers.leaf[:, mat] >= 0, weight, 0.0)


def choose(weight: jnp.ndarray, u: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """One of the slots with weights (L, N) per ray, with probability its weight: (chosen (L, N)
    bool, u rescaled to [0, 1) within the chosen slot (N,))."""
    upper = jnp.stack(list(itertools.accumulate(weight)))  # (a running sum written out: see vm.fold)
    lower = upper - weight
    # The last slot with weight takes what rounding leaves above the total.
    last = (weight > 0) & (jnp.flip(jnp.cumsum(jnp.flip(weight > 0, 0), axis=0), 0) == 1)
    chosen = (weight > 0) & (u >= lower) & ((u < upper) | last)
    chosen = chosen & (jnp.cumsum(chosen, axis=0) == 1)  # at most one slot (equal bounds)
    pick = lambda a: vm.fold(jnp.add, jnp.where(chosen, a, jnp.zeros_like(a)))
    slot_weight, slot_lower = pick(weight), pick(lower)
    rescaled = jnp.clip((u - slot_lower) / jnp.where(slot_weight > 0, slot_weight, 1.0), 0.0,
                        jnp.float32(1.0 - 2.0**-24))
    return chosen, rescaled
