"""Imports go downhill only: farm -> cluster -> tracer. The driver never imports JAX."""
import subprocess
import sys


def _loaded_after(statement):
    code = f"import sys; {statement}; print(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_farm_does_not_import_jax():
    loaded = _loaded_after("import farm, farm.cli, farm.curves, farm.spec, farm.store, farm.planner, farm.job, "
                           "farm.export, farm.session, farm.scheduler, farm.monitor, farm.web, farm.registry, cluster.group, cluster.task, tracer.defaults, "
                           "tracer.reduction")
    assert "jax" not in loaded and "jaxlib" not in loaded


def test_tracer_imports_no_ray_and_no_zarr():
    loaded = _loaded_after("import tracer; tracer.load_scene; tracer.render")
    assert "jax" in loaded
    assert "ray" not in loaded and "zarr" not in loaded


def test_host_only_tracer_io_does_not_import_jax():
    loaded = _loaded_after("import tracer.io.images, tracer.io.xml, tracer.io.meshes, tracer.io.scene_info, "
                           "tracer.io.spectra, tracer.io.films, tracer.filters")
    assert "jax" not in loaded
