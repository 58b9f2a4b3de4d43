"""A group spread over the two nodes of a simulated Ray cluster (ray.cluster_utils.Cluster)."""
import pathlib

import numpy as np
import pytest

from cluster.group import GroupShape, WorkerGroup
from cluster.task import SceneRef, TileTask
from tests.helpers import clusters

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_nodes():
    with clusters.two_nodes(cpus=2) as cluster:
        yield cluster


def test_strict_spread_puts_one_member_on_each_node_and_renders_the_same_bits(two_nodes):
    task = TileTask(scene=SceneRef(path=str(ROOT / "examples" / "materials.xml"), params=(("height", 30), ("width", 40))),
                    frame=1, seed=3, spp=24, tile_y=0, tile_x=8, tile_h=16, tile_w=24,
                    first_pass=0, n_passes=3, pass_size=8)
    spread = WorkerGroup(GroupShape(hosts=2, devices_per_host=1, strategy="STRICT_SPREAD"), name="spread").start()
    try:
        nodes = [node for node, _, _ in spread.where]
        assert len(set(nodes)) == 2
        value, weight, _ = spread.result(spread.submit(task))
    finally:
        spread.teardown()
    single = WorkerGroup(GroupShape(hosts=1, devices_per_host=1), name="single").start()
    try:
        ref = single.result(single.submit(task))
    finally:
        single.teardown()
    assert np.all(weight > 0)
    np.testing.assert_array_equal(value, ref[0])
    np.testing.assert_array_equal(weight, ref[1])
