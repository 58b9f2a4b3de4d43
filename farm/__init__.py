"""The render farm: job specs, scheduling on Ray, and the ``farm`` command line.

Importing ``farm`` never imports JAX: the driver must not hold an accelerator.
"""
