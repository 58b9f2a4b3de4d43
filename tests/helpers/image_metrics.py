"""Image metrics and reference I/O shared by ``scripts/make_references.py`` and the image tests.

Images are (H, W, 3) arrays of linear radiance. The one error measure is the relative mean
squared error of Mitsuba 3's own render tests and of Rousselle et al., "Adaptive Sampling and
Reconstruction using Greedy Error Minimization" (2011):

    rel_mse(img, ref) = mean((img - ref)^2 / (ref^2 + EPSILON))

where ``EPSILON`` keeps dark pixels from dominating. For an unbiased renderer it is the per-pixel
variance at the rendered sample count (plus the reference's own, negligible, variance), weighted
towards dark pixels; it falls as 1/spp.
"""
import pathlib

import numpy as np
import OpenEXR

EPSILON = 1e-2
# What "agrees with Mitsuba" means for an image at a given sample count (the image tests and
# scripts/mitsuba_gallery.py): the per-channel mean within MEAN_TOLERANCE of the reference's, and a
# relative MSE at most REL_MSE_FACTOR times Mitsuba's own at the same sample count.
MEAN_TOLERANCE = 0.01
REL_MSE_FACTOR = 1.5
MANIFEST = pathlib.Path(__file__).resolve().parents[1] / "data" / "references" / "manifest.json"


def relative_mse(img, ref, epsilon=EPSILON):
    """mean((img - ref)^2 / (ref^2 + epsilon)) over all pixels and channels, as a float."""
    img, ref = np.asarray(img, np.float64), np.asarray(ref, np.float64)
    if img.shape != ref.shape:
        raise ValueError(f"image shape {img.shape} differs from reference shape {ref.shape}")
    return float(np.mean((img - ref) ** 2 / (ref ** 2 + epsilon)))


def channel_means(img):
    """Mean radiance per channel of an (H, W, 3) image: (3,) float64."""
    return np.asarray(img, np.float64).reshape(-1, 3).mean(axis=0)


def mean_relative_error(img, ref_means):
    """Per-channel |mean(img) - ref_means| / ref_means: (3,) float64."""
    ref_means = np.asarray(ref_means, np.float64)
    return np.abs(channel_means(img) - ref_means) / ref_means


def read_exr(path):
    """An RGB OpenEXR file as an (H, W, 3) float32 array."""
    with OpenEXR.File(str(path)) as f:
        return np.asarray(f.channels()["RGB"].pixels, np.float32)


def write_exr(path, img):
    """Write an (H, W, 3) image as a float32, ZIP-compressed RGB OpenEXR file, and an (H, W) or
    (H, W, 1) one as its single Y channel.

    OpenEXR's "RGB" key reads three floats a pixel from the array it is given, whatever its shape:
    a one-channel array under it would be written scrambled, with memory past its end."""
    img = np.asarray(img, np.float32)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[..., 0]
    if img.ndim == 2:
        channels = {"Y": np.ascontiguousarray(img)}
    elif img.ndim == 3 and img.shape[2] == 3:
        channels = {"RGB": np.ascontiguousarray(img)}
    else:
        raise ValueError(f"write_exr takes (H, W), (H, W, 1) or (H, W, 3) images, not {img.shape}")
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    with OpenEXR.File(header, channels) as f:
        f.write(str(path))
