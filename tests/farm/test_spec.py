"""What the driver reads of a scene (farm.spec over tracer.io.scene_info): the store identity's
scene hash, the film size and the scene's defaults, without JAX, and bad scenes as SpecErrors."""
import hashlib
import os
import re
import pathlib
import textwrap

import defusedxml.ElementTree as ET
import pytest

from farm.errors import SceneFileError, SpecError
from farm.spec import JobSpec, film_size, scene_defaults, scene_hash

ROOT = pathlib.Path(__file__).resolve().parents[2]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).strip() + "\n")
    return str(path)


def _hash_before_scene_info(path):
    """farm.spec.scene_hash as it was before it read scenes through tracer.io (one ElementTree
    pass over the top file's <string name="filename"> elements, defaults substituted)."""
    root = ET.parse(path).getroot()
    defaults = {d.get("name"): d.get("value") for d in root.iter("default")}
    digest = hashlib.sha256(open(path, "rb").read())
    base = os.path.dirname(os.path.abspath(path))
    for el in root.iter("string"):
        if el.get("name") != "filename":
            continue
        name = el.get("value", "")
        for k in sorted(defaults, key=len, reverse=True):
            name = name.replace("$" + k, str(defaults[k]))
        digest.update(name.encode())
        full = os.path.join(base, name)
        if os.path.isfile(full):
            with open(full, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


@pytest.mark.parametrize("name", ["cbox", "dof", "materials", "mesh", "orbit", "textures"])
def test_stores_made_before_keep_their_identity(name):
    """Scenes without includes or spectrum files hash as before (their stores stay resumable)."""
    path = str(ROOT / "examples" / f"{name}.xml")
    assert scene_hash(path) == _hash_before_scene_info(path)
    frames = [(("angle", str(10.0 * f)),) for f in range(4)] if name == "orbit" else [()]
    assert scene_hash(path, frames) == _hash_before_scene_info(path)


SCENE = """
    <scene version="3.0.0">
        <default name="frame" value="0"/>
        <include filename="parts/look.xml"/>
        <sensor type="perspective"><film type="hdrfilm"><integer name="width" value="40"/></film></sensor>
        <shape type="obj"><string name="filename" value="{mesh}"/><ref id="mat"/></shape>
    </scene>
"""


@pytest.fixture
def scene(tmp_path):
    write(tmp_path, "parts/look.xml", """
        <scene version="2.1.0">
            <default name="tint" value="0.5"/>
            <bsdf type="conductor" id="mat"><spectrum name="eta" filename="eta.spd"/></bsdf>
        </scene>
    """)
    write(tmp_path, "parts/eta.spd", "400 1.5\n700 1.4\n")
    for frame in range(3):
        write(tmp_path, f"mesh_{frame}.obj", "v 0 0 0\n")
    return tmp_path


@pytest.mark.parametrize("changed", ["parts/look.xml", "parts/eta.spd", "mesh_0.obj"])
def test_hash_covers_includes_spectra_and_resources(scene, changed):
    path = write(scene, "s.xml", SCENE.format(mesh="mesh_0.obj"))
    before = scene_hash(path)
    with open(scene / changed, "a") as f:
        f.write("\n")
    assert scene_hash(path) != before


def test_hash_covers_the_files_every_frame_reads(scene):
    path = write(scene, "s.xml", SCENE.format(mesh="mesh_$frame.obj"))
    frames = [(("frame", str(f)),) for f in range(3)]
    before = scene_hash(path, frames)
    assert scene_hash(path) != before  # frame 0 alone reads fewer files
    with open(scene / "mesh_2.obj", "a") as f:
        f.write("\n")
    assert scene_hash(path, frames) != before


def test_defaults_and_film_size(scene):
    path = write(scene, "s.xml", SCENE.format(mesh="mesh_0.obj"))
    assert scene_defaults(path) == {"frame": "0", "tint": "0.5"}
    spec = JobSpec(scene=path, frames=(0, 0), spp=4, store="unused")
    assert film_size(spec) == (40, 576)  # the film's width, Mitsuba's default height
    assert film_size(JobSpec(scene=path, frames=(0, 0), spp=4, store="unused", resolution=(8, 6))) == (8, 6)


@pytest.mark.parametrize("text, message", [
    ('<scene version="3.0.0"><sensor type="perspective"><film type="hdrfilm">'
     '<integer name="width" value="2147483647"/><integer name="height" value="1"/></film></sensor></scene>',
     "between 1 and 16384"),
    ('<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
     '<scene version="3.0.0"><sensor type="perspective"/><string name="x" value="&b;"/></scene>', "refused XML entity"),
    ('<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY ext SYSTEM "file:///etc/passwd">]>\n'
     '<scene version="3.0.0"><sensor type="perspective"/><string name="x" value="&ext;"/></scene>',
     "refused XML entity"),
    ('<scene version="3.0.0"><sensor type="perspective"/>\n<include filename="gone.xml"/></scene>',
     "s.xml:2: included file 'gone.xml' not found"),
    ('<scene version="3.0.0"><sensor type="perspective"/>\n<shape type="obj">'
     '<string name="filename" value="gone.obj"/></shape></scene>', "s.xml:2: file 'gone.obj' not found"),
])
def test_bad_scenes_are_one_line_scene_errors(tmp_path, text, message):
    path = tmp_path / "s.xml"
    path.write_text(text)
    spec = JobSpec(scene=str(path), frames=(0, 0), spp=4, store="unused")
    with pytest.raises(SceneFileError) as info:
        film_size(spec)
        scene_hash(str(path))
    assert message in str(info.value) and "\n" not in str(info.value)


JOB = 'scene = "scene.xml"\nstore = "s.zarr"\nspp = 4\n'


@pytest.mark.parametrize("text, message", [
    (b'scene = "caf\xe9.xml"\nstore = "s.zarr"\nspp = 4\n', "not UTF-8 text (byte 12 is 0xe9)"),
    (JOB.replace('"scene.xml"', "5"), "scene must be a path (a non-empty string), got 5"),
    (JOB.replace('"s.zarr"', "[1]"), "store must be a path (a non-empty string), got [1]"),
    (JOB.replace('"scene.xml"', '""'), "scene must be a path"),
    (JOB + "params = 5\n", "params must be [params.NAME] tables, got 5"),
    (JOB + "[params]\nangle = 5\n", "[params.angle] needs 'value' or 'keys'"),
    (JOB + "[params.angle]\nvalue = nan\n", "parameter 'angle': a value must be a finite number or a string, got nan"),
    (JOB + "[params.angle]\nvalue = true\n", "a value must be a finite number or a string, got True"),
    (JOB + "[params.angle]\nvalue = 1979-05-27\n", "a value must be a finite number or a string"),
    (JOB + "[params.angle]\nkeys = [[0.5, 1.0]]\n", "a key's frame must be a whole number, got 0.5"),
    (JOB + "[params.angle]\nkeys = 7\n", "keys must be [[FRAME, VALUE], ...], got 7"),
    (JOB + "[params.angle]\nvalue = 1\ninterpolation = 3\n", "interpolation must be one of linear, step, smooth, "
                                                               "got 3"),
    (JOB + "groups = 5\n", "[groups] must be a table, got 5"),
    (JOB + "[groups]\nbogus = 1\n", "[groups]: unknown key 'bogus'"),
    (JOB + "[groups]\ngpus_per_host = 'a'\n", "groups.gpus_per_host must be a whole number >= 0, got 'a'"),
    (JOB + "frames = 2.5\n", "frames must be \"A-B\" or [A, B], got 2.5"),
    (JOB + "frames = [0, 3000000000]\n", "frame numbers go up to 2147483647"),
    (JOB + "frames = \"0-100000\"\n", "at most 100000 frames a job"),
    (JOB + "resolution = \"3x4\"\n", "resolution must be [WIDTH, HEIGHT], got '3x4'"),
    (JOB + "resolution = [0, 4]\n", "width and height must be between 1 and 16384"),
    (JOB.replace("spp = 4", "spp = 99999999999999999999"), "spp must be a whole number from 1 to 1073741824"),
    (JOB.replace("spp = 4", "spp = 4.0"), "spp must be a whole number from 1 to 1073741824, got 4.0"),
    (JOB.replace("spp = 4", "spp = " + "9" * 5000), "not valid TOML"),
    (JOB + "tile = 0\n", "tile must be a whole number of pixels from 8 to 4096, got 0"),
    (JOB + "pass_size = 100000\n", "pass_size must be a whole number from 1 to 1024"),
    (JOB + "seed = -1\n", "seed must be a whole number from 0 to 2147483647"),
    (JOB + "accel = [1]\n", "accel must be one of auto, embree, warp, jax, got [1]"),
    (JOB + "aovs = 5\n", "aovs must be \"NAME:TYPE,...\" (e.g. \"albedo:albedo,nn:sh_normal\"), got 5"),
    (JOB + "aovs = \"albedo\"\n", "aovs: AOV 'albedo' is not a name:type pair"),
    (JOB + "aovs = \"n:normal\"\n", "aovs: unsupported AOV type 'normal' in 'n:normal'"),
    (JOB + "aovs = \"a:albedo,a:depth\"\n", "aovs: an AOV name is given twice in 'a:albedo,a:depth'"),
    (JOB + "rfilter = \"boxx\"\n", "rfilter must be one of box, tent, gaussian, mitchell, catmullrom, lanczos, "
                                    "got 'boxx'"),
    (JOB + "x = " + "[" * 5000 + "]" * 5000 + "\n", "not"),
    (JOB + "'\\n' = 1\n", "unknown key"),
])
def test_a_bad_job_file_is_one_spec_error_naming_the_field(tmp_path, text, message):
    path = tmp_path / "job.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SpecError) as failure:
        JobSpec.from_toml(str(path))
    assert str(failure.value).startswith(f"{path}: ") and message in str(failure.value), str(failure.value)


def test_a_recorded_spec_of_the_wrong_shape_is_a_spec_error():
    good = JobSpec(scene="/s.xml", frames=(0, 1), spp=4, store="s.zarr").planned().to_json()
    assert JobSpec.from_json(good) == JobSpec(scene="/s.xml", frames=(0, 1), spp=4, store="s.zarr").planned()
    for bad, message in ((5, "a job spec must be a JSON object"), (dict(good, spp="4"), "spp must be"),
                         (dict(good, frames=[0]), "frames must be two whole numbers"),
                         (dict(good, curves=[["a", "linear"]]), "curves must be"),
                         (dict(good, curves=[["a", "linear", 5]]), "keys must be (frame, value) pairs"),
                         (dict(good, groups=[]), "[groups] must be a table"), (dict(good, extra=1), "unknown field"),
                         ({k: v for k, v in good.items() if k != "spp"}, "a job spec needs spp")):
        with pytest.raises(SpecError, match=re.escape(message)):
            JobSpec.from_json(bad)


def test_a_jobs_aovs_and_filter_are_read_recorded_and_part_of_its_identity(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(JOB + 'aovs = "albedo:albedo, nn:sh_normal"\nrfilter = "box"\n')
    spec = JobSpec.from_toml(str(path))
    assert (spec.aovs, spec.rfilter) == ("albedo:albedo, nn:sh_normal", "box")
    assert JobSpec.from_json(spec.planned().to_json()) == spec.planned()
    identity = spec.identity("h")
    assert identity["aovs"] == [["albedo", "albedo"], ["nn", "sh_normal"]] and identity["rfilter"] == "box"
    plain = JobSpec(scene=spec.scene, frames=spec.frames, spp=4, store=spec.store).identity("h")
    assert "aovs" not in plain and "rfilter" not in plain  # the identity of stores made before stays
