"""NVIDIA Warp's BVH as a triangle intersection engine (CUDA when Warp sees a GPU, else CPU).

The ``wp.Bvh`` is built once per Geometry and registered with ``tracer.accel.host``; rays
reach it through that module's host callback as rows and are answered by one Warp kernel launch
(one thread per ray walks Warp's BVH and tests triangles watertight). Warp answers each ray on
its own, so results do not depend on how a batch is split.

Not done: Warp's JAX FFI (``warp.jax_kernel``) would keep rays on the GPU instead of crossing to
the host; it needs a GPU to be tested, and none has been available.
"""
import threading

import numpy as np

from tracer.accel import host

__all__ = ["available", "build", "MISSING"]

MISSING = "the 'warp' intersection backend needs NVIDIA Warp: pip install 'jaxfarm[warp]' (warp-lang)"

_lock = threading.Lock()
_kernels = None


def available() -> bool:
    try:
        import warp  # noqa: F401
    except ImportError:
        return False
    return True


def _warp():
    """Warp, initialized quietly once, and its two query kernels."""
    global _kernels
    try:
        import warp as wp
    except ImportError as e:
        raise ImportError(MISSING) from e
    with _lock:
        if _kernels is None:
            wp.config.quiet = True
            wp.init()
            _kernels = _define_kernels(wp)
    return wp, _kernels


def _define_kernels(wp):
    # Warp's own mesh_query_ray is not watertight (rays slip through shared edges), so the
    # kernels walk Warp's BVH and test triangles with the watertight test of tracer.shapes.intersect:
    # the ray's dominant axis kz, a shear, and edge-function signs from compared products.
    # (Warp reads the kernels' annotations at run time; mypy cannot resolve types on the module
    # passed in as ``wp``, hence the ignores.)
    @wp.func
    def watertight_t(a: wp.vec3, b: wp.vec3, c: wp.vec3, k: wp.vec3i, s: wp.vec3):  # type: ignore[name-defined]
        kx, ky, kz = k[0], k[1], k[2]
        sx, sy, sz = s[0], s[1], s[2]
        ax = a[kx] - sx * a[kz]
        ay = a[ky] - sy * a[kz]
        bx = b[kx] - sx * b[kz]
        by = b[ky] - sy * b[kz]
        cx = c[kx] - sx * c[kz]
        cy = c[ky] - sy * c[kz]
        pu, qu = cx * by, cy * bx
        pv, qv = ax * cy, ay * cx
        pw, qw = bx * ay, by * ax
        pos = (pu > qu) or (pv > qv) or (pw > qw)
        neg = (pu < qu) or (pv < qv) or (pw < qw)
        eu, ev, ew = pu - qu, pv - qv, pw - qw
        det = eu + ev + ew
        t = float(-1.0)
        if pos != neg and ((pos and det > 0.0) or (neg and det < 0.0)):
            t = (eu * (sz * a[kz]) + ev * (sz * b[kz]) + ew * (sz * c[kz])) / det
        return t

    @wp.func
    def shear_axes(d: wp.vec3):  # type: ignore[name-defined]
        ad = wp.vec3(wp.abs(d[0]), wp.abs(d[1]), wp.abs(d[2]))
        kz = int(2)
        if ad[0] >= ad[1] and ad[0] >= ad[2]:
            kz = 0
        elif ad[1] >= ad[2]:
            kz = 1
        kx = (kz + 1) % 3
        ky = (kx + 1) % 3
        if d[kz] < 0.0:
            kx, ky = ky, kx
        return wp.vec3i(kx, ky, kz)

    @wp.func
    def shear(d: wp.vec3, k: wp.vec3i):  # type: ignore[name-defined]
        """(d_kx / d_kz, d_ky / d_kz, 1 / d_kz): the ray's shear along its axes ``k``."""
        sz = 1.0 / d[k[2]]
        return wp.vec3(d[k[0]] * sz, d[k[1]] * sz, sz)

    @wp.kernel
    def closest(bvh: wp.uint64, p0: wp.array(dtype=wp.vec3),  # type: ignore[name-defined]
                p1: wp.array(dtype=wp.vec3),
                p2: wp.array(dtype=wp.vec3), o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3),
                t_max: wp.array(dtype=wp.float32), prim: wp.array(dtype=wp.int32), t: wp.array(dtype=wp.float32)):
        i = wp.tid()
        oi, di = o[i], d[i]
        k = shear_axes(di)
        s = shear(di, k)
        best = float(t_max[i])
        best_prim = int(-1)
        query = wp.bvh_query_ray(bvh, oi, di)
        j = int(0)
        while wp.bvh_query_next(query, j, best):
            tj = watertight_t(p0[j] - oi, p1[j] - oi, p2[j] - oi, k, s)
            if tj > 0.0 and tj < best:
                best = tj
                best_prim = j
        prim[i] = best_prim
        t[i] = best

    @wp.kernel
    def anyhit(bvh: wp.uint64, p0: wp.array(dtype=wp.vec3),  # type: ignore[name-defined]
               p1: wp.array(dtype=wp.vec3),
               p2: wp.array(dtype=wp.vec3), o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3),
               t_max: wp.array(dtype=wp.float32), blocked: wp.array(dtype=wp.int32)):
        i = wp.tid()
        oi, di = o[i], d[i]
        k = shear_axes(di)
        s = shear(di, k)
        limit = float(t_max[i])
        found = int(0)
        query = wp.bvh_query_ray(bvh, oi, di)
        j = int(0)
        while found == 0 and wp.bvh_query_next(query, j, limit):
            tj = watertight_t(p0[j] - oi, p1[j] - oi, p2[j] - oi, k, s)
            if tj > 0.0 and tj < limit:
                found = 1
        blocked[i] = found

    return closest, anyhit


def _device(wp):
    return "cuda:0" if wp.get_cuda_device_count() > 0 else "cpu"


def build(p0: np.ndarray, p1: np.ndarray, p2: np.ndarray) -> host.HostScene:
    """Host: Warp's BVH over triangles p0, p1, p2 (3, T), as a ``host.HostScene``."""
    wp, _ = _warp()
    device = _device(wp)
    corners = [np.ascontiguousarray(p.T, np.float32) for p in (p0, p1, p2)]
    lo = np.minimum(np.minimum(corners[0], corners[1]), corners[2])
    hi = np.maximum(np.maximum(corners[0], corners[1]), corners[2])
    vec3 = lambda a: wp.array(a, dtype=wp.vec3, device=device)
    # Warp's ray-box test is not conservative: rays through the shared edges of flat triangles
    # missed both boxes (21 of 3,892 on the fan test). Padded boxes only cost a little speed.
    pad = 1e-5 * (np.abs(lo) + np.abs(hi)) + 1e-30
    bvh = wp.Bvh(vec3(lo - pad), vec3(hi + pad))
    return host.HostScene(_Engine, (bvh, [vec3(c) for c in corners], device))


class _Engine:
    """Warp's answers in ``tracer.accel.host``'s terms."""

    @staticmethod
    def _launch(kernel, scene, o, d, t_max, outputs):
        wp, _ = _warp()
        bvh, corners, device = scene
        rows = lambda a: wp.array(np.ascontiguousarray(a), dtype=wp.vec3, device=device)
        wp.launch(kernel, dim=t_max.shape[0], device=device,
                  inputs=[bvh.id, *corners, rows(o), rows(d), wp.array(t_max, dtype=wp.float32, device=device)],
                  outputs=outputs)
        return [a.numpy() for a in outputs]

    @staticmethod
    def closest(scene, o, d, t_max):
        wp, (closest, _) = _warp()
        n, device = t_max.shape[0], scene[2]
        outputs = [wp.empty(n, dtype=wp.int32, device=device), wp.empty(n, dtype=wp.float32, device=device)]
        return tuple(_Engine._launch(closest, scene, o, d, t_max, outputs))

    @staticmethod
    def occluded(scene, o, d, t_max):
        wp, (_, anyhit) = _warp()
        n, device = t_max.shape[0], scene[2]
        (blocked,) = _Engine._launch(anyhit, scene, o, d, t_max, [wp.empty(n, dtype=wp.int32, device=device)])
        return blocked != 0
