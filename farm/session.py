"""The driver's Ray session: an embedded local Ray, or a connection to a cluster, for one run.

``ray_session`` starts Ray for the length of a ``with`` block and shuts it down after, whatever
happens inside. Locally it gives Ray at least one logical CPU per group member, so that every
group of the job can be placed on this one machine; on a cluster (``address``: ``auto`` or
``ray://head:10001``) the cluster's own resources decide. Ray's dashboard, usage statistics and
worker log forwarding are off: the driver reports through its own progress bar and one-line
errors. The embedded Ray keeps Ray's default token authentication without Ray's notice of it on
every run (a notice meant for clusters that others can reach).
"""
import contextlib
import logging
import os

import ray

from farm.job import group_shapes

__all__ = ["ray_session", "run"]

_TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


@contextlib.contextmanager
def ray_session(address=None, groups=None):
    """Ray for a ``with`` block: local (``address`` None) with room for ``groups`` (a
    ``GroupsSpec``: ``count * hosts`` members), or the cluster at ``address``."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is None:
        members = groups.count * groups.hosts if groups is not None else 1
        # "local": always a new embedded Ray, never a cluster that happens to run on this machine.
        logging.getLogger(_TOKEN_NOTICE_LOGGER).setLevel(logging.ERROR)
        ray.init(address="local", num_cpus=max(os.cpu_count() or 1, members), include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR, configure_logging=False)
    else:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield
    finally:
        ray.shutdown()


def run(spec, store, address=None, show_progress=True, log=print):
    """Render what ``store`` lacks, on an embedded local Ray or the cluster at ``address``; the
    run's phases from the start of Ray on are in the store's progress notes (``farm.progress``)."""
    from farm.progress import RunProgress
    from farm.scheduler import run_job

    progress = RunProgress(store, show_progress)
    try:
        progress.phase("starting Ray")
        with ray_session(address, spec.groups):
            return run_job(spec, store, group_shapes(spec, address is None), log=log, progress=progress)
    except BaseException as e:
        if not progress.ended:  # Ray did not start, or the run stopped outside the scheduler's loop
            progress.fail_quietly(e)
        raise
    finally:
        progress.close()
