"""Imports go downhill only: farm -> cluster -> tracer, and inside the tracer the scene reader
(``tracer.io``) -> what it fills (the tables, geometry and settings the traced program reads).
The driver never imports JAX; what the farm takes from the tracer is ``tracer.shared`` (what the
two agree on), ``tracer.errors``, the host-only reader and the host's instruction-set level.
"""
import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("tracer", "cluster", "farm")
READER = "tracer.io"
# What the farm may import from the tracer: a module, or a package and everything under it.
FARM_MAY_IMPORT = ("tracer.shared", "tracer.errors", "tracer.runtime.xla_flags", READER)


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path):
    """The project modules a source file imports, at its top or inside functions."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:  # `from tracer.io import bsdfs` imports tracer.io.bsdfs
                sub = f"{base}.{alias.name}"
                is_module = (ROOT / (sub.replace(".", "/") + ".py")).exists() or (ROOT / sub.replace(".", "/")).is_dir()
                found.add(sub if is_module else base)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def _graph(package):
    return {_module_name(p): _imported(p) for p in sorted((ROOT / package).rglob("*.py"))}


def _within(module, prefix):
    return module == prefix or module.startswith(prefix + ".")


def _loaded_after(statement):
    """The full names of the modules a fresh interpreter holds after running ``statement``."""
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def _tops(modules):
    return {m.split(".")[0] for m in modules}


def test_imports_go_downhill():
    uphill = {"tracer": ("cluster", "farm"), "cluster": ("farm",), "farm": ()}
    wrong = [(module, target) for package, above in uphill.items() for module, targets in _graph(package).items()
             for target in targets if target.split(".")[0] in above]
    assert wrong == []


def test_only_the_reader_imports_the_reader():
    # ``tracer/__init__.py`` names ``load_scene`` for users, loading it only when asked for.
    wrong = [(module, target) for module, targets in _graph("tracer").items()
             if not _within(module, READER) for target in targets if _within(target, READER)]
    assert wrong == []


def test_the_traced_program_loads_no_reader():
    loaded = _loaded_after("import tracer.rendering, tracer.integrators.path, tracer.integrators.direct, "
                           "tracer.integrators.aov, tracer.scene")
    assert "jax" in _tops(loaded)
    assert sorted(m for m in loaded if _within(m, READER)) == []


def test_the_farm_takes_from_the_tracer_only_what_they_share():
    wrong = [(module, target) for module, targets in _graph("farm").items() for target in targets
             if target.split(".")[0] == "tracer" and not any(_within(target, allowed) for allowed in FARM_MAY_IMPORT)]
    assert wrong == []


def test_farm_does_not_import_jax():
    farm_modules = sorted(_module_name(p) for p in (ROOT / "farm").glob("*.py"))
    loaded = _tops(_loaded_after(f"import {', '.join(farm_modules)}, cluster.group, cluster.task, tracer.shared, "
                                 "tracer.errors, tracer.runtime.xla_flags"))
    assert "jax" not in loaded and "jaxlib" not in loaded


def test_tracer_imports_no_ray_and_no_zarr():
    loaded = _tops(_loaded_after("import tracer; tracer.load_scene; tracer.render"))
    assert "jax" in loaded
    assert "ray" not in loaded and "zarr" not in loaded


def test_host_only_tracer_io_does_not_import_jax():
    loaded = _tops(_loaded_after("import tracer.io.images, tracer.io.xml, tracer.io.meshes, tracer.io.scene_info, "
                                 "tracer.io.spectra, tracer.io.films, tracer.io.aovs, tracer.io.validate, "
                                 "tracer.filters, tracer.shared, tracer.errors"))
    assert "jax" not in loaded
