"""A consumer group through the life of its coordinator, with a real kafka-python client:
topics that grow or appear, a coordinator restart, and the strategy the server does not
know (leader's assignment, or refused in strict mode)."""

from __future__ import annotations

import socket
import struct

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment
from kafka.structs import OffsetAndMetadata

from protocol import ErrorCode, RequestHeader, decode_response, encode_request
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription, build
from protocol.schemas import JOIN_GROUP
from tests.coordinator_process import CoordinatorProcess
from tests.test_e2e_clients import kp_assigned, poll_until


def consumer(process: CoordinatorProcess, group: str, *topics: str, **extra) -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=process.bootstrap, group_id=group, enable_auto_commit=False,
                      session_timeout_ms=6000, heartbeat_interval_ms=300, **extra)
    c.subscribe(list(topics))
    return c


@pytest.fixture
def groupkeeper(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path)
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_a_partition_increase_and_a_new_subscribed_topic_rebalance_the_group(groupkeeper):
    groupkeeper.topic("grows", 2)
    c = consumer(groupkeeper, "growing", "grows", "later")
    try:
        poll_until(lambda: kp_assigned(c) == {("grows", 0), ("grows", 1)}, c)
        groupkeeper.cli("topics", "alter", "grows", "--partitions", "5")
        poll_until(lambda: kp_assigned(c) == {("grows", p) for p in range(5)}, c)
        groupkeeper.wait_for_log("rebalance started", group="growing", reason="partitions of grows changed")
        groupkeeper.topic("later", 3)
        poll_until(lambda: {t for t, _ in kp_assigned(c)} == {"grows", "later"}, c)
        assert kp_assigned(c) == {("grows", p) for p in range(5)} | {("later", p) for p in range(3)}
        groupkeeper.wait_for_log("rebalance started", group="growing", reason="partitions of later changed")
    finally:
        c.close()


def test_a_restarted_coordinator_reloads_the_group_and_its_offsets(groupkeeper):
    groupkeeper.topic("kept", 3)
    c = consumer(groupkeeper, "survivor", "kept")
    try:
        poll_until(lambda: len(kp_assigned(c)) == 3, c)
        c.commit({TopicPartition("kept", p): OffsetAndMetadata(70 + p, "before", -1) for p in range(3)})
        member = c.group_metadata().member_id
        assert groupkeeper.stop() == 0
        groupkeeper.start()
        # the member is known to the restarted coordinator: it carries on, no rejoin as new
        admin = KafkaAdminClient(bootstrap_servers=groupkeeper.bootstrap)
        try:
            described = admin.describe_groups(["survivor"])["survivor"]
            assert described["group_state"] == "Stable"
            assert [m["member_id"] for m in described["members"]] == [member]
            offsets = admin.list_group_offsets({"survivor": None})["survivor"]
            assert {tp.partition: (om.offset, om.metadata) for tp, om in offsets.items()} == {
                p: (70 + p, "before") for p in range(3)}
        finally:
            admin.close()
        c.commit({TopicPartition("kept", 0): OffsetAndMetadata(99, "after", -1)})  # same generation
        assert c.committed(TopicPartition("kept", 0)) == 99
        assert c.group_metadata().member_id == member
    finally:
        c.close()


class FirstPartitionOnly(RangePartitionAssignor):
    """A client-side strategy the server does not know: the leader gives partition 0 only."""

    name = "first-partition-only"

    @classmethod
    def assign(cls, cluster, members):
        return {m.member_id: ConsumerProtocolAssignment(0, [(t, [0]) for t in sorted(m.metadata.topics)], b"")
                for m in members}


def test_an_unknown_strategy_falls_back_to_the_leaders_assignment(groupkeeper):
    groupkeeper.topic("custom", 4)
    c = consumer(groupkeeper, "own-strategy", "custom", partition_assignment_strategy=[FirstPartitionOnly])
    try:
        poll_until(lambda: kp_assigned(c) == {("custom", 0)}, c)
    finally:
        c.close()


def test_strict_mode_refuses_a_strategy_the_server_cannot_compute(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, strict_assignment=True)
    process.start()
    try:
        subscription = encode_subscription(ConsumerProtocolSubscription(topics=["t"]), 0)

        def join(*names: str) -> ErrorCode:
            request = build(JOIN_GROUP.request.struct, {
                "group_id": "strict", "session_timeout_ms": 6000, "rebalance_timeout_ms": 6000,
                "member_id": "", "protocol_type": "consumer",
                "protocols": [{"name": n, "metadata": subscription} for n in names]})
            with socket.create_connection(("127.0.0.1", process.port), timeout=10) as sock:
                sock.sendall(encode_request(RequestHeader(JOIN_GROUP.key, 5, 1, "strict-test"), request))
                size = struct.unpack(">i", _read(sock, 4))[0]
                return decode_response(JOIN_GROUP.key, 5, _read(sock, size))[1].error_code

        assert join("first-partition-only") == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert join("first-partition-only", "range") == ErrorCode.MEMBER_ID_REQUIRED  # accepted
    finally:
        assert process.stop() == 0


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data
