"""Camera rays against Mitsuba 3's own sensors for the same film and aperture samples."""
import numpy as np
import pytest

from tracer import camera as cameras

mi = pytest.importorskip("mitsuba")
mi.set_variant("scalar_rgb")


def _mitsuba_rays(sensor_dict, film_uv, aperture_u, with_maxt=False):
    mi.set_variant("scalar_rgb")
    sensor = mi.load_dict(sensor_dict)
    origins, dirs, maxt = [], [], []
    for (u, v), (a, b) in zip(film_uv.T, aperture_u.T):
        ray, _ = sensor.sample_ray(0.0, 0.5, mi.Point2f(u, v), mi.Point2f(a, b))
        origins.append(np.array(ray.o))
        dirs.append(np.array(ray.d))
        maxt.append(ray.maxt)
    return (np.array(origins).T, np.array(dirs).T) + ((np.array(maxt),) if with_maxt else ())


@pytest.mark.parametrize("fov_axis", ["x", "y", "diagonal", "smaller", "larger"])
@pytest.mark.parametrize("size", [(64, 48), (40, 72)])
def test_perspective_matches_mitsuba(fov_axis, size):
    w, h = size
    rng = np.random.default_rng(1)
    film_uv = rng.random((2, 50)).astype(np.float32)
    aperture = rng.random((2, 50)).astype(np.float32)
    to_world = mi.ScalarTransform4f().look_at(origin=[1, 2, 3], target=[0, 0.5, -1], up=[0, 1, 0])
    o_ref, d_ref = _mitsuba_rays({"type": "perspective", "fov": 35.0, "fov_axis": fov_axis, "near_clip": 0.1,
                                  "to_world": to_world, "film": {"type": "hdrfilm", "width": w, "height": h}},
                                 film_uv, aperture)
    cam = cameras.make_camera(np.array(to_world.matrix), cameras.x_fov_from(35.0, fov_axis, w, h), w, h, near_clip=0.1)
    o, d, _ = cameras.generate_rays(cam, film_uv, aperture)
    np.testing.assert_allclose(np.asarray(d), d_ref, atol=2e-5)
    np.testing.assert_allclose(np.asarray(o), o_ref, atol=2e-5)


def test_thinlens_matches_mitsuba():
    w, h = 50, 40
    rng = np.random.default_rng(2)
    film_uv = rng.random((2, 50)).astype(np.float32)
    aperture = rng.random((2, 50)).astype(np.float32)
    to_world = mi.ScalarTransform4f().look_at(origin=[0, 1, 4], target=[0, 0, 0], up=[0, 1, 0])
    o_ref, d_ref = _mitsuba_rays({"type": "thinlens", "fov": 40.0, "aperture_radius": 0.2, "focus_distance": 3.5,
                                  "near_clip": 0.01, "to_world": to_world,
                                  "film": {"type": "hdrfilm", "width": w, "height": h}}, film_uv, aperture)
    cam = cameras.make_camera(np.array(to_world.matrix), 40.0, w, h, near_clip=0.01, aperture_radius=0.2,
                              focus_distance=3.5)
    o, d, _ = cameras.generate_rays(cam, film_uv, aperture)
    np.testing.assert_allclose(np.asarray(d), d_ref, atol=2e-5)
    np.testing.assert_allclose(np.asarray(o), o_ref, atol=2e-5)


@pytest.mark.parametrize("size", [(64, 48), (40, 72)])
def test_orthographic_matches_mitsuba(size):
    """Rays from the near plane along the view axis; to_world's scale sizes the view (as in
    Mitsuba's documentation: a 20 x 20 view), and t_max is far_clip - near_clip."""
    w, h = size
    rng = np.random.default_rng(3)
    film_uv = rng.random((2, 50)).astype(np.float32)
    aperture = rng.random((2, 50)).astype(np.float32)
    to_world = (mi.ScalarTransform4f().look_at(origin=[1, 1, 1], target=[1, 2, 1], up=[0, 0, 1])
                @ mi.ScalarTransform4f().scale([10, 10, 1]))
    o_ref, d_ref, maxt_ref = _mitsuba_rays({"type": "orthographic", "near_clip": 0.5, "far_clip": 40.0,
                                            "to_world": to_world,
                                            "film": {"type": "hdrfilm", "width": w, "height": h}},
                                           film_uv, aperture, with_maxt=True)
    cam = cameras.make_orthographic(np.array(to_world.matrix), w, h, near_clip=0.5, far_clip=40.0)
    o, d, t_max = cameras.generate_rays(cam, film_uv, aperture)
    np.testing.assert_allclose(np.asarray(d), d_ref, atol=2e-6)
    np.testing.assert_allclose(np.asarray(o), o_ref, atol=2e-5)
    np.testing.assert_allclose(np.asarray(t_max), maxt_ref, rtol=1e-6)


@pytest.mark.parametrize("sensor", ["perspective", "orthographic"])
def test_a_crop_window_keeps_the_rays_of_the_whole_film(sensor):
    """Mitsuba's cropped sensor maps positions in the window to the rays of those pixels of the
    whole film: the rays we trace for the window's pixels (film positions in the whole film)."""
    w, h, (cx, cy, cw, ch) = 64, 48, (10, 7, 20, 30)
    rng = np.random.default_rng(4)
    window_uv = rng.random((2, 50)).astype(np.float32)
    aperture = rng.random((2, 50)).astype(np.float32)
    to_world = mi.ScalarTransform4f().look_at(origin=[1, 2, 3], target=[0, 0.5, -1], up=[0, 1, 0])
    film = {"type": "hdrfilm", "width": w, "height": h, "crop_offset_x": cx, "crop_offset_y": cy,
            "crop_width": cw, "crop_height": ch}
    params = {"fov": 50.0} if sensor == "perspective" else {}
    o_ref, d_ref = _mitsuba_rays({"type": sensor, "to_world": to_world, "film": film, **params}, window_uv, aperture)
    film_uv = np.stack([(cx + window_uv[0] * cw) / w, (cy + window_uv[1] * ch) / h]).astype(np.float32)
    if sensor == "perspective":
        cam = cameras.make_camera(np.array(to_world.matrix), 50.0, w, h)
    else:
        cam = cameras.make_orthographic(np.array(to_world.matrix), w, h)
    o, d, _ = cameras.generate_rays(cam, film_uv, aperture)
    np.testing.assert_allclose(np.asarray(d), d_ref, atol=2e-5)
    np.testing.assert_allclose(np.asarray(o), o_ref, atol=2e-5)
