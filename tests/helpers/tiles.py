"""The work unit called as the farm calls it, for the bit-identity tests of split renders."""
import jax.numpy as jnp

from tracer.rendering import local_mesh, render_tile


def render_passes(scene, first_pass, n_passes, acc=None, frame=0, tile=(0, 0), size=(16, 16), pass_size=4, spp=16,
                  passes_traced=1):
    """(value, weight) of passes [first_pass, first_pass + n_passes) of one tile (seed 7) added to
    ``acc`` (zeros when None); ``passes_traced`` of them traced as one batch."""
    th, tw = size
    if acc is None:
        acc = (jnp.zeros((th, tw, 3), jnp.float32), jnp.zeros((th, tw), jnp.float32))
    i32 = jnp.int32
    return render_tile(scene, i32(frame), i32(7), i32(tile[0]), i32(tile[1]), i32(first_pass), i32(n_passes),
                       i32(spp), *acc, tile_h=th, tile_w=tw, pass_size=pass_size, mesh=local_mesh(),
                       passes_traced=passes_traced)
