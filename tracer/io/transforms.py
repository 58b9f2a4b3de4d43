"""Mitsuba's transform matrices in double precision (host only): ``rotate`` about an axis that
is not normalized, ``lookat`` with Duff et al.'s fallback for a missing ``up``."""
import math
from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["rotation_matrix", "lookat_matrix", "inverse_transpose"]


def rotation_matrix(axis: Iterable[float], angle_deg: float) -> np.ndarray:
    """4x4 rotation by ``angle_deg`` degrees about ``axis`` (not normalized, as Mitsuba's)."""
    x, y, z = (float(a) for a in axis)
    s, c = math.sin(math.radians(angle_deg)), math.cos(math.radians(angle_deg))
    m = 1.0 - c
    return np.array([[x * x * m + c, x * y * m - z * s, x * z * m + y * s, 0.0],
                     [x * y * m + z * s, y * y * m + c, y * z * m - x * s, 0.0],
                     [x * z * m - y * s, y * z * m + x * s, z * z * m + c, 0.0],
                     [0.0, 0.0, 0.0, 1.0]])


def _coordinate_system(n: np.ndarray) -> np.ndarray:
    """First tangent of Duff et al. 2017, as Mitsuba's ``coordinate_system``."""
    sign = 1.0 if n[2] >= 0 else -1.0
    a = -1.0 / (sign + n[2])
    b = n[0] * n[1] * a
    return np.array([1.0 + sign * n[0] * n[0] * a, sign * b, -sign * n[0]])


def lookat_matrix(origin: ArrayLike, target: ArrayLike, up: np.ndarray | None = None) -> np.ndarray:
    """Camera-to-world matrix of Mitsuba's ``Transform4f::look_at`` (+z looks at the target)."""
    origin, target = np.asarray(origin, np.float64), np.asarray(target, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        direction = (target - origin) / np.linalg.norm(target - origin)
        if up is None or not np.any(np.asarray(up, np.float64)):
            up = _coordinate_system(direction)
        left = np.cross(up, direction)
        left = left / np.linalg.norm(left)
    new_up = np.cross(direction, left)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = left, new_up, direction, origin
    return m


def inverse_transpose(m: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.inv(m).T
    except np.linalg.LinAlgError:
        return np.full((4, 4), np.nan)
