"""Light sources: Mitsuba 3's area, point, spot, directional, constant, envmap and projector emitters.

``tracer.io.emitters`` (host) reads scene plugins into the ``Emitters`` table; the traced API
is four functions on batches of N lanes:

* ``sample_direction(emitters, textures, ref_p, u_select, u) -> (DirectionSample, weight)``
  -- next-event estimation (choose an emitter, then a point / direction on it);
* ``pdf_direction(emitters, ref_p, emitter, p, n, d)`` -- the pdf of that, for MIS when a
  BSDF-sampled ray hits an area emitter or escapes to the environment;
* ``eval_surface(emitters, textures, emitter, n, d, uv)`` -- radiance of a hit area emitter;
* ``eval_environment(emitters, textures, d)`` -- radiance of the environment for escaped rays.
"""
from tracer.emitters.direct import (
    DirectionSample, eval_environment, eval_surface, pdf_direction, sample_direction,
)
from tracer.emitters.table import Emitters

__all__ = [
    "Emitters", "DirectionSample", "sample_direction", "pdf_direction",
    "eval_surface", "eval_environment",
]
