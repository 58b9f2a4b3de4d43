"""The ``farm`` command line: parses, calls, and maps errors to one line and an exit code.

Exit codes: 0 done, 1 user error (FarmError), 2 invalid job spec or command line, 3 store
problem, 4 the job failed, 5 cancelled, 70 a bug (an unexpected exception, reported in one line
with where it was raised), 130 interrupted. No command prints a traceback.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

import click

from farm import signals
from farm.errors import FarmError, Interrupted, SpecError, first_line
from farm.names import is_utf8
from farm.options import PRIORITY, command_line, group_options, job_options, job_spec, shape_options, with_groups

if TYPE_CHECKING:
    from farm.monitor import JobSummary
    from farm.optimize_spec import OptimizeSpec
    from farm.spec import JobSpec
    from farm.store import FrameStore

__all__ = ["main"]


def _render(spec, address, no_progress, redo=None, replace=False):
    """Render ``spec`` as the store's one driver: its lease is held (and renewed) from before the
    first write until the end, whatever ends it."""
    from farm import groups
    from farm.scene_check import Preflight
    local = address is None
    if local:
        groups.check_local(spec.groups)  # a cluster's groups are checked against it once Ray is up
    # The preflight child first: its start-up (JAX's import, the scene's check) runs beside the
    # driver's own imports (Zarr's, 0.45 s, and Ray's) and checks; a run that stops before it is
    # needed stops it.
    with Preflight(spec, groups.preflight_env(spec, local)) as preflight:
        _render_checked(spec, address, no_progress, redo, replace, preflight)


def _render_checked(spec, address, no_progress, redo, replace, preflight):
    """``_render`` once its preflight child is on its way."""
    from farm import faults, job, registry, session
    from farm.results import shared_root
    from farm.spec import parse_frame_list
    from farm.status import spp_text
    job.check_params(spec)
    _refuse_optimization(spec.store)
    redo_frames = parse_frame_list(redo) if redo else ()
    done = job.finished(spec, redo_frames, replace)
    if done is not None:  # said before Ray starts, and the last run's notes (its rate) are kept
        spec, fs = done
        click.echo(f"{fs.url}: done already ({spec.n_frames} frame(s) x {spp_text(spec, fs)}); nothing to render "
                   f"(`farm export {fs.url} --out DIR`; a higher --spp or a later last frame renders more)", err=True)
        return
    local = address is None
    faults.check_environment(local)  # a folder Ray or JAX would fail on, named now rather than after a minute
    # Ray starts while the scene is checked and, for a local job, its work unit compiled.
    with session.starting_ray(address, spec.groups) as ray_start:
        try:
            preflight.checked()
            planned, store = job.prepare(spec, redo=redo_frames, replace=replace,
                                         lease=True, local=local)
        except FarmError as e:  # said at once; leaving the block then waits out Ray's start and stops it
            _fail(str(e), e.exit_code)
        except OSError as e:  # a full or read-only store (else a bug, said as one)
            fault = faults.named(e, spec.store)
            if fault is None:
                raise
            _fail(str(fault), fault.exit_code)
        def say(line: str) -> None:  # on stderr, and in the store's log (`farm logs`)
            click.echo(line, err=True)
            store.log(line)
        for line in (store.lease.took_over if store.lease is not None else None, _min_spp_rounded(planned, store)):
            if line:
                say(line)
        same_members = job.preflight_env(planned, local) == preflight.env  # (a store's own level may differ)
        # It renders the first tasks too, where it can write them as a member would (a local store).
        preflight.compile(job.first_task(planned, store) if same_members else None,
                          ahead=shared_root(store) is not None)
        spec = planned
        signals.on_stop(lambda: _stopped_late(store))
        registry.record(store.url)
        try:
            say(f"{spec.n_frames} frame(s) x {spp_text(spec, store)} at {store.width}x{store.height} -> {store.url}")
            session.run(spec, store, address=address, show_progress=not no_progress, log=say,
                        ray_start=ray_start, ready=preflight.wait, say=lambda m: click.echo(m, err=True),
                        compiler=preflight.compiling, preflight=preflight)
            store.log("done")
        except KeyboardInterrupt:
            raise Interrupted(f"{signals.how()}; `farm resume {store.url}` goes on from here",
                              exit_code=signals.exit_code()) from None
        finally:
            ray_start.close()  # every worker gone before another driver may take the store
            store.lease.release()
    click.echo(f"done: {store.url} (farm export {store.url} --out DIR)", err=True)


def _refuse_optimization(url: str) -> None:
    """A render into an optimization's store is refused (its frames are views, not a render)."""
    from farm.checkpoint import is_optimization
    from farm.store import FrameStore, StoreError
    if FrameStore.exists(url) and is_optimization(FrameStore.open(url, "r")):
        raise StoreError(f"{url}: holds an optimization (`farm optimize`): `farm resume {url}` goes on with it, "
                         f"--replace renders another job there")


def _optimize(spec: JobSpec, opt: OptimizeSpec, address: str | None, no_progress: bool, replace: bool = False) -> None:
    """Run the optimization ``opt`` of ``spec`` as the store's one driver (``farm.descent``): the
    parameters and targets checked before Ray starts, the lease held from before the first write."""
    import dataclasses

    from farm import descent, faults, job, registry, session
    from farm.targets import load_targets
    job.check_params(spec)
    if spec.groups.shape_only() != spec.groups:
        raise SpecError("groups.task_timeout and groups.host_failures are not applied by farm optimize: a group "
                        "that loses a member is rebuilt and its tasks sent elsewhere, no task is timed out")
    local = address is None
    if local:
        job.check_local(spec.groups)
    faults.check_environment(local)
    keys, initial, film = descent.check_parameters(spec, opt)  # by name, in a child process, before Ray
    targets = load_targets(opt, spec, film)
    spec = dataclasses.replace(spec, tile=spec.tile or descent.GRADIENT_TILE)
    if not replace and descent.finished(spec, opt, keys, targets):  # said before Ray starts
        click.echo(f"{spec.store}: done already ({opt.iterations} iterations); nothing to run "
                   f"(`farm export {spec.store} --out DIR`)", err=True)
        return
    with session.starting_ray(address, spec.groups) as ray_start:
        try:
            planned, store, optimization = descent.prepare(spec, opt, keys, initial, targets, replace, local)
        except FarmError as e:
            _fail(str(e), e.exit_code)
        except OSError as e:
            fault = faults.named(e, spec.store)
            if fault is None:
                raise
            _fail(str(fault), fault.exit_code)
        assert store.lease is not None
        if optimization.done() >= opt.iterations:
            store.lease.release()
            click.echo(f"{store.url}: done already ({opt.iterations} iterations); nothing to run "
                       f"(`farm export {store.url} --out DIR`)", err=True)
            return

        def say(line: str) -> None:
            click.echo(line, err=True)
            store.log(line)
        if store.lease.took_over:
            say(store.lease.took_over)
        signals.on_stop(lambda: _stopped_late(store))
        registry.record(store.url)
        try:
            say(f"optimizing {len(keys)} parameter(s) on {planned.n_frames} frame(s) x {planned.spp} spp at "
                f"{store.width}x{store.height}: iterations {optimization.done() + 1}-{opt.iterations} -> {store.url}")
            ray_start.wait()
            signals.take()  # back from Ray's core worker, which took SIGTERM when it started
            shapes = job.group_shapes(planned, local)
            if not local:
                import ray
                job.check_fits(shapes, [node["Resources"] for node in ray.nodes() if node["Alive"]])
            descent.run(planned, store, optimization, targets, shapes, log=say)
            store.log("done")
        except KeyboardInterrupt:
            raise Interrupted(f"{signals.how()}; `farm resume {store.url}` goes on from here",
                              exit_code=signals.exit_code()) from None
        finally:
            ray_start.close()
            store.lease.release()
    click.echo(f"done: {store.url} (farm export {store.url} --out DIR)", err=True)


def _min_spp_rounded(spec: JobSpec, store: FrameStore) -> str | None:
    """The line saying to what a noise job's ``min_spp`` is rounded up, and why, where it is."""
    from farm.adaptive import Shot
    shot = Shot(spec, store)
    if spec.min_spp is None or not shot.active or shot.least == spec.min_spp:
        return None
    return (f"--min-spp {spec.min_spp} is rounded up to {shot.least}: a noise target renders chunks of {shot.chunk} "
            f"samples, and a tile's noise estimate needs at least two")


def _stopped_late(store: FrameStore) -> None:
    """A stop whose cleanup outlived its grace (Ray's processes stopped too): the lease goes,
    the one line is said, and the process exits (``farm.signals``)."""
    if store.lease is not None:
        store.lease.release()
    click.echo(f"error: {signals.how()}; `farm resume {store.url}` goes on from here", err=True)


def _redo_option(f):
    return click.option("--redo", default=None, metavar="FRAMES",
                        help="Frames to discard and render afresh, e.g. 3,7-9.")(f)


@click.group()
@click.version_option(package_name="jaxfarm", prog_name="farm")
def cli():
    """Render Mitsuba 3 scenes with the JAX path tracer, locally or on a Ray cluster."""


def _driver_options(f):
    """Where a job's driver renders it, and how it shows that."""
    f = group_options(f)
    f = click.option("--address", default=None,
                     help="Ray cluster to join (e.g. auto or ray://head:10001); default: an embedded local Ray.")(f)
    return click.option("--no-progress", is_flag=True, help="No progress bar.")(f)


@cli.command()
@click.argument("source", type=click.Path(dir_okay=False))
@job_options
@_redo_option
@click.option("--replace", is_flag=True, help="Replace the content of a frame store of another job with this job.")
@_driver_options
def render(source, redo, replace, address, no_progress, **options):
    """Render SOURCE (a scene .xml, or a job .toml) into a Zarr store.

    Running it again on the store of the same job renders only what is missing; a higher --spp
    adds samples to a finished job, and a later last frame adds frames.
    """
    spec = with_groups(job_spec(source, options), options)
    _render(spec, address, no_progress, redo, replace)


@cli.command()
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--replace", is_flag=True, help="Replace the content of a store of another job with this job.")
@shape_options
@click.option("--address", default=None,
              help="Ray cluster to join (e.g. auto or ray://head:10001); default: an embedded local Ray.")
@click.option("--no-progress", is_flag=True, help="Lines, no bar (always so: it has no progress bar yet; a line an iteration, a second apart at least).")
def optimize(source, replace, address, no_progress, **options):
    """Fit scene parameters to target images: SOURCE is a job .toml with an [optimize] table.

    Every iteration renders every frame with gradients over the worker groups, sums them in a
    fixed order and takes one optimizer step, checkpointed in the store: `farm resume STORE` goes
    on to the same bits, `farm status STORE` shows the loss, `farm export STORE --out DIR` writes
    the parameters, the scene with them and the renders."""
    from farm.optimize_spec import read_job
    spec, opt = read_job(source)
    _optimize(with_groups(spec, options), opt, address, no_progress, replace)


@cli.command()
@click.argument("store")
@_redo_option
@click.option("--wait", "wait_lease", is_flag=True,
              help="If another driver holds STORE, wait until its lease is released or lapses, then take over.")
@_driver_options
def resume(store, redo, wait_lease, address, no_progress, **options):
    """Render what the store at STORE still lacks (there, wherever it was made).

    A driver that died on this machine is taken over at once; one elsewhere, once its lease
    lapses (--wait waits for that)."""
    from farm.checkpoint import open_optimization
    from farm.job import open_store
    from farm.lease import wait_free
    spec, fs = open_store(store)
    optimization = open_optimization(fs)
    if optimization is not None and redo:
        raise SpecError(f"{store}: --redo is for renders; an optimization goes on from its last checkpoint")
    if wait_lease:
        wait_free(fs.group, store, say=lambda m: click.echo(m, err=True))
    if optimization is not None:
        _optimize(with_groups(spec, options), optimization.spec, address, no_progress)
        return
    _render(with_groups(spec, options), address, no_progress, redo)


@cli.command()
@click.argument("store")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object: the job (state, phase, frames, samples, rate, eta_s, error) with per_frame.")
@click.option("--watch", is_flag=True,
              help="Show it again every 2 s until the job is no longer running (Ctrl-C stops); with --json, "
                   "one object a line.")
@click.option("--verify", is_flag=True,
              help="Read every tile's data and count only what passes its CRC, as resume does, however large the "
                   "store (without it, a store of over 2048 tiles with samples shows what the driver recorded).")
def status(store, as_json, watch, verify):
    """Show STORE's job: frames, samples done, the last run's state and phase, rate and ETA (from
    its steady state), and the driver that holds it."""
    from farm.checkpoint import open_optimization
    from farm.job import open_store
    from farm.status import show
    spec, fs = open_store(store)
    optimization = open_optimization(fs)
    if optimization is not None:  # (an optimization's status is small: --watch and --verify add nothing yet)
        from farm.optimization_view import show as show_optimization
        show_optimization(store, spec, fs, optimization, as_json)
        return
    show(store, as_json=as_json, watch=watch, verify=verify)


@cli.command()
@click.argument("store")
@click.option("--format", "fmt", type=click.Choice(["png", "exr", "npy"]), default="png", show_default=True,
              help="png: tone-mapped 8-bit sRGB; exr: linear float32 RGB with AOV and variance layers; "
                   "npy: linear float32 RGB and AOVs.")
@click.option("--frames", default=None, help="FIRST-LAST (default: all).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Folder for the frames.")
@click.option("--partial", is_flag=True, help="Also export frames that are not finished (the tasks that read back).")
@click.option("--denoise", is_flag=True,
              help="Denoise the RGB with Open Image Denoise, fed with the scene's albedo and normal AOVs.")
@click.option("--name", "name", default="frame_{frame:04d}.{ext}", show_default=True,
              help="File name template: {job} (the store's name), {frame} (e.g. {frame:04d}), {ext}.")
def export(store, fmt, frames, out, partial, denoise, name):
    """Write STORE's frames as PNG (sRGB), EXR (layers) or npy (linear float32 (H, W, 3 + AOVs))."""
    from farm.export import export_frames, filter_warning
    from farm.job import open_store
    from farm.spec import parse_frames
    from farm.checkpoint import open_optimization
    spec, fs = open_store(store)
    optimization = open_optimization(fs)
    if optimization is not None:
        from farm.optimization_view import export as export_optimization
        given = [flag for flag, value in (("--frames", frames), ("--partial", partial), ("--denoise", denoise)) if value]
        if given:
            raise SpecError(f"{given[0]} is for a render's store; {store} holds an optimization (its export is "
                            f"every frame's render of its last iteration)")
        paths = export_optimization(spec, fs, optimization, fmt, out, name)
        click.echo(f"wrote parameters.json, the scene and {len(paths) - 2} render(s) of iteration "
                   f"{optimization.done()} to {out}", err=True)
        return
    written = export_frames(spec, fs, parse_frames(frames) if frames else None, fmt, out, partial=partial,
                            denoised=denoise, name=name)
    warning = filter_warning(fs) if denoise else None
    if warning:
        click.echo(warning, err=True)
    click.echo(f"wrote {sum(1 for _, path, _ in written if path)} frame(s) to {out}", err=True)
    unfinished = [f"{frame} ({100 * done:.0f}%)" for frame, path, done in written if path and done < 1.0]
    skipped = [str(frame) for frame, path, _ in written if path is None]
    if unfinished:
        click.echo(f"partial (tiles without samples are a grey checker in PNGs, zeros in EXR/npy): "
                   f"frame {', '.join(unfinished)}", err=True)
    if skipped:
        click.echo(f"not written, no samples yet: frame {', '.join(skipped)}", err=True)


@cli.command()
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--address", required=True, help="Ray dashboard address of the cluster, e.g. http://head:8265.")
@job_options
@PRIORITY.decorate
def submit(source, address, priority, **options):
    """Submit SOURCE to a Ray cluster through the Jobs API; prints the job id and returns.

    Paths are made absolute (the cluster's nodes must see them). A store whose last job ended is
    submitted again (to refine or resume it); one whose job still runs is left to it."""
    import shlex

    from farm import jobs, registry
    source = os.path.abspath(source)
    if not os.path.isfile(source):
        raise FarmError(f"{'job' if source.endswith('.toml') else 'scene'} file not found: {source}")
    spec = job_spec(source, options)
    if priority is not None:  # (refused here, by the job's own rule, rather than on the cluster)
        dataclasses.replace(spec.groups, priority=priority)
    store = jobs.store_key(spec.store)
    if not os.path.isfile(spec.scene):
        raise FarmError(f"scene file not found: {spec.scene}")
    if "://" not in store and not os.path.isdir(os.path.dirname(store)):
        raise FarmError(f"store folder not found: {os.path.dirname(store)} (for {store})")
    args = ["farm", "render", source, *command_line({**options, "out": store}), "--address", "auto", "--no-progress",
            *(["--priority", str(priority)] if priority is not None else [])]
    client = jobs.client(address)
    sid, running = jobs.submit(client, address, store, " ".join(shlex.quote(a) for a in args))
    if running is not None:
        click.echo(f"{store}: its job {sid} is still {running.value.lower()} on the cluster; nothing submitted "
                   f"(`farm wait {store} --address {address}`)", err=True)
    registry.record(store)
    click.echo(sid)


@cli.command()
@click.argument("store")
@click.option("--address", default=None, help="The cluster STORE's job was submitted to (its dashboard, "
                                               "http://head:8265); default: the local job in the store.")
@click.option("--timeout", type=click.FloatRange(0, None), default=None, help="Give up after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: store, state, exit_code, error.")
def wait(store, address, timeout, as_json):
    """Wait until STORE's job ends; exit 0 done, 4 failed, 5 cancelled, 130/143 interrupted or
    stopped, 124 still running at --timeout."""
    import json

    from farm import follow, jobs
    if address:
        client = jobs.client(address)
        ending = follow.wait(lambda: follow.submitted_ending(client, address, store), timeout)
    else:
        ending = follow.wait(lambda: follow.store_ending(store), timeout)
    state, code = (ending.state, ending.exit_code) if ending else ("running", 124)
    error = ending.error if ending else f"still running after {timeout:g} s"
    if as_json:
        click.echo(json.dumps({"store": store, "state": state, "exit_code": code, "error": error}))
    click.echo(f"{store}: {state}" + (f"; {_one_line(error)}" if error else ""), err=True)
    signals.done()
    sys.exit(code)


@cli.command()
@click.argument("store")
@click.option("--address", default=None, help="Read the log of the job submitted for STORE to this cluster "
                                               "(its dashboard, http://head:8265) through the Jobs API.")
@click.option("--follow", "keep", is_flag=True, help="Keep printing new lines until the job ends.")
def logs(store, address, keep):
    """Print the log of STORE's job, newest last: what its driver said (phases, each group's
    failures and retries, errors), every run of it; a submitted job's output with --address."""
    from farm import follow, jobs
    if address:
        client = jobs.client(address)
        job = jobs.latest(client, address, store)
        if job is None:
            raise FarmError(f"{store}: no job was submitted for it to the cluster at {address}")
        read = lambda: client.get_job_logs(job.submission_id).splitlines()  # noqa: E731
        ended = lambda: follow.submitted_ending(client, address, store) is not None  # noqa: E731
    else:
        from farm.job import open_store
        fs = open_store(store)[1]
        read, ended = fs.logs, lambda: follow.store_ending(store) is not None  # noqa: E731
    shown = 0
    while True:
        last = ended()  # before the read: every line of a run that ended is read after it
        lines = read()
        for line in lines[shown:]:
            click.echo(line)
        shown = max(shown, len(lines))
        if not keep or last:
            return
        time.sleep(follow.POLL_S)


@cli.command()
@click.argument("store")
@click.option("--address", default=None, help="Also stop the job submitted for STORE on this cluster.")
def cancel(store, address):
    """Ask the driver rendering STORE to stop (it stops within seconds; the store stays resumable)."""
    from farm.job import open_store
    from farm.faults import named
    _, fs = open_store(store, mode="r+")
    idle = _no_driver(fs)
    if idle is None:
        try:
            fs.request_cancel()
        except OSError as e:  # a full or read-only store, named even where the error names no file
            raise named(e, store) or e from None
    if address:
        from farm import jobs
        client = jobs.client(address)
        submitted = jobs.latest(client, address, store)
        try:
            if submitted is not None:
                client.stop_job(submitted.submission_id)
        except RuntimeError as e:
            raise FarmError(f"cancel requested in {store}, but stopping its Ray job failed: {first_line(e)}") from None
    if idle is None:
        click.echo(f"cancel requested for {store}", err=True)
    else:
        click.echo(f"nothing to cancel: no driver is rendering {store} ({idle}); the store is left as it is "
                   f"(`farm resume {store}` goes on)", err=True)


@cli.command(name="queue")
@click.option("--address", default="auto", show_default=True,
              help="The cluster's Ray address: auto (on one of its nodes), HOST:6379 or ray://HOST:10001 (not its "
                   "dashboard's).")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON array: each job's store, priority, paused, wants, held, share, queued_at (Unix time).")
@click.option("--watch", is_flag=True,
              help="List it again every 2 s, on one connection to the cluster (Ctrl-C stops); with --json, one "
                   "array a line.")
def queue(address, as_json, watch):
    """List the jobs sharing the cluster, highest priority and first queued first: priority,
    state, the groups each holds of those it wants, its share, its store."""
    from farm.queue import listed, watched
    if not watch:
        _show_queue(address, listed(address) or [], as_json)
        return
    try:
        for rows in watched(address):
            _show_queue(address, rows or [], as_json)
            if not as_json:
                click.echo()
    except KeyboardInterrupt:  # how a watch is stopped: not an error
        pass


def _show_queue(address: str, rows: list[dict], as_json: bool) -> None:
    import json

    from farm.queue import state
    if as_json:
        click.echo(json.dumps(rows))  # (a line each: flushed, so a watcher reads it as it comes)
        return
    if not rows:
        click.echo(f"no farm job is queued on the cluster at {address}", err=True)
    for row in rows:
        click.echo(f"{row['priority']:>6}  {state(row):<9}  {row['held']}/{row['wants']} group(s), share "
                   f"{row['share']}  {row['store']}")


@cli.command()
@click.argument("store")
def pause(store):
    """Hold STORE's job in its cluster's queue with no groups: its driver lets them go at their
    task boundaries and the job keeps its place (a local render, which has no queue, goes on)."""
    _set_paused(store, True)
    click.echo(f"paused: {store} keeps its place in its cluster's queue; its driver lets its groups go at their "
               f"task boundaries (`farm unpause {store}` gives them back)", err=True)


@cli.command()
@click.argument("store")
def unpause(store):
    """Let STORE's paused job have its share of groups again."""
    if not _set_paused(store, False):
        click.echo(f"{store} is not paused", err=True)
        return
    click.echo(f"unpaused: {store} gets its share of groups again", err=True)


def _set_paused(store: str, paused: bool) -> bool:
    """Set or clear STORE's pause; returns whether it was paused before."""
    from farm.faults import named
    from farm.job import open_store
    fs = open_store(store, mode="r+")[1]
    was = fs.paused()
    try:
        fs.set_paused(paused)
    except OSError as e:  # a full or read-only store, named
        raise named(e, store) or e from None
    return was


def _no_driver(fs: FrameStore) -> str | None:
    """Why no driver can be rendering the store ``fs`` (none took it, its last released its
    lease, it is gone, its lease lapsed), or None where one may be."""
    from farm.lease import holder
    driver, now = holder(fs.group), time.time()
    if driver is None:
        return "none has run it"
    if driver is False:
        return None  # its lease does not read: a cancel is the safe answer
    if driver.released:
        return "the last one ended"
    if driver.gone():
        return f"{driver.who()} is gone: it ended without releasing its lease"
    if not driver.live(now):
        return f"{driver.who()} stopped renewing its lease {now - driver.renewed:.0f} s ago"
    return None


@cli.command()
@click.argument("root", type=click.Path(file_okay=False), default=".")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface; the monitor has no login).")
@click.option("--port", type=click.IntRange(0, 65535), default=8600, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--address", default=None,
              help="Also show the queue of this cluster (its Ray address: auto on one of its nodes, HOST:6379 or "
                   "ray://HOST:10001), as `farm queue` lists it; without it no cluster is asked.")
def serve(root, host, port, address):
    """Serve a read-only web monitor of the frame stores under ROOT (default: here) until Ctrl-C."""
    from farm.monitor import find_stores
    from farm.web import serve as run_server
    if not os.path.isdir(root):
        raise FarmError(f"{root}: not a folder")
    if os.path.isfile(os.path.join(root, "zarr.json")):
        raise FarmError(f"{root} is a store itself; serve the folder that holds it")
    click.echo(f"{len(find_stores(root))} store(s) under {root}", err=True)
    try:
        run_server(root, host, port, log=lambda m: click.echo(m, err=True), address=address)
    except KeyboardInterrupt:
        click.echo("stopped", err=True)


@cli.command(name="list")
@click.argument("root", type=click.Path(file_okay=False), default=".")
def list_jobs(root):
    """One line per job: the stores under ROOT (default: here) and those `farm render` and
    `farm submit` made on this machine; state, frames done, spp, store."""
    from farm import monitor, registry
    if not os.path.isdir(root):
        raise FarmError(f"{root}: not a folder")
    jobs, seen = [], set()
    for store in monitor.find_stores(root):
        path = os.path.join(root, store)
        line = _optimization_line(path)
        if line is not None:
            click.echo(line)
            seen.add(os.path.realpath(path))
            continue
        jobs.append((path, monitor.summarize(root, store)))
        seen.add(os.path.realpath(path))
    for url in registry.recorded():
        local = "://" not in url
        if local and (os.path.realpath(url) in seen or not os.path.isdir(url)):
            continue  # listed above, or removed since
        line = _optimization_line(url)
        if line is not None:
            click.echo(line.replace(url, _shown_path(url) if local else url))
            continue
        jobs.append((_shown_path(url) if local else url, monitor.summarize_url(url)))
    for path, j in jobs:
        click.echo(_job_line(path, j))


def _optimization_line(path: str) -> str | None:
    """``farm list``'s line of an optimization's store at ``path`` (iterations done), else None."""
    from farm.checkpoint import open_optimization
    from farm.job import open_store
    from farm.optimization_view import summary
    try:
        spec, fs = open_store(path)
        optimization = open_optimization(fs)
        if optimization is None:
            return None
        s = summary(path, spec, fs, optimization)
    except Exception:  # not a store that reads: the render jobs' listing says so
        return None
    return f"{s['state']:<11} {f'{s['iteration']}/{s['iterations']}':>11} {'iters':>9}  {path}"


def _shown_path(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _job_line(path: str, j: JobSummary) -> str:
    if j.state == "damaged":
        return f"{'damaged':<11} {'-':>11} {'-':>9}  {path}  ({_one_line(j.error or '')})"
    return f"{j.state:<11} {f'{j.frames_done}/{j.frames}':>11} {f'{j.spp} spp':>9}  {path}"


def _one_line(text: str) -> str:
    """``text`` with its control characters escaped (a message is one line whatever it quotes)."""
    return re.sub(r"[\x00-\x08\x0a-\x1f\x7f]", lambda m: repr(m.group())[1:-1], text)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {_one_line(message)}", err=True)
    signals.done()
    sys.exit(code)


def _fail_os(error: OSError) -> NoReturn:
    """Fail on ``error``: exit 3 or 1 naming its path for an environment fault (``farm.faults``), else as a bug."""
    from farm.faults import named
    fault = named(error)
    if fault is not None:
        _fail(str(fault), fault.exit_code)
    _fail_bug(error)


def _fail_bug(error: BaseException) -> NoReturn:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    _fail(f"unexpected {type(error).__name__}: {first_line(error)} (at {os.path.basename(frame.filename)}:"
          f"{frame.lineno}; please report it)", 70)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``farm`` command line on ``argv`` (default: the process's arguments); exits."""
    args = sys.argv[1:] if argv is None else list(argv)
    signals.take()  # SIGTERM and SIGHUP stop a command as Ctrl-C does
    for arg in args:  # before anything is made: a store's metadata, the registry and the monitor are UTF-8
        if not is_utf8(arg):
            _fail(f"{ascii(arg)[1:-1]} is not valid UTF-8: rename it (the farm writes paths and values "
                  f"into UTF-8 metadata)", 2)
    try:
        with cli.make_context("farm", args) as ctx:
            cli.invoke(ctx)
    except click.exceptions.Exit as e:  # --help
        sys.exit(e.exit_code)
    except click.exceptions.NoArgsIsHelpError as e:  # `farm` alone: the help text
        e.show()
        sys.exit(e.exit_code)
    except click.UsageError as e:
        where = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
        _fail(e.format_message() + where, e.exit_code)
    except click.ClickException as e:
        _fail(e.format_message(), e.exit_code)
    except FarmError as e:
        _fail(str(e), e.exit_code)
    except (KeyboardInterrupt, click.exceptions.Abort):
        _fail(signals.how(), signals.exit_code())
    except BrokenPipeError as e:
        if not _reader_gone():
            _fail_os(e)
        # `farm logs STORE | head`: the reader has what it wanted; end quietly, as Unix tools do.
        # (Python flushes stdout at exit: pointed at /dev/null, that flush cannot fail again.)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a tool that SIGPIPE ended
    except OSError as e:  # the environment's (a full disk, a read-only store), else a bug as below
        _fail_os(e)
    except Exception as e:  # a bug: one line that says where, never a traceback
        _fail_bug(e)
    return 0


def _reader_gone() -> bool:
    """Whether the reader of this process's stdout or stderr has closed its pipe (poll flags the
    write end of such a pipe with POLLERR)."""
    import select
    try:
        poller = select.poll()
        for stream in (sys.stdout, sys.stderr):
            poller.register(stream.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):  # no file descriptor (a test's captured streams)
        return False


if __name__ == "__main__":
    main()
