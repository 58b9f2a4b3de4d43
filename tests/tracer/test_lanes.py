"""tracer.lanes: a loop drained in phases over fewer and fewer lanes gives each lane what one loop
over all of them gives it, back in the lanes' order."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tracer import lanes


def _step(carry, inputs):
    """A lane's own arithmetic: x <- x * a + k, its count down by one, for as many steps as it has."""
    x, left, k = carry
    a, = inputs
    live = left > 0
    return jnp.where(live, x * a + k.astype(jnp.float32), x), jnp.where(live, left - 1, left), k + 1


@pytest.mark.parametrize("shrink, min_phase", [(2, 4), (4, 16), (4, 1 << 20)])
def test_drain_in_place_gives_each_lane_its_own_result_in_its_place(shrink, min_phase):
    rng = np.random.default_rng(3)
    n = 512
    steps = jnp.asarray(rng.geometric(0.08, n), jnp.int32)  # a long tail: a few lanes run 60+ steps
    a = jnp.asarray(rng.uniform(0.5, 1.1, n), jnp.float32)
    x0 = jnp.asarray(rng.normal(size=n), jnp.float32)
    carry = (x0, steps, jnp.zeros(n, jnp.int32))

    whole = jax.jit(lambda c: jax.lax.while_loop(lambda c: jnp.any(c[1] > 0), lambda c: _step(c, (a,)), c))(carry)
    drained = jax.jit(lambda c, a: lanes.drain_in_place(c, (a,), lambda c: c[1] > 0, _step, shrink=shrink,
                                                        min_phase=min_phase))(carry, a)
    np.testing.assert_array_equal(np.asarray(drained[0]), np.asarray(whole[0]))
    np.testing.assert_array_equal(np.asarray(drained[1]), np.zeros(n))
    assert int(steps.max()) > 4 * int(np.median(np.asarray(steps)))  # phases had something to drain
