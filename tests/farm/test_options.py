"""The job's command-line options are declared once (``farm.options``): ``render`` and ``submit``
take the same ones, each sets its spec field, a job file's values give way only to options given,
and ``submit`` passes on exactly what it was given."""
import dataclasses
import os

import pytest

from farm.cli import cli
from farm.options import GROUP_OPTIONS, JOB_OPTIONS, command_line, job_spec, with_groups
from farm.spec import GroupsSpec, JobSpec

SCENE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples",
                     "cbox.xml")


def _params(command, args):
    """The parameters click parses from ``farm COMMAND ARGS``."""
    with cli.commands[command].make_context(command, list(args)) as ctx:
        return dict(ctx.params)


def _flags(command):
    return {opt for p in cli.commands[command].params for opt in p.opts}


def test_each_option_sets_a_field_of_its_spec():
    assert {o.field for o in JOB_OPTIONS} <= {f.name for f in dataclasses.fields(JobSpec)}
    assert {o.field for o in GROUP_OPTIONS} <= {f.name for f in dataclasses.fields(GroupsSpec)}


def test_render_and_submit_take_the_job_options_and_render_and_resume_the_group_options():
    job, groups = {o.flag for o in JOB_OPTIONS}, {o.flag for o in GROUP_OPTIONS}
    assert job <= _flags("render") and job <= _flags("submit")
    assert groups <= _flags("render") and groups <= _flags("resume")
    assert groups & _flags("submit") == {"--priority"}  # a submitted job's groups are the cluster's nodes


ARGS = ["--frames", "2-5", "--spp", "12", "--res", "40x30", "--set", "spp=3", "--set", "x=0:1,4:2", "--seed", "9",
        "--tile", "16", "--noise", "0.1", "--min-spp", "8", "--aovs", "a:albedo", "--rfilter", "box", "--accel", "jax",
        "--out", "s.zarr"]


def test_a_scene_job_has_every_option_given_and_submit_passes_on_the_same_job():
    params = _params("render", [SCENE, *ARGS])
    spec = job_spec(SCENE, params)
    assert (spec.frames, spec.spp, spec.resolution, spec.seed, spec.tile, spec.noise, spec.min_spp) == \
        ((2, 5), 12, (40, 30), 9, 16, 0.1, 8)
    assert (spec.aovs, spec.rfilter, spec.accel, spec.store) == ("a:albedo", "box", "jax", "s.zarr")
    assert [c.name for c in spec.curves] == ["spp", "x"]
    passed = command_line(_params("submit", [SCENE, "--address", "http://h:8265", *ARGS]))
    assert job_spec(SCENE, _params("render", [SCENE, *passed])) == spec


def test_a_scene_job_takes_the_defaults_for_what_is_not_given():
    spec = job_spec(SCENE, _params("render", [SCENE, "--out", "s.zarr"]))
    assert (spec.frames, spec.seed, spec.accel, spec.curves, spec.tile, spec.noise) == ((0, 0), 0, "auto", (), None, None)
    assert command_line(_params("render", [SCENE, "--out", "s.zarr"])) == ["--out", "s.zarr"]


def test_a_job_files_values_give_way_only_to_options_given(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text(f'scene = "{SCENE}"\nstore = "s.zarr"\nspp = 32\nseed = 7\nframes = [0, 3]\n'
                   '[params.a]\nvalue = 1\n[params.b]\nvalue = 2\n')
    spec = job_spec(str(job), _params("render", [str(job), "--seed", "3", "--set", "b=5"]))
    assert (spec.spp, spec.seed, spec.frames) == (32, 3, (0, 3))
    assert {c.name: c for c in spec.curves}["b"].at(0) == 5
    assert {c.name: c for c in spec.curves}["a"].at(0) == 1


def test_group_options_given_replace_the_groups_fields_and_a_gpu_group_gets_a_gpu():
    spec = job_spec(SCENE, _params("render", [SCENE, "--out", "s.zarr"]))
    spec = dataclasses.replace(spec, groups=GroupsSpec(count=3, hosts=2))
    moved = with_groups(spec, _params("render", [SCENE, "--groups", "4", "--platform", "gpu", "--cpu-isa", "avx2"]))
    assert (moved.groups.count, moved.groups.hosts, moved.groups.platform) == (4, 2, "gpu")
    assert (moved.groups.gpus_per_host, moved.groups.cpu_isa) == (1, "AVX2")
    assert with_groups(spec, _params("render", [SCENE])) == spec


def test_a_flags_zero_is_refused_not_taken_for_not_given():
    spec = job_spec(SCENE, _params("render", [SCENE, "--out", "s.zarr"]))
    with pytest.raises(Exception, match="groups.count must be a whole number >= 1"):
        with_groups(spec, _params("render", [SCENE, "--groups", "0"]))
