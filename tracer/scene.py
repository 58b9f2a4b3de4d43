"""The scene: every fixed input of a render, as one pytree of arrays with static shapes.

Array fields are the data (vertices, colors, transforms); static fields are what the compiled
program depends on (counts, plugin kinds present, integrator settings). Two frames of an
animation differ only in arrays, so one compiled work unit serves the whole job.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Self

import jax.numpy as jnp

from tracer.pytree import pytree_dataclass, static

if TYPE_CHECKING:  # the table modules stay free to import this one
    from tracer.integrators.aov import AovTables
    from tracer.bsdfs.table import Materials
    from tracer.camera import Camera
    from tracer.emitters.table import Emitters
    from tracer.film import Film
    from tracer.media import Media
    from tracer.scene_parameters import Slot
    from tracer.shapes.geometry import Geometry
    from tracer.textures import Textures

__all__ = ["Shapes", "Settings", "Scene"]


@pytree_dataclass
class Shapes:
    """S shapes: what each primitive's shape is made of."""

    bsdf_front: jnp.ndarray   # (S,) int32 material seen from the side the normal points to
    bsdf_back: jnp.ndarray    # (S,) int32 material seen from the other side (BLACK for one-sided)
    flip_back: jnp.ndarray    # (S,) bool: mirror the frame on the back (reflective two-sided BSDFs)
    emitter: jnp.ndarray      # (S,) int32 area emitter index, -1 for none
    flip_normals: jnp.ndarray  # (S,) bool: Mitsuba's ``flip_normals``
    interior: jnp.ndarray     # (S,) int32 medium inside the shape (tracer.media), -1 for none
    exterior: jnp.ndarray     # (S,) int32 medium outside it, -1 for none


@pytree_dataclass
class Settings:
    """Integrator and sampler settings that shape the compiled program."""

    # 'path', 'volpath' or 'volpathmis' (scenes with media) or 'direct' (tracer.integrators.path,
    # .volpath, .volpathmis, .direct)
    integrator: str = static(default="path")
    max_depth: int = static(default=8)      # longest path, in segments; -1 for unbounded
    rr_depth: int = static(default=5)       # depth from which Russian roulette applies
    hide_emitters: bool = static(default=False)
    spp: int = static(default=16)           # the scene's default samples per pixel
    sampler: str = static(default="independent")  # tracer.rng.SAMPLERS: 'independent' or 'sobol'
    emitter_samples: int = static(default=1)  # direct: light samples per camera ray
    bsdf_samples: int = static(default=1)     # direct: BSDF samples per camera ray
    # Mitsuba's aov integrator: ((name, type), ...) (tracer.io.aovs)
    aovs: tuple[tuple[str, str], ...] = static(default=())


@pytree_dataclass
class Scene:
    geometry: Geometry
    shapes: Shapes
    materials: Materials
    textures: Textures
    emitters: Emitters
    camera: Camera
    film: Film          # static fields only
    settings: Settings
    media: Media
    aov: AovTables | None = None  # what the shape_index and prim_index AOVs read (None without AOVs)
    # Mitsuba's parameter keys and the leaves that hold their values (tracer.scene_parameters)
    parameter_slots: tuple[Slot, ...] = static(default=())

    def close(self) -> None:
        """Free the host-side state the scene owns (a host intersection engine's scene); copies
        made by tree operations share it, so close the scene that ``load_scene`` returned."""
        self.geometry.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
