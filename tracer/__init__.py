"""A physically based path tracer in JAX whose images match Mitsuba 3's.

``load_scene`` reads a Mitsuba 3 XML scene; ``render`` renders it to linear RGB; ``render_tile``
is the jitted work unit the farm distributes.
"""
from tracer.io.errors import SceneError
from tracer.io.scene_loader import load_scene
from tracer.render import local_mesh, render, render_tile, resolve
from tracer.scene import Scene

__all__ = ["SceneError", "load_scene", "render", "render_tile", "resolve", "local_mesh", "Scene"]
