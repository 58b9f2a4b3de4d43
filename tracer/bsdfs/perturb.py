"""Normal and bump mapping (Mitsuba 3.9's ``normalmap`` and ``bumpmap``): a leaf BSDF evaluated
and sampled in a perturbed shading frame.

A perturbed leaf sees wi and wo in the frame (s', t', n') given in the caller's local shading
coordinates; its answer is kept only where wo lies on the same side of both frames (Mitsuba's
``cos_theta(wo) * cos_theta(perturbed_wo) > 0``), and its value is scaled by the shadowing term
of Estevez et al., "A Microfacet-Based Shadowing Function to Solve the Bump Terminator Problem"
(Ray Tracing Gems, 2019), as Mitsuba's ``eval_shadow_terminator`` (``use_shadowing_function``).

* normalmap: n' = normalize(2 rgb - 1) of its texture, in the local frame; s' = e_x made
  orthogonal to n'; t' = n' x s'.
* bumpmap: dp/du and dp/dv tilted along the shading normal by the height gradient times
  ``scale`` (``tracer.textures.eval_gradient``), n' = their normalized cross product turned to
  the geometric normal's side; s' = dp/du made orthogonal to n' -- in Mitsuba 3.9.1 that takes
  the *world* dp/du against the *local* n', which ``Tangents.dp_du_world`` reproduces (only an
  anisotropic BSDF under a bump map sees it).

With ``flip_invalid_normals`` (Schuessler et al. 2017's flip, as Mitsuba) n' has its tangential
part negated where it does not face wi's side. Under a twosided material's back the local
coordinates are mirrored (z negated) but, as in Mitsuba, the bump map's normal is computed in
the unmirrored ones and used as it is.
"""
import jax.numpy as jnp

from tracer import textures as tx
from tracer import vecmath as vm
from tracer.kinds import Perturbation
from tracer.pytree import pytree_dataclass, static

__all__ = ["Perturbations", "Tangents", "PerturbedFrame", "tangents", "frame", "shadow_terminator", "evaluated",
           "sampled"]


@pytree_dataclass
class Perturbations:
    """The frame perturbation of M leaf materials (kind NONE for most)."""

    kind: jnp.ndarray          # (M,) int32 a Perturbation
    texture: jnp.ndarray       # (M,) int32 normal map (RGB) or height (a bitmap) texture
    scale: jnp.ndarray         # (M,) float32 bumpmap's gradient scale
    flip_invalid: jnp.ndarray  # (M,) bool Mitsuba's flip_invalid_normals
    shadowing: jnp.ndarray     # (M,) bool Mitsuba's use_shadowing_function
    kinds_present: tuple[int, ...] = static(default=())  # the perturbations some material has (NONE not counted)


@pytree_dataclass
class Tangents:
    """The surface's parametrisation at N hits, in its unmirrored shading frame (s, t, n): what a
    bump map reads."""

    dp_du: jnp.ndarray        # (3, N) local dp/du
    dp_dv: jnp.ndarray        # (3, N) local dp/dv
    ng: jnp.ndarray           # (3, N) local geometric normal (as the shape's flip_normals turns it)
    dp_du_world: jnp.ndarray  # (3, N) dp/du in world space (Mitsuba's bump map tangent, see above)


@pytree_dataclass
class PerturbedFrame:
    """Per-ray perturbed frames in the caller's local coordinates (the identity where a ray's
    material has no perturbation)."""

    s: jnp.ndarray          # (3, N)
    t: jnp.ndarray          # (3, N)
    n: jnp.ndarray          # (3, N)
    kind: jnp.ndarray       # (N,) int32 the ray's Perturbation
    shadowed: jnp.ndarray   # (N,) bool: the shadowing term applies

    @property
    def axes(self) -> vm.Frame:
        return vm.Frame(self.s, self.t, self.n)


def tangents(frame: vm.Frame, dp_du: jnp.ndarray, dp_dv: jnp.ndarray,
             ng: jnp.ndarray) -> Tangents:
    """``Tangents`` of hits with shading frame ``frame`` (s, t, n) and world dp/du, dp/dv and
    geometric normal ng, each (3, N)."""
    return Tangents(dp_du=vm.to_local(frame, dp_du), dp_dv=vm.to_local(frame, dp_dv), ng=vm.to_local(frame, ng),
                    dp_du_world=dp_du)


def _flat(like: jnp.ndarray) -> Tangents:
    """Tangents of a flat local parametrisation (dp/du = e_x, dp/dv = e_y), for callers with none."""
    zero = jnp.zeros_like(like[0])
    ex = jnp.stack([zero + 1.0, zero, zero])
    return Tangents(dp_du=ex, dp_dv=jnp.stack([zero, zero + 1.0, zero]), ng=jnp.stack([zero, zero, zero + 1.0]),
                    dp_du_world=ex)


def _flip_invalid(n, wi, flip):
    """n with its tangential part negated where it does not face wi's side (and ``flip``)."""
    flip = flip & (wi[2] * vm.dot(wi, n) <= 0)
    return jnp.stack([jnp.where(flip, -n[0], n[0]), jnp.where(flip, -n[1], n[1]), n[2]])


def _normalmap(textures, tid, at, wi, flip):
    n = tx.eval_rgb(textures, tid, at) * 2.0 - 1.0
    n = vm.normalize(_flip_invalid(n, wi, flip))
    ex = jnp.stack([jnp.ones_like(n[0]), jnp.zeros_like(n[0]), jnp.zeros_like(n[0])])
    s = vm.normalize(ex - n * n[0])
    return s, vm.cross(n, s), n


def _bumpmap(textures, tid, scale, at, wi, flip, tangents):
    grad = tx.eval_gradient(textures, tid, at) * scale
    dp_du = jnp.stack([tangents.dp_du[0], tangents.dp_du[1], grad[0]])
    dp_dv = jnp.stack([tangents.dp_dv[0], tangents.dp_dv[1], grad[1]])
    n = vm.normalize(vm.cross(dp_du, dp_dv))
    n = vm.select(vm.dot(tangents.ng, n) < 0, -n, n)
    n = _flip_invalid(n, wi, flip)
    world = tangents.dp_du_world
    s = vm.normalize(world - n * vm.dot(n, world))
    return s, vm.cross(n, s), n


def frame(perturbations: Perturbations, textures: tx.Textures, mat: jnp.ndarray, at: jnp.ndarray | tx.TexturePoint,
          wi: jnp.ndarray, tangents: Tangents | None = None) -> PerturbedFrame:
    """The ``PerturbedFrame`` of materials ``mat`` (N,) at the texture point ``at`` for local wi
    (3, N); ``tangents``: the hits' ``Tangents`` (a flat parametrisation when None)."""
    kind = perturbations.kind[mat]
    tid, flip = perturbations.texture[mat], perturbations.flip_invalid[mat]
    zero = jnp.zeros_like(wi[0])
    axes: tuple[jnp.ndarray, ...]
    axes = (jnp.stack([zero + 1.0, zero, zero]), jnp.stack([zero, zero + 1.0, zero]), jnp.stack([zero, zero, zero + 1.0]))
    if Perturbation.NORMALMAP in perturbations.kinds_present:
        mapped = _normalmap(textures, tid, at, wi, flip)
        axes = tuple(vm.select(kind == Perturbation.NORMALMAP, a, b) for a, b in zip(mapped, axes))
    if Perturbation.BUMPMAP in perturbations.kinds_present:
        tangents = _flat(wi) if tangents is None else tangents
        bumped = _bumpmap(textures, tid, perturbations.scale[mat], at, wi, flip, tangents)
        axes = tuple(vm.select(kind == Perturbation.BUMPMAP, a, b) for a, b in zip(bumped, axes))
    shadowed = (kind != Perturbation.NONE) & perturbations.shadowing[mat]
    s, t, n = axes
    return PerturbedFrame(s, t, n, kind=kind, shadowed=shadowed)


def _tan2(v: jnp.ndarray) -> jnp.ndarray:
    """Mitsuba's ``Frame::tan_theta_2`` of unit vectors v (3, N)."""
    return jnp.maximum(1.0 - v[2] * v[2], 0.0) / (v[2] * v[2])


def shadow_terminator(n: jnp.ndarray, wo: jnp.ndarray) -> jnp.ndarray:
    """Estevez et al.'s shadowing term (N,) for the perturbed normal n and wo (both (3, N), local)."""
    alpha2 = jnp.minimum(0.125 * _tan2(n), 1.0)
    return 2.0 / (1.0 + jnp.sqrt(1.0 + alpha2 * _tan2(wo)))


def _scale(pf: PerturbedFrame, wo: jnp.ndarray) -> jnp.ndarray:
    return jnp.where(pf.shadowed, shadow_terminator(pf.n, wo), 1.0)


def evaluated(pf: PerturbedFrame, wo: jnp.ndarray, wo_p: jnp.ndarray, value: jnp.ndarray,
              pdf: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(value (3, N), pdf (N,)) of a perturbed leaf's ``eval_pdf`` at wo_p (= wo in its frame)."""
    ok = wo[2] * wo_p[2] > 0
    return vm.select(ok, value * _scale(pf, wo), 0.0), jnp.where(ok, pdf, 0.0)


def sampled(pf: PerturbedFrame, wo_p: jnp.ndarray, weight: jnp.ndarray,
            pdf: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """(wo (3, N), weight (3, N), pdf (N,)) of a perturbed leaf's sample wo_p (in its frame) with
    its weight and pdf. A failed sample keeps its pdf under a bump map (as Mitsuba's bumpmap does:
    a blend above it counts that pdf in its mixture), not under a normal map."""
    wo = vm.to_world(pf.axes, wo_p)
    ok = jnp.any(weight != 0, axis=0) & (wo_p[2] * wo[2] > 0)
    pdf = jnp.where(ok | (pf.kind == Perturbation.BUMPMAP), pdf, 0.0)
    return wo, vm.select(ok, weight * _scale(pf, wo), 0.0), pdf
