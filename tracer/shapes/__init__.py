"""Shapes and ray intersection: the scene's geometry table (``geometry``), the traced intersection
of triangles and analytic shapes (``intersect``, ``curves``, ``surface_uv``), the BVH built on the
host (``bvh_build``) and traversed in JAX (``bvh``), and instances (``instancing``, ``instance_bvh``).
The host engines that answer rays for CPU jobs are ``tracer.accel``."""
