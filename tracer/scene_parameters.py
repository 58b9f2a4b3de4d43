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

from tracer.kinds import TextureKind

if TYPE_CHECKING:
    from tracer.scene import Scene

__all__ = ["Target", "Slot", "ParameterError", "parameters", "substitute", "differentiable_keys", "valid_range"]


class Target(NamedTuple):
    """One place a key's value lives in the scene."""

    leaf: str         # MATERIAL_TEXTURE, TEXTURE_COLOR0/1, TEXELS, MATERIAL_ETA/K, EMITTER_RADIANCE, ENV_RGB/SCALE
    row: int          # texture, material or emitter row; TEXELS: the bitmap's first texel
    size: int = 0     # TEXELS: the bitmap's texel count
    field: str = ""   # MATERIAL_TEXTURE: the ``Materials`` texture-id field (of material ``row``)
    texture: int = -1  # TEXELS: the bitmap's texture row
    # TEXTURE_COLOR0/1, TEXELS: the (Materials field, row) cells that read the texture as this key;
    # other cells that point to it (fields a kind never reads, which point to texture 0) are given
    # a frozen copy of it, so that the derivative never enters another kind's unread branch.
    readers: tuple[tuple[str, int], ...] = ()


# A material's constant (``Materials.<field>[row]`` names its texture). The loader shares one
# texture row between equal constants (the tables, and so the bits of every render, stay as they
# always were); writing a value gives the key a texture row of its own, appended to the table.
MATERIAL_TEXTURE = "materials.texture"
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


# The least roughness an optimizer may step to: GGX at alpha 0 is a Dirac lobe, whose derivative is not defined.
MIN_ALPHA = 1e-3
_ROUGHNESS_FIELDS = ("alpha_u", "alpha_v")


def valid_range(scene: Scene, key: str) -> tuple[float, float]:
    """(low, high) that an optimizer clamps ``key``'s values to: reflectances and transmittances
    in [0, 1], roughness in [``MIN_ALPHA``, inf), emission, indices of refraction and an
    environment map's values in [0, inf). ``key`` must be a key of ``parameters``."""
    slot = next(s for s in scene.parameter_slots if s.key == key and not s.refused)
    fields = {t.field for t in slot.targets if t.leaf == MATERIAL_TEXTURE}
    fields |= {f for t in slot.targets for f, _ in t.readers}
    leaves = {t.leaf for t in slot.targets}
    if fields & set(_ROUGHNESS_FIELDS):
        return MIN_ALPHA, float("inf")
    if leaves & {MATERIAL_ETA, MATERIAL_K, EMITTER_RADIANCE, ENV_RGB, ENV_SCALE}:
        return 0.0, float("inf")
    return 0.0, 1.0


def _read(scene: Scene, slot: Slot) -> jax.Array:
    t = slot.targets[0]
    ems, tex, mats = scene.emitters, scene.textures, scene.materials
    if t.leaf == ENV_SCALE:
        return jnp.full((1,), slot.scale, jnp.float32)
    if t.leaf == ENV_RGB:
        safe = slot.scale if slot.scale != 0 else 1.0
        data = jnp.moveaxis(ems.env_rgb, 0, -1) / np.float32(safe)
        return jnp.concatenate([data[:, -1:], data, data[:, :1]], axis=1)  # Mitsuba's halo columns
    if t.leaf == MATERIAL_TEXTURE:
        return tex.color0[:slot.shape[0], getattr(mats, t.field)[t.row]]
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
    fields = {f: getattr(mats, f) for f in _MATERIAL_FIELDS}
    own: list[jax.Array] = []  # the appended texture rows' colours
    # texture rows written in place -> (their readers, a bitmap's (first texel, texel count))
    written: dict[int, tuple[set[tuple[str, int]], tuple[int, int] | None]] = {}
    n_textures = tex.kind.shape[0]
    for slot, value in _checked(scene, params).values():
        if any(t.leaf == MATERIAL_TEXTURE for t in slot.targets):
            own.append(value)  # one new row a key, read by every cell of the key
        for t in slot.targets:
            if t.leaf == MATERIAL_TEXTURE:
                fields[t.field] = fields[t.field].at[t.row].set(n_textures + len(own) - 1)
            elif t.leaf in (ENV_RGB, ENV_SCALE):
                env[t.leaf] = (slot, value)
            elif t.leaf == TEXELS:
                texels = jnp.broadcast_to(value.reshape(-1, value.shape[-1]), (t.size, 3)).T
                columns[TEXELS] = columns[TEXELS].at[:, t.row:t.row + t.size].set(texels)
                written.setdefault(t.texture, (set(), (t.row, t.size)))[0].update(t.readers)
            else:
                columns[t.leaf] = columns[t.leaf].at[:, t.row].set(jnp.broadcast_to(value, (3,)))
                if t.leaf in (TEXTURE_COLOR0, TEXTURE_COLOR1):
                    written.setdefault(t.row, (set(), None))[0].update(t.readers)
    env_rgb = ems.env_rgb
    if env:  # our texels hold data * scale: either written in, the other as loaded
        loaded = next(s for s in scene.parameter_slots if s.targets and s.targets[0].leaf == ENV_RGB)
        data = env[ENV_RGB][1] if ENV_RGB in env else _read(scene, loaded)
        scale = env[ENV_SCALE][1] if ENV_SCALE in env else jnp.full((1,), loaded.scale, jnp.float32)
        env_rgb = jnp.moveaxis(data[:, 1:-1], -1, 0) * scale[0]
    textures = dataclasses.replace(tex, color0=columns[TEXTURE_COLOR0], color1=columns[TEXTURE_COLOR1],
                                   texels=columns[TEXELS])
    if own:
        textures = _with_constants(textures, jnp.stack([jnp.broadcast_to(v, (3,)) for v in own], axis=1))
    for row, (readers, span) in written.items():
        textures, copy = _with_frozen_copy(textures, tex, row, span)
        for f in _MATERIAL_FIELDS:
            reads = np.zeros(fields[f].shape, bool)
            reads[[m for g, m in readers if g == f]] = True
            fields[f] = jnp.where((fields[f] == row) & ~reads, copy, fields[f])
    return dataclasses.replace(
        scene, textures=textures,
        materials=dataclasses.replace(mats, eta=columns[MATERIAL_ETA], k=columns[MATERIAL_K], **fields),
        emitters=dataclasses.replace(ems, radiance=columns[EMITTER_RADIANCE], env_rgb=env_rgb))


_MATERIAL_FIELDS = ("reflectance", "specular_reflectance", "specular_transmittance", "alpha_u", "alpha_v")


def _with_frozen_copy(textures, loaded, row: int, span: tuple[int, int] | None):
    """(``textures`` with a copy of ``loaded``'s texture ``row`` appended, its values out of
    differentiation (a bitmap's texels, ``span`` = (first, count), appended too), the copy's row)."""
    grown = {f: jnp.concatenate([getattr(textures, f), jax.lax.stop_gradient(getattr(loaded, f)[..., row:row + 1])],
                                axis=-1)
             for f in ("kind", "color0", "color1", "to_uv", "offset", "width", "height", "filter", "wrap", "channels")}
    if span is not None:
        start, size = span
        grown["offset"] = grown["offset"].at[-1].set(textures.texels.shape[1])
        grown["texels"] = jnp.concatenate([textures.texels,
                                           jax.lax.stop_gradient(loaded.texels[:, start:start + size])], axis=1)
    return dataclasses.replace(textures, **grown), textures.kind.shape[0]


def _with_constants(textures, colors: jax.Array):
    """``textures`` with constant rows of ``colors`` (3, n) appended (copies of row 0 but for
    kind and colour: a constant reads nothing else)."""
    n = colors.shape[1]
    grown = {f: jnp.concatenate([getattr(textures, f), jnp.repeat(getattr(textures, f)[..., :1], n, axis=-1)], axis=-1)
             for f in ("kind", "color0", "color1", "to_uv", "offset", "width", "height", "filter", "wrap", "channels")}
    grown["kind"] = grown["kind"].at[-n:].set(int(TextureKind.CONSTANT))
    grown["color0"] = grown["color0"].at[:, -n:].set(colors)
    return dataclasses.replace(textures, **grown)
