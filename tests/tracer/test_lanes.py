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


_KIND_CODE = (lambda x, a: jnp.sin(x) * a, lambda x, a: x * x + a, lambda x, a: jnp.exp(-x) - a * x)


def _by_kind(slot, x, a):
    """Each lane's own kind code, on its kind's lanes only; outputs a pytree of two shapes."""
    def branch(j, inputs):
        x, a = inputs
        y = _KIND_CODE[j](x, a)
        return {"y": y, "both": jnp.stack([y, a + j])}
    return lanes.by_kind(slot, len(_KIND_CODE), branch, (x, a), window=16)


def _cases(n, seed=5):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.integers(0, 3, n), jnp.int32), jnp.asarray(rng.normal(size=n), jnp.float32),
            jnp.asarray(rng.uniform(0.5, 2.0, n), jnp.float32))


@pytest.mark.parametrize("n", [1, 7, 16, 50, 333])
def test_by_kind_gives_each_lane_its_kinds_result(n):
    slot, x, a = _cases(n)
    out = jax.jit(_by_kind)(slot, x, a)
    want = np.select([np.asarray(slot) == j for j in range(3)], [np.asarray(f(x, a)) for f in _KIND_CODE])
    np.testing.assert_allclose(np.asarray(out["y"]), want, rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(out["both"][0]), np.asarray(out["y"]))
    np.testing.assert_array_equal(np.asarray(out["both"][1]), np.asarray(a + slot.astype(jnp.float32)))


def test_by_kind_bits_do_not_depend_on_the_other_lanes():
    """A lane's bits are its own: the same in a batch shuffled, cut short, or of one kind only."""
    slot, x, a = _cases(333)
    whole = np.asarray(jax.jit(_by_kind)(slot, x, a)["y"])
    shuffle = np.random.default_rng(1).permutation(333)
    shuffled = np.asarray(jax.jit(_by_kind)(slot[shuffle], x[shuffle], a[shuffle])["y"])
    np.testing.assert_array_equal(shuffled, whole[shuffle])
    np.testing.assert_array_equal(np.asarray(jax.jit(_by_kind)(slot[:40], x[:40], a[:40])["y"]), whole[:40])
    ones = np.asarray(slot) == 1
    alone = np.asarray(jax.jit(_by_kind)(slot[ones], x[ones], a[ones])["y"])  # one kind, no spare lanes used
    np.testing.assert_array_equal(alone, whole[ones])


def test_by_kind_is_reverse_differentiable():
    slot, x, a = _cases(100)
    loss = lambda x, a: jnp.sum(_by_kind(slot, x, a)["y"] ** 2)
    selected = lambda x, a: jnp.sum(jnp.select([slot == j for j in range(3)], [f(x, a) for f in _KIND_CODE]) ** 2)
    got, want = jax.jit(jax.grad(loss, (0, 1)))(x, a), jax.jit(jax.grad(selected, (0, 1)))(x, a)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_prefix_counts_are_exact():
    rng = np.random.default_rng(2)
    for n in (1, 63, 64, 65, 5000):
        mask = rng.random((3, n)) < [[0.1], [0.5], [0.99]]
        got = np.asarray(jax.jit(lanes._prefix_counts)(jnp.asarray(mask)))
        np.testing.assert_array_equal(got, np.cumsum(mask, axis=1))
