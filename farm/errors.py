"""Errors the farm reports to users as one line."""

__all__ = ["FarmError", "SpecError", "SceneFileError", "Interrupted", "shown", "first_line"]


class FarmError(Exception):
    """Something the user can fix; the CLI prints it as one line and exits non-zero."""

    exit_code = 1


class SpecError(FarmError):
    """An invalid job specification; the message names the field and what is valid."""

    exit_code = 2


class SceneFileError(FarmError):
    """The scene, or a file it uses, is malformed or unsupported (the loader's one line)."""


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name where it has none)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for a one-line message: newlines escaped, cut at ``limit`` characters."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        return "a number too long to show"
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Interrupted(FarmError):
    """Ctrl-C (SIGINT: exit 130), SIGTERM (143) or SIGHUP (129); the message says how to go on."""

    exit_code = 130

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
