"""The one native piece of the package: Intel Embree called from XLA through its FFI
(``tracer/accel/native/embree_ffi.cc``; everything else is declared in pyproject.toml).

It needs a C++17 compiler and XLA's FFI headers, which jaxlib ships (a build requirement). It is
optional: where it cannot be built the install goes on, and the tracer says why 'embree' is
unavailable and uses its pure-JAX BVH.
"""
import importlib.util
import pathlib

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildWithXlaHeaders(build_ext):
    """Adds jaxlib's include directory (``jax.ffi.include_dir()``, found without importing jax)."""

    def build_extensions(self) -> None:
        spec = importlib.util.find_spec("jaxlib")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("building tracer.accel._embree_ffi needs jaxlib (XLA's FFI headers)")
        include = pathlib.Path(next(iter(spec.submodule_search_locations))) / "include"
        for extension in self.extensions:
            extension.extra_compile_args += ["-isystem", str(include)]  # its headers' warnings are not ours
        super().build_extensions()


setup(
    ext_modules=[Extension("tracer.accel._embree_ffi", sources=["tracer/accel/native/embree_ffi.cc"],
                           include_dirs=["tracer/accel/native"], extra_compile_args=["-std=c++17", "-O2"],
                           libraries=["dl"], language="c++", optional=True)],
    cmdclass={"build_ext": BuildWithXlaHeaders},
)
