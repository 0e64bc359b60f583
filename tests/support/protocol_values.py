"""Hypothesis strategies for any declared struct, and our objects read back as plain data."""

from __future__ import annotations

from hypothesis import strategies as st

from protocol.schema import (BOOL, BYTES, FLOAT64, INT8, INT16, INT32, INT64, STRING, UINT16,
                             UINT32, UUID, Array, Struct, is_extension)

_INT_BITS = {INT8: 8, INT16: 16, INT32: 32, INT64: 64}


def primitive(t) -> st.SearchStrategy:
    if t in _INT_BITS:
        bits = _INT_BITS[t]
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return {
        UINT16: st.integers(0, 2**16 - 1),
        UINT32: st.integers(0, 2**32 - 1),
        BOOL: st.booleans(),
        FLOAT64: st.floats(allow_nan=False),
        STRING: st.text(max_size=12),
        BYTES: st.binary(max_size=12),
        UUID: st.uuids(),
    }[t]


def values(struct: Struct, version: int, max_items: int = 3) -> st.SearchStrategy[dict]:
    """Field values of `struct` as it exists in `version`, nested structs as dicts."""
    fields = {}
    for f in struct.fields:
        if version not in f.versions:
            continue
        if is_extension(f):  # groupkeeper's own tags: no other client has them to compare with
            fields[f.name] = st.none()
            continue
        if isinstance(f.type, Array):
            item = f.type.item
            elem = values(item, version, max_items) if isinstance(item, Struct) else primitive(item)
            s = st.lists(elem, max_size=max_items)
        elif isinstance(f.type, Struct):
            s = values(f.type, version, max_items)
        else:
            s = primitive(f.type)
        if version in f.nullable:
            s = st.none() | s
        fields[f.name] = s
    return st.fixed_dictionaries(fields)


def as_dict(struct: Struct, obj, version: int) -> dict:
    """The fields of our `obj` that exist in `version`, nested structs as dicts."""
    out = {}
    for f in struct.fields:
        if version not in f.versions:
            continue
        v = getattr(obj, f.name)
        if isinstance(f.type, Array) and isinstance(f.type.item, Struct) and v is not None:
            v = [as_dict(f.type.item, e, version) for e in v]
        elif isinstance(f.type, Struct) and v is not None:
            v = as_dict(f.type, v, version)
        out[f.name] = v
    return out
