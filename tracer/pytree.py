"""Frozen dataclasses registered as JAX pytrees.

Fields declared with ``static()`` are compile-time metadata (counts, flags, kinds present):
changing them retraces, changing any other (array) field never does. A field declared with
``owned()`` is neither: a host resource that the object owns (an intersection engine's scene).
It is not part of the tree, so copies that tree operations make (``jax.tree.map``,
``device_put``, a jitted function's outputs) hold None there: they refer to the resource
through the object's arrays and are valid while its owner keeps it open.
"""
import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar, cast, dataclass_transform

import jax

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["pytree_dataclass", "static", "owned"]

T = TypeVar("T")


def static(default: Any = dataclasses.MISSING) -> Any:
    """A field that is part of the tree structure (hashed into the compiled program)."""
    return dataclasses.field(default=default, metadata={"static": True})


def owned() -> Any:
    """A host resource the object owns; not part of the pytree (copies get None)."""
    return dataclasses.field(default=None, metadata={"owned": True}, compare=False, repr=False)


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, static, owned))
def pytree_dataclass(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass and a pytree whose leaves are its non-static fields."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cast("type[DataclassInstance]", cls))
    kind = lambda f: "owned" if f.metadata.get("owned") else "static" if f.metadata.get("static") else "data"
    data = [f.name for f in fields if kind(f) == "data"]
    meta = [f.name for f in fields if kind(f) == "static"]
    if len(data) + len(meta) == len(fields):
        return jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
    keys = [jax.tree_util.GetAttrKey(name) for name in data]

    def flatten_with_keys(obj):
        return [(k, getattr(obj, k.name)) for k in keys], tuple(getattr(obj, name) for name in meta)

    def unflatten(aux, children):
        return cls(**dict(zip(data, children)), **dict(zip(meta, aux)))

    flatten = lambda obj: (tuple(getattr(obj, name) for name in data), tuple(getattr(obj, name) for name in meta))
    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    return cls
