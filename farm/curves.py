"""Keyframed scene parameters: ``--set NAME=VALUE`` or ``NAME=FRAME:VALUE,FRAME:VALUE,...``.

A curve maps a frame number to the value substituted for the scene's ``$NAME`` default.
Interpolation is linear between keys (``step`` and ``smooth`` are also available in job files);
before the first key and after the last the end values hold.
"""
import dataclasses
import math

from farm.errors import SpecError, shown

__all__ = ["Curve", "parse_set", "INTERPOLATIONS"]

INTERPOLATIONS = ("linear", "step", "smooth")


@dataclasses.dataclass(frozen=True)
class Curve:
    name: str
    keys: tuple[tuple[int, float | str], ...]  # ((frame, value), ...) sorted by frame; values are floats or strings
    interpolation: str = "linear"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"a parameter name must be a non-empty string, got {shown(self.name)}")
        if not isinstance(self.keys, tuple) or not all(isinstance(k, tuple) and len(k) == 2 for k in self.keys):
            raise SpecError(f"parameter '{self.name}': keys must be (frame, value) pairs")
        for frame, value in self.keys:
            if not _whole(frame):
                raise SpecError(f"parameter '{self.name}': a key's frame must be a whole number, got {shown(frame)}")
            if not (isinstance(value, str) or _finite(value)):
                raise SpecError(f"parameter '{self.name}': a value must be a finite number or a string, "
                                f"got {shown(value)}")
        if not isinstance(self.interpolation, str) or self.interpolation not in INTERPOLATIONS:
            raise SpecError(f"parameter '{self.name}': interpolation must be one of {', '.join(INTERPOLATIONS)}, "
                            f"got {shown(self.interpolation)}")
        if not self.keys:
            raise SpecError(f"parameter '{self.name}': no value given")
        frames = [f for f, _ in self.keys]
        if len(set(frames)) != len(frames):
            raise SpecError(f"parameter '{self.name}': a frame has two keys")
        if frames != sorted(frames):
            raise SpecError(f"parameter '{self.name}': keys must be in frame order")
        numeric = all(isinstance(v, (int, float)) for _, v in self.keys)
        if len(self.keys) > 1 and not numeric and self.interpolation != "step":
            raise SpecError(f"parameter '{self.name}': non-numeric keys need 'step' interpolation")

    def at(self, frame: int) -> float | str:
        keys = self.keys
        # A key's own value keeps its type (an int stays an int); between keys the value is a float.
        if len(keys) == 1 or frame <= keys[0][0]:
            return keys[0][1]
        if frame >= keys[-1][0]:
            return keys[-1][1]
        for (f0, v0), (f1, v1) in zip(keys, keys[1:]):
            if f0 <= frame < f1:
                if frame == f0 or self.interpolation == "step":
                    return v0
                assert not isinstance(v0, str) and not isinstance(v1, str)  # (strings need step: __post_init__)
                t = (frame - f0) / (f1 - f0)
                if self.interpolation == "smooth":
                    t = t * t * (3.0 - 2.0 * t)
                return v0 + (v1 - v0) * t
        return keys[-1][1]


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> bool:
    """A number (not a bool) that is a finite float, so that curves can interpolate it."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float range
        return False


def _number_or_string(text: str) -> int | float | str:
    """An integer literal stays an int (integer scene parameters reject '80.0'); other numbers are floats."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    if not math.isfinite(value):
        raise SpecError(f"value '{text}' is not finite")
    return value


def parse_set(text: str) -> Curve:
    """Parse one ``--set`` argument into a Curve."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name or not rest.strip():
        raise SpecError(f"--set '{text}': expected NAME=VALUE or NAME=FRAME:VALUE,FRAME:VALUE,...")
    if ":" not in rest:
        return Curve(name, ((0, _number_or_string(rest.strip())),))
    keys: list[tuple[int, float | str]] = []
    for part in rest.split(","):
        frame_text, sep, value = part.partition(":")
        try:
            frame = int(frame_text)
        except ValueError:
            raise SpecError(f"--set '{text}': '{part}' is not FRAME:VALUE with an integer frame") from None
        if not sep or not value.strip():
            raise SpecError(f"--set '{text}': '{part}' is not FRAME:VALUE")
        keys.append((frame, _number_or_string(value.strip())))
    return Curve(name, tuple(sorted(keys)))
