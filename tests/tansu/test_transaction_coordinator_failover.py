"""A transactional producer whose gateway instance dies goes on through another (issue 36):
through the gateway a transaction's coordinator is the instance asked (its own node id, as a
group's coordinator is), and the transaction's requests are relayed to the broker that
coordinates the transactional id. librdkafka keeps its transaction coordinator's address
while FindCoordinator names the same node id, so were that the broker's id at the dead
instance's port, a producer with a live connection elsewhere would send EndTxn there forever
(librdkafka 2.16 in front of Kafka: docs/operations.md). Two instances in front of Tansu, the
producer bootstrapped from both: it commits a transaction, the instance it took for its
transaction coordinator is SIGKILLed, and the same producer commits again, its coordinator
now the survivor's own node."""

from __future__ import annotations

import logging
import re
import signal
import time
import uuid

from confluent_kafka import KafkaException, Producer as CKProducer

from tests.support.tansu import tansu  # noqa: F401 - a fixture
from tests.tansu.test_e2e_gateway import node_port, start_gateway
from tests.tansu.test_e2e_transaction_outcomes import batches

DEADLINE = 60.0


def commit_one(producer: CKProducer, topic: str, value: bytes, deadline: float) -> None:
    """One transaction of one record, as confluent-kafka's documented loop runs it: a
    retriable error is retried, an abortable one aborts and starts again; until `deadline`."""
    while True:
        try:
            producer.begin_transaction()
            producer.produce(topic, value, partition=0)
            while True:
                try:
                    producer.commit_transaction(5)
                    return
                except KafkaException as error:
                    if not error.args[0].retriable() or time.monotonic() > deadline:
                        raise
        except KafkaException as error:
            assert time.monotonic() < deadline, f"no commit: {error}"
            if error.args[0].txn_requires_abort():
                producer.abort_transaction(30)
                continue
            raise


class Lines(logging.Handler):
    """librdkafka's log lines (its `logger`), kept."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_producer_follows_its_transaction_coordinator_to_another_instance(zookeeper, tmp_path, tansu):  # noqa: F811
    topic, transactional_id = f"txfail-{uuid.uuid4().hex[:8]}", f"txfail/{uuid.uuid4().hex[:8]}"
    tansu.create_topic(topic, 1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    gateways = [start_gateway(zookeeper, tmp_path / "a", tansu.bootstrap),
                start_gateway(zookeeper, tmp_path / "b", tansu.bootstrap)]
    lines = Lines()
    logger = logging.getLogger(f"librdkafka-{transactional_id}")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    try:
        for gateway in gateways:
            gateway.wait_for_log("broker node reachable", node=tansu.node_id)
        producer = CKProducer({"bootstrap.servers": ",".join(g.bootstrap for g in gateways),
                               "transactional.id": transactional_id, "linger.ms": 0, "debug": "eos",
                               "logger": logger})
        producer.init_transactions(DEADLINE)
        commit_one(producer, topic, b"before", time.monotonic() + DEADLINE)
        producer.poll(0)  # the log lines so far
        named = [line for line in lines.lines if "Transaction coordinator is broker" in line]
        assert named, "librdkafka did not say which instance coordinates its transactions"
        port = int(re.search(r"\(([^)]+):(\d+)\)", named[-1]).group(2))
        # the instance's own node, at its port (before: the broker's node, at the instance's port for it)
        [relay] = [g for g in gateways if port in (g.port, node_port(g, tansu.node_id))]
        survivor = next(g for g in gateways if g is not relay)
        relay.signal(signal.SIGKILL)
        began = time.monotonic()
        commit_one(producer, topic, b"after", began + DEADLINE)
        took = time.monotonic() - began
        producer.poll(0)
        markers = [b[3] for b in batches(tansu, topic) if b[3] is not None]
        assert markers[-1] == 1 and markers.count(1) == 2  # both transactions committed at the broker
        moved = [line for line in lines.lines if "Transaction coordinator is broker" in line][-1]
        assert f":{survivor.port})" in moved, moved
        print(f"committed again {took:.1f} s after the kill")
        producer.flush(5)
    finally:
        for gateway in gateways:
            gateway.stop()
