"""The private JAX names the project relies on, each reached here and nowhere else.

JAX does not promise to keep what lives under ``jax._src``; ``tests/tracer/test_jax_private.py``
reaches every name below, so that a JAX upgrade that moves one fails that test by name instead of
changing what the tracer or the farm's workers do. Importing this module imports nothing.
"""
from collections.abc import Callable
from typing import Any

__all__ = ["backends_are_initialized", "callback_op_sharding"]


def backends_are_initialized() -> bool:
    """Whether this process's JAX backends have started (then ``XLA_FLAGS`` and the CPU device
    count can no longer change)."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def callback_op_sharding() -> Callable[..., Any]:
    """JAX's ``_callback_op_sharding(axis_context, sharding, avals_out)``: the sharding a host
    callback is lowered with (per device inside ``shard_map``). Raises ImportError where this JAX
    lacks it (``tracer.accel.host`` then calls back through ``jax.pure_callback``)."""
    from jax._src.callback import _callback_op_sharding

    return _callback_op_sharding
