"""The farm's and the tracer's shared defaults: the one home of these constants.

``farm`` imports this module (so it imports nothing heavy: no JAX, no numpy), as do
``tracer.rendering`` and ``cluster.group``. A job's tile and pass sizes are part of its reduction
tree (see ``tracer.rendering``): ``tracer.render`` with these defaults gives the bits of a farm job
made with them.
"""

__all__ = ["DEFAULT_TILE", "ACCELERATOR_TILE", "TRACE_SAMPLES", "DEFAULT_PASS_SIZE", "PLATFORMS", "MAX_FILM_SIZE",
           "MAX_SPP", "MAX_FRAME", "MAX_SEED", "MAX_PASS_SIZE", "pass_samples", "fitting_tile", "default_tile"]

DEFAULT_TILE = 128       # output tile edge, pixels: one work unit renders one tile
# A farm job's tile on GPUs and TPUs: their work unit wants millions of samples in flight (an H100
# traced the Cornell box at 36 Msamples/s in 128-pixel tiles of 16 spp, 83 in 512-pixel ones).
ACCELERATOR_TILE = 512
# Samples a CPU work unit traces as one batch at most (tracer.rendering.trace_samples).
TRACE_SAMPLES = 1 << 21
_MARGIN = 4  # pixels a tile's samples reach past it at most (the filter's radius; tracer.filters)
DEFAULT_PASS_SIZE = 16   # samples per pixel in one pass, the unit passes are summed in
PLATFORMS = ("cpu", "gpu", "tpu")  # device platforms a worker group may run on
MAX_FILM_SIZE = 16384    # pixels, a film's width and height at most (a scene's own film and --res alike)
# The traced program takes frame numbers and sample indices as int32: a frame number past
# MAX_FRAME, or a sample index past 2^31 - 1 (spp plus a pass's slack), would wrap around.
MAX_SPP = 2**30          # samples per pixel at most
MAX_FRAME = 2**31 - 1    # the largest frame number
MAX_SEED = 2**31 - 1     # the largest seed (int32 too)
MAX_PASS_SIZE = 1024     # samples per pixel in one pass (a static shape of the compiled program)


def pass_samples(pass_size, tile_h, tile_w, margin=_MARGIN):
    """Samples one pass of a tile traces: its source grid is the tile grown by the filter's margin."""
    return pass_size * (tile_h + 2 * margin) * (tile_w + 2 * margin)


def fitting_tile(width, height, pass_size, budget, margin=_MARGIN, grow=False):
    """The frame's longer edge where one pass of the whole frame fits ``budget`` samples (one
    work unit drains its path pool once, where tiles would each), else ``DEFAULT_TILE``; with
    ``grow``, that doubled while a pass of it still fits and it is smaller than the frame."""
    if pass_samples(pass_size, height, width, margin) <= budget:
        return max(width, height)
    tile = DEFAULT_TILE
    while grow and tile * 2 < max(width, height) and pass_samples(pass_size, tile * 2, tile * 2, margin) <= budget:
        tile *= 2
    return tile


def default_tile(platform, film=None, pass_size=DEFAULT_PASS_SIZE):
    """A new job's tile when it names none (the tile does not change a pixel's bits, only how the
    work is split): ``ACCELERATOR_TILE`` on GPUs and TPUs. On CPUs the whole frame where one pass
    of it fits ``TRACE_SAMPLES`` (``film``: its (width, height); None for a job with a noise
    target, whose tiles are where its samples go), else ``DEFAULT_TILE``: a 160x120 frame in
    128-pixel tiles is two work units, the second a quarter used."""
    if platform != "cpu":
        return ACCELERATOR_TILE
    if film is None or max(film) <= DEFAULT_TILE:
        return DEFAULT_TILE
    return fitting_tile(*film, pass_size, TRACE_SAMPLES)
