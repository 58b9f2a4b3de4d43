"""The ``Emitters`` table: every light of a scene as columns of arrays, one row per emitter.

Emitters are addressed by an integer id (the row). Per-kind data lives in columns that other
kinds ignore; variable-size data (the triangles of mesh area lights, the environment map) is
packed into flat arrays with offsets, so any number of lights costs the same program shape.
Only the kinds listed in the static ``kinds_present`` are traced.

Conventions follow Mitsuba 3 (``src/emitters/*.cpp``): directions are unit (3, N) vectors,
normals of area lights are *oriented* (the shape's ``flip_normals`` applied: the side that
emits), and all pdfs are per unit solid angle at the reference point.
"""
import jax.numpy as jnp

from tracer.pytree import pytree_dataclass, static

__all__ = ["Emitters"]


@pytree_dataclass
class Emitters:
    """E emitters (E >= 1: a scene without lights holds one black point light, ``count`` = 0)."""

    kind: jnp.ndarray            # (E,) int32 an EmitterKind
    radiance: jnp.ndarray        # (3, E) area/constant radiance, point/spot intensity, directional irradiance,
                                 # projector scale (times its irradiance if that is not a texture)
    select_pmf: jnp.ndarray      # (E,) probability of choosing each emitter (Mitsuba's sampling_weight)
    select_cdf: jnp.ndarray      # (E,) its inclusive cumulative sum, last entry exactly 1
    to_world: jnp.ndarray        # (3, 4, E) emitter (or analytic shape) to world
    to_local: jnp.ndarray        # (3, 4, E) its inverse
    shape: jnp.ndarray           # (E,) int32 scene shape an area emitter belongs to, -1 otherwise
    area_shape: jnp.ndarray      # (E,) int32 the SurfaceKind an area emitter is attached to
    flip: jnp.ndarray            # (E,) bool the shape's flip_normals (area emitters)
    inv_area: jnp.ndarray        # (E,) 1 / surface area (area emitters)
    tri_offset: jnp.ndarray      # (E,) int32 first triangle of a mesh area emitter in tri_*
    tri_count: jnp.ndarray       # (E,) int32 its number of triangles
    tri_cdf: jnp.ndarray         # (T,) per-emitter inclusive area CDFs, each ending at exactly 1
    tri_p0: jnp.ndarray          # (3, T) first vertex, world space
    tri_e1: jnp.ndarray          # (3, T) p1 - p0
    tri_e2: jnp.ndarray          # (3, T) p2 - p0
    tri_n: jnp.ndarray           # (3, 3, T) vertex normals (n0, n1, n2), unflipped; face normal if flat
    tri_uv: jnp.ndarray          # (3, 2, T) vertex uvs (uv0, uv1, uv2); Mitsuba's (0,0), (1,0), (0,1) without
    spot_cos_cutoff: jnp.ndarray  # (E,) cos(cutoff_angle)
    spot_cutoff: jnp.ndarray      # (E,) cutoff_angle [rad]
    spot_cos_beam: jnp.ndarray    # (E,) cos(beam_width)
    spot_inv_transition: jnp.ndarray  # (E,) 1 / (cutoff_angle - beam_width) [1/rad]
    spot_uv_factor: jnp.ndarray   # (E,) tan(cutoff_angle): the projected texture spans the cutoff cone
    texture: jnp.ndarray         # (E,) int32 texture multiplying ``radiance``, -1 for none: a spot's and a
                                 # projector's projected one, an area light's radiance at the surface uv
    proj_cot: jnp.ndarray        # (E,) projectors: 1 / tan(x_fov / 2)
    proj_aspect: jnp.ndarray     # (E,) projectors: the texture's width / height
    env_rgb: jnp.ndarray         # (3, H, W) environment map radiance (scale applied), row 0 at theta = 0
    env_density: jnp.ndarray     # (H, W + 1) luminance * sin(theta) at the warp grid, normalized pdf over uv
    env_row_cdf: jnp.ndarray     # (H - 1,) marginal CDF over the rows of warp cells
    env_col_cdf: jnp.ndarray     # ((H - 1) * W,) conditional CDF over the cells of each row
    sphere_center: jnp.ndarray   # (3,) the scene's bounding sphere, for directional / environment lights
    sphere_radius: jnp.ndarray   # () its radius, (1 + RayEpsilon) enlarged as Mitsuba
    count: int = static(default=0)                            # number of real emitters (0: the one black placeholder)
    kinds_present: tuple[int, ...] = static(default=())        # kinds that occur, so absent ones cost nothing
    area_shapes_present: tuple[int, ...] = static(default=())  # area surface types that occur
    environment: int = static(default=-1)                     # row of the constant / envmap emitter, -1 for none
    textured: bool = static(default=False)                    # some emitter has a texture
    search_steps: int = static(default=1)                     # binary-search iterations over the largest CDF
