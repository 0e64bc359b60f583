"""The `brokers` topic source: topics, partitions, leaders and topic ids learned from the
brokers' Metadata API, against the stand-in broker (tests/support/standin_broker.py), whose
answers are first checked with kafka-python's own protocol classes."""

from __future__ import annotations

import socket
import struct
import threading
import uuid

import pytest
import trio

from tools.kafka_admin import read_exactly
from tools.bench.kafka_python import from_reference, reference_class
from coordinator.store.zkserver import free_port
from coordinator.topics.brokers import BrokerTopics
from coordinator.topics.view import NO_TOPIC_ID, PartitionState, TopicChange
from protocol import RequestHeader, decode_response, encode_request
from protocol.messages import build
from protocol.schemas import METADATA
from tests.support.protocol_values import as_dict
from tests.support.standin_broker import StandInBroker

FIRST, SECOND = uuid.UUID(int=0x1111), uuid.UUID(int=0x2222)


@pytest.fixture
def standin():
    broker = StandInBroker({}, {"events": (3, FIRST), "audit": (1, SECOND)}).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.parametrize("version", range(1, 13))
def test_the_standin_answers_metadata_as_kafka_python_reads_it(standin, version):
    with socket.create_connection(("127.0.0.1", standin.port), timeout=10) as sock:
        sock.sendall(encode_request(RequestHeader(METADATA.key, version, 7, "t"),
                                    build(METADATA.request.struct, {"topics": None})))
        frame = read_exactly(sock, struct.unpack(">i", read_exactly(sock, 4))[0])
    correlation_id, ours = decode_response(METADATA.key, version, frame)
    body = frame[5:] if version in METADATA.response.flexible else frame[4:]  # after the response header
    kp = reference_class(METADATA.response)
    theirs = from_reference(kp.fields, METADATA.response.struct, kp[version].decode(body), version)
    assert correlation_id == 7 and theirs == as_dict(METADATA.response.struct, ours, version)
    assert [(b["node_id"], b["port"]) for b in theirs["brokers"]] == [(1, standin.port)]
    topics = {t["name"]: t for t in theirs["topics"]}
    assert sorted(topics) == ["audit", "events"]
    assert [p["leader_id"] for p in topics["events"]["partitions"]] == [1, 1, 1]
    if version >= 10:
        assert topics["events"]["topic_id"] == FIRST and topics["audit"]["topic_id"] == SECOND


async def _until(condition, timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)


def _drain(changes) -> list[TopicChange]:
    said = []
    while True:
        try:
            said.append(changes.receive_nowait())
        except trio.WouldBlock:
            return said


async def test_topics_leaders_and_ids_are_learned_and_every_change_announced(standin):
    topics = BrokerTopics([("127.0.0.1", standin.port)], max_age=0.1)
    changes = topics.subscribe()
    async with trio.open_nursery() as nursery:
        await nursery.start(topics.run)
        assert topics.partitions == {"events": 3, "audit": 1}  # learned before it started
        assert topics.topic_ids == {"events": FIRST, "audit": SECOND}
        assert topics.states[("events", 2)] == PartitionState(1, (1,), 0)
        assert [(b.id, b.port) for b in topics.brokers.values()] == [(1, standin.port)]
        assert topics.api_versions[METADATA.key] == (0, 12)
        assert topics.age() < 1
        assert sorted(_drain(changes), key=lambda c: c.topic) == [TopicChange("audit", 0, 1),
                                                                  TopicChange("events", 0, 3)]
        standin.topics["events"] = (5, FIRST)  # grown
        await _until(lambda: topics.partitions["events"] == 5)
        standin.topics["clicks"] = (2, uuid.UUID(int=3))  # created
        del standin.topics["audit"]  # deleted
        await _until(lambda: "clicks" in topics.partitions and "audit" not in topics.partitions)
        standin.topics["events"] = (5, uuid.UUID(int=4))  # deleted and created again between two reads
        await _until(lambda: topics.topic_ids["events"] == uuid.UUID(int=4))
        said = _drain(changes)
        assert said[0] == TopicChange("events", 3, 5)
        assert sorted(said[1:3], key=lambda c: c.topic) == [TopicChange("audit", 1, 0), TopicChange("clicks", 0, 2)]
        assert said[3:] == [TopicChange("events", 0, 5, recreated=True)]
        assert ("audit", 0) not in topics.states
        nursery.cancel_scope.cancel()


async def test_a_topic_a_member_wants_is_asked_for_at_once(standin):
    topics = BrokerTopics([("127.0.0.1", standin.port)], max_age=3600)
    async with trio.open_nursery() as nursery:
        await nursery.start(topics.run)
        standin.topics["late"] = (4, uuid.UUID(int=5))
        await trio.sleep(0.3)
        assert "late" not in topics.partitions  # nothing asks for an hour...
        topics.want("late")
        await _until(lambda: topics.partitions.get("late") == 4, timeout=2)  # ...unless a member wants it
        nursery.cancel_scope.cancel()


async def test_brokers_without_topic_ids_still_give_partitions_and_leaders():
    broker = StandInBroker({}, {"events": (2, FIRST)}, metadata_versions=(0, 8)).start()
    try:
        topics = BrokerTopics([("127.0.0.1", broker.port)], max_age=60)
        async with trio.open_nursery() as nursery:
            await nursery.start(topics.run)
            assert topics.partitions == {"events": 2} and topics.topic_ids == {"events": NO_TOPIC_ID}
            assert topics.api_versions[METADATA.key] == (0, 8)
            nursery.cancel_scope.cancel()
        assert (METADATA.key, 8) in broker.requests
    finally:
        broker.stop()


async def test_a_broker_restarted_on_another_port_among_the_bootstrap_addresses():
    first_port, second_port = free_port(), free_port()
    table = {"events": (3, FIRST)}
    first = StandInBroker({}, table, port=first_port).start()
    topics = BrokerTopics([("127.0.0.1", first_port), ("127.0.0.1", second_port)], max_age=0.1, timeout=2)
    second = None
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(topics.run)
            assert topics.partitions == {"events": 3}
            first.stop()
            table["clicks"] = (1, SECOND)
            second = StandInBroker({}, table, port=second_port).start()
            await _until(lambda: "clicks" in topics.partitions, timeout=10)
            assert [b.port for b in topics.brokers.values()] == [second_port]
            nursery.cancel_scope.cancel()
    finally:
        first.stop()
        if second is not None:
            second.stop()


class _Garbage:
    """A server that answers every connection with bytes that are no Kafka answer."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(65536)
                connection.sendall(struct.pack(">i", 6) + b"\xff" * 6)

    def close(self) -> None:
        self.listener.close()


async def test_unreachable_and_garbage_brokers_are_left_for_one_that_answers(standin):
    garbage = _Garbage()
    dead = free_port()
    try:
        topics = BrokerTopics([("127.0.0.1", dead), ("127.0.0.1", garbage.port), ("127.0.0.1", standin.port)],
                              max_age=60, timeout=2)
        async with trio.open_nursery() as nursery:
            await nursery.start(topics.run)
            assert topics.partitions == {"events": 3, "audit": 1}
            nursery.cancel_scope.cancel()
    finally:
        garbage.close()


async def test_no_broker_at_start_up_delays_nothing_and_is_retried_until_one_answers(caplog):
    port = free_port()
    topics = BrokerTopics([("127.0.0.1", port)], max_age=0.5, timeout=2)
    broker = None
    try:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(5):
                await nursery.start(topics.run)  # started after one round, answered or not
            assert topics.partitions == {} and topics.age() == float("inf")
            broker = StandInBroker({}, {"events": (2, FIRST)}, port=port).start()
            await _until(lambda: topics.partitions.get("events") == 2, timeout=10)
            assert topics.age() < 5
            nursery.cancel_scope.cancel()
    finally:
        if broker is not None:
            broker.stop()
