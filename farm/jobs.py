"""A Ray cluster's Jobs API, as ``farm submit``, ``cancel``, ``wait`` and ``logs`` use it.

Authentication: Ray 2.60's ``ray start --head`` turns token authentication on where a token
exists (``~/.ray/auth_token``, which any earlier ``ray.init`` on the machine writes), and its
Jobs SDK sends the token only where this process is in token mode. So the client first does what
``ray start`` does (``maybe_enable_token_auth_if_token_available``): token mode when
``RAY_AUTH_MODE`` is unset and Ray's token loader finds a token (``RAY_AUTH_TOKEN``, the file
``RAY_AUTH_TOKEN_PATH`` names, or ``~/.ray/auth_token``). A cluster that wants a token this
machine lacks is one line saying where to put it.

Submissions: every ``farm submit`` of a store is a Ray job whose metadata names the store
(``farm_store``, its absolute path or URL) and whose id is ``farm-HASH-N`` (HASH of the store, N
counting its submissions); the store's job is its latest submission.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from typing import TYPE_CHECKING, Any

from farm.errors import FarmError, first_line

if TYPE_CHECKING:
    from ray.job_submission import JobDetails, JobSubmissionClient

__all__ = ["client", "store_key", "latest", "submit", "ENDED", "ENDINGS"]

ENDED = ("SUCCEEDED", "FAILED", "STOPPED")  # a Ray job's terminal states
ENDINGS = {"SUCCEEDED": "done", "FAILED": "failed", "STOPPED": "cancelled"}  # ... as the farm's job states
_METADATA = "farm_store"
_TOKEN_HELP = ("copy the cluster's token (`ray get-auth-token` on its head) to ~/.ray/auth_token, or set "
               "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")


def store_key(store: str) -> str:
    """The store as submissions name it: an absolute path, or a URL as given."""
    return store if "://" in store else os.path.abspath(store)


def token_mode() -> None:
    """Token authentication for this process's Jobs API calls where Ray's CLI would use it."""
    from ray._private.authentication import authentication_token_setup as setup
    quiet = logging.getLogger(setup.__name__)
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # Ray's notice that it turned token mode on is for cluster owners
    try:
        setup.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    finally:
        quiet.setLevel(level)


def client(address: str) -> JobSubmissionClient:
    """A Jobs API client of the cluster whose dashboard is at ``address``, with the token Ray's
    CLI would send; a FarmError where it cannot be reached."""
    from ray.job_submission import JobSubmissionClient
    token_mode()
    with _said(address, "cannot reach the Ray cluster"):
        return JobSubmissionClient(address)


@contextlib.contextmanager
def _said(address: str, what: str = "the Ray cluster"):
    """Errors of a Jobs API call as one line (a missing or refused token, a cluster not reached):
    "``what`` at ``address``: why"."""
    from ray.exceptions import AuthenticationError
    try:
        yield
    except AuthenticationError as e:
        what = "was refused" if "403" in str(e) or "Invalid" in str(e) else "is missing"
        raise FarmError(f"the Ray cluster at {address} wants an authentication token and this machine's "
                        f"{what}: {_TOKEN_HELP}") from None
    except (OSError, RuntimeError, ValueError) as e:  # unreachable, refused, not a Ray dashboard
        if "Unauthorized" in str(e) or "Missing authentication token" in str(e):
            raise FarmError(f"the Ray cluster at {address} wants an authentication token and none was found: "
                            f"{_TOKEN_HELP}") from None
        raise FarmError(f"{what} at {address}: {first_line(e)}") from None


def _base(store: str) -> str:
    return "farm-" + hashlib.sha256(store_key(store).encode()).hexdigest()[:16]


def _submissions(jobs: JobSubmissionClient, address: str, store: str) -> list[JobDetails]:
    """The Ray jobs submitted for ``store``, oldest first."""
    key, base = store_key(store), _base(store)
    with _said(address):
        found = [j for j in jobs.list_jobs() if (j.metadata or {}).get(_METADATA) == key
                 or (j.submission_id or "") == base]  # (submitted before jobs named their store)
    return sorted(found, key=lambda j: j.start_time or 0)


def latest(jobs: JobSubmissionClient, address: str, store: str) -> JobDetails | None:
    """The latest Ray job submitted for ``store`` (None: none)."""
    found = _submissions(jobs, address, store)
    return found[-1] if found else None


def submit(jobs: JobSubmissionClient, address: str, store: str, entrypoint: str) -> tuple[str, Any]:
    """Submit ``entrypoint`` for ``store`` unless its latest job still runs: (the job id, None),
    or (the running job's id, its status)."""
    found = _submissions(jobs, address, store)
    if found and found[-1].status not in ENDED:
        return found[-1].submission_id or "", found[-1].status
    sid = f"{_base(store)}-{len(found) + 1}"
    with _said(address):
        jobs.submit_job(entrypoint=entrypoint, submission_id=sid, metadata={_METADATA: store_key(store)})
    return sid, None
