"""Offsets only for partitions that exist, through the gateway in front of Tansu (issue 38,
item 6): the topic view comes from the broker's Metadata (the brokers source), which learns
of a topic created behind it only at its next round; a commit naming that topic a moment
after its creation asks for a round first, and is stored, while a topic that does not exist
is answered UNKNOWN_TOPIC_OR_PARTITION, with confluent-kafka as with the raw protocol."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError
from confluent_kafka import TopicPartition as CKPartition
from confluent_kafka.admin import AdminClient

from protocol import ErrorCode
from protocol.schemas import OFFSET_COMMIT
from tests.support.clients import RawConnection
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.tansu import tansu  # noqa: F401 - a fixture

TANSU_NODE = 111  # Tansu's one node (tests/support/tansu.py)


@pytest.fixture
def gateway(zookeeper, tmp_path, tansu):  # noqa: F811 - the fixture
    """A gateway whose view is refreshed on its own only every 10 minutes: what it learns of a
    topic created meanwhile, it learns because a commit asked."""
    tansu.create_topic("orders", 2)
    process = CoordinatorProcess(zookeeper, tmp_path, gateway=tansu.bootstrap, metadata_max_age_ms=600_000)
    process.node_offset = pin_node_ports(process, [TANSU_NODE])
    process.start()
    try:
        process.wait_for_log("broker node reachable", node=tansu.node_id)
        yield process
    finally:
        assert process.stop() == 0


def stored(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(p.topic, p.partition): p.offset for p in future.result(timeout=30).topic_partitions if p.offset >= 0}


def test_a_topic_created_behind_the_gateway_a_moment_ago_is_stored_one_that_does_not_exist_is_not(gateway, tansu):  # noqa: F811
    tansu.create_topic("fresh", 2)  # the gateway's view has not heard of it
    connection = RawConnection(gateway.port)
    try:
        answer = connection.call(OFFSET_COMMIT, 8, {
            "group_id": "raw", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": name, "partitions": [{"partition_index": p, "committed_offset": 10 + p}
                                                     for p in partitions]}
                       for name, partitions in (("fresh", [0, 1, 2]), ("nonexistent", [0]), ("orders", [1]))]})
    finally:
        connection.close()
    assert {(t.name, p.partition_index): ErrorCode(p.error_code) for t in answer.topics for p in t.partitions} == {
        ("fresh", 0): ErrorCode.NONE, ("fresh", 1): ErrorCode.NONE, ("fresh", 2): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nonexistent", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("orders", 1): ErrorCode.NONE}
    assert stored(gateway.bootstrap, "raw") == {("fresh", 0): 10, ("fresh", 1): 11, ("orders", 1): 11}

    outcomes: list = []
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "standalone", "enable.auto.commit": False,
                         "log_level": 3, "on_commit": lambda err, partitions: outcomes.append((err, partitions))})
    try:
        consumer.commit(offsets=[CKPartition("nonexistent", 0, 5), CKPartition("orders", 0, 7)], asynchronous=True)
        deadline = time.monotonic() + 30
        while not outcomes:
            assert time.monotonic() < deadline, "no commit outcome"
            consumer.poll(0.1)
        assert outcomes[0][0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART  # 0030 do_nonexist_commit's answer
    finally:
        consumer.close()
    assert stored(gateway.bootstrap, "standalone") == {("orders", 0): 7}
