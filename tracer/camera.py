"""Perspective, thin-lens and orthographic cameras, as Mitsuba 3's ``perspective``, ``thinlens``
and ``orthographic`` sensors.

Camera space looks down +z with +x to the left and +y up (Mitsuba's convention, which its
``lookat`` builds); film position (0, 0) is the top-left corner of the whole film (a crop window
is only which pixels are rendered: ``tracer.film``).
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from tracer import sampling
from tracer import vecmath as vm
from tracer.kinds import Projection
from tracer.pytree import pytree_dataclass, static
from tracer.table_rows import on_device

__all__ = ["Camera", "make_camera", "make_orthographic", "x_fov_from", "generate_rays"]


@pytree_dataclass
class Camera:
    to_world: jnp.ndarray        # (3, 4) camera-to-world affine map
    tan_half_fov: jnp.ndarray    # () tan(fov_x / 2)
    aspect: jnp.ndarray          # () film width / height
    near_clip: jnp.ndarray       # () distance along the view axis where rays start
    far_clip: jnp.ndarray        # ()
    aperture_radius: jnp.ndarray  # () zero for a pinhole
    focus_distance: jnp.ndarray  # ()
    projection: int = static(default=Projection.PERSPECTIVE)  # ORTHOGRAPHIC: tan_half_fov is 1, no aperture
    # Whether rays start on a lens (Mitsuba's thinlens) rather than at a pinhole (perspective):
    # a pinhole's program samples no aperture (a camera ray's costliest part, its sine and cosine).
    thin_lens: bool = static(default=False)


def x_fov_from(fov: float, fov_axis: str, width: int, height: int) -> float:
    """Mitsuba's ``parse_fov``: the horizontal field of view (degrees) for any ``fov_axis``."""
    def from_y(f: float) -> float:
        return np.degrees(2 * np.arctan(np.tan(np.radians(f) / 2) * width / height))

    if fov_axis == "x":
        return fov
    if fov_axis == "y":
        return from_y(fov)
    if fov_axis == "diagonal":
        return np.degrees(2 * np.arctan(np.tan(np.radians(fov) / 2) * width / np.hypot(width, height)))
    if fov_axis == "smaller":
        return from_y(fov) if width > height else fov
    if fov_axis == "larger":
        return from_y(fov) if width < height else fov
    raise ValueError(f"unknown fov_axis {fov_axis!r} (expected x, y, diagonal, smaller or larger)")


def make_camera(to_world: ArrayLike, x_fov: float, width: int, height: int, near_clip: float = 1e-2,
                far_clip: float = 1e4, aperture_radius: float = 0.0, focus_distance: float = 0.0,
                thin_lens: bool | None = None) -> Camera:
    """A perspective camera; a thin lens (``thin_lens``, by default where ``aperture_radius`` is
    not zero) of ``aperture_radius`` focused at ``focus_distance``."""
    f32 = lambda v: on_device(v, np.float32)
    return Camera(to_world=f32(np.asarray(to_world)[:3, :4]), tan_half_fov=f32(np.tan(np.radians(x_fov) / 2)),
                  aspect=f32(width / height), near_clip=f32(near_clip), far_clip=f32(far_clip),
                  aperture_radius=f32(aperture_radius), focus_distance=f32(focus_distance),
                  thin_lens=bool(aperture_radius != 0) if thin_lens is None else thin_lens)


def make_orthographic(to_world: ArrayLike, width: int, height: int, near_clip: float = 1e-2,
                      far_clip: float = 1e4) -> Camera:
    """Mitsuba's ``orthographic`` sensor: the film spans [-1, 1] x [-1/aspect, 1/aspect] of the
    camera's xy plane (``to_world`` scales it), rays run along the camera's +z."""
    camera = make_camera(to_world, 90.0, width, height, near_clip=near_clip, far_clip=far_clip)
    return dataclasses.replace(camera, tan_half_fov=jnp.float32(1.0), projection=Projection.ORTHOGRAPHIC)


def generate_rays(camera: Camera, film_uv: jax.Array,
                  aperture_u: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Primary rays for film positions ``film_uv`` (2, N) in [0, 1]^2 and aperture uniforms (2, N).

    Returns (origin (3, N), unit direction (3, N), t_max (N,)). A pinhole's rays are those of a
    thin lens of zero aperture radius, bit for bit; it does not sample the aperture.
    """
    if camera.projection == Projection.ORTHOGRAPHIC:
        return _orthographic_rays(camera, film_uv)
    near = jnp.stack([(1.0 - 2.0 * film_uv[0]) * camera.tan_half_fov,
                      (1.0 - 2.0 * film_uv[1]) * camera.tan_half_fov / camera.aspect,
                      jnp.ones_like(film_uv[0])])
    if camera.thin_lens:
        disk = sampling.square_to_uniform_disk_concentric(aperture_u) * camera.aperture_radius
        lens = jnp.stack([disk[0], disk[1], jnp.zeros_like(disk[0])])
        focus = near * jnp.where(camera.aperture_radius > 0, camera.focus_distance, 1.0)
        d_local = vm.normalize(focus - lens)
    else:
        lens = jnp.zeros_like(near)
        d_local = vm.normalize(near)
    inv_z = 1.0 / d_local[2]
    o = vm.transform_point(camera.to_world, lens)
    d = vm.normalize(vm.transform_vector(camera.to_world, d_local))
    near_t = camera.near_clip * inv_z
    return o + d * near_t, d, camera.far_clip * inv_z - near_t


def _orthographic_rays(camera: Camera, film_uv: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Mitsuba's ``OrthographicCamera::sample_ray``: from the film's point on the near plane
    (camera z = near_clip), along to_world's +z, for far_clip - near_clip."""
    near = jnp.stack([1.0 - 2.0 * film_uv[0], (1.0 - 2.0 * film_uv[1]) / camera.aspect,
                      jnp.broadcast_to(camera.near_clip, film_uv[0].shape)])
    o = vm.transform_point(camera.to_world, near)
    d = jnp.broadcast_to(vm.normalize(camera.to_world[:, 2:3]), near.shape)
    return o, d, jnp.broadcast_to(camera.far_clip - camera.near_clip, film_uv[0].shape)
