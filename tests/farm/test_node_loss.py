"""A two-node Ray cluster (ray.cluster_utils.Cluster) loses a node mid-job: the job completes
on the node that is left, with the bits of an undisturbed render."""
import dataclasses
import os

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster

from farm import job, scheduler
from farm.scheduler import run_job
from farm.spec import GroupsSpec
from tests.helpers.farm_cases import exported, orbit_spec, reference


@pytest.fixture
def two_nodes():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    worker = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    cluster.wait_for_nodes()
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


def test_losing_a_node_mid_job_changes_no_bit(two_nodes, tmp_path):
    cluster, worker = two_nodes
    spec = dataclasses.replace(orbit_spec(tmp_path / "n.zarr", frames=(0, 2), spp=32), pass_size=16,
                               groups=GroupsSpec(count=2))
    spec, store = job.prepare(spec)
    answers, removed, collect = [], [], scheduler._JobRun.collect

    def lose_the_worker_node_mid_job(run, d, groups):
        # One CPU per node: the two groups sit on different nodes. Lost in the driver's loop once
        # two answers came back, so that the job is mid-way however fast its tasks are.
        collect(run, d, groups)
        answers.append(d.task)
        if len(answers) == 2:
            cluster.remove_node(worker)
            removed.append(d.task)

    messages = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scheduler._JobRun, "collect", lose_the_worker_node_mid_job)
        run_job(spec, store, job.group_shapes(spec, local=True), show_progress=False, log=messages.append,
                init_timeout_s=10)
    assert removed, "the job ended before the node could be removed"
    assert any("lost" in m for m in messages), messages
    for got, want in zip(exported(store.url, tmp_path), reference(spec)):
        np.testing.assert_array_equal(got, want)
