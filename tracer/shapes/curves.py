"""Mitsuba's curve shapes, ``linearcurve`` and ``bsplinecurve``: intersection and surface data.

Mitsuba hands curves to Embree (``RTC_GEOMETRY_TYPE_ROUND_LINEAR_CURVE`` and
``ROUND_BSPLINE_CURVE``), whose geometry this reproduces, backfaces culled as there (a ray from
inside a curve does not see it):

* a linear segment from control point (p0, r0) to (p1, r1) is the cone that touches the spheres
  p0/r0 and p1/r1 tangentially, with both spheres: the convex hull of the two balls. A curve of
  several segments is their union, round at its joints and its two ends. Its surface point c(v)
  on the axis is where the normal meets the axis, v in [0, 1] (Mitsuba's ``v_local``).
* a B-spline segment (4 control points, uniform cubic basis) is the sweep of the circle of radius
  r(v) perpendicular to the curve c(v), v in [0, 1], open at the segment's two ends. Its hit is
  found from the K chords of the segment (round cones, as above, with balls at the inner joints)
  and refined by Newton's method on (t, v): (p(t) - c(v)) . c'(v) = 0, |p(t) - c(v)|^2 = r(v)^2.

Each segment is one primitive of the geometry's analytic tables (``SurfaceKind.LINEAR_CURVE`` or
``BSPLINE_CURVE``), its data packed into the two (3, 4) columns an analytic primitive has:

* linear: to_world columns p0, p1, (r0, r1, 0), (segment, segments, 0); to_local unused;
* B-spline: to_world columns P0, P1, P2, P3; to_local columns (r0, r1, r2), (r3, segment, segments).

``segment`` / ``segments`` give Mitsuba's uv.v = (v_local + segment) / segments (over all the
segments of the shape); uv.u is the angle around the curve in Mitsuba's ``local_frame``. The
shading frame's tangent is left to ``coordinate_system(n)`` (Mitsuba's for linear curves; its
B-spline dp/du would orient anisotropic BSDFs differently).
"""
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from numpy.typing import ArrayLike as HostArrayLike

from tracer import elementary
from tracer import vecmath as vm
from tracer.constants import INV_TWO_PI, TWO_PI
from tracer.kinds import SurfaceKind
from tracer.shapes.surface_point import SurfacePoint, select_point

__all__ = ["pack_linear", "pack_bspline", "bounds", "intersect", "surface"]

INF = np.float32(np.inf)
CHORDS = 16         # chords per B-spline segment for the first guess (8 missed 3% of hits on tight bends)
NEWTON_STEPS = 4


# ---------------------------------------------------------------------------------------------
# Host: packing and bounds.

def _segments(starts: Sequence[int], count: int) -> list[tuple[int, int]]:
    """(first control point of each segment, segment count) of curves starting at ``starts``."""
    ends = list(starts[1:]) + [count]
    return [(a, b) for a, b in zip(starts, ends)]


def pack_linear(points: np.ndarray, radii: np.ndarray,
                starts: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(to_world, to_local) pairs (4, 4) of the segments of linear curves: ``points`` (P, 3) world
    space, ``radii`` (P,), ``starts`` the first control point of each curve (each has >= 2)."""
    pieces = [i for a, b in _segments(starts, len(points)) for i in range(a, b - 1)]
    out = []
    for k, i in enumerate(pieces):
        m = np.zeros((4, 4))
        m[:3, 0], m[:3, 1] = points[i], points[i + 1]
        m[:3, 2] = (radii[i], radii[i + 1], 0.0)
        m[:3, 3] = (k, len(pieces), 0.0)
        out.append((m, np.zeros((4, 4))))
    return out


def pack_bspline(points: np.ndarray, radii: np.ndarray,
                 starts: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """As ``pack_linear`` for cubic B-spline curves (each has >= 4 control points; a curve of n
    points has n - 3 segments)."""
    pieces = [i for a, b in _segments(starts, len(points)) for i in range(a, b - 3)]
    out = []
    for k, i in enumerate(pieces):
        m, local = np.zeros((4, 4)), np.zeros((4, 4))
        m[:3, :4] = np.asarray(points[i:i + 4], np.float64).T
        local[:3, 0] = radii[i:i + 3]
        local[:3, 1] = (radii[i + 3], k, len(pieces))
        out.append((m, local))
    return out


def bounds(kind: np.ndarray, to_world: HostArrayLike, to_local: HostArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """World boxes (lo, hi), each (3, A) float64, of curve segments (other kinds: garbage): a
    linear segment's two balls; a B-spline segment's control points (their convex hull holds
    the curve) grown by its largest radius."""
    m = np.asarray(to_world, np.float64)
    local = np.asarray(to_local, np.float64)
    r0, r1 = np.abs(m[0, 2]), np.abs(m[1, 2])
    lin_lo = np.minimum(m[:, 0] - r0, m[:, 1] - r1)
    lin_hi = np.maximum(m[:, 0] + r0, m[:, 1] + r1)
    r = np.max(np.abs(np.concatenate([local[:3, 0], local[:1, 1]])), axis=0)
    spl_lo, spl_hi = m.min(axis=1) - r, m.max(axis=1) + r
    linear = kind == SurfaceKind.LINEAR_CURVE
    return np.where(linear, lin_lo, spl_lo), np.where(linear, lin_hi, spl_hi)


# ---------------------------------------------------------------------------------------------
# Traced: intersection.

def _ball_entry(center: jax.Array, r: jax.Array, o: jax.Array, d: jax.Array) -> jax.Array:
    """t where rays o + t d (d unit) enter balls (center, r); inf where they do not (or start inside)."""
    q = o - center
    b = vm.dot(q, d)
    qc = q - b * d                      # the closest point of the line to the center, for precision
    disc = r * r - vm.dot(qc, qc)
    t = -b - jnp.sqrt(jnp.maximum(disc, 0.0))
    return jnp.where((disc >= 0) & (t > 0), t, INF)


def _cone_entry(p0: jax.Array, p1: jax.Array, r0: jax.Array, r1: jax.Array, o: jax.Array,
                d: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(t, v) where rays enter the lateral surface of the cone tangent to balls p0/r0 and p1/r1
    between its circles of contact; v: where the normal meets the axis (0 at p0, 1 at p1).
    t = inf where they do not (or one ball holds the other: no lateral surface)."""
    axis = p1 - p0
    length = vm.norm(axis)
    a = axis / jnp.where(length > 0, length, 1.0)
    sin_a = (r1 - r0) / jnp.where(length > 0, length, 1.0)
    cos2 = 1.0 - sin_a * sin_a
    # From the ray's point closest to p0 (float32 digits for rays from far away).
    t_c = -vm.dot(o - p0, d)
    q = o + t_c * d - p0
    qs, ds = vm.dot(q, a), vm.dot(d, a)
    q_perp = q - qs * a
    d_perp = d - ds * a
    w = r0 + sin_a * qs
    big_a = cos2 * vm.dot(d_perp, d_perp) - sin_a * sin_a * ds * ds
    big_b = cos2 * vm.dot(q_perp, d_perp) - sin_a * ds * w
    big_c = cos2 * vm.dot(q_perp, q_perp) - w * w
    disc = big_b * big_b - big_a * big_c
    root = jnp.sqrt(jnp.maximum(disc, 0.0))
    t_local = (-big_b - root) / jnp.where(big_a != 0, big_a, 1.0)  # the root where F decreases: entering
    s = qs + t_local * ds
    rho = r0 + sin_a * s                 # cos(alpha) times the cone's radius there
    inside = (s >= -r0 * sin_a) & (s <= length - r1 * sin_a)
    t = t_local + t_c
    ok = (cos2 > 0) & (length > 0) & (big_a != 0) & (disc >= 0) & (rho >= 0) & inside & (t > 0)
    v = (s + rho * sin_a / jnp.where(cos2 > 0, cos2, 1.0)) / jnp.where(length > 0, length, 1.0)
    return jnp.where(ok, t, INF), jnp.clip(v, 0.0, 1.0)


def _round_cone(p0, p1, r0, r1, o, d, cap0=True, cap1=True):
    """(t, v) of the first entry into the hull of balls p0/r0 and p1/r1; ``cap0``/``cap1`` (bool or
    bool arrays) leave a ball out where false."""
    t, v = _cone_entry(p0, p1, r0, r1, o, d)
    for cap, center, r, at in ((cap0, p0, r0, 0.0), (cap1, p1, r1, 1.0)):
        tb = jnp.where(cap, _ball_entry(center, r, o, d), INF)
        t, v = jnp.where(tb < t, tb, t), jnp.where(tb < t, at, v)
    return t, v


def _linear(to_world, o, d):
    return _round_cone(to_world[:, 0], to_world[:, 1], to_world[0, 2], to_world[1, 2], o, d)


def _cubic(v, values):
    """The uniform cubic B-spline of 4 ``values`` (4, ...) at v, with its first two derivatives
    (Mitsuba's ``cubic_interpolation``)."""
    v2, v3 = v * v, v * v * v
    w = [(-v3 + 3 * v2 - 3 * v + 1) / 6, (3 * v3 - 6 * v2 + 4) / 6, (-3 * v3 + 3 * v2 + 3 * v + 1) / 6, v3 / 6]
    w1 = [(-3 * v2 + 6 * v - 3) / 6, (9 * v2 - 12 * v) / 6, (-9 * v2 + 6 * v + 3) / 6, (3 * v2) / 6]
    w2 = [1 - v, 3 * v - 2, 1 - 3 * v, v]
    combine = lambda ws: sum(wk * values[k] for k, wk in enumerate(ws))
    return combine(w), combine(w1), combine(w2)


def _spline(to_world, to_local, v):
    """(c, c', c'', r, r') of B-spline segments at v."""
    c, dc, ddc = _cubic(v, [to_world[:, k] for k in range(4)])
    r, dr, _ = _cubic(v, [to_local[0, 0], to_local[1, 0], to_local[2, 0], to_local[0, 1]])
    return c, dc, ddc, r, dr


def _newton_step(to_world, to_local, o, d, t, v):
    """One Newton step on (t, v) for g = (p - c) . c' = 0 and f = |p - c|^2 - r^2 = 0."""
    c, dc, ddc, r, dr = _spline(to_world, to_local, v)
    rad = o + t * d - c
    g, f = vm.dot(rad, dc), vm.dot(rad, rad) - r * r
    g_t, g_v = vm.dot(d, dc), vm.dot(rad, ddc) - vm.dot(dc, dc)
    f_t, f_v = 2.0 * vm.dot(d, rad), -2.0 * g - 2.0 * r * dr
    det = g_t * f_v - g_v * f_t
    inv = jnp.where(det != 0, 1.0 / jnp.where(det != 0, det, 1.0), 0.0)
    return t - (f_v * g - g_v * f) * inv, jnp.clip(v - (g_t * f - f_t * g) * inv, -0.5, 1.5)


def _bspline(to_world, to_local, o, d, t_max):
    """(t, v) of rays entering B-spline segments: the best chord, then Newton on the sweep."""
    # The chords along a second axis: (3, CHORDS + 1, ...) knots (one graph, not CHORDS copies).
    rest = (1,) * (to_world.ndim - 2)
    knots = np.arange(CHORDS + 1, dtype=np.float32).reshape(-1, *rest) / CHORDS
    c, _, _, r, _ = _spline(to_world[:, :, None], to_local[:, :, None], knots)
    k = np.arange(CHORDS).reshape(-1, *rest)
    t, v = _round_cone(c[:, :-1], c[:, 1:], r[:-1], r[1:], o[:, None], d[:, None], cap0=k > 0, cap1=k < CHORDS - 1)
    best = jnp.argmin(t, axis=0)
    best_t = jnp.min(t, axis=0)
    best_v = (best.astype(jnp.float32) + jnp.take_along_axis(v, best[None], axis=0)[0]) / CHORDS
    found = best_t < INF
    t, v = jnp.where(found, best_t, 0.0), best_v
    t, v = jax.lax.fori_loop(0, NEWTON_STEPS, lambda _, tv: _newton_step(to_world, to_local, o, d, *tv), (t, v))
    c, dc, ddc, r, dr = _spline(to_world, to_local, v)
    rad = o + t * d - c
    n = (vm.dot(dc, dc) - vm.dot(rad, ddc)) * rad - (dr * r) * dc
    close = jnp.abs(vm.dot(rad, rad) - r * r) <= 1e-3 * r * r
    ok = found & close & (v >= 0) & (v <= 1) & (t > 0) & (t < t_max) & (vm.dot(n, d) < 0)
    return jnp.where(ok, t, INF), jnp.where(ok, v, 0.0)


def intersect(kind: jax.Array, to_world: jax.Array, to_local: jax.Array, o: jax.Array, d: jax.Array, t_max: ArrayLike,
              kinds: tuple[int, ...]) -> tuple[ArrayLike, jax.Array]:
    """(t, v_local) of rays o, d (3, ...) entering curve segments (matrices (3, 4, ...) broadcast
    against the rays) of the static ``kinds`` present; t = inf where not, or not below t_max."""
    t: ArrayLike
    t, v = INF, jnp.float32(0)
    if SurfaceKind.LINEAR_CURVE in kinds:
        tl, vl = _linear(to_world, o, d)
        mine = (kind == SurfaceKind.LINEAR_CURVE) & (tl < t_max)
        t, v = jnp.where(mine, tl, t), jnp.where(mine, vl, v)
    if SurfaceKind.BSPLINE_CURVE in kinds:
        tb, vb = _bspline(to_world, to_local, o, d, t_max)
        mine = kind == SurfaceKind.BSPLINE_CURVE
        t, v = jnp.where(mine, tb, t), jnp.where(mine, vb, v)
    return t, v


# ---------------------------------------------------------------------------------------------
# Traced: surface data.

def _local_frame(tangent: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mitsuba's curve ``local_frame``: (v_rot, v_rad) around the unit tangent, guided by +z.

    v_rot = normalize(z - tangent tangent_z), written as (-t_x t_z, -t_y t_z, t_x^2 + t_y^2): for a
    unit tangent the same vector, but exact where t_z rounds near 1 (compiled, XLA's rsqrt leaves
    a vertical tangent's t_z at 1 - 2^-24, and z - t t_z at rounding noise). Singular, (0, 1, 0),
    where the tangent is along z (Mitsuba: |t_z| == 1)."""
    tx, ty, tz = tangent[0], tangent[1], tangent[2]
    across = tx * tx + ty * ty
    singular = across == 0
    v_rot = vm.normalize(jnp.stack([-tx * tz, -ty * tz, jnp.where(singular, 1.0, across)]))
    y_axis = jnp.broadcast_to(jnp.array([0.0, 1.0, 0.0], jnp.float32).reshape(3, *([1] * (tangent.ndim - 1))),
                              tangent.shape)
    v_rot = vm.select(singular, y_axis, v_rot)
    return v_rot, vm.cross(v_rot, tangent)


def _uv(rad_unit: jax.Array, tangent: jax.Array, v_local: jax.Array, segment: jax.Array,
        segments: jax.Array) -> jax.Array:
    v_rot, v_rad = _local_frame(tangent)
    u = elementary.atan2(vm.dot(v_rot, rad_unit), vm.dot(v_rad, rad_unit))
    u = jnp.where(u < 0, u + TWO_PI, u) * INV_TWO_PI
    return jnp.stack([u, (v_local + segment) / segments])


def surface(kind: jax.Array, kinds: tuple[int, ...], p: jax.Array, to_world: jax.Array, to_local: jax.Array,
            v_local: jax.Array) -> SurfacePoint | None:
    """The ``SurfacePoint`` at points p (3, N) of curve hits (v_local from the hit), as Mitsuba's
    ``LinearCurve`` / ``BSplineCurve::compute_surface_interaction`` (no uv partials: zero)."""
    zero = jnp.zeros_like(p)
    out: SurfacePoint | None = None
    if SurfaceKind.LINEAR_CURVE in kinds:
        p0, p1 = to_world[:, 0], to_world[:, 1]
        c = p0 * (1.0 - v_local) + p1 * v_local
        n = vm.normalize(p - c)
        uv = _uv(n, vm.normalize(p1 - p0), v_local, to_world[0, 3], to_world[1, 3])
        out = SurfacePoint(p=p, ng=n, ns=n, uv=uv, dp_du=zero, dp_dv=zero)
    if SurfaceKind.BSPLINE_CURVE in kinds:
        c, dc, ddc, r, dr = _spline(to_world, to_local, v_local)
        rad = p - c
        n = vm.normalize((vm.dot(dc, dc) - vm.dot(rad, ddc)) * rad - (dr * r) * dc)
        uv = _uv(vm.normalize(rad), vm.normalize(dc), v_local, to_local[1, 1], to_local[2, 1])
        spline = SurfacePoint(p=p, ng=n, ns=n, uv=uv, dp_du=zero, dp_dv=zero)
        out = spline if out is None else select_point(kind == SurfaceKind.BSPLINE_CURVE, spline, out)
    return out
