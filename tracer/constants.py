"""Numerical constants of the tracer, in one place (numpy only: the host builders may import it).

Float32, as the traced code computes; host code that works in float64 converts with ``float()``
(under NumPy 2's promotion rules a float32 scalar would otherwise pull float64 arithmetic down).
"""
import numpy as np

__all__ = ["PI", "TWO_PI", "FOUR_PI", "INV_PI", "INV_TWO_PI", "INV_FOUR_PI", "INV_TWO_PI_SQUARED",
           "INV_SQRT_PI", "RAY_EPSILON", "SHADOW_EPSILON", "LUMINANCE_WEIGHTS", "SRGB_TO_XYZ"]

PI = np.float32(np.pi)
TWO_PI = np.float32(2.0 * np.pi)
FOUR_PI = np.float32(4.0 * np.pi)
INV_PI = np.float32(1.0 / np.pi)
INV_TWO_PI = np.float32(0.5 / np.pi)
INV_FOUR_PI = np.float32(0.25 / np.pi)
INV_TWO_PI_SQUARED = np.float32(0.5 / np.pi**2)
INV_SQRT_PI = np.float32(1.0 / np.sqrt(np.pi))

# Mitsuba's math::RayEpsilon<float> and ShadowEpsilon: how far spawned rays start off a surface,
# and how far short of their target shadow rays stop. (1500 * 2^-24 is exact in float32.)
RAY_EPSILON = np.float32(1500 * 2.0**-24)
SHADOW_EPSILON = np.float32(RAY_EPSILON * 10)

# Mitsuba's linear sRGB (Rec. 709 primaries, D65) to CIE XYZ (``srgb_to_xyz``), and its luminance:
# Y of (r, g, b), the middle row.
SRGB_TO_XYZ = ((0.412453, 0.357580, 0.180423),
               (0.212671, 0.715160, 0.072169),
               (0.019334, 0.119193, 0.950227))
LUMINANCE_WEIGHTS = SRGB_TO_XYZ[1]
