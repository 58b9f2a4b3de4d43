"""Errors the farm reports to users as one line."""

__all__ = ["FarmError", "SpecError"]


class FarmError(Exception):
    """Something the user can fix; the CLI prints it as one line and exits non-zero."""

    exit_code = 1


class SpecError(FarmError):
    """An invalid job specification; the message names the field and what is valid."""

    exit_code = 2
