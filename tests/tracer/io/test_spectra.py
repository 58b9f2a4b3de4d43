"""Spectra in RGB against Mitsuba 3's ``scalar_rgb`` variant, value by value: the same XML is read
by both, and Mitsuba's converted value is read back with ``mi.traverse``. Reflectances,
emitters and IORs are converted differently (``tracer.io.spectra``); each context is checked.
Every comparison is exact in float32, Mitsuba's precision."""
import os

import numpy as np
import pytest

from tracer.io import spectra
from tracer.errors import SceneError
from tracer.io.xml import parse_file, parse_string

mi = pytest.importorskip("mitsuba")

SPECTRA = [
    "400:0.2, 500:0.8, 600:0.5, 700:0.9",                        # in gamut
    "300:1.8, 400:1.65, 500:0.9, 600:0.2, 700:0.16, 800:0.18",   # an IOR: above 1, blue out of gamut
    "400:0, 500:8, 600:15.6, 700:18.4",                          # an emitter's
    "450:3, 460:2",                                              # covers part of 360-830 nm only
    "380:-1, 700:2",                                             # negative values
    "200:1, 900:1",                                              # flat, wider than the CIE range
    "550:1, 551:1",                                              # narrower than one integration step
    "0.5",                                                       # uniform
    "3.5",
]
# (plugin XML with {value} for the parameter, the traverse key), one per way Mitsuba reads colours.
CONTEXTS = {
    "diffuse reflectance": ('<bsdf version="3.0.0" type="diffuse">{value}</bsdf>', "reflectance"),
    "plastic diffuse_reflectance": ('<bsdf version="3.0.0" type="plastic">{value}</bsdf>', "diffuse_reflectance"),
    "checkerboard color0": ('<texture version="3.0.0" type="checkerboard">{value}</texture>', "color0"),
    "conductor eta": ('<bsdf version="3.0.0" type="conductor">{value}</bsdf>', "eta"),
    "roughconductor k": ('<bsdf version="3.0.0" type="roughconductor">{value}</bsdf>', "k"),
    "area radiance": ('<emitter version="3.0.0" type="area">{value}</emitter>', "radiance"),
    "constant radiance": ('<emitter version="3.0.0" type="constant">{value}</emitter>', "radiance"),
    "point intensity": ('<emitter version="3.0.0" type="point">{value}</emitter>', "intensity"),
    "spot intensity": ('<emitter version="3.0.0" type="spot">{value}</emitter>', "intensity"),
    "directional irradiance": ('<emitter version="3.0.0" type="directional">{value}</emitter>', "irradiance"),
}


@pytest.fixture(autouse=True)
def rgb_variant():
    mi.set_variant("scalar_rgb")
    yield
    mi.set_variant("scalar_rgb")


def _mitsuba(plugin_xml, name):
    params = mi.traverse(mi.load_string(plugin_xml))
    return np.broadcast_to(np.array(params[f"{name}.value"], np.float32).ravel(), (3,))


def _ours(plugin_xml, name):
    plugin_xml = plugin_xml.replace(' version="3.0.0"', "", 1)
    node = parse_string(f'<scene version="3.0.0">{plugin_xml}</scene>').children[0]
    value = node.get_rgb(name)
    node.check_unused()
    return value.astype(np.float32)


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("spectrum", SPECTRA)
def test_spectrum_property_matches_mitsuba(context, spectrum):
    template, name = CONTEXTS[context]
    plugin = template.format(value=f'<spectrum name="{name}" value="{spectrum}"/>')
    np.testing.assert_array_equal(_ours(plugin, name), _mitsuba(plugin, name))


@pytest.mark.parametrize("context", ["diffuse reflectance", "conductor eta", "point intensity"])
@pytest.mark.parametrize("value", ['<rgb name="{n}" value="0.25, 0.5, 1"/>', '<float name="{n}" value="0.7"/>',
                                   '<integer name="{n}" value="2"/>'])
def test_rgb_and_float_properties_match_mitsuba(context, value):
    template, name = CONTEXTS[context]
    plugin = template.format(value=value.format(n=name))
    np.testing.assert_array_equal(_ours(plugin, name), _mitsuba(plugin, name))


@pytest.mark.parametrize("context", ["diffuse reflectance", "roughconductor k", "point intensity"])
@pytest.mark.parametrize("material", ["Cu", "Au"])
def test_spectrum_files_match_mitsuba(tmp_path, context, material):
    """Mitsuba's own measured IOR files (wavelengths 300-900 nm, comments, CRLF lines here)."""
    rows = np.loadtxt(_ior_file(f"{material}.eta.spd"))
    text = "# measured\r\n" + "".join(f"{w:.6f} {v:.6f} trailing\r\n" for w, v in rows)
    path = tmp_path / "x.spd"
    path.write_text(text, newline="")
    template, name = CONTEXTS[context]
    plugin = template.format(value=f'<spectrum name="{name}" filename="{path}"/>')
    np.testing.assert_array_equal(_ours(plugin, name), _mitsuba(plugin, name))


def _ior_file(name):
    path = os.path.join("/work/mitsuba-data/ior", name)
    if not os.path.isfile(path):
        pytest.skip("Mitsuba's IOR data is not here")
    return path


@pytest.mark.parametrize("plugin", [
    '<spectrum type="uniform" name="{n}"><float name="value" value="0.3"/></spectrum>',
    '<texture type="srgb" name="{n}"><rgb name="color" value="0.2, 0.4, 0.6"/></texture>',
    '<spectrum type="d65" name="{n}"/>',
    '<spectrum type="d65" name="{n}"><float name="scale" value="3"/></spectrum>',
    '<spectrum type="d65" name="{n}"><rgb name="color" value="0.2, 0.4, 0.6"/><float name="scale" value="2"/></spectrum>',
    '<spectrum type="rawconstant" name="{n}"><float name="value" value="0.3"/></spectrum>',
])
@pytest.mark.parametrize("context", ["diffuse reflectance", "conductor eta", "point intensity"])
def test_nested_spectrum_plugins_match_mitsuba(context, plugin):
    template, name = CONTEXTS[context]
    xml = template.format(value=plugin.format(n=name))
    np.testing.assert_array_equal(_ours(xml, name), _mitsuba(xml, name))


@pytest.mark.parametrize("context", ["diffuse reflectance", "conductor eta", "point intensity"])
def test_regular_and_irregular_are_their_wavelength_pairs(context):
    """Mitsuba's RGB variants cannot evaluate these; they are the same spectrum given as pairs."""
    template, name = CONTEXTS[context]
    pairs = template.format(value=f'<spectrum name="{name}" value="400:0.1, 500:0.5, 600:1.3"/>')
    for plugin in (f'<spectrum type="irregular" name="{name}"><string name="wavelengths" value="400, 500, 600"/>'
                   '<string name="values" value="0.1, 0.5, 1.3"/></spectrum>',
                   f'<spectrum type="regular" name="{name}"><float name="wavelength_min" value="400"/>'
                   '<float name="wavelength_max" value="600"/><string name="values" value="0.1, 0.5, 1.3"/></spectrum>'):
        np.testing.assert_array_equal(_ours(template.format(value=plugin), name), _mitsuba(pairs, name))


def test_blackbody_is_plancks_law_as_mitsubas_spectral_variant_evaluates_it():
    wavelengths = [360.0, 400.0, 455.5, 500.0, 600.0, 700.0, 830.0]
    for temperature in (1500.0, 5000.0, 6504.0, 20000.0):
        mi.set_variant("scalar_spectral")
        texture = mi.load_dict({"type": "blackbody", "temperature": temperature})
        theirs = []
        for w in wavelengths:
            si = mi.SurfaceInteraction3f()
            si.wavelengths = mi.Spectrum([w] * 4)
            theirs.append(texture.eval(si)[0])
        np.testing.assert_allclose(spectra.blackbody(wavelengths, temperature), theirs, rtol=2e-5)


@pytest.mark.parametrize("temperature", [1500.0, 5000.0, 6504.0])
def test_blackbody_emitter_is_its_tabulated_spectrum_in_mitsubas_rgb_conversion(temperature):
    """The colour of a blackbody emitter is Mitsuba's emitter conversion of Planck's law, which
    is what its spectral variants converge to (its RGB variants cannot evaluate a blackbody)."""
    grid = spectra._GRID
    pairs = ", ".join(f"{float(w)!r}:{float(v)!r}" for w, v in zip(grid, spectra.blackbody(grid, temperature)))
    plugin = (f'<emitter version="3.0.0" type="point"><spectrum type="blackbody" name="intensity">'
              f'<float name="temperature" value="{temperature}"/></spectrum></emitter>')
    expected = _mitsuba(f'<emitter version="3.0.0" type="point"><spectrum name="intensity" value="{pairs}"/></emitter>',
                        "intensity")
    np.testing.assert_array_equal(_ours(plugin, "intensity"), expected)


@pytest.mark.parametrize("body, message", [
    ('<spectrum name="reflectance" value="500:0.1, 400:0.2"/>', "increasing order"),
    ('<spectrum name="reflectance" value="500:0.1"/>', "at least two"),
    ('<spectrum name="reflectance" value="400:0.1, 500"/>', "wavelength:value pairs"),
    ('<spectrum name="reflectance" value="400:0.1, 500:nan"/>', "not finite"),
    ('<spectrum name="reflectance" value="inf"/>', "not finite"),
    ('<spectrum name="reflectance" value="400:0.1, 500:x"/>', "could not parse"),
    ('<spectrum name="reflectance" value="0.5" filename="a.spd"/>', "not both"),
    ('<spectrum name="reflectance"/>', "either"),
    ('<spectrum name="reflectance" filename="missing.spd"/>', "missing.spd' not found"),
])
def test_spectrum_errors_name_file_and_line(tmp_path, body, message):
    path = tmp_path / "s.xml"
    path.write_text(f'<scene version="3.0.0">\n<bsdf type="diffuse">\n{body}\n</bsdf>\n</scene>\n')
    with pytest.raises(SceneError, match=r"s\.xml:3: .*" + message):
        parse_file(path)


def test_bad_spectrum_file_names_its_line(tmp_path):
    (tmp_path / "bad.spd").write_text("# comment\n400 0.5\n500\n")
    with pytest.raises(SceneError, match=r"<string>:1: spectrum file .bad.spd.: line 3"):
        parse_string('<scene version="3.0.0"><bsdf type="diffuse"><spectrum name="reflectance" filename="bad.spd"/>'
                     '</bsdf></scene>', tmp_path)


@pytest.mark.parametrize("xml, message", [
    ('<bsdf type="diffuse"><rgb name="reflectance" value="1.5, 0.2, 0.2"/></bsdf>', "must be in \\[0, 1\\]"),
    ('<bsdf type="diffuse"><texture type="srgb" name="reflectance"><rgb name="color" value="2, 0, 0"/></texture>'
     '</bsdf>', "unbounded"),
    ('<bsdf type="diffuse"><spectrum type="blackbody" name="reflectance"><float name="temperature" value="3000"/>'
     '</spectrum></bsdf>', "blackbody"),
    ('<emitter type="point"><spectrum type="blackbody" name="intensity"><float name="temperature" value="-1"/>'
     '</spectrum></emitter>', "positive"),
])
def test_conversion_errors(xml, message):
    """Mitsuba refuses the first two too (an RGB reflectance outside [0, 1])."""
    node = parse_string(f'<scene version="3.0.0">{xml}</scene>').children[0]
    name = "intensity" if "intensity" in xml else "reflectance"
    with pytest.raises(SceneError, match=message):
        node.get_rgb(name)


def test_unbounded_srgb_and_emitter_rgb_pass_through():
    node = parse_string('<scene version="3.0.0"><bsdf type="diffuse"><texture type="srgb" name="reflectance">'
                        '<rgb name="color" value="2, 0, 0"/><boolean name="unbounded" value="true"/></texture></bsdf>'
                        '</scene>').children[0]
    np.testing.assert_array_equal(node.get_rgb("reflectance"), [2, 0, 0])
    assert node.child("reflectance") is None  # a value, not a texture
    node.check_unused()
