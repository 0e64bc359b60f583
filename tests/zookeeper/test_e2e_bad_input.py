"""Bad input against a real `groupkeeper run`: each bad connection is closed (or answered
with the protocol's error where it defines one), with the reason logged, while a real
consumer group on other connections keeps its generation and its committed offsets."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kazoo.client import KazooClient
from kafka import KafkaAdminClient, TopicPartition
from kafka.structs import OffsetAndMetadata

from protocol import ErrorCode, RequestHeader, decode_response, encode_request
from protocol.messages import build
from tools.kafka_admin import NodeConnection
from coordinator.cluster.placement import partition_for
from coordinator.store import layout
from protocol.schemas import (API_VERSIONS, DESCRIBE_GROUPS, FIND_COORDINATOR, JOIN_GROUP, OFFSET_COMMIT,
                              OFFSET_FETCH)
from tests.support.clients import kp_commit, kp_consumer
from tests.support.coordinator_process import CoordinatorProcess

TOPIC, PARTITIONS, GROUP = "payments", 4, "steady"
COMMITTED = {p: 1000 + p for p in range(PARTITIONS)}
MAX_REQUEST_BYTES = 1 << 20


@pytest.fixture(scope="module")
def served(zookeeper, tmp_path_factory):
    """One coordinator and one stable consumer with committed offsets, shared by the cases."""
    process = CoordinatorProcess(zookeeper, tmp_path_factory.mktemp("bad-input"),
                                 max_request_bytes=MAX_REQUEST_BYTES, connections_max_idle_ms=1500,
                                 max_connections=24)
    process.start()
    process.topic(TOPIC, PARTITIONS)
    for name in ("t", "t" * 249):  # offsets are stored only for partitions that exist
        process.topic(name, 1)
    consumer = kp_consumer(process.bootstrap, GROUP, TOPIC)
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < PARTITIONS:
            assert time.monotonic() < deadline, "the consumer got no assignment"
            consumer.poll(timeout_ms=100)
        kp_commit(consumer, {TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in COMMITTED.items()})
        yield process, consumer
        # whatever came before, the member was never dropped, it is in the group's current
        # generation with every partition, and nothing committed was lost
        consumer.poll(timeout_ms=100)
        assert len(consumer.assignment()) == PARTITIONS
        events = [e for e in process.events() if e.get("group") == GROUP]
        assert [e for e in events if e["event"] == "member removed"] == []
        latest = [e["generation"] for e in events if e["event"] == "rebalance completed"][-1]
        assert consumer.group_metadata().generation_id == latest
        assert committed_offsets(process) == COMMITTED
    finally:
        consumer.close()
        assert process.stop() == 0


def committed_offsets(process: CoordinatorProcess) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
    try:
        return {tp.partition: om.offset for tp, om in admin.list_group_offsets({GROUP: None})[GROUP].items()}
    finally:
        admin.close()


def connect(process: CoordinatorProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", process.port), timeout=10)
    return sock


def closed_by_server(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the server closes the connection within `timeout` (nothing else arrives)."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    finally:
        sock.close()
    assert data == b"", f"expected the connection closed, got {data[:40]!r}"
    return True


def header(api_key: int, version: int, correlation_id: int = 7) -> bytes:
    client = b"bad-input"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def assert_closed_with(process, sock, payload: bytes, reason: str) -> None:
    before = len(process.events())
    sock.sendall(payload)
    assert closed_by_server(sock), "the server kept the bad connection open"
    deadline = time.monotonic() + 10
    while not any(e.get("event") == "connection closed" and reason in e.get("reason", "")
                  for e in process.events()[before:]):
        assert time.monotonic() < deadline, f"no 'connection closed' with reason {reason!r} logged"
        time.sleep(0.05)


def still_serving(process, consumer) -> None:
    """Another, well-behaved connection gets answers: an ApiVersions round trip, and the
    group's member keeps heartbeating."""
    with connect(process) as sock:
        sock.sendall(encode_request(RequestHeader(API_VERSIONS.key, 3, 42, "probe"),
                                    build(API_VERSIONS.request.struct, {"client_software_name": "probe",
                                                                 "client_software_version": "1"})))
        correlation_id, body = decode_response(API_VERSIONS.key, 3, read_frame(sock))
    assert correlation_id == 42 and body.error_code == ErrorCode.NONE
    consumer.poll(timeout_ms=100)


def read_frame(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before a whole response"
        data += chunk
    return data[4:]


BAD_FRAMES = {
    "garbage": (b"\x00\x00\x00\x0bnot kafka!!", "undecodable request"),
    "negative size": (struct.pack(">i", -7) + b"abc", "bad frame"),
    "huge size": (struct.pack(">i", 2**31 - 1) + b"\x00" * 64, "bad frame"),
    "over the configured limit": (struct.pack(">i", MAX_REQUEST_BYTES + 1), "bad frame"),
    "unknown api key": (sized(header(999, 0)), "unsupported request: API 999"),
    "unknown version": (sized(header(OFFSET_COMMIT.key, 99)), "unsupported request: API 8 v99"),
    "a version we do not advertise": (sized(header(OFFSET_COMMIT.key, 0) + b"\x00\x00\x00\x00\x00\x00"),
                                      "unsupported request: API 8 v0"),
    "hostile array count": (sized(header(OFFSET_COMMIT.key, 2) + struct.pack(">h", 6) + GROUP.encode()
                                  + struct.pack(">ih", -1, 0) + struct.pack(">q", -1)
                                  + struct.pack(">i", 2**31 - 1)), "undecodable request"),
    # a commit to the live group whose last field lies about its length: nothing of it lands
    "hostile string length": (sized(header(OFFSET_COMMIT.key, 2) + struct.pack(">h", 6) + GROUP.encode()
                                    + struct.pack(">ih", -1, 0) + struct.pack(">q", -1)
                                    + struct.pack(">ih", 1, len(TOPIC)) + TOPIC.encode()
                                    + struct.pack(">iiq", 1, 0, 5) + struct.pack(">h", 30000) + b"x"),
                              "undecodable request"),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
def test_a_bad_frame_closes_only_its_connection(served, case):
    process, consumer = served
    payload, reason = BAD_FRAMES[case]
    assert_closed_with(process, connect(process), payload, reason)
    still_serving(process, consumer)


def test_bytes_in_one_byte_chunks_then_garbage_after_a_good_request(served):
    """A good request trickled in byte by byte is answered; the garbage after it then
    closes the connection."""
    process, consumer = served
    request = encode_request(RequestHeader(API_VERSIONS.key, 0, 9, None), build(API_VERSIONS.request.struct, {}))
    with connect(process) as sock:
        for i in range(len(request)):
            sock.sendall(request[i:i + 1])
        correlation_id, body = decode_response(API_VERSIONS.key, 0, read_frame(sock))
        assert correlation_id == 9 and body.error_code == ErrorCode.NONE
        assert_closed_with(process, sock, b"\x00\x00\x00\x03\xff\xff\xff", "undecodable request")
    still_serving(process, consumer)


def test_an_apiversions_of_an_unknown_version_is_answered_as_v0(served):
    process, consumer = served
    with connect(process) as sock:
        sock.sendall(sized(header(API_VERSIONS.key, 99, correlation_id=5) + b"\x00\x00\x00"))
        correlation_id, body = decode_response(API_VERSIONS.key, 99, read_frame(sock))
    assert correlation_id == 5 and body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}[API_VERSIONS.key] == (0, 4)
    still_serving(process, consumer)


def test_a_truncated_frame_is_closed_by_the_idle_timeout(served):
    process, consumer = served
    with connect(process) as sock:
        request = encode_request(RequestHeader(API_VERSIONS.key, 0, 1, None), build(API_VERSIONS.request.struct, {}))
        sock.sendall(request[:-2])
        assert closed_by_server(sock, timeout=10)
    process.wait_for_log("connection closed", reason="idle timeout")
    still_serving(process, consumer)


def test_connections_over_the_limit_are_refused_and_the_limit_recovers(served):
    process, consumer = served
    opened = [connect(process) for _ in range(30)]  # the limit is 24, the consumer holds some
    try:
        process.wait_for_log("connection refused", reason="max connections reached")
    finally:
        for sock in opened:
            sock.close()
    deadline = time.monotonic() + 10
    while True:  # the closed connections are released; a new one is served
        try:
            still_serving(process, consumer)
            break
        except (AssertionError, ConnectionError):
            assert time.monotonic() < deadline, "no connection served after the others closed"
            time.sleep(0.1)


def test_empty_names_in_the_offset_apis_are_accepted_and_harm_no_batch_neighbour(served):
    """Kafka accepts an empty group id in OffsetCommit/OffsetFetch, and answers an empty topic
    name UNKNOWN_TOPIC_OR_PARTITION (no topic has it). Sent pipelined with commits of other
    groups (flushed together in one ZooKeeper multi()), every other commit is acknowledged and
    reads back."""
    process, _ = served
    groups = ["", *(f"neighbour-{i}" for i in range(20))]
    connection = NodeConnection("127.0.0.1", process.port, 10.0)
    try:
        answers = connection.pipeline(OFFSET_COMMIT, 7, [{
            "group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 10 + i}]}
                       for t in ("", "t")]} for i, g in enumerate(groups)])
        assert [p.error_code for a in answers for t in a.topics for p in t.partitions] == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0] * len(groups)
        fetched = connection.pipeline(OFFSET_FETCH, 5, [{"group_id": g, "topics": None} for g in groups])
        assert [{(t.name, p.partition_index): p.committed_offset for t in f.topics for p in t.partitions}
                for f in fetched] == [{("t", 0): 10 + i} for i in range(len(groups))]
    finally:
        connection.close()


def test_oversized_group_ids_and_topic_names_are_refused_up_front(served):
    """A group id over group_id_max_length (1024) is INVALID_GROUP_ID in every API, a topic
    name over Kafka's 249 characters INVALID_TOPIC_EXCEPTION in a commit, and nothing of
    either reaches ZooKeeper; names at the limits are served."""
    process, _ = served
    huge, longest, topic = "g" * 100_000, "g" * 1024, "t" * 250
    connection = NodeConnection("127.0.0.1", process.port, 10.0)
    try:
        commit = {"generation_id_or_member_epoch": -1, "member_id": "",
                  "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]}
        # flexible versions, whose compact strings may exceed the classic int16 lengths
        refused, = connection.pipeline(OFFSET_COMMIT, 8, [{"group_id": huge, **commit}])
        assert refused.topics[0].partitions[0].error_code == ErrorCode.INVALID_GROUP_ID
        joined, = connection.pipeline(JOIN_GROUP, 6, [{
            "group_id": huge, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}])
        assert joined.error_code == ErrorCode.INVALID_GROUP_ID
        found, = connection.pipeline(FIND_COORDINATOR, 3, [{"key": huge, "key_type": 0}])
        assert found.error_code == ErrorCode.INVALID_GROUP_ID
        fetched, = connection.pipeline(OFFSET_FETCH, 6, [{"group_id": huge, "topics": None}])
        assert fetched.error_code == ErrorCode.INVALID_GROUP_ID
        described, = connection.pipeline(DESCRIBE_GROUPS, 5, [{"groups": [huge]}])
        assert described.groups[0].error_code == ErrorCode.INVALID_GROUP_ID

        mixed, = connection.pipeline(OFFSET_COMMIT, 7, [{"group_id": longest, **commit, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 5}]}
            for name in (topic, "t" * 249)]}])
        assert [t.partitions[0].error_code for t in mixed.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION,
                                                                      ErrorCode.NONE]
    finally:
        connection.close()
    client = KazooClient(hosts=process.zookeeper)
    client.start(timeout=10)
    try:
        stored = [name for n in range(50) for name in client.get_children(layout.groups_path(n))]
        assert layout.escape(longest) in stored and layout.escape(huge) not in stored
        topics = client.get_children(layout.offsets_path(partition_for(longest, 50), longest))
        assert topics == [layout.escape("t" * 249)]
    finally:
        client.stop()
        client.close()
