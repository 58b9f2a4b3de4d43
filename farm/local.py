"""Render frames on an embedded local Ray: one tracer process per worker, frames queued."""
import logging
import os

import ray
from tqdm import tqdm

from farm.errors import FarmError

__all__ = ["render_frames"]


def _scene_error(exc):
    """The tracer's SceneError inside a Ray error, as one line; None for other failures."""
    cause = getattr(exc, "cause", None)
    if cause is not None and type(cause).__name__ == "SceneError":
        return str(cause)
    return None


def render_frames(scene, frames, spp, resolution, curves, seed, out, workers):
    from cluster.actor import FrameRenderer
    from tracer.io.images import write_exr, write_png

    os.makedirs(out, exist_ok=True)
    first, last = frames
    todo = list(range(first, last + 1))
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=max(os.cpu_count() or 1, workers), include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR, ignore_reinit_error=True)
    try:
        actors = [FrameRenderer.remote(os.path.abspath(scene), resolution) for _ in range(workers)]
        pending = {}
        queue = list(todo)

        def submit(actor):
            """Give the actor the next frame in the queue, if any."""
            if queue:
                frame = queue.pop(0)
                params = {c.name: c.at(frame) for c in curves}
                pending[actor.render.remote(frame, params, spp, seed)] = (actor, frame)

        with tqdm(total=len(todo), unit="frame", desc="rendering") as bar:
            for actor in actors:
                submit(actor)
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                actor, frame = pending.pop(done[0])
                try:
                    image = ray.get(done[0])
                except ray.exceptions.RayTaskError as e:
                    message = _scene_error(e)
                    if message is not None:
                        raise FarmError(message) from None
                    raise
                base = os.path.join(out, f"frame_{frame:04d}")
                write_exr(base + ".exr", image)
                write_png(base + ".png", image)
                bar.update(1)
                submit(actor)
    finally:
        ray.shutdown()
