"""Intersection engines that live outside XLA (host libraries called from the jitted program)."""
