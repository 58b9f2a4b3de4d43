"""Helpers shared by the tests, imported one way: ``from tests.helpers import chi2`` (the pytest
configuration puts the repository root on ``sys.path``). A test module never imports another test
module; what two of them share lives here.

* ``chi2``: Pearson's chi-square test of a sampling routine against its density, with a power check.
* ``image_metrics``: relative MSE and EXR I/O of the image tests and ``scripts/make_references.py``.
* ``ztest``: Mitsuba's statistical render test (per-pixel z-test in XYZ), ``scripts/mitsuba_gallery.py``'s.
* ``rays``: float64 ray-triangle references, ray and triangle fixtures, hit comparison.
* ``bsdf_cases``, ``emitter_cases``: material and emitter tables, and their independent references.
* ``farm_cases``: the small orbit job, the tracer's own render of it, export and the ``farm`` CLI.
"""
