"""File names of exported frames: ``farm export --name TEMPLATE``.

A template is a Python format string over three fields: ``{job}`` (the store's folder name, less
a ``.zarr`` suffix), ``{frame}`` (the frame number, as a whole number: ``{frame}`` or an integer
format such as ``{frame:04d}``) and ``{ext}`` (the format's extension). The default is
``frame_{frame:04d}.{ext}``. A template is checked before anything is written: it must name
``{frame}`` (frames must not overwrite each other), use no other field, attribute, index,
conversion (``!s``) or format but the frame's integer one (a format could print nothing), and
every name it makes must be a plain file name ending in the format's extension (no folder
separators, not ``.`` or ``..``, no control characters), so exports never leave the output folder
and never take a name the store's own files have; two frames of the export must not get the same name.
"""
import os
import re
import string
from collections.abc import Iterable

from farm.errors import SpecError

__all__ = ["DEFAULT_TEMPLATE", "job_name", "frame_names", "is_utf8"]

DEFAULT_TEMPLATE = "frame_{frame:04d}.{ext}"
FIELDS = ("job", "frame", "ext")
_INTEGER_FORMAT = re.compile(r"0?[1-9]?[0-9]?d")  # {frame:d}, {frame:4d}, {frame:04d}, {frame:012d}
MAX_NAME = 255  # bytes: most file systems' limit for one name


def is_utf8(name: str) -> bool:
    """Whether ``name`` is valid Unicode text: a name the OS gave as bytes that are not UTF-8
    holds lone surrogates, and no store's UTF-8 metadata, registry or page can hold it."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def job_name(url: str) -> str:
    """The ``{job}`` of a store: its last path element, less ``.zarr``."""
    name = os.path.basename(url.rstrip("/\\")) or "job"
    return name[:-5] if name.endswith(".zarr") and len(name) > 5 else name


def frame_names(template: str, job: str, frames: Iterable[int], ext: str) -> dict[int, str]:
    """{frame: file name} for ``frames`` (numbers); a bad template is a one-line ``SpecError``."""
    where = f"--name {template!r}"
    fields = _fields(template, where)
    if "frame" not in fields:
        raise SpecError(f"{where}: must contain {{frame}} (e.g. '{{job}}_{{frame:04d}}.{ext}'), or frames overwrite each other")
    names: dict[int, str] = {}
    for frame in frames:
        try:
            name = template.format(job=job, frame=frame, ext=ext)
        except (ValueError, TypeError) as e:
            raise SpecError(f"{where}: {e}") from None
        _check_name(name, where)
        if not name.endswith("." + ext):
            raise SpecError(f"{where}: makes {name!r}, which does not end in '.{ext}' (end it with '.{{ext}}')")
        names[frame] = name
    seen: dict[str, int] = {}
    for frame, name in names.items():
        if name in seen:
            raise SpecError(f"{where}: frames {seen[name]} and {frame} both get the name {name!r}")
        seen[name] = frame
    return names


def _fields(template: str, where: str) -> set[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise SpecError(f"{where}: {e}") from None
    fields: set[str] = set()
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in FIELDS:
            raise SpecError(f"{where}: unknown field {{{field}}} (the fields are {{job}}, {{frame}} and {{ext}})")
        if spec and "{" in spec:
            raise SpecError(f"{where}: nested fields are not allowed")
        if conversion:
            raise SpecError(f"{where}: {{{field}!{conversion}}}: conversions are not allowed")
        if spec and not (field == "frame" and _INTEGER_FORMAT.fullmatch(spec)):
            allowed = "an integer format such as {frame:04d}" if field == "frame" else "none"
            raise SpecError(f"{where}: {{{field}:{spec}}}: the format of {{{field}}} may be {allowed}")
        fields.add(field)
    return fields


def _check_name(name: str, where: str) -> None:
    if name in ("", ".", "..") or "/" in name or "\\" in name or os.sep in name or (os.altsep and os.altsep in name):
        raise SpecError(f"{where}: makes {name!r}, which is not a plain file name in the output folder")
    if any(ord(c) < 32 or ord(c) == 127 for c in name) or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME:
        raise SpecError(f"{where}: makes {name!r}, which is not a usable file name")
