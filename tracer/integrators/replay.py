"""Path replay backpropagation: gradients of path-traced radiance in the scene's values, in memory
that does not grow with path length (Vicini, Speierer and Jakob 2021, "Path Replay
Backpropagation"; Mitsuba 3's ``prb`` integrator, ``mitsuba/ad/integrators/prb.py``).

``radiance(params, scene, substitute, keys, rays)`` is the per-sample radiance (3, N) of the
scene with ``params`` written in; it is a ``jax.custom_vjp``. The primal pass traces the paths
(``tracer.integrators.path``'s bounce) and keeps only each sample's radiance L. The adjoint pass
traces the same paths again with the same random numbers (they are addressed by sample and
bounce, ``tracer.rng``) and, at each vertex, with L' the radiance still to come after it,
backpropagates the sample's adjoint dL through

    Lo = beta (Le mis + Lr_dir) + L' * f(wo) / detach(f(wo))

where beta is the (detached) throughput, Le the emission the ray met, Lr_dir the light sample, f
the BSDF (times the cosine) at the detached sampled direction wo: the BSDF sample's derivative
without differentiating the sampling. Then L' loses this vertex's detached terms and the path
moves on. The geometry (which surface a ray meets, and where) is held fixed: no
visibility-discontinuity terms, as ``prb``.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from tracer import bsdfs
from tracer import textures as tx
from tracer import vecmath as vm
from tracer.integrators.path import PathState, fresh_paths, locate, shade
from tracer.rng import SampleKeys

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["radiance"]

Substitute = Callable[["Scene", Any], "Scene"]  # (scene, params) -> the scene with params written in
_sg = jax.lax.stop_gradient


def _step(scene: Scene, keys: SampleKeys, state: PathState) -> PathState:
    return shade(scene, state, locate(scene, keys, state), state.radiance)


def _trace(scene: Scene, keys: SampleKeys, state: PathState) -> jax.Array:
    """(3, N) radiance of every path, all lanes a bounce at a time (the primal pass)."""
    state = jax.lax.while_loop(lambda s: jnp.any(s.active), lambda s: _step(scene, keys, s), state)
    return state.radiance


# A direction well above the horizon and off the normal (where the Smith shadowing of a microfacet
# BSDF has an unselected branch with NaN partials); numpy: this module may be imported while a
# caller's trace runs, and a jnp constant made then would be that trace's.
_UP = (np.array([[0.3], [0.2], [1.0]]) / np.sqrt(1.13)).astype(np.float32)


def _finite(vertex):
    """``vertex`` with what a lane that hit nothing holds (NaN frames, uvs) made finite: its terms
    are masked out with ``where``, but a NaN partial times a zero cotangent is still NaN."""
    return jax.tree.map(lambda a: jnp.nan_to_num(a, posinf=0.0, neginf=0.0) if jnp.issubdtype(a.dtype, jnp.floating)
                        else a, vertex)


def _vertex_gradient(params, scene, substitute, keys, state, remaining, d_radiance):
    """One vertex of the adjoint pass: (d params, the next state, the radiance still to come)."""
    vertex = _finite(locate(scene, keys, state))
    at = tx.texture_point(vertex.surface.si.uv, vertex.surface.si.attributes)

    def contribution(p):
        """Lo of the vertex as a function of the values (its primal is ``remaining``)."""
        s = substitute(scene, p)
        following = shade(s, state, vertex, jnp.zeros_like(state.radiance))
        direct = following.radiance  # beta (Le mis + Lr_dir), beta held by ``state``
        wo = _sg(jnp.where(following.active, vm.to_local(vertex.frame, following.direction), _UP))
        held = _sg(bsdfs.eval_pdf(s.materials, s.textures, vertex.mat, at, vertex.wi, wo, vertex.surface.tangents)[0])
        # Lanes whose f is 0 (the path ended; below the horizon) take their derivative at a safe
        # direction: a zero cotangent times a partial that is NaN there is NaN, not 0.
        used = following.active & jnp.any(held != 0, axis=0)
        wi, wo = jnp.where(used, vertex.wi, _UP), jnp.where(used, wo, _UP)
        f, _ = bsdfs.eval_pdf(s.materials, s.textures, vertex.mat, at, wi, wo, vertex.surface.tangents)
        # L' f / detach(f), as (L' / detach(f)) f: where L' is 0 (the path ended) the cotangent
        # of f is 0, not 0 times f's derivative over a tiny f (inf).
        after = jnp.where(following.active & (held != 0), _sg(remaining - direct), 0.0)
        return direct + _sg(after / jnp.where(held != 0, held, 1.0)) * f, following

    _, pullback, following = jax.vjp(contribution, params, has_aux=True)
    (grad,) = pullback(d_radiance)
    return grad, following, remaining - following.radiance


def _adjoint(params, scene, substitute, keys, origin, direction, t_max, active, radiance, d_radiance):
    """d params of sum(d_radiance * radiance), the paths replayed one vertex at a time."""
    def body(carry):
        grad, state, remaining = carry
        g, state, remaining = _vertex_gradient(params, scene, substitute, keys, state, remaining, d_radiance)
        return jax.tree.map(jnp.add, grad, g), state, remaining

    zero = jax.tree.map(jnp.zeros_like, params)
    start = fresh_paths(origin, direction, t_max, active & jnp.any(d_radiance != 0, axis=0))
    grad, _, _ = jax.lax.while_loop(lambda c: jnp.any(c[1].active), body, (zero, start, radiance))
    return grad


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def radiance(params: Any, scene: Scene, substitute: Substitute, keys: SampleKeys, origin: jax.Array,
             direction: jax.Array, t_max: jax.Array, active: jax.Array) -> jax.Array:
    """(3, N) radiance along the camera rays (origin, direction (3, N), t_max, active (N,)) of
    ``substitute(scene, params)``; ``keys`` address each sample's random numbers. Reverse-mode
    differentiable in ``params`` by path replay (``jax.grad``, ``jax.vjp``); nothing else is
    differentiated."""
    return _primal(params, scene, substitute, keys, origin, direction, t_max, active)


def _primal(params, scene, substitute, keys, origin, direction, t_max, active):
    return _trace(substitute(scene, params), keys, fresh_paths(origin, direction, t_max, active))


def _forward(params, scene, substitute, keys, origin, direction, t_max, active):
    out = _primal(params, scene, substitute, keys, origin, direction, t_max, active)
    return out, (params, scene, keys, origin, direction, t_max, active, out)


def _backward(substitute, saved, d_radiance):
    params, scene, keys, origin, direction, t_max, active, out = saved
    grad = _adjoint(params, scene, substitute, keys, origin, direction, t_max, active, out, d_radiance)
    return grad, None, None, None, None, None, None


radiance.defvjp(_forward, _backward)
