"""Exactly-once through the gateway (issue 36): confluent-kafka's read-process-write loop in
front of Apache Kafka 4.4 (its transaction coordinator), the group coordinated by
groupkeeper: TxnOffsetCommit served by groupkeeper, its offsets pending until the gateway
sees the transaction's EndTxn, committed or dropped then; a read_committed consumer's
OffsetFetch (require_stable) answered UNSTABLE_OFFSET_COMMIT while they pend."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.support.clients import committed, held_by_groupkeeper, produce_values
from tests.support.kafka import broker_groups, create_topic

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)


def read_committed(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[str]:
    """Every value of `topic` a read_committed consumer (no group) reads, until `count`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        values, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
            elif len(values) >= count and message is None:
                break
        return values
    finally:
        consumer.close()


def test_librdkafkas_read_process_write_loop_is_exactly_once_with_aborts(kafka, gateway):
    source, sink, group, partitions = "eos-in", "eos-out", "eos-copier", 3
    create_topic(kafka, source, partitions)
    create_topic(kafka, sink, partitions)
    values = produce_values(gateway.bootstrap, source, 300, "in", partitions)
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "session.timeout.ms": 10_000})
    producer = Producer({"bootstrap.servers": gateway.bootstrap, "transactional.id": "eos-copier-1",
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    consumer.subscribe([source])
    batches = aborted = 0
    copied: set[str] = set()
    deadline = time.monotonic() + 120
    try:
        while len(copied) < len(values):
            assert time.monotonic() < deadline, f"copied {len(copied)} of {len(values)}"
            messages = [m for m in consumer.consume(50, 1.0) if m.error() is None]
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, ("out-" + m.value().decode()).encode(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            batches += 1
            if batches % 3 == 0:  # every third batch aborted: read again from the committed offsets
                producer.abort_transaction(30)
                aborted += 1
                for tp in consumer.committed(consumer.assignment(), 30):  # require_stable: once resolved
                    consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
                continue
            producer.commit_transaction(30)
            copied.update(m.value().decode() for m in messages)
    except KafkaException as error:
        pytest.fail(f"the loop failed: {error}")
    finally:
        consumer.close()
    assert aborted >= 1
    out = read_committed(gateway.bootstrap, sink, len(values))
    assert sorted(out) == sorted("out-" + v for v in values), "not every record exactly once"
    offsets = committed([gateway.port], group)
    assert sum(offsets.values()) == len(values)  # the transactions' offsets, as committed
    held_by_groupkeeper(gateway.port, broker_groups(kafka), group)
    events = [e for e in gateway.events() if e.get("event", "").startswith("transactional offsets")]
    assert {e["event"] for e in events} == {"transactional offsets committed", "transactional offsets aborted"}
