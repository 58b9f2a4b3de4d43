"""The stores this user's ``farm render`` and ``farm submit`` made, for ``farm list``.

One store a line (an absolute path, or a URL as given) in ``$FARM_REGISTRY``, by default
``$XDG_STATE_HOME/jaxfarm/stores`` (``~/.local/state/jaxfarm/stores``). It is a note, not a job:
a line is appended once per store, a store removed since is skipped by ``farm list``, and a
registry that cannot be written or read is left alone (the stores are the jobs' truth).
"""
import os

__all__ = ["registry_path", "record", "recorded"]


def registry_path() -> str:
    """Where the registry file is (it may not exist)."""
    if os.environ.get("FARM_REGISTRY"):
        return os.environ["FARM_REGISTRY"]
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "jaxfarm", "stores")


def _key(url: str) -> str:
    return url if "://" in url else os.path.abspath(url)


def record(url: str) -> None:
    """Add the store at ``url`` to the registry, unless it is there; never raises for the file."""
    key = _key(url)
    if "\n" in key or key in recorded():
        return
    path = registry_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:  # one short append: whole lines from concurrent runs
            f.write(key + "\n")
    except OSError:
        pass


def recorded() -> list[str]:
    """The stores in the registry, in the order they were added, each once ([] without a registry)."""
    try:
        with open(registry_path(), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return list(dict.fromkeys(line for line in lines if line.strip()))
