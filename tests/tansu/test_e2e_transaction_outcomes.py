"""What the gateway records of the transactions it relays (issue 36: how a group's owner
learns a transaction's outcome, whichever instance relayed it): a real transactional
producer (librdkafka) through `groupkeeper run --gateway` in front of Tansu, and the record
of its transactional id in ZooKeeper after InitProducerId (begun), a commit and an abort,
each with the producer id and epoch the producer's records were written with, as the
partition's own batches and control markers say (read from Tansu directly).

What Tansu is known to lack here: transaction timeouts (a transaction left open is never
aborted by the broker), KIP-664's DescribeTransactions/ListTransactions, and aborted
transactions in its Fetch answers (so the outcome is read from the raw control markers);
its coordinator answers EndTxn in versions before KIP-890's transaction version 2, so one
epoch carries many transactions."""

from __future__ import annotations

import json
import time
import uuid

from confluent_kafka import Producer as CKProducer
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from coordinator.store import layout
from coordinator.store.transactions import ABORTED, BEGUN, COMMITTED, Outcome, decode
from protocol.schemas import FETCH
from protocol.record_batches import TRANSACTIONAL, batch_headers
from tests.support.tansu import tansu  # noqa: F401 - a fixture
from tests.tansu.test_e2e_gateway import start_gateway
from tools.kafka_admin import NodeConnection

DEADLINE = 30.0


def record(zk: KazooClient, transactional_id: str) -> Outcome | None:
    try:
        data, _ = zk.get(layout.transaction_path(transactional_id))
    except NoNodeError:
        return None
    return decode(transactional_id, data)


def until_recorded(zk: KazooClient, transactional_id: str, condition) -> Outcome:
    """The record once `condition(record)` holds (checked every 50 ms; fails after DEADLINE)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        found = record(zk, transactional_id)
        if found is not None and condition(found):
            return found
        assert time.monotonic() < deadline, f"the record of {transactional_id} is {found}"
        time.sleep(0.05)


def batches(tansu, topic: str) -> list[tuple[int, int, bool, int | None]]:  # noqa: F811 - the fixture's object
    """Partition 0's record batches, read uncommitted from the broker itself: (producer id,
    producer epoch, transactional, None for data or the control marker's type: 0 abort, 1 commit)."""
    connection = NodeConnection("127.0.0.1", tansu.port, timeout=10)
    try:
        answer = connection.pipeline(FETCH, 11, [{
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""}])[0]
    finally:
        connection.close()
    return [(b.producer_id, b.producer_epoch, bool(b.attributes & TRANSACTIONAL), b.control_type)
            for b in batch_headers(answer.responses[0].partitions[0].records or b"")]


def test_the_gateway_records_begun_committed_and_aborted_with_the_producers_id_and_epoch(
        zookeeper, tmp_path, tansu):  # noqa: F811 - the fixture
    topic, transactional_id = f"txo-{uuid.uuid4().hex[:8]}", f"copy/{uuid.uuid4().hex[:8]}"
    tansu.create_topic(topic, 1)
    gateway = start_gateway(zookeeper, tmp_path, tansu.bootstrap)
    zk = KazooClient(hosts=gateway.zookeeper)
    zk.start(timeout=10)
    try:
        gateway.wait_for_log("broker node reachable", node=tansu.node_id)
        producer = CKProducer({"bootstrap.servers": gateway.bootstrap, "transactional.id": transactional_id,
                               "linger.ms": 0})
        producer.init_transactions(DEADLINE)
        begun = until_recorded(zk, transactional_id, lambda r: r.state == BEGUN)
        assert begun.producer_id >= 0 and begun.producer_epoch >= 0 and begun.previous is None

        producer.begin_transaction()
        producer.produce(topic, b"kept", partition=0)
        producer.commit_transaction(DEADLINE)
        committed = until_recorded(zk, transactional_id, lambda r: r.state == COMMITTED)
        assert (committed.producer_id, committed.producer_epoch) == (begun.producer_id, begun.producer_epoch)

        producer.begin_transaction()
        producer.produce(topic, b"dropped", partition=0)
        assert producer.flush(DEADLINE) == 0  # sent: aborting first would purge it, and send no EndTxn
        producer.abort_transaction(DEADLINE)
        aborted = until_recorded(zk, transactional_id, lambda r: r.state == ABORTED)
        assert (aborted.producer_id, aborted.producer_epoch) == (begun.producer_id, begun.producer_epoch)
        assert aborted.previous == Outcome(transactional_id, begun.producer_id, begun.producer_epoch, COMMITTED,
                                           committed.at_ms)
        assert begun.at_ms <= committed.at_ms <= aborted.at_ms

        # the broker's own word: the records and markers were written with that producer id and epoch
        pid, epoch = begun.producer_id, begun.producer_epoch
        assert batches(tansu, topic) == [(pid, epoch, True, None), (pid, epoch, True, 1),
                                         (pid, epoch, True, None), (pid, epoch, True, 0)]

        # the same transactional id started again (a restarted producer): InitProducerId bumps
        # its epoch, and the record says so, the abort kept as its previous
        again = CKProducer({"bootstrap.servers": gateway.bootstrap, "transactional.id": transactional_id})
        again.init_transactions(DEADLINE)
        rebegun = until_recorded(zk, transactional_id, lambda r: r.state == BEGUN)
        assert (rebegun.producer_id, rebegun.producer_epoch) == (pid, epoch + 1)
        assert rebegun.previous == Outcome(transactional_id, pid, epoch, ABORTED, aborted.at_ms)
    finally:
        zk.stop()
        zk.close()
        assert gateway.stop() == 0


def test_transactional_offsets_follow_commit_and_abort_and_an_unknowable_end_is_never_guessed(
        zookeeper, tmp_path, tansu):  # noqa: F811 - the fixture
    """librdkafka's send_offsets_to_transaction through the gateway in front of Tansu: the
    offsets of a committed transaction become the group's, an aborted one's go. A transaction
    left open when a new producer of its id starts has ended at the broker, but Tansu keeps no
    marker groupkeeper can read (no __consumer_offsets): its offsets stay pending, reported,
    never guessed, and a read_committed consumer's OffsetFetch is answered UNSTABLE_OFFSET_COMMIT."""
    from confluent_kafka import Consumer, TopicPartition

    from protocol import ErrorCode
    from protocol.schemas import OFFSET_FETCH
    from tests.support.clients import RawConnection, committed

    topic, group, transactional_id = f"txoff-{uuid.uuid4().hex[:8]}", "txoff-group", f"txoff/{uuid.uuid4().hex[:8]}"
    tansu.create_topic(topic, 1)
    gateway = start_gateway(zookeeper, tmp_path, tansu.bootstrap, transactions_check_interval_ms=200)
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": group})
    try:
        gateway.wait_for_log("broker node reachable", node=tansu.node_id)
        metadata = consumer.consumer_group_metadata()  # not subscribed: a simple group's (generation -1)

        def send(producer, offset: int) -> None:
            producer.begin_transaction()
            producer.produce(topic, b"v", partition=0)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], metadata, DEADLINE)

        producer = CKProducer({"bootstrap.servers": gateway.bootstrap, "transactional.id": transactional_id})
        producer.init_transactions(DEADLINE)
        send(producer, 10)
        producer.commit_transaction(DEADLINE)  # answered once recorded; resolved by the owner a moment later
        gateway.wait_for_log("transactional offsets committed", group=group, transactional_id=transactional_id)
        assert committed([gateway.port], group) == {(topic, 0): 10}
        send(producer, 20)
        producer.abort_transaction(DEADLINE)
        gateway.wait_for_log("transactional offsets aborted", group=group, transactional_id=transactional_id)
        assert committed([gateway.port], group) == {(topic, 0): 10}

        send(producer, 30)  # left open: its producer "dies", a new one of the same id starts
        again = CKProducer({"bootstrap.servers": gateway.bootstrap, "transactional.id": transactional_id})
        again.init_transactions(DEADLINE)
        warned = gateway.wait_for_log("a transaction ended without a known outcome: its offsets stay pending",
                                      transactional_id=transactional_id)
        assert warned["group"] == group and warned["why"] == "where the brokers write its end was not known"
        connection = RawConnection(gateway.port)
        try:
            answer = connection.call(OFFSET_FETCH, 7, {"group_id": group, "topics": [
                {"name": topic, "partition_indexes": [0]}], "require_stable": True})
        finally:
            connection.close()
        assert [p.error_code for t in answer.topics for p in t.partitions] == [ErrorCode.UNSTABLE_OFFSET_COMMIT]
        assert committed([gateway.port], group) == {(topic, 0): 10}  # neither 30 nor dropped: pending
        listed = json.loads(gateway.cli("transactions", "list", "--json"))
        assert [(r["group"], r["transactional_id"], r["markers_from"]) for r in listed] == \
            [(group, transactional_id, -1)]
    finally:
        consumer.close()
        assert gateway.stop() == 0
