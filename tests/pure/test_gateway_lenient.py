"""Liberal in what groupkeeper accepts from brokers, as Kafka's clients are (issue 38), and
strict with clients, as Kafka is: answers with bytes past their schema read and rewritten,
an ApiVersions refusal that does not read asked again at v0 (librdkafka's mock cluster does
both), a Fetch answer the walk cannot follow passed on as it came; and connection churn
logged once per burst."""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing

from coordinator.gateway.rewrite import rewrite_frame
from coordinator.serving.connection import CHURN_RELOG_SECONDS, CHURN_SECONDS, Churn
from coordinator.topics.brokers import BrokerConnection
from protocol import (DecodeError, FrameReader, RequestHeader, decode_broker_response, decode_request,
                      decode_response, encode_request, encode_response)
from protocol.fetch_stream import FetchWalk
from protocol.messages import build
from protocol.schemas import API_VERSIONS, FETCH, METADATA, PRODUCE
from tests.pure.test_gateway_rewrite import (ANSWERS, ENDPOINTS, EXPOSED, EXTRA, METADATA_ANSWER, at_gateway,
                                             kip951_leaders, kp_frame, kp_read, project, versions)

PAST = b"\x00"  # what librdkafka's mock cluster adds to its Metadata v9+ answers


@pytest.mark.parametrize("version", versions(METADATA))
def test_a_metadata_answer_with_bytes_past_its_schema_is_read_and_rewritten_without_them(version):
    message = METADATA.response
    data = kp_frame(message, project(message.struct, version, METADATA_ANSWER), version, 77)
    with pytest.raises(DecodeError, match="left over"):  # our codec stays strict where asked to be
        decode_response(METADATA.key, version, data[4:] + PAST)
    correlation_id, body, past = decode_broker_response(METADATA.key, version, data[4:] + PAST)
    assert correlation_id == 77 and past and body == decode_response(METADATA.key, version, data[4:])[1]
    assert decode_broker_response(METADATA.key, version, data[4:])[2] is False

    seen = []
    out = rewrite_frame(METADATA.key, version, data[4:] + PAST, EXPOSED.get, EXTRA, past=lambda: seen.append(1))
    assert seen == [1]
    assert out == rewrite_frame(METADATA.key, version, data[4:], EXPOSED.get, EXTRA)  # the extra byte dropped
    assert kp_read(message, out, version)[0] == 77


def test_an_answer_that_does_not_read_even_so_is_refused_with_the_strict_reason():
    data = kp_frame(METADATA.response, project(METADATA.response.struct, 12, METADATA_ANSWER), 12, 1)
    with pytest.raises(DecodeError):
        decode_broker_response(METADATA.key, 12, data[4:-30])
    with pytest.raises(DecodeError):
        rewrite_frame(METADATA.key, 12, data[4:-30], EXPOSED.get, EXTRA, past=lambda: None)


def test_requests_from_clients_stay_strict():
    frame = encode_request(RequestHeader(API_VERSIONS.key, 3, 1, "c"), build(
        API_VERSIONS.request.struct, {"client_software_name": "c", "client_software_version": "1"}))
    decode_request(frame[4:])
    with pytest.raises(DecodeError, match="left over"):
        decode_request(frame[4:] + b"\x00")


@pytest.mark.parametrize("api", [PRODUCE, FETCH], ids=lambda a: a.name)
def test_produce_and_fetch_with_bytes_past_their_tagged_fields(api):
    version = api.versions.high
    message = api.response
    seen = []
    vals = project(message.struct, version, ANSWERS[api.key])
    data = kp_frame(message, vals, version, 5, tweak=kip951_leaders(api))
    out = rewrite_frame(api.key, version, data[4:] + PAST, EXPOSED.get, past=lambda: seen.append(1))
    assert seen == [1]  # rewritten (node endpoints named): the extra bytes dropped
    assert out == rewrite_frame(api.key, version, data[4:], EXPOSED.get)
    assert kp_read(message, out, version)[1]["node_endpoints"] == [at_gateway(ENDPOINTS[0], 1)]

    bare = kp_frame(message, {**vals, "node_endpoints": []}, version, 5, tweak=kip951_leaders(api))
    out = rewrite_frame(api.key, version, bare[4:] + PAST, EXPOSED.get, past=lambda: seen.append(2))
    assert seen == [1, 2] and out == struct.pack(">i", len(bare) - 3) + bare[4:] + PAST  # as it came, kept


def test_a_fetch_walk_that_fails_says_what_it_held_before_the_part():
    message, version = FETCH.response, 12
    data = kp_frame(message, project(message.struct, version, ANSWERS[FETCH.key]), version, 3)
    data = struct.pack(">i", len(data) - 4 + 3) + data[4:] + b"abc"  # three bytes past its fields
    walk = FetchWalk(version, len(data) - 4)
    assert not walk.fixes
    cut = len(data) - 10
    assert walk.feed(data[:cut]) == cut  # all of it may go
    with pytest.raises(DecodeError, match="after its fields"):
        walk.feed(data[cut:])
    assert walk.unsent() == b""  # nothing held back before the failing part: the relay passes that part on
    assert FetchWalk(16, 100, fix=lambda b: b).fixes


# -- ApiVersions, as librdkafka's mock cluster refuses v3 -------------------------------------

# the mock's answer to ApiVersions v3 after the correlation id: UNSUPPORTED_VERSION, then a
# flexible array where v0's INT32 count is read (seen from librdkafka 2.16.0's mock)
MOCK_REFUSAL = bytes.fromhex("0023" "01" "0012" "0000" "0002" "00000000")


async def _fake_broker(stream, asked: list[int]) -> None:
    reader = FrameReader(1 << 20)
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        reader.feed(data)
        for frame in reader.frames():
            header, _ = decode_request(frame)
            asked.append(header.api_version)
            if header.api_version >= 3:
                body = MOCK_REFUSAL
                await stream.send_all(struct.pack(">ii", 4 + len(body), header.correlation_id) + body)
            else:
                await stream.send_all(encode_response(header, build(API_VERSIONS.response.struct, {
                    "error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12},
                                                  {"api_key": 18, "min_version": 0, "max_version": 2}]})))


async def test_an_apiversions_refusal_that_does_not_read_is_asked_again_at_v0():
    with pytest.raises(DecodeError):  # what groupkeeper met before: never asked v0, never learned the brokers
        decode_response(API_VERSIONS.key, 3, struct.pack(">i", 1) + MOCK_REFUSAL)
    ours, theirs = trio.testing.memory_stream_pair()
    asked: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_fake_broker, theirs, asked)
        connection = BrokerConnection(("mock", 1), ours, None)
        with trio.fail_after(10):
            assert await connection.api_versions() == {3: (0, 12), 18: (0, 2)}
        assert asked == [3, 0]
        await ours.aclose()


# -- connection churn ------------------------------------------------------------------------

def test_a_burst_of_closes_is_one_line_and_a_burst_that_lasts_one_a_minute():
    now = [0.0]
    churn = Churn(clock=lambda: now[0])
    assert churn.closed("10.0.0.1", "broker link: closed by the broker") == 0  # the burst's line
    for _ in range(50):  # 20 a second: folded
        now[0] += 0.05
        assert churn.closed("10.0.0.1", "broker link: closed by the broker") is None
    assert churn.closed("10.0.0.2", "broker link: closed by the broker") == 0  # another address: its own
    assert churn.closed("10.0.0.1", "idle timeout") == 0  # another reason: its own
    quiet = 50
    while (folded := churn.closed("10.0.0.1", "broker link: closed by the broker")) is None:  # a burst that goes on
        quiet += 1
        now[0] += 1.0
    assert now[0] >= CHURN_RELOG_SECONDS and folded == quiet  # a minute on, a line with what was folded
    now[0] += CHURN_SECONDS  # quiet long enough: the next close starts a burst of its own
    assert churn.closed("10.0.0.1", "broker link: closed by the broker") == 0
