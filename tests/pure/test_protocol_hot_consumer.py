"""The steady ConsumerGroupHeartbeat's hot path (`protocol.hot_consumer`) against the general codec.

Whatever `read_consumer_heartbeat` reads, `decode_request` reads the same; it reads exactly
the frames whose fields are all null but the rebalance timeout, with short strings and no
tagged fields, and declines the rest. Its answers are the bytes `encode_response` writes.
"""

from __future__ import annotations

import struct
import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import RequestHeader, decode_request, encode_request, encode_response
from protocol import messages as m
from protocol.hot_consumer import consumer_heartbeat_answer, read_consumer_heartbeat
from protocol.schemas import CONSUMER_GROUP_HEARTBEAT as CGH
from tests.pure.test_protocol_robustness import _MUTATION, mutate, request_header

VERSIONS = range(CGH.versions.low, CGH.versions.high + 1)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
INT32 = st.integers(-(2**31), 2**31 - 1)
TEXT = st.text(max_size=140)  # over 127 bytes now and then: the hot path's one-byte lengths
NULLABLE = ("instance_id", "rack_id", "subscribed_topic_names", "subscribed_topic_regex", "server_assignor",
            "topic_partitions")


@st.composite
def heartbeats(draw, steady=False):
    """(frame, version, fields): a whole ConsumerGroupHeartbeat frame (without its size),
    encoded by the general codec; `steady`: every nullable field null."""
    version = draw(st.sampled_from(VERSIONS))
    fields = {"group_id": draw(TEXT), "member_id": draw(TEXT), "member_epoch": draw(INT32),
              "rebalance_timeout_ms": draw(st.sampled_from([-1, 300_000]) | INT32)}
    if not steady:
        fields.update({
            "instance_id": draw(st.none() | st.text(max_size=10)), "rack_id": draw(st.none() | st.text(max_size=10)),
            "subscribed_topic_names": draw(st.none() | st.lists(st.text(max_size=5), max_size=3)),
            "subscribed_topic_regex": draw(st.none() | st.text(max_size=5)) if version >= 1 else None,
            "server_assignor": draw(st.none() | st.text(max_size=6)),
            "topic_partitions": draw(st.none() | st.lists(st.builds(
                m.ConsumerGroupHeartbeatTopicPartitions, topic_id=st.uuids(),
                partitions=st.lists(st.integers(0, 5), max_size=3)), max_size=2))})
    client_id = draw(st.none() | st.text(max_size=12))
    frame = encode_request(RequestHeader(CGH.key, version, draw(INT32), client_id),
                           m.ConsumerGroupHeartbeatRequest(**fields))[4:]
    return frame, version, fields


def _short(text: str) -> bool:
    return len(text.encode()) < 127


def _agrees_with_the_general_path(frame: bytes) -> None:
    read = read_consumer_heartbeat(frame)
    if read is None:
        return
    header, request = decode_request(frame)  # anything the hot path reads, the general path reads
    assert header.api_key == CGH.key
    assert all(getattr(request, name, None) is None for name in NULLABLE)
    assert read == (header.api_version, header.correlation_id, request.group_id, request.member_id.encode(),
                    request.member_epoch, request.rebalance_timeout_ms)


@SETTINGS
@given(heartbeat=heartbeats())
def test_exactly_a_steady_heartbeat_is_read_and_as_the_general_path_reads_it(heartbeat):
    frame, version, fields = heartbeat
    header, request = decode_request(frame)
    read = read_consumer_heartbeat(frame)
    takes = (all(fields.get(name) is None for name in NULLABLE)
             and _short(fields["group_id"]) and _short(fields["member_id"]))
    if takes:
        assert read == (version, header.correlation_id, fields["group_id"], fields["member_id"].encode(),
                        fields["member_epoch"], fields["rebalance_timeout_ms"])
    else:
        assert read is None
    _agrees_with_the_general_path(frame)


@SETTINGS
@given(heartbeat=heartbeats(steady=True))
def test_steady_heartbeats_with_short_ids_are_read(heartbeat):
    frame, version, fields = heartbeat  # not vacuous: most of what the first test draws has a field set
    assert (read_consumer_heartbeat(frame) is not None) == (_short(fields["group_id"]) and _short(fields["member_id"]))


@SETTINGS
@given(heartbeat=heartbeats(steady=True), mutations=st.lists(_MUTATION, min_size=1, max_size=4))
def test_a_mutated_heartbeat_is_declined_or_read_as_the_general_path_reads_it(heartbeat, mutations):
    _agrees_with_the_general_path(mutate(heartbeat[0], mutations))


@SETTINGS
@given(heartbeat=heartbeats(steady=True), data=st.data())
def test_a_truncated_or_extended_heartbeat_is_declined(heartbeat, data):
    frame = heartbeat[0]
    cut = data.draw(st.integers(0, len(frame) - 1))
    assert read_consumer_heartbeat(frame[:cut]) is None
    assert read_consumer_heartbeat(frame + data.draw(st.binary(min_size=1, max_size=4))) is None


@SETTINGS
@given(version=st.sampled_from(VERSIONS), rest=st.binary(max_size=60), client_id=st.none() | st.binary(max_size=8))
def test_random_bytes_after_a_header_are_declined_or_agree(version, rest, client_id):
    _agrees_with_the_general_path(request_header(CGH.key, version, 7, client_id) + b"\x00" + rest)
    _agrees_with_the_general_path(request_header(CGH.key, version, 7, client_id) + rest)


def test_what_the_general_path_must_see_is_declined():
    def frame(version=1, client_id=b"c", header_tags=b"\x00", tail=None, body_tags=b"\x00"):
        null_fields = b"\x00" * (6 if version >= 1 else 5)  # the nullable fields after the timeout, one each
        tail = tail if tail is not None else b"\x00\x00" + struct.pack(">i", -1) + null_fields[2:]
        return (request_header(CGH.key, version, 7, client_id) + header_tags + b"\x02g\x02m"
                + struct.pack(">i", 3) + tail + body_tags)

    assert read_consumer_heartbeat(frame()) == (1, 7, "g", b"m", 3, -1)
    assert read_consumer_heartbeat(frame(version=0)) == (0, 7, "g", b"m", 3, -1)
    assert decode_request(frame())[1].member_epoch == 3
    declined = [frame(version=2), frame(client_id=b"\xff"), frame(header_tags=b"\x01\x00\x00"),
                frame(body_tags=b"\x01\x00\x00"),
                frame(tail=b"\x02i\x00" + struct.pack(">i", -1) + b"\x00" * 4),  # an instance id
                frame(tail=b"\x00\x00" + struct.pack(">i", -1) + b"\x01" + b"\x00" * 3)]  # empty subscription
    for f in declined:
        assert read_consumer_heartbeat(f) is None
    # the header's tagged field and an empty subscription are read by the general path
    assert decode_request(frame(header_tags=b"\x01\x00\x00"))[1].member_id == "m"
    assert decode_request(declined[-1])[1].subscribed_topic_names == []


@settings(max_examples=100, deadline=None)
@given(version=st.sampled_from(VERSIONS), correlation_id=INT32, member_id=st.text(max_size=40).filter(_short),
       epoch=INT32, interval=st.integers(0, 2**31 - 1))
def test_the_answer_is_what_the_codec_writes(version, correlation_id, member_id, epoch, interval):
    answer = consumer_heartbeat_answer(version, correlation_id, member_id.encode(), epoch, interval)
    assert answer == encode_response(RequestHeader(CGH.key, version, correlation_id, "c"),
                                     m.ConsumerGroupHeartbeatResponse(
                                         error_code=0, member_id=member_id, member_epoch=epoch,
                                         heartbeat_interval_ms=interval, assignment=None))


def test_an_answer_with_an_assignment_is_not_what_it_writes():
    """The test above can fail: the codec's answer with an (empty) assignment differs."""
    answer = consumer_heartbeat_answer(1, 7, b"m", 3, 5000)
    with_one = encode_response(RequestHeader(CGH.key, 1, 7, "c"), m.ConsumerGroupHeartbeatResponse(
        error_code=0, member_id="m", member_epoch=3, heartbeat_interval_ms=5000,
        assignment=m.ConsumerGroupHeartbeatAssignment(topic_partitions=[
            m.ConsumerGroupHeartbeatTopicPartitions(topic_id=uuid.UUID(int=1), partitions=[0])])))
    assert answer != with_one
