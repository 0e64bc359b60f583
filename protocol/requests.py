"""Whole requests and responses: header plus body, as they travel in a frame.

Request header v1 is api_key, api_version, correlation_id and a nullable client_id
(a classic int16-length string even in v2); v2, used by flexible request versions, adds a
tagged-field section. Response header v0 is the correlation id; v1 adds tagged fields,
except that ApiVersions answers always use v0 so that any client can read them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from .codec import decoder, encoder
from .exceptions import DecodeError, UnsupportedVersion
from .schema import Api
from .schemas import API_VERSIONS, APIS
from .varint import read_uvarint

_HEADER = struct.Struct(">hhih")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def _flexible(api: Api, version: int) -> bool:
    return version in api.request.flexible


def decode_request(frame: bytes) -> tuple[RequestHeader, Any]:
    """Header and body of one request frame (without its size prefix).

    Raises UnsupportedVersion, carrying the header, for an API key or version that is not
    declared, and DecodeError for anything malformed.
    """
    if len(frame) < _HEADER.size:
        raise DecodeError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id, n = _HEADER.unpack_from(frame)
    p = _HEADER.size
    if n < -1 or p + n > len(frame):
        raise DecodeError("request header: bad client_id length")
    try:
        client_id = None if n == -1 else frame[p:p + n].decode()
    except UnicodeDecodeError:
        raise DecodeError("request header: client_id is not UTF-8") from None
    p += max(n, 0)
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    api = APIS.get(api_key)
    if api is None:
        raise UnsupportedVersion(f"unknown API key {api_key}", header)
    if api_version not in api.versions:
        raise UnsupportedVersion(f"{api.name} v{api_version} is not supported", header)
    if _flexible(api, api_version):
        p = _skip_tags(frame, p)
    return header, decoder(api.request, api_version)(frame, p)


def _skip_tags(data: bytes, p: int) -> int:
    count, p = read_uvarint(data, p)
    for _ in range(count):
        _, p = read_uvarint(data, p)
        size, p = read_uvarint(data, p)
        p += size
        if p > len(data):
            raise DecodeError("request header: tagged field beyond the end of the frame")
    return p


def encode_response(header: RequestHeader, body: Any) -> bytes:
    """The framed response (size, header, body) to the request that carried `header`."""
    api = APIS[header.api_key]
    payload = encoder(api.response, header.api_version)(body)
    tagged = _flexible(api, header.api_version) and api is not API_VERSIONS
    head = _I32.pack(header.correlation_id) + (b"\x00" if tagged else b"")
    return _I32.pack(len(head) + len(payload)) + head + payload


def encode_request(header: RequestHeader, body: Any) -> bytes:
    """The framed request (size, header, body): what a client sends."""
    api = APIS[header.api_key]
    payload = encoder(api.request, header.api_version)(body)
    if header.client_id is None:
        head = _HEADER.pack(header.api_key, header.api_version, header.correlation_id, -1)
    else:
        client = header.client_id.encode()
        head = _HEADER.pack(header.api_key, header.api_version, header.correlation_id,
                            len(client)) + client
    if _flexible(api, header.api_version):
        head += b"\x00"
    return _I32.pack(len(head) + len(payload)) + head + payload


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of one response frame (without its size prefix)."""
    api = APIS[api_key]
    if len(frame) < 4:
        raise DecodeError("response shorter than a response header")
    correlation_id, = _I32.unpack_from(frame)
    p = 4
    if api is API_VERSIONS:
        # A server that does not know our version answers as v0 with an error; clients
        # read any ApiVersions error response as v0, so that answer is always readable.
        if len(frame) >= 6 and _I16.unpack_from(frame, 4)[0] != 0:
            api_version = 0
    elif _flexible(api, api_version):
        p = _skip_tags(frame, p)
    return correlation_id, decoder(api.response, api_version)(frame, p)
