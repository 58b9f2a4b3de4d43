"""Simulated Ray clusters for tests (``ray.cluster_utils.Cluster``): several raylets on this machine."""
import contextlib
import os

import ray
from ray.cluster_utils import Cluster


@contextlib.contextmanager
def two_nodes(cpus):
    """A head and a second node of ``cpus`` logical CPUs each, this process's Ray connected to
    them; yields the Cluster, and stops both at the end."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus, "include_dashboard": False})
    cluster.add_node(num_cpus=cpus)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
