"""What a relay reads of a request frame without decoding it (the gateway passes most
requests on as bytes): the api key, version and correlation id every request begins with,
and whether a Produce expects an answer (acks=0 does not: Kafka's brokers send none)."""

from __future__ import annotations

import struct

from .exceptions import DecodeError
from .requests import skip_tags
from .varint import read_uvarint

_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_I16 = struct.Struct(">h")
_PRODUCE = 0
_PRODUCE_FLEXIBLE = 9  # Produce's request header is v2 (tagged fields) and its strings compact from v9


def head(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame (without its size)."""
    if len(frame) < 8:
        raise DecodeError(f"request of {len(frame)} bytes is shorter than a request header")
    return _HEAD.unpack_from(frame)[:3]


def produce_acks(frame: bytes, at: int = 0) -> int:
    """The `acks` of a Produce request frame (v3+: after the header and transactional_id),
    the frame from `at` (4: one read as it came, its size first)."""
    if len(frame) < at + _HEAD.size:
        raise DecodeError("Produce shorter than its header")
    _, version, _, n = _HEAD.unpack_from(frame, at)
    p = at + _HEAD.size + max(n, 0)  # client_id: a nullable int16-length string in every header version
    if version >= _PRODUCE_FLEXIBLE:
        p = skip_tags(frame, p)  # the header's tagged fields
        length, p = read_uvarint(frame, p)  # transactional_id, compact nullable: length + 1
        p += max(length - 1, 0)
    else:
        if p + 2 > len(frame):
            raise DecodeError("Produce truncated before transactional_id")
        length, = _I16.unpack_from(frame, p)
        p += 2 + max(length, 0)
    if p + 2 > len(frame):
        raise DecodeError("Produce truncated before acks")
    return _I16.unpack_from(frame, p)[0]
