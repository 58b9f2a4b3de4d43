"""tracer.render_differentiable against Mitsuba 3's ``prb`` (statistically), against central
differences of ``tracer.render``, and its memory at long paths; tracer.parameters' keys against
``mi.traverse``.

Gradients are compared as the mean over seeds, each side's standard error from its seeds' spread:
|ours - Mitsuba's| < 4 combined standard errors + 2% of the gradient's size.
"""
import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tracer
from tracer.scene_parameters import ParameterError

SEEDS = 4
SPP = 16
SIZE = 16

_SCENE = """<scene version="3.0.0">
<integrator type="prb"><integer name="max_depth" value="{depth}"/></integrator>
<sensor type="perspective"><float name="fov" value="45"/>
  <transform name="to_world"><lookat origin="0,1,4.5" target="0,0.8,0" up="0,1,0"/></transform>
  <sampler type="independent"><integer name="sample_count" value="16"/></sampler>
  <film type="hdrfilm"><integer name="width" value="{size}"/><integer name="height" value="{size}"/>
    <rfilter type="box"/></film></sensor>
{body}
</scene>"""

# Diffuse, plastic, rough conductor and a checkerboard, lit by an area light and a constant sky.
_LIT = """
<bsdf type="diffuse" id="floor_mat"><texture type="checkerboard" name="reflectance">
  <rgb name="color0" value="0.2,0.3,0.2"/><rgb name="color1" value="0.7,0.7,0.6"/>
  <transform name="to_uv"><scale x="4" y="4"/></transform></texture></bsdf>
<bsdf type="diffuse" id="red"><rgb name="reflectance" value="0.7,0.2,0.2"/></bsdf>
<bsdf type="roughconductor" id="metal"><float name="alpha" value="0.3"/><string name="distribution" value="ggx"/></bsdf>
<bsdf type="plastic" id="pl"><rgb name="diffuse_reflectance" value="0.2,0.3,0.6"/></bsdf>
<shape type="rectangle" id="floor"><transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
  <ref id="floor_mat"/></shape>
<shape type="rectangle" id="back"><transform name="to_world"><scale value="3"/><translate z="-1.5"/></transform>
  <ref id="red"/></shape>
<shape type="sphere" id="ball"><point name="center" x="-0.7" y="0.5" z="0"/><float name="radius" value="0.5"/>
  <ref id="metal"/></shape>
<shape type="sphere" id="ball2"><point name="center" x="0.7" y="0.5" z="0"/><float name="radius" value="0.5"/>
  <ref id="pl"/></shape>
<shape type="rectangle" id="light"><transform name="to_world"><scale value="0.5"/><rotate x="1" angle="90"/>
  <translate y="2.5"/></transform><emitter type="area"><rgb name="radiance" value="8,8,8"/></emitter></shape>
<emitter type="constant" id="sky"><rgb name="radiance" value="0.3,0.4,0.5"/></emitter>
"""
LIT_KEYS = ["floor_mat.reflectance.color0.value", "floor_mat.reflectance.color1.value", "red.reflectance.value",
            "metal.alpha.value", "pl.diffuse_reflectance.value", "light.emitter.radiance.value", "sky.radiance.value"]

# Rough conductors (a preset's eta and k, an anisotropic one) under point, spot and directional lights.
_DELTA = """
<bsdf type="diffuse" id="wall"><rgb name="reflectance" value="0.6,0.5,0.4"/></bsdf>
<bsdf type="roughconductor" id="cu"><string name="material" value="Cu"/><float name="alpha" value="0.25"/></bsdf>
<bsdf type="roughconductor" id="gen"><rgb name="eta" value="0.3,0.5,0.9"/><rgb name="k" value="3,2.5,2"/>
  <float name="alpha_u" value="0.2"/><float name="alpha_v" value="0.4"/></bsdf>
<shape type="rectangle" id="floor"><transform name="to_world"><rotate x="1" angle="-90"/><scale value="3"/></transform>
  <ref id="wall"/></shape>
<shape type="sphere" id="b1"><point name="center" x="-0.7" y="0.5" z="0"/><float name="radius" value="0.5"/>
  <ref id="cu"/></shape>
<shape type="sphere" id="b2"><point name="center" x="0.7" y="0.5" z="0"/><float name="radius" value="0.5"/>
  <ref id="gen"/></shape>
<emitter type="point" id="pt"><point name="position" x="0" y="2" z="1"/><rgb name="intensity" value="3,3,3"/></emitter>
<emitter type="spot" id="sp"><transform name="to_world"><lookat origin="1.5,2,2" target="0,0,0"/></transform>
  <rgb name="intensity" value="6,5,4"/><float name="cutoff_angle" value="30"/></emitter>
<emitter type="directional" id="sun"><vector name="direction" x="0.3" y="-1" z="-0.4"/>
  <rgb name="irradiance" value="1,1.2,1.4"/></emitter>
"""
DELTA_KEYS = ["cu.alpha.value", "cu.eta.value", "cu.k.value", "gen.alpha_u.value", "gen.eta.value",
              "pt.intensity.value", "sp.intensity.value", "sun.irradiance.value"]

# A bitmap-textured diffuse sphere under an environment map.
_ENV = """
<bsdf type="diffuse" id="tex_mat"><texture type="bitmap" name="reflectance"><string name="filename" value="{tex}"/>
  </texture></bsdf>
<shape type="sphere" id="ball"><point name="center" x="0" y="0.8" z="0"/><float name="radius" value="1"/>
  <ref id="tex_mat"/></shape>
<emitter type="envmap" id="sky"><string name="filename" value="{env}"/><float name="scale" value="1.5"/></emitter>
"""
ENV_KEYS = ["tex_mat.reflectance.data", "sky.scale"]  # "sky.data": Mitsuba 3.9.1's prb gives it no gradient
OUR_ENV_KEYS = ("tex_mat.reflectance.data", "sky.data", "sky.scale")  # one compiled gradient for both tests


def _mitsuba():
    mi = pytest.importorskip("mitsuba")
    try:
        mi.set_variant("llvm_ad_rgb")
    except (ImportError, AttributeError) as err:
        pytest.skip(f"Mitsuba's llvm_ad_rgb variant is not available: {err}")
    return mi


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """The scenes' files: (lit, environment, delta lights)."""
    root = tmp_path_factory.mktemp("differentiable")
    mi = _mitsuba()
    rng = np.random.default_rng(7)
    tex, env = root / "tex.exr", root / "env.exr"
    mi.Bitmap(rng.uniform(0.1, 0.9, (4, 4, 3)).astype(np.float32)).write(str(tex))
    mi.Bitmap(rng.uniform(0.2, 2.0, (8, 16, 3)).astype(np.float32)).write(str(env))
    lit = root / "lit.xml"
    lit.write_text(_SCENE.format(depth=6, size=SIZE, body=_LIT))
    environment = root / "env.xml"
    environment.write_text(_SCENE.format(depth=4, size=SIZE, body=_ENV.format(tex=tex, env=env)))
    delta = root / "delta.xml"
    delta.write_text(_SCENE.format(depth=5, size=SIZE, body=_DELTA))
    return str(lit), str(environment), str(delta)


def _weights():
    return jnp.asarray(np.random.default_rng(3).uniform(0, 2, (SIZE, SIZE, 3)).astype(np.float32))


def _losses(image):
    """The two losses: the image mean and a weighted sum."""
    return image.mean(), (image * _weights()).sum() / image.size


@functools.cache
def _ours(path, keys):
    """(mean, standard error) over seeds of d loss / d value for both losses: {key: (2, ...)}."""
    scene = tracer.load_scene(path, accel="jax")
    params = {k: tracer.parameters(scene)[k] for k in keys}

    @jax.jit
    def grads(p, seed):
        """Both losses' gradients from one primal pass: the image's pullback of each loss's
        cotangent, the two as one batch (vmap), so one adjoint pass is compiled."""
        image, pullback = jax.vjp(lambda q: tracer.render_differentiable(scene, q, SPP, seed), p)
        cotangents = jnp.stack([jnp.full_like(image, 1.0 / image.size), _weights() / image.size])
        (g,) = jax.vmap(pullback)(cotangents)
        return {"image mean": jnp.stack([image.mean(), (image * _weights()).sum() / image.size]), **g}

    runs = [grads(params, s) for s in range(SEEDS)]
    return {k: _stats([np.asarray(r[k]) for r in runs]) for k in ("image mean", *keys)}


def _stats(samples):
    a = np.stack(samples).astype(np.float64)
    return a.mean(axis=0), a.std(axis=0, ddof=1) / np.sqrt(len(a))


@functools.cache
def _mitsubas(path, keys):
    """Mitsuba's prb: the same as ``_ours``."""
    mi = _mitsuba()
    import drjit as dr
    scene = mi.load_file(path)
    params = mi.traverse(scene)
    weights = mi.TensorXf(np.asarray(_weights()))
    runs = []
    for seed in range(SEEDS):
        run = {k: [] for k in keys}
        for i in range(2):
            for k in keys:
                dr.enable_grad(params[k])
            params.update()
            image = mi.render(scene, params, spp=SPP, seed=100 + seed)
            loss = dr.mean(image, axis=None) if i == 0 else dr.sum(image * weights, axis=None) / image.array.shape[0]
            dr.backward(loss)
            for k in keys:
                run[k].append(np.array(dr.grad(params[k])).reshape(-1))
                dr.set_grad(params[k], 0)
                dr.disable_grad(params[k])
        runs.append({k: np.stack(v) for k, v in run.items()})
    return {k: _stats([r[k] for r in runs]) for k in keys}


def _agree(name, ours, theirs):
    (m1, e1), (m2, e2) = ours, theirs
    m1, e1 = m1.reshape(m2.shape), e1.reshape(m2.shape)
    bound = 4 * np.sqrt(e1 ** 2 + e2 ** 2) + 0.02 * np.abs(m2).max() + 1e-6
    print(f"{name}: ours {np.round(m1.ravel()[:6], 5)} +- {np.round(e1.ravel()[:6], 5)}; "
          f"mitsuba {np.round(m2.ravel()[:6], 5)} +- {np.round(e2.ravel()[:6], 5)}")
    assert np.all(np.abs(m1 - m2) <= bound), (name, m1, m2, bound)


@pytest.mark.parametrize("key", LIT_KEYS)
def test_gradients_agree_with_mitsuba_prb(scenes, key):
    ours, theirs = _ours(scenes[0], tuple(LIT_KEYS)), _mitsubas(scenes[0], tuple(LIT_KEYS))
    assert np.all(np.isfinite(ours[key][0]))
    _agree(key, ours[key], theirs[key])


@pytest.mark.parametrize("key", DELTA_KEYS)
def test_conductors_under_delta_lights_agree_with_mitsuba_prb(scenes, key):
    ours, theirs = _ours(scenes[2], tuple(DELTA_KEYS)), _mitsubas(scenes[2], tuple(DELTA_KEYS))
    assert np.all(np.isfinite(ours[key][0]))
    _agree(key, ours[key], theirs[key])


@pytest.mark.parametrize("key", ENV_KEYS)
def test_textures_and_environment_agree_with_mitsuba_prb(scenes, key):
    """Texel gradients are compared summed over the texels (one texel's is mostly noise), per loss
    and channel; an environment map's two wrap-around columns are summed into the texels they copy."""
    ours, theirs = _ours(scenes[1], OUR_ENV_KEYS), _mitsubas(scenes[1], tuple(ENV_KEYS))
    m, e = ours[key]
    shape = tracer.parameters(tracer.load_scene(scenes[1], accel="jax"))[key].shape
    if len(shape) == 3:
        ours_sum = (m.reshape(2, -1, shape[-1]).sum(axis=1), np.sqrt((e.reshape(2, -1, shape[-1]) ** 2).sum(axis=1)))
        tm, te = theirs[key]
        theirs_sum = (tm.reshape(2, -1, shape[-1]).sum(axis=1), np.sqrt((te.reshape(2, -1, shape[-1]) ** 2).sum(axis=1)))
        _agree(key, ours_sum, theirs_sum)
    else:
        _agree(key, ours[key], theirs[key])


def test_environment_map_texels_gradient_adds_up_to_the_image(scenes):
    """The image is linear in the environment map's texels (which only emit): the texels times
    their gradient add up to the image mean, seed by seed (Euler's theorem), and so does the scale
    times its gradient. (Mitsuba 3.9.1's prb returns zeros for an envmap's ``data``, so there is
    no Mitsuba figure to compare with; its ``scale`` is compared above.)"""
    ours = _ours(scenes[1], OUR_ENV_KEYS)
    values = tracer.parameters(tracer.load_scene(scenes[1], accel="jax"))
    image = ours["image mean"][0][0]
    texels = (ours["sky.data"][0][0][:, 1:-1] * np.asarray(values["sky.data"])[:, 1:-1]).sum()
    print(f"image mean {image:.6f}; texels x gradient {texels:.6f}; "
          f"scale x gradient {ours['sky.scale'][0][0][0] * 1.5:.6f}")
    assert np.all(ours["sky.data"][0][0][:, [0, -1]] == 0)  # the wrap-around copies are not read
    np.testing.assert_allclose(texels, image, rtol=2e-3)
    np.testing.assert_allclose(ours["sky.scale"][0][0][0] * 1.5, image, rtol=2e-3)


def test_gradients_agree_with_central_differences_of_render(scenes):
    """Radiance enters linearly: d mean / d radiance from central differences of ``tracer.render``
    (the same seeds on both sides of the step) against the replayed gradient; a diffuse
    reflectance too, with a step small against its curvature."""
    scene = tracer.load_scene(scenes[0], accel="jax")
    values = tracer.parameters(scene)
    ours = _ours(scenes[0], tuple(LIT_KEYS))
    from tracer.scene_parameters import substitute
    for key, channel, step in (("light.emitter.radiance.value", 1, 1.0), ("red.reflectance.value", 0, 0.05)):
        fd = []
        for seed in range(SEEDS):
            ends = []
            for sign in (1, -1):
                edited = substitute(scene, {key: values[key].at[channel].add(sign * step)})
                ends.append(tracer.render(edited, spp=SPP, seed=seed).mean())
            fd.append((ends[0] - ends[1]) / (2 * step))
        fd_mean, fd_err = _stats(fd)
        mean, err = ours[key][0][0][channel], ours[key][1][0][channel]
        print(f"{key}[{channel}]: replay {mean:.5f} +- {err:.5f}, central differences {fd_mean:.5f} +- {fd_err:.5f}")
        assert abs(mean - fd_mean) <= 4 * np.hypot(err, fd_err) + 0.02 * abs(fd_mean), (key, mean, fd_mean)


# A glowing diffuse box seen from inside: what the memory and export checks compile (quickly).
_BOX = """
<bsdf type="diffuse" id="red"><rgb name="reflectance" value="0.7,0.2,0.2"/></bsdf>
<shape type="cube" id="box"><transform name="to_world"><scale value="2"/></transform><ref id="red"/>
  <boolean name="flip_normals" value="true"/><emitter type="area"><rgb name="radiance" value="0.5"/></emitter></shape>
"""


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    """The diffuse box seen from inside (every path bounces to max_depth), 8x8."""
    path = tmp_path_factory.mktemp("box") / "box.xml"
    path.write_text(_SCENE.format(depth=8, size=8, body=_BOX).replace('origin="0,1,4.5"', 'origin="0,0.5,1.5"'))
    return _Box(tracer.load_scene(str(path), accel="jax"), str(path))


class _Box(NamedTuple):
    scene: tracer.Scene
    path: str


def _at_depth(scene, depth):
    settings = dataclasses.replace(scene.settings, max_depth=depth, rr_depth=depth)  # no roulette: every path is long
    return dataclasses.replace(scene, settings=settings)


def _working_memory(gradient, params):
    """XLA's own account of the buffers the compiled gradient allocates besides its arguments."""
    analysis = jax.jit(gradient).lower(params).compile().memory_analysis()
    return analysis.temp_size_in_bytes + analysis.output_size_in_bytes


def _replayed(scene):
    from tracer.differentiable import image
    return jax.grad(lambda p: image(scene, p, jnp.int32(0), jnp.int32(0), spp=4).mean())


def _reverse_mode(scene):
    """The control: reverse mode through the bounces (a scan over max_depth), which keeps every
    bounce's state for the backward pass."""
    from tracer.integrators import path as paths
    from tracer.scene_parameters import substitute

    def radiance(p):
        s = substitute(scene, p)
        n = 8 * 8 * 4
        keys = jax.random.randint(jax.random.key(0), (n,), 0, 1 << 30).astype(jnp.uint32)
        from tracer import rng
        sample_keys = rng.sample_keys("independent", 0, 0, keys, jnp.zeros(n, jnp.uint32))
        o = jnp.tile(jnp.array([[0.0], [0.5], [1.5]], jnp.float32), (1, n))
        d = jnp.stack([jnp.linspace(-0.3, 0.3, n), jnp.full(n, -0.2), -jnp.ones(n)])
        d = d / jnp.linalg.norm(d, axis=0)
        state = paths.fresh_paths(o, d, jnp.full(n, jnp.inf), jnp.ones(n, bool))
        step = lambda st, _: (paths.shade(s, st, paths.locate(s, sample_keys, st), st.radiance), None)
        state, _ = jax.lax.scan(step, state, None, length=s.settings.max_depth)
        return state.radiance.mean()
    return jax.grad(radiance)


def test_gradient_memory_does_not_grow_with_depth(box):
    """The compiled gradient's working memory at max_depth 64 against 8 (no roulette): path
    replay keeps one bounce's state; the control, reverse mode through the bounces, grows with
    depth (the check would catch a replay that kept per-bounce residuals)."""
    params = {"red.reflectance.value": tracer.parameters(box.scene)["red.reflectance.value"]}
    replay = [_working_memory(_replayed(_at_depth(box.scene, d)), params) for d in (8, 64)]
    control = [_working_memory(_reverse_mode(_at_depth(box.scene, d)), params) for d in (8, 64)]
    print(f"gradient working memory, max_depth 8 -> 64: path replay {replay[0]} -> {replay[1]} bytes "
          f"({replay[1] / replay[0]:.2f}x); reverse mode {control[0]} -> {control[1]} ({control[1] / control[0]:.2f}x)")
    assert replay[0] > 0 and replay[1] <= 1.5 * replay[0]
    assert control[1] > 4 * control[0]


def test_the_gradient_lowers_for_cuda_and_tpu(box):
    scene = box.scene
    params = {"red.reflectance.value": tracer.parameters(scene)["red.reflectance.value"]}
    grad = jax.jit(_replayed(scene))
    exported = jax.export.export(grad, platforms=("cuda", "tpu"))(params)
    assert exported.platforms == ("cuda", "tpu")
    assert "custom_call @" not in exported.mlir_module().replace("custom_call @Sharding", "")


def test_bad_keys_are_refused_by_name(scenes):
    scene = tracer.load_scene(scenes[0], accel="jax")
    with pytest.raises(ParameterError, match="'nope.value': the scene has no such parameter"):
        tracer.render_differentiable(scene, {"nope.value": jnp.zeros(3)}, 1)
    with pytest.raises(ParameterError, match="'ball.to_world' cannot be differentiated: shape geometry"):
        tracer.render_differentiable(scene, {"ball.to_world": jnp.eye(4)}, 1)
    with pytest.raises(ParameterError, match=r"'red.reflectance.value' has shape \(3,\)"):
        tracer.render_differentiable(scene, {"red.reflectance.value": jnp.zeros(1)}, 1)


_KEYS = """<scene version="3.0.0">
<sensor type="perspective"><film type="hdrfilm"><integer name="width" value="4"/><integer name="height" value="4"/>
</film></sensor>
<bsdf type="diffuse" id="a"><rgb name="reflectance" value="0.3"/></bsdf>
<bsdf type="diffuse" id="b"><rgb name="reflectance" value="0.3"/></bsdf>
<bsdf type="diffuse" id="bm"><texture type="bitmap" name="reflectance"><string name="filename" value="{tex}"/>
</texture></bsdf>
<bsdf type="roughconductor" id="rc"><float name="alpha_u" value="0.3"/><float name="alpha_v" value="0.2"/>
  <rgb name="specular_reflectance" value="0.9,0.8,0.7"/><rgb name="eta" value="0.2,0.3,0.4"/><rgb name="k" value="3,2,1"/></bsdf>
<bsdf type="conductor" id="cu"><string name="material" value="Cu"/></bsdf>
<bsdf type="plastic" id="pl"><rgb name="diffuse_reflectance" value="0.3,0.4,0.5"/></bsdf>
<bsdf type="roughplastic" id="rpl"><rgb name="diffuse_reflectance" value="0.3,0.4,0.6"/></bsdf>
<bsdf type="twosided" id="ts"><bsdf type="diffuse"><rgb name="reflectance" value="0.25"/></bsdf></bsdf>
<bsdf type="blendbsdf" id="bl"><float name="weight" value="0.3"/><bsdf type="diffuse"/><bsdf type="conductor"/></bsdf>
<shape type="sphere" id="s1"><ref id="a"/></shape>
<shape type="sphere" id="s2"><ref id="b"/></shape>
<shape type="sphere" id="n1"><bsdf type="diffuse"><rgb name="reflectance" value="0.4"/></bsdf></shape>
<shape type="sphere" id="n2"><bsdf type="diffuse"><rgb name="reflectance" value="0.4"/></bsdf></shape>
<shape type="sphere"><bsdf type="diffuse"><rgb name="reflectance" value="0.45"/></bsdf></shape>
<shape type="sphere" id="x1"><ref id="bm"/></shape>
<shape type="sphere" id="x3"><ref id="rc"/></shape>
<shape type="sphere" id="x4"><ref id="cu"/></shape>
<shape type="sphere" id="x5"><ref id="pl"/></shape>
<shape type="sphere" id="x6"><ref id="rpl"/></shape>
<shape type="sphere" id="x7"><ref id="ts"/></shape>
<shape type="sphere" id="x9"><ref id="bl"/></shape>
<shape type="rectangle" id="lt"><emitter type="area"><rgb name="radiance" value="5"/></emitter></shape>
<emitter type="point" id="pt"><rgb name="intensity" value="2"/></emitter>
<emitter type="spot" id="sp"><rgb name="intensity" value="3"/></emitter>
<emitter type="directional" id="dl"><rgb name="irradiance" value="4"/><vector name="direction" x="0.3" y="-1" z="0.2"/></emitter>
<emitter type="envmap" id="sky"><string name="filename" value="{tex}"/></emitter>
</scene>"""


def test_keys_and_values_are_mitsubas(tmp_path):
    """Every differentiable key ``mi.traverse`` gives an object with an id is ours, with its value
    (merged identical BSDFs, nested BSDFs and emitters, twosided and blend children, a bitmap's
    texels, a conductor preset's eta and k, point/spot/directional/area/envmap emitters); the
    baked ones are refused by name."""
    mi = _mitsuba()
    tex = tmp_path / "tex.exr"
    mi.Bitmap(np.random.default_rng(1).uniform(0.1, 0.9, (4, 6, 3)).astype(np.float32)).write(str(tex))
    path = tmp_path / "keys.xml"
    path.write_text(_KEYS.format(tex=tex))
    theirs = mi.traverse(mi.load_file(str(path)))
    wanted = {k for k in theirs.keys() if theirs.flags(k) != 1 and not k.startswith("object_")
              and not k.endswith(("to_world", "to_uv", "cutoff_angle", "beam_width", "texture.value"))}
    scene = tracer.load_scene(str(path))
    ours = tracer.parameters(scene)
    refused = {s.key for s in scene.parameter_slots if s.refused}
    assert wanted - refused == set(ours), (sorted(wanted - refused - set(ours)), sorted(set(ours) - wanted))
    assert {"rpl.alpha", "rpl.eta"} <= refused
    for key, value in ours.items():
        expected = np.array(theirs[key]).reshape(value.shape)
        if key == "sky.data":  # Mitsuba's wrap-around columns are its own copies of the edge texels
            expected, value = expected[:, 1:-1], value[:, 1:-1]
        np.testing.assert_allclose(np.asarray(value), expected, rtol=1e-5, atol=1e-6, err_msg=key)


def test_substituted_values_render_as_the_edited_file(box, tmp_path):
    """Writing values in gives the image of the file with those values written in: the same
    samples, the same radiance (to float rounding)."""
    new = {"red.reflectance.value": jnp.array([0.3, 0.5, 0.1]), "box.emitter.radiance.value": jnp.array([0.2, 0.4, 0.6])}
    edited = tmp_path / "edited.xml"
    body = _BOX.replace('value="0.7,0.2,0.2"', 'value="0.3,0.5,0.1"').replace(
        '<rgb name="radiance" value="0.5"/>', '<rgb name="radiance" value="0.2,0.4,0.6"/>')
    edited.write_text(_SCENE.format(depth=8, size=8, body=body).replace('origin="0,1,4.5"', 'origin="0,0.5,1.5"'))
    written = tracer.render_differentiable(box.scene, new, 4, 3)
    loaded = tracer.render_differentiable(tracer.load_scene(str(edited), accel="jax"), {}, 4, 3)
    assert float(loaded.mean()) > 0.01
    np.testing.assert_allclose(np.asarray(written), np.asarray(loaded), rtol=1e-5, atol=1e-7)
    assert not any(np.allclose(tracer.parameters(box.scene)[k], v) for k, v in new.items())  # the box is unchanged


@pytest.mark.parametrize("accel", ["embree", "warp"])
def test_host_intersection_engines_give_the_same_gradient(box, accel):
    """Embree (an XLA FFI call) and Warp (a host callback) answer the rays without a derivative
    rule: the replay holds intersection out of differentiation, and the gradient is the pure-JAX one."""
    pytest.importorskip("embreex" if accel == "embree" else "warp")
    scene = tracer.load_scene(box.path, accel=accel)
    if scene.geometry.accel != accel:
        pytest.skip(f"{accel} is not available here")
    keys = ("red.reflectance.value", "box.emitter.radiance.value")
    grad = lambda s: jax.jit(jax.grad(lambda p: tracer.render_differentiable(s, p, 2, 1).mean()))(
        {k: tracer.parameters(s)[k] for k in keys})
    ours, pure = grad(scene), grad(box.scene)
    for key in keys:
        np.testing.assert_allclose(np.asarray(ours[key]), np.asarray(pure[key]), rtol=1e-5, err_msg=key)
