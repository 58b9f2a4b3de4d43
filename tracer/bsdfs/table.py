"""The material table: every BSDF of a scene as one pytree of per-material arrays.

Materials are addressed by an integer id; each has a ``kind`` tag and the parameters of that
kind (unused ones hold neutral values). Textured parameters are ids into the scene's
``tracer.textures.Textures``. Static fields say which kinds and microfacet variants occur, so
that code for absent ones is never traced.
"""
import jax.numpy as jnp

from tracer.bsdfs.layers import Layers
from tracer.bsdfs.perturb import Perturbations
from tracer.kinds import BsdfKind
from tracer.pytree import pytree_dataclass, static

__all__ = ["TRANSMITTANCE_RES", "PRINCIPLED_FEATURES", "PRINCIPLED_TEXTURES", "TEXTURE_READS", "Rate", "Principled",
           "Materials"]

TRANSMITTANCE_RES = 64  # Mitsuba's MI_ROUGH_TRANSMITTANCE_RES
# The optional parameters of Mitsuba's principled BSDFs, each with its ``m_has_*`` flag: a lobe or
# term that no material of the table has is never traced.
PRINCIPLED_FEATURES = ("anisotropic", "metallic", "spec_trans", "spec_tint", "sheen", "sheen_tint", "flatness",
                       "clearcoat", "diff_trans")
# ``Principled``'s texture-id fields (float textures: Mitsuba's ``eval_1``).
PRINCIPLED_TEXTURES = ("roughness", "anisotropic", "metallic", "spec_trans", "spec_tint", "sheen", "sheen_tint",
                       "flatness", "clearcoat", "clearcoat_gloss", "diff_trans", "eta")

# Every (texture-id field of ``Materials``, kind that reads it) pair.
TEXTURE_READS = tuple((field, kind) for field, kinds in BsdfKind.TEXTURE_READERS.items() for kind in kinds)


class Rate:
    """Rows of ``Principled.rates``: the sampling rates of the lobes (Mitsuba's ``*_sampling_rate``).
    principled: main specular, clearcoat, diffuse reflectance; principledthin: specular reflectance,
    specular transmittance, diffuse reflectance, diffuse transmittance."""

    SPECULAR, CLEARCOAT, DIFFUSE = 0, 1, 2                       # principled
    SPEC_REFLECT, SPEC_TRANS, DIFF_REFLECT, DIFF_TRANS = range(4)  # principledthin
    COUNT = 4


@pytree_dataclass
class Principled:
    """The parameters of the principled and principledthin materials among M (neutral elsewhere).

    Their ``base_color`` is the ``reflectance`` column and principled's ``eta`` (a float) the ``eta``
    column of ``Materials``; the fields here are float texture ids, but for the rates and flags.
    """

    roughness: jnp.ndarray        # (M,) int32 float texture
    anisotropic: jnp.ndarray      # (M,) int32
    metallic: jnp.ndarray         # (M,) int32 (principled)
    spec_trans: jnp.ndarray       # (M,) int32
    spec_tint: jnp.ndarray        # (M,) int32
    sheen: jnp.ndarray            # (M,) int32
    sheen_tint: jnp.ndarray       # (M,) int32
    flatness: jnp.ndarray         # (M,) int32
    clearcoat: jnp.ndarray        # (M,) int32 (principled)
    clearcoat_gloss: jnp.ndarray  # (M,) int32 (principled)
    diff_trans: jnp.ndarray       # (M,) int32 (principledthin; Mitsuba's range 0-2)
    eta: jnp.ndarray              # (M,) int32 (principledthin: the sheet's IOR, a texture)
    rates: jnp.ndarray            # (Rate.COUNT, M) float32 lobe sampling rates
    has_spec_trans: jnp.ndarray   # (M,) bool principled's m_has_spec_trans (its pdf from inside depends on it)
    features: tuple[str, ...] = static(default=())  # the PRINCIPLED_FEATURES whose flag some material sets
    textured: tuple[str, ...] = static(default=PRINCIPLED_TEXTURES)  # fields with a non-constant texture somewhere


@pytree_dataclass
class Materials:
    """M materials, components first."""

    kind: jnp.ndarray                    # (M,) int32 a BsdfKind
    reflectance: jnp.ndarray             # (M,) int32 texture: diffuse reflectance (diffuse, plastics)
    specular_reflectance: jnp.ndarray    # (M,) int32 texture
    specular_transmittance: jnp.ndarray  # (M,) int32 texture
    alpha_u: jnp.ndarray                 # (M,) int32 float texture: roughness along the tangent
    alpha_v: jnp.ndarray                 # (M,) int32 float texture: roughness along the bitangent
    eta: jnp.ndarray                     # (3, M) conductors: real IOR; dielectrics, plastics: int / ext
    k: jnp.ndarray                       # (3, M) conductors: imaginary IOR
    distribution: jnp.ndarray            # (M,) int32 a Microfacet kind
    sample_visible: jnp.ndarray          # (M,) bool: sample visible normals
    nonlinear: jnp.ndarray               # (M,) bool: plastics' nonlinear color shift
    specular_weight: jnp.ndarray         # (M,) plastics' specular sampling weight
    internal_reflectance: jnp.ndarray    # (M,) plastic: Fdr(1 / eta); roughplastic: integrated
    transmittance: jnp.ndarray           # (TRANSMITTANCE_RES, M) roughplastic: t(cos theta)
    layers: Layers | None = None         # composite materials' leaves (None: the scene has none)
    kinds_present: tuple[int, ...] = static(default=(BsdfKind.DIFFUSE,))
    distributions_present: tuple[int, ...] = static(default=())  # microfacet distributions of the rough kinds
    all_normals: bool = static(default=False)  # some rough material samples all normals
    # (field, kind): some material of that kind reads a non-constant texture in that texture-id
    # field above; the rest are read as constants (a bitmap lookup for every field of every ray
    # is what this saves). By default every field of every kind that reads it.
    textured: tuple[tuple[str, int], ...] = static(default=TEXTURE_READS)
    # The principled kinds' parameters; None (no leaves: the same compiled program) without them.
    principled: Principled | None = None
    # Normal and bump maps over leaves (tracer.bsdfs.perturb); None where no material has one.
    perturbation: Perturbations | None = None

    def is_textured(self, field: str) -> bool:
        """Whether a kind present reads a non-constant texture in ``field`` (static). A kind group's
        table (``kinds_present`` its kinds) reads constants where only other groups' materials
        have textures there."""
        return any(f == field and kind in self.kinds_present for f, kind in self.textured)
