"""Images in and out: textures and environment maps as linear float, renders as EXR/PNG/NPY.

Host only (numpy). Loading follows Mitsuba 3's ``Bitmap`` and ``bitmap`` texture: 8- and 16-bit
images (PNG, JPEG, BMP, TGA, PPM) are sRGB-encoded and decoded to linear unless ``raw``; float
images (EXR, Radiance HDR, PFM) are linear as stored; alpha is dropped (not premultiplied);
gray stays one channel. The sRGB curves are Dr.Jit's rational fits (``drjit/color.h``) that
Mitsuba evaluates at lookup time, so the texel values agree with Mitsuba's to float precision.

Decoders: libpng (imagecodecs) for PNG, Pillow for JPEG, BMP, TGA, PNM and TIFF, OpenEXR for EXR;
Radiance HDR and PFM are read here (see ``_read_pfm``).
"""
import io
import os
import tempfile
from collections.abc import Mapping

import numpy as np
import OpenEXR
from numpy.typing import ArrayLike
from PIL import Image

from tracer.errors import SceneError
from tracer.io import reads

__all__ = ["load_image", "write_exr", "write_exr_channels", "write_png", "write_npy", "srgb_to_linear", "linear_to_srgb", "srgb8",
           "MAX_IMAGE_PIXELS"]

# Pixels an image may have (a 16K x 8K environment map), checked from its header before it is
# decoded: a few compressed kilobytes can otherwise claim gigabytes (a decompression bomb).
MAX_IMAGE_PIXELS = 2**27

# Dr.Jit's single-precision rational fits, coefficients lowest degree first.
_TO_LINEAR_P = (-0.0163933279112946, -0.7386328024653209, -11.199318357635072, -47.46726633009393,
                -36.04572663838034)
_TO_LINEAR_Q = (-0.004261480793199332, -19.140923959601675, -59.096406619244426, -18.225745396846637, 1.0)
_TO_SRGB_P = (-0.0016829072605308378, 0.03453868659826638, 0.7642611304733891, 2.0041169284241644,
              0.7551545191665577, -0.016202083165206348)
_TO_SRGB_Q = (4.178892964897981e-7, -0.00004375359692957097, 0.03467195408529984, 0.6085338522168684,
              1.8970238036421054, 1.0)


def srgb_to_linear(x: ArrayLike) -> np.ndarray:
    """sRGB-encoded values -> linear (IEC 61966-2-1), as Mitsuba decodes textures.

    On [0, 1] this is Dr.Jit's rational fit of ((x + 0.055) / 1.055)^2.4 (x > 0.04045) and
    x / 12.92 below; above 1 the exact power law is used.
    """
    x = np.asarray(x, np.float64)
    fit = np.polynomial.polynomial.polyval(x, _TO_LINEAR_P) / np.polynomial.polynomial.polyval(x, _TO_LINEAR_Q)
    exact = ((np.maximum(x, 0.0) + 0.055) / 1.055) ** 2.4
    return np.where(x <= 0.04045, x / 12.92, np.where(x <= 1.0, fit * x, exact))


def linear_to_srgb(x: ArrayLike) -> np.ndarray:
    """Linear values -> sRGB encoding: 12.92 x below 0.0031308, else 1.055 x^(1/2.4) - 0.055."""
    x = np.asarray(x, np.float64)
    y = np.sqrt(np.maximum(x, 0.0))
    fit = np.polynomial.polynomial.polyval(y, _TO_SRGB_P) / np.polynomial.polynomial.polyval(y, _TO_SRGB_Q)
    exact = 1.055 * np.maximum(x, 0.0) ** (1 / 2.4) - 0.055
    return np.where(x <= 0.0031308, 12.92 * x, np.where(x <= 1.0, fit * x, exact))


# ---------------------------------------------------------------------------------- loading
def load_image(path: str | os.PathLike[str], raw: bool = False) -> np.ndarray:
    """(H, W, C) float32 linear image, C = 1 (gray) or 3; row 0 is the top of the image.

    ``raw=True`` keeps 8/16-bit values as stored (divided by 255 or 65535) instead of decoding
    sRGB; it does not change float formats. Raises ``SceneError`` naming the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise SceneError("image file not found", path)
    ext = os.path.splitext(path)[1].lower()
    try:
        data = reads.read_file(path)  # read once: what is decoded is what is hashed
        if ext == ".exr":
            image = _read_exr(data, path)
        elif ext in (".hdr", ".rgbe", ".pic"):
            image = _read_rgbe(data, path)
        elif ext == ".pfm":
            image = _read_pfm(data, path)
        else:
            image, encoded = _read_integer_image(data, path)
            if encoded and not raw:
                image = srgb_to_linear(image)
    except SceneError:
        raise
    except Exception as e:  # a decoder's own error: corrupt or unsupported file
        raise SceneError(f"cannot read image: {e}", path) from None
    image = np.asarray(image, np.float32)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.shape[2] not in (1, 3):
        raise SceneError(f"unsupported image with {image.shape[2]} channels", path)
    return np.ascontiguousarray(image)


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _check_size(width, height, path):
    """Refuse an image whose header claims more than ``MAX_IMAGE_PIXELS`` pixels."""
    if width * height > MAX_IMAGE_PIXELS:
        raise SceneError(f"image of {width}x{height} pixels is larger than {MAX_IMAGE_PIXELS} pixels", path)


def _read_integer_image(data, path):
    """(H, W, C) float64 in [0, 1] of an 8/16-bit image (``data``, the bytes of the file at
    ``path``) and whether it is sRGB-encoded."""
    head = data[:24]
    if head[:8] == _PNG_SIGNATURE:  # by content, as Pillow sniffs the rest
        _check_size(int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"), path)  # IHDR
        return _unit_range(_read_png(data)), True
    return _read_with_pillow(data, path)


def _read_png(data):
    """(H, W[, C]) uint8 or uint16 samples of a PNG as libpng decodes them, alpha dropped.

    libpng (through imagecodecs), the decoder Mitsuba uses: Pillow has no multi-channel 16-bit
    mode (python-pillow/Pillow#1888) and truncates 16-bit RGB(A) to 8 bits. Palettes and 1, 2 and
    4-bit gray arrive expanded to 8 bits (bits replicated, as Pillow does), tRNS as an alpha channel.
    """
    import imagecodecs  # here: a large library that only PNGs need (the tracer loads without it)

    data = imagecodecs.png_decode(data)
    return data[..., :-1] if data.ndim == 3 and data.shape[2] in (2, 4) else data


_PILLOW_CONVERSIONS = {"P": "RGBA", "PA": "RGBA", "1": "L", "CMYK": "RGB", "YCbCr": "RGB", "LAB": "RGB",
                       "HSV": "RGB"}


def _read_with_pillow(data, path):
    """``_read_integer_image`` for what Pillow decodes: JPEG, BMP, TGA, PNM, TIFF, GIF."""
    with Image.open(io.BytesIO(data)) as im:
        _check_size(*im.size, path)
        im.load()
        if im.mode in _PILLOW_CONVERSIONS:
            im = im.convert(_PILLOW_CONVERSIONS[im.mode])
        mode, data = im.mode, np.asarray(im)
    if mode in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        return data.astype(np.float64) / 65535.0, True
    if mode == "F":
        return data.astype(np.float64), False
    if data.dtype != np.uint8:
        raise SceneError(f"unsupported image mode '{mode}'", path)
    return _unit_range(data[..., :-1] if mode in ("LA", "RGBA") else data), True


def _unit_range(data):
    """uint8 or uint16 samples -> float64 in [0, 1]."""
    if data.dtype == np.uint8:  # Mitsuba divides in single precision before decoding
        return (data.astype(np.float32) * np.float32(1.0 / 255.0)).astype(np.float64)
    return data.astype(np.float64) / 65535.0


def _read_exr(data, path):
    # OpenEXR reads files only: it reads a private copy of the bytes read (and hashed).
    with tempfile.TemporaryDirectory() as folder:
        copy = os.path.join(folder, "image.exr")
        with open(copy, "wb") as f:
            f.write(data)
        low, high = OpenEXR.File(copy, header_only=True).header()["dataWindow"]
        _check_size(int(high[0]) - int(low[0]) + 1, int(high[1]) - int(low[1]) + 1, path)
        channels = OpenEXR.File(copy, separate_channels=True).channels()
    names = set(channels)
    pick = lambda *cs: np.stack([channels[c].pixels.astype(np.float32) for c in cs], axis=-1)
    if {"R", "G", "B"} <= names:
        return pick("R", "G", "B")
    if "Y" in names:
        return pick("Y")
    color = [n for n in names if n not in ("A",)]
    if len(color) == 1:
        return pick(color[0])
    raise SceneError(f"EXR has no R, G, B or Y channels (has {sorted(names)})", path)


# Radiance HDR and PFM are read here: imageio has no reader for either without FreeImage (a
# separate binary download, unmaintained), and Pillow reads only gray PFM. imagecodecs'
# ``rgbe_decode`` (Walter's rgbe.c) gives the same floats on well-formed files, but it refuses a
# header without a FORMAT line or bytes after the pixels, and reads XYZE as RGB.
def _read_pfm(data, path):
    parts = data.split(maxsplit=4)
    if len(parts) < 5 or parts[0] not in (b"PF", b"Pf"):
        raise SceneError("not a PFM file", path)
    width, height, scale = int(parts[1]), int(parts[2]), float(parts[3])
    _check_size(width, height, path)
    channels = 3 if parts[0] == b"PF" else 1
    offset = len(data) - width * height * channels * 4
    pixels = np.frombuffer(data, "<f4" if scale < 0 else ">f4", width * height * channels, offset)
    return pixels.reshape(height, width, channels)[::-1]  # PFM rows run bottom to top


def _read_rgbe(data, path):
    """Radiance RGBE (.hdr): flat or new-style run-length scanlines, -Y H +X W orientation."""
    if not data.startswith(b"#?"):
        raise SceneError("not a Radiance HDR file", path)
    header_end = data.find(b"\n\n")
    line_end = data.find(b"\n", header_end + 2)
    size = data[header_end + 2:line_end].split()
    if header_end < 0 or len(size) != 4 or size[0] != b"-Y" or size[2] != b"+X":
        raise SceneError("unsupported Radiance HDR layout (only -Y H +X W)", path)
    if b"FORMAT=32-bit_rle_xyze" in data[:header_end]:
        raise SceneError("unsupported Radiance HDR in XYZE", path)
    height, width = int(size[1]), int(size[3])
    _check_size(width, height, path)
    pos, rows = line_end + 1, []
    for _ in range(height):
        if 8 <= width < 32768 and data[pos:pos + 2] == b"\x02\x02" and data[pos + 2] < 128:
            row, pos = _rgbe_rle_scanline(data, pos + 4, width, path)
        else:
            row = np.frombuffer(data, np.uint8, width * 4, pos).reshape(width, 4)
            pos += width * 4
        rows.append(row)
    rgbe = np.stack(rows).astype(np.float64)
    scale = np.where(rgbe[..., 3:] > 0, np.ldexp(1.0, rgbe[..., 3:].astype(int) - 136), 0.0)
    return rgbe[..., :3] * scale  # Mitsuba decodes m * 2^(e - 136), without Ward's + 0.5


def _rgbe_rle_scanline(data, pos, width, path):
    row = np.empty((4, width), np.uint8)
    for channel in range(4):
        x = 0
        while x < width:
            count = data[pos]
            if count > 128:
                count -= 128
                row[channel, x:x + count] = data[pos + 1]
                pos += 2
            else:
                if count == 0 or x + count > width:
                    raise SceneError("corrupt run-length data in Radiance HDR", path)
                row[channel, x:x + count] = np.frombuffer(data, np.uint8, count, pos + 1)
                pos += 1 + count
            x += count
    return row.T, pos


# ---------------------------------------------------------------------------------- writing
def write_exr(path: str | os.PathLike[str], image: ArrayLike) -> None:
    """Write a linear (H, W, 3) or (H, W) image as a float32 EXR (ZIP compressed)."""
    image = np.asarray(image, np.float32)
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    _write_exr(path, {c: image[..., k] for k, c in enumerate("RGB")} if image.ndim == 3 else {"Y": image})


def write_exr_channels(path: str | os.PathLike[str], channels: Mapping[str, ArrayLike]) -> None:
    """Write named float32 (H, W) channels as one scanline EXR (ZIP compressed): a multi-layer
    file when names have a layer prefix (``albedo.R``, ``N.X``), as DCC tools read them."""
    _write_exr(path, channels)


# Writes that do not read back as given are made again this many times.
_EXR_WRITES = 3


def _write_exr(path, channels):
    """Write ``channels`` (name -> (H, W) float32) and read the file back:
    OpenEXR's binding (3.5.3) was seen, twice in a test process, to write a one-channel "Y" image as
    channels B, G, R over shifted views of its pixels. A file is kept only if it reads back bit
    for bit; else it is written again, and refused after ``_EXR_WRITES`` tries."""
    path = os.fspath(path)
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    data = {name: np.ascontiguousarray(value, np.float32) for name, value in channels.items()}
    for _ in range(_EXR_WRITES):
        # Copies: the binding writes into the dicts it is given (windows, its own Channels).
        OpenEXR.File(dict(header), dict(data)).write(path)
        got = OpenEXR.File(path, separate_channels=True).channels()
        if set(got) == set(data) and all(np.array_equal(got[k].pixels.view(np.uint32), data[k].view(np.uint32))
                                         for k in data):
            return
    raise OSError(f"{path}: OpenEXR wrote channels {sorted(got)} that do not read back as the {sorted(data)} given")


def srgb8(image: ArrayLike) -> np.ndarray:
    """A linear (H, W, 3) or (H, W) image as 8-bit sRGB, clipped to [0, 1]: what ``write_png`` writes."""
    image = np.asarray(image, np.float64)
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    encoded = linear_to_srgb(np.clip(np.nan_to_num(image), 0.0, 1.0))
    return np.floor(encoded * 255.0 + 0.5).astype(np.uint8)


def write_png(path: str | os.PathLike[str], image: ArrayLike) -> None:
    """Write a linear (H, W, 3) or (H, W) image as an 8-bit sRGB PNG (clipped to [0, 1])."""
    Image.fromarray(srgb8(image)).save(os.fspath(path))


def write_npy(path: str | os.PathLike[str], image: ArrayLike) -> None:
    """Write an array as .npy (float32), e.g. a render before any tone mapping."""
    np.save(os.fspath(path), np.asarray(image, np.float32))
