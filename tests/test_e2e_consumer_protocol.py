"""Unmodified librdkafka consumers speaking KIP-848's consumer protocol
(`group.protocol=consumer`) to a real `groupkeeper run`: the coordinator assigns, and
members reconcile a step per heartbeat."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition as CKPartition

from tests.clients import CK, poll_until
from tests.coordinator_process import CoordinatorProcess

TOPIC, PARTITIONS = "orders", 6
ALL = {(TOPIC, p) for p in range(PARTITIONS)}
FAST = {"group_consumer_heartbeat_interval_ms": 300, "group_consumer_session_timeout_ms": 6000}


@pytest.fixture
def groupkeeper(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, **FAST)
    process.start()
    process.topic(TOPIC, PARTITIONS)
    try:
        yield process
    finally:
        assert process.stop() == 0


def consumer(groupkeeper, group: str, *topics: str, **config) -> CK:
    return CK(groupkeeper.bootstrap, group, *(topics or (TOPIC,)), protocol="consumer", **config)


def test_a_consumer_protocol_member_gets_every_partition_and_commits(groupkeeper):
    ck = consumer(groupkeeper, "kip848")
    try:
        poll_until(lambda: ck.assigned == ALL, ck)
        ck.consumer.commit(offsets=[CKPartition(TOPIC, p, 10 + p) for p in range(PARTITIONS)], asynchronous=False)
        committed = ck.consumer.committed([CKPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        assert {p.partition: p.offset for p in committed} == {p: 10 + p for p in range(PARTITIONS)}
    finally:
        ck.consumer.close()


def settled(*members: CK) -> bool:
    """Every partition owned by exactly one member."""
    owned = [tp for m in members for tp in m.assigned]
    return len(owned) == len(set(owned)) == PARTITIONS and set(owned) == ALL


def test_members_reconcile_incrementally_and_only_moved_partitions_are_revoked(groupkeeper):
    first = consumer(groupkeeper, "incremental")
    second = third = None
    try:
        poll_until(lambda: first.assigned == ALL, first)
        second = consumer(groupkeeper, "incremental")
        poll_until(lambda: settled(first, second) and len(second.assigned) == 3, first, second)
        kept = set(first.assigned)
        revoked = set().union(*(tps for kind, tps in first.history if kind == "revoke"))
        assert revoked == ALL - kept  # only what moved was taken back; the rest never stopped
        third = consumer(groupkeeper, "incremental")
        poll_until(lambda: settled(first, second, third) and all(len(m.assigned) == 2 for m in (first, second, third)),
                   first, second, third)
        assert first.assigned <= kept  # sticky: each kept a share of what it had
        before = set(second.assigned)
        third.consumer.close()  # a clean leave (epoch -1): its partitions go to the others at once
        poll_until(lambda: settled(first, second), first, second, timeout=20)
        assert before <= second.assigned
        groupkeeper.wait_for_log("member removed", group="incremental", reason="left")
    finally:
        for member in (first, second):
            if member is not None:
                member.consumer.close()
