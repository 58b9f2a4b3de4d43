"""scene_info.describe: what the farm knows of a scene without building it (film, samples, defaults,
files), read by the same parser and functions as the loader."""
import os
import textwrap

import pytest

from tracer.errors import SceneError
from tracer.io.scene_info import SAMPLERS, describe, mitsuba_sample_count


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).strip() + "\n")
    return str(path)


SCENE = """
    <scene version="3.0.0">
        <default name="spp" value="16"/>
        <default name="mesh" value="a.obj"/>
        <default name="width" value="64"/>
        <path value="assets"/>
        <include filename="parts/material.xml"/>
        <sensor type="perspective">
            <film type="hdrfilm"><integer name="width" value="$width"/><integer name="height" value="48"/></film>
            <sampler type="independent"><integer name="sample_count" value="$spp"/></sampler>
        </sensor>
        <shape type="obj"><string name="filename" value="$mesh"/><ref id="mat"/></shape>
        <shape type="obj"><string name="filename" value="$mesh"/></shape>
        <default name="width" value="1"/>
    </scene>
"""
MATERIAL = """
    <scene version="2.1.0">
        <default name="albedo" value="0.5"/>
        <bsdf type="conductor" id="mat">
            <spectrum name="eta" filename="spectra/eta.spd"/>
            <texture type="bitmap" name="specular_reflectance"><string name="filename" value="wood.png"/></texture>
        </bsdf>
    </scene>
"""


@pytest.fixture
def scene(tmp_path):
    write(tmp_path, "parts/material.xml", MATERIAL)
    write(tmp_path, "parts/spectra/eta.spd", "400 1.5\n700 1.4\n")
    write(tmp_path, "assets/a.obj", "v 0 0 0\n")
    write(tmp_path, "assets/b.obj", "v 0 0 0\n")
    write(tmp_path, "parts/wood.png", "not read here")
    return write(tmp_path, "scene.xml", SCENE)


def test_describes_film_samples_defaults_and_files(scene, tmp_path):
    info = describe(scene)
    assert info.film_size == (64, 48) and info.spp == 16
    assert info.defaults == {"spp": "16", "mesh": "a.obj", "albedo": "0.5", "width": "64"}
    files = [(f.kind, f.name, os.path.relpath(f.path, tmp_path), f.where.rsplit(":", 1)[-1], f.varies)
             for f in info.files]
    assert files == [
        ("xml", scene, "scene.xml", scene, False),
        ("xml", "parts/material.xml", "parts/material.xml", "6", False),
        ("spectrum", "spectra/eta.spd", "parts/spectra/eta.spd", "4", False),      # relative to the include
        ("resource", "wood.png", "parts/wood.png", "5", False),
        ("resource", "a.obj", "assets/a.obj", "11", True),                        # through <path>
        ("resource", "a.obj", "assets/a.obj", "12", True),
    ]


def test_parameters_change_what_it_describes(scene):
    info = describe(scene, spp=4, width=32, mesh="b.obj")
    assert info.film_size == (32, 48) and info.spp == 4
    assert [os.path.basename(f.path) for f in info.files[-2:]] == ["b.obj", "b.obj"]
    assert info.defaults["spp"] == "16"  # the scene's own defaults, whatever was passed


def test_mitsubas_defaults_without_film_or_sampler(tmp_path):
    info = describe(write(tmp_path, "s.xml", '<scene version="3.0.0"><sensor type="perspective"/></scene>'))
    assert info.film_size == (768, 576) and info.spp == 4 and info.files[0].kind == "xml"


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_sample_counts_are_rounded_as_mitsubas_samplers_round_them(sampler):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    for count in (1, 2, 3, 4, 5, 7, 9, 10, 16, 17, 24, 50, 64, 100, 1000, 4097):
        theirs = mi.load_dict({"type": sampler, "sample_count": count}).sample_count()
        assert mitsuba_sample_count(sampler, count) == theirs, (sampler, count)


def test_sampler_parameters_that_change_nothing_are_taken(tmp_path):
    path = write(tmp_path, "s.xml", """
        <scene version="3.0.0"><sensor type="perspective"><sampler type="orthogonal">
            <integer name="sample_count" value="5"/><integer name="seed" value="7"/>
            <boolean name="jitter" value="false"/><integer name="strength" value="2"/>
        </sampler></sensor></scene>
    """)
    assert describe(path).spp == 9


@pytest.mark.parametrize("body, message", [
    ('<sensor type="perspective"><sampler type="sobol"/></sensor>', r"s\.xml:2: unsupported sampler 'sobol'"),
    ('<sensor type="perspective"><sampler type="independent"><integer name="sample_count" value="0"/></sampler>'
     '</sensor>', "sample_count must be at least 1"),
    ('<sensor type="perspective"><sampler type="independent"><float name="gamma" value="1"/></sampler></sensor>',
     "unsupported parameter 'gamma'"),
    ('<sensor type="perspective"><film type="hdrfilm"><integer name="width" value="0"/></film></sensor>',
     "film width must be between 1 and 16384"),
    ('<sensor type="perspective"/><sensor type="perspective"/>', "exactly one <sensor>, found 2"),
    ('<sensor type="perspective"/><shape type="obj"><string name="filename" value="gone.obj"/></shape>',
     r"s\.xml:2: file 'gone.obj' not found"),
    ('<sensor type="perspective"/><include filename="nothere.xml"/>', r"s\.xml:2: included file 'nothere.xml'"),
])
def test_bad_scenes_are_scene_errors(tmp_path, body, message):
    path = write(tmp_path, "s.xml", f'<scene version="3.0.0">\n{body}\n</scene>')
    with pytest.raises(SceneError, match=message):
        describe(path)


@pytest.mark.parametrize("text", [
    '<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
    '<scene version="3.0.0"><sensor type="perspective"/><string name="x" value="&b;"/></scene>',
    '<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY ext SYSTEM "file:///etc/passwd">]>\n'
    '<scene version="3.0.0"><sensor type="perspective"/><string name="x" value="&ext;"/></scene>',
])
def test_entity_bombs_and_external_entities_are_scene_errors(tmp_path, text):
    path = tmp_path / "s.xml"
    path.write_text(text)
    with pytest.raises(SceneError, match="refused XML entity"):
        describe(path)
