"""tracer.programs.KeptPrograms: a process that compiles many program structures keeps only the
last few, so XLA's machine code (hundreds of memory maps a program) cannot pile up until the
process reaches Linux's map limit and aborts."""
import gc

import jax.numpy as jnp
import numpy as np

from tracer.programs import KeptPrograms


def _maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _work(x, *, scale):
    # Several fusions and a loop: a program with some machine code to it.
    y = jnp.sin(x) * scale
    for _ in range(2):
        y = jnp.cumsum(jnp.exp(-y * y), axis=-1) / (1.0 + jnp.abs(y).sum())
    return y


def test_programs_past_keep_are_freed_and_compiled_again_on_return():
    kept = KeptPrograms(_work, static_argnames=("scale",), keep=3)
    first = np.asarray(kept(jnp.ones(3), scale=1.0))
    gc.collect()
    start = _maps()
    for n in range(4, 24):  # 20 more structures (shapes)
        kept(jnp.ones(n), scale=1.0)
    gc.collect()
    grown = _maps() - start
    assert kept.programs_made == 21
    # The same 20 programs held (what jax.jit does) grow the maps by at least 20 x several.
    held = KeptPrograms(_work, static_argnames=("scale",), keep=100)
    start_held = _maps()
    for n in range(4, 24):
        held(jnp.ones(n), scale=1.0)
    gc.collect()
    assert _maps() - start_held > 5 * 20
    assert grown < (_maps() - start_held) / 2, (grown, _maps() - start_held)
    # The first structure was dropped: it compiles again, to the same values.
    again = np.asarray(kept(jnp.ones(3), scale=1.0))
    assert kept.programs_made == 22
    np.testing.assert_array_equal(first, again)


def test_a_kept_structure_compiles_once_and_a_static_argument_is_part_of_it():
    kept = KeptPrograms(_work, static_argnames=("scale",), keep=2)
    for _ in range(3):
        kept(jnp.ones(5), scale=1.0)
    assert kept.programs_made == 1
    kept(jnp.zeros(5), scale=1.0)  # other values, same structure
    assert kept.programs_made == 1
    kept(jnp.ones(5), scale=2.0)
    assert kept.programs_made == 2
    kept(jnp.ones(5, jnp.int32), scale=1.0)  # another dtype
    assert kept.programs_made == 3
