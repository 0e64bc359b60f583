"""The vocabulary in which every message is declared once, as data.

A message is a `Struct` of `Field`s; each field names its type and the versions it
exists in (Kafka's "0+", "3-5" notation), the versions in which it may be null, its
default, and, for tagged fields, its tag. `protocol.codec` turns a declaration into an
encoder and a decoder per version; `protocol.messages` turns it into a Python class.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from .versions import ALL, NONE, Versions


@dataclass(frozen=True, slots=True)
class Primitive:
    """A fixed- or variable-width scalar type."""

    name: str
    struct_code: str | None  # code for the `struct` module when fixed-width
    size: int  # bytes on the wire when fixed-width; the least it can take otherwise
    default: Any

    @property
    def fixed(self) -> bool:
        return self.struct_code is not None


BOOL = Primitive("bool", "?", 1, False)
INT8 = Primitive("int8", "b", 1, 0)
INT16 = Primitive("int16", "h", 2, 0)
UINT16 = Primitive("uint16", "H", 2, 0)
INT32 = Primitive("int32", "i", 4, 0)
INT64 = Primitive("int64", "q", 8, 0)
UINT32 = Primitive("uint32", "I", 4, 0)
FLOAT64 = Primitive("float64", "d", 8, 0.0)
UUID = Primitive("uuid", None, 16, uuid.UUID(int=0))
STRING = Primitive("string", None, 1, "")
BYTES = Primitive("bytes", None, 1, b"")


@dataclass(frozen=True, slots=True)
class Array:
    """A list of `item`, a primitive or a struct."""

    item: Primitive | Struct


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: Primitive | Array | Struct  # a struct: one nested value (nullable: a -1/1 marker byte first)
    versions: Versions = ALL
    nullable: Versions = NONE
    default: Any = None  # None: the type's own default (an empty list for arrays)
    tag: int | None = None  # tagged fields exist only in flexible versions

    @property
    def has_null_default(self) -> bool:
        return self.default is NULL


class _Null:
    """Marks a field whose default is null, as opposed to "the type's default"."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()

# groupkeeper's own tagged fields, in answers that Kafka declares none in the same struct:
# from this tag up (far above Kafka's, which count up from 0), read by groupkeeper's tools and
# skipped by every other client (KIP-482: unknown tags are ignored). Named `groupkeeper_...`.
EXTENSION_TAGS = 10_000


def is_extension(field: Field) -> bool:
    return field.tag is not None and field.tag >= EXTENSION_TAGS


def F(name: str, type_: Primitive | Array | Struct, versions: str = "0+", *, nullable: str = "none",
      default: Any = None, tag: int | None = None) -> Field:
    """Declare a field in Kafka's notation: F("group_instance_id", STRING, "5+", nullable="5+")."""
    return Field(name, type_, Versions.parse(versions), Versions.parse(nullable), default, tag)


@dataclass(frozen=True, slots=True)
class Struct:
    """A named sequence of fields: a whole message, or the element of an array."""

    name: str
    fields: tuple[Field, ...]

    def present(self, version: int) -> tuple[Field, ...]:
        """The untagged fields of `version`, in wire order."""
        return tuple(f for f in self.fields if version in f.versions and f.tag is None)

    def tagged(self, version: int) -> tuple[Field, ...]:
        """The tagged fields of `version`, by tag."""
        return tuple(sorted((f for f in self.fields if version in f.versions and f.tag is not None),
                            key=lambda f: f.tag))


def S(name: str, *fields: Field) -> Struct:
    return Struct(name, tuple(fields))


@dataclass(frozen=True)
class Message:
    """A top-level message: a struct with its valid and flexible versions."""

    struct: Struct
    versions: Versions
    flexible: Versions

    @property
    def name(self) -> str:
        return self.struct.name


@dataclass(frozen=True)
class Api:
    """One API key with its request and response declarations."""

    key: int
    name: str
    request: Message
    response: Message

    @property
    def versions(self) -> Versions:
        return self.request.versions


def api(key: int, name: str, versions: str, flexible: str, *, request: list[Field],
        response: list[Field]) -> Api:
    valid, flex = Versions.parse(versions), Versions.parse(flexible)
    return Api(key, name, Message(Struct(name + "Request", tuple(request)), valid, flex),
               Message(Struct(name + "Response", tuple(response)), valid, flex))


def data(name: str, versions: str, *fields: Field) -> Message:
    """A payload that is not a request or response (the consumer protocol's), never flexible."""
    return Message(Struct(name, tuple(fields)), Versions.parse(versions), NONE)


def default_of(f: Field) -> Any:
    """The value a field takes when it is absent from a version (a fresh list for arrays;
    for a struct, None: its fresh instance is the message classes' to make)."""
    if f.default is NULL:
        return None
    if f.default is not None:
        return f.default
    if isinstance(f.type, Array):
        return []
    if isinstance(f.type, Struct):
        return None
    return f.type.default
