"""The ``farm`` command line: parses, calls, and maps errors to one line and an exit code."""
import os
import sys

import click

from farm.errors import FarmError, SpecError

__all__ = ["main"]


def _parse_frames(text):
    try:
        if "-" in text.lstrip("-"):
            a, b = text.split("-", 1)
            first, last = int(a), int(b)
        else:
            first = last = int(text)
    except ValueError:
        raise SpecError(f"--frames '{text}': expected FIRST-LAST or one frame number") from None
    if first < 0 or last < first:
        raise SpecError(f"--frames '{text}': need 0 <= FIRST <= LAST")
    return first, last


def _parse_res(text):
    if text is None:
        return None
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise SpecError(f"--res '{text}': expected WIDTHxHEIGHT, e.g. 320x240") from None
    if not (1 <= w <= 16384 and 1 <= h <= 16384):
        raise SpecError(f"--res '{text}': width and height must be between 1 and 16384")
    return w, h


@click.group()
def cli():
    """Render Mitsuba 3 scenes with the JAX path tracer, locally or on a Ray cluster."""


@cli.command()
@click.argument("scene", type=click.Path(dir_okay=False))
@click.option("--frames", default="0", show_default=True, help="Frame range FIRST-LAST (inclusive).")
@click.option("--spp", type=int, default=None, help="Samples per pixel (default: the scene's sample_count).")
@click.option("--res", default=None, help="Override the film size, WIDTHxHEIGHT.")
@click.option("--set", "sets", multiple=True, help="NAME=VALUE or NAME=FRAME:VALUE,FRAME:VALUE,... (linear).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder for the frames.")
@click.option("--workers", type=int, default=1, show_default=True, help="Render processes on the local Ray.")
def render(scene, frames, spp, res, sets, seed, out, workers):
    """Render SCENE's frames on an embedded local Ray and write EXR and PNG files to OUT."""
    from farm.curves import parse_set
    from farm.local import render_frames

    if not os.path.isfile(scene):
        raise FarmError(f"scene file not found: {scene}")
    if spp is not None and spp < 1:
        raise SpecError(f"--spp {spp}: must be at least 1")
    if workers < 1:
        raise SpecError(f"--workers {workers}: must be at least 1")
    curves = [parse_set(s) for s in sets]
    render_frames(scene, _parse_frames(frames), spp, _parse_res(res), curves, seed, out, workers)


def main(argv=None):
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except FarmError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(e.exit_code)
    return 0


if __name__ == "__main__":
    main()
