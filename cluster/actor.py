"""A Ray actor that renders whole frames with the tracer on its host's devices.

JAX is imported inside the actor process only: the driver never touches an accelerator.
"""
import ray

__all__ = ["FrameRenderer"]


@ray.remote
class FrameRenderer:
    """Loads a scene per frame (with that frame's parameters) and renders it."""

    def __init__(self, scene_path, resolution=None):
        import tracer  # noqa: F401  (imports JAX in this worker process)

        self.scene_path = scene_path
        self.resolution = resolution

    def render(self, frame, params, spp, seed):
        """Linear radiance (H, W, 3) float32 of one frame."""
        import tracer

        scene = tracer.load_scene(self.scene_path, resolution=self.resolution, **params)
        return tracer.render(scene, spp=spp, seed=seed, frame=frame)
