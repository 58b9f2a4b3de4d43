"""Sampling emitters for next-event estimation, and their pdfs and radiance for MIS.

One emitter is chosen per lane by its selection probability (uniform unless Mitsuba's
``sampling_weight`` says otherwise, as ``Scene::sample_emitter``), then sampled by its kind.
Each kind present is evaluated for the whole batch and merged by the lane's kind -- the
vectorized form of a per-lane switch. Pdfs include the selection probability, weights divide
by it, as ``Scene::sample_emitter_direction`` / ``pdf_emitter_direction``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from tracer import lanes, sampling
from tracer.emitters import area, distant, envmap, point, projector
from tracer.kinds import EmitterKind
from tracer.pytree import pytree_dataclass

if TYPE_CHECKING:
    from tracer.emitters.table import Emitters
    from tracer.textures import Textures

__all__ = ["DirectionSample", "sample_direction", "pdf_direction", "eval_surface", "eval_environment"]


@pytree_dataclass
class DirectionSample:
    """A point on an emitter as seen from reference points (Mitsuba's ``DirectionSample3f``)."""

    p: jnp.ndarray         # (3, N) point on the emitter; for lights at infinity a point beyond the scene
    n: jnp.ndarray         # (3, N) oriented normal there (area: its emitting side; lights at infinity: -d)
    d: jnp.ndarray         # (3, N) unit direction from the reference point towards the emitter
    dist: jnp.ndarray      # (N,) distance to p; inf for directional and environment lights
    pdf: jnp.ndarray       # (N,) solid-angle pdf times selection probability; delta lights: the probability
    is_delta: jnp.ndarray  # (N,) bool: point, spot, directional or projector (no MIS against the BSDF)
    emitter: jnp.ndarray   # (N,) int32 the emitter sampled


def _sample_kind(kind, emitters, textures, e, ref, u):
    if kind == EmitterKind.AREA:
        return area.sample(emitters, textures, e, ref, u)
    if kind == EmitterKind.POINT:
        return point.sample_point(emitters, textures, e, ref, u)
    if kind == EmitterKind.SPOT:
        return point.sample_spot(emitters, textures, e, ref, u)
    if kind == EmitterKind.DIRECTIONAL:
        return distant.sample_directional(emitters, textures, e, ref, u)
    if kind == EmitterKind.CONSTANT:
        return distant.sample_constant(emitters, textures, e, ref, u)
    if kind == EmitterKind.PROJECTOR:
        return projector.sample(emitters, textures, e, ref, u)
    return envmap.sample(emitters, ref, u, distant.far_distance(emitters, ref))


def sample_direction(emitters: Emitters, textures: Textures, ref_p: jnp.ndarray, u_select: jnp.ndarray, u: jnp.ndarray,
                     reuse: bool = False) -> tuple[DirectionSample, jnp.ndarray]:
    """Choose an emitter with u_select (N,) and sample it from ref_p (3, N) with u (2, N).

    With ``reuse`` (static), the point's first coordinate is u_select rescaled inside the chosen
    emitter's share, as Mitsuba's ``sample_emitter`` reuses it, and u[0] is not read: a
    low-discrepancy sampler's points then stay stratified per emitter.

    Returns (DirectionSample, weight (3, N)): weight = emitted radiance / pdf (for delta lights
    the irradiance they deliver at ref_p, over the selection probability); visibility is not
    included. Weight and pdf are both zero for an invalid sample (the back of an area light, a
    zero-density envmap direction, an emitter of zero selection probability); a point outside a
    spot light's cone keeps pdf = selection probability, with zero weight, as Mitsuba.
    """
    e, u_reused = sampling.sample_discrete(emitters.select_cdf, u_select)
    if reuse:
        u = jnp.stack([u_reused, u[1]])
    e = e.astype(jnp.int32)
    kinds = emitters.kinds_present
    out = _sample_kind(kinds[0], emitters, textures, e, ref_p, u)
    kind = lanes.take(emitters.kind, e)
    for k in kinds[1:]:
        other = _sample_kind(k, emitters, textures, e, ref_p, u)
        out = jax.tree.map(lambda a, b: jnp.where(kind == k, b, a), out, other)
    p, n, d, dist, pdf, weight = out
    pmf = lanes.take(emitters.select_pmf, e)
    valid = (pdf > 0) & (pmf > 0)
    weight = jnp.where(valid, weight / jnp.where(valid, pmf, 1.0), 0.0)
    is_delta = jnp.zeros_like(valid)
    for k in EmitterKind.DELTA:
        if k in kinds:
            is_delta = is_delta | (kind == k)
    ds = DirectionSample(p=p, n=n, d=d, dist=dist, pdf=jnp.where(valid, pdf * pmf, 0.0),
                         is_delta=is_delta, emitter=e)
    return ds, weight


def pdf_direction(emitters: Emitters, ref_p: jnp.ndarray, emitter: jnp.ndarray, p: jnp.ndarray, n: jnp.ndarray,
                  d: jnp.ndarray) -> jnp.ndarray:
    """Pdf (N,) with which ``sample_direction`` from ref_p produces direction d towards emitter.

    For MIS of a BSDF-sampled ray (unit direction d) from ref_p that hit area emitter
    ``emitter`` (N,) at p with oriented normal n (the shape's normal with ``flip_normals``
    applied; zero on the back side), or escaped to the environment (``emitter`` =
    ``emitters.environment``; p and n are then ignored). Delta lights and negative ids give 0.
    Mitsuba takes n from the hit's shading frame (``si.sh_frame.n``), here and in the side test
    of ``eval_surface``: pass the (flipped) shading normal to match it on smooth meshes.
    """
    valid = (emitter >= 0) & (emitter < emitters.kind.shape[0])
    e = jnp.clip(emitter, 0, emitters.kind.shape[0] - 1)
    kind = lanes.take(emitters.kind, e)
    kinds = emitters.kinds_present
    value = jnp.zeros(e.shape, jnp.float32)
    if EmitterKind.AREA in kinds:
        value = jnp.where(kind == EmitterKind.AREA, area.pdf(emitters, e, ref_p, p, n, d), value)
    if EmitterKind.CONSTANT in kinds:
        value = jnp.where(kind == EmitterKind.CONSTANT, sampling.square_to_uniform_sphere_pdf(d), value)
    if EmitterKind.ENVMAP in kinds:
        value = jnp.where(kind == EmitterKind.ENVMAP, envmap.pdf(emitters, d), value)
    return jnp.where(valid, value * lanes.take(emitters.select_pmf, e), 0.0)


def eval_surface(emitters: Emitters, textures: Textures, emitter: jnp.ndarray, n: jnp.ndarray, d: jnp.ndarray,
                 uv: jnp.ndarray) -> jnp.ndarray:
    """Radiance (3, N) an area emitter sends back along a ray of direction d (3, N) that hit it
    at a point with oriented normal n (3, N): its radiance if dot(n, d) < 0, else zero.

    ``emitter`` (N,) is the hit shape's emitter id; ids of other kinds or negative give zero.
    A textured radiance is read at the hit's surface ``uv`` (2, N) in ``textures``.
    """
    if EmitterKind.AREA not in emitters.kinds_present:
        return jnp.zeros(d.shape, jnp.float32)
    e = jnp.clip(emitter, 0, emitters.kind.shape[0] - 1)
    is_area = (emitter >= 0) & (lanes.take(emitters.kind, e) == EmitterKind.AREA)
    return jnp.where(is_area, area.eval_radiance(emitters, textures, e, n, d, uv), 0.0)


def eval_environment(emitters: Emitters, textures: Textures, d: jnp.ndarray) -> jnp.ndarray:
    """Radiance (3, N) from the environment seen by rays escaping in unit world direction d."""
    env = emitters.environment
    if env < 0:
        return jnp.zeros(d.shape, jnp.float32)
    if EmitterKind.ENVMAP in emitters.kinds_present:
        return envmap.eval_radiance(emitters, d)
    return jnp.broadcast_to(emitters.radiance[:, env][:, None], d.shape)
