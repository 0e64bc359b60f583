"""A consumer group through the life of its coordinator: topics that grow or appear, a
coordinator restart, and a strategy the server does not know (the leader's assignment, or
refused in strict mode). Real clients where they show the behaviour, a raw member where a
client's own decisions would race with the server's."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CKPartition
from kafka import KafkaAdminClient
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from protocol import ErrorCode
from tests.support.clients import CK, RawMember, kp_assigned, kp_consumer, poll_until
from tests.support.coordinator_process import CoordinatorProcess


@pytest.fixture
def groupkeeper(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path)
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_a_partition_increase_rebalances_the_group(groupkeeper):
    groupkeeper.topic("grows", 2)
    c = CK(groupkeeper.bootstrap, "growing", "grows")  # librdkafka: metadata refresh every 5 min
    try:
        poll_until(lambda: c.assigned == {("grows", 0), ("grows", 1)}, c)
        groupkeeper.cli("topics", "alter", "grows", "--partitions", "5")
        poll_until(lambda: c.assigned == {("grows", p) for p in range(5)}, c)
        groupkeeper.wait_for_log("rebalance started", group="growing", reason="partitions of grows changed")
    finally:
        c.consumer.close()


def test_creating_a_subscribed_topic_rebalances_the_group(groupkeeper):
    """Told by the server, not by the member's own metadata: a raw member never looks."""
    groupkeeper.topic("now", 2)
    member = RawMember(groupkeeper.port, "waiting", "now", "later")
    try:
        assert member.join_and_sync() == {"now": [0, 1]}
        assert member.heartbeat() == ErrorCode.NONE
        groupkeeper.topic("later", 3)
        deadline = time.monotonic() + 10
        while member.heartbeat() != ErrorCode.REBALANCE_IN_PROGRESS:
            assert time.monotonic() < deadline, "no rebalance after the topic was created"
            time.sleep(0.05)
        assert member.join_and_sync() == {"now": [0, 1], "later": [0, 1, 2]}
        groupkeeper.wait_for_log("rebalance started", group="waiting", reason="partitions of later changed")
    finally:
        member.close()


def test_a_restarted_coordinator_reloads_the_group_and_its_offsets(groupkeeper):
    groupkeeper.topic("kept", 3)
    c = CK(groupkeeper.bootstrap, "survivor", "kept")
    try:
        poll_until(lambda: len(c.assigned) == 3, c)
        c.consumer.commit(offsets=[CKPartition("kept", p, 70 + p) for p in range(3)], asynchronous=False)
        member = c.consumer.memberid()
        assert groupkeeper.stop() == 0
        groupkeeper.start()
        # the member is known to the restarted coordinator: it carries on, no rejoin as new
        admin = KafkaAdminClient(bootstrap_servers=groupkeeper.bootstrap)
        try:
            described = admin.describe_groups(["survivor"])["survivor"]
            assert described["group_state"] == "Stable"
            assert [m["member_id"] for m in described["members"]] == [member]
            offsets = admin.list_group_offsets({"survivor": None})["survivor"]
            assert {tp.partition: om.offset for tp, om in offsets.items()} == {p: 70 + p for p in range(3)}
        finally:
            admin.close()
        deadline = time.monotonic() + 30
        while True:  # the client reconnects by itself; its next commit lands in the same generation
            c.poll()
            try:
                c.consumer.commit(offsets=[CKPartition("kept", 0, 99)], asynchronous=False)
                break
            except KafkaException:
                assert time.monotonic() < deadline, "no commit accepted after the restart"
        assert c.consumer.committed([CKPartition("kept", 0)], timeout=10)[0].offset == 99
        assert c.consumer.memberid() == member and c.assigned == {("kept", p) for p in range(3)}
        assert [e for e in groupkeeper.events() if e.get("event") == "rebalance started"] == []
    finally:
        c.consumer.close()


class FirstPartitionOnly(RangePartitionAssignor):
    """A client-side strategy the server does not know: the leader gives partition 0 only."""

    name = "first-partition-only"

    @classmethod
    def assign(cls, cluster, members):
        return {m.member_id: ConsumerProtocolAssignment(0, [(t, [0]) for t in sorted(m.metadata.topics)], b"")
                for m in members}


def test_an_unknown_strategy_falls_back_to_the_leaders_assignment(groupkeeper):
    groupkeeper.topic("custom", 4)
    c = kp_consumer(groupkeeper.bootstrap, "own-strategy", "custom",
                    partition_assignment_strategy=[FirstPartitionOnly])
    try:
        poll_until(lambda: kp_assigned(c) == {("custom", 0)}, c)
    finally:
        c.close()


def test_strict_mode_refuses_a_strategy_the_server_cannot_compute(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, strict_assignment=True)
    process.start()
    unknown = RawMember(process.port, "strict", "t", strategies=("first-partition-only",))
    either = RawMember(process.port, "strict", "t", strategies=("first-partition-only", "range"))
    try:
        assert unknown.join().error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert either.join().error_code == ErrorCode.MEMBER_ID_REQUIRED  # accepted: asked for its id
    finally:
        unknown.close()
        either.close()
        assert process.stop() == 0
