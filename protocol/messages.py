"""Python classes for every declared struct, generated from the declarations.

One class per struct, covering the fields of all its versions: a field absent from the
version on the wire holds its default. Classes have `__slots__`, keyword construction with
defaults, equality by value and a readable repr. Every class is a module attribute named as
its struct (`HeartbeatRequest`, `OffsetCommitResponseTopic`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .schema import Array, Message, Struct, default_of
from .schemas import APIS, ASSIGNMENT, SUBSCRIPTION

_MISSING = object()
_CLASSES: dict[str, type] = {}


def class_for(struct: Struct) -> type:
    """The class of `struct` (built once, on first use, with those of its nested structs)."""
    cls = _CLASSES.get(struct.name)
    if cls is None:
        cls = _CLASSES[struct.name] = _build(struct)
    return cls


def blank_maker(struct: Struct) -> Callable[[], Any]:
    """A callable making an instance of `struct`'s class with no field set, for decoders,
    which set every field: `type.__call__` bound to the class, past the keyword constructor."""
    return type.__call__.__get__(class_for(struct))


def _build(struct: Struct) -> type:
    """The class, with keyword construction as the `__call__` of a metaclass of its own.

    The class itself has no `__init__`, so that `blank_maker`'s call stays in C: about a
    quarter cheaper than `object.__new__(cls)`, which decoders would pay per element.
    Classes are final: construction always makes an instance of the struct's own class.
    """
    names = [f.name for f in struct.fields]
    namespace: dict[str, Any] = {"_MISSING": _MISSING}
    params, body = [], []
    for i, f in enumerate(struct.fields):
        default = default_of(f)
        if isinstance(default, list):  # a fresh list per instance
            params.append(f"{f.name}=_MISSING")
            body.append(f"    self.{f.name} = [] if {f.name} is _MISSING else {f.name}")
        elif isinstance(f.type, Struct) and not f.has_null_default:  # a fresh nested instance
            namespace[f"_c{i}"] = class_for(f.type)
            params.append(f"{f.name}=_MISSING")
            body.append(f"    self.{f.name} = _c{i}() if {f.name} is _MISSING else {f.name}")
        else:
            namespace[f"_d{i}"] = default
            params.append(f"{f.name}=_d{i}")
            body.append(f"    self.{f.name} = {f.name}")
        if isinstance(f.type, Array) and isinstance(f.type.item, Struct):
            class_for(f.type.item)
        elif isinstance(f.type, Struct):
            class_for(f.type)
    source = "\n".join([f"def __call__(cls, {', '.join(params)}):", "    self = _blank()", *body,
                        "    return self"])
    exec(source, namespace)  # noqa: S102 - generated from our own declarations

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in names)

    def __repr__(self):
        return f"{struct.name}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"

    meta = type(f"{struct.name}Class", (type,), {"__call__": namespace["__call__"]})
    cls = meta(struct.name, (), {
        "__slots__": tuple(names),
        "__eq__": __eq__,
        "__hash__": None,
        "__repr__": __repr__,
        "STRUCT": struct,
    })
    namespace["_blank"] = type.__call__.__get__(cls)
    return cls


def _register(message: Message) -> None:
    stack = [message.struct]
    while stack:
        struct = stack.pop()
        globals()[struct.name] = class_for(struct)
        stack.extend(f.type.item for f in struct.fields
                     if isinstance(f.type, Array) and isinstance(f.type.item, Struct))
        stack.extend(f.type for f in struct.fields if isinstance(f.type, Struct))


for _api in APIS.values():
    _register(_api.request)
    _register(_api.response)
_register(SUBSCRIPTION)
_register(ASSIGNMENT)



def build(struct: Struct, values: dict[str, Any]):
    """An instance of `struct`'s class from plain data: nested structs given as dicts."""
    kwargs = {}
    for f in struct.fields:
        if f.name not in values:
            continue
        v = values[f.name]
        if isinstance(f.type, Array) and isinstance(f.type.item, Struct) and v is not None:
            v = [build(f.type.item, e) for e in v]
        elif isinstance(f.type, Struct) and v is not None:
            v = build(f.type, v)
        kwargs[f.name] = v
    return class_for(struct)(**kwargs)
