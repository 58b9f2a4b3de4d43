"""A job with AOVs through the farm: its channels exact under the reduction tree, EXR layers read
back by name, Open Image Denoise closer to a converged render and the same bits every run, and
file-name templates, and an export never writing inside a store."""
import dataclasses
import os
import pathlib

import numpy as np
import OpenEXR
import pytest

from farm import job
from farm.errors import SpecError
from farm.export import denoise, export_frames
from farm.names import frame_names
from farm.scheduler import run_job
from farm.spec import JobSpec
from farm.store import StoreError
from farm.tree import variance
from tests.helpers.aov_scenes import aov_scene
from tests.helpers.farm_cases import farm_main, reference
from tests.helpers.image_metrics import relative_mse

CBOX = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "cbox.xml")


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
    # The scene's film has Mitsuba's default gaussian filter: the export says what it costs.
    code, _, err = farm_main("export", store.url, "--denoise", "--format", "npy", "--out", tmp_path / "dn_cli")
    assert code == 0 and "rendered with a gaussian reconstruction filter" in err and "--rfilter box" in err


def test_denoising_the_cornell_box_cuts_its_error_several_fold():
    """The 128x128 Cornell box at 4 spp with the job options a denoised export needs (albedo and
    normal AOVs, a box filter): OIDN cuts the error against 256 spp more than 3-fold, in linear
    radiance (relative MSE) and tone-mapped (measured 6-8x and 7-9x over five seeds, against
    Mitsuba at 4096 spp too). With the scene's own gaussian filter it gains only 1.1x: each
    sample lands in its neighbours' pixels too, and OIDN keeps noise correlated across pixels."""
    import tracer
    scene = tracer.load_scene(CBOX, res=128, spp=4, aovs="albedo:albedo,nn:sh_normal", rfilter="box")
    reference = tracer.render(scene, spp=256, seed=99, pass_size=4)[..., :3]  # one compiled program for both
    noisy = tracer.render(scene, spp=4, seed=1, pass_size=4)
    denoised = denoise(noisy, 3, 6)
    tone_mse = lambda a: float(np.mean((a / (1 + a) - reference / (1 + reference)) ** 2))
    linear = relative_mse(noisy[..., :3], reference) / relative_mse(denoised, reference)
    tone_mapped = tone_mse(np.maximum(noisy[..., :3], 0)) / tone_mse(denoised)
    print(f"error cut {linear:.1f}x (relative MSE), {tone_mapped:.1f}x (tone-mapped MSE)")
    assert linear > 3 and tone_mapped > 3


def test_denoise_without_albedo_and_normal_is_one_line(local_ray, tmp_path):
    scene = aov_scene(tmp_path / "d.xml", aovs="d:depth", width=8, height=8, spp=4)
    spec, store = job.prepare(JobSpec(scene=scene, frames=(0, 0), spp=4, store=str(tmp_path / "d.zarr"), tile=8))
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    code, _, err = farm_main("export", store.url, "--denoise", "--out", tmp_path / "out")
    assert code == 1 and err.count("\n") == 1, err
    assert ("--denoise needs an albedo and a normal AOV, and this job has no albedo and no normal AOV: render the "
            "job into another store with --aovs albedo:albedo,nn:sh_normal --rfilter box") in err, err
    assert not (tmp_path / "out").exists()


def test_a_moment_scene_stores_and_exports_its_second_moments(local_ray, tmp_path):
    """Mitsuba's ``moment`` through the farm: its XYZ and second-moment channels stored with the
    image and exported as EXR layers named as Mitsuba names them (a mean square is at least the
    squared mean, the box filter keeping each sample in its pixel)."""
    path = pathlib.Path(aov_scene(tmp_path / "m.xml", aovs="d:depth", width=8, height=8, spp=8))
    text = path.read_text()
    path.write_text(text.replace('<integrator type="aov"><string name="aovs" value="d:depth"/>',
                                 '<integrator type="moment">').replace("<film type=\"hdrfilm\">",
                                                                       "<film type=\"hdrfilm\"><rfilter type=\"box\"/>"))
    spec, store = job.prepare(JobSpec(scene=str(path), frames=(0, 0), spp=8, store=str(tmp_path / "m.zarr"), tile=8))
    run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    assert store.aovs == (("image", "moment_xyz"), ("m2_image", "moment_m2")) and store.channels == 9
    (_, exr, _), = export_frames(spec, store, None, "exr", str(tmp_path / "exr"))
    channels = OpenEXR.File(exr, separate_channels=True).channels()
    assert {"image.X", "image.Y", "image.Z", "m2_image.X", "m2_image.Y", "m2_image.Z"} <= set(channels)
    y, m2 = channels["image.Y"].pixels, channels["m2_image.Y"].pixels
    assert y.mean() > 0 and np.all(m2 >= y * y * (1 - 1e-5))


def test_a_plain_scene_rendered_with_the_denoising_options(local_ray, tmp_path):
    """The job options aovs and rfilter: the Cornell box, whose file has neither, rendered with
    both gives the bits of the tracer's render with them; the store keeps them for a refine that
    does not name them, refuses a job with other AOVs, and exports denoised without a warning."""
    plain = JobSpec(scene=CBOX, frames=(0, 0), spp=4, store=str(tmp_path / "plain.zarr"), resolution=(24, 16),
                    tile=16, pass_size=4)
    for spec in (dataclasses.replace(plain, aovs="albedo:albedo,nn:sh_normal", rfilter="box"),
                 dataclasses.replace(plain, spp=8)):  # refined: the store's AOVs and filter are kept
        spec, store = job.prepare(spec)
        run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False)
    spec, store = job.open_store(plain.store)
    assert (spec.spp, spec.aovs, spec.rfilter) == (8, "albedo:albedo,nn:sh_normal", "box")
    assert store.aovs == (("albedo", "albedo"), ("nn", "sh_normal")) and store.rfilter == "box"
    (_, npy, _), = export_frames(spec, store, None, "npy", str(tmp_path / "npy"))
    np.testing.assert_array_equal(np.load(npy), reference(spec)[0])
    with pytest.raises(StoreError, match=r'holds a different job: aovs differs \(store: \[\["albedo"'):
        job.prepare(dataclasses.replace(plain, spp=8, aovs="albedo:albedo"))
    code, _, err = farm_main("export", plain.store, "--denoise", "--out", tmp_path / "dn")
    assert code == 0 and "warning" not in err


@pytest.mark.parametrize("args, message", [
    (("--aovs", "albedo"), "aovs: AOV 'albedo' is not a name:type pair"),
    (("--rfilter", "boxx"), "Invalid value for '--rfilter'"),
])
def test_bad_denoising_options_are_one_line_before_a_store(tmp_path, args, message):
    code, _, err = farm_main("render", CBOX, *args, "--out", tmp_path / "x.zarr")
    assert code == 2 and message in err and not (tmp_path / "x.zarr").exists()


def test_a_jobs_aov_name_the_scene_has_is_refused_before_a_store(tmp_path):
    scene = aov_scene(tmp_path / "own.xml", aovs="albedo:albedo", width=8, height=8, spp=1)
    code, _, err = farm_main("render", scene, "--aovs", "albedo:depth", "--out", tmp_path / "x.zarr")
    assert code != 0 and err.count("\n") == 1 and "the job's aovs: AOV name 'albedo' is taken by the scene's" in err
    assert not (tmp_path / "x.zarr").exists()


def test_name_templates():
    assert frame_names("{job}_{frame:04d}.{ext}", "orbit", [0, 12], "exr") == {0: "orbit_0000.exr", 12: "orbit_0012.exr"}
    for template, message in [("{job}.exr", "must contain {frame}"), ("{frame}/{job}.png", "not a plain file name"),
                              ("../{frame}", "not a plain file name"), ("{frame}{user}", "unknown field {user}"),
                              ("{frame:04d", "unmatched"), ("{frame:zz}", "may be an integer format"),
                              ("{job.__class__}{frame}", "unknown field"), ("{frame}\n", "not a usable file name"),
                              ("{frame:.0}x", "may be an integer format"), ("{frame:.0e}.{ext}", "may be an integer"),
                              # a format or conversion that prints nothing, to name a store's own file
                              ("zarr.json{frame!s:.0}", "conversions are not allowed"),
                              ("zarr.json{frame:.0}", "may be an integer format"),
                              ("{job:.0}{frame}.{ext}", "the format of {job} may be none"),
                              ("f{frame}.txt", "does not end in '.png'"), ("f{frame}.png.{ext}x", "does not end")]:
        with pytest.raises(SpecError, match=message.replace("{", r"\{").replace("}", r"\}")):
            frame_names(template, "orbit", [1, 2], "png")
    assert frame_names("{frame}_{frame:5d}.{ext}", "o", [7], "exr") == {7: "7_    7.exr"}


def test_export_never_writes_inside_a_store(tmp_path):
    """The store itself, a folder inside it, another store, and a link that resolves into one are
    refused in one line (exit 2), and nothing in the stores changes."""
    from tests.helpers.farm_cases import filled_store, store_files
    store, other = tmp_path / "s.zarr", tmp_path / "o.zarr"
    filled_store(store, frames=(0, 0))
    filled_store(other, frames=(0, 0))
    os.symlink(store / "records", tmp_path / "link")
    before = store_files(store), store_files(other)
    for out in (store, store / "records", store / "new" / "deeper", other, tmp_path / "link"):
        code, _, err = farm_main("export", store, "--format", "exr", "--out", out)
        assert code == 2 and err.count("\n") == 1 and "a Zarr store" in err, (out, err)
    assert (store_files(store), store_files(other)) == before
    assert not (store / "new").exists()
    code, _, err = farm_main("export", store, "--format", "exr", "--out", tmp_path / "frames")
    assert code == 0 and (tmp_path / "frames" / "frame_0000.exr").exists(), err


def test_a_bad_template_is_refused_before_anything_is_written(tmp_path):
    code, _, err = farm_main("export", tmp_path / "none.zarr", "--name", "{job}.png", "--out", tmp_path / "o")
    assert code != 0 and err.count("\n") == 1
