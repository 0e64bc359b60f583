"""Offsets only for partitions that exist (issue 38, item 6), with confluent-kafka
(librdkafka) against a real `groupkeeper run` and ZooKeeper, as librdkafka's own tests
`0030 do_nonexist_commit` and `0081` ("nonexistent topics") expect of Kafka: each partition
of a topic that does not exist, and each partition past a known topic's count, is answered
UNKNOWN_TOPIC_OR_PARTITION and not stored; the others of the same request are stored. A
topic created a moment before the commit is stored, whatever the coordinator's view heard."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError
from confluent_kafka import TopicPartition as CKPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from protocol import ErrorCode
from protocol.schemas import OFFSET_COMMIT
from tests.support.clients import CK, RawConnection, poll_until
from tests.support.coordinator_process import serving

TOPIC, PARTITIONS = "orders", 2
UNKNOWN = KafkaError.UNKNOWN_TOPIC_OR_PART


@pytest.fixture
def groupkeeper(zookeeper, tmp_path):
    with serving(zookeeper, tmp_path, {TOPIC: PARTITIONS}) as process:
        yield process


def stored(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """What the group has committed, as an admin client lists it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(p.topic, p.partition): p.offset for p in future.result(timeout=30).topic_partitions if p.offset >= 0}


def test_a_standalone_consumers_commit_to_what_does_not_exist_is_refused_per_partition(groupkeeper):
    """A consumer that assigns itself and commits (generation -1), as 0030 does."""
    outcomes: list = []
    consumer = Consumer({"bootstrap.servers": groupkeeper.bootstrap, "group.id": "standalone",
                         "enable.auto.commit": False, "log_level": 3,
                         "on_commit": lambda err, partitions: outcomes.append((err, partitions))})
    try:
        consumer.commit(offsets=[CKPartition("nonexistent", 0, 5), CKPartition(TOPIC, 0, 7),
                                 CKPartition(TOPIC, 5, 9), CKPartition(TOPIC, 1, 8)], asynchronous=True)
        _wait(consumer, outcomes)
        err, partitions = outcomes[0]
        # librdkafka reports the request's first partition error on every partition (0030
        # expects the commit to fail so); what was answered per partition is checked below
        assert err.code() == UNKNOWN
        assert {(p.topic, p.partition) for p in partitions} == {("nonexistent", 0), (TOPIC, 0), (TOPIC, 5), (TOPIC, 1)}
        assert stored(groupkeeper.bootstrap, "standalone") == {(TOPIC, 0): 7, (TOPIC, 1): 8}

        # created a moment ago, the coordinator's view not waited for: stored, not refused
        groupkeeper.cli("topics", "create", "fresh", "--partitions", "1")
        outcomes.clear()
        consumer.commit(offsets=[CKPartition("fresh", 0, 3)], asynchronous=True)
        _wait(consumer, outcomes)
        assert outcomes[0][0] is None and [_code(p) for p in outcomes[0][1]] == [None]
        assert stored(groupkeeper.bootstrap, "standalone") == {(TOPIC, 0): 7, (TOPIC, 1): 8, ("fresh", 0): 3}
    finally:
        consumer.close()


def test_alter_consumer_group_offsets_to_a_topic_that_does_not_exist(groupkeeper):
    """AdminClient.alterConsumerGroupOffsets, as 0081 "nonexistent topics" sends it."""
    admin = AdminClient({"bootstrap.servers": groupkeeper.bootstrap})
    request = ConsumerGroupTopicPartitions("altered", [CKPartition(TOPIC, 1, 11), CKPartition("nonexistent", 0, 3),
                                                       CKPartition("nonexistent", 1, 4)])
    future = admin.alter_consumer_group_offsets([request])["altered"]
    result = {(p.topic, p.partition): _code(p) for p in future.result(timeout=30).topic_partitions}
    assert result == {(TOPIC, 1): None, ("nonexistent", 0): UNKNOWN, ("nonexistent", 1): UNKNOWN}
    assert stored(groupkeeper.bootstrap, "altered") == {(TOPIC, 1): 11}


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_members_commit_stores_only_what_exists(groupkeeper, protocol):
    """A member of a classic group, and of a KIP-848 consumer group (OffsetCommit v9, member
    epochs), commits its partitions with one that does not exist in the same request."""
    outcomes: list = []
    member = CK(groupkeeper.bootstrap, f"members-{protocol}", TOPIC, protocol=protocol,
                on_commit=lambda err, partitions: outcomes.append((err, partitions)))
    everything = {(TOPIC, p) for p in range(PARTITIONS)}
    try:
        poll_until(lambda: member.assigned == everything, member)
        member.consumer.commit(offsets=[CKPartition(TOPIC, 0, 20), CKPartition(TOPIC, 1, 21),
                                        CKPartition("gone", 0, 22)], asynchronous=True)
        _wait(member.consumer, outcomes)
        assert outcomes[0][0].code() == UNKNOWN
    finally:
        member.consumer.close()
    assert stored(groupkeeper.bootstrap, f"members-{protocol}") == {(TOPIC, 0): 20, (TOPIC, 1): 21}


def test_a_topic_deleted_under_a_classic_group_rebalances_and_takes_no_offsets(groupkeeper):
    """groupkeeper rebalances a classic group whose subscribed topic is deleted (a departure
    from Kafka, docs/architecture.md): librdkafka sees an ordinary revocation, not "assignment
    lost"; offsets the application then commits for the deleted topic (0113 n_wildcard does,
    in its revoke callback) are refused, and not stored; the rest of the commit is."""
    groupkeeper.topic("doomed", 1)
    outcomes: list = []
    member = CK(groupkeeper.bootstrap, "deleting", TOPIC, "doomed",
                on_commit=lambda err, partitions: outcomes.append((err, partitions)))
    try:
        poll_until(lambda: member.assigned == {(TOPIC, 0), (TOPIC, 1), ("doomed", 0)}, member)
        zk = KazooClient(hosts=groupkeeper.zookeeper)
        zk.start(timeout=10)
        try:
            zk.delete("/brokers/topics/doomed", recursive=True)
        finally:
            zk.stop()
            zk.close()
        poll_until(lambda: member.assigned == {(TOPIC, 0), (TOPIC, 1)}, member)
        assert ("revoke", {(TOPIC, 0), (TOPIC, 1), ("doomed", 0)}) in member.history  # eager: all, then again
        member.consumer.commit(offsets=[CKPartition("doomed", 0, 5), CKPartition(TOPIC, 0, 6)], asynchronous=True)
        _wait(member.consumer, outcomes)
        assert outcomes[0][0].code() == UNKNOWN
    finally:
        member.consumer.close()
    assert stored(groupkeeper.bootstrap, "deleting") == {(TOPIC, 0): 6}


@pytest.mark.parametrize("version", [2, 7, 9])
def test_the_answer_per_partition(groupkeeper, version):
    """What each partition is answered, on the wire: OffsetCommit v2 (retention time), v7,
    and v9 (KIP-848's), outside a generation; the unknown ones not stored."""
    connection = RawConnection(groupkeeper.port)
    group = f"wire-{version}"
    try:
        answer = connection.call(OFFSET_COMMIT, version, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": -1,
            "topics": [{"name": name, "partitions": [{"partition_index": p, "committed_offset": 40 + p,
                                                      "committed_metadata": ""} for p in partitions]}
                       for name, partitions in (("nonexistent", [0, 1]), (TOPIC, [1, 2, -1, 0]))]})
    finally:
        connection.close()
    assert {(t.name, p.partition_index): ErrorCode(p.error_code) for t in answer.topics for p in t.partitions} == {
        ("nonexistent", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("nonexistent", 1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (TOPIC, 1): ErrorCode.NONE, (TOPIC, 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        (TOPIC, -1): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, (TOPIC, 0): ErrorCode.NONE}
    assert stored(groupkeeper.bootstrap, group) == {(TOPIC, 0): 40, (TOPIC, 1): 41}


def _wait(consumer: Consumer, outcomes: list, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not outcomes:
        assert time.monotonic() < deadline, "no commit outcome"
        consumer.poll(0.1)


def _code(partition: CKPartition) -> int | None:
    return None if partition.error is None else partition.error.code()


def test_reset_offsets_of_a_topic_that_does_not_exist_says_so_and_stores_nothing(groupkeeper):
    """`groupkeeper groups reset-offsets` (the admin offsets path) of partitions that do not
    exist: refused in one line before anything is committed (the command reads the topics'
    partitions first, as kafka-consumer-groups.sh does), nothing stored; those that exist are."""
    from click.testing import CliRunner

    from tools.cli import main

    def reset(*args: str):
        return CliRunner().invoke(main, ["groups", "reset-offsets", "--group", "reset", *args, "--to-offset", "4",
                                         "--execute", "--bootstrap-server", groupkeeper.bootstrap])

    done = reset("--topic", f"{TOPIC}:0")
    assert done.exit_code == 0, done.output
    refused = reset("--topic", "nonexistent:0")
    assert refused.exit_code == 1 and refused.stderr == "Error: topic 'nonexistent' does not exist\n", refused.output
    past = reset("--topic", f"{TOPIC}:7")
    assert past.exit_code == 1 and past.stderr == f"Error: topic '{TOPIC}' has no partition 7 (it has 2)\n", past.output
    assert stored(groupkeeper.bootstrap, "reset") == {(TOPIC, 0): 4}
