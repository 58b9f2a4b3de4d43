"""Image loading and writing, compared with Mitsuba 3's ``Bitmap`` and ``bitmap`` texture."""
import numpy as np
import pytest
from PIL import Image

from tracer.io import images
from tracer.errors import SceneError

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

RNG = np.random.default_rng(7)


def mitsuba_linear(path, channels=3):
    """What Mitsuba makes of an image file: linear float32."""
    fmt = mi.Bitmap.PixelFormat.RGB if channels == 3 else mi.Bitmap.PixelFormat.Y
    data = np.array(mi.Bitmap(str(path)).convert(fmt, mi.Struct.Type.Float32, srgb_gamma=False))
    return data.reshape(data.shape[0], data.shape[1], channels)


def u8(*shape):
    return RNG.integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("mode, shape", [("RGB", (5, 7, 3)), ("RGBA", (5, 7, 4)), ("L", (6, 4)), ("LA", (6, 4, 2))])
def test_8bit_png_decoded_like_mitsuba(tmp_path, mode, shape):
    data = u8(*shape)
    data.reshape(-1)[:256] = np.arange(256)[:data.size]
    path = tmp_path / "t.png"
    Image.fromarray(data, mode).save(path)
    ours = images.load_image(path)
    channels = 3 if mode.startswith("RGB") else 1
    assert ours.shape == (shape[0], shape[1], channels) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, mitsuba_linear(path, channels), rtol=0, atol=4e-7)
    raw = images.load_image(path, raw=True)
    plain = data if channels == 1 and data.ndim == 2 else data[..., :channels]
    np.testing.assert_allclose(raw.reshape(plain.shape), plain / 255.0, atol=1e-7)


def test_png_matches_bitmap_texture_lookups(tmp_path):
    path = tmp_path / "t.png"
    Image.fromarray(u8(4, 4, 3)).save(path)
    texture = mi.load_dict({"type": "bitmap", "filename": str(path), "filter_type": "nearest"})
    ours = images.load_image(path)
    si = mi.SurfaceInteraction3f()
    for y in range(4):
        for x in range(4):
            si.uv = [(x + 0.5) / 4, (y + 0.5) / 4]  # v = 0 is the first row
            np.testing.assert_allclose(np.array(texture.eval(si)), ours[y, x], atol=4e-7)


@pytest.mark.parametrize("transparency", [None, 3])
def test_palette_png(tmp_path, transparency):
    path = tmp_path / "p.png"
    image = Image.fromarray(u8(5, 5, 3)).convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    image.save(path, **({} if transparency is None else {"transparency": transparency}))
    np.testing.assert_allclose(images.load_image(path), mitsuba_linear(path), atol=4e-7)


@pytest.mark.parametrize("format", [mi.Bitmap.PixelFormat.RGB, mi.Bitmap.PixelFormat.RGBA, mi.Bitmap.PixelFormat.Y,
                                    mi.Bitmap.PixelFormat.YA])
def test_16bit_png_decoded_like_mitsuba(tmp_path, format):
    channels = {mi.Bitmap.PixelFormat.RGB: 3, mi.Bitmap.PixelFormat.RGBA: 4, mi.Bitmap.PixelFormat.Y: 1,
                mi.Bitmap.PixelFormat.YA: 2}[format]
    data = RNG.integers(0, 65536, (23, 41, channels), dtype=np.uint16)
    data[:, :15] = np.linspace(0, 65535, 15, dtype=np.uint16)[None, :, None]  # smooth: Sub/Up/Paeth filters
    path = tmp_path / "t16.png"
    mi.Bitmap(data, pixel_format=format).write(str(path))
    color = 3 if channels >= 3 else 1
    np.testing.assert_allclose(images.load_image(path), mitsuba_linear(path, color), atol=4e-7)
    np.testing.assert_allclose(images.load_image(path, raw=True), data[..., :color] / 65535.0, atol=1e-7)


def test_png_found_by_content(tmp_path):
    data = u8(5, 7, 3)
    Image.fromarray(data).save(tmp_path / "png.jpg", format="PNG")
    np.testing.assert_allclose(images.load_image(tmp_path / "png.jpg", raw=True), data / 255.0, atol=1e-7)


@pytest.mark.parametrize("ext", ["exr", "hdr", "pfm"])
def test_float_images_loaded_like_mitsuba(tmp_path, ext):
    data = (RNG.random((9, 13, 3)) * 20).astype(np.float32)
    path = tmp_path / f"t.{ext}"
    mi.Bitmap(data).write(str(path))
    ours = images.load_image(path)
    np.testing.assert_array_equal(ours, mitsuba_linear(path))
    np.testing.assert_array_equal(images.load_image(path, raw=True), ours)


def test_jpeg_loads(tmp_path):
    path = tmp_path / "t.jpg"
    Image.fromarray(np.full((8, 8, 3), 180, np.uint8)).save(path, quality=95)
    np.testing.assert_allclose(images.load_image(path), mitsuba_linear(path), atol=2e-3)


def test_exr_round_trip(tmp_path):
    rgb = (RNG.random((6, 5, 3)) * 100).astype(np.float32)
    images.write_exr(tmp_path / "a.exr", rgb)
    np.testing.assert_array_equal(images.load_image(tmp_path / "a.exr"), rgb)
    np.testing.assert_array_equal(mitsuba_linear(tmp_path / "a.exr"), rgb)
    gray = rgb[..., 0]
    images.write_exr(tmp_path / "g.exr", gray)
    np.testing.assert_array_equal(images.load_image(tmp_path / "g.exr")[..., 0], gray)


@pytest.mark.parametrize("bad_writes, refused", [(1, False), (3, True)])
def test_an_exr_that_does_not_read_back_as_written_is_written_again_then_refused(tmp_path, monkeypatch,
                                                                                bad_writes, refused):
    """What OpenEXR's binding was seen writing for a one-channel image: B, G, R over its shifted
    pixels. Simulated: the first writes of the file go out as that."""
    gray = np.linspace(0, 1, 48, dtype=np.float32).reshape(6, 8)
    flat = np.concatenate([gray.ravel(), np.full(2, 3e29, np.float32)])
    garbled = np.stack([flat[k:k + gray.size].reshape(gray.shape) for k in range(3)], axis=-1)
    real, writes = images.OpenEXR.File, []

    def flaky(*args, **kw):
        if isinstance(args[0], dict):  # a File made to be written
            writes.append(args[1])
            if len(writes) <= bad_writes:
                return real(args[0], {"RGB": garbled})
        return real(*args, **kw)

    monkeypatch.setattr(images.OpenEXR, "File", flaky)
    if refused:
        with pytest.raises(OSError, match=r"wrote channels \['B', 'G', 'R'\] that do not read back as the \['Y'\] given"):
            images.write_exr(tmp_path / "y.exr", gray)
    else:
        images.write_exr(tmp_path / "y.exr", gray)
        monkeypatch.setattr(images.OpenEXR, "File", real)
        np.testing.assert_array_equal(images.load_image(tmp_path / "y.exr")[..., 0], gray)
    assert len(writes) == min(bad_writes + 1, 3)


def test_png_and_npy_writing(tmp_path):
    rgb = RNG.random((7, 9, 3)).astype(np.float32)
    rgb[0, 0] = [-1, 2, np.nan]
    images.write_png(tmp_path / "a.png", rgb)
    back = images.load_image(tmp_path / "a.png")
    np.testing.assert_array_equal(back[0, 0], [0, 1, 0])
    encoded = images.linear_to_srgb(np.clip(rgb[1:], 0, 1))
    np.testing.assert_allclose(images.linear_to_srgb(back[1:]), encoded, atol=0.5 / 255 + 1e-6)
    images.write_npy(tmp_path / "a.npy", rgb)
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), rgb)


def test_srgb_curves():
    x = np.linspace(0, 1, 10001)
    exact = np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)
    np.testing.assert_allclose(images.srgb_to_linear(x), exact, atol=5e-7)  # a float32 fit
    exact = np.where(x <= 0.0031308, 12.92 * x, 1.055 * x ** (1 / 2.4) - 0.055)
    np.testing.assert_allclose(images.linear_to_srgb(x), exact, atol=5e-7)
    np.testing.assert_allclose(images.linear_to_srgb(images.srgb_to_linear(x)), x, atol=1e-6)
    np.testing.assert_allclose(images.srgb_to_linear([2.0]), [((2 + 0.055) / 1.055) ** 2.4])


def test_image_errors(tmp_path):
    with pytest.raises(SceneError, match="missing.png: image file not found"):
        images.load_image(tmp_path / "missing.png")
    (tmp_path / "junk.png").write_bytes(b"not an image")
    with pytest.raises(SceneError, match="junk.png: cannot read image"):
        images.load_image(tmp_path / "junk.png")
    (tmp_path / "junk.exr").write_bytes(b"not an image")
    with pytest.raises(SceneError, match="junk.exr: cannot read image"):
        images.load_image(tmp_path / "junk.exr")


def _png_claiming(tmp_path, width, height):
    """A 4x4 PNG whose IHDR (CRC fixed) claims ``width`` x ``height``: a few bytes for gigabytes."""
    import struct
    import zlib
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "small.png")
    data = bytearray((tmp_path / "small.png").read_bytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    (tmp_path / "bomb.png").write_bytes(bytes(data))
    return tmp_path / "bomb.png"


@pytest.mark.parametrize("name, make", [
    ("bomb.png", lambda tmp: _png_claiming(tmp, 100000, 100000)),
    ("bomb.pfm", lambda tmp: tmp / "bomb.pfm"),
    ("bomb.jpg", lambda tmp: tmp / "bomb.jpg"),
])
def test_an_image_claiming_too_many_pixels_is_refused_before_decoding(tmp_path, name, make):
    (tmp_path / "bomb.pfm").write_bytes(b"PF\n70000 70000\n-1.0\n" + bytes(12))
    Image.new("L", (1, 1)).save(tmp_path / "small.jpg")
    data = bytearray((tmp_path / "small.jpg").read_bytes())
    sof = data.index(b"\xff\xc0")  # the frame header: height and width at +5
    data[sof + 5:sof + 9] = (60000).to_bytes(2, "big") * 2
    (tmp_path / "bomb.jpg").write_bytes(bytes(data))
    # (Pillow refuses the JPEG itself, past its own bomb limit, when it opens it)
    limit = f"larger than {images.MAX_IMAGE_PIXELS} pixels|exceeds limit of .* pixels"
    with pytest.raises(SceneError, match=limit):
        images.load_image(make(tmp_path))
