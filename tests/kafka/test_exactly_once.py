"""Exactly-once through the gateway (issue 36): confluent-kafka's and the Java client's
read-process-write loops in front of Apache Kafka 4.4 (its transaction coordinator), the
group coordinated by groupkeeper: TxnOffsetCommit served by groupkeeper, its offsets pending
until the gateway sees the transaction's EndTxn, committed or dropped then; a read_committed
consumer's OffsetFetch (require_stable) answered UNSTABLE_OFFSET_COMMIT while they pend.

The Java client's loop is tests/kafka/java/EosCopier.java: every third transaction aborted;
and a copier SIGKILLed with a transaction open (its records written, its offsets sent) and
started again with the same transactional id and group, whose InitProducerId makes Kafka
abort the killed one's transaction. Both check the output read_committed (every input
record exactly once) and the committed offsets. Through the gateway the Java client runs
transaction version 1 (AddOffsetsToTxn, one producer epoch for all its transactions) even
where the cluster finalizes version 2, since the gateway's ApiVersions answer carries no
finalized features: checked at the brokers (kafka-transactions describe) and in what the
gateway relayed."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.support.clients import committed, held_by_groupkeeper, produce_values, read_committed
from tests.support.kafka import broker_groups, create_topic, java_command, run_tool

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)


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


# The Java client's loop (tests/kafka/java/EosCopier.java). Ten records a poll make about
# forty transactions of 300 records, a third of them aborted; a killed member's session
# (6 s, heartbeats every second) ends soon enough for its successor's join.
JAVA_CONSUMER = ("consumer.max.poll.records=10", "consumer.session.timeout.ms=6000",
                 "consumer.heartbeat.interval.ms=1000")


class Copier:
    """An EosCopier.java process and the JSON lines it writes, read by a thread as they come
    (its stderr too: a full pipe would stop it)."""

    def __init__(self, gateway, source: str, sink: str, group: str, transactional_id: str, *args: str):
        self.gateway, self.group = gateway, group
        self.process = subprocess.Popen(
            java_command("EosCopier", "--input", source, "--output", sink, "--group", group,
                         "--transactional-id", transactional_id, *args, f"bootstrap.servers={gateway.bootstrap}",
                         *JAVA_CONSUMER),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[dict] = []  # what it wrote so far, as `_take` moved it here
        self._new: queue.Queue[dict | None] = queue.Queue()  # None: its stdout ended
        self._ended = False
        self.other: list[str] = []  # the rest of its stdout: a thread dump (`dump`)
        self.errors: list[str] = []
        threading.Thread(target=self._follow, daemon=True).start()
        threading.Thread(target=lambda: self.errors.extend(self.process.stderr), daemon=True).start()

    def _follow(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                self._new.put(json.loads(line))
            else:
                self.other.append(line)
        self._new.put(None)

    def _take(self, wait: float) -> None:
        """Moves one line to `lines`, waiting up to `wait` s for it."""
        try:
            line = self._new.get(timeout=wait)
        except queue.Empty:
            return
        if line is None:
            self._ended = True
        else:
            self.lines.append(line)

    def wait_for(self, key: str, timeout: float) -> dict:
        """The first line with `key`, waiting for it until `timeout` or the end of its output."""
        deadline = time.monotonic() + timeout
        while not any(key in line for line in self.lines):
            if self._ended:
                raise AssertionError(f"EosCopier.java exited {self.process.wait()} before {key!r}: {self.lines[-5:]}"
                                     f"\n{self.stderr}\n{self.evidence()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {key!r} from EosCopier.java within {timeout} s: {self.lines[-5:]}\n"
                                     f"{self.dump()}\n{self.evidence()}")
            self._take(0.2)
        return next(line for line in self.lines if key in line)

    def finish(self, timeout: float) -> dict:
        """Its "done" line once it exited (killed at `timeout`); every line is in `lines` then."""
        stuck = ""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            stuck = self.dump()
            self.kill()
        while not self._ended:  # its stdout is closed: the reader's last lines are coming
            self._take(1.0)
        done = next((line for line in self.lines if "done" in line), None)
        if self.process.returncode == 0 and done is not None and done["done"]:
            return done
        raise AssertionError(f"EosCopier.java exited {self.process.returncode}: {self.lines[-5:]}\n{self.stderr}\n"
                             f"{stuck}\n{self.evidence()}")

    def wrong_rewinds(self) -> list[dict]:
        """The aborts after which the committed offsets were not where the aborted batch began:
        ahead, the aborted transaction's offsets were committed (its records are never copied);
        behind, a committed transaction's were lost (its records are copied twice)."""
        return [line for line in self.lines if "rewound" in line and line["rewound"] != line["from"]]

    def evidence(self) -> str:
        """What groupkeeper has of the group's offsets and of transactions: a failure's evidence."""
        return (f"aborts not rewound to their batch's start: {self.wrong_rewinds()}\n"
                f"committed: {committed([self.gateway.port], self.group)}\n"
                f"the gateway's transactions:\n{transactions_seen(self.gateway)}")

    def dump(self, timeout: float = 10.0) -> str:
        """Where its main thread is: the JVM writes its threads' stacks on stdout at SIGQUIT."""
        start = len(self.other)
        self.process.send_signal(signal.SIGQUIT)
        deadline = time.monotonic() + timeout
        while not any("JNI global refs" in line for line in self.other[start:]) and time.monotonic() < deadline:
            time.sleep(0.1)
        threads = "".join(self.other[start:]).split("\n\n")
        return "\n\n".join(t for t in threads if t.startswith('"main"') or "kafka-producer-network-thread" in t)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    @property
    def stderr(self) -> str:
        return "".join(self.errors)[-5000:]

    def copied(self) -> list[str]:
        """The input values it copied in committed transactions, in order."""
        return [v for line in self.lines if "committed" in line for v in line["committed"]]


def relayed(gateway, api: str) -> float:
    """Requests of `api` the gateway relayed to the brokers, over every node."""
    status, body = gateway.scrape()
    assert status == 200
    return sum(sample.value for family in text_string_to_metric_families(body) for sample in family.samples
               if sample.name == "groupkeeper_gateway_requests_total" and sample.labels.get("api") == api)


def producer_state(kafka, transactional_id: str) -> dict[str, str]:
    """kafka-transactions describe: the transaction coordinator's row for the id, by column."""
    out = run_tool("kafka-transactions", "--bootstrap-server", kafka.bootstrap, "describe",
                   "--transactional-id", transactional_id).stdout
    header, row = [line.split() for line in out.strip().splitlines()[:2]]
    return dict(zip(header, row))


def pending(gateway, transactional_id: str) -> list[dict]:
    """The transactional id's offsets pending at groupkeeper (`groupkeeper transactions list`)."""
    return [row for row in json.loads(gateway.cli("transactions", "list", "--json"))
            if row["transactional_id"] == transactional_id]


def transactions_seen(gateway) -> str:
    """What the gateway logged of transactions and what it holds pending: a failure's evidence."""
    logged = [e for e in gateway.events() if "transaction" in json.dumps(e).lower()]
    return ("\n".join(json.dumps(e) for e in logged[-40:]) + "\npending: "
            + gateway.cli("transactions", "list", "--json"))


def check_exactly_once(kafka, gateway, sink: str, group: str, transactional_id: str, values: list[str],
                       copied: list[str]) -> None:
    """The copiers' committed transactions took every input record once; the output topic,
    read_committed, holds each once, copied; nothing of the transactional id is left pending
    and the group's committed offsets, through the gateway, cover the input; and the group is
    groupkeeper's, unknown to the brokers."""
    assert len(copied) == len(set(copied)), "a record copied in two committed transactions"
    assert sorted(copied) == sorted(values)
    out = read_committed(gateway.bootstrap, sink, len(values))
    assert sorted(out) == sorted("out-" + v for v in values), "not every record exactly once"
    deadline = time.monotonic() + 30  # the last transaction's end reaches the group's owner as it is recorded
    while rows := pending(gateway, transactional_id):
        assert time.monotonic() < deadline, f"still pending: {rows}"
        time.sleep(0.2)
    offsets = committed([gateway.port], group)
    assert sum(offsets.values()) == len(values), offsets
    held_by_groupkeeper(gateway.port, broker_groups(kafka), group)


@pytest.fixture(scope="module")
def java_loop(kafka, gateway):
    """EosCopier.java copies 300 records on 3 partitions, every third transaction aborted: its
    lines, the topics, and how many AddOffsetsToTxn and EndTxn the gateway relayed meanwhile."""
    source, sink, group, transactional_id, partitions = "eos-java-in", "eos-java-out", "eos-java", "eos-java-1", 3
    create_topic(kafka, source, partitions)
    create_topic(kafka, sink, partitions)
    values = produce_values(gateway.bootstrap, source, 300, "in", partitions)
    before = {api: relayed(gateway, api) for api in ("AddOffsetsToTxn", "EndTxn")}
    copier = Copier(gateway, source, sink, group, transactional_id, "--records", str(len(values)),
                    "--abort-every", "3", "--seconds", "200")
    done = copier.finish(timeout=240)
    return {"values": values, "sink": sink, "group": group, "transactional_id": transactional_id, "done": done,
            "copier": copier, "relayed": {api: relayed(gateway, api) - n for api, n in before.items()}}


def test_the_java_clients_read_process_write_loop_is_exactly_once_with_aborts(kafka, gateway, java_loop):
    done = java_loop["done"]
    assert done["aborted"] >= 10 and done["failed"] == 0, done
    assert not java_loop["copier"].wrong_rewinds()  # each abort's offsets dropped, the commits' kept
    assert done["copied"] == len(java_loop["values"])
    check_exactly_once(kafka, gateway, java_loop["sink"], java_loop["group"], java_loop["transactional_id"],
                       java_loop["values"], java_loop["copier"].copied())
    # the offsets are those the last committed transactions sent: 100 records a partition
    assert committed([gateway.port], java_loop["group"]) == {("eos-java-in", p): 100 for p in range(3)}


def test_the_java_client_runs_transaction_version_1_through_the_gateway(kafka, gateway, java_loop):
    """KIP-890's transaction version 2 has the Java client skip AddOffsetsToTxn and end every
    transaction with EndTxn v5, whose answer gives the producer the next epoch: one epoch per
    transaction. The client uses it only where ApiVersions' finalized features say
    transaction.version >= 2, and the gateway answers ApiVersions on every port without them,
    so through the gateway it runs version 1, which groupkeeper serves: AddOffsetsToTxn before
    each transaction's TxnOffsetCommit, and one epoch (InitProducerId's) for all of them."""
    features = run_tool("kafka-features", "--bootstrap-server", kafka.bootstrap, "describe").stdout
    done = java_loop["done"]
    ended = done["transactions"] + done["aborted"]
    state = producer_state(kafka, java_loop["transactional_id"])
    print(features, done, java_loop["relayed"], state)  # what the cluster finalizes and the loop did, for the record (-s)
    assert ended >= 30
    # InitProducerId gives a new transactional id epoch 0; under version 1 no commit or abort
    # moves it (the loop had no failed transaction, which may bump it), under version 2 each
    # of the `ended` transactions would have
    assert int(state["ProducerEpoch"]) == 0, (state, features)
    # every transaction added its offsets with AddOffsetsToTxn (retried where the coordinator
    # was still writing the previous one's markers: CONCURRENT_TRANSACTIONS), and ended once
    assert java_loop["relayed"]["AddOffsetsToTxn"] >= ended, (java_loop["relayed"], features)
    assert java_loop["relayed"]["EndTxn"] >= ended


def test_a_java_producer_killed_mid_transaction_and_restarted_is_exactly_once(kafka, gateway):
    """A copier SIGKILLed with a transaction open after five committed (its batch in the output
    topic's log, its offsets sent: pending at groupkeeper), then one with the same transactional id
    and group: its InitProducerId makes Kafka abort the killed transaction (the epoch bumped),
    so the batch is read and copied again, once, and its pending offsets are dropped rather
    than committed; the restarted consumer's require_stable OffsetFetch waits for that."""
    source, sink, group, transactional_id, partitions = "eos-kill-in", "eos-kill-out", "eos-kill", "eos-kill-1", 3
    create_topic(kafka, source, partitions)
    create_topic(kafka, sink, partitions)
    values = produce_values(gateway.bootstrap, source, 300, "in", partitions)
    first = Copier(gateway, source, sink, group, transactional_id, "--abort-every", "3", "--hang-after", "5")
    try:
        hanging = first.wait_for("hanging", timeout=120)
    finally:
        first.kill()
    killed_at = time.monotonic()
    before = first.copied()
    assert hanging["transactions"] == 5 and len(before) == hanging["copied"] > 0
    assert not set(hanging["open"]) & set(before)
    # its offsets were sent (TxnOffsetCommit answered once they were written): pending here,
    # alone once the last committed transaction's end has reached the group's owner
    deadline = time.monotonic() + 30
    while len(rows := pending(gateway, transactional_id)) != 1:
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    assert {f'{o["topic"]}-{o["partition"]}': o["offset"] for o in rows[0]["offsets"]} == hanging["offsets"], rows
    second = Copier(gateway, source, sink, group, transactional_id, "--records", str(len(values) - len(before)),
                    "--abort-every", "3", "--seconds", "150")
    try:
        second.wait_for("initialized", timeout=90)  # Kafka has aborted the killed transaction by then
        done = second.finish(timeout=180)
    except AssertionError as failure:
        second.kill()
        raise AssertionError(f"given up {time.monotonic() - killed_at:.1f} s after the kill: {failure}") from None
    assert done["failed"] == 0, done
    assert not first.wrong_rewinds() and not second.wrong_rewinds()
    assert set(hanging["open"]) <= set(second.copied())  # the killed transaction's batch, read again
    check_exactly_once(kafka, gateway, sink, group, transactional_id, values, before + second.copied())
    # the killed transaction ended at the brokers: aborted by the restart's InitProducerId,
    # which gave the new producer the next epoch
    state = producer_state(kafka, transactional_id)
    assert int(state["ProducerEpoch"]) >= 1 and state["TransactionState"] in ("Empty", "CompleteCommit",
                                                                           "CompleteAbort"), state
