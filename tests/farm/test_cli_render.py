"""``farm render`` end to end on an embedded local Ray, and its one-line errors."""
import os
import re

import numpy as np
import pytest

from farm.curves import Curve, parse_set
from farm.errors import SpecError
from tests.helpers.farm_cases import farm_cli


def test_parse_set_constant_and_keyframes():
    assert parse_set("angle=30").at(7) == 30.0
    curve = parse_set("angle=0:0,10:100")
    assert [curve.at(f) for f in (-1, 0, 5, 10, 12)] == [0.0, 0.0, 50.0, 100.0, 100.0]
    smooth = Curve("x", ((0, 0.0), (10, 1.0)), "smooth")
    assert smooth.at(5) == pytest.approx(0.5) and smooth.at(2) < 0.2
    step = Curve("x", ((0, 1.0), (10, 2.0)), "step")
    assert step.at(9) == 1.0 and step.at(10) == 2.0
    for bad in ("angle", "=3", "angle=a:1", "angle=0:1,0:2"):
        with pytest.raises(SpecError):
            parse_set(bad)


def test_set_keeps_integers_integers():
    # An integer scene parameter (a film's width) refuses '80.0': --set must pass 80, not 80.0.
    assert type(parse_set("width=80").at(3)) is int
    keyed = parse_set("width=0:80,4:120")
    assert [type(keyed.at(f)) for f in (0, 4, 9)] == [int, int, int] and keyed.at(2) == 100.0
    assert type(parse_set("angle=80.5").at(0)) is float
    from farm.spec import scene_info
    info = scene_info("examples/orbit.xml", (("width", parse_set("width=80").at(0)),))
    assert info.film_size == (80, 120)


def test_render_then_export_an_animation(tmp_path):
    """...with an empty compilation cache: the driver's preflight compiles the job's program
    while Ray starts and, standing in for the job's one group, renders every task: the job's
    one program is compiled once, and no group forms."""
    store, out = tmp_path / "orbit.zarr", tmp_path / "frames"
    env = dict(os.environ, JAXFARM_XLA_CACHE=str(tmp_path / "xla-cache"))
    result = farm_cli("render", "examples/orbit.xml", "--frames", "0-2", "--spp", "2", "--res", "32x24",
                      "--set", "angle=0:0,2:90", "--out", str(store), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Token authentication" not in result.stdout + result.stderr  # Ray's notice, not for us
    programs = re.search(r"XLA: (\d+) program\(s\), (\d+) compiled and (\d+) loaded", result.stderr)
    assert programs and programs[1] == programs[2] == "1", result.stderr[-3000:]
    assert "forming groups" not in result.stderr, result.stderr[-3000:]
    status = farm_cli("status", str(store))
    assert status.returncode == 0 and "3/3 finished" in status.stdout, status.stdout + status.stderr
    (tmp_path / "empty").mkdir()
    listed = farm_cli("list", str(tmp_path / "empty"))  # no store there; the registry has it
    assert listed.returncode == 0 and re.search(rf"^done +3/3 +2 spp +{re.escape(str(store))}$", listed.stdout, re.M), \
        listed.stdout + listed.stderr
    for fmt in ("exr", "png"):
        result = farm_cli("export", str(store), "--format", fmt, "--out", str(out))
        assert result.returncode == 0, result.stderr[-3000:]
    from tracer.io.images import load_image

    frames = [load_image(str(out / f"frame_{i:04d}.exr")) for i in range(3)]
    for i, frame in enumerate(frames):
        assert frame.shape == (24, 32, 3) and np.isfinite(frame).all() and frame.mean() > 0.01
        assert (out / f"frame_{i:04d}.png").stat().st_size > 100
    # The camera orbits: consecutive frames differ.
    assert np.abs(frames[0] - frames[2]).mean() > 0.01


@pytest.mark.parametrize("args,message", [
    (("render", "missing.xml", "--out", "x"), "scene file not found"),
    (("render", "examples/cbox.xml", "--frames", "5-2", "--out", "x"), "frames '5-2'"),
    (("render", "examples/cbox.xml", "--res", "12", "--out", "x"), "resolution '12'"),
    (("render", "examples/cbox.xml", "--set", "oops", "--out", "x"), "--set"),
])
def test_bad_input_is_one_line_and_nonzero(args, message):
    result = farm_cli(*args, timeout=120)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_scene_error_from_the_worker_is_one_line(tmp_path):
    scene = tmp_path / "bad.xml"
    # The driver reads the scene's files (a missing one is refused there); the plugins only the worker.
    scene.write_text('<scene version="3.0.0"><shape type="rectangle"><bsdf type="nosuchbsdf"/></shape>'
                     '<sensor type="perspective"/></scene>')
    result = farm_cli("render", str(scene), "--out", str(tmp_path / "o"))
    assert result.returncode != 0
    # The progress bar may have started; the error is the one last line, with no traceback.
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "nosuchbsdf" in last, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
