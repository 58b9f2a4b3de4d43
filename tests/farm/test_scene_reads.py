"""The scene a member renders is the scene the store records (issue 37, item 1): the loader notes
the SHA-256 of the bytes it reads (``tracer.io.reads``), the driver records the same digests
(``farm.spec.scene_digest``), and a member that reads other bytes refuses its task; the job stops
naming the file, and goes on to the same bits once the file is back."""
import shutil

import numpy as np
import pytest

from farm import job
from farm.curves import Curve
from farm.records import as_fields
from farm.scheduler import SceneChangedError, run_job
from farm.spec import JobSpec, scene_digest
from tests.helpers.farm_cases import ROOT, exported, reference
from tracer.io import reads


def _copied(tmp_path, scene):
    """``examples/SCENE`` and its assets copied under ``tmp_path``: the path of the copy."""
    shutil.copytree(ROOT / "examples" / "assets", tmp_path / "assets")
    shutil.copy(ROOT / "examples" / scene, tmp_path / scene)
    return tmp_path / scene


def test_the_driver_records_the_digests_of_exactly_the_bytes_the_loader_reads(tmp_path):
    import tracer
    path = _copied(tmp_path, "textures.xml")  # XML, meshes, PNG, JPEG and EXR textures
    with reads.recording() as read:
        tracer.load_scene(str(path), resolution=(16, 16))
    recorded = scene_digest(str(path)).files
    assert {r.path for r in read} == set(recorded) and len(recorded) > 3
    reads.check_reads(read, recorded)  # nothing differs
    exr = next(p for p in recorded if p.endswith(".exr"))
    with open(exr, "ab") as f:
        f.write(b"\0")  # bytes past the image: the same pixels, another file
    with reads.recording() as again:
        tracer.load_scene(str(path), resolution=(16, 16))
    with pytest.raises(reads.SceneChanged, match=f"scene file {exr} changed since the job started") as e:
        reads.check_reads(again, recorded)
    assert e.value.path == exr
    with pytest.raises(reads.SceneChanged, match="not among the job's recorded files"):
        reads.check_reads(again, {p: d for p, d in recorded.items() if p != exr})


def test_a_mesh_edited_after_the_store_recorded_it_stops_the_job_and_its_restoring_resumes_to_the_same_bits(
        local_ray, tmp_path):
    scene = _copied(tmp_path, "orbit.xml")
    spec = JobSpec(scene=str(scene), frames=(0, 1), spp=4, store=str(tmp_path / "s.zarr"), resolution=(16, 16),
                   tile=16, pass_size=4, curves=(Curve("angle", ((0, 0.0), (1, 90.0))),))
    planned, store = job.prepare(spec, lease=True)
    mesh = tmp_path / "assets" / "torus.obj"
    kept = mesh.read_bytes()
    mesh.write_bytes(kept.replace(b"\nv ", b"\nv 0.5 0.5 0.5 1\nv ", 1))  # after the store recorded it (another
    # vertex, which breaks the faces' indices), before a member loads it
    with pytest.raises(SceneChangedError) as e:
        run_job(planned, store, job.group_shapes(planned, local=True), show_progress=False)
    store.lease.release()
    assert e.value.exit_code == 3 and "\n" not in str(e.value)
    assert f"scene file {mesh} changed while the job ran" in str(e.value) and "--replace" in str(e.value)
    assert store.progress()["state"] == "stopped" and str(mesh) in store.progress()["error"]
    assert not as_fields(store.all_records()).any()  # nothing of the edited mesh was stored
    mesh.write_bytes(kept)
    planned, store = job.prepare(spec)
    run_job(planned, store, job.group_shapes(planned, local=True), show_progress=False)
    for image, want in zip(exported(store.url, tmp_path), reference(planned)):
        np.testing.assert_array_equal(image, want)
