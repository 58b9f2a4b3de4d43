"""Differentiable rendering: the image as a ``jax.Array`` whose gradients in the scene's values
(``tracer.scene_parameters``) are Mitsuba 3's ``prb`` estimator (``tracer.integrators.replay``).

The image is the film's crop window, every sample of it traced as one batch (all paths advance
a bounce at a time): it is meant for the small, many-times-rendered images of inverse rendering.
Its samples are those of ``tracer.render`` (the same keys, rays and filter splats), so the two
agree in expectation; the bits differ (``render`` regenerates paths in a pool and sums passes).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from tracer import camera as cameras
from tracer import film as films
from tracer import scene_parameters as P
from tracer import rng
from tracer.integrators import replay
from tracer.rng import Dims
from tracer.runtime import process
from tracer.shared import MAX_FRAME, MAX_SEED, MAX_SPP

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["render_differentiable", "image", "tile_image", "tile_loss", "tile_loss_and_grad"]


def _whole(name: str, value: object, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise ValueError(f"tracer.render_differentiable: {name} must be a whole number from 0 to {high}, "
                         f"got {value!r}")
    return value


def _index(name: str, value: object, high: int) -> jax.Array:
    """A seed or frame as an int32 scalar: a host int (checked) or an integer array (traced:
    under ``jax.jit`` one program serves every seed)."""
    if isinstance(value, jax.Array) and value.shape == () and jnp.issubdtype(value.dtype, jnp.integer):
        return value.astype(jnp.int32)
    return jnp.int32(_whole(name, value, high))


def render_differentiable(scene: Scene, params: Mapping[str, jax.Array], spp: int, seed: int | jax.Array = 0,
                          frame: int | jax.Array = 0) -> jax.Array:
    """The linear RGB image (H, W, 3) float32 of ``scene`` with ``params`` (keys of
    ``tracer.scene_parameters``, any subset, Mitsuba's shapes) written in, ``spp`` samples a pixel;
    ``seed`` and ``frame`` address the samples as ``tracer.render``'s (ints, or int32 scalars
    traced under ``jax.jit``).

    ``jax.grad`` and ``jax.vjp`` through it give the derivatives in ``params`` that Mitsuba's
    ``prb`` integrator gives (path replay: memory does not grow with the paths' length; the
    geometry is held fixed, no visibility-discontinuity terms). Its expectation is
    ``tracer.render``'s. Scenes of the ``path`` integrator only. Raises
    ``tracer.scene_parameters.ParameterError`` naming a key the scene lacks or cannot differentiate.
    """
    process.configure()
    if scene.settings.integrator != "path" or scene.settings.aovs:
        raise ValueError(f"tracer.render_differentiable: the '{scene.settings.integrator}' integrator"
                         f"{' with AOVs' if scene.settings.aovs else ''} is not differentiable here (only 'path')")
    spp = _whole("spp", spp, MAX_SPP)
    if spp == 0:
        raise ValueError("tracer.render_differentiable: spp must be at least 1")
    seed_, frame_ = _index("seed", seed, MAX_SEED), _index("frame", frame, MAX_FRAME)
    params = {key: jnp.asarray(value, jnp.float32) for key, value in params.items()}
    P.substitute(scene, params)  # refuses bad keys and shapes by name, before anything is traced
    return _jitted_image(scene, params, seed_, frame_, spp=spp)


def image(scene: Scene, params: dict[str, jax.Array], seed: jax.Array, frame: jax.Array, *, spp: int) -> jax.Array:
    """``render_differentiable`` without its checks: the crop window's image from its samples and
    those of the filter's margin around it. seed, frame: int32 scalars; ``spp`` static."""
    film = scene.film
    return tile_image(scene, params, seed, frame, jnp.int32(0), jnp.int32(0), spp=spp,
                      tile_h=film.crop_height, tile_w=film.crop_width)


def tile_image(scene: Scene, params: dict[str, jax.Array], seed: jax.Array, frame: jax.Array, tile_y: jax.Array,
               tile_x: jax.Array, *, spp: int, tile_h: int, tile_w: int) -> jax.Array:
    """The (tile_h, tile_w, 3) window of the image whose top-left pixel is (tile_y, tile_x) (int32,
    traced: one program serves every tile of a size) in the film's crop window, as
    ``tracer.rendering.render_tile`` places its tiles; pixels past the film are zero. A pixel's
    samples are addressed by the pixel, so a tile is that window of the whole image (the farm's
    gradient tasks, ``cluster.gradient``)."""
    film = scene.film
    m = film.margin
    h, w = tile_h, tile_w
    gh, gw = h + 2 * m, w + 2 * m
    s, gy, gx = (a.ravel() for a in jnp.meshgrid(jnp.arange(spp, dtype=jnp.int32), jnp.arange(gh, dtype=jnp.int32),
                                                  jnp.arange(gw, dtype=jnp.int32), indexing="ij"))
    py, px = film.crop_y + tile_y - m + gy, film.crop_x + tile_x - m + gx
    valid = (py >= 0) & (py < film.height) & (px >= 0) & (px < film.width)
    keys = rng.sample_keys(scene.settings.sampler, seed, frame, (py * film.width + px).astype(jnp.uint32),
                           s.astype(jnp.uint32))
    offset = rng.draw(keys, Dims.FILM)
    film_uv = jnp.stack([(px.astype(jnp.float32) + offset[0]) / film.width,
                         (py.astype(jnp.float32) + offset[1]) / film.height])
    origin, direction, t_max = cameras.generate_rays(scene.camera, film_uv, rng.draw(keys, Dims.APERTURE))
    radiance = replay.radiance(params, scene, P.substitute, keys, origin, direction, t_max, valid)
    radiance = jnp.where(jnp.isfinite(radiance), radiance, 0.0)  # as Mitsuba's film, drop NaN/inf samples
    grid = (spp, gh, gw)
    value, weight = films.splat_tile(film, offset.reshape(2, *grid), radiance.reshape(3, *grid),
                                     valid.reshape(grid), h, w)
    return jnp.where(weight[..., None] != 0, value / jnp.where(weight != 0, weight, 1.0)[..., None], 0.0)


_jitted_image = jax.jit(image, static_argnames=("spp",))


def tile_loss(scene: Scene, params: dict[str, jax.Array], target: jax.Array, mask: jax.Array, seed: jax.Array,
              frame: jax.Array, tile_y: jax.Array, tile_x: jax.Array, *, spp: int, tile_h: int, tile_w: int,
              loss: str) -> tuple[jax.Array, jax.Array]:
    """(the loss summed over the tile's pixels where ``mask`` (tile_h, tile_w) and channels, the
    tile's image): ``l2`` the squared difference from ``target`` (tile_h, tile_w, 3), ``l1`` its
    absolute value. Its gradient in ``params`` is path replay's (``tile_image``); a mean over a
    whole image is the tiles' sums added, divided by the pixels x channels."""
    image_ = tile_image(scene, params, seed, frame, tile_y, tile_x, spp=spp, tile_h=tile_h, tile_w=tile_w)
    d = image_ - target
    per_value = d * d if loss == "l2" else jnp.abs(d)
    return jnp.sum(jnp.where(mask[..., None], per_value, 0.0)), image_


tile_loss_and_grad = jax.jit(jax.value_and_grad(tile_loss, argnums=1, has_aux=True),
                             static_argnames=("spp", "tile_h", "tile_w", "loss"))
