"""A fuzzer the project keeps: mutated scenes and their assets, loaded and rendered.

Hypothesis mutates one file of a small scene: its XML (a number made NaN, infinite, huge,
negative or zero; an attribute given a string of the wrong kind; an element deleted, duplicated,
given another plugin type or tag, replaced by a ``<ref>``, made to refer to itself, or moved
into another), or one of its assets, an ASCII and a binary PLY, an OBJ, an EXR environment map
and a PNG texture (a bit flipped, a byte replaced or inserted, the file cut, a number token
replaced; an EXR texel set to one of those numbers). The property: ``tracer.load_scene`` and a
tiny render (the film's few pixels, 1 sample) either give a finite image or raise the project's
own ``SceneError``, in one line, within ``BOUND_S`` seconds and without the process's peak
memory growing by more than ``MEMORY_BOUND``. A film larger than ``RENDERED_PIXELS`` is loaded
but not rendered (legal, only slow). Each load runs in a child process
(``tests.helpers.fuzz_child``): a decoder's memory error fails the mutant, not a later test.

The examples below are the seed corpus (issue 19's cases); ``HYPOTHESIS_PROFILE=explore`` draws
afresh. ``pytest --hypothesis-show-statistics`` prints how the mutants were classified.
"""
import pathlib
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.helpers import fuzz_child
from tests.helpers.mesh_files import triangle_ply
from tests.helpers.mutations import BYTE_KINDS, NUMBERS, XML_KINDS, mutate_bytes, mutate_number, mutate_xml
from tracer.io.images import write_exr

SCENE = """<scene version="3.0.0">
  <default name="spp" value="1"/>
  <integrator type="path"><integer name="max_depth" value="3"/><integer name="rr_depth" value="2"/></integrator>
  <sensor type="thinlens">
    <float name="fov" value="45"/>
    <float name="aperture_radius" value="0.01"/>
    <float name="focus_distance" value="4"/>
    <float name="near_clip" value="0.01"/>
    <transform name="to_world"><lookat origin="0, 1, 4" target="0, 0.2, 0" up="0, 1, 0"/></transform>
    <sampler type="independent"><integer name="sample_count" value="$spp"/></sampler>
    <film type="hdrfilm">
      <integer name="width" value="4"/><integer name="height" value="3"/>
      <rfilter type="gaussian"><float name="stddev" value="0.5"/></rfilter>
    </film>
  </sensor>
  <emitter type="envmap" id="sky">
    <string name="filename" value="sky.exr"/>
    <float name="scale" value="0.5"/>
    <transform name="to_world"><rotate y="1" angle="30"/></transform>
  </emitter>
  <emitter type="point"><point name="position" x="1" y="2" z="1"/><rgb name="intensity" value="3, 2, 1"/></emitter>
  <bsdf type="diffuse" id="grey"><rgb name="reflectance" value="0.5"/></bsdf>
  <shape type="ply">
    <string name="filename" value="ascii.ply"/>
    <transform name="to_world"><translate x="-1"/></transform>
    <ref id="grey"/>
  </shape>
  <shape type="ply">
    <string name="filename" value="binary.ply"/>
    <bsdf type="roughconductor"><float name="alpha" value="0.2"/><string name="material" value="Cu"/></bsdf>
  </shape>
  <shape type="obj">
    <string name="filename" value="quad.obj"/>
    <transform name="to_world"><scale value="3"/><rotate x="1" angle="-90"/></transform>
    <bsdf type="twosided">
      <bsdf type="diffuse">
        <texture type="bitmap" name="reflectance">
          <string name="filename" value="texture.png"/>
          <transform name="to_uv"><scale x="2" y="2"/></transform>
        </texture>
      </bsdf>
    </bsdf>
  </shape>
  <shape type="sphere">
    <point name="center" x="0.5" y="0.5" z="0"/>
    <float name="radius" value="0.3"/>
    <bsdf type="blendbsdf">
      <float name="weight" value="0.3"/>
      <bsdf type="dielectric"><float name="int_ior" value="1.5"/></bsdf>
      <bsdf type="plastic"><rgb name="diffuse_reflectance" value="0.1, 0.2, 0.6"/></bsdf>
    </bsdf>
  </shape>
  <shape type="disk">
    <transform name="to_world"><scale value="0.2"/><translate y="1.5"/></transform>
    <emitter type="area"><rgb name="radiance" value="4"/></emitter>
  </shape>
</scene>
"""
OBJ = b"""# a quad with uvs and normals
v -0.5 -0.5 0
v 0.5 -0.5 0
v 0.5 0.5 0
v -0.5 0.5 0
vt 0 0
vt 1 0
vt 1 1
vt 0 1
vn 0 0 1
f 1/1/1 2/2/1 3/3/1
f 1/1/1 3/3/1 4/4/1
"""
POSITIONS = [(0, 0, 0), (0.6, 0, 0), (0, 0.6, 0), (0.3, 0.3, 0.5)]
FACES = [(0, 1, 2), (0, 1, 3), (1, 2, 3)]
NORMALS = (("nx", "float"), ("ny", "float"), ("nz", "float"), ("u", "float"), ("v", "float"))
NORMAL_VALUES = np.array([[0, 0, -1, 0, 0], [0, 0, -1, 1, 0], [0, 0, -1, 0, 1], [0, 0, 1, 0.5, 0.5]])
BINARY_PLY = triangle_ply("binary_little_endian", POSITIONS, FACES, NORMALS, NORMAL_VALUES,
                          index_type=("uchar", "uint"))
ASSETS = ("scene.xml", "ascii.ply", "binary.ply", "quad.obj", "sky.exr", "texture.png")


def _write_assets(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scene.xml").write_text(SCENE)
    (folder / "ascii.ply").write_bytes(triangle_ply("ascii", POSITIONS, FACES, NORMALS, NORMAL_VALUES))
    (folder / "binary.ply").write_bytes(BINARY_PLY)
    (folder / "quad.obj").write_bytes(OBJ)
    write_exr(folder / "sky.exr", _sky())
    texels = (np.arange(4 * 4 * 3).reshape(4, 4, 3) * 5).astype(np.uint8)
    Image.fromarray(texels).save(folder / "texture.png")


def _sky():
    y = np.linspace(0, 1, 4, dtype=np.float32)[:, None, None]
    return np.broadcast_to(np.concatenate([1.5 - y, 1 + 0 * y, 0.5 + y], axis=2), (4, 8, 3)).copy()


@pytest.fixture(scope="module")
def seed_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scene_fuzz") / "seed"
    _write_assets(folder)
    return folder


def _mutate(target, data, kind, where, what):
    """One mutation of ``target``'s bytes: a structural one for the XML (``XML_KINDS``), a number
    token ("number": in a binary file's header only), an EXR texel ("texel"), or bytes."""
    if target == "scene.xml" and kind in XML_KINDS:
        return mutate_xml(data, kind, where, what)
    if kind == "number":
        header_end = data.find(b"end_header") if target == "binary.ply" else -1
        return mutate_number(data, where, what, end=None if header_end < 0 else header_end)
    if kind == "texel":
        image = _sky()
        image.reshape(-1)[where % image.size] = float(NUMBERS[what % len(NUMBERS)])
        with tempfile.TemporaryDirectory() as tmp:
            write_exr(pathlib.Path(tmp) / "sky.exr", image)
            return (pathlib.Path(tmp) / "sky.exr").read_bytes()
    return mutate_bytes(data, kind if kind in BYTE_KINDS else "byte", where, what)


def _run(target, mutations):
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        shutil.copytree(SEED, folder, dirs_exist_ok=True)
        data = (folder / target).read_bytes()
        for kind, where, what in mutations:
            data = _mutate(target, data, kind, where, what)
        (folder / target).write_bytes(data)
        return fuzz_child.run(CHILD, folder / "scene.xml")


SEED = CHILD = None  # set by the autouse fixtures below: hypothesis's examples cannot take fixtures


@pytest.fixture(scope="module")
def child():
    with fuzz_child.child_process() as pool:
        yield pool


@pytest.fixture(autouse=True)
def _seed(seed_folder, child):
    global SEED, CHILD
    SEED, CHILD = seed_folder, child


def test_the_seed_scene_renders():
    """The unmutated scene loads and renders a finite, non-black image (else every mutant is refused)."""
    assert _run("scene.xml", []) == "rendered"


xml_mutation = st.tuples(st.sampled_from(XML_KINDS + ("flip", "truncate")), st.integers(0, 2**16), st.integers(0, 2**16))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(xml_mutation, min_size=1, max_size=3))
@example(mutations=[("number", 9, 0)])          # an NaN somewhere
@example(mutations=[("retype", 30, 5)])         # a plugin of the wrong type
@example(mutations=[("ref", 40, 0)])            # a plugin that refers to itself
def test_mutated_scene_xml(mutations):
    event(f"scene.xml: {_run('scene.xml', mutations)}")


# Issue 19's scene cases, each an edit of one file of the seed scene: (file, old, new).
_FIRST_FACE = BINARY_PLY.index(b"end_header\n") + 11 + len(POSITIONS) * (3 + len(NORMALS)) * 4
ISSUE_CASES = [
    ("ascii.ply", "\n3 1 2 3", "\n2.5 1 2 3"),                 # hung for ever
    ("ascii.ply", "\n3 1 2 3", "\nnan 1 2 3"),
    ("ascii.ply", "\n3 1 2 3", "\ninf 1 2 3"),
    ("ascii.ply", "\n3 1 2 3", "\n-3 1 2 3"),
    ("ascii.ply", "\n3 1 2 3", "\n1e30 1 2 3"),
    ("binary.ply", BINARY_PLY[_FIRST_FACE - 4:_FIRST_FACE + 1], BINARY_PLY[_FIRST_FACE - 4:_FIRST_FACE] + b"\xff"),
    ("binary.ply", b"element face 3", b"element face 4294967295"),
    ("quad.obj", "v 0.5 0.5 0", "v 0.5 1e300 0"),
    ("scene.xml", '<float name="stddev" value="0.5"/>', '<float name="stddev" value="1000"/>'),  # hung
    ("scene.xml", '<float name="stddev" value="0.5"/>', '<float name="stddev" value="0"/>'),
    ("scene.xml", '<rfilter type="gaussian"><float name="stddev" value="0.5"/>',
     '<rfilter type="tent"><float name="radius" value="1e38"/>'),
    ("scene.xml", '<integer name="max_depth" value="3"/>', '<integer name="max_depth" value="2147483648"/>'),
    ("scene.xml", '<rotate y="1" angle="30"/>', '<rotate y="1" angle="inf"/>'),
    ("scene.xml", 'version="3.0.0"', f'version="{"1" * 5001}.0.0"'),
    ("scene.xml", '<integer name="width" value="4"/>', '<integer name="width" value="100000"/>'),
    ("scene.xml", '<integer name="width" value="4"/>', '<integer name="width" value="1e20"/>'),
    ("scene.xml", '<integer name="width" value="4"/>', '<integer name="width" value="2147483647"/>'),
    ("scene.xml", '<float name="scale" value="0.5"/>', '<float name="scale" value="3e38"/>'),
    ("scene.xml", '<lookat origin="0, 1, 4"', '<scale value="0"/><lookat origin="0, 1, 4"'),
    ("scene.xml", '<float name="fov" value="45"/>', '<float name="fov" value="180"/>'),
    ("scene.xml", '<float name="near_clip" value="0.01"/>', '<float name="near_clip" value="nan"/>'),
    ("scene.xml", '<float name="aperture_radius" value="0.01"/>', '<float name="aperture_radius" value="nan"/>'),
    ("scene.xml", '<translate x="-1"/>', '<scale value="0"/>'),
    ("scene.xml", '<translate x="-1"/>', '<scale x="0"/>'),
    ("scene.xml", '<translate x="-1"/>', '<matrix value="1 0 0 0 0 1 0 0 0 0 1 0 0 0 1 1"/>'),
    ("scene.xml", '<translate x="-1"/>', '<scale value="1e300"/>'),
    ("scene.xml", '<rgb name="reflectance" value="0.5"/>', '<rgb name="reflectance" value="-0.5"/>'),
    ("scene.xml", '<rgb name="intensity" value="3, 2, 1"/>', '<rgb name="intensity" value="3e38"/>'),
    ("scene.xml", '<sampler type="independent">', '<sampler type="sobol">'),
    ("scene.xml", '<bsdf type="diffuse" id="grey">', '<bsdf type="twosided">' * 3000 + '<bsdf type="diffuse" id="grey">'
     + "</bsdf>" * 3000),
    ("scene.xml", '<bsdf type="diffuse" id="grey">', "".join(f'<bsdf type="twosided" id="c{i}"><ref id="c{i + 1}"/></bsdf>'
                                                             for i in range(3000)) + '<bsdf type="diffuse" id="c3000"/>'
     + '<bsdf type="diffuse" id="grey">'),
]


@pytest.mark.parametrize("target, old, new", ISSUE_CASES)
def test_issue_cases_are_refused(target, old, new):
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        shutil.copytree(SEED, folder, dirs_exist_ok=True)
        encode = (lambda v: v.encode()) if isinstance(old, str) else (lambda v: v)
        data = (folder / target).read_bytes()
        assert data.count(encode(old)) == 1
        (folder / target).write_bytes(data.replace(encode(old), encode(new), 1))
        assert fuzz_child.run(CHILD, folder / "scene.xml").startswith("refused: ")


asset_mutation = st.tuples(st.sampled_from(BYTE_KINDS + ("number",)), st.integers(0, 2**20), st.integers(0, 2**16))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(ASSETS[1:]), mutations=st.lists(asset_mutation, min_size=1, max_size=3))
@example(target="texture.png", mutations=[("flip", 20, 3)])             # the IHDR's width
@example(target="sky.exr", mutations=[("truncate", 300, 0)])
def test_mutated_assets(target, mutations):
    event(f"{target}: {_run(target, mutations)}")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.integers(0, 95), what=st.integers(0, len(NUMBERS) - 1))
@example(where=0, what=NUMBERS.index("3e38"))
@example(where=5, what=NUMBERS.index("-1"))
def test_mutated_environment_map_texels(where, what):
    event(f"sky.exr texel: {_run('sky.exr', [('texel', where, what)])}")
