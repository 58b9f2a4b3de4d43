"""An inverse-rendering job's parameters checked against its scene, in a child process of the
driver (``python -m cluster.parameter_check``; the driver never imports JAX).

Reads one JSON object on stdin: ``{"scene": {"path", "params", "resolution", "accel"}, "keys":
[...]}`` (the first frame's scene, the job's keys). Answers one JSON object on stdout: ``{"film":
[W, H], "keys": [{"key", "shape", "values", "range"}, ...]}`` with each key's value as loaded and
the range an optimizer clamps it to (``tracer.scene_parameters.valid_range``); or exits 1 with the
scene's one line on stderr (a scene that does not load), or 2 with the parameter's (a key the
scene lacks or cannot differentiate: ``tracer.scene_parameters.ParameterError``).
"""
import json
import sys

__all__ = ["main"]


def main() -> int:
    request = json.loads(sys.stdin.readline())
    import jax.numpy as jnp
    import numpy as np

    import tracer
    from tracer import scene_parameters as P
    from tracer.errors import SceneError

    ref = request["scene"]
    try:
        scene = tracer.load_scene(ref["path"], resolution=tuple(ref["resolution"]) if ref["resolution"] else None,
                                  accel=ref["accel"], **dict(ref["params"]))
    except SceneError as e:
        print(str(e), file=sys.stderr)
        return 1
    film = scene.film
    if (film.crop_x, film.crop_y, film.crop_width, film.crop_height) != (0, 0, film.width, film.height):
        print(f"{ref['path']}: the film has a crop window; farm optimize renders whole films only", file=sys.stderr)
        return 1
    slots = {s.key: s for s in scene.parameter_slots}
    values = P.parameters(scene)
    keys = []
    for key in request["keys"]:
        try:  # the tracer's own refusal, by name: a key it lacks, or one it cannot differentiate
            P.substitute(scene, {key: jnp.zeros(slots[key].shape if key in slots else (1,), jnp.float32)})
        except P.ParameterError as e:
            print(f"optimize.parameters: {e}", file=sys.stderr)
            return 2
        keys.append({"key": key, "shape": list(slots[key].shape), "values": np.asarray(values[key]).ravel().tolist(),
                     "range": list(P.valid_range(scene, key))})
    print(json.dumps({"film": [scene.film.width, scene.film.height], "keys": keys}))
    scene.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
