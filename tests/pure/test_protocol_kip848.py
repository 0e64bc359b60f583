"""KIP-848's APIs (ConsumerGroupHeartbeat, ConsumerGroupDescribe) against byte layouts built
by hand from Kafka's published message schemas: kafka-python does not declare them, so this
encoder, written field by field from the schemas, is the independent side. For random
values, our encoder writes its bytes and our decoder reads them back.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import DecodeError
from protocol.codec import decoder, encoder
from protocol.messages import build
from protocol.schemas import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT
from tests.support.protocol_values import as_dict, values

TAGS = b"\x00"  # no tagged fields


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def i16(n): return struct.pack(">h", n)
def i32(n): return struct.pack(">i", n)


def string(s: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: length + 1 as an unsigned varint, 0 for null."""
    if s is None:
        return b"\x00"
    data = s.encode()
    return uvarint(len(data) + 1) + data


def array(items, encode) -> bytes:
    """COMPACT_(NULLABLE_)ARRAY."""
    if items is None:
        return b"\x00"
    return uvarint(len(items) + 1) + b"".join(encode(item) for item in items)


def owned(tp: dict) -> bytes:
    return tp["topic_id"].bytes + array(tp["partitions"], i32) + TAGS


def heartbeat_request(v: dict, version: int) -> bytes:
    return b"".join([
        string(v["group_id"]), string(v["member_id"]), i32(v["member_epoch"]), string(v["instance_id"]),
        string(v["rack_id"]), i32(v["rebalance_timeout_ms"]), array(v["subscribed_topic_names"], string),
        string(v["subscribed_topic_regex"]) if version >= 1 else b"", string(v["server_assignor"]),
        array(v["topic_partitions"], owned), TAGS])


def heartbeat_response(v: dict, version: int) -> bytes:
    assignment = v["assignment"]  # a nullable struct: -1, or 1 and the struct
    return b"".join([
        i32(v["throttle_time_ms"]), i16(v["error_code"]), string(v["error_message"]), string(v["member_id"]),
        i32(v["member_epoch"]), i32(v["heartbeat_interval_ms"]),
        b"\xff" if assignment is None else b"\x01" + array(assignment["topic_partitions"], owned) + TAGS,
        TAGS])


def describe_request(v: dict, version: int) -> bytes:
    return array(v["group_ids"], string) + (b"\x01" if v["include_authorized_operations"] else b"\x00") + TAGS


def described_assignment(a: dict) -> bytes:
    return array(a["topic_partitions"], lambda tp: tp["topic_id"].bytes + string(tp["topic_name"])
                 + array(tp["partitions"], i32) + TAGS) + TAGS


def described_member(m: dict, version: int) -> bytes:
    return b"".join([
        string(m["member_id"]), string(m["instance_id"]), string(m["rack_id"]), i32(m["member_epoch"]),
        string(m["client_id"]), string(m["client_host"]), array(m["subscribed_topic_names"], string),
        string(m["subscribed_topic_regex"]), described_assignment(m["assignment"]),
        described_assignment(m["target_assignment"]),
        struct.pack(">b", m["member_type"]) if version >= 1 else b"", TAGS])


def describe_response(v: dict, version: int) -> bytes:
    return i32(v["throttle_time_ms"]) + array(v["groups"], lambda g: b"".join([
        i16(g["error_code"]), string(g["error_message"]), string(g["group_id"]), string(g["group_state"]),
        i32(g["group_epoch"]), i32(g["assignment_epoch"]), string(g["assignor_name"]),
        array(g["members"], lambda m: described_member(m, version)), i32(g["authorized_operations"]), TAGS])) + TAGS


LAYOUTS = {(CONSUMER_GROUP_HEARTBEAT, "request"): heartbeat_request,
           (CONSUMER_GROUP_HEARTBEAT, "response"): heartbeat_response,
           (CONSUMER_GROUP_DESCRIBE, "request"): describe_request,
           (CONSUMER_GROUP_DESCRIBE, "response"): describe_response}
CASES = [(api, kind, v) for (api, kind) in LAYOUTS for v in range(api.versions.low, api.versions.high + 1)]


@pytest.mark.parametrize("case", CASES, ids=[f"{a.name}-{k}-v{v}" for a, k, v in CASES])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_our_codec_writes_and_reads_the_published_layout(case, data):
    api, kind, version = case
    message = getattr(api, kind)
    vals = data.draw(values(message.struct, version))
    theirs = LAYOUTS[(api, kind)](vals, version)
    assert encoder(message, version)(build(message.struct, vals)) == theirs
    assert as_dict(message.struct, decoder(message, version)(theirs), version) == vals


def test_a_nullable_struct_marker_other_than_minus_one_or_one_is_refused():
    message = CONSUMER_GROUP_HEARTBEAT.response
    good = heartbeat_response({"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": None,
                               "member_epoch": 1, "heartbeat_interval_ms": 5000, "assignment": None}, 0)
    assert decoder(message, 0)(good).assignment is None
    marker = good.index(b"\xff")
    with pytest.raises(DecodeError, match="assignment"):
        decoder(message, 0)(good[:marker] + b"\x02" + good[marker + 1:])
    with pytest.raises(DecodeError):
        decoder(message, 0)(good[:marker])  # cut before the marker
