"""A scene's differentiable values, named as Mitsuba 3's ``mi.traverse`` names them.

The loader (``tracer.io.parameter_names``) records, for every key, the leaves of the ``Scene``
pytree that hold its value (``Slot``: a static field of the scene). ``parameters`` reads them;
``substitute`` writes new values in with differentiable array updates, so that a render of the
result is the render of the edited file. Keys take Mitsuba's shapes: (3,) for an RGB value, (1,)
for a float, (H, W, C) for a bitmap's texels, (H, W + 2, 3) for an environment map (Mitsuba's
tensor keeps a wrap-around column on each side; those two columns are ignored here, as
Mitsuba's own update overwrites them).

What stays as loaded whatever the values (sampling only: the expectation is unchanged): the
emitters' selection probabilities, an environment map's importance-sampling distribution (as
Mitsuba's, which it rebuilds detached) and the plastics' specular sampling weight. What is
precomputed from a value and cannot follow it is not a parameter: ``Slot.refused`` says why.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["Target", "Slot", "ParameterError", "parameters", "substitute", "differentiable_keys"]


class Target(NamedTuple):
    """One place a key's value lives in the scene."""

    leaf: str         # TEXTURE_COLOR0, TEXTURE_COLOR1, TEXELS, MATERIAL_ETA, MATERIAL_K, EMITTER_RADIANCE, ENV_RGB
    row: int          # texture, material or emitter row; TEXELS: the bitmap's first texel
    size: int = 0     # TEXELS: the bitmap's texel count


TEXTURE_COLOR0, TEXTURE_COLOR1, TEXELS = "textures.color0", "textures.color1", "textures.texels"
MATERIAL_ETA, MATERIAL_K = "materials.eta", "materials.k"
EMITTER_RADIANCE, ENV_RGB, ENV_SCALE = "emitters.radiance", "emitters.env_rgb", "emitters.env_scale"


class Slot(NamedTuple):
    """A key: its Mitsuba shape and where it lives (several places where Mitsuba merged identical
    plugins into one object), or why it cannot be differentiated here."""

    key: str
    shape: tuple[int, ...]
    targets: tuple[Target, ...] = ()
    refused: str = ""   # non-empty: a key Mitsuba has that this tracer bakes at load, and why
    scale: float = 1.0  # ENV_RGB: the map's scale at load (our texels hold data * scale)


class ParameterError(ValueError):
    """A parameter that the scene does not have, cannot differentiate, or of the wrong shape; one line."""


def differentiable_keys(scene: Scene) -> tuple[str, ...]:
    """The keys ``parameters`` returns, in the scene's order."""
    return tuple(s.key for s in scene.parameter_slots if not s.refused)


def _read(scene: Scene, slot: Slot) -> jax.Array:
    t = slot.targets[0]
    ems, tex, mats = scene.emitters, scene.textures, scene.materials
    if t.leaf == ENV_SCALE:
        return jnp.full((1,), slot.scale, jnp.float32)
    if t.leaf == ENV_RGB:
        safe = slot.scale if slot.scale != 0 else 1.0
        data = jnp.moveaxis(ems.env_rgb, 0, -1) / np.float32(safe)
        return jnp.concatenate([data[:, -1:], data, data[:, :1]], axis=1)  # Mitsuba's halo columns
    if t.leaf == TEXELS:
        h, w, c = slot.shape
        return tex.texels[:c, t.row:t.row + t.size].T.reshape(h, w, c)
    column = {TEXTURE_COLOR0: tex.color0, TEXTURE_COLOR1: tex.color1, MATERIAL_ETA: mats.eta, MATERIAL_K: mats.k,
              EMITTER_RADIANCE: ems.radiance}[t.leaf]
    return column[:slot.shape[0], t.row]


def parameters(scene: Scene) -> dict[str, jax.Array]:
    """The scene's differentiable values, keyed as Mitsuba's ``mi.traverse`` keys the same file
    (``red.reflectance.value``, ``light.emitter.radiance.value``, ``floor.reflectance.data``...),
    each in Mitsuba's shape. Objects without an id (Mitsuba's ``object_<address>``) have no key."""
    return {s.key: _read(scene, s) for s in scene.parameter_slots if not s.refused}


def _checked(scene: Scene, params: Mapping[str, jax.Array]) -> dict[str, tuple[Slot, jax.Array]]:
    slots = {s.key: s for s in scene.parameter_slots}
    checked = {}
    for key, value in params.items():
        slot = slots.get(key)
        if slot is None:
            raise ParameterError(f"'{key}': the scene has no such parameter (it has: "
                                 f"{', '.join(differentiable_keys(scene)) or 'none'})")
        if slot.refused:
            raise ParameterError(f"'{key}' cannot be differentiated: {slot.refused}")
        value = jnp.asarray(value, jnp.float32)
        if value.shape != slot.shape:
            raise ParameterError(f"'{key}' has shape {slot.shape}, got {value.shape}")
        checked[key] = (slot, value)
    return checked


def substitute(scene: Scene, params: Mapping[str, jax.Array]) -> Scene:
    """``scene`` with ``params`` (keys of ``parameters``, any subset) written into its leaves:
    a float is broadcast to the three channels it stands for, a gray bitmap to RGB. Differentiable
    in the values. Raises ``ParameterError`` naming a key the scene does not have, one it cannot
    differentiate, or a value of the wrong shape."""
    tex, mats, ems = scene.textures, scene.materials, scene.emitters
    columns = {TEXTURE_COLOR0: tex.color0, TEXTURE_COLOR1: tex.color1, MATERIAL_ETA: mats.eta, MATERIAL_K: mats.k,
               EMITTER_RADIANCE: ems.radiance, TEXELS: tex.texels}
    env = {}
    for slot, value in _checked(scene, params).values():
        for t in slot.targets:
            if t.leaf in (ENV_RGB, ENV_SCALE):
                env[t.leaf] = (slot, value)
            elif t.leaf == TEXELS:
                texels = jnp.broadcast_to(value.reshape(-1, value.shape[-1]), (t.size, 3)).T
                columns[TEXELS] = columns[TEXELS].at[:, t.row:t.row + t.size].set(texels)
            else:
                columns[t.leaf] = columns[t.leaf].at[:, t.row].set(jnp.broadcast_to(value, (3,)))
    env_rgb = ems.env_rgb
    if env:  # our texels hold data * scale: either written in, the other as loaded
        loaded = next(s for s in scene.parameter_slots if s.targets and s.targets[0].leaf == ENV_RGB)
        data = env[ENV_RGB][1] if ENV_RGB in env else _read(scene, loaded)
        scale = env[ENV_SCALE][1] if ENV_SCALE in env else jnp.full((1,), loaded.scale, jnp.float32)
        env_rgb = jnp.moveaxis(data[:, 1:-1], -1, 0) * scale[0]
    return dataclasses.replace(
        scene, textures=dataclasses.replace(tex, color0=columns[TEXTURE_COLOR0], color1=columns[TEXTURE_COLOR1],
                                            texels=columns[TEXELS]),
        materials=dataclasses.replace(mats, eta=columns[MATERIAL_ETA], k=columns[MATERIAL_K]),
        emitters=dataclasses.replace(ems, radiance=columns[EMITTER_RADIANCE], env_rgb=env_rgb))
