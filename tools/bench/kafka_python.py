"""kafka-python's protocol classes as a reference implementation: build their objects from
the same plain values as ours, and read theirs back as plain values.

Used by the codec benchmark and by the cross-check tests. kafka-python is a test-extra
dependency, imported only here.
"""

from __future__ import annotations

import importlib
import inspect
import uuid

from kafka.protocol.api_data import ApiData
from kafka.protocol.api_message import ApiMessage

from protocol.schema import BYTES, UUID, Array, Message, Struct, default_of, is_extension

# kafka-python names two Metadata fields differently from Kafka's own schema, and holds
# authorized-operations fields as sets of bit positions (None for "unknown", Kafka's
# INT32_MIN) instead of an int32.
_RENAMED = {"cluster_authorized_operations": "authorized_operations",
            "topic_authorized_operations": "authorized_operations"}


def _to_bits(value: int) -> set[int] | None:
    unsigned = value & 0xFFFFFFFF
    bits = {i for i in range(32) if unsigned >> i & 1}
    return None if bits == {31} else bits


def _from_bits(bits: set[int] | None) -> int:
    unsigned = sum(1 << i for i in ({31} if bits is None else bits))
    return unsigned - (1 << 32) if unsigned >= 1 << 31 else unsigned


def _classes() -> dict[str, type]:
    found = {}
    for module in ("kafka.protocol.metadata", "kafka.protocol.consumer", "kafka.protocol.admin",
                   "kafka.protocol.producer", "kafka.protocol.sasl"):
        for _, cls in inspect.getmembers(importlib.import_module(module), inspect.isclass):
            if (issubclass(cls, (ApiMessage, ApiData)) and cls not in (ApiMessage, ApiData)):
                found[cls.name] = cls
    return found


_CLASSES = _classes()


def reference_class(message: Message) -> type:
    """kafka-python's class for one of our messages (same name: Kafka's)."""
    return _CLASSES[message.name]


def has_reference(message: Message) -> bool:
    """Whether kafka-python declares `message` (it lacks KIP-848's, for one)."""
    return message.name in _CLASSES


def _name(kp_fields: dict, name: str) -> str:
    return name if name in kp_fields else _RENAMED[name]


def to_reference(kp_fields: dict, struct: Struct, values: dict, version: int) -> dict:
    """kafka-python constructor arguments for `values`. Tagged fields equal to their default
    are left out, which is when our encoder leaves them out too."""
    kwargs = {}
    for f in struct.fields:
        if version not in f.versions:
            continue
        v = values[f.name]
        if (f.tag is not None and v == default_of(f)) or is_extension(f):
            continue
        name = _name(kp_fields, f.name)
        kf = kp_fields[name]
        if kf.type_str == "bitfield":
            v = _to_bits(v)
        elif isinstance(f.type, Array) and isinstance(f.type.item, Struct) and v is not None:
            v = [kf.data_class(**to_reference(kf.fields, f.type.item, e, version)) for e in v]
        kwargs[name] = v
    return kwargs


def reference_object(message: Message, values: dict, version: int):
    cls = reference_class(message)
    kwargs = to_reference(cls.fields, message.struct, values, version)
    return cls(version, **kwargs) if issubclass(cls, ApiData) else cls[version](**kwargs)


def from_reference(kp_fields: dict, struct: Struct, obj, version: int) -> dict:
    """A kafka-python object's values, keyed by our field names, as plain data."""
    out = {}
    for f in struct.fields:
        if version not in f.versions:
            continue
        if is_extension(f):  # groupkeeper's own tagged fields: kafka-python skips them
            out[f.name] = None
            continue
        name = _name(kp_fields, f.name)
        v = getattr(obj, name)
        if kp_fields[name].type_str == "bitfield":
            v = _from_bits(v)
        elif isinstance(f.type, Array) and isinstance(f.type.item, Struct) and v is not None:
            v = [from_reference(kp_fields[name].fields, f.type.item, e, version) for e in v]
        elif f.type is BYTES and v is not None:
            v = bytes(v)
        elif f.type is UUID and v is not None and not isinstance(v, uuid.UUID):
            v = uuid.UUID(str(v))
        out[f.name] = v
    return out
