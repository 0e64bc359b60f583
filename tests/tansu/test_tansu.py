"""The Tansu broker the gateway tests start (tests/support/tansu.py), checked on its own: unmodified
kafka-python and confluent-kafka clients produce 1,000 records to it and read them back in
a consumer group that commits, with no groupkeeper in between. If these fail, a gateway
test's failure says nothing about the gateway."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tests.support.tansu import Tansu, tansu  # noqa: F401 - a fixture

RECORDS = 1000
PARTITIONS = 3
DEADLINE = 60.0  # seconds for each wait below; a healthy run takes about one


def test_the_broker_answers_as_one_node(tansu):
    assert tansu.node_id is not None
    assert tansu.bootstrap == f"127.0.0.1:{tansu.port}"
    brokers = tansu.metadata().brokers
    assert [(b.node_id, b.host, b.port) for b in brokers] == [(tansu.node_id, "127.0.0.1", tansu.port)]
    for key in (0, 1, 3, 8, 9, 10, 11, 12, 13, 14, 18):  # what a producer and a classic consumer need
        assert key in tansu.api_versions


def test_restart_keeps_the_port_and_loses_the_memory(tansu):
    tansu.create_topic("kept", PARTITIONS)
    port = tansu.port
    tansu.restart()
    assert tansu.port == port and tansu.running and tansu.starts == 2
    assert tansu.partitions("kept") is None  # memory storage: gone
    tansu.create_topic("kept", PARTITIONS)
    tansu.kill()
    assert not tansu.running
    tansu.start()
    assert tansu.partitions("kept") is None


def test_kafka_python_produces_and_a_group_reads_everything_back(tansu):
    topic, group = "kp-records", "kp-group"
    tansu.create_topic(topic, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=5)
    try:
        futures = [producer.send(topic, key=str(i).encode(), value=f"record-{i}".encode()) for i in range(RECORDS)]
        producer.flush(timeout=DEADLINE)
        written = [f.get(timeout=DEADLINE) for f in futures]
    finally:
        producer.close(timeout=10)
    assert {m.partition for m in written} == set(range(PARTITIONS))

    consumer = KafkaConsumer(topic, bootstrap_servers=tansu.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        seen: dict[bytes, tuple[int, int]] = {}
        deadline = time.monotonic() + DEADLINE
        while len(seen) < RECORDS:
            assert time.monotonic() < deadline, f"read {len(seen)} of {RECORDS} records"
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    seen[r.value] = (r.partition, r.offset)
        assert set(seen) == {f"record-{i}".encode() for i in range(RECORDS)}
        assert {(m.partition, m.offset) for m in written} == set(seen.values())
        consumer.commit()
        ends = _log_ends(seen.values())
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert {tp.partition: consumer.committed(tp) for tp in partitions} == ends
    finally:
        consumer.close()

    again = KafkaConsumer(bootstrap_servers=tansu.bootstrap, group_id=group, enable_auto_commit=False)
    try:  # the group's commit, read back on a new connection
        assert {p: again.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)} == ends
    finally:
        again.close()


def test_confluent_kafka_produces_and_a_group_reads_everything_back(tansu):
    topic, group = "ck-records", "ck-group"
    tansu.create_topic(topic, PARTITIONS)
    delivered, failed = [], []

    def on_delivery(err, msg):
        (failed if err is not None else delivered).append(err or (msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"record-{i}".encode(), on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(DEADLINE) == 0, "records still queued"
    assert not failed and len(delivered) == RECORDS
    assert {p for p, _ in delivered} == set(range(PARTITIONS))

    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    try:
        consumer.subscribe([topic])
        seen: dict[bytes, tuple[int, int]] = {}
        deadline = time.monotonic() + DEADLINE
        while len(seen) < RECORDS:
            assert time.monotonic() < deadline, f"read {len(seen)} of {RECORDS} records"
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaException(message.error())
            seen[message.value()] = (message.partition(), message.offset())
        assert set(seen) == {f"record-{i}".encode() for i in range(RECORDS)}
        assert set(delivered) == set(seen.values())
        ends = _log_ends(seen.values())
        committed = consumer.commit(asynchronous=False)  # its positions
        assert {tp.partition: tp.offset for tp in committed if tp.error is None} == ends
        read_back = consumer.committed([CKTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=DEADLINE)
        assert {tp.partition: tp.offset for tp in read_back} == ends
    finally:
        consumer.close()


def _log_ends(read: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Partition -> the offset after the last record read: what a consumer that read every
    record commits. Read from the records, not from ListOffsets, whose "latest" Tansu
    answers short of the log's end (see tests/support/tansu.py)."""
    ends: dict[int, int] = {}
    for partition, offset in read:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


def test_a_metadata_topic_named_by_id_with_an_empty_name_is_refused(tansu):  # noqa: F811 - the fixture
    """Tansu looks a Metadata v12 topic up by its name when one is given, even "": the Java
    client (4.4) asks for topics it knows only by id (a KIP-848 assignment) with the name ""
    and the id, which Kafka resolves by the id and Tansu answers INVALID_TOPIC_EXCEPTION (17).
    A null name is resolved by the id. (The conformance matrix's Java regex cell on Tansu.)"""
    from protocol.schemas import METADATA
    from tests.support.clients import RawConnection

    tansu.create_topic("by-id", 2)
    connection = RawConnection(tansu.port)
    try:
        topic_id = connection.call(METADATA, 12, {"topics": [{"name": "by-id"}]}).topics[0].topic_id
        empty = connection.call(METADATA, 12, {"topics": [{"name": "", "topic_id": topic_id}]}).topics
        null = connection.call(METADATA, 12, {"topics": [{"name": None, "topic_id": topic_id}]}).topics
    finally:
        connection.close()
    assert [(t.name, t.error_code) for t in empty] == [("", 17)]
    assert [(t.name, t.error_code) for t in null] == [("by-id", 0)]


def test_a_read_committed_fetch_lists_no_aborted_transactions(tansu):  # noqa: F811 - the fixture
    """Tansu writes a transaction's ABORT marker but never lists the aborted transaction in a
    read_committed Fetch (aborted_transactions stays empty), which is how a consumer knows to
    skip its records: a read_committed consumer reads an aborted record as a committed one.
    (The conformance matrix's exactly-once cells on Tansu.)"""
    from protocol.record_batches import batch_headers
    from protocol.schemas import FETCH
    from tests.support.clients import RawConnection

    tansu.create_topic("txn", 1)
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "transactional.id": "aborts-listed", "linger.ms": 0})
    producer.init_transactions(DEADLINE)
    for value, commit in ((b"kept-1", True), (b"dropped", False), (b"kept-2", True)):
        producer.begin_transaction()
        producer.produce("txn", value, partition=0)
        assert producer.flush(DEADLINE) == 0  # sent: an abort would purge it otherwise, and send no EndTxn
        if commit:
            producer.commit_transaction(DEADLINE)
        else:
            producer.abort_transaction(DEADLINE)
    connection = RawConnection(tansu.port)
    try:
        answer = connection.call(FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": "txn", "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
    finally:
        connection.close()
    fetched = answer.responses[0].partitions[0]
    # the log holds data and a marker per transaction: COMMIT (1), ABORT (0), COMMIT; the
    # aborted one ends below the last stable offset, yet no aborted transaction is listed
    assert [b.control_type for b in batch_headers(fetched.records or b"")] == [None, 1, None, 0, None, 1]
    assert fetched.last_stable_offset == 6 and fetched.aborted_transactions == []
    consumer = Consumer({"bootstrap.servers": tansu.bootstrap, "group.id": "aborts-listed", "session.timeout.ms": 6000,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["txn"])
        read, deadline = [], time.monotonic() + DEADLINE
        while len(read) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read.append(message.value().decode())
    finally:
        consumer.close()
    assert read == ["kept-1", "dropped", "kept-2"]
