"""Emitter tables for the tests, and independent references: ray casts and analytic irradiance."""
import jax
import numpy as np

from tests.helpers.rays import cylinder64
from tracer import emitters as E
from tracer.io.emitters import EmitterTableBuilder
from tracer.io.xml import parse_string
from tracer.textures import TextureTableBuilder

BOX = (np.array([-1.0, -1.0, -1.0]), np.array([1.0, 1.0, 1.0]))
RADIANCE = np.array([1.0, 2.0, 3.0])


def node(xml):
    """The first plugin of a Mitsuba XML fragment."""
    return parse_string(f'<scene version="3.0.0">{xml}</scene>').children[0]


def area_node(radiance="1, 2, 3", extra=""):
    return node(f'<emitter type="area"><rgb name="radiance" value="{radiance}"/>{extra}</emitter>')


def no_textures():
    return TextureTableBuilder().build()


def quad(corners):
    """Two triangles (p0, e1, e2) of the planar quad with corners (4, 3) in order."""
    c = np.asarray(corners, np.float64)
    faces = np.array([[0, 1, 2], [0, 2, 3]])
    p = c[faces]
    return p[:, 0], p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]


def sphere_to_world(center, radius):
    m = np.eye(4)
    m[:3, :3] *= radius
    m[:3, 3] = center
    return m


def table(*adders, bounds=BOX, load_image=None):
    """Build a table from callables ``adder(builder)``."""
    b = EmitterTableBuilder(load_image=load_image)
    for add in adders:
        add(b)
    return b.build(*bounds)


# ---------------------------------------------------------------- ray casts (numpy, float64)
def hit_triangles(o, d, triangles):
    """Nearest hit (t (N,), p (3, N), face normal (3, N)) of rays o (3,) + t d (3, N); t = inf for a miss."""
    p0, e1, e2 = (np.asarray(a, np.float64) for a in triangles)
    n_rays = d.shape[1]
    best_t = np.full(n_rays, np.inf)
    best_n = np.zeros((3, n_rays))
    for a, b, c in zip(p0, e1, e2):
        pvec = np.cross(d.T, c).T
        det = b @ pvec
        inv = 1.0 / np.where(np.abs(det) > 1e-12, det, np.inf)
        s = np.asarray(o, np.float64) - a
        u = (s @ pvec) * inv
        q = np.cross(s, b)
        v = (d.T @ q) * inv
        t = (c @ q) * inv
        ok = (u >= 0) & (v >= 0) & (u + v <= 1) & (t > 0) & (t < best_t)
        best_t = np.where(ok, t, best_t)
        n = np.cross(b, c)
        best_n[:, ok] = (n / np.linalg.norm(n))[:, None]
    return best_t, np.asarray(o)[:, None] + d * np.where(np.isfinite(best_t), best_t, 0.0), best_n


def hit_sphere(o, d, center, radius, inside=False):
    """Hit of rays with a sphere: the near root from outside, the far root from inside."""
    oc = np.asarray(o, np.float64) - center
    b = d.T @ oc
    c = oc @ oc - radius * radius
    disc = b * b - c
    root = np.sqrt(np.maximum(disc, 0.0))
    t = -b + root if inside else -b - root
    t = np.where((disc >= 0) & (t > 0), t, np.inf)
    p = np.asarray(o)[:, None] + d * np.where(np.isfinite(t), t, 0.0)
    return t, p, (p - np.asarray(center)[:, None]) / radius


def hit_disk(o, d, to_world):
    """Hit of rays with the unit disk mapped by to_world (4x4); normal = inverse transpose of +z."""
    inv = np.linalg.inv(to_world)
    lo = inv[:3, :3] @ o + inv[:3, 3]
    ld = inv[:3, :3] @ d
    t = -lo[2] / np.where(ld[2] != 0, ld[2], np.inf)
    local = lo[:, None] + ld * t
    ok = (t > 0) & (local[0] ** 2 + local[1] ** 2 <= 1)
    t = np.where(ok, t, np.inf)
    n = inv[2, :3] / np.linalg.norm(inv[2, :3])
    p = np.asarray(o)[:, None] + d * np.where(np.isfinite(t), t, 0.0)
    return t, p, np.broadcast_to(n[:, None], d.shape).copy()


def hit_cylinder(o, d, to_world, flip=False):
    """First hit (t, p, normal) of rays o (3,) + t d (3, N) with the unit tube mapped by to_world
    (4x4, not mirroring); the normal is the outward one, inward with ``flip``."""
    o = np.asarray(o, np.float64)
    t, local, _ = cylinder64(to_world, np.broadcast_to(o[:, None], d.shape), d)
    p = o[:, None] + d * np.where(np.isfinite(t), t, 0.0)
    n = np.linalg.inv(to_world)[:3, :3].T @ np.stack([local[0], local[1], np.zeros_like(t)])
    n = n / np.linalg.norm(n, axis=0)
    return t, p, -n if flip else n


# ---------------------------------------------------------------- analytic irradiance
def polygon_irradiance(x, normal, corners, radiance):
    """Irradiance at x (receiver normal) from a Lambertian polygon facing x (Lambert's formula):
    E = L/2 sum_i angle_i (n . unit(r_i x r_i+1)), all of the polygon above the receiver's horizon."""
    r = [np.asarray(c, np.float64) - x for c in corners]
    total = 0.0
    for a, b in zip(r, r[1:] + r[:1]):
        a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
        g = np.cross(a, b)
        total += np.arccos(np.clip(a @ b, -1, 1)) * (g @ normal) / np.linalg.norm(g)
    return 0.5 * radiance * abs(total)


# ---------------------------------------------------------------- jitted entry points
sample_direction = jax.jit(E.sample_direction)
pdf_direction = jax.jit(E.pdf_direction)
eval_environment = jax.jit(E.eval_environment)
