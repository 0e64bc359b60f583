"""The heartbeat's hot path (`protocol.hot`) against the general codec and kafka-python.

Whatever `read_heartbeat` reads, `decode_request` reads the same; what it declines is only
what the general path must answer (a static member's heartbeat, lengths it does not take
in one byte) or refuse. Its answers are the bytes `encode_response` writes, and what
kafka-python reads as NONE.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.bench.kafka_python import reference_class, reference_object
from protocol import DecodeError, RequestHeader, decode_request, encode_response
from protocol import messages as m
from protocol.hot import heartbeat_answer, read_heartbeat
from protocol.schemas import HEARTBEAT
from tests.pure.test_protocol_robustness import _MUTATION, mutate, request_header

VERSIONS = range(HEARTBEAT.versions.low, HEARTBEAT.versions.high + 1)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
INT32 = st.integers(-(2**31), 2**31 - 1)


@st.composite
def heartbeats(draw):
    """(frame, version, correlation id, group id, generation, member id, instance id): a
    whole heartbeat frame (without its size), its body encoded by kafka-python."""
    version = draw(st.sampled_from(VERSIONS))
    correlation_id = draw(INT32)
    client_id = draw(st.none() | st.text(max_size=12))
    group_id, member_id = draw(st.text(max_size=80)), draw(st.text(max_size=80))
    generation = draw(INT32)
    instance_id = draw(st.none() | st.text(max_size=20)) if version >= 3 else None
    body = reference_object(HEARTBEAT.request, {
        "group_id": group_id, "generation_id": generation, "member_id": member_id,
        "group_instance_id": instance_id}, version).encode()
    head = request_header(HEARTBEAT.key, version, correlation_id,
                          None if client_id is None else client_id.encode())
    if version in HEARTBEAT.request.flexible:
        head += b"\x00"  # the header's (empty) tagged fields
    return head + bytes(body), version, correlation_id, group_id, generation, member_id, instance_id


def _short(text: str) -> bool:
    return len(text.encode()) < 127


@SETTINGS
@given(heartbeat=heartbeats())
def test_what_kafka_python_encodes_is_read_as_the_general_path_reads_it(heartbeat):
    frame, version, correlation_id, group_id, generation, member_id, instance_id = heartbeat
    header, request = decode_request(frame)
    assert (request.group_id, request.generation_id, request.member_id) == (group_id, generation, member_id)
    read = read_heartbeat(frame)
    takes = instance_id is None and (version < 4 or (_short(group_id) and _short(member_id)))
    if takes:
        assert read == (version, correlation_id, group_id, generation, member_id)
    else:
        assert read is None


def _agrees_with_the_general_path(frame: bytes) -> None:
    read = read_heartbeat(frame)
    if read is None:
        return
    header, request = decode_request(frame)  # anything the hot path reads, the general path reads
    assert (header.api_key, request.group_instance_id) == (HEARTBEAT.key, None)
    assert read == (header.api_version, header.correlation_id, request.group_id, request.generation_id,
                    request.member_id)


@SETTINGS
@given(heartbeat=heartbeats(), mutations=st.lists(_MUTATION, min_size=1, max_size=4))
def test_a_mutated_heartbeat_is_declined_or_read_as_the_general_path_reads_it(heartbeat, mutations):
    _agrees_with_the_general_path(mutate(heartbeat[0], mutations))


@SETTINGS
@given(heartbeat=heartbeats(), data=st.data())
def test_a_truncated_or_extended_heartbeat_is_declined(heartbeat, data):
    frame = heartbeat[0]
    cut = data.draw(st.integers(0, len(frame) - 1))
    assert read_heartbeat(frame[:cut]) is None
    assert read_heartbeat(frame + data.draw(st.binary(min_size=1, max_size=4))) is None


@SETTINGS
@given(version=st.sampled_from(VERSIONS), rest=st.binary(max_size=60), client_id=st.none() | st.binary(max_size=8))
def test_random_bytes_after_a_heartbeat_header_are_declined_or_agree(version, rest, client_id):
    _agrees_with_the_general_path(request_header(HEARTBEAT.key, version, 7, client_id) + rest)


def test_what_the_general_path_refuses_is_declined():
    good = request_header(HEARTBEAT.key, 1, 7, b"c") + struct.pack(">h", 1) + b"g" + struct.pack(">ih", 2, 1) + b"m"
    assert read_heartbeat(good) == (1, 7, "g", 2, "m")
    not_utf8 = request_header(HEARTBEAT.key, 1, 7, b"\xff") + good[11:]
    for frame in (not_utf8, request_header(HEARTBEAT.key, 5, 7, b"c") + good[11:],
                  request_header(HEARTBEAT.key + 1, 1, 7, b"c") + good[11:]):
        assert read_heartbeat(frame) is None
    try:
        decode_request(not_utf8)
    except DecodeError:
        pass
    else:
        raise AssertionError("a client id that is not UTF-8 was decoded")
    # a header's tagged field (v4) is the general path's to read
    flexible = request_header(HEARTBEAT.key, 4, 7, b"c") + b"\x01\x00\x00" + b"\x02g" + struct.pack(">i", 2) + b"\x02m\x00\x00"
    assert decode_request(flexible)[1].member_id == "m"
    assert read_heartbeat(flexible) is None


@settings(max_examples=50, deadline=None)
@given(version=st.sampled_from(VERSIONS), correlation_id=INT32)
def test_the_answer_is_what_the_codec_writes_and_kafka_python_reads_as_none(version, correlation_id):
    answer = heartbeat_answer(version, correlation_id)
    assert answer == encode_response(RequestHeader(HEARTBEAT.key, version, correlation_id, "c"),
                                     m.HeartbeatResponse(error_code=0))
    size, their_id = struct.unpack_from(">ii", answer)
    assert (size, their_id) == (len(answer) - 4, correlation_id)
    body = answer[9:] if version in HEARTBEAT.response.flexible else answer[8:]
    decoded = reference_class(HEARTBEAT.response)[version].decode(body)
    assert decoded.error_code == 0
