"""The codec against hostile and broken input: it either decodes or raises ProtocolError.

Round trips for every API, direction and version; arbitrary, truncated and mutated bytes;
hand-built frames whose lengths and counts claim far more than the frame holds (refused
before anything is allocated); whole request frames; the consumer-protocol payloads.
Anything other than a ProtocolError escaping a decoder fails these tests.
"""

from __future__ import annotations

import contextlib
import signal
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import DecodeError, ProtocolError, UnsupportedVersion, decode_request
from protocol.codec import decoder, encoder
from protocol.consumer import decode_assignment, decode_subscription
from protocol.messages import build
from protocol.schemas import (API_VERSIONS, APIS, ASSIGNMENT, HEARTBEAT, OFFSET_COMMIT,
                              SUBSCRIPTION, SYNC_GROUP)
from protocol.varint import uvarint
from tests.support.protocol_values import as_dict, values

CASES = [(api.key, kind, v) for api in APIS.values() for kind in ("request", "response")
         for v in range(api.versions.low, api.versions.high + 1)]
IDS = [f"{APIS[k].name}-{kind}-v{v}" for k, kind, v in CASES]

# Every (api, kind, version) is its own test, so a handful of examples each adds up.
FEW = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
SOME = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
MUTATE = settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
TRUNCATE = settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))

U32_MAX_VARINT = b"\xff\xff\xff\xff\x0f"  # uvarint 2**32 - 1: the longest a compact length can be
assert uvarint(2**32 - 1) == U32_MAX_VARINT


def message_of(case):
    key, kind, version = case
    return getattr(APIS[key], kind), version


def try_decode(message, version, data: bytes):
    """The decoded message, or None when the codec refused the bytes with DecodeError.

    Any other exception (IndexError, struct.error, MemoryError, ...) propagates and fails
    the calling test.
    """
    try:
        return decoder(message, version)(data)
    except DecodeError:
        return None


def encoding(data, message, version) -> bytes:
    vals = data.draw(values(message.struct, version), label="values")
    return encoder(message, version)(build(message.struct, vals))


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
@FEW
@given(data=st.data())
def test_round_trip(case, data):
    message, version = message_of(case)
    vals = data.draw(values(message.struct, version), label="values")
    encoded = encoder(message, version)(build(message.struct, vals))
    assert isinstance(encoded, bytes)
    decoded = decoder(message, version)(encoded)
    assert as_dict(message.struct, decoded, version) == vals
    # and the decoded object encodes to the very same bytes
    assert encoder(message, version)(decoded) == encoded


# -- arbitrary, truncated and mutated bytes ----------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
@SOME
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_decode_error(case, data):
    message, version = message_of(case)
    try_decode(message, version, data)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@TRUNCATE
@given(data=st.data())
def test_every_truncation_is_a_decode_error(case, data):
    message, version = message_of(case)
    encoded = encoding(data, message, version)
    decode = decoder(message, version)
    decode(encoded)  # the whole encoding is fine
    for size in range(len(encoded)):
        with pytest.raises(DecodeError):
            decode(encoded[:size])


@pytest.mark.parametrize("case", CASES, ids=IDS)
@TRUNCATE
@given(data=st.data(), junk=st.binary(min_size=1, max_size=8))
def test_trailing_bytes_are_refused_unless_asked_to_ignore_them(case, data, junk):
    message, version = message_of(case)
    encoded = encoding(data, message, version)
    decode = decoder(message, version)
    with pytest.raises(DecodeError):
        decode(encoded + junk)
    assert decode(encoded + junk, 0, False) == decode(encoded)
    assert decode(junk + encoded, len(junk)) == decode(encoded)


_MUTATION = st.tuples(st.sampled_from(["flip", "insert", "delete"]),
                      st.integers(0, 10_000), st.integers(1, 255))


def mutate(encoded: bytes, mutations) -> bytes:
    out = bytearray(encoded)
    for kind, where, byte in mutations:
        if kind == "insert":
            out.insert(where % (len(out) + 1), byte)
        elif not out:
            continue
        elif kind == "flip":
            out[where % len(out)] ^= byte
        else:
            del out[where % len(out)]
    return bytes(out)


@pytest.mark.parametrize("case", CASES, ids=IDS)
@MUTATE
@given(data=st.data(), mutations=st.lists(_MUTATION, min_size=1, max_size=4))
def test_mutated_encodings_decode_or_raise_decode_error(case, data, mutations):
    message, version = message_of(case)
    mutated = mutate(encoding(data, message, version), mutations)
    decoded = try_decode(message, version, mutated)
    if decoded is not None:
        # whatever the decoder accepts, the encoder can write, and that reads back the same
        again = encoder(message, version)(decoded)
        assert encoder(message, version)(decoder(message, version)(again)) == again


# -- hostile lengths and counts ----------------------------------------------------------------

I16 = struct.Struct(">h").pack
I32 = struct.Struct(">i").pack


def classic_str(s: bytes) -> bytes:
    return I16(len(s)) + s


def compact_str(s: bytes) -> bytes:
    return uvarint(len(s) + 1) + s


def pad(body: bytes, size: int = 30) -> bytes:
    assert len(body) <= size
    return body + b"\x00" * (size - len(body))


HOSTILE = {
    # classic (int16) string length of 32767 in a 30-byte frame: Heartbeat's group_id
    "classic-string": (HEARTBEAT.request, 0, pad(b"\x7f\xff" + b"g" * 4)),
    # classic (int32) bytes length of 2**31 - 1: SyncGroup v0 response's assignment
    "classic-bytes": (SYNC_GROUP.response, 0, pad(I16(0) + b"\x7f\xff\xff\xff")),
    # classic (int32) array count of 2**31 - 1: OffsetCommit v7's topics
    "classic-array": (OFFSET_COMMIT.request, 7, pad(
        classic_str(b"g") + I32(1) + classic_str(b"m") + b"\xff\xff" + b"\x7f\xff\xff\xff")),
    # ... in a nested array of structs: one topic claiming 2**31 - 1 partitions
    "classic-nested-array": (OFFSET_COMMIT.request, 7, pad(
        classic_str(b"g") + I32(1) + classic_str(b"m") + b"\xff\xff" + I32(1)
        + classic_str(b"t") + b"\x7f\xff\xff\xff")),
    # an array of int32 (read by one struct call) claiming 2**31 - 1 items
    "classic-int32-array": (ASSIGNMENT, 0, pad(I32(1) + classic_str(b"t") + b"\x7f\xff\xff\xff")),
    # an array of strings claiming 2**31 - 1 items
    "classic-string-array": (SUBSCRIPTION, 0, pad(b"\x7f\xff\xff\xff" + classic_str(b"t"))),
    # compact string whose uvarint length is 2**32 - 1 (five bytes): Heartbeat v4's group_id
    "compact-string": (HEARTBEAT.request, 4, pad(U32_MAX_VARINT + b"g" * 4)),
    # compact bytes: SyncGroup v4 response's assignment
    "compact-bytes": (SYNC_GROUP.response, 4, pad(I32(0) + I16(0) + U32_MAX_VARINT)),
    # compact array: OffsetCommit v8's topics
    "compact-array": (OFFSET_COMMIT.request, 8, pad(
        compact_str(b"g") + I32(1) + compact_str(b"m") + b"\x00" + U32_MAX_VARINT)),
    # compact nested array: one topic claiming 2**32 - 2 partitions
    "compact-nested-array": (OFFSET_COMMIT.request, 8, pad(
        compact_str(b"g") + I32(1) + compact_str(b"m") + b"\x00" + b"\x02"
        + compact_str(b"t") + U32_MAX_VARINT)),
    # a tagged field whose size is 2**32 - 1: ApiVersions v3 response
    "tagged-field-size": (API_VERSIONS.response, 3, pad(
        I16(0) + b"\x01" + I32(0) + b"\x01" + b"\x00" + U32_MAX_VARINT)),
    # 2**32 - 1 tagged fields, each empty: the loop must run out of bytes, not of patience
    "tagged-field-count": (API_VERSIONS.response, 3, pad(
        I16(0) + b"\x01" + I32(0) + U32_MAX_VARINT + b"\x63\x00" * 9)),
    # a known tagged field (supported_features) whose array claims 2**32 - 2 items
    "tagged-array": (API_VERSIONS.response, 3, pad(
        I16(0) + b"\x01" + I32(0) + b"\x01\x00\x06" + U32_MAX_VARINT + b"\x00")),
}


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt a decoder that loops over a hostile count instead of refusing it."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise TimeoutError(f"still decoding after {seconds}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# The refusal each hostile frame must get: the up-front length check, not a loop that
# eventually runs out of bytes (a count of empty tagged fields can only run out of bytes).
REFUSAL = {name: "beyond the end of the frame" for name in HOSTILE} | {
    "tagged-field-count": "truncated varint"}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_length_is_refused_up_front_without_allocating(name):
    message, version, frame = HOSTILE[name]
    decode = decoder(message, version)  # compiled now, outside the measurement
    with time_limit(5), pytest.raises(DecodeError):
        decode(frame)  # warm up: anything lazily built on the first failure is built now
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with time_limit(5), pytest.raises(DecodeError, match=REFUSAL[name]):
            decode(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"{name}: {peak} bytes traced while refusing a {len(frame)}-byte frame"


def test_offset_commit_topics_count_of_2_31_in_30_bytes_allocates_nothing_big():
    body = pad(classic_str(b"g") + I32(1) + classic_str(b"m") + b"\xff\xff" + b"\x7f\xff\xff\xff")
    assert len(body) == 30
    decode = decoder(OFFSET_COMMIT.request, 7)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with time_limit(5), pytest.raises(DecodeError, match="topics"):
            decode(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("length", [-2, -100, -(2**15)])
def test_negative_classic_lengths_other_than_null_are_refused(width, length):
    # -1 is null, any other negative length is malformed, in nullable fields as well
    if width == 2:  # SyncGroup v3's group_instance_id: a nullable classic string
        frame = classic_str(b"g") + I32(1) + classic_str(b"m") + I16(length) + I32(0)
        message, version = SYNC_GROUP.request, 3
    else:  # Subscription's user_data: nullable classic bytes
        frame = I32(0) + I32(length)
        message, version = SUBSCRIPTION, 0
    with pytest.raises(DecodeError):
        decoder(message, version)(frame)


def test_null_in_a_non_nullable_field_is_refused():
    with pytest.raises(DecodeError):
        decoder(HEARTBEAT.request, 0)(b"\xff\xff" + I32(1) + classic_str(b"m"))
    with pytest.raises(DecodeError):  # compact null (length 0) in Heartbeat v4's group_id
        decoder(HEARTBEAT.request, 4)(b"\x00" + I32(1) + compact_str(b"m") + b"\x00\x00")


# -- whole requests ----------------------------------------------------------------------------

HEADER = struct.Struct(">hhih")


def request_header(api_key: int, version: int, correlation_id: int, client_id: bytes | None):
    if client_id is None:
        return HEADER.pack(api_key, version, correlation_id, -1)
    return HEADER.pack(api_key, version, correlation_id, len(client_id)) + client_id


@settings(max_examples=300, deadline=None)
@given(frame=st.binary(max_size=200))
def test_decode_request_on_arbitrary_bytes_raises_only_protocol_errors(frame):
    try:
        decode_request(frame)
    except ProtocolError:
        pass


@st.composite
def frames_with_a_valid_header(draw):
    key = draw(st.sampled_from(sorted(APIS)))
    versions = APIS[key].versions
    version = draw(st.integers(versions.low, versions.high))
    head = request_header(key, version, draw(st.integers(-(2**31), 2**31 - 1)),
                          draw(st.none() | st.binary(max_size=8)))
    return head + draw(st.binary(max_size=120))


@settings(max_examples=300, deadline=None)
@given(frame=frames_with_a_valid_header())
def test_decode_request_with_a_valid_header_and_random_body(frame):
    try:
        header, body = decode_request(frame)
    except UnsupportedVersion:
        pytest.fail("a declared API and version was reported as unsupported")
    except DecodeError:
        return
    assert header.api_key in APIS


def test_unknown_api_key_is_unsupported_and_carries_the_header():
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(request_header(9999, 3, 4242, b"client") + b"anything at all")
    header = caught.value.header
    assert (header.api_key, header.api_version, header.correlation_id) == (9999, 3, 4242)
    assert header.client_id == "client"


def test_unknown_version_is_unsupported_and_carries_the_header():
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(request_header(API_VERSIONS.key, 99, -7, None))
    header = caught.value.header
    assert (header.api_key, header.api_version, header.correlation_id) == (18, 99, -7)
    assert header.client_id is None


def test_a_request_whose_body_is_truncated_is_a_decode_error():
    body = encoder(OFFSET_COMMIT.request, 7)(build(OFFSET_COMMIT.request.struct, {
        "group_id": "group", "generation_id_or_member_epoch": 3, "member_id": "m-1",
        "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 1,
             "committed_metadata": "meta"}]}],
    }))
    frame = request_header(OFFSET_COMMIT.key, 7, 1, b"c") + body
    header, decoded = decode_request(frame)
    assert header.correlation_id == 1 and decoded.topics[0].partitions[0].committed_offset == 42
    header_size = len(frame) - len(body)
    for size in range(header_size, len(frame)):
        with pytest.raises(DecodeError):
            decode_request(frame[:size])


@pytest.mark.parametrize("frame", [
    b"", b"\x00", b"\x00\x12\x00\x00\x00\x00\x00",  # shorter than the fixed header
    HEADER.pack(18, 0, 1, 10) + b"abc",  # client_id longer than the frame
    HEADER.pack(18, 0, 1, -2),  # client_id length below -1
    HEADER.pack(18, 0, 1, 2) + b"\xff\xfe",  # client_id not UTF-8
    HEADER.pack(18, 3, 1, -1),  # flexible header without its tagged-field section
    HEADER.pack(18, 3, 1, -1) + b"\x01\x00" + U32_MAX_VARINT,  # header tag beyond the frame
], ids=["empty", "one-byte", "seven-bytes", "client-id-too-long", "client-id-length",
        "client-id-utf8", "no-header-tags", "header-tag-size"])
def test_malformed_request_headers_are_decode_errors(frame):
    with pytest.raises(DecodeError):
        decode_request(frame)


# -- the consumer protocol's payloads ----------------------------------------------------------

CONSUMER = [decode_subscription, decode_assignment]


@pytest.mark.parametrize("decode", CONSUMER, ids=["subscription", "assignment"])
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_consumer_payloads_from_arbitrary_bytes(decode, data):
    try:
        decode(data)
    except ProtocolError:
        pass


@pytest.mark.parametrize("decode", CONSUMER, ids=["subscription", "assignment"])
@settings(max_examples=200, deadline=None)
@given(version=st.integers(-3, 12), rest=st.binary(max_size=120))
def test_consumer_payloads_with_a_plausible_version(decode, version, rest):
    data = I16(version) + rest
    try:
        got_version, _ = decode(data)
    except ProtocolError:
        return
    assert got_version == version >= 0


@pytest.mark.parametrize("message,decode", [(SUBSCRIPTION, decode_subscription),
                                            (ASSIGNMENT, decode_assignment)],
                         ids=["subscription", "assignment"])
@pytest.mark.parametrize("version", range(0, 4))
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_consumer_payloads_truncated(message, decode, version, data):
    payload = I16(version) + encoding(data, message, version)
    decode(payload)
    for size in range(len(payload)):
        with pytest.raises(DecodeError):
            decode(payload[:size])
