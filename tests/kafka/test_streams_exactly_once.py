"""Kafka Streams with processing.guarantee=exactly_once_v2 through the gateway in front of
Apache Kafka 4.4 (issue 36, item 7): two instances of one application
(tests/kafka/java/EosStreams.java: every input record copied, and a count per key whose store
Streams keeps in a changelog topic it creates through the gateway), the group coordinated by
groupkeeper with Streams' own assignor (the classic protocol, Streams' default), one instance
SIGKILLed mid-run and the other taking its tasks over. Read with read_committed, the copy holds
every input record exactly once and each key's counts run 1, 2, ..., n: nothing lost, nothing
counted twice, even for a moment.

Where in a commit the kill lands decides what groupkeeper must do, so the victim is stopped at
a chosen point of its next commit and SIGKILLed there (EosStreams' --hold), instead of at an
arbitrary moment, which lands in either case by chance:

- before-offsets: its records written, its transaction open, no offsets sent. groupkeeper holds
  nothing of it; Kafka's transaction coordinator aborts it after transaction.timeout.ms, and
  the survivor starts the victim's partitions from their last committed offsets.
- after-offsets: TxnOffsetCommit answered, no EndTxn. groupkeeper holds the offsets pending;
  the transaction coordinator aborts the transaction on its timeout without the gateway
  seeing an EndTxn, so groupkeeper must learn that outcome from the brokers, and until it
  does the survivor's OffsetFetch (require_stable) is answered UNSTABLE_OFFSET_COMMIT for
  those partitions and it cannot start them."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.clients import described, held_by_groupkeeper, read_committed
from tests.support.kafka import broker_groups, create_topic, java_command, kraft, metadata

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)

PARTITIONS = 3  # of every topic: three tasks, two for one instance and one for the other
TASKS = {f"0_{p}" for p in range(PARTITIONS)}  # one sub-topology (EosStreams' topology)
KEYS = 12  # record i is keyed k{i % KEYS}; murmur2 spreads these over all three partitions
RATE = 200  # input records a second, while both instances run and after the kill
AFTER_KILL = 1000  # input records acknowledged after the kill before the input stops
STREAMS = {
    # Streams' default under exactly-once too, said here: a transaction every 100 ms, so the
    # test's few thousand records take many, and the victim's next commit comes at once
    "commit.interval.ms": 100,
    # the victim's partitions move once its session ends: 6 s, not the consumer's 45 s
    # (groupkeeper's tests accept sessions from 1 s: group_min_session_timeout_ms)
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1500,
    # Streams' default under exactly-once, said here: Kafka's transaction coordinator aborts
    # the victim's transaction this long after it began, found by a scan every 10 s
    # (transaction.abort.timed.out.transaction.cleanup.interval.ms), so 10-20 s after the
    # kill; the survivor asks for the victim's offsets about 7 s after it (its session, then
    # a rebalance), so in after-offsets it meets them pending. Shorter (5 s) saves 5 s a case
    # but lets the abort come first in some runs, and the pending case goes untried.
    "transaction.timeout.ms": 10000,
    # no record cache: every count goes downstream as it changes, so the counts topic holds
    # each key's whole sequence, which the test checks, not only its last value
    "statestore.cache.max.bytes": 0,
}


class Streams:
    """One EosStreams process and what it printed (its JSON lines; its log, Streams' at INFO, in
    the test's folder)."""

    def __init__(self, name: str, bootstrap: str, application: str, topics: dict[str, str], folder: Path,
                 hold: str | None = None):
        self.name = name
        self.hold_file = folder / f"{name}.hold"
        self.log = folder / f"{name}.log"
        command = java_command("EosStreams", "--input", topics["input"], "--copy", topics["copy"],
                               "--counts", topics["counts"], "--state-dir", str(folder / f"{name}-state"),
                               *(["--hold", hold, "--hold-file", str(self.hold_file)] if hold else []),
                               f"bootstrap.servers={bootstrap}", f"application.id={application}",
                               *(f"{k}={v}" for k, v in STREAMS.items()))
        self.lines: list[dict] = []
        self.changed = threading.Condition()
        with open(self.log, "w") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True,
                                            preexec_fn=kraft._die_with_parent)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            with self.changed:
                self.lines.append(fields)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def last(self, key: str, default=None):
        with self.changed:
            return next((line[key] for line in reversed(self.lines) if key in line), default)

    @property
    def active(self) -> set[str]:
        return set(self.last("active", []))

    @property
    def processed(self) -> int:
        return self.last("processed", 0)

    def wait_for(self, condition, what: str, timeout: float) -> None:
        """Until `condition()` holds (checked at each line and twice a second); fails with its
        log's tail if the process ends first or `timeout` passes."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not condition():
                if not self.reader.is_alive():
                    raise AssertionError(f"{self.name} ended ({self.process.poll()}) before {what}:\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name} never reached {what} within {timeout}s "
                                         f"(last lines {self.lines[-3:]}):\n{self.tail()}")
                self.changed.wait(min(left, 0.5))

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM: Streams closes (leaves the group); killed if it has not within 45 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=45)
            except subprocess.TimeoutExpired:
                self.kill()
        self.reader.join(10)


class Input:
    """librdkafka's idempotent producer in a thread, RATE keyed records a second to `topic`
    until stopped: record i is "in-i" with key k{i % KEYS}, partitioned by murmur2 as the Java
    client would (Streams counts by key without a repartition, so it relies on the input being
    partitioned by key); what the brokers acknowledged, in order."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "partitioner": "murmur2_random"})
        self.lock = threading.Lock()
        self.acked: list[tuple[str, str]] = []  # (key, value)
        self.failed: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _delivered(self, error, message) -> None:
        with self.lock:
            if error is None:
                self.acked.append((message.key().decode(), message.value().decode()))
            else:
                self.failed.append(str(error))

    def _run(self) -> None:
        start, i = time.monotonic(), 0
        while not self.stopping.is_set():
            self.producer.produce(self.topic, key=f"k{i % KEYS}".encode(), value=f"in-{i}".encode(),
                                  on_delivery=self._delivered)
            i += 1
            due = start + i / RATE
            while (wait := due - time.monotonic()) > 0:
                self.producer.poll(wait)  # the pace, serving delivery reports meanwhile

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def stop(self) -> list[tuple[str, str]]:
        self.stopping.set()
        self.thread.join(10)
        assert self.producer.flush(60) == 0, "input records never acknowledged"
        assert not self.failed, self.failed
        with self.lock:
            return list(self.acked)


def wait_until(condition, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what} within {timeout}s"
        time.sleep(0.1)


def transaction_lines(gateway, application: str) -> list[dict]:
    """groupkeeper's log lines about this application's transactions and its group's pending
    offsets (for a failure's message)."""
    return [e for e in gateway.events() if "transaction" in e.get("event", "") or "unresolved" in e.get("event", "")
            if application in json.dumps(e)]


def unstable(survivor: Streams) -> int:
    """How many times the survivor's OffsetFetch was answered UNSTABLE_OFFSET_COMMIT (its
    consumer logs each at INFO)."""
    return survivor.log.read_text(errors="replace").count("still have unstable offsets")


def stuck(gateway, application: str, survivor: Streams, killed_at: float) -> str:
    """What a survivor that has not caught up is read from."""
    return (f"{time.monotonic() - killed_at:.0f}s after the kill; the survivor's OffsetFetch answered "
            f"UNSTABLE_OFFSET_COMMIT {unstable(survivor)} times; groupkeeper: "
            f"{transaction_lines(gateway, application)[-4:]}")


@pytest.mark.parametrize("hold", ["before-offsets", "after-offsets"])
def test_streams_exactly_once_with_an_instance_killed_mid_run(kafka, gateway, tmp_path, hold):
    application = f"ks-{hold}"
    topics = {"input": f"{application}-in", "copy": f"{application}-copy", "counts": f"{application}-counts"}
    for topic in topics.values():
        create_topic(kafka, topic, PARTITIONS)
    victim = Streams("victim", gateway.bootstrap, application, topics, tmp_path, hold=hold)
    survivor = Streams("survivor", gateway.bootstrap, application, topics, tmp_path)
    source = None
    try:
        # both running, the three tasks shared between them (Streams balances them: with empty
        # changelogs both instances are caught up)
        wait_until(lambda: victim.active and survivor.active and not victim.active & survivor.active
                   and victim.active | survivor.active == TASKS, "both instances with tasks", timeout=120)
        group = described([gateway.port], application)
        assert (group.protocol_type, group.protocol_data, len(group.members)) == ("consumer", "stream", 2)
        held_by_groupkeeper(gateway.port, broker_groups(kafka), application)

        source = Input(gateway.bootstrap, topics["input"])
        for instance in (victim, survivor):
            instance.wait_for(lambda i=instance: i.processed >= 100, "100 records processed", timeout=60)
        victim.hold_file.touch()
        victim.wait_for(lambda: victim.last("held") is not None, f"its hold ({hold})", timeout=30)
        victim.kill()
        killed_at, input_at_kill, survivor_at_kill = time.monotonic(), source.count, survivor.processed
        victim_processed = next(line for line in victim.lines if "held" in line)["processed"]
        assert victim_processed > 0 and survivor_at_kill > 0  # both were processing when it died

        wait_until(lambda: source.count >= input_at_kill + AFTER_KILL, f"{AFTER_KILL} records after the kill",
                   timeout=60)
        records = source.stop()
        try:  # its tasks, the victim's among them, running
            survivor.wait_for(lambda: survivor.active == TASKS, "all three tasks", timeout=60)
        except AssertionError as error:
            raise AssertionError(f"{stuck(gateway, application, survivor, killed_at)}\n{error}") from None
        copied = read_committed(gateway.bootstrap, topics["copy"], len(records), timeout=90)
        copy_complete = time.monotonic()
        assert len(copied) >= len(records), (
            f"the copy holds {len(copied)} of {len(records)} records "
            f"{stuck(gateway, application, survivor, killed_at)}\nsurvivor:\n{survivor.tail()}")
        assert Counter(copied) == Counter("out-" + value for _, value in records), "not every record exactly once"
        assert survivor.processed > survivor_at_kill  # it went on processing after the kill

        counts: dict[str, list[int]] = {}
        for line in read_committed(gateway.bootstrap, topics["counts"], len(records), timeout=60):
            key, n = line.split("=")
            counts.setdefault(key, []).append(int(n))
        expected = Counter(key for key, _ in records)
        assert counts == {key: list(range(1, n + 1)) for key, n in expected.items()}, "a count lost or repeated"

        # the changelog Streams created through the gateway, and the group where it belongs
        changelog = f"{application}-counts-changelog"
        assert [len(t.partitions) for t in metadata(kafka.bootstrap.split(",")[0], [changelog]).topics
                if t.error_code == 0] == [PARTITIONS]
        held_by_groupkeeper(gateway.port, broker_groups(kafka), application)
        ended = {e["event"] for e in transaction_lines(gateway, application)}
        assert "transactional offsets committed" in ended
        if hold == "after-offsets":  # the victim's offsets were pending, and went with its transaction
            assert "transactional offsets aborted" in ended
        print(f"{hold}: {len(records)} records, {input_at_kill} before the kill; processed before it: victim "
              f"{victim_processed}, survivor {survivor_at_kill}, survivor in all {survivor.processed}; copy complete "
              f"{copy_complete - killed_at:.1f}s after it; survivor's OffsetFetch answered UNSTABLE_OFFSET_COMMIT "
              f"{unstable(survivor)} times; groupkeeper: {sorted(ended)}")
    finally:
        if source is not None and not source.stopping.is_set():
            source.stopping.set()
        survivor.stop()
        if victim.process.poll() is None:
            victim.kill()
