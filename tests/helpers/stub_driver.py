"""A driver of simulated groups in its own process, for the tests that kill it:
``python -m tests.helpers.stub_driver STORE MARKER SPP`` renders the orbit job (frames 0-1) into
STORE holding its lease, on two simulated groups whose members hang after writing their first
result, having created MARKER (``cluster.simulated``)."""
import sys

import ray

from cluster.group import GroupShape
from cluster.simulated import Hosts
from farm import job
from farm.scheduler import run_job
from tests.helpers.farm_cases import orbit_spec


def main(store, marker, spp):
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    spec, fs = job.prepare(orbit_spec(store, frames=(0, 1), spp=int(spp)), lease=True)
    hosts = Hosts(2, after_write="hang", marker=marker)
    run_job(spec, fs, [GroupShape()] * 2, show_progress=False, make_group=hosts.make_group)


if __name__ == "__main__":
    main(*sys.argv[1:])
