"""A job with AOVs through the farm: its channels exact under the reduction tree, EXR layers read
back by name, Open Image Denoise closer to a converged render and the same bits every run, and
file-name templates."""
import dataclasses

import numpy as np
import OpenEXR
import pytest

from farm import job
from farm.errors import SpecError
from farm.export import denoise, export_frames
from farm.names import frame_names
from farm.scheduler import run_job
from farm.spec import JobSpec
from farm.tree import variance
from tests.helpers.aov_scenes import aov_scene
from tests.helpers.farm_cases import farm_main, reference


def _job(tmp_path, spp):
    scene = aov_scene(tmp_path / "aux.xml", aovs="albedo:albedo,N:sh_normal,d:depth", width=24, height=16, spp=spp)
    spec = JobSpec(scene=scene, frames=(0, 0), spp=spp, store=str(tmp_path / "aux.zarr"), tile=16, pass_size=4)
    spec, store = job.prepare(spec)
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    return spec, store


def test_aov_job_exports_exact_layers_and_denoises(local_ray, tmp_path):
    spec, store = _job(tmp_path, 128)  # two chunks of 64: a variance per pixel
    assert store.aovs == (("albedo", "albedo"), ("N", "sh_normal"), ("d", "depth")) and store.channels == 10
    (_, npy, _), = export_frames(spec, store, None, "npy", str(tmp_path / "npy"))
    image, want = np.load(npy), reference(spec)[0]
    assert image.shape == (16, 24, 10)
    np.testing.assert_array_equal(image, want)  # the AOVs too: the bits of tracer.render's tree

    (_, exr, _), = export_frames(spec, store, None, "exr", str(tmp_path / "exr"), name="{job}_{frame:04d}.exr")
    assert exr.endswith("aux_0000.exr")
    channels = OpenEXR.File(exr, separate_channels=True).channels()
    names = ["R", "G", "B", "albedo.R", "albedo.G", "albedo.B", "N.X", "N.Y", "N.Z", "d.T"]
    assert set(channels) == {*names, "variance.R", "variance.G", "variance.B"}
    for i, name in enumerate(names):
        np.testing.assert_array_equal(channels[name].pixels, image[..., i])
    want_var = variance(store.read_state((0, 0, 0)), 2)
    np.testing.assert_array_equal(channels["variance.G"].pixels[:, :16], want_var[..., 1])
    assert channels["variance.R"].pixels.mean() > 0

    # Denoising gives the same bits twice, and leaves the AOVs as rendered.
    runs = [np.load(export_frames(spec, store, None, "npy", str(tmp_path / f"dn{k}"), denoised=True)[0][1])
            for k in range(2)]
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0][..., 3:], image[..., 3:])
    assert np.abs(runs[0][..., :3] - image[..., :3]).max() > 0


def test_denoised_is_closer_to_a_converged_render(tmp_path):
    """At 4 spp, OIDN with the tracer's albedo and normal lowers the relative MSE against 4096 spp
    (measured 0.0306 -> 0.0272 at 48x32: this scene's error is mostly a few edge and highlight
    pixels, which OIDN keeps; a scene that shows its gain better is still to be found)."""
    import tracer
    scene = tracer.load_scene(aov_scene(tmp_path / "n.xml", aovs="albedo:albedo,N:sh_normal", width=48, height=32))
    noisy = tracer.render(scene, spp=4, seed=1)
    converged = tracer.render(scene, spp=4096)[..., :3]
    rel_mse = lambda a: float(np.mean((a - converged) ** 2 / (converged ** 2 + 1e-2)))
    before, after = rel_mse(noisy[..., :3]), rel_mse(denoise(noisy, 3, 6))
    print(f"relative MSE: noisy {before:.4f}, denoised {after:.4f} ({before / after:.1f}x)")
    assert after < 0.95 * before


def test_denoise_without_albedo_and_normal_is_one_line(local_ray, tmp_path):
    scene = aov_scene(tmp_path / "d.xml", aovs="d:depth", width=8, height=8, spp=4)
    spec, store = job.prepare(JobSpec(scene=scene, frames=(0, 0), spp=4, store=str(tmp_path / "d.zarr"), tile=8))
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    code, _, err = farm_main("export", store.url, "--denoise", "--out", tmp_path / "out")
    assert code == 1 and err.count("\n") == 1 and "an albedo and a normal AOV too few" in err
    assert not (tmp_path / "out").exists()


def test_name_templates():
    assert frame_names("{job}_{frame:04d}.{ext}", "orbit", [0, 12], "exr") == {0: "orbit_0000.exr", 12: "orbit_0012.exr"}
    for template, message in [("{job}.exr", "must contain {frame}"), ("{frame}/{job}.png", "not a plain file name"),
                              ("../{frame}", "not a plain file name"), ("{frame}{user}", "unknown field {user}"),
                              ("{frame:04d", "unmatched"), ("{frame:zz}", "Unknown format code"),
                              ("{job.__class__}{frame}", "unknown field"), ("{frame}\n", "not a usable file name"),
                              ("{frame:.0}x", "")]:
        with pytest.raises(SpecError, match=message.replace("{", r"\{").replace("}", r"\}")):
            names = frame_names(template, "orbit", [1, 2], "png")
            if template == "{frame:.0}x":  # two frames, one name
                raise SpecError(str(names))


def test_a_bad_template_is_refused_before_anything_is_written(tmp_path):
    code, _, err = farm_main("export", tmp_path / "none.zarr", "--name", "{job}.png", "--out", tmp_path / "o")
    assert code != 0 and err.count("\n") == 1
