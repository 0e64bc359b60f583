"""librdkafka's three-broker mock cluster behind `groupkeeper run --gateway`, leaders spread
over the three: records produced and read back in full through the gateway by librdkafka,
in a group groupkeeper coordinates. The mock refuses ApiVersions v3 in a shape of its own
and adds a byte past the schema to Metadata v9+; the gateway reads both as clients do."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as CKConsumer, Producer as CKProducer

from protocol.schemas import OFFSET_FETCH
from tests.support.clients import committed, held_by_groupkeeper
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.mock_cluster import MockCluster
from tools.kafka_admin import NodeConnection

TOPIC, PARTITIONS, RECORDS, BROKERS = "orders", 6, 3000, 3
GROUP = "mock-readers"


@pytest.fixture
def mock_cluster(tmp_path):
    with MockCluster(tmp_path, BROKERS, {TOPIC: PARTITIONS}) as cluster:
        yield cluster


@pytest.fixture
def gateway(zookeeper, tmp_path, mock_cluster):
    process = CoordinatorProcess(zookeeper, tmp_path, gateway=mock_cluster.bootstrap, metadata_max_age_ms=500)
    process.node_offset = pin_node_ports(process, list(range(1, BROKERS + 1)))
    process.start()
    try:
        for node in range(1, BROKERS + 1):
            process.wait_for_log("broker node reachable", node=node)
        yield process
    finally:
        assert process.stop() == 0


def mock_committed(cluster: MockCluster, group: str) -> set[int]:
    """What the mock brokers' own coordinator holds for `group` on TOPIC (-1: nothing)."""
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    connection = NodeConnection(host, int(port), timeout=10)
    try:
        answer = connection.call(OFFSET_FETCH, {"group_id": group, "topics": [
            {"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})
        return {p.committed_offset for t in answer.topics for p in t.partitions}
    finally:
        connection.close()


def test_librdkafka_produces_and_reads_through_the_gateway_in_front_of_the_mock_cluster(gateway, mock_cluster):
    failed, leaders = [], set()

    def delivered(err, msg):
        if err is not None:
            failed.append(err)

    producer = CKProducer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5, "acks": "all"})
    values = [f"mock-{i}".encode() for i in range(RECORDS)]
    for i, value in enumerate(values):
        producer.produce(TOPIC, value, partition=i % PARTITIONS, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed
    for partition in producer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values():
        leaders.add(partition.leader)
    assert leaders == {1, 2, 3}  # the leaders spread over the three brokers, as the gateway names them

    consumer = CKConsumer({"bootstrap.servers": gateway.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                           "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe([TOPIC])
    read = []
    try:
        deadline = time.monotonic() + 60
        while len(read) < RECORDS and time.monotonic() < deadline:
            if (message := consumer.poll(0.5)) is not None and message.error() is None:
                read.append(message.value())
        assert sorted(read) == sorted(values)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()

    held_by_groupkeeper(gateway.port, set(), GROUP)
    assert sum(committed([gateway.port], GROUP).values()) == RECORDS
    assert mock_committed(mock_cluster, GROUP) == {-1}  # the mock's own coordinator never saw the group
    # the mock's Metadata v9+ carries a byte past its schema: read, rewritten, counted, logged once
    assert gateway.metric("groupkeeper_broker_answers_malformed_total", api="Metadata", kind="past_schema") >= 1
    lines = [e for e in gateway.events() if e.get("event", "").startswith("a broker's answers carry bytes past")]
    assert 1 <= len(lines) <= BROKERS, lines
    assert not [e for e in gateway.events() if e.get("event") == "connection closed"
                and "broker link" in e.get("reason", "")]
