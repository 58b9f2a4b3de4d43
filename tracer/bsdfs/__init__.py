"""BSDFs of Mitsuba 3, evaluated and sampled for batches of rays with per-ray materials.

The integrator's contract is three pure functions of the material table, the texture table and
per-ray data (material ids (N,), uv (2, N), local directions (3, N) with z the shading normal and
x the tangent along dp/du, and -- for bump maps -- the surface's ``perturb.Tangents``):

* ``sample(...) -> (BsdfSample, weight)``: Mitsuba's ``BSDF::sample``; weight = f cos / pdf.
* ``eval_pdf(...) -> (value, pdf)``: f(wi, wo) |cos theta_o| and the density of ``sample``.
* ``eval_and_sample(...)``: both for the same lanes, as a path vertex wants them (its light
  sample's evaluation, its next direction), with the bits of the two calls.
* ``has_nondelta_lobe(...)``: whether next-event estimation applies (a non-delta lobe exists).
* ``null_transmission(...)``: what passes straight through (Mitsuba's ``eval_null_transmission``:
  ``null``, a ``thindielectric``'s transmission, a ``mask``'s or blend's share of those), which a
  volumetric path's light samples see through.

On CPUs each kind group's code runs on the lanes of that group only (``_kind_groups``: the lanes
sorted by group, ``tracer.lanes.by_kind``); within a group, and on GPUs and TPUs, each kind
present is evaluated for every lane and the results selected by kind (a ``lax.switch`` on batched
indices would run every branch as well). Absent kinds are never traced. Textures are evaluated
once per call and group (``eval_and_sample``: once for a vertex's evaluation and sample), and the
rough kinds (one group) share one microfacet normal sample and one evaluation of D and G. The
principled kinds draw their own (Burley's parameters map to a GGX roughness per lobe); lobes no
principled material has are not traced.
A leaf under a ``normalmap`` or ``bumpmap`` sees its directions in a perturbed frame
(``tracer.bsdfs.perturb``); tables without one never trace it.

Failed samples: a sample of zero weight ends its path, but a blend above it still evaluates its
siblings at the sample's direction and counts its pdf in the mixture (Mitsuba's ``blendbsdf``),
and under a bump map the siblings see another frame. So a failed sample's direction and pdf are
Mitsuba's, kind by kind: wi below the surface leaves diffuse's cosine sample and pdf, the smooth
conductor's mirror direction and pdf 1, the rough conductor's reflection about the normal drawn
from wi as it is, with its pdf (kept too where wo falls below), and the plastics' all zeros.
"""
import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp

from tracer import textures as tx
from tracer import lanes
from tracer import vecmath as vm
from tracer.bsdfs import (conductor, dielectric, diffuse, disney, fresnel, layers, microfacet, perturb, plastic,
                          pplastic, principled, principledthin)
from tracer.bsdfs.table import Materials
from tracer.kinds import BsdfKind, Microfacet
from tracer.pytree import pytree_dataclass

__all__ = ["BsdfSample", "Materials", "sample", "eval_pdf", "eval_and_sample", "has_nondelta_lobe"]


@pytree_dataclass
class BsdfSample:
    """A sampled direction (N rays)."""

    wo: jnp.ndarray        # (3, N) local outgoing direction
    pdf: jnp.ndarray       # (N,) solid-angle density; for a delta lobe, its selection probability
    eta: jnp.ndarray       # (N,) relative IOR crossed (1 unless refracted)
    is_delta: jnp.ndarray  # (N,) bool: drawn from a delta lobe
    null: jnp.ndarray      # (N,) bool: drawn from a null lobe (straight on: null, thindielectric's transmission)


class _Params:
    """The per-ray parameters of a batch: texture values and table entries, gathered once."""

    def __init__(self, materials: Materials, textures: tx.Textures, mat: jnp.ndarray,
                 uv: jnp.ndarray | tx.TexturePoint) -> None:
        present = set(materials.kinds_present)
        self.kinds = present
        self.kind = lanes.take(materials.kind, mat)
        self.mat = mat
        rgb = lambda field: tx.eval_rgb(textures, lanes.take(getattr(materials, field), mat), uv,
                                        constant=not materials.is_textured(field))
        value = lambda field: tx.eval_float(textures, lanes.take(getattr(materials, field), mat), uv,
                                            constant=not materials.is_textured(field))
        reads = lambda field: bool(present & set(BsdfKind.TEXTURE_READERS[field]))
        if reads("reflectance"):
            self.reflectance = rgb("reflectance")
        if reads("specular_reflectance"):
            self.specular = rgb("specular_reflectance")
        if reads("specular_transmittance"):
            self.transmittance = rgb("specular_transmittance")
        if present & {BsdfKind.CONDUCTOR, BsdfKind.ROUGHCONDUCTOR}:
            self.eta3, self.k3 = lanes.take(materials.eta, mat), lanes.take(materials.k, mat)
        if present & set(BsdfKind.WITH_ETA):
            self.eta = lanes.take(materials.eta[0], mat)
        if present & set(BsdfKind.PLASTICS):
            self.coating = plastic.Coating(self.reflectance, self.specular, self.eta,
                                           lanes.take(materials.specular_weight, mat),
                                           lanes.take(materials.internal_reflectance, mat), lanes.take(materials.nonlinear, mat))
        if BsdfKind.PPLASTIC in present:
            self.pplastic = pplastic.Params(self.reflectance, self.specular, self.eta, lanes.take(materials.specular_weight, mat))
        if reads("alpha_u"):
            self.distr = microfacet.make(
                value("alpha_u"), value("alpha_v"),
                lanes.take(materials.distribution, mat) == Microfacet.GGX, lanes.take(materials.sample_visible, mat),
                present=materials.distributions_present, all_normals=materials.all_normals)
        if present & set(BsdfKind.PRINCIPLEDS):
            self.disney = disney.gather(materials, textures, mat, uv, self.reflectance)

    def has(self, kind: int) -> bool:
        return kind in self.kinds


class _Select:
    """Accumulates per-kind results: each ray keeps the one of its own kind."""

    def __init__(self, kind: jnp.ndarray, fields: dict[str, jnp.ndarray]) -> None:
        self.kind, self.fields = kind, dict(fields)

    def put(self, kind: int, **values: jnp.ndarray | bool) -> None:
        mine = self.kind == kind
        for name, value in values.items():
            self.fields[name] = jnp.where(mine, value, self.fields[name])


# Kinds whose leaf code is a constant (a composite's root is never a leaf: its leaves are sampled):
# they run with another group rather than in windows of their own.
_CONSTANT_KINDS = (BsdfKind.BLACK, BsdfKind.NULL, BsdfKind.POLARIZER, BsdfKind.COMPOSITE)


def _kind_groups(materials: Materials) -> tuple[tuple[int, ...], ...]:
    """The kinds present, grouped as their code runs apart on CPUs (coherent shading:
    ``lanes.by_kind``, each group on its own lanes): each kind alone, but the rough kinds together
    (they share one microfacet sample and one evaluation of D and G) and the constant ones with
    the first group. One group (every kind on every lane, selected) where fewer than two kinds
    have code, and on GPUs and TPUs, whose pool is the whole batch: a window loop there is untried.

    Measured (2-core AVX2 host, ``tracer.render`` at 128x128, 32 spp, second render; every kind
    on every lane -> grouped, two runs each): examples/materials.xml 0.72 -> 0.53 s, mesh.xml 0.59
    -> 0.51 s, orbit.xml 0.47 -> 0.41 s; compiling costs more: 14.5 -> 18 s, 11.1 -> 13.0 s, 11.5
    -> 13.0 s. A window a kind (the rough kinds apart too) ran 15% slower on materials.xml and
    compiled 4.5 s longer; all smooth kinds in one group, as long to compile and 2-5% slower;
    textures.xml (diffuse and black, when black had a group) 3% slower, hence the constant kinds'
    place.
    """
    present = tuple(materials.kinds_present)
    coded = [k for k in present if k not in _CONSTANT_KINDS]
    if len(coded) < 2 or jax.default_backend() != "cpu":
        return (present,)
    rough = [k for k in coded if k in BsdfKind.ROUGH]
    groups = [[k] for k in coded if k not in BsdfKind.ROUGH] + ([rough] if rough else [])
    groups[0] += [k for k in present if k in _CONSTANT_KINDS]
    return tuple(tuple(sorted(g)) for g in groups)


def _by_kind_group(materials: Materials, groups: tuple[tuple[int, ...], ...], code, mat: jnp.ndarray,
                   inputs: tuple) -> Any:
    """``code(materials, *inputs)`` (``inputs``: per-lane arrays) of each lane's kind group, run on
    that group's lanes only, ``materials`` telling the code that only the group's kinds occur."""
    kind = lanes.take(materials.kind, mat)
    # Each lane's group by comparisons (a kind in no group: the first), not a gather from a table.
    slot = jnp.zeros_like(kind)
    for j, group in enumerate(groups[1:], 1):
        slot = jnp.where(_is_one_of(kind, group), j, slot)
    return lanes.by_kind(slot, len(groups),
                         lambda j, x: code(dataclasses.replace(materials, kinds_present=groups[j]), *x), inputs)


def _is_one_of(kind: jnp.ndarray, kinds: Iterable[int]) -> jnp.ndarray:
    """(N,) bool: ``kind`` is one of ``kinds`` (static)."""
    return functools.reduce(jnp.logical_or, (kind == k for k in kinds), jnp.zeros(kind.shape, bool))


def sample(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
           wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray,
           tangents: perturb.Tangents | None = None) -> tuple[BsdfSample, jnp.ndarray]:
    """Sample Mitsuba's BSDFs: u1 (N,) picks the lobe, u2 (2, N) the direction.

    Returns (BsdfSample, weight (3, N)) with weight = f(wi, wo) |cos theta_o| / pdf (for a delta
    lobe, its weight); zero weight marks a failed sample. A composite material samples one of
    its leaves and reports the mixture at the sampled direction (tracer.bsdfs.layers).
    ``tangents``: the hits' ``perturb.Tangents``, read by bump-mapped materials only.
    """
    if materials.layers is None:
        return _sample_leaf(materials, textures, mat, uv, wi, u1, u2, tangents)
    weight = layers.weights(materials.layers, textures, mat, uv)
    chosen, u1 = layers.choose(weight, u1)
    slot_leaf = jnp.maximum(materials.layers.leaf[:, mat], 0)
    leaf = jnp.sum(jnp.where(chosen, slot_leaf, 0), axis=0)
    bs, bsdf_weight = _sample_leaf(materials, textures, leaf, uv, wi, u1, u2, tangents)
    value, pdf = jnp.zeros_like(wi), jnp.zeros_like(wi[0])
    for slot in range(weight.shape[0]):
        slot_value, slot_pdf = _eval_pdf_leaf(materials, textures, slot_leaf[slot], uv, wi, bs.wo, tangents)
        own = chosen[slot]
        value = value + weight[slot] * vm.select(own, bsdf_weight * bs.pdf, slot_value)
        pdf = pdf + weight[slot] * jnp.where(own, bs.pdf, slot_pdf)
    mixture = vm.select(pdf > 0, value / jnp.where(pdf > 0, pdf, 1.0), 0.0)
    return dataclasses.replace(bs, pdf=pdf), mixture


def _sample_leaf(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
                 wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray,
                 tangents: perturb.Tangents | None) -> tuple[BsdfSample, jnp.ndarray]:
    if materials.perturbation is None:
        return _sample_kinds(materials, textures, mat, uv, wi, u1, u2)
    pf = perturb.frame(materials.perturbation, textures, mat, uv, wi, tangents)
    bs, weight = _sample_kinds(materials, textures, mat, uv, vm.to_local(pf.axes, wi), u1, u2)
    wo, weight, pdf = perturb.sampled(pf, bs.wo, weight, bs.pdf)
    return dataclasses.replace(bs, wo=wo, pdf=pdf), weight


def _sample_kinds(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
                  wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray) -> tuple[BsdfSample, jnp.ndarray]:
    groups = _kind_groups(materials)
    if len(groups) > 1:
        return _by_kind_group(materials, groups, lambda m, *x: _sample_kinds(m, textures, *x), mat,
                              (mat, uv, wi, u1, u2))
    return _sample_params(materials, _Params(materials, textures, mat, uv), wi, u1, u2)


def _sample_params(materials: Materials, params: _Params, wi: jnp.ndarray, u1: jnp.ndarray,
                   u2: jnp.ndarray) -> tuple[BsdfSample, jnp.ndarray]:
    zero = jnp.zeros_like(wi[0])  # *_like: varying over shard_map's ray axis as wi is
    out = _Select(params.kind, dict(wo=vm.reflect(wi), pdf=zero, eta=zero + 1.0, delta=jnp.zeros_like(wi[0], bool),
                                    null=jnp.zeros_like(wi[0], bool), weight=jnp.zeros_like(wi)))
    if params.has(BsdfKind.DIFFUSE):
        wo, pdf, weight = diffuse.sample(wi, u2, params.reflectance)
        out.put(BsdfKind.DIFFUSE, wo=wo, pdf=pdf, weight=weight)
    if params.has(BsdfKind.CONDUCTOR):
        wo, pdf, weight = conductor.smooth_sample(wi, params.eta3, params.k3, params.specular)
        out.put(BsdfKind.CONDUCTOR, wo=wo, pdf=pdf, weight=weight, delta=True)
    if params.has(BsdfKind.DIELECTRIC):
        wo, pdf, weight, eta, _ = dielectric.smooth_sample(wi, u1, params.eta, params.specular, params.transmittance)
        out.put(BsdfKind.DIELECTRIC, wo=wo, pdf=pdf, weight=weight, eta=eta, delta=True)
    if params.has(BsdfKind.THINDIELECTRIC):
        wo, pdf, weight = dielectric.thin_sample(wi, u1, params.eta, params.specular, params.transmittance)
        out.put(BsdfKind.THINDIELECTRIC, wo=wo, pdf=pdf, weight=weight, delta=True, null=wo[2] * wi[2] < 0)
    if params.has(BsdfKind.PLASTIC):
        wo, pdf, weight, specular = plastic.smooth_sample(wi, u1, u2, params.coating)
        out.put(BsdfKind.PLASTIC, wo=wo, pdf=pdf, weight=weight, delta=specular)
    if params.has(BsdfKind.NULL):  # Mitsuba's null: the ray goes on (its BSDFFlags::Delta includes Null)
        out.put(BsdfKind.NULL, wo=-wi, pdf=zero + 1.0, weight=jnp.ones_like(wi), delta=True, null=True)
    if params.has(BsdfKind.POLARIZER):  # Mitsuba's polarizer in RGB: a null BSDF passing half the light
        out.put(BsdfKind.POLARIZER, wo=-wi, pdf=zero + 1.0, weight=0.5 * params.transmittance, delta=True, null=True)
    if params.kinds & set(BsdfKind.ROUGH):
        _sample_rough(materials, params, wi, u1, u2, out)
    if params.has(BsdfKind.PRINCIPLED):
        wo, pdf, weight, eta = principled.sample(wi, u1, u2, params.disney)
        out.put(BsdfKind.PRINCIPLED, wo=wo, pdf=pdf, weight=weight, eta=eta)
    if params.has(BsdfKind.PRINCIPLEDTHIN):
        wo, pdf, weight = principledthin.sample(wi, u1, u2, params.disney)
        out.put(BsdfKind.PRINCIPLEDTHIN, wo=wo, pdf=pdf, weight=weight)
    f = out.fields
    # Failed samples of degenerate inputs (grazing wi) may carry non-finite directions: give them a
    # harmless one, as the integrator still spawns a (dead) ray along it.
    bad = ~jnp.all(jnp.isfinite(f["wo"]), axis=0)
    wo = vm.select(bad, vm.reflect(wi), f["wo"])
    weight = vm.select(bad, 0.0, f["weight"])
    return BsdfSample(wo=wo, pdf=jnp.where(bad, 0.0, f["pdf"]), eta=f["eta"], is_delta=f["delta"], null=f["null"]), weight


def _sample_rough(materials: Materials, params: _Params, wi: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray,
                  out: _Select) -> None:
    """One microfacet normal per ray serves every rough kind: the visible normals seen from wi, turned
    to the upper hemisphere for rough dielectrics only, as Mitsuba's do. (For the others wi below
    fails the sample; its direction still matters where a blend evaluates a sibling there, which
    sees another frame under a bump map.)"""
    distr = sample_distr = params.distr
    if params.has(BsdfKind.ROUGHDIELECTRIC) and distr.all_normals:
        # Walter et al.'s widened roughness, for the rough dielectrics that sample all normals.
        widened = dielectric.sampling_distribution(distr, wi)
        mine = params.kind == BsdfKind.ROUGHDIELECTRIC
        sample_distr = dataclasses.replace(distr, alpha_u=jnp.where(mine, widened.alpha_u, distr.alpha_u),
                                           alpha_v=jnp.where(mine, widened.alpha_v, distr.alpha_v))
    wi_m = wi
    if params.has(BsdfKind.ROUGHDIELECTRIC):
        wi_m = vm.select(params.kind == BsdfKind.ROUGHDIELECTRIC, vm.upper_hemisphere(wi), wi)
    m, pdf_m = microfacet.sample(sample_distr, wi_m, u2)
    if params.has(BsdfKind.ROUGHCONDUCTOR):
        wo, pdf, weight = conductor.rough_sample(wi, m, pdf_m, params.eta3, params.k3, params.specular, distr)
        out.put(BsdfKind.ROUGHCONDUCTOR, wo=wo, pdf=pdf, weight=weight)
    if params.has(BsdfKind.ROUGHDIELECTRIC):
        wo, pdf, weight, eta, _ = dielectric.rough_sample(wi, u1, m, pdf_m, params.eta, params.specular,
                                                          params.transmittance, distr)
        out.put(BsdfKind.ROUGHDIELECTRIC, wo=wo, pdf=pdf, weight=weight, eta=eta)
    if params.has(BsdfKind.ROUGHPLASTIC):
        terms_fn = lambda wo: microfacet.terms(distr, wi, wo, vm.normalize(wi + wo))
        wo, pdf, weight = plastic.rough_sample(wi, u1, u2, m, terms_fn, params.coating, materials.transmittance,
                                               params.mat, distr)
        out.put(BsdfKind.ROUGHPLASTIC, wo=wo, pdf=pdf, weight=weight)
    if params.has(BsdfKind.PPLASTIC):
        terms_fn = lambda wo: microfacet.terms(distr, wi, wo, vm.normalize(wi + wo))
        wo, pdf, weight = pplastic.sample(wi, u1, u2, m, terms_fn, params.pplastic, distr)
        out.put(BsdfKind.PPLASTIC, wo=wo, pdf=pdf, weight=weight)


def eval_pdf(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
             wi: jnp.ndarray, wo: jnp.ndarray,
             tangents: perturb.Tangents | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(f(wi, wo) |cos theta_o| (3, N), pdf (N,)) of the non-delta lobes; zero for delta-only kinds.
    A composite material's are its leaves' weighted sums. ``tangents``: as for ``sample``."""
    if materials.layers is None:
        return _eval_pdf_leaf(materials, textures, mat, uv, wi, wo, tangents)
    weight = layers.weights(materials.layers, textures, mat, uv)
    value, pdf = jnp.zeros_like(wi), jnp.zeros_like(wi[0])
    for slot in range(weight.shape[0]):
        leaf = jnp.maximum(materials.layers.leaf[slot, mat], 0)
        slot_value, slot_pdf = _eval_pdf_leaf(materials, textures, leaf, uv, wi, wo, tangents)
        value, pdf = value + weight[slot] * slot_value, pdf + weight[slot] * slot_pdf
    return value, pdf


def _eval_pdf_leaf(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
                   wi: jnp.ndarray, wo: jnp.ndarray,
                   tangents: perturb.Tangents | None) -> tuple[jnp.ndarray, jnp.ndarray]:
    if materials.perturbation is None:
        return _eval_pdf_kinds(materials, textures, mat, uv, wi, wo)
    pf = perturb.frame(materials.perturbation, textures, mat, uv, wi, tangents)
    wo_p = vm.to_local(pf.axes, wo)
    value, pdf = _eval_pdf_kinds(materials, textures, mat, uv, vm.to_local(pf.axes, wi), wo_p)
    return perturb.evaluated(pf, wo, wo_p, value, pdf)


def _eval_pdf_kinds(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
                    wi: jnp.ndarray, wo: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    groups = _kind_groups(materials)
    if len(groups) > 1:
        return _by_kind_group(materials, groups, lambda m, *x: _eval_pdf_kinds(m, textures, *x), mat,
                              (mat, uv, wi, wo))
    return _eval_pdf_params(materials, _Params(materials, textures, mat, uv), wi, wo)


def _eval_pdf_params(materials: Materials, params: _Params, wi: jnp.ndarray,
                     wo: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    out = _Select(params.kind, dict(value=jnp.zeros_like(wi), pdf=jnp.zeros_like(wi[0])))
    if params.has(BsdfKind.DIFFUSE):
        value, pdf = diffuse.eval_pdf(wi, wo, params.reflectance)
        out.put(BsdfKind.DIFFUSE, value=value, pdf=pdf)
    if params.has(BsdfKind.PLASTIC):
        value, pdf = plastic.smooth_eval_pdf(wi, wo, params.coating)
        out.put(BsdfKind.PLASTIC, value=value, pdf=pdf)
    if params.kinds & set(BsdfKind.ROUGH):
        distr = params.distr
        if params.has(BsdfKind.ROUGHDIELECTRIC):
            # The refraction half vector for rough dielectrics, the reflection one for all others.
            m = dielectric.half_vector(wi, wo, jnp.where(params.kind == BsdfKind.ROUGHDIELECTRIC, params.eta, 1.0))
        else:
            m = vm.normalize(wi + wo)
        terms = microfacet.terms(distr, wi, wo, m)
        if params.has(BsdfKind.ROUGHCONDUCTOR):
            value, pdf = conductor.rough_eval_pdf(wi, wo, terms, params.eta3, params.k3, params.specular, distr)
            out.put(BsdfKind.ROUGHCONDUCTOR, value=value, pdf=pdf)
        if params.has(BsdfKind.ROUGHDIELECTRIC):
            value, pdf = dielectric.rough_eval_pdf(wi, wo, terms, params.eta, params.specular, params.transmittance, distr)
            out.put(BsdfKind.ROUGHDIELECTRIC, value=value, pdf=pdf)
        if params.has(BsdfKind.ROUGHPLASTIC):
            value, pdf = plastic.rough_eval_pdf(wi, wo, terms, params.coating, materials.transmittance, params.mat, distr)
            out.put(BsdfKind.ROUGHPLASTIC, value=value, pdf=pdf)
        if params.has(BsdfKind.PPLASTIC):
            value, pdf = pplastic.eval_pdf(wi, wo, terms, params.pplastic, distr)
            out.put(BsdfKind.PPLASTIC, value=value, pdf=pdf)
    if params.has(BsdfKind.PRINCIPLED):
        value, pdf = principled.eval_pdf(wi, wo, params.disney)
        out.put(BsdfKind.PRINCIPLED, value=value, pdf=pdf)
    if params.has(BsdfKind.PRINCIPLEDTHIN):
        value, pdf = principledthin.eval_pdf(wi, wo, params.disney)
        out.put(BsdfKind.PRINCIPLEDTHIN, value=value, pdf=pdf)
    return out.fields["value"], out.fields["pdf"]


def eval_and_sample(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
                    wi: jnp.ndarray, wo: jnp.ndarray, u1: jnp.ndarray, u2: jnp.ndarray,
                    tangents: perturb.Tangents | None = None
                    ) -> tuple[tuple[jnp.ndarray, jnp.ndarray], tuple[BsdfSample, jnp.ndarray]]:
    """``(eval_pdf(..., wi, wo), sample(..., wi, u1, u2))`` of the same lanes in one pass: a light
    sample's evaluation and the next direction's sample, as a path's vertex wants both. Each lane's
    arithmetic is that of the two calls; on CPUs the lanes are sorted by kind group once, not twice,
    and a group's textures and table entries are read once for both (``_kind_groups``)."""
    if materials.layers is not None:  # a blend samples a leaf, then evaluates its siblings there
        return (eval_pdf(materials, textures, mat, uv, wi, wo, tangents),
                sample(materials, textures, mat, uv, wi, u1, u2, tangents))
    if materials.perturbation is None:
        return _eval_and_sample_kinds(materials, textures, mat, uv, wi, wo, u1, u2)
    pf = perturb.frame(materials.perturbation, textures, mat, uv, wi, tangents)
    wo_p = vm.to_local(pf.axes, wo)
    (value, pdf), (bs, weight) = _eval_and_sample_kinds(materials, textures, mat, uv, vm.to_local(pf.axes, wi), wo_p,
                                                        u1, u2)
    sampled_wo, weight, sampled_pdf = perturb.sampled(pf, bs.wo, weight, bs.pdf)
    return perturb.evaluated(pf, wo, wo_p, value, pdf), (dataclasses.replace(bs, wo=sampled_wo, pdf=sampled_pdf), weight)


def _eval_and_sample_kinds(materials: Materials, textures: tx.Textures, mat: jnp.ndarray,
                           uv: jnp.ndarray | tx.TexturePoint, wi: jnp.ndarray, wo: jnp.ndarray, u1: jnp.ndarray,
                           u2: jnp.ndarray) -> tuple[tuple[jnp.ndarray, jnp.ndarray], tuple[BsdfSample, jnp.ndarray]]:
    groups = _kind_groups(materials)
    if len(groups) > 1:
        return _by_kind_group(materials, groups, lambda m, *x: _eval_and_sample_kinds(m, textures, *x), mat,
                              (mat, uv, wi, wo, u1, u2))
    params = _Params(materials, textures, mat, uv)
    return _eval_pdf_params(materials, params, wi, wo), _sample_params(materials, params, wi, u1, u2)


def null_transmission(materials: Materials, textures: tx.Textures, mat: jnp.ndarray, uv: jnp.ndarray | tx.TexturePoint,
                      cos_wi: jnp.ndarray) -> jnp.ndarray:
    """(3, N) the fraction of light that goes straight through the materials ``mat`` (N,) arriving
    at |cos theta| = ``cos_wi`` (Mitsuba's ``eval_null_transmission``): 1 for ``null``, a
    ``thindielectric``'s 1 - R' times its transmittance, a composite's slots weighted, else 0."""
    if materials.layers is None:
        return _null_leaf(materials, textures, mat, uv, cos_wi)
    weight = layers.weights(materials.layers, textures, mat, uv)
    slot_leaf = jnp.maximum(materials.layers.leaf[:, mat], 0)
    total = jnp.zeros((3, *cos_wi.shape), jnp.float32)
    for slot in range(weight.shape[0]):
        total = total + weight[slot] * _null_leaf(materials, textures, slot_leaf[slot], uv, cos_wi)
    return total


def _null_leaf(materials, textures, mat, uv, cos_wi):
    kind = materials.kind[mat]
    out = jnp.broadcast_to(jnp.where(kind == BsdfKind.NULL, 1.0, 0.0), (3, *cos_wi.shape))
    if BsdfKind.THINDIELECTRIC in materials.kinds_present:
        r = fresnel.dielectric(jnp.abs(cos_wi), materials.eta[0, mat])[0]
        r = r * 2.0 / (1.0 + r)
        spec_t = tx.eval_rgb(textures, materials.specular_transmittance[mat], uv,
                             constant=not materials.is_textured("specular_transmittance"))
        out = jnp.where(kind == BsdfKind.THINDIELECTRIC, (1.0 - r) * spec_t, out)
    return out


def has_nondelta_lobe(materials: Materials, mat: jnp.ndarray) -> jnp.ndarray:
    """(N,) bool: the material has a non-delta lobe, so that next-event estimation applies."""
    if materials.layers is not None:
        return materials.layers.nondelta[mat]
    return _is_one_of(lanes.take(materials.kind, mat), BsdfKind.WITH_NONDELTA_LOBE)
