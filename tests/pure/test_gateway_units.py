"""The gateway's pure parts, without I/O: the port scheme, what a relay reads of a request
frame without decoding it (cross-checked against our codec's and kafka-python's encoding),
and the ApiVersions a gateway advertises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from coordinator.api.versions import SUPPORTED, TRANSACTIONAL_OFFSETS
from coordinator.gateway.cluster import REFUSED, GatewayClusterApi
from coordinator.gateway.ports import PortScheme
from protocol import DecodeError, RequestHeader, encode_request
from protocol.messages import build
from protocol.peek import head, produce_acks
from protocol.schemas import FETCH, FIND_COORDINATOR, JOIN_GROUP, METADATA, PRODUCE, TXN_OFFSET_COMMIT
from tools.bench.kafka_python import reference_object
from tests.support.protocol_values import values

# -- the port scheme ----------------------------------------------------------------------


def test_one_listener_is_kroxyliciouss_port_identifies_node():
    scheme = PortScheme(9092, 9092, listeners=1)
    assert [scheme.bound(node, 0) for node in (0, 1, 111)] == [9093, 9094, 9204]


def test_listeners_never_share_a_port_and_advertised_ports_follow_the_advertised_base():
    scheme = PortScheme(9092, 19092, listeners=3, offset=10)
    ports = {scheme.bound(node, i) for node in range(50) for i in range(3)}
    assert len(ports) == 150 and min(ports) == 9102
    assert scheme.advertised(7, 2) - scheme.bound(7, 2) == 10000


def test_a_scheme_past_the_last_port_is_one_clear_problem():
    assert PortScheme(9092, 9092, 1).problem() is None
    problem = PortScheme(65000, 65000, listeners=2, max_node_id=1000).problem()
    assert "past 65535" in problem and "gateway_max_node_id" in problem
    assert "at least 1" in PortScheme(9092, 9092, 1, offset=0).problem()


def test_a_node_out_of_range_or_on_a_taken_port_is_refused_with_its_reason():
    scheme = PortScheme(9092, 9092, listeners=1, max_node_id=100)
    assert scheme.refusal(5, taken={9092}) is None
    assert "outside 0-100" in scheme.refusal(101, taken=set())
    assert "outside" in scheme.refusal(-1, taken=set())
    assert "9095 is taken" in scheme.refusal(2, taken={9095})


# -- what a relay reads of a frame --------------------------------------------------------

client_ids = st.one_of(st.none(), st.text(max_size=20))
transactional_ids = st.one_of(st.none(), st.text(max_size=30))


@settings(max_examples=300, deadline=None)
@given(version=st.integers(PRODUCE.versions.low, PRODUCE.versions.high), acks=st.sampled_from([-1, 0, 1]),
       transactional_id=transactional_ids, client_id=client_ids, correlation_id=st.integers(0, 2**31 - 1))
def test_a_produces_head_and_acks_read_as_our_codec_wrote_them(version, acks, transactional_id, client_id,
                                                                correlation_id):
    body = build(PRODUCE.request.struct, {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 1000,
                                          "topic_data": []})
    frame = encode_request(RequestHeader(PRODUCE.key, version, correlation_id, client_id), body)[4:]
    assert head(frame) == (PRODUCE.key, version, correlation_id)
    assert produce_acks(frame) == acks


@settings(max_examples=100, deadline=None)
@given(data=st.data(), version=st.integers(PRODUCE.versions.low, PRODUCE.versions.high), client_id=client_ids,
       correlation_id=st.integers(0, 2**31 - 1))
def test_a_produces_head_and_acks_read_as_kafka_python_wrote_them(data, version, client_id, correlation_id):
    vals = data.draw(values(PRODUCE.request.struct, version))
    request = reference_object(PRODUCE.request, vals, version)
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    frame = bytes(request.encode(header=True, framed=True))[4:]
    assert head(frame) == (PRODUCE.key, version, correlation_id)
    assert produce_acks(frame) == vals["acks"]


def test_a_frame_too_short_for_its_head_or_acks_is_a_decode_error():
    with pytest.raises(DecodeError):
        head(b"\x00\x00\x00")
    frame = encode_request(RequestHeader(PRODUCE.key, 7, 1, "c"), build(PRODUCE.request.struct, {
        "transactional_id": "abc", "acks": 1, "timeout_ms": 5, "topic_data": []}))[4:]
    acks_end = 10 + 1 + 2 + 3 + 2  # the head, client id "c", transactional id "abc", acks
    assert produce_acks(frame[:acks_end]) == 1
    for cut in range(acks_end):
        with pytest.raises(DecodeError):
            produce_acks(frame[:cut])


# -- what a gateway advertises ------------------------------------------------------------

BROKER = {0: (3, 11), 1: (4, 17), 3: (0, 12), 10: (0, 6), 11: (0, 9), 18: (0, 4), 19: (2, 7), 22: (0, 5),
          28: (0, 4), 47: (0, 0), 60: (0, 2), 68: (0, 1), 76: (1, 1)}


def test_the_gateway_advertises_the_brokers_apis_ours_and_none_refused():
    advertised = GatewayClusterApi.advertised(object.__new__(GatewayClusterApi), BROKER)
    assert advertised[19] == (2, 7) and advertised[22] == (0, 5)  # relayed as the brokers serve them
    assert advertised[JOIN_GROUP.key] == SUPPORTED[JOIN_GROUP.key]  # ours, never relayed
    assert not (REFUSED - {TXN_OFFSET_COMMIT.key}) & set(advertised)  # the streams groups
    assert advertised[TXN_OFFSET_COMMIT.key] == (0, 4)  # ours, in the versions the brokers' transactions have
    assert advertised[47] == (0, 0)  # OffsetDelete: ours
    assert advertised[76] == (1, 1)  # share groups: relayed
    # KIP-951's node endpoints (Produce 10+, Fetch 16+) rewritten: the brokers' versions
    assert advertised[PRODUCE.key] == (3, 11) and advertised[FETCH.key] == (4, 17)
    assert advertised[METADATA.key] == (0, 12)  # rewritten: what both read
    assert advertised[FIND_COORDINATOR.key] == (0, 6)


def test_before_the_brokers_are_known_the_gateway_advertises_what_it_serves():
    assert GatewayClusterApi.advertised(object.__new__(GatewayClusterApi), {}) == {**SUPPORTED, **TRANSACTIONAL_OFFSETS}
