"""The Mitsuba XML parser: substitution, refs, includes, values, errors, and transforms
compared with Mitsuba 3's own parser (``mitsuba.parser``, double precision)."""
import os
import textwrap

import numpy as np
import pytest

from tracer.errors import SceneError
from tracer.io.xml import PluginNode, parse_file, parse_string


def scene(body, version="3.0.0"):
    return f'<scene version="{version}">\n' + textwrap.dedent(body).strip("\n") + "\n</scene>\n"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------------------------- defaults
def test_defaults_and_arguments(tmp_path):
    path = write(tmp_path, "s.xml", scene("""
        <default name="spp" value="16"/>
        <default name="res" value="64"/>
        <default name="resx" value="128"/>
        <sampler type="independent"><integer name="sample_count" value="$spp"/></sampler>
        <film type="hdrfilm">
            <integer name="width" value="$resx"/>
            <integer name="height" value="$res"/>
            <string name="note" value="costs \\$5, $res px"/>
        </film>
    """))
    root = parse_file(path)
    sampler, film = root.children_of("sampler")[0], root.children_of("film")[0]
    assert sampler.get_int("sample_count") == 16
    assert film.get_int("width") == 128  # longest name first: $resx is not $res + "x"
    assert film.get_int("height") == 64
    assert film.get_string("note") == "costs $5, 64 px"
    assert parse_file(path, spp=4, res=32).children_of("sampler")[0].get_int("sample_count") == 4


def test_undefined_parameter_names_it(tmp_path):
    path = write(tmp_path, "s.xml", scene("""
        <sampler type="independent">
            <integer name="sample_count" value="$nope"/>
        </sampler>
    """))
    with pytest.raises(SceneError, match=r"s\.xml:3: .*\$nope"):
        parse_file(path)


# ---------------------------------------------------------------------------------- structure
def test_refs_are_shared_and_named(tmp_path):
    root = parse_string(scene("""
        <shape type="sphere"><ref id="mat"/></shape>
        <texture type="bitmap" id="tex"><string name="filename" value="t.png"/></texture>
        <bsdf type="diffuse" id="mat"><ref name="reflectance" id="tex"/></bsdf>
        <shape type="sphere"><ref id="mat"/></shape>
    """), tmp_path)
    shapes = root.children_of("shape")
    a, b = (s.children_of("bsdf")[0] for s in shapes)
    assert a is b is root.children_of("bsdf")[0]  # forward ref resolved to the same object
    tex = a.child("reflectance")
    assert tex is root.children_of("texture")[0]
    assert a.get_texture("reflectance") is tex
    assert tex.get_path("filename") == str(tmp_path / "t.png")
    assert a.named_children() == [("reflectance", tex)]


def test_nested_named_plugins(tmp_path):
    root = parse_string(scene("""
        <bsdf type="diffuse">
            <texture type="checkerboard" name="reflectance">
                <rgb name="color0" value="0.1"/>
            </texture>
        </bsdf>
    """), tmp_path)
    bsdf = root.children_of("bsdf")[0]
    assert bsdf.has("reflectance") and not bsdf.has("foo")
    tex = bsdf.child("reflectance")
    assert (tex.category, tex.type, tex.name) == ("texture", "checkerboard", "reflectance")
    np.testing.assert_array_equal(tex.get_rgb("color0"), [0.1, 0.1, 0.1])
    np.testing.assert_array_equal(tex.get_rgb("color1", 0.2), [0.2, 0.2, 0.2])
    assert bsdf.child("nothing") is None


def test_include_relative_to_including_file(tmp_path):
    write(tmp_path, "parts/mat.xml", scene("""
        <default name="albedo" value="0.25"/>
        <bsdf type="diffuse" id="gray"><float name="reflectance" value="$albedo"/></bsdf>
        <shape type="obj" id="mesh"><string name="filename" value="meshes/m.obj"/></shape>
    """))
    write(tmp_path, "parts/meshes/m.obj", "v 0 0 0\n")
    write(tmp_path, "parts/light.xml", '<emitter version="3.0.0" type="constant"/>\n')
    path = write(tmp_path, "main.xml", scene("""
        <include filename="parts/mat.xml"/>
        <shape type="sphere"><ref id="gray"/></shape>
        <shape type="sphere"><include filename="parts/light.xml"/></shape>
        <float name="after" value="$albedo"/>
    """))
    root = parse_file(path)
    assert [c.category for c in root.children] == ["bsdf", "shape", "shape", "shape"]
    gray = root.children[0]
    assert gray.get_rgb("reflectance")[0] == 0.25
    assert gray.source == os.path.normpath(str(tmp_path / "parts/mat.xml")) + ":3"
    assert root.children[1].get_path("filename") == str(tmp_path / "parts/meshes/m.obj")
    assert root.children[2].children_of("bsdf")[0] is gray
    assert root.children[3].children_of("emitter")[0].type == "constant"
    assert root.get_float("after") == 0.25


def test_parse_string_resolves_against_base_dir(tmp_path):
    write(tmp_path, "inc.xml", scene('<float name="x" value="2"/>'))
    root = parse_string(scene('<include filename="inc.xml"/><string name="f" value="a.obj"/>'), tmp_path)
    assert root.get_float("x") == 2.0
    assert root.get_path("f") == str(tmp_path / "a.obj")
    assert root.source == "<string>:1" and root.source_dir == str(tmp_path)


def test_paths_fall_back_to_top_folder_and_path_tags(tmp_path):
    write(tmp_path, "meshes/a.obj", "")
    write(tmp_path, "extra/b.obj", "")
    write(tmp_path, "sub/inc.xml", scene("""
        <shape type="obj"><string name="filename" value="meshes/a.obj"/></shape>
        <shape type="obj"><string name="filename" value="b.obj"/></shape>
        <shape type="obj"><string name="filename" value="missing.obj"/></shape>
    """))
    root = parse_file(write(tmp_path, "s.xml", scene("""
        <path value="extra"/>
        <include filename="sub/inc.xml"/>
    """)))
    a, b, missing = (s.get_path("filename") for s in root.children)
    assert a == str(tmp_path / "meshes/a.obj")   # Mitsuba resolves against the top file
    assert b == str(tmp_path / "extra/b.obj")
    assert missing == str(tmp_path / "sub/missing.obj")


# ---------------------------------------------------------------------------------- values
def test_property_values(tmp_path):
    root = parse_string(scene("""
        <rgb name="c1" value="0.5"/>
        <rgb name="c3" value="0.1, 0.2 0.3"/>
        <spectrum name="s" value="0.7"/>
        <float name="f" value="-1.5e-1"/>
        <integer name="i" value=" -3 "/>
        <boolean name="b" value="TRUE"/>
        <point name="p" value="1, 2, 3"/>
        <vector name="v" y="2"/>
        <point name="q" value="4"/>
    """), tmp_path)
    np.testing.assert_array_equal(root.get_rgb("c1"), [0.5] * 3)
    np.testing.assert_array_equal(root.get_rgb("c3"), [0.1, 0.2, 0.3])
    np.testing.assert_array_equal(root.get_rgb("s"), [0.7] * 3)
    np.testing.assert_array_equal(root.get_rgb("f"), [-0.15] * 3)
    assert root.get_float("f") == -0.15 and root.get_float("i") == -3.0
    assert root.get_int("i") == -3 and root.get_bool("b") is True
    np.testing.assert_array_equal(root.get_point("p"), [1, 2, 3])
    np.testing.assert_array_equal(root.get_vector("v"), [0, 2, 0])
    np.testing.assert_array_equal(root.get_point("q"), [4, 4, 4])
    np.testing.assert_array_equal(root.get_transform("absent"), np.eye(4))
    assert root.get_float("absent", 2.0) == 2.0
    root.check_unused()


@pytest.mark.parametrize("body, message", [
    ('<spectrum name="s" value="400:0.1"/>', "at least two"),
    ('<spectrum name="s" filename="x.spd"/>', "'x.spd' not found"),
    ('<float name="f" value="abc"/>', "floating point"),
    ('<float name="f" value="nan"/>', "'nan' is not a finite number"),
    ('<float name="f" value="-inf"/>', "not a finite number"),
    (f'<float name="f" value="{"9" * 5001}"/>', r"'9999.*\(5001 characters\)' is not a finite number"),
    ('<rgb name="c" value="1, inf, 1"/>', "not a finite number"),
    ('<point name="p" x="nan"/>', "not a finite number"),
    ('<integer name="i" value="1.5"/>', "integer"),
    ('<integer name="i" value="9223372036854775808"/>', "64-bit"),
    (f'<integer name="i" value="{"1" * 5001}"/>', r"could not parse integer value '1111.*\(5001 characters\)"),
    ('<transform name="t"><rotate x="1" angle="inf"/></transform>', "not a finite number"),
    ('<transform name="t"><scale value="1e200"/><scale value="1e200"/></transform>', "not finite"),
    ('<blackbody name="radiance" temperature="5000K"/>', 'Mitsuba 0.x tag; Mitsuba 3 reads <spectrum type="blackbody"'),
    ('<boolean name="b" value="yes"/>', "boolean"),
    ('<rgb name="c" value="1 2"/>', "rgb"),
    ('<float name="f" value="1" bogus="2"/>', "unexpected attribute 'bogus'"),
    ('<float name="f" value="1"/><float name="f" value="2"/>', "given twice"),
    ('<translate x="1"/>', "inside a <transform>"),
    ('<transform name="t"><rotate x="0" angle="3"/></transform>', "axis"),
    ('<transform name="t"><lookat origin="0,0,0" target="0,0,0"/></transform>', "lookat"),
    ('<transform name="t"><matrix value="1 2 3"/></transform>', "16 or 9"),
    ('<hair type="x"/>', "unknown tag <hair>"),
    ('<bsdf type="diffuse" id="a"/><bsdf type="diffuse" id="a"/>', "duplicate id 'a'"),
    ('<shape type="sphere"><ref id="ghost"/></shape>', "undefined id 'ghost'"),
])
def test_errors_name_file_and_line(tmp_path, body, message):
    path = write(tmp_path, "bad.xml", scene(body))
    with pytest.raises(SceneError, match=r"bad\.xml:2: .*" + message) as info:
        parse_file(path)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_accessor_errors(tmp_path):
    root = parse_file(write(tmp_path, "scene.xml", scene("""
        <bsdf type="diffuse" id="d">
            <string name="reflectance" value="red"/>
            <float name="foo" value="1"/>
        </bsdf>
        <shape type="sphere"><bsdf type="conductor"/></shape>
    """)))
    bsdf, shape = root.children
    with pytest.raises(SceneError, match=r"scene\.xml:3: bsdf 'diffuse': parameter 'reflectance' is a <string>"):
        bsdf.get_rgb("reflectance")
    with pytest.raises(SceneError, match=r"scene\.xml:2: bsdf 'diffuse' is missing required parameter 'alpha'"):
        bsdf.get_float("alpha")
    bsdf.get_string("reflectance")
    with pytest.raises(SceneError, match=r"^.*scene\.xml:4: bsdf 'diffuse' has unsupported parameter 'foo'$"):
        bsdf.check_unused()
    bsdf.mark_used("foo")
    bsdf.check_unused()
    with pytest.raises(SceneError, match=r"scene\.xml:6: shape 'sphere' has unsupported nested <bsdf> 'conductor'"):
        shape.check_unused()
    shape.children_of("bsdf")
    shape.check_unused()


def test_synthetic_node():
    node = PluginNode.synthetic("bsdf", "diffuse", reflectance=np.array([0.5, 0.5, 0.5]), alpha=0.1)
    assert node.get_float("alpha") == 0.1
    np.testing.assert_array_equal(node.get_rgb("reflectance"), [0.5] * 3)
    node.check_unused()


@pytest.mark.parametrize("text, message", [
    ('<scene version="3.0.0">\n  <shape type="obj">\n</scene>\n', r"s\.xml:3: malformed XML"),
    ('<scene>\n</scene>', "missing version"),
    ('<scene version="3.0">\n</scene>', "invalid version number '3.0'"),
    ('<scene version="3.x.0">\n</scene>', "invalid version number"),
    ('<scene version="-1.0.0">\n</scene>', "invalid version number"),
    (f'<scene version="{"1" * 5001}">\n</scene>', r"s\.xml:1: invalid version number '1111.*\(5001 characters\)"),
    ('<bsdf version="3.0.0" type="diffuse"/>', "root element must be <scene>"),
    ('<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
     '<scene version="3.0.0"><string name="x" value="&b;"/></scene>', "refused XML entity"),
    ('<?xml version="1.0"?>\n<!DOCTYPE s [<!ENTITY ext SYSTEM "file:///etc/passwd">]>\n'
     '<scene version="3.0.0"><string name="x" value="&ext;"/></scene>', "refused XML entity"),
])
def test_document_errors(tmp_path, text, message):
    with pytest.raises(SceneError, match=message) as info:
        parse_file(write(tmp_path, "s.xml", text))
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_missing_file(tmp_path):
    with pytest.raises(SceneError, match="nothere.xml: file not found"):
        parse_file(tmp_path / "nothere.xml")


# ---------------------------------------------------------------------------------- transforms
TRANSFORMS = {
    "translate": '<translate x="1" y="-2" z="0.5"/>',
    "translate_value": '<translate value="1, 2, 3"/><translate y="4"/>',
    "rotate_axis": '<rotate y="1" angle="30"/>',
    "rotate_unnormalized": '<rotate value="1, 1, 0" angle="-45"/>',
    "scale": '<scale value="2"/><scale x="-1" z="3"/>',
    "lookat": '<lookat origin="1, 2, 3" target="0, 0.5, 0" up="0, 0, 1"/>',
    "lookat_no_up": '<lookat origin="1, 2, 3" target="-1, 0, 4"/>',
    "lookat_down": '<lookat origin="0, 5, 0" target="0, 0, 0" up="0, 0, -1"/>',
    "matrix16": '<matrix value="1 2 3 4  0 1 0 -1  0.5 0 1 2  0 0 0 1"/>',
    "matrix9": '<matrix value="0 -1 0 1 0 0 0 0 2"/>',
    "chain": ('<scale x="2" y="0.5" z="1"/><rotate x="1" y="2" z="3" angle="77"/>'
              '<translate x="1" y="2" z="3"/><rotate z="1" angle="90"/>'
              '<matrix value="1 0.2 0 0 0 1 0 0 0 0 1 0 0 0 0 1"/>'),
    "lookat_then_translate": '<lookat origin="0, 0, 4" target="0, 0, 0" up="0, 1, 0"/><translate x="1"/>',
}


def test_transforms_match_mitsuba(tmp_path):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    text = scene("\n".join(f'<shape type="sphere" id="{name}"><transform name="to_world">{ops}</transform></shape>'
                           for name, ops in TRANSFORMS.items()))
    nodes = {node.id: node for node in parse_string(text, tmp_path).children}
    state = mi.parser.parse_string(mi.parser.ParserConfig("scalar_rgb"), text)
    for name in TRANSFORMS:
        expected = state.nodes[state.id_to_index[name]].props["to_world"]
        np.testing.assert_allclose(nodes[name].get_transform("to_world"), np.array(expected.matrix, np.float64),
                                   rtol=0, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(nodes[name].get_normal_transform("to_world"),
                                   np.array(expected.inverse_transpose, np.float64), rtol=0, atol=1e-12,
                                   err_msg=name)


def test_sensor_lookat_matches_mitsuba_camera(tmp_path):
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    text = scene("""
        <sensor type="perspective">
            <transform name="to_world"><lookat origin="3, 1, -2" target="0, 0.3, 0" up="0, 1, 0"/></transform>
        </sensor>
    """)
    ours = parse_string(text, tmp_path).children[0].get_transform("to_world")
    sensor = mi.load_string(text).sensors()[0]
    expected = np.array(sensor.world_transform().matrix, np.float64)
    np.testing.assert_allclose(ours, expected, atol=1e-6)


# ---------------------------------------------------------------------------------- versions
OLD_SCENE = """
    <bsdf type="diffuse" id="d"><rgb name="diffuseReflectance" value="0.25"/></bsdf>
    <bsdf type="roughplastic" id="p"><float name="intIOR" value="1.6"/><string name="distribution" value="ggx"/>
        <texture type="checkerboard" name="diffuseReflectance" id="c">
            <float name="uoffset" value="0.5"/><float name="vscale" value="3"/><integer name="uscale" value="2"/>
        </texture>
    </bsdf>
    <sensor type="perspective" id="s"><float name="nearClip" value="0.5"/><float name="fooBARBaz" value="1"/>
        <transform name="toWorld"><translate x="1"/></transform>
        <sampler type="independent"><integer name="sampleCount" value="8"/></sampler>
    </sensor>
"""


def _mitsuba_props(mi, text):
    config = mi.parser.ParserConfig("scalar_rgb")
    state = mi.parser.parse_string(config, text)
    mi.parser.transform_upgrade(config, state)
    return state


@pytest.mark.parametrize("version", ["0.6.0", "1.9.9"])
def test_old_versions_are_upgraded_as_mitsuba_upgrades_them(tmp_path, version):
    """camelCase to snake_case (Mitsuba's rule: 'fooBARBaz' -> 'foo_barbaz'), a diffuse's
    diffuse_reflectance to reflectance, uoffset/vscale/... to to_uv; checked name by name and
    value by value against Mitsuba's own upgrade pass."""
    mi = pytest.importorskip("mitsuba")
    mi.set_variant("scalar_rgb")
    text = scene(OLD_SCENE, version=version)
    nodes = {n.id: n for n in _walk(parse_string(text, tmp_path)) if n.id}
    state = _mitsuba_props(mi, text)
    for node_id, node in nodes.items():
        props = state.nodes[state.id_to_index[node_id]].props
        theirs = {k for k in props.keys() if not k.startswith("_arg_")}
        assert set(node.props) | {n for n, _ in node.named_children() if n} == theirs, node_id
    np.testing.assert_array_equal(nodes["c"].get_transform("to_uv"),
                                  np.array(state.nodes[state.id_to_index["c"]].props["to_uv"].matrix, np.float64))
    assert nodes["d"].get_rgb("reflectance")[0] == 0.25 and nodes["p"].get_float("int_ior") == 1.6
    assert nodes["s"].children_of("sampler")[0].get_int("sample_count") == 8


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


@pytest.mark.parametrize("version", ["2.0.0", "2.1.0", "3.0.0", "3.6.1", "4.0.0"])
def test_versions_from_two_on_are_read_as_written(tmp_path, version):
    root = parse_string(scene('<bsdf type="diffuse"><rgb name="diffuseReflectance" value="0.5"/></bsdf>',
                              version=version), tmp_path)
    assert set(root.children[0].props) == {"diffuseReflectance"}


def test_each_file_is_upgraded_by_its_own_version(tmp_path):
    write(tmp_path, "old.xml", scene('<bsdf type="plastic" id="old"><float name="intIOR" value="1.4"/></bsdf>',
                                     version="0.5.0"))
    root = parse_file(write(tmp_path, "s.xml", scene("""
        <include filename="old.xml"/>
        <bsdf type="plastic" id="new"><float name="int_ior" value="1.3"/></bsdf>
    """, version="2.1.0")))
    old, new = root.children
    assert old.get_float("int_ior") == 1.4 and new.get_float("int_ior") == 1.3


def test_upgrade_that_collides_is_an_error(tmp_path):
    path = write(tmp_path, "s.xml", scene("""
        <shape type="sphere">
            <transform name="to_world"><translate x="1"/></transform>
            <transform name="toWorld"><translate x="2"/></transform>
        </shape>
    """, version="0.6.0"))
    with pytest.raises(SceneError, match=r"s\.xml:4: parameter 'to_world' given twice \(as 'toWorld'"):
        parse_file(path)


# ---------------------------------------------------------------------------------- hostile input
def test_deeply_nested_plugins_are_refused_by_line(tmp_path):
    depth = 3000
    body = '<bsdf type="twosided">' * depth + '<bsdf type="diffuse"/>' + "</bsdf>" * depth
    path = write(tmp_path, "deep.xml", f'<scene version="3.0.0"><shape type="sphere">{body}</shape></scene>')
    with pytest.raises(SceneError, match=r"deep\.xml:1: plugins nested deeper than 100 levels"):
        parse_file(path)


def test_long_chains_of_refs_are_refused(tmp_path):
    links = "\n".join(f'<bsdf type="twosided" id="b{i}"><ref id="b{i - 1}"/></bsdf>' for i in range(1, 3000))
    path = write(tmp_path, "chain.xml", scene('<bsdf type="diffuse" id="b0"/>\n' + links))
    with pytest.raises(SceneError, match=r"chain\.xml:\d+: plugins nested deeper than 100 levels \(following <ref>s\)"):
        parse_file(path)
    short = "\n".join(f'<bsdf type="twosided" id="b{i}"><ref id="b{i - 1}"/></bsdf>' for i in range(1, 50))
    parse_string(scene('<bsdf type="diffuse" id="b0"/>\n' + short), tmp_path)


def test_circular_refs_are_refused(tmp_path):
    path = write(tmp_path, "loop.xml", scene("""
        <bsdf type="twosided" id="a"><ref id="b"/></bsdf>
        <bsdf type="twosided" id="b"><ref id="a"/></bsdf>
    """))
    with pytest.raises(SceneError, match=r"loop\.xml:\d: circular reference to id"):
        parse_file(path)


def test_integers_a_plugin_reads_fit_32_bits(tmp_path):
    root = parse_string(scene('<integer name="max_depth" value="2147483648"/><integer name="n" value="-2147483648"/>'),
                        tmp_path)
    assert root.get_int("n") == -2**31
    with pytest.raises(SceneError, match=r"<string>:2: scene: parameter 'max_depth' = 2147483648 is out of range"):
        root.get_int("max_depth")


def test_unknown_keyword_parameters_are_refused(tmp_path):
    text = scene('<default name="a" value="1"/><integer name="x" value="$a"/>')
    assert parse_string(text, tmp_path, a=2).get_int("x") == 2
    with pytest.raises(SceneError, match="unknown scene parameter 'ab'"):
        parse_string(text, tmp_path, ab=2)


def test_includes_and_paths_are_found_as_mitsubas_file_resolver_finds_them(tmp_path):
    """Mitsuba's own regression scenes rely on this: include/base.xml includes "include/pre.xml"
    (next to the top file, not to base.xml), and a <path> in include/ is relative to the top."""
    write(tmp_path, "include/pre.xml", scene('<default name="spp" value="8"/>'))
    write(tmp_path, "include/base.xml", scene('<include filename="include/pre.xml"/><path value="common"/>'))
    write(tmp_path, "common/m.obj", "")
    root = parse_file(write(tmp_path, "s.xml", scene("""
        <include filename="include/base.xml"/>
        <integer name="n" value="$spp"/>
        <shape type="obj"><string name="filename" value="m.obj"/></shape>
    """)))
    assert root.get_int("n") == 8
    assert root.children_of("shape")[0].get_path("filename") == str(tmp_path / "common/m.obj")
    assert [os.path.relpath(f.path, tmp_path) for f in root.files if f.kind == "xml"] == [
        "s.xml", "include/base.xml", "include/pre.xml"]
