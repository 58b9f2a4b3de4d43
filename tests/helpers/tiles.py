"""The work unit called as the farm calls it, for the bit-identity tests of split renders."""
import jax.numpy as jnp

from tracer.rendering import WorkItem, WorkShape, local_mesh, render_tile


def render_passes(scene, first_pass, n_passes, acc=None, frame=0, tile=(0, 0), size=(16, 16), pass_size=4, spp=16,
                  passes_traced=1):
    """(value, weight) of passes [first_pass, first_pass + n_passes) of one tile (seed 7) added to
    ``acc`` (zeros when None); ``passes_traced`` of them traced as one batch."""
    th, tw = size
    if acc is None:
        acc = (jnp.zeros((th, tw, 3), jnp.float32), jnp.zeros((th, tw), jnp.float32))
    item = WorkItem.of(frame, 7, tile[0], tile[1], first_pass, n_passes, spp)
    return render_tile(scene, item, *acc, shape=WorkShape(th, tw, pass_size, passes_traced=passes_traced),
                       mesh=local_mesh())
