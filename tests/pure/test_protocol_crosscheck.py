"""Our codecs against kafka-python's protocol classes, an independent implementation.

For every declared API, direction and version: what kafka-python encodes, we decode to the
same values; what we encode from the same values is the same bytes; and kafka-python
decodes our bytes back to those values. Whole frames (headers included) likewise.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import RequestHeader, decode_request, encode_response
from protocol.codec import decoder, encoder
from protocol.consumer import (decode_assignment, decode_subscription, encode_assignment,
                               encode_subscription)
from tools.bench.kafka_python import from_reference, has_reference, reference_class, reference_object
from protocol.messages import build
from protocol.requests import decode_response, encode_request
from protocol.schemas import APIS, ASSIGNMENT, SUBSCRIPTION
from tests.support.protocol_values import as_dict, values

def draw_values(data, key, kind, message, version) -> dict:
    vals = data.draw(values(message.struct, version))
    if key == 18 and kind == "response" and version > 0:
        # an ApiVersions error response is always sent, and read, as v0
        vals["error_code"] = 0
    return vals


# every API kafka-python declares; KIP-848's, which it does not, are checked against byte
# layouts built by hand in test_protocol_kip848.py
CASES = [(api.key, kind, v) for api in APIS.values() if has_reference(api.request)
         for kind in ("request", "response") for v in range(api.versions.low, api.versions.high + 1)]

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _case_id(case):
    key, kind, v = case
    return f"{APIS[key].name}-{kind}-v{v}"


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
@SETTINGS
@given(data=st.data())
def test_same_values_same_bytes_both_ways(case, data):
    key, kind, version = case
    message = getattr(APIS[key], kind)
    kp = reference_class(message)
    vals = draw_values(data, key, kind, message, version)

    theirs = bytes(reference_object(message, vals, version).encode())
    assert as_dict(message.struct, decoder(message, version)(theirs), version) == vals

    mine = encoder(message, version)(build(message.struct, vals))
    assert mine == theirs
    back = kp.decode(mine, version=version)
    assert from_reference(kp.fields, message.struct, back, version) == vals


@pytest.mark.parametrize("case", [c for c in CASES if c[1] == "request"],
                         ids=[_case_id(c) for c in CASES if c[1] == "request"])
@SETTINGS
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1),
       client_id=st.none() | st.text(max_size=20))
def test_request_frames_with_headers(case, data, correlation_id, client_id):
    key, _, version = case
    message = APIS[key].request
    vals = data.draw(values(message.struct, version))
    request = reference_object(message, vals, version)
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    theirs = bytes(request.encode(header=True, framed=True))

    header, body = decode_request(theirs[4:])
    assert header == RequestHeader(key, version, correlation_id, client_id)
    assert as_dict(message.struct, body, version) == vals
    assert encode_request(header, build(message.struct, vals)) == theirs


@pytest.mark.parametrize("case", [c for c in CASES if c[1] == "response"],
                         ids=[_case_id(c) for c in CASES if c[1] == "response"])
@SETTINGS
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_response_frames_with_headers(case, data, correlation_id):
    key, _, version = case
    message = APIS[key].response
    kp = reference_class(message)
    vals = draw_values(data, key, "response", message, version)
    header = RequestHeader(key, version, correlation_id, "client")

    frame = encode_response(header, build(message.struct, vals))
    back = kp.decode(frame, version=version, header=True, framed=True)
    assert back.header.correlation_id == correlation_id
    assert from_reference(kp.fields, message.struct, back, version) == vals
    got_id, body = decode_response(key, version, frame[4:])
    assert got_id == correlation_id
    assert as_dict(message.struct, body, version) == vals


@pytest.mark.parametrize("message,encode,decode", [
    (SUBSCRIPTION, encode_subscription, decode_subscription),
    (ASSIGNMENT, encode_assignment, decode_assignment),
], ids=["subscription", "assignment"])
@pytest.mark.parametrize("version", range(0, 4))
@SETTINGS
@given(data=st.data())
def test_consumer_protocol_payloads(message, encode, decode, version, data):
    kp = reference_class(message)
    vals = data.draw(values(message.struct, version))
    theirs = bytes(reference_object(message, vals, version).encode())

    got_version, decoded = decode(theirs)
    assert got_version == version
    assert as_dict(message.struct, decoded, version) == vals
    mine = encode(build(message.struct, vals), version)
    assert mine == theirs
    assert from_reference(kp.fields, message.struct, kp.decode(mine), version) == vals


def test_a_newer_subscription_version_reads_as_our_newest():
    """Later versions only append fields: the prefix we know is read, the rest ignored."""
    sub = build(SUBSCRIPTION.struct, {"topics": ["a", "b"], "user_data": None,
                                     "owned_partitions": [], "generation_id": 7, "rack_id": "r1"})
    payload = encode_subscription(sub, 3)
    newer = b"\x00\x09" + payload[2:] + b"future fields"
    version, decoded = decode_subscription(newer)
    assert version == 9
    assert decoded.topics == ["a", "b"] and decoded.generation_id == 7 and decoded.rack_id == "r1"
