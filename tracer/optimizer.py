"""One optimizer step of inverse rendering: optax's Adam or SGD, then each value clamped to its
valid range (``tracer.scene_parameters.valid_range``).

The farm keeps an optimization as flat float32 vectors (the parameters in the job's key order)
and the optimizer's state as bytes (``state_bytes``): optax's state is a pytree of arrays whose
structure ``optimizer(name, rate).init`` fixes, so the bytes and that structure give it back
exactly, and a step resumed from them is the same bits as one never interrupted.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tracer.shared import OPTIMIZERS

__all__ = ["OPTIMIZERS", "optimizer", "init_state", "state_bytes", "state_from_bytes", "step"]


def optimizer(name: str, learning_rate: float) -> optax.GradientTransformation:
    """optax's ``adam`` (its default betas and eps) or plain ``sgd`` at ``learning_rate``."""
    if name == "adam":
        return optax.adam(learning_rate)
    if name == "sgd":
        return optax.sgd(learning_rate)
    raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")


def init_state(name: str, learning_rate: float, params: Mapping[str, np.ndarray]) -> optax.OptState:
    return optimizer(name, learning_rate).init({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})


def state_bytes(state: optax.OptState) -> bytes:
    """The state's leaves' bytes, in pytree order."""
    return b"".join(np.ascontiguousarray(np.asarray(leaf)).tobytes() for leaf in jax.tree.leaves(state))


def state_from_bytes(name: str, learning_rate: float, params: Mapping[str, np.ndarray], data: bytes) -> optax.OptState:
    """The state ``state_bytes`` gave, for parameters of ``params``' keys and shapes."""
    template = init_state(name, learning_rate, params)
    leaves, tree = jax.tree.flatten(template)
    out, at = [], 0
    for leaf in leaves:
        leaf = np.asarray(leaf)
        out.append(jnp.asarray(np.frombuffer(data, leaf.dtype, leaf.size, at).reshape(leaf.shape)))
        at += leaf.nbytes
    if at != len(data):
        raise ValueError(f"an optimizer state of {len(data)} bytes, not the {at} that {name} keeps for these parameters")
    return jax.tree.unflatten(tree, out)


def _step(name: str, learning_rate: float, params, state, grads, low, high):
    updates, state = optimizer(name, learning_rate).update(grads, state, params)
    params = optax.apply_updates(params, updates)
    return {k: jnp.clip(v, low[k], high[k]) for k, v in params.items()}, state


_jitted_step = jax.jit(_step, static_argnums=(0, 1))


def step(name: str, learning_rate: float, params: Mapping[str, np.ndarray], state: optax.OptState,
         grads: Mapping[str, np.ndarray], ranges: Mapping[str, Sequence[float]]) -> tuple[dict[str, np.ndarray], optax.OptState]:
    """(parameters, state) after one step of ``grads`` (d loss / d params), each value clamped to
    ``ranges[key]`` = (low, high)."""
    as_arrays = lambda tree: {k: jnp.asarray(v, jnp.float32) for k, v in tree.items()}  # noqa: E731
    low = {k: jnp.float32(ranges[k][0]) for k in params}
    high = {k: jnp.float32(ranges[k][1]) for k in params}
    with jax.numpy_dtype_promotion("standard"):  # optax mixes its int32 step count with Python floats
        new, state = _jitted_step(name, float(learning_rate), as_arrays(params), state, as_arrays(grads), low, high)
    return {k: np.asarray(v) for k, v in new.items()}, state
