"""Whole requests and responses: header plus body, as they travel in a frame.

Request header v1 is api_key, api_version, correlation_id and a nullable client_id
(a classic int16-length string even in v2); v2, used by flexible request versions, adds a
tagged-field section. Response header v0 is the correlation id; v1 adds tagged fields,
except that ApiVersions answers always use v0 so that any client can read them.
"""

from __future__ import annotations

import struct
from functools import partial
from typing import Any, NamedTuple

from .codec import Decoder, Encoder, decoder, encoder
from .exceptions import DecodeError, UnsupportedVersion
from .schema import Api
from .schemas import API_VERSIONS, APIS
from .varint import read_uvarint

_HEADER = struct.Struct(">hhih")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_SIZE_AND_ID = struct.Struct(">ii")


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


_header = partial(tuple.__new__, RequestHeader)  # without NamedTuple's keyword handling: per request


def _flexible(api: Api, version: int) -> bool:
    return version in api.request.flexible


# api_key * 65536 + api_version (a signed int16: unique) -> what a request or response of
# that pair needs, filled on first use
_REQUESTS: dict[int, tuple[Decoder, bool]] = {}
_RESPONSES: dict[int, tuple[Encoder, bool]] = {}


def decode_request(frame: bytes, whole: bool = True) -> tuple[RequestHeader, Any]:
    """Header and body of one request frame (without its size prefix). Without `whole`,
    bytes after the body's fields are ignored, as Kafka's brokers ignore them (librdkafka's
    Metadata v12 for every topic leaves 3 zero bytes after its null topic array).

    Raises UnsupportedVersion, carrying the header, for an API key or version that is not
    declared, and DecodeError for anything malformed.
    """
    if type(frame) is not bytes:  # a large frame read in place (`FrameReader`): decoded as bytes
        frame = bytes(frame)
    size = len(frame)
    if size < _HEADER.size:
        raise DecodeError(f"request of {size} bytes is shorter than a request header")
    api_key, api_version, correlation_id, n = _HEADER.unpack_from(frame)
    if n < 0:
        if n != -1:
            raise DecodeError("request header: bad client_id length")
        client_id, p = None, _HEADER.size
    else:
        p = _HEADER.size + n
        if p > size:
            raise DecodeError("request header: bad client_id length")
        try:
            client_id = frame[_HEADER.size:p].decode()
        except UnicodeDecodeError:
            raise DecodeError("request header: client_id is not UTF-8") from None
    header = _header((api_key, api_version, correlation_id, client_id))
    key = api_key * 65536 + api_version
    known = _REQUESTS.get(key)
    if known is None:
        known = _REQUESTS[key] = _request_codec(header)
    decode, flexible = known
    if flexible:
        if p < size and not frame[p]:  # no tagged fields, as nearly always
            p += 1
        else:
            p = skip_tags(frame, p)
    return header, decode(frame, p, whole)


def _request_codec(header: RequestHeader) -> tuple[Decoder, bool]:
    api = APIS.get(header.api_key)
    if api is None:
        raise UnsupportedVersion(f"unknown API key {header.api_key}", header)
    if header.api_version not in api.versions:
        raise UnsupportedVersion(f"{api.name} v{header.api_version} is not supported", header)
    return decoder(api.request, header.api_version), _flexible(api, header.api_version)


def skip_tags(data: bytes, p: int) -> int:
    """Past a tagged-field section starting at `p` (its fields unread)."""
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
    key = header.api_key * 65536 + header.api_version
    known = _RESPONSES.get(key)
    if known is None:
        api = APIS[header.api_key]
        known = _RESPONSES[key] = (
            encoder(api.response, header.api_version),
            _flexible(api, header.api_version) and api is not API_VERSIONS)
    encode, tagged = known
    payload = encode(body)
    if tagged:
        return _SIZE_AND_ID.pack(len(payload) + 5, header.correlation_id) + b"\x00" + payload
    return _SIZE_AND_ID.pack(len(payload) + 4, header.correlation_id) + payload


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


def decode_response(api_key: int, api_version: int, frame: bytes, whole: bool = True) -> tuple[int, Any]:
    """(correlation id, body) of one response frame (without its size prefix). With `whole`
    (the default), bytes past the schema are an error; without, they are ignored."""
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
        p = skip_tags(frame, p)
    return correlation_id, decoder(api.response, api_version)(frame, p, whole)


def decode_broker_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any, bool]:
    """(correlation id, body, past) of a response frame from a broker, read as librdkafka reads
    it: bytes past the schema are ignored (librdkafka's own mock cluster adds a byte to
    Metadata v9+, and librdkafka's clients read those answers), `past` says whether there
    were any. For what groupkeeper reads of brokers
    (the gateway, the topic source), never for what it reads of clients, which stays strict.
    Raises `DecodeError` for an answer that does not read even so."""
    try:
        correlation_id, body = decode_response(api_key, api_version, frame)
        return correlation_id, body, False
    except DecodeError as exc:
        try:
            correlation_id, body = decode_response(api_key, api_version, frame, whole=False)
        except DecodeError:
            raise exc from None
        return correlation_id, body, True
