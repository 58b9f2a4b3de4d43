"""Generate the meshes, textures and environment map used by the scenes in ``examples/``.

Everything is procedural and seeded, so running this again rewrites the same files; the output
is committed under ``examples/assets/`` and nothing is downloaded.

    python scripts/make_example_assets.py [--out examples/assets]

Files (and which format feature each one exercises):

    torus.obj   OBJ with v/vt/vn                      2,304 triangles
    lamp.obj    OBJ with positions only (flat 16-gon)     16 triangles, an area-light mesh
    blob.ply    binary PLY with normals and uvs      ~16,000 triangles, the benchmark mesh
    rock.ply    ascii PLY with positions only            320 triangles, for face_normals=true
    checker.png 8-bit sRGB: R = u, G = v ramps, B = checker (orientation is visible)
    noise.jpg   8-bit sRGB JPEG (quality 95, 4:4:4 so decoders agree closely)
    marble.png  8-bit, meant to be read with raw=true
    tiles.exr   float32 linear RGB, 16x16
    sky.exr     float32 lat-long environment map 64x32 with a small bright sun
"""
import argparse
import pathlib

import imageio.v3 as iio
import numpy as np
import OpenEXR

ROOT = pathlib.Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- meshes

def torus(major=1.0, minor=0.35, nu=48, nv=24):
    """Torus around the y axis; the seam vertices are duplicated so uvs stay continuous."""
    u = np.linspace(0.0, 1.0, nu + 1)
    v = np.linspace(0.0, 1.0, nv + 1)
    uu, vv = np.meshgrid(u, v, indexing="ij")
    phi, theta = 2 * np.pi * uu, 2 * np.pi * vv
    ring = major + minor * np.cos(theta)
    pos = np.stack([ring * np.cos(phi), minor * np.sin(theta), -ring * np.sin(phi)], -1)
    nrm = np.stack([np.cos(theta) * np.cos(phi), np.sin(theta), -np.cos(theta) * np.sin(phi)], -1)
    uv = np.stack([uu, vv], -1)
    faces = _grid_faces(nu, nv)
    return pos.reshape(-1, 3), nrm.reshape(-1, 3), uv.reshape(-1, 2), faces


def _grid_faces(nu, nv, skip_degenerate_rows=False):
    """Two triangles per cell of an (nu+1) x (nv+1) vertex grid, wound like (u, v)."""
    i, j = np.meshgrid(np.arange(nu), np.arange(nv), indexing="ij")
    a = i * (nv + 1) + j
    b = (i + 1) * (nv + 1) + j
    c, d = b + 1, a + 1
    tri1 = np.stack([a, b, c], -1)
    tri2 = np.stack([a, c, d], -1)
    if skip_degenerate_rows:  # at the poles of a latitude-longitude grid one triangle collapses
        first, last = j == 0, j == nv - 1
        return np.concatenate([tri1[~first], tri2[~last]]).astype(np.int32)
    return np.concatenate([tri1.reshape(-1, 3), tri2.reshape(-1, 3)]).astype(np.int32)


def blob(nu=128, nv=64):
    """A lumpy, bunny-sized blob: a latitude-longitude sphere with smooth radial bumps.

    u runs around the y axis, v from the north pole (v = 0) to the south pole.
    """
    u = np.linspace(0.0, 1.0, nu + 1)
    v = np.linspace(0.0, 1.0, nv + 1)
    uu, vv = np.meshgrid(u, v, indexing="ij")
    phi, theta = 2 * np.pi * uu, np.pi * vv
    d = np.stack([np.sin(theta) * np.cos(phi), np.cos(theta), -np.sin(theta) * np.sin(phi)], -1)
    r = (1.0 + 0.18 * np.sin(3 * phi) * np.sin(theta) ** 2 + 0.12 * np.cos(5 * theta)
         + 0.08 * np.sin(2 * phi + 4 * theta) * np.sin(theta))
    pos = d * r[..., None] * np.array([0.9, 0.75, 0.8])
    pos[..., 1] += 0.1 * np.sin(theta) ** 2 * np.cos(phi)  # lean a little forward
    # u runs clockwise seen from +y here, so the grid's winding is reversed to face outward.
    faces = np.ascontiguousarray(_grid_faces(nu, nv, skip_degenerate_rows=True)[:, ::-1])
    pos = pos.reshape(-1, 3)
    # Weld seam and pole duplicates so the normals there are shared, then scatter back.
    weld = np.arange(nu + 1)[:, None] * (nv + 1) + np.arange(nv + 1)[None, :]
    weld[nu, :] = weld[0, :]
    weld[:, 0] = weld[0, 0]
    weld[:, nv] = weld[0, nv]
    nrm = _vertex_normals(pos, faces, weld.reshape(-1))
    return pos, nrm, np.stack([uu, vv], -1).reshape(-1, 2), faces


def _vertex_normals(pos, faces, weld):
    """Area-weighted vertex normals, accumulated on welded vertices."""
    p0, p1, p2 = (pos[faces[:, k]] for k in range(3))
    fn = np.cross(p1 - p0, p2 - p0)
    acc = np.zeros_like(pos)
    for k in range(3):
        np.add.at(acc, weld[faces[:, k]], fn)
    acc = acc[weld]
    return acc / np.linalg.norm(acc, axis=-1, keepdims=True)


def icosphere(subdivisions):
    t = (1 + 5 ** 0.5) / 2
    verts = [(-1, t, 0), (1, t, 0), (-1, -t, 0), (1, -t, 0), (0, -1, t), (0, 1, t),
             (0, -1, -t), (0, 1, -t), (t, 0, -1), (t, 0, 1), (-t, 0, -1), (-t, 0, 1)]
    faces = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4),
             (11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8),
             (3, 8, 9), (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]
    verts = [np.array(v, float) / np.linalg.norm(v) for v in verts]
    for _ in range(subdivisions):
        midpoint, new_faces = {}, []

        def mid(a, b):
            key = (min(a, b), max(a, b))
            if key not in midpoint:
                m = verts[a] + verts[b]
                verts.append(m / np.linalg.norm(m))
                midpoint[key] = len(verts) - 1
            return midpoint[key]

        for a, b, c in faces:
            ab, bc, ca = mid(a, b), mid(b, c), mid(c, a)
            new_faces += [(a, ab, ca), (b, bc, ab), (c, ca, bc), (ab, bc, ca)]
        faces = new_faces
    return np.array(verts), np.array(faces, np.int32)


def rock(rng):
    """A faceted pebble: an icosphere with random radial offsets, flattened a little."""
    pos, faces = icosphere(2)
    pos = pos * (1.0 + 0.12 * rng.standard_normal(len(pos)))[:, None]
    return pos * np.array([1.0, 0.7, 0.9]), faces


def lamp(n=16, radius=1.0):
    """A flat regular n-gon in the y = 0 plane whose front side (winding) faces -y."""
    ang = 2 * np.pi * np.arange(n) / n
    rim = np.stack([radius * np.cos(ang), np.zeros(n), radius * np.sin(ang)], -1)
    pos = np.concatenate([[[0.0, 0.0, 0.0]], rim])
    faces = np.stack([np.zeros(n), 1 + np.arange(n), 1 + (np.arange(n) + 1) % n], -1)
    return pos, faces.astype(np.int32)


def write_obj(path, pos, faces, uv=None, nrm=None, comment=""):
    lines = [f"# {comment}"] if comment else []
    lines += [f"v {x:.6f} {y:.6f} {z:.6f}" for x, y, z in pos]
    if uv is not None:
        lines += [f"vt {s:.6f} {t:.6f}" for s, t in uv]
    if nrm is not None:
        lines += [f"vn {x:.6f} {y:.6f} {z:.6f}" for x, y, z in nrm]

    def corner(i):
        i += 1
        if uv is not None and nrm is not None:
            return f"{i}/{i}/{i}"
        if uv is not None:
            return f"{i}/{i}"
        if nrm is not None:
            return f"{i}//{i}"
        return f"{i}"

    lines += ["f " + " ".join(corner(int(i)) for i in f) for f in faces]
    path.write_text("\n".join(lines) + "\n")


def write_ply(path, pos, faces, nrm=None, uv=None, binary=True):
    props = [("x", pos[:, 0]), ("y", pos[:, 1]), ("z", pos[:, 2])]
    if nrm is not None:
        props += [("nx", nrm[:, 0]), ("ny", nrm[:, 1]), ("nz", nrm[:, 2])]
    if uv is not None:
        props += [("u", uv[:, 0]), ("v", uv[:, 1])]
    fmt = "binary_little_endian" if binary else "ascii"
    header = ["ply", f"format {fmt} 1.0", "comment made by scripts/make_example_assets.py",
              f"element vertex {len(pos)}"]
    header += [f"property float {name}" for name, _ in props]
    header += [f"element face {len(faces)}", "property list uchar int vertex_indices", "end_header"]
    vert = np.stack([col for _, col in props], -1).astype("<f4")
    with open(path, "wb") as f:
        f.write(("\n".join(header) + "\n").encode("ascii"))
        if binary:
            f.write(vert.tobytes())
            rec = np.zeros(len(faces), dtype=[("n", "u1"), ("i", "<i4", (3,))])
            rec["n"], rec["i"] = 3, faces
            f.write(rec.tobytes())
        else:
            body = [" ".join(f"{x:.6f}" for x in row) for row in vert]
            body += ["3 " + " ".join(str(int(i)) for i in face) for face in faces]
            f.write(("\n".join(body) + "\n").encode("ascii"))


# ----------------------------------------------------------------------------- images

def value_noise(rng, size, cells):
    """Smooth periodic value noise in [0, 1], (size, size)."""
    grid = rng.random((cells, cells))
    x = np.arange(size) * cells / size
    i0 = np.floor(x).astype(int)
    f = x - i0
    f = f * f * (3 - 2 * f)
    i1 = (i0 + 1) % cells
    rows = grid[i0][:, i0] * (1 - f)[None, :] + grid[i0][:, i1] * f[None, :]
    rows1 = grid[i1][:, i0] * (1 - f)[None, :] + grid[i1][:, i1] * f[None, :]
    return rows * (1 - f)[:, None] + rows1 * f[:, None]


def checker_png(size=64, tiles=8):
    t = (np.arange(size) + 0.5) / size
    u, v = np.meshgrid(t, t, indexing="xy")  # row index = v (top row first)
    check = ((np.floor(u * tiles) + np.floor(v * tiles)) % 2).astype(float)
    rgb = np.stack([0.15 + 0.8 * u, 0.15 + 0.8 * v, 0.2 + 0.6 * check], -1)
    return (rgb * 255 + 0.5).astype(np.uint8)


def noise_jpg(rng, size=64):
    n1, n2 = value_noise(rng, size, 4), value_noise(rng, size, 8)
    n = 0.65 * n1 + 0.35 * n2
    rgb = np.stack([0.25 + 0.7 * n, 0.2 + 0.5 * n ** 2, 0.1 + 0.3 * (1 - n)], -1)
    return (np.clip(rgb, 0, 1) * 255 + 0.5).astype(np.uint8)


def marble_png(rng, size=32):
    n = value_noise(rng, size, 4)
    x = np.arange(size)[None, :] / size
    veins = 0.5 + 0.5 * np.sin(2 * np.pi * (2 * x + 1.5 * n))
    rgb = np.stack([0.3 + 0.6 * veins, 0.3 + 0.55 * veins, 0.35 + 0.5 * veins], -1)
    return (np.clip(rgb, 0, 1) * 255 + 0.5).astype(np.uint8)


def tiles_exr(size=16):
    """Four coloured quadrants with a bright diagonal: distinct linear values, all below 1."""
    img = np.zeros((size, size, 3), np.float32)
    h = size // 2
    img[:h, :h] = (0.8, 0.1, 0.1)
    img[:h, h:] = (0.1, 0.7, 0.1)
    img[h:, :h] = (0.1, 0.2, 0.8)
    img[h:, h:] = (0.75, 0.7, 0.1)
    idx = np.arange(size)
    img[idx, idx] = (0.9, 0.9, 0.9)
    return img


def sky_exr(width=64, height=32, sun_radiance=120.0):
    """Lat-long sky: blue zenith, pale horizon, brown ground, and a small bright sun.

    Row 0 is the zenith (polar angle theta = 0 about +y), columns run over the azimuth. The sun
    is a 3x3-texel bump (peak ``sun_radiance``) about 50 degrees from the zenith; the scenes aim
    it with ``to_world``. It carries roughly as much irradiance as the rest of the sky; a larger,
    dimmer sun than one texel keeps the caustics through glass from being all fireflies.
    """
    theta = (np.arange(height) + 0.5) / height * np.pi
    cos_t = np.cos(theta)[:, None] * np.ones((1, width))
    up = np.clip(cos_t, 0, 1)[..., None]
    sky = np.array([0.55, 0.75, 1.1]) * (1 - up) ** 3 + np.array([0.12, 0.25, 0.7]) * (1 - (1 - up) ** 3)
    ground = np.array([0.12, 0.09, 0.06]) * np.ones((height, width, 3))
    img = np.where(cos_t[..., None] > 0, sky, ground).astype(np.float32)
    row, col = height // 4 + 1, width // 3
    bump = np.outer([0.5, 1.0, 0.5], [0.5, 1.0, 0.5])
    img[row - 1:row + 2, col - 1:col + 2] += bump[..., None] * np.array([1.0, 0.92, 0.8]) * sun_radiance
    return img


def write_exr(path, rgb):
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    with OpenEXR.File(header, {"RGB": np.ascontiguousarray(rgb, np.float32)}) as f:
        f.write(str(path))


# ----------------------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "examples" / "assets")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240611)

    pos, nrm, uv, faces = torus()
    write_obj(out / "torus.obj", pos, faces, uv=uv, nrm=nrm, comment="torus R=1 r=0.35, y up")
    pos, faces = lamp()
    write_obj(out / "lamp.obj", pos, faces, comment="flat 16-gon of radius 1 facing -y")
    pos, nrm, uv, faces = blob()
    write_ply(out / "blob.ply", pos, faces, nrm=nrm, uv=uv, binary=True)
    pos, faces = rock(rng)
    write_ply(out / "rock.ply", pos, faces, binary=False)

    iio.imwrite(out / "checker.png", checker_png())
    iio.imwrite(out / "noise.jpg", noise_jpg(rng), quality=95, subsampling="4:4:4")
    iio.imwrite(out / "marble.png", marble_png(rng))
    write_exr(out / "tiles.exr", tiles_exr())
    write_exr(out / "sky.exr", sky_exr())
    for path in sorted(out.iterdir()):
        print(f"{path.relative_to(ROOT)}  {path.stat().st_size / 1024:.1f} KiB")


if __name__ == "__main__":
    main()
