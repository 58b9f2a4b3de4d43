"""Frozen dataclasses registered as JAX pytrees.

Fields declared with ``static()`` are compile-time metadata (counts, flags, kinds present):
changing them retraces, changing any other (array) field never does.
"""
import dataclasses

import jax

__all__ = ["pytree_dataclass", "static"]


def static(default=dataclasses.MISSING):
    """A field that is part of the tree structure (hashed into the compiled program)."""
    return dataclasses.field(default=default, metadata={"static": True})


def pytree_dataclass(cls):
    """Make ``cls`` a frozen dataclass and a pytree whose leaves are its non-static fields."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    data = [f.name for f in fields if not f.metadata.get("static", False)]
    meta = [f.name for f in fields if f.metadata.get("static", False)]
    return jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
