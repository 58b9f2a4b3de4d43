"""The work unit: split renders are bit-identical, one compile per job, furnace tests."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracer
from tests.helpers.tiles import render_passes as _tile
from tracer.rendering import render_tile
from tracer.runtime.xla_flags import with_flags

FURNACE = """<scene version="3.0.0">
  <default name="albedo" value="0.7"/>
  <integrator type="path"><integer name="max_depth" value="-1"/></integrator>
  <sensor type="perspective">
    <float name="fov" value="30"/>
    <transform name="to_world"><lookat origin="0, 0, 4" target="0, 0, 0" up="0, 1, 0"/></transform>
    <sampler type="independent"><integer name="sample_count" value="8"/></sampler>
    <film type="hdrfilm"><integer name="width" value="24"/><integer name="height" value="20"/>
      <rfilter type="box"/></film>
  </sensor>
  <emitter type="constant"><rgb name="radiance" value="1.0"/></emitter>
  <shape type="sphere"><float name="radius" value="1"/>
    <bsdf type="{bsdf}"><rgb name="{param}" value="$albedo"/></bsdf></shape>
</scene>"""


def _furnace(tmp_path, bsdf="diffuse", param="reflectance"):
    path = tmp_path / "furnace.xml"
    path.write_text(FURNACE.format(bsdf=bsdf, param=param))
    return path


def test_white_furnace_diffuse_sphere_reflects_its_albedo(tmp_path):
    """A convex diffuse object under a uniform sky of radiance 1 has radiance = albedo, exactly in expectation."""
    scene = tracer.load_scene(_furnace(tmp_path), albedo="0.7")
    image = tracer.render(scene, spp=64)
    # Pixels that see only the sky are exactly 1; the sphere's disk is 0.7 up to noise.
    corners = image[0, 0], image[-1, -1]
    np.testing.assert_allclose(corners, 1.0, rtol=1e-6)
    center = image[8:12, 10:14]
    assert abs(center.mean() - 0.7) < 0.01, center.mean()


def test_white_furnace_dielectric_sphere_is_invisible(tmp_path):
    """A lossless glass sphere in a uniform sky: energy is conserved, every pixel converges to 1."""
    scene = tracer.load_scene(_furnace(tmp_path, "dielectric", "specular_reflectance"), albedo="1.0")
    image = tracer.render(scene, spp=64)
    assert abs(image.mean() - 1.0) < 0.01, image.mean()


def test_passes_split_across_calls_are_bit_identical():
    scene = tracer.load_scene("examples/cbox.xml", res=32)
    whole = _tile(scene, 0, 4)
    first = _tile(scene, 0, 2)
    split = _tile(scene, 2, 2, acc=first)
    np.testing.assert_array_equal(np.asarray(whole[0]), np.asarray(split[0]))
    np.testing.assert_array_equal(np.asarray(whole[1]), np.asarray(split[1]))
    assert np.asarray(whole[1]).min() > 0


def test_one_compile_serves_every_frame_tile_and_pass_range():
    before = render_tile.programs_made
    for angle in (0, 40):
        scene = tracer.load_scene("examples/orbit.xml", width=40, height=30, angle=str(angle))
        _tile(scene, 0, 1, frame=angle, tile=(0, 0), size=(8, 8))
        _tile(scene, 1, 2, frame=angle, tile=(8, 24), size=(8, 8))
    assert render_tile.programs_made - before == 1


def test_passes_traced_as_one_batch_give_the_bits_of_one_pass_at_a_time():
    """A work unit traces its passes in batches (``passes_traced``: one path pool drains per
    batch); each pass is still splatted alone and added in order, and a batch's passes past
    n_passes add nothing: the same bits for any batch size."""
    scene = tracer.load_scene("examples/orbit.xml", width=20, height=16)
    one = _tile(scene, 1, 3, size=(16, 20), spp=40)  # batches of 2 and 4 reach pass 4: within the spp
    for batch in (2, 3, 4):
        other = _tile(scene, 1, 3, size=(16, 20), spp=40, passes_traced=batch)
        np.testing.assert_array_equal(np.asarray(one[0]), np.asarray(other[0]))
        np.testing.assert_array_equal(np.asarray(one[1]), np.asarray(other[1]))
    assert np.asarray(one[1]).min() > 0
    # The batch size follows the chunk: its largest divisor within the sample budget.
    film = scene.film
    assert tracer.rendering.trace_passes(4, 16, 128, 128, film) == 4
    assert tracer.rendering.trace_passes(8, 16, 180, 180, film) == 2  # 3 fit, but do not divide 8
    assert tracer.rendering.trace_passes(7, 16, 512, 512, film) == 1
    # tracer.render's default tile: the whole window where a pass of it fits the budget.
    assert tracer.rendering.whole_image_tile(film, 16) == 20
    big = tracer.load_scene("examples/orbit.xml", width=512, height=384).film  # 16 x 516 x 388 samples: past 2M
    assert tracer.rendering.whole_image_tile(big, 16) == tracer.rendering.DEFAULT_TILE
    assert tracer.rendering.whole_image_tile(big, 8) == 512
    # On GPUs and TPUs the budget is ACCELERATOR_TRACE_SAMPLES (2^23): every sample is a lane in flight.
    assert tracer.rendering.trace_passes(8, 16, 180, 180, film, platform="gpu") == 8
    assert tracer.rendering.trace_passes(8, 8, 512, 512, film, platform="tpu") == 2
    assert tracer.rendering.whole_image_tile(big, 16, platform="gpu") == 512
    huge = tracer.load_scene("examples/orbit.xml", width=2048, height=2048).film
    assert tracer.rendering.whole_image_tile(huge, 16, platform="cpu") == tracer.rendering.DEFAULT_TILE
    assert tracer.rendering.whole_image_tile(huge, 16, platform="gpu") == 512  # 16 x 1028^2 is past 2^23


def test_tiles_agree_with_the_whole_image():
    """Rendering by tiles (neighbours recompute border samples) equals one tile over the film.

    Equal to float rounding, not bit for bit: XLA fuses differently for other batch shapes, and
    where a multiply and an add share a fusion they become one FMA. Bit-identity is promised for
    a fixed tile and pass size (a job's), whatever the devices, hosts or interruptions.
    """
    scene = tracer.load_scene("examples/cbox.xml", res=24)
    whole = tracer.render(scene, spp=8, tile=24)
    tiled = tracer.render(scene, spp=8, tile=8)
    np.testing.assert_allclose(whole, tiled, rtol=1e-5, atol=1e-7)
    # A wrong border (samples splatted into the wrong tile, or lost) is far above rounding.
    assert np.abs(whole - tiled).max() < 1e-5 * whole.max()


DEVICES_SCRIPT = textwrap.dedent("""
    import dataclasses
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import Mesh
    import tracer
    from tracer.rendering import WorkItem, WorkShape, render_tile
    for path, params, sampler in (("examples/materials.xml", dict(width=20, height=20), "sobol"),
                                  ("examples/orbit.xml", dict(width=20, height=20), "independent")):
        scene = tracer.load_scene(path, **params)
        scene = dataclasses.replace(scene, settings=dataclasses.replace(scene.settings, sampler=sampler))
        out = []
        # (a process has at least 2: tracer.runtime.cpu.MIN_CPU_DEVICES; 4 devices over two hosts
        # against 2 on one: tests/cluster/test_group.py)
        for n in (2, 3):
            mesh = Mesh(np.array(jax.devices()[:n]), ("rays",))
            # 17 rows: neither 2 nor 3 devices' bands of output rows divide the tile evenly.
            z = (jnp.zeros((17, 20, 3), jnp.float32), jnp.zeros((17, 20), jnp.float32))
            v, w = render_tile(scene, WorkItem.of(0, 3, 0, 0, 0, 2, 8), *z, shape=WorkShape(17, 20, 4), mesh=mesh)
            out.append(np.asarray(v))
        assert out[0].mean() > 0
        print(path, sampler, "same" if all(np.array_equal(out[0], o) for o in out) else "different")
""")


def test_a_light_sample_that_adds_nothing_asks_no_shadow_ray(tmp_path, monkeypatch):
    """A floor between two point lights: the samples of the light below it add nothing, lit or not
    (a diffuse surface reflects nothing towards its back), so they ask no shadow ray; those of the
    light above do. (Counted in the traced program: a callback at each query.)"""
    import collections

    import jax

    from tracer.integrators import path as integrator
    from tracer.shapes import geometry
    scene_file = tmp_path / "two_lights.xml"
    scene_file.write_text("""<scene version="3.0.0">
    <integrator type="path"><integer name="max_depth" value="3"/></integrator>
    <sensor type="perspective"><float name="fov" value="60"/>
        <transform name="to_world"><lookat origin="0, 3, 0.01" target="0, 0, 0" up="0, 1, 0"/></transform>
        <film type="hdrfilm"><integer name="width" value="16"/><integer name="height" value="16"/></film>
    </sensor>
    <shape type="rectangle"><transform name="to_world"><rotate x="1" angle="-90"/><scale value="4"/></transform>
        <bsdf type="diffuse"/></shape>
    <emitter type="point"><point name="position" x="0" y="2" z="0"/><rgb name="intensity" value="5"/></emitter>
    <emitter type="point"><point name="position" x="0" y="-2" z="0"/><rgb name="intensity" value="5"/></emitter>
</scene>""")
    counts = collections.Counter()
    count = lambda name: lambda n: counts.update({name: int(n)})
    occluded, add_light = geometry.occluded, integrator._add_light

    def counted_occluded(geo, o, d, t_max):
        jax.debug.callback(count("asked"), (t_max > 0).sum())
        return occluded(geo, o, d, t_max)

    def counted_add_light(scene, state, surface, light, *args, **kwargs):
        jax.debug.callback(count("sampled"), light.wanted.sum())
        return add_light(scene, state, surface, light, *args, **kwargs)

    monkeypatch.setattr(geometry, "occluded", counted_occluded)
    monkeypatch.setattr(integrator, "_add_light", counted_add_light)
    monkeypatch.setenv("JAXFARM_XLA_CACHE", "off")  # traced here, not loaded
    monkeypatch.setattr(render_tile, "_jitted", collections.OrderedDict())
    jax.clear_caches()
    image = tracer.render(tracer.load_scene(str(scene_file)), spp=16)
    jax.clear_caches()
    assert image.mean() > 0.01
    assert counts["sampled"] > 2000
    assert 0.35 < counts["asked"] / counts["sampled"] < 0.65, counts


def test_path_regeneration_gives_the_bits_of_one_pool(monkeypatch):
    """A 256-lane pool that regenerates paths and drains in phases (two of three: over 256, then
    128 lanes) renders the same bits as one pool holding every path of the batch (every BSDF
    kind, glass included). With the sobol sampler, whose keys are two words (pixel and sample
    index) carried with each lane."""
    import dataclasses

    import jax

    from tracer.integrators import path as integrator
    scene = tracer.load_scene("examples/materials.xml", width=24, height=24)
    scene = dataclasses.replace(scene, settings=dataclasses.replace(scene.settings, sampler="sobol"))
    samples = 8 * 24 * 24
    assert integrator.drain_phases(samples) == 1
    images = []
    never = (1 << 62,) * 2
    for pool, min_phase, least, phase_samples in ((1 << 30, 1 << 30, 2, never), (256, 32, 2, (0, samples))):
        monkeypatch.setattr(integrator, "_MIN_PHASE", min_phase)
        monkeypatch.setattr(integrator, "DRAIN_PHASES", least)  # tracer.render's least
        monkeypatch.setattr(integrator, "PHASE_SAMPLES", phase_samples)
        jax.clear_caches()  # the constant is read while tracing
        images.append(tracer.render(scene, spp=8, pass_size=8, path_pool=pool))
    assert integrator.drain_phases(samples) == 3
    jax.clear_caches()
    assert images[0].mean() > 0.01
    for image in images[1:]:
        np.testing.assert_array_equal(images[0], image)


def test_two_and_three_devices_render_the_same_bits():
    # With the deterministic CPU flags (tracer.runtime.xla_flags): a scene with every BSDF kind (the
    # brute-force intersection of spheres and quads), and the orbit (Embree, spheres, an
    # environment), whose FMA-contracted arithmetic differed between device counts (a one-device
    # program is not partitioned: not used).
    env = dict(os.environ, XLA_FLAGS=with_flags(devices=3), JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", DEVICES_SCRIPT], env=env, capture_output=True, text=True,
                            timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines == ["examples/materials.xml sobol same", "examples/orbit.xml independent same"], result.stdout


@pytest.mark.parametrize("kwargs, needle", [
    (dict(spp=0), "spp must be a whole number from 1 to 1073741824, got 0"),
    (dict(spp=-1), "spp"),
    (dict(spp=2**40), "spp"),     # was an int32 OverflowError
    (dict(spp=2.5), "spp"),       # was truncated to 2
    (dict(spp="3"), "spp"),
    (dict(spp=True), "spp"),
    (dict(seed=-1), "seed must be a whole number from 0 to 2147483647"),
    (dict(seed=2**40), "seed"),
    (dict(frame=-1), "frame"),
    (dict(tile=0), "tile"),       # was range()'s ValueError
    (dict(pass_size=0), "pass_size"),  # was a ZeroDivisionError
    (dict(pass_size=4096), "pass_size"),
    (dict(chunk_passes=0), "chunk_passes"),
])
def test_render_refuses_bad_arguments_by_name(tmp_path, kwargs, needle):
    scene = tracer.load_scene(_furnace(tmp_path))
    with pytest.raises(ValueError, match=re.escape(needle)):
        tracer.render(scene, **kwargs)


def test_render_takes_numpy_integers(tmp_path):
    scene = tracer.load_scene(_furnace(tmp_path))
    image = tracer.render(scene, spp=np.int64(1), seed=np.int32(2), tile=np.int64(32))
    assert image.shape == (20, 24, 3) and np.all(np.isfinite(image))
