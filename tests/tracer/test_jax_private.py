"""Every private JAX name the project uses (``tracer.runtime.jax_private``) is still where it was: a JAX
upgrade that moves one fails here, by name, instead of changing what the tracer does."""
import jax

from tracer.runtime import jax_private


def test_backends_are_initialized_is_reachable():
    assert jax_private.backends_are_initialized() in (True, False)
    jax.numpy.zeros(1).block_until_ready()
    assert jax_private.backends_are_initialized() is True


def test_callback_op_sharding_is_reachable():
    op_sharding = jax_private.callback_op_sharding()
    assert callable(op_sharding), f"jax {jax.__version__} moved jax._src.callback._callback_op_sharding"
