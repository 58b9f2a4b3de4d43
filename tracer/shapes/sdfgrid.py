"""Mitsuba's ``sdfgrid`` shape: a signed distance function sampled on a grid, its zero set the surface.

The grid's values sit at the corners of its voxels; the grid spans the object-space unit cube
(Mitsuba's ``sdfgrid.cpp``: a grid of R voxel corners per axis has R - 1 voxels of size
1 / (R - 1)), and inside a voxel the function is the trilinear interpolation of its 8 corners.
As in Mitsuba, every voxel whose corners do not all have the same sign is one primitive, in
z, y, x order, bounded by its tight box (Hansson-Soderlund and Akenine-Moller 2023: the
corners that are zero and the points where the edges cross zero) and intersected analytically:
the trilinear function along the ray inside the voxel is a cubic in t (Hansson-Soderlund, Evans
and Akenine-Moller 2022), whose first root in the voxel is bracketed by the roots of its
derivative and refined by regula falsi (Marmitt et al. 2004), 1e-5 or 51 steps, as there.

Each voxel is one analytic primitive of the geometry's tables (``SurfaceKind.SDF_VOXEL``):

* to_world (3, 4): the affine map from the primitive's space (world, or a shape group's object
  space) to the voxel's own, where it is the unit cube (Mitsuba's ``to_voxel * to_object``);
* to_local (3, 4), column by column: the corner values f000, f100, f010, f110, f001, f101, f011,
  f111 (x fastest), then the voxel's grid position x, y, z and the shape's grid (a row of
  ``Geometry.sdf_grids``: its first value in ``Geometry.sdf_values``, its R per axis, its normals).

Normals are Mitsuba's: the geometric normal is the gradient of the interpolated function (its
difference across the voxel that holds the point); the shading normal is that (``normals`` =
"analytic") or, by default ("smooth"), the trilinear blend of the 8 voxel gradients about the
point (Hansson-Soderlund et al. 2022). There are no uvs and no uv partials (the frame's tangent
is ``coordinate_system(n)``, as Mitsuba's fallback), and an ``sdfgrid`` carries no area light.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from tracer import vecmath as vm

__all__ = ["Voxels", "voxels", "bounds", "intersect", "surface", "GRID_COLUMNS"]

INF = np.float32(np.inf)
SOLVE_STEPS = 10        # Illinois steps: the root to float precision (Mitsuba: up to 51 of regula falsi)
GRID_COLUMNS = 5        # a row of Geometry.sdf_grids: first value, R x, R y, R z, smooth normals (1/0)


# ---------------------------------------------------------------------------------------------
# Host: the voxels of a grid.

class Voxels(NamedTuple):
    """The primitives of one ``sdfgrid``: per occupied voxel, its (4, 4) to_world and to_local."""

    to_world: np.ndarray   # (V, 4, 4) float64: primitive space -> the voxel's unit cube
    to_local: np.ndarray   # (V, 4, 4) float64: corner values, grid position and grid (see the module)


def _corners(values: np.ndarray) -> np.ndarray:
    """(8, Z-1, Y-1, X-1) corner values of every voxel of ``values`` (Z, Y, X), x fastest."""
    z, y, x = values.shape
    return np.stack([values[dz:dz + z - 1, dy:dy + y - 1, dx:dx + x - 1]
                     for dz in (0, 1) for dy in (0, 1) for dx in (0, 1)])


def voxels(values: np.ndarray, to_world: np.ndarray, grid: int) -> Voxels:
    """Host: the occupied voxels of the grid ``values`` (Z, Y, X) float32 (each axis >= 2) of a
    shape whose object-to-world (or to its group's space) is ``to_world`` (4, 4), as row
    ``grid`` of the geometry's grid table. Mitsuba's order: z, then y, then x."""
    f = _corners(values)
    occupied = ~(np.all(f > 0, axis=0) | np.all(f < 0, axis=0))
    z, y, x = np.nonzero(occupied)  # C order: z slowest, x fastest, as Mitsuba's loops
    n = z.size
    res = np.array(values.shape[::-1], np.float64)  # R x, y, z
    to_object = np.linalg.inv(np.asarray(to_world, np.float64))
    scale = np.diag([*(res - 1.0), 1.0])
    m = np.broadcast_to(scale @ to_object, (n, 4, 4)).copy()
    m[:, :3, 3] -= np.stack([x, y, z], axis=1)  # the voxel's corner at the origin
    local = np.zeros((n, 4, 4))
    cols = np.concatenate([f[:, z, y, x], np.stack([x, y, z]), np.full((1, n), grid)]).T  # (n, 12)
    local[:, :3, :4] = cols.reshape(n, 4, 3).transpose(0, 2, 1)  # column by column
    local[:, 3, 3] = 1.0
    return Voxels(m, local)


def _tight_boxes(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) (3, V) in each voxel's unit cube: Mitsuba's ``compute_tight_bbox`` from the corner
    values f (8, V) (x fastest): the zero corners and the zero crossings of the 12 edges."""
    bit = lambda c: np.array([(c >> a) & 1 for a in range(3)], np.float64)  # corner -> (x, y, z)
    zero = f == 0
    lo, hi = np.ones((3, f.shape[1])), np.zeros((3, f.shape[1]))
    for c in range(8):
        at = bit(c)[:, None]
        lo = np.where(zero[c], np.minimum(lo, at), lo)
        hi = np.where(zero[c], np.maximum(hi, at), hi)
    for c1 in range(8):
        for axis in range(3):
            if c1 & (1 << axis):
                continue
            c2 = c1 | (1 << axis)
            crosses = (f[c1] * f[c2] <= 0) & (f[c1] != f[c2])
            denom = np.where(crosses, f[c1] - f[c2], 1.0)
            point = bit(c1)[:, None] + (f[c1] / denom) * (bit(c2) - bit(c1))[:, None]
            lo = np.where(crosses, np.minimum(lo, point), lo)
            hi = np.where(crosses, np.maximum(hi, point), hi)
    return lo, hi


def bounds(to_world: np.ndarray, to_local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host: boxes (lo, hi) (3, V) float64 in the primitives' space of voxels given as the
    geometry's columns (3, 4, V): each voxel's tight box, by its 8 corners mapped back."""
    m = np.zeros((to_world.shape[2], 4, 4))
    m[:, :3, :4] = np.asarray(to_world, np.float64).transpose(2, 0, 1)
    m[:, 3, 3] = 1.0
    back = np.linalg.inv(m)
    f = np.asarray(to_local, np.float64).transpose(1, 0, 2).reshape(12, -1)[:8]
    lo, hi = _tight_boxes(f)
    corners = [np.where(np.array([sx, sy, sz])[:, None] > 0, hi, lo) for sx in (0, 1) for sy in (0, 1) for sz in (0, 1)]
    world = [np.einsum("vab,bv->av", back[:, :3, :3], c) + back[:, :3, 3].T for c in corners]
    return np.minimum.reduce(world), np.maximum.reduce(world)


# ---------------------------------------------------------------------------------------------
# Traced: intersection.

def _unit_cube(o: jax.Array, d: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(hit, t_enter, t_exit) of rays (3, ...) with the unit cube (slabs; an axis the ray runs
    along counts where the origin lies inside it)."""
    inv = 1.0 / jnp.where(d != 0, d, 1.0)
    t0, t1 = -o * inv, (1.0 - o) * inv
    along = d == 0
    inside = (o > 0) & (o < 1)
    near = jnp.where(along, -INF, jnp.minimum(t0, t1))
    far = jnp.where(along, INF, jnp.maximum(t0, t1))
    t_enter = jnp.maximum(jnp.maximum(near[0], near[1]), near[2])
    t_exit = jnp.minimum(jnp.minimum(far[0], far[1]), far[2])
    ok = jnp.all(~along | inside, axis=0) & jnp.any(~along, axis=0) & (t_exit >= t_enter)
    return ok, t_enter, t_exit


def _solve_quadratic(a, b, c):
    """Mitsuba's ``math::solve_quadratic``: (solvable, x0 <= x1)."""
    linear = a == 0
    x_lin = -c / jnp.where(b != 0, b, 1.0)
    disc = b * b - 4.0 * a * c
    root = jnp.sqrt(jnp.maximum(disc, 0.0))
    temp = -0.5 * (b + jnp.copysign(root, b))
    x0p = temp / jnp.where(linear, 1.0, a)
    x1p = c / jnp.where(temp != 0, temp, 1.0)
    x0 = jnp.where(linear, x_lin, jnp.minimum(x0p, x1p))
    x1 = jnp.where(linear, x_lin, jnp.maximum(x0p, x1p))
    return (linear & (b != 0)) | (~linear & (disc >= 0)), x0, x1


def _solve_cubic(t_end, c3, c2, c1, c0):
    """Mitsuba's ``sdf_solve_cubic`` on [0, t_end]: (found, t) of the first root of the cubic."""
    f = lambda t: -(((c3 * t + c2) * t + c1) * t + c0)
    has_roots, r0, r1 = _solve_quadratic(3.0 * c3, 2.0 * c2, c1)
    t_near, t_far = jnp.zeros_like(t_end), t_end
    for r in (r0, r1):  # a root of the derivative splits the bracket where the sign changes before it
        use = has_roots & (t_near <= r) & (r <= t_far)
        before = f(t_near) * f(r) <= 0
        t_far = jnp.where(use & before, r, t_far)
        t_near = jnp.where(use & ~before, r, t_near)
    f_near, f_far = f(t_near), f(t_far)
    found = f_near * f_far <= 0

    def step(_, state):
        # Illinois: regula falsi whose retained end's value is halved when it is kept twice running,
        # so that both ends close in (Mitsuba's plain regula falsi keeps one end and creeps).
        t, t_near, t_far, f_near, f_far, side = state
        t = t_near + (t_far - t_near) * (-f_near / (f_far - f_near))
        f_t = f(t)
        left = f_t * f_near <= 0  # the root lies in [t_near, t]
        f_near = jnp.where(left & (side == 1), 0.5 * f_near, f_near)
        f_far = jnp.where(~left & (side == -1), 0.5 * f_far, f_far)
        t_far, f_far = jnp.where(left, t, t_far), jnp.where(left, f_t, f_far)
        t_near, f_near = jnp.where(left, t_near, t), jnp.where(left, f_near, f_t)
        return t, t_near, t_far, f_near, f_far, jnp.where(left, 1, -1)

    state = (jnp.zeros_like(t_near), t_near, t_far, f_near, f_far, jnp.zeros_like(t_near, jnp.int32))
    t = jax.lax.fori_loop(0, SOLVE_STEPS, step, state)[0]
    return found, t


def corner_values(to_local: jax.Array) -> list[jax.Array]:
    """The 8 corner values (f000, f100, ..., f111) packed in to_local (3, 4, ...)."""
    return [to_local[k % 3, k // 3] for k in range(8)]


def intersect(to_world: jax.Array, to_local: jax.Array, o: jax.Array, d: jax.Array, t_max: ArrayLike) -> jax.Array:
    """t of rays o, d (3, ...) meeting the zero set of voxels (matrices (3, 4, ...) broadcast against
    the rays) at 0 < t < t_max; inf where not (Mitsuba's ``ray_intersect_preliminary``)."""
    o_v, d_v = vm.transform_point(to_world, o), vm.transform_vector(to_world, d)
    ok, t_enter, t_exit = _unit_cube(o_v, d_v)
    t_begin = jnp.maximum(t_enter, 0.0)
    ok = ok & (t_begin < t_exit)
    s000, s100, s010, s110, s001, s101, s011, s111 = corner_values(to_local)
    ox, oy, oz = o_v + t_begin * d_v
    dx, dy, dz = d_v
    a = s101 - s001
    k0, k1, k2 = s000, s100 - s000, s010 - s000
    k3 = s110 - s010 - k1
    k4 = k0 - s001
    k5 = k1 - a
    k6 = k2 - (s011 - s001)
    k7 = k3 - (s111 - s011 - a)
    m0, m1, m2 = ox * oy, dx * dy, ox * dy + oy * dx
    m3, m4, m5 = k5 * oz - k1, k6 * oz - k2, k7 * oz - k3
    c0 = (k4 * oz - k0) + (ox * m3 + (oy * m4 + m0 * m5))
    c1 = (dx * m3 + dy * m4) + m2 * m5 + dz * (k4 + (k5 * ox + (k6 * oy + k7 * m0)))
    c2 = m1 * m5 + dz * (k5 * dx + (k6 * dy + k7 * m2))
    c3 = k7 * m1 * dz
    found, t = _solve_cubic(jnp.where(ok, t_exit - t_begin, 0.0), c3, c2, c1, c0)
    t = t_begin + t
    hit = ok & found & (t > 0) & (t < t_max)
    return jnp.where(hit, t, INF)


# ---------------------------------------------------------------------------------------------
# Traced: surface data.

def _face_values(values: jax.Array, grid: tuple[jax.Array, ...], axis: int, at: jax.Array,
                 p: jax.Array) -> jax.Array:
    """The interpolated function at grid coordinate ``at`` (an integer, clamped to the grid) on
    ``axis`` and at p's (3, N) other two coordinates (bilinear, clamped as Mitsuba's texture)."""
    first, res = grid[0], grid[1:4]
    u, v = [a for a in range(3) if a != axis]
    fixed = jnp.clip(at, 0, res[axis] - 1)
    lo_u, lo_v = jnp.floor(p[u]), jnp.floor(p[v])
    wu, wv = p[u] - lo_u, p[v] - lo_v
    total = jnp.zeros_like(p[0])
    for du, weight_u in ((0, 1.0 - wu), (1, wu)):
        for dv, weight_v in ((0, 1.0 - wv), (1, wv)):
            index = {axis: fixed, u: jnp.clip(lo_u.astype(jnp.int32) + du, 0, res[u] - 1),
                     v: jnp.clip(lo_v.astype(jnp.int32) + dv, 0, res[v] - 1)}
            flat = first + index[0] + res[0] * (index[1] + res[1] * index[2])
            total = total + weight_u * weight_v * values[flat]
    return total


def surface(p: jax.Array, to_world: jax.Array, to_local: jax.Array, values: jax.Array,
            grids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(ng, ns) (3, N), unit, in the primitives' space, of hits p (3, N) on voxels whose columns
    (3, 4, N) are to_world and to_local; ``values`` and ``grids``: the geometry's grid tables."""
    grid_row = grids[to_local[2, 3].astype(jnp.int32)]  # (N, GRID_COLUMNS)
    grid = tuple(grid_row[:, k] for k in range(GRID_COLUMNS))
    res = jnp.stack(grid[1:4]).astype(jnp.float32)  # R per axis
    position = jnp.stack([to_local[2, 2], to_local[0, 3], to_local[1, 3]])
    g = vm.transform_point(to_world, p) + position  # grid coordinates: object space times R - 1
    # Normals to world space: the transposed linear part of to_world (transform_normal), over
    # R - 1 per axis (grid coordinates -> object space); only directions matter.
    out = lambda n: vm.normalize(vm.transform_normal(to_world, n))
    # Geometric: the difference of the function across the voxel holding p, per axis.
    cell = jnp.trunc(g).astype(jnp.int32)
    delta = jnp.stack([_face_values(values, grid, a, cell[a] + 1, g) - _face_values(values, grid, a, cell[a], g)
                       for a in range(3)])
    ng = out(delta)
    # Smooth: the 8 voxels about p, each its own difference (in object units, normalized), blended.
    corner = jnp.round(g).astype(jnp.int32)  # the voxel corner nearest p: the 8 voxels share it
    face = [[_face_values(values, grid, a, corner[a] + k, g) for k in (-1, 0, 1)] for a in range(3)]
    slope = [[(face[a][k + 1] - face[a][k]) * (res[a] - 1.0) for k in (0, 1)] for a in range(3)]
    valid = [[corner[a] - 1 + k >= 0 for k in (0, 1)] for a in range(3)]  # voxels below the grid are left out
    weight = g - corner.astype(jnp.float32) + 0.5  # within the 8 voxels' centers
    w = [jnp.where(~valid[a][0], 1.0, weight[a]) for a in range(3)]  # (Mitsuba's invalid_x_0, ...)
    blend = jnp.zeros_like(g)
    for kz in (0, 1):
        for ky in (0, 1):
            for kx in (0, 1):
                n = vm.normalize(jnp.stack([slope[0][kx], slope[1][ky], slope[2][kz]]))
                inside = valid[0][kx] & valid[1][ky] & valid[2][kz]
                share = ((w[0] if kx else 1.0 - w[0]) * (w[1] if ky else 1.0 - w[1]) * (w[2] if kz else 1.0 - w[2]))
                blend = blend + jnp.where(inside, share, 0.0) * jnp.where(inside, n, 0.0)
    ns = out(blend / (res - 1.0))
    return ng, vm.select(grid[4] > 0, ns, ng)

