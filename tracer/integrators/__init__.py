"""Integrators, as Mitsuba 3's: the path tracer (``path``: Mitsuba's ``path``, and ``volpath`` and
the others it stands for without media), ``direct``, and the AOVs of Mitsuba's ``aov`` and
``moment`` integrators (``aov``). ``tracer.rendering`` calls them inside the work unit."""
