"""tracer.runtime.programs.KeptPrograms: a process that compiles many program structures keeps only the
last few, so XLA's machine code (hundreds of memory maps a program) cannot pile up until the
process reaches Linux's map limit and aborts."""
import gc

import jax.numpy as jnp
import numpy as np

from tracer.runtime.programs import KeptPrograms


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


SCENE_DROPPED_SCRIPT = """
import gc
import numpy as np
import tracer
from tests.helpers.tiles import render_passes

kept = tracer.load_scene("examples/orbit.xml", width=24, height=16)
assert kept.geometry.accel == "embree", kept.geometry.accel
reference = np.asarray(render_passes(kept, 0, 2, size=(8, 8))[0])
handles = [int(kept.geometry.host_handle)]
for _ in range(3):
    scene = tracer.load_scene("examples/orbit.xml", width=24, height=16)
    handles.append(int(scene.geometry.host_handle))
    value, _ = render_passes(scene, 0, 2, size=(8, 8))
    del scene  # while its work unit may still run (JAX dispatches asynchronously)
    gc.collect()
    print("same" if np.array_equal(np.asarray(value), reference) else "different")
# ... and let go once the work is done: only the kept scene's engine scene is left.
import time
from tracer.accel import embree
left = lambda: sum(embree.is_open(h) for h in handles)
for _ in range(100):
    gc.collect()
    if left() == 1:
        break
    time.sleep(0.05)
print(left(), "engine scene(s) left", "(the kept one)" if embree.is_open(handles[0]) else "")
"""


def test_a_scene_dropped_while_its_work_runs_stays_until_the_work_is_done():
    """The work unit names a host engine's scene (Embree) by handle: a scene dropped right after
    the call is kept until the call's outputs are ready (``KeptPrograms``' ``hold``), then let go.
    Freed under it (with Embree behind a host callback), one device's callback failed and the other waited for it in a collective until
    XLA aborted the process (40 s later: a test process that died in whatever test came next)."""
    import os
    import subprocess
    import sys

    from tracer.runtime.xla_flags import with_flags
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, XLA_FLAGS=with_flags(devices=2), JAX_PLATFORMS="cpu", PYTHONPATH=root)
    result = subprocess.run([sys.executable, "-c", SCENE_DROPPED_SCRIPT], env=env, capture_output=True, text=True,
                            timeout=300, cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["same"] * 3 + ["1 engine scene(s) left (the kept one)"], result.stdout


EXIT_WITH_WORK_IN_FLIGHT = """
import jax, jax.numpy as jnp
from tracer.runtime.programs import KeptPrograms
slow = lambda x: jax.lax.fori_loop(0, 1_000_000, lambda i, v: v * 1.0000001 + 1e-7, x)
kept = KeptPrograms(slow, static_argnames=(), keep=2, hold=lambda args, kwargs: [object()])
x = jnp.ones((1024,))
kept(x).block_until_ready()
for _ in range(3):
    kept(x)  # still running when the script ends: the holding thread waits on it
"""


def test_a_process_ends_cleanly_with_held_work_still_running():
    """A process that exits while a call's held objects wait for its outputs exits 0: the holding
    thread is let go at exit. (Before, Python ended that daemon thread inside JAX's wait and
    glibc aborted the process, 'FATAL: exception not rethrown', status 134: 1 exit in 3 to 6.)"""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    runs = [subprocess.Popen([sys.executable, "-c", EXIT_WITH_WORK_IN_FLIGHT], cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
            for _ in range(4)]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0 and "FATAL" not in err, (run.returncode, err[-2000:])
