"""``mesh_attribute`` textures: PLY attributes carried to the hit, interpolated as Mitsuba's
``Mesh::interpolate_attribute``, compared point by point with Mitsuba's texture at the same rays;
a render against Mitsuba's; the loader's errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers.mesh_files import triangle_ply
from tracer.shapes import geometry
from tracer import textures as tx
from tracer.errors import SceneError
from tracer.kinds import TextureKind

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")

RNG = np.random.default_rng(4)
# A bumpy grid of 6x6 vertices over [-1, 1]^2 at z ~ 0, quads split in two.
_G = np.linspace(-1, 1, 6)
POSITIONS = np.stack([*np.meshgrid(_G, _G), RNG.uniform(-0.1, 0.1, (6, 6))], -1).reshape(-1, 3)
_I = np.arange(36).reshape(6, 6)
FACES = np.concatenate([np.stack([_I[:-1, :-1], _I[:-1, 1:], _I[1:, 1:]], -1).reshape(-1, 3),
                        np.stack([_I[:-1, :-1], _I[1:, 1:], _I[1:, :-1]], -1).reshape(-1, 3)])
VERTEX_PROPS = [("red", "float"), ("green", "float"), ("blue", "float"), ("gloss_0", "float")]
FACE_PROPS = [("tint_x", "float"), ("tint_y", "float"), ("tint_z", "float"), ("weight_0", "float")]
VERTEX_VALUES = RNG.uniform(0, 1, (36, 4))
FACE_VALUES = RNG.uniform(0, 1, (len(FACES), 4))
ATTRIBUTES = [("vertex_color", 1.0), ("vertex_gloss", 0.5), ("face_tint", 2.0), ("face_weight", 1.0)]


def _scene_xml(tmp_path, attribute, scale, shape_extra="", shape='<shape type="ply"><string name="filename" value="m.ply"/>',
               texture=None):
    ply = triangle_ply("binary_little_endian", POSITIONS, FACES, VERTEX_PROPS, VERTEX_VALUES, FACE_PROPS, FACE_VALUES)
    (tmp_path / "m.ply").write_bytes(ply)
    xml = tmp_path / "scene.xml"
    xml.write_text(f"""<scene version="3.0.0">
        <sensor type="perspective"><float name="fov" value="40"/>
            <transform name="to_world"><lookat origin="0, -1, 4" target="0, 0, 0" up="0, 1, 0"/></transform>
            <film type="hdrfilm"><integer name="width" value="32"/><integer name="height" value="24"/>
                <rfilter type="box"/></film>
            <sampler type="independent"><integer name="sample_count" value="16"/></sampler></sensor>
        <integrator type="path"><integer name="max_depth" value="4"/></integrator>
        <emitter type="constant"><rgb name="radiance" value="1"/></emitter>
        {shape}{shape_extra}
            <bsdf type="diffuse">{texture or f"""<texture type="mesh_attribute" name="reflectance">
                <string name="name" value="{attribute}"/><float name="scale" value="{scale}"/></texture>"""}</bsdf>
        </shape></scene>""")
    return str(xml)


@jax.jit
def _texture_at(scene, o, d, tid):
    hit = geometry.closest_hit(scene.geometry, o, d, jnp.inf)
    si = geometry.surface_interaction(scene.geometry, o, d, hit)
    return tx.eval_rgb(scene.textures, tid, tx.texture_point(si.uv, si.attributes)), hit.prim


@pytest.mark.parametrize("attribute, scale", ATTRIBUTES)
def test_mesh_attribute_matches_mitsubas_texture_at_the_same_hits(tmp_path, attribute, scale):
    import tracer
    xml = _scene_xml(tmp_path, attribute, scale, '<transform name="to_world"><rotate x="1" angle="20"/></transform>')
    scene = tracer.load_scene(xml)
    assert TextureKind.MESH_ATTRIBUTE in scene.textures.kinds_present
    assert [s.name for s in scene.geometry.attribute_slots] == [attribute]
    tid = int(np.flatnonzero(np.asarray(scene.textures.kind) == TextureKind.MESH_ATTRIBUTE)[0])
    rng = np.random.default_rng(1)
    targets = np.concatenate([rng.uniform(-0.9, 0.9, (64, 2)), np.zeros((64, 1))], 1)
    origins = np.array([0.0, -1.0, 4.0]) + rng.normal(scale=0.2, size=(64, 3))
    directions = (targets - origins) / np.linalg.norm(targets - origins, axis=1, keepdims=True)
    ours, prim = _texture_at(scene, jnp.asarray(origins.T, jnp.float32), jnp.asarray(directions.T, jnp.float32),
                             jnp.full(64, tid, jnp.int32))
    ours = np.asarray(ours).T

    theirs_scene = mi.load_file(xml)
    texture = mi.load_dict({"type": "mesh_attribute", "name": attribute, "scale": scale})
    hits = 0
    for k in range(64):
        si = theirs_scene.ray_intersect(mi.Ray3f(origins[k].tolist(), directions[k].tolist()))
        assert bool(si.is_valid()) == (int(prim[k]) >= 0)
        if si.is_valid():
            hits += 1
            assert int(si.prim_index) == int(prim[k])
            np.testing.assert_allclose(ours[k], np.array(texture.eval(si)), rtol=2e-5, atol=2e-6)
    assert hits > 48


def test_meshes_with_attributes_that_no_texture_reads_keep_none(tmp_path):
    import tracer
    checkerboard = '<texture type="checkerboard" name="reflectance"/>'
    scene = tracer.load_scene(_scene_xml(tmp_path, None, None, texture=checkerboard))
    assert scene.geometry.attribute_slots == () and scene.geometry.attr_corner.shape[:2] == (3, 0)
    assert TextureKind.MESH_ATTRIBUTE not in scene.textures.kinds_present


@pytest.mark.parametrize("attribute, shape_extra, message", [
    ("vertex_nothing", "", "reads 'vertex_nothing', which this shape does not have"),
    ("color", "", "invalid mesh attribute name 'color'"),
])
def test_mesh_attribute_errors(tmp_path, attribute, shape_extra, message):
    import tracer
    with pytest.raises(SceneError, match=f"scene.xml:.*{message}"):
        tracer.load_scene(_scene_xml(tmp_path, attribute, 1.0, shape_extra))


def test_mesh_attribute_on_an_analytic_shape_is_refused(tmp_path):
    import tracer
    with pytest.raises(SceneError, match="a 'sphere' has no mesh attributes"):
        tracer.load_scene(_scene_xml(tmp_path, "vertex_color", 1.0, shape='<shape type="sphere">'))


def test_mesh_attribute_render_matches_mitsuba(tmp_path):
    """Vertex colors as a diffuse reflectance under a constant sky: the image converges to Mitsuba's."""
    import tracer
    xml = _scene_xml(tmp_path, "vertex_color", 0.8)
    ours = np.zeros((24, 32, 3))
    scene = tracer.load_scene(xml)
    for seed in range(4):
        ours += np.asarray(tracer.render(scene, spp=256, seed=seed)) / 4
    theirs = np.array(mi.render(mi.load_file(xml), spp=1024, seed=7))
    covered = theirs.mean(-1) < 0.99  # the mesh, not the sky
    assert covered.sum() > 200
    np.testing.assert_allclose(ours[covered].mean(0), theirs[covered].mean(0), rtol=0.01)
    # Per pixel, within five standard errors of the difference of two means of 1024 samples.
    np.testing.assert_allclose(ours[covered], theirs[covered], atol=0.05)
