"""Bounds (issue 37, item 6): groups, members and devices refused by name before Ray starts work,
against the spec's limits, this machine's cores, or the cluster's nodes; and ``farm status`` of a
100,000-frame job answering frames with nothing or everything stored without planning each."""
import time
from unittest import mock

import pytest

from cluster.group import GroupShape
from farm import job, planner
from farm.curves import Curve
from farm.errors import SpecError
from farm.spec import GroupsSpec, JobSpec
from tests.helpers.farm_cases import ORBIT, farm_main


@pytest.mark.parametrize("field", ["count", "hosts", "devices_per_host"])
def test_groups_past_the_limits_are_refused_by_name(field):
    with pytest.raises(SpecError, match=f"groups.{field} must be at most 1024, got 100000"):
        GroupsSpec(**{field: 100_000})


def test_a_local_job_takes_a_few_members_and_devices_a_core():
    job.check_local(GroupsSpec(count=4, hosts=2), cores=2)
    with pytest.raises(SpecError, match="9 members: a local job on this machine's 2 core"):
        job.check_local(GroupsSpec(count=9), cores=2)
    with pytest.raises(SpecError, match="groups.devices_per_host: 2 member"):
        job.check_local(GroupsSpec(count=2, devices_per_host=17), cores=2)


def test_a_clusters_groups_must_fit_its_nodes():
    nodes = [{"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0}]
    job.check_fits([GroupShape(hosts=2, strategy="STRICT_SPREAD")] * 8, nodes)
    with pytest.raises(SpecError, match="groups.hosts is 3, one member a node: the cluster has 2 node"):
        job.check_fits([GroupShape(hosts=3, strategy="STRICT_SPREAD")], nodes)
    with pytest.raises(SpecError, match="need 17 CPU, the cluster has 16"):
        job.check_fits([GroupShape(hosts=1)] * 17, nodes)
    gpu = GroupShape(hosts=1, platform="gpu", gpus_per_host=2)
    with pytest.raises(SpecError, match="need 4 GPU, the cluster has 2"):
        job.check_fits([gpu, gpu], nodes)


def test_too_many_groups_for_this_machine_are_refused_before_a_store_or_ray(tmp_path):
    code, _, err = farm_main("render", ORBIT, "--res", "16x16", "--groups", "1000", "--out", tmp_path / "s.zarr")
    assert code == 2 and err.startswith("error: groups.count x groups.hosts is 1000 members") and err.count("\n") == 1
    assert not (tmp_path / "s.zarr").exists()


def test_status_of_a_100000_frame_job_is_quick(tmp_path):
    spec = JobSpec(scene=ORBIT, frames=(0, 99_999), spp=4, store=str(tmp_path / "s.zarr"), resolution=(16, 16),
                   tile=16, pass_size=4, curves=(Curve("angle", ((0, 0.0), (99_999, 360.0))),))
    job.prepare(spec)
    t0 = time.perf_counter()
    # A frame with nothing stored is said at once, not planned (a plan per frame took 11.6 s).
    with mock.patch.object(planner, "plan", side_effect=AssertionError("a frame was planned")):
        code, out, err = farm_main("status", tmp_path / "s.zarr")
    print(f"status of a new 100,000-frame job: {time.perf_counter() - t0:.2f} s")
    assert code == 0 and "0-99999 (0/100000 finished)" in out and out.count("\n") > 100_000, err
