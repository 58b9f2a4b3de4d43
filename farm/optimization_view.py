"""What ``farm status`` and ``farm export`` show of an optimization's store (``farm optimize``).

Status: the iteration, the loss and its history (``--json``: ``iteration``, ``iterations``,
``loss``, ``losses``, ``parameters``), the last run's state from its progress notes, the driver.
Export: ``parameters.json`` (``{key: [values]}``, the last checkpoint's), the scene file with those
values written in (``tracer.io.parameter_xml``), and every frame's render of the last iteration.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import TYPE_CHECKING, Any

import click

from farm.export import _make_folder, _refuse_a_store, _write
from farm.lease import holder
from farm.names import frame_names, job_name
from farm.store import progress_number

if TYPE_CHECKING:
    from farm.checkpoint import Optimization
    from farm.spec import JobSpec
    from farm.store import FrameStore

__all__ = ["summary", "show", "export"]


def _state(notes: dict[str, Any] | None, done: bool, fs: FrameStore) -> str:
    if done:
        return "done"
    if not notes:
        return "new"
    state = str(notes.get("state", "unknown"))
    if state == "running":
        driver = holder(fs.group)
        if driver is None or (driver is not False and (driver.released or driver.gone()
                                                        or not driver.live(time.time()))):
            return "stopped"  # its driver is gone: `farm resume` goes on
    return state


def summary(name: str, spec: JobSpec, fs: FrameStore, opt: Optimization) -> dict[str, Any]:
    """The JSON object of ``farm status --json`` for an optimization."""
    done, losses = opt.done(), opt.losses()
    notes = fs.progress()
    at = opt.latest()
    params = {k: v.ravel().tolist() for k, v in opt.unravel(at.params).items()}
    rate = progress_number(notes or {}, "rate")
    error = str((notes or {}).get("error") or "")
    state = _state(notes, done >= opt.spec.iterations, fs)
    if error.startswith(state):  # "cancelled; `farm resume ...`": the state is said once
        error = error[len(state):].lstrip("; ")
    return {"store": name, "kind": "optimize", "state": state,
            "phase": (notes or {}).get("phase") if isinstance((notes or {}).get("phase"), str) else None,
            "iteration": done, "iterations": opt.spec.iterations,
            "loss": losses[-1] if losses else None, "losses": losses,
            "iterations_per_s": rate, "parameters": params, "optimizer": opt.spec.optimizer,
            "learning_rate": opt.spec.learning_rate, "loss_kind": opt.spec.loss,
            "frames": [spec.frames[0], spec.frames[1]], "spp": spec.spp, "error": error or None}


def show(name: str, spec: JobSpec, fs: FrameStore, opt: Optimization, as_json: bool) -> dict[str, Any]:
    s = summary(name, spec, fs, opt)
    if as_json:
        click.echo(json.dumps(s, allow_nan=False))
        return s
    loss = "-" if s["loss"] is None else f"{s['loss']:.6g}"
    lines = [f"store:      {name}", f"scene:      {spec.scene}",
             f"optimize:   {len(s['parameters'])} parameter(s), {opt.spec.optimizer} at {opt.spec.learning_rate:g}, "
             f"{opt.spec.loss} loss, {spec.n_frames} frame(s) at {fs.width}x{fs.height}, {spec.spp} spp",
             f"iteration:  {s['iteration']}/{s['iterations']}, loss {loss}",
             f"state:      {s['state']}" + (f", {s['phase']}" if s["phase"] and s["state"] == "running" else "")
             + (f", {s['iterations_per_s']:.3g} iterations/s" if s["iterations_per_s"] else "")
             + (f"; {s['error']}" if s["error"] else "")]
    if s["losses"]:
        lines.append("losses:     " + " ".join(f"{v:.4g}" for v in _spread(s["losses"], 10)))
    for key, values in s["parameters"].items():
        shown = ", ".join(f"{v:.5g}" for v in values[:6]) + (", ..." if len(values) > 6 else "")
        lines.append(f"  {key}: [{shown}]")
    driver = holder(fs.group)
    lines.append("driver:     " + ("none yet" if driver is None else "unknown (its lease does not read)"
                                   if driver is False else driver.describe(time.time())))
    click.echo("\n".join(lines))
    return s


def _spread(values: list[float], n: int) -> list[float]:
    """``n`` of ``values`` evenly spread, the first and the last among them."""
    if len(values) <= n:
        return values
    return [values[round(i * (len(values) - 1) / (n - 1))] for i in range(n)]


def export(spec: JobSpec, fs: FrameStore, opt: Optimization, fmt: str, out: str, name: str) -> list[str]:
    """Write the optimization's parameters, scene and renders into ``out``; returns the paths written."""
    from tracer.io.parameter_xml import write_parameters
    _refuse_a_store(out)
    at = opt.latest()
    params = {k: v.ravel().tolist() for k, v in opt.unravel(at.params).items()}
    if not all(math.isfinite(v) for values in params.values() for v in values):
        raise click.ClickException("the optimization's parameters are not finite")
    _make_folder(out)
    written = [os.path.join(out, "parameters.json")]
    with open(written[0], "w") as file:
        json.dump(params, file, indent=1)
    scene_out = os.path.join(out, os.path.basename(spec.scene))
    left_out = write_parameters(spec.scene, params, scene_out)
    written.append(scene_out)
    if left_out:
        click.echo(f"not written into {scene_out} (in parameters.json only): {', '.join(left_out)}", err=True)
    names = frame_names(name, job_name(fs.url), range(spec.frames[0], spec.frames[1] + 1), fmt)
    for f, frame in enumerate(range(spec.frames[0], spec.frames[1] + 1)):
        image = opt.render(f)
        if image is None:
            break
        path = os.path.join(out, names[frame])
        _write(path, {"R": image[..., 0], "G": image[..., 1], "B": image[..., 2]} if fmt == "exr" else image, fmt)
        written.append(path)
    return written
