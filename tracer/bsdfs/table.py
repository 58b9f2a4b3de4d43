"""The material table: every BSDF of a scene as one pytree of per-material arrays.

Materials are addressed by an integer id; each has a ``kind`` tag and the parameters of that
kind (unused ones hold neutral values). Textured parameters are ids into the scene's
``tracer.textures.Textures``. Static fields say which kinds and microfacet variants occur, so
that code for absent ones is never traced.
"""
import jax.numpy as jnp

from tracer.bsdfs.layers import Layers
from tracer.kinds import BsdfKind
from tracer.pytree import pytree_dataclass, static

__all__ = ["TRANSMITTANCE_RES", "Materials"]

TRANSMITTANCE_RES = 64  # Mitsuba's MI_ROUGH_TRANSMITTANCE_RES


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
    kinds_present: tuple = static((BsdfKind.DIFFUSE,))
    distributions_present: tuple = static(())   # microfacet distributions of the rough kinds
    all_normals: bool = static(False)           # some rough material samples all normals
    # Texture-id fields above that refer to a non-constant texture somewhere; the others are
    # read as constants (a bitmap lookup for every field of every ray is what this saves).
    textured: tuple = static(("reflectance", "specular_reflectance", "specular_transmittance", "alpha_u", "alpha_v"))
