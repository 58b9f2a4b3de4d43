"""Mitsuba's curve files (``linearcurve``, ``bsplinecurve``): one control point a line, ``x y z
radius``, a blank line between curves (``LinearCurve`` / ``BSplineCurve`` constructors).

Positions are taken to world space by the shape's ``to_world``; radii are not (as Mitsuba). A
curve needs 2 control points (linear) or 4 (B-spline). Errors name the file and line: a line
that does not start with four numbers, a number that is not finite, a negative radius (Mitsuba
hands it to Embree as it is), a line of 1024 characters or more, a file without control points.
"""
import os
from typing import NamedTuple

import numpy as np

from tracer.errors import SceneError
from tracer.io import reads

__all__ = ["Curves", "load_curves", "MIN_POINTS", "MAX_FILE_BYTES"]

MIN_POINTS = {"linearcurve": 2, "bsplinecurve": 4}
MAX_FILE_BYTES = 256 * 2**20
MAX_LINE = 1024  # Mitsuba's line buffer


class Curves(NamedTuple):
    """The control points of a curve file, object space."""

    points: np.ndarray   # (P, 3) float64
    radii: np.ndarray    # (P,) float64
    starts: tuple        # the first control point of each curve


def _read(path: str) -> str:
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            raise SceneError(f"curve file is larger than {MAX_FILE_BYTES // 2**20} MiB", path)
        return reads.read_file(path).decode("utf-8")
    except FileNotFoundError:
        raise SceneError("curve file not found", path) from None
    except UnicodeDecodeError:
        raise SceneError("curve file is not text", path) from None
    except OSError as e:
        raise SceneError(f"cannot read curve file: {e.strerror}", path) from None


def _control_point(path: str, number: int, line: str) -> list[float]:
    fields = line.split()
    try:
        values = [float(x) for x in fields[:4]]
    except ValueError:
        values = []
    if len(values) < 4:
        raise SceneError(f"could not parse control point {line.strip()!r} (x y z radius)", f"{path}:{number}")
    if not np.all(np.isfinite(values)):
        raise SceneError(f"control point {line.strip()!r} is not finite", f"{path}:{number}")
    if values[3] < 0:
        raise SceneError(f"control point radius {values[3]:g} is negative", f"{path}:{number}")
    return values


def load_curves(path: str, plugin: str) -> Curves:
    """The ``Curves`` of the file at ``path`` for Mitsuba's ``plugin`` (``linearcurve`` or
    ``bsplinecurve``); ``SceneError`` naming file:line for bad input."""
    points: list[list[float]] = []
    starts: list[int] = []
    first_line: list[int] = []  # the line of each curve's first control point
    new_curve = True
    for number, line in enumerate(_read(path).split("\n"), start=1):
        if len(line) >= MAX_LINE:
            raise SceneError(f"line of {len(line)} characters (at most {MAX_LINE - 1})", f"{path}:{number}")
        if not line.strip():
            new_curve = True
            continue
        if new_curve:
            starts.append(len(points))
            first_line.append(number)
            new_curve = False
        points.append(_control_point(path, number, line))
    if not points:
        raise SceneError("empty curve file: no control points", path)
    ends = starts[1:] + [len(points)]
    for start, end, number in zip(starts, ends, first_line):
        if end - start < MIN_POINTS[plugin]:
            raise SceneError(f"a {plugin} needs at least {MIN_POINTS[plugin]} control points per curve, this one "
                             f"has {end - start}", f"{path}:{number}")
    values = np.asarray(points, np.float64)
    return Curves(values[:, :3], values[:, 3], tuple(starts))
