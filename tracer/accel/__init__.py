"""Intersection engines that live outside XLA: Embree called from the jitted program as a custom
call (``embree``), Warp through a host callback (``warp``, ``host``)."""
