"""A physically based path tracer in JAX whose images match Mitsuba 3's.

``load_scene`` reads a Mitsuba 3 XML scene; ``render`` renders it to linear RGB; ``render_tile``
is the jitted work unit the farm distributes; ``parameters`` gives a scene's differentiable values
under Mitsuba's keys and ``render_differentiable`` an image that ``jax.grad`` differentiates in them; ``configure`` sets a process up for the tracer (both
entry points call it; nothing is set at import). Attributes load lazily, so host-only modules
(``tracer.io.images``) can be used without importing JAX.
"""
import importlib
from typing import Any

__all__ = ["SceneError", "load_scene", "render", "render_tile", "resolve", "local_mesh", "Scene", "configure",
           "parameters", "render_differentiable"]

_SOURCES = {
    "SceneError": "tracer.errors",
    "load_scene": "tracer.io.scene_loader",
    "render": "tracer.rendering",
    "render_tile": "tracer.rendering",
    "resolve": "tracer.shared",
    "local_mesh": "tracer.rendering",
    "Scene": "tracer.scene",
    "configure": "tracer.runtime.process",
    "parameters": "tracer.scene_parameters",
    "render_differentiable": "tracer.differentiable",
}


def __getattr__(name: str) -> Any:
    if name in _SOURCES:
        return getattr(importlib.import_module(_SOURCES[name]), name)
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")
