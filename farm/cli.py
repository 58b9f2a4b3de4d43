"""The ``farm`` command line: parses, calls, and maps errors to one line and an exit code.

Exit codes: 0 done, 1 user error (FarmError), 2 invalid job spec, 3 store problem,
4 the job failed, 5 cancelled, 130 interrupted.
"""
import hashlib
import os
import sys
import time

import click

from farm.errors import FarmError, SpecError
from tracer.defaults import DEFAULT_TILE, PLATFORMS

__all__ = ["main"]


def _group_options(f):
    f = click.option("--platform", type=click.Choice(PLATFORMS), default=None,
                     help="Device platform of the worker groups (default cpu).")(f)
    f = click.option("--devices-per-host", type=int, default=None,
                     help="CPU only: virtual devices per group member (default: one per core).")(f)
    f = click.option("--hosts-per-group", type=int, default=None, help="Hosts (members) per worker group.")(f)
    f = click.option("--groups", type=int, default=None, help="Worker groups to render on.")(f)
    f = click.option("--address", default=None,
                     help="Ray cluster to join (e.g. auto or ray://head:10001); default: an embedded local Ray.")(f)
    f = click.option("--no-progress", is_flag=True, help="No progress bar.")(f)
    return f


def _with_groups(spec, groups, hosts, devices, platform):
    import dataclasses

    from farm.spec import GroupsSpec
    g = spec.groups
    new = GroupsSpec(count=groups or g.count, hosts=hosts or g.hosts, devices_per_host=devices or g.devices_per_host,
                     platform=platform or g.platform,
                     gpus_per_host=g.gpus_per_host or (1 if (platform or g.platform) == "gpu" else 0),
                     tpu_topology=g.tpu_topology, tpu_version=g.tpu_version)
    return dataclasses.replace(spec, groups=new)


def _spec_from_args(source, frames, spp, res, sets, seed, tile, accel, out):
    from farm.curves import parse_set
    from farm.spec import JobSpec, parse_frames, parse_res
    import dataclasses

    if source.endswith(".toml"):
        spec = JobSpec.from_toml(source)
        overrides = {}
        if frames is not None:
            overrides["frames"] = parse_frames(frames)
        if spp is not None:
            overrides["spp"] = spp
        if res is not None:
            overrides["resolution"] = parse_res(res)
        if sets:
            named = {c.name: c for c in spec.curves}
            named.update({c.name: c for c in (parse_set(s) for s in sets)})
            overrides["curves"] = tuple(named.values())
        if seed is not None:
            overrides["seed"] = seed
        if tile is not None:
            overrides["tile"] = tile
        if accel is not None:
            overrides["accel"] = accel
        if out is not None:
            overrides["store"] = out
        return dataclasses.replace(spec, **overrides)
    if not os.path.isfile(source):
        raise FarmError(f"scene file not found: {source}")
    if out is None:
        raise SpecError("--out STORE is required with a scene file (a job file names its store)")
    if spp is None:
        spp = _scene_spp(source, sets)
    return JobSpec(scene=os.path.abspath(source), frames=parse_frames(frames or "0"), spp=spp, store=out,
                   resolution=parse_res(res), seed=seed or 0, tile=tile or DEFAULT_TILE, accel=accel or "auto",
                   curves=tuple(parse_set(s) for s in sets))


def _scene_spp(path, sets):
    """The samples per pixel of the scene's sampler (Mitsuba's 4 when it has none)."""
    from farm.spec import scene_info
    return scene_info(path).spp


def _render(spec, address, no_progress):
    from farm import job, session
    spec, store = job.prepare(spec)
    click.echo(f"{spec.n_frames} frame(s) x {spec.spp} spp at {store.width}x{store.height} -> {store.url}", err=True)
    session.run(spec, store, address=address, show_progress=not no_progress, log=lambda m: click.echo(m, err=True))
    click.echo(f"done: {store.url} (farm export {store.url} --out DIR)", err=True)


@click.group()
def cli():
    """Render Mitsuba 3 scenes with the JAX path tracer, locally or on a Ray cluster."""


@cli.command()
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--frames", default=None, help="Frame range FIRST-LAST (inclusive); default 0.")
@click.option("--spp", type=int, default=None, help="Samples per pixel (default: the scene's sample_count).")
@click.option("--res", default=None, help="Override the film size, WIDTHxHEIGHT.")
@click.option("--set", "sets", multiple=True, help="NAME=VALUE or NAME=FRAME:VALUE,FRAME:VALUE,... (linear).")
@click.option("--seed", type=int, default=None, help="Job seed (default 0).")
@click.option("--tile", type=int, default=None, help=f"Tile size in pixels (default {DEFAULT_TILE}).")
@click.option("--accel", type=click.Choice(["auto", "embree", "warp", "jax"]), default=None,
              help="Intersection backend (default auto: Embree on CPUs).")
@click.option("--out", default=None, help="The job's Zarr store (a path, or a URL zarr accepts).")
@_group_options
def render(source, frames, spp, res, sets, seed, tile, accel, out, address, no_progress, groups,
           hosts_per_group, devices_per_host, platform):
    """Render SOURCE (a scene .xml, or a job .toml) into a Zarr store.

    Running it again on the store of the same job renders only what is missing; a higher --spp
    adds samples to a finished job.
    """
    spec = _spec_from_args(source, frames, spp, res, sets, seed, tile, accel, out)
    spec = _with_groups(spec, groups, hosts_per_group, devices_per_host, platform)
    _render(spec, address, no_progress)


@cli.command()
@click.argument("store")
@_group_options
def resume(store, address, no_progress, groups, hosts_per_group, devices_per_host, platform):
    """Render what STORE's job still lacks."""
    from farm.spec import JobSpec
    from farm.store import FrameStore
    spec = JobSpec.from_json(FrameStore.open(store).spec_json)
    spec = _with_groups(spec, groups, hosts_per_group, devices_per_host, platform)
    _render(spec, address, no_progress)


@cli.command()
@click.argument("store")
def status(store):
    """Show STORE's job: frames, samples done, rate, ETA."""
    from farm.job import frame_status
    from farm.spec import JobSpec
    from farm.store import FrameStore
    fs = FrameStore.open(store, mode="r")
    spec = JobSpec.from_json(fs.spec_json)
    done = frame_status(fs)
    progress = fs.progress()
    finished = sum(1 for d in done if d >= 1.0)
    click.echo(f"store:   {store}")
    click.echo(f"scene:   {spec.scene}")
    click.echo(f"frames:  {spec.frames[0]}-{spec.frames[1]} ({finished}/{len(done)} finished)")
    click.echo(f"film:    {fs.width}x{fs.height}, {spec.spp} spp, tile {spec.tile}, pass {spec.pass_size}, "
               f"chunk {spec.chunk_passes} passes")
    total = sum(done) / len(done)
    click.echo(f"samples: {100 * total:.1f}% done")
    if progress:
        age = time.time() - progress.get("updated", time.time())
        line = f"last run: {progress.get('state', '?')} ({age:.0f} s ago)"
        if progress.get("rate"):
            line += f", {progress['rate'] / 1e6:.2f} M pixel-samples/s"
        if progress.get("state") == "running" and progress.get("eta_s") is not None:
            line += f", ETA {progress['eta_s']:.0f} s"
        if progress.get("error"):
            line += f"; {progress['error']}"
        click.echo(line)
    for f, d in enumerate(done):
        if 0 < d < 1:
            click.echo(f"  frame {spec.frames[0] + f}: {100 * d:.0f}%")


@cli.command()
@click.argument("store")
@click.option("--format", "fmt", type=click.Choice(["png", "exr", "npy"]), default="png", show_default=True)
@click.option("--frames", default=None, help="FIRST-LAST (default: all).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder for frame_NNNN.<format>.")
@click.option("--partial", is_flag=True, help="Also export frames that are not finished.")
def export(store, fmt, frames, out, partial):
    """Write STORE's frames as PNG (sRGB), EXR or npy (linear float32 (H, W, 3))."""
    from farm.export import export_frames
    from farm.spec import parse_frames
    from farm.store import FrameStore
    paths = export_frames(FrameStore.open(store, mode="r"), parse_frames(frames) if frames else None, fmt, out,
                          partial=partial)
    click.echo(f"wrote {len(paths)} frame(s) to {out}", err=True)


def _submission_id(spec):
    return "farm-" + hashlib.sha256(os.path.abspath(spec.store).encode()).hexdigest()[:16]


@cli.command()
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--address", required=True, help="Ray dashboard address of the cluster, e.g. http://head:8265.")
@click.option("--frames", default=None)
@click.option("--spp", type=int, default=None)
@click.option("--res", default=None)
@click.option("--set", "sets", multiple=True)
@click.option("--seed", type=int, default=None)
@click.option("--tile", type=int, default=None)
@click.option("--out", default=None, help="The job's store: a path every node sees, or an object-store URL.")
def submit(source, address, frames, spp, res, sets, seed, tile, out):
    """Submit SOURCE to a Ray cluster through the Jobs API; prints the job id and returns."""
    import shlex

    from ray.job_submission import JobSubmissionClient
    spec = _spec_from_args(source, frames, spp, res, sets, seed, tile, None, out)
    args = ["farm", "render", source, "--address", "auto", "--no-progress"]
    for flag, value in (("--frames", frames), ("--spp", spp), ("--res", res), ("--seed", seed), ("--tile", tile),
                        ("--out", out)):
        if value is not None:
            args += [flag, str(value)]
    for s in sets:
        args += ["--set", s]
    sid = _submission_id(spec)
    client = JobSubmissionClient(address)
    try:
        client.submit_job(entrypoint=" ".join(shlex.quote(a) for a in args), submission_id=sid)
    except RuntimeError as e:
        if "already exists" not in str(e):
            raise FarmError(f"submit failed: {str(e).splitlines()[0]}") from None
    click.echo(sid)


@cli.command()
@click.argument("store")
@click.option("--address", default=None, help="Also stop the job submitted for STORE on this cluster.")
def cancel(store, address):
    """Ask the driver rendering STORE to stop (it stops within seconds; the store stays resumable)."""
    from farm.store import FrameStore
    fs = FrameStore.open(store)
    fs.request_cancel()
    if address:
        from ray.job_submission import JobSubmissionClient

        from farm.spec import JobSpec
        JobSubmissionClient(address).stop_job(_submission_id(JobSpec.from_json(fs.spec_json)))
    click.echo(f"cancel requested for {store}", err=True)


def main(argv=None):
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("interrupted; `farm resume STORE` goes on from here", err=True)
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
