"""The public API of ``tracer``, ``cluster`` and ``farm`` is annotated, and the annotations check.

Public: what a module's ``__all__`` names (every name not starting with ``_`` where it has none),
and the public methods of its public classes. mypy checks the three packages
(``[tool.mypy]`` in pyproject.toml).
"""
import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("tracer", "cluster", "farm")


def _exported(tree):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def _public_functions(path):
    """(name, FunctionDef) of the module's public functions and its public classes' methods."""
    tree = ast.parse(path.read_text(), str(path))
    names = _exported(tree)
    public = (lambda name: name in names) if names is not None else (lambda name: not name.startswith("_"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and public(node.name):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and public(node.name):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        not member.name.startswith("_") or member.name == "__init__"):
                    yield f"{node.name}.{member.name}", member


def _unannotated(function):
    """What ``function`` leaves without a type: its parameters (but self and cls) and its return."""
    args = function.args
    params = [a for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]
    missing = [a.arg for a in params if a.annotation is None]
    if function.returns is None and function.name != "__init__":
        missing.append("return")
    return missing


def test_every_public_function_is_annotated():
    missing = [f"{path.relative_to(ROOT)}:{fn.lineno} {name} ({', '.join(gaps)})"
               for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
               for name, fn in _public_functions(path) if (gaps := _unannotated(fn))]
    assert missing == [], f"{len(missing)} public functions without annotations:\n" + "\n".join(missing)


def test_the_annotations_check():
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir",
                             str(ROOT / ".mypy_cache")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
