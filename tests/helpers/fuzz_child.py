"""The fuzzers' loads and renders, in a child process of their own.

A mutated EXR, PNG or PLY is decoded by C and C++ libraries (OpenEXR, libpng, Pillow); a defect
there can corrupt the memory of the process that decodes it without failing at once. In the test
process that would surface later in an unrelated test, or kill a pytest-xdist worker without a
word. In a child, a crash fails the fuzz test itself, naming the input; its memory bound is the
child's own peak.
"""
import concurrent.futures
import contextlib
import multiprocessing
import re
import resource

import numpy as np

__all__ = ["BOUND_S", "MEMORY_BOUND", "RENDERED_PIXELS", "child_process", "load_and_render", "run"]

BOUND_S = 120.0                # per mutant, a guard against hangs (a new program compiles in seconds)
MEMORY_BOUND = 2 << 30         # bytes the peak resident memory may grow by, per mutant
RENDERED_PIXELS = 64           # films with more pixels are loaded, not rendered


def _configure():
    """The child starts JAX as the test process does (conftest: strict dtype promotion)."""
    import jax

    jax.config.update("jax_numpy_dtype_promotion", "strict")


@contextlib.contextmanager
def child_process():
    """A one-process pool (spawned: nothing of the parent's threads or heap) for ``run``."""
    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_configure)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run(pool, path):
    """``load_and_render(path)`` in ``pool``'s child; its crash is this input's failure."""
    try:
        return pool.submit(load_and_render, str(path)).result()
    except concurrent.futures.process.BrokenProcessPool as e:
        raise AssertionError(f"the process loading {path} died: {e}") from None


def _peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def load_and_render(path):
    """How the scene at ``path`` fared ("refused: ...", "rendered", "loaded"), checked: a one-line
    SceneError naming a file of the scene, or a finite image, within the time and memory bounds."""
    import pathlib

    import tracer
    from tests.helpers.hang_guard import hang_guard
    from tracer import SceneError

    path = pathlib.Path(path)
    before = _peak_rss()
    with hang_guard(BOUND_S):
        try:
            scene = tracer.load_scene(path)
        except SceneError as e:
            message = str(e)
            assert "\n" not in message and str(path.parent) in message, repr(message)  # one line, naming a file
            return "refused: " + _error_kind(message)
        if scene.film.crop_width * scene.film.crop_height > RENDERED_PIXELS:
            return "loaded (film too large to render here)"
        image = tracer.render(scene, spp=1)
    assert image.shape == (scene.film.crop_height, scene.film.crop_width, 3)
    assert np.all(np.isfinite(image)), image
    grown = _peak_rss() - before
    assert grown < MEMORY_BOUND, f"peak memory grew by {grown / 2**30:.1f} GiB"
    return "rendered"


def _error_kind(message):
    """A message's gist for the statistics: its text without paths, numbers and quoted values."""
    gist = re.sub(r"\S*(/|\.xml|\.ply|\.obj|\.exr|\.png)\S*", "F", message)
    gist = re.sub(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|-?\d[\w.+-]*", "_", gist)
    return gist[:70]
