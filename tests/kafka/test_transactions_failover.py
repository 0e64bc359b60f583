"""Exactly-once through the gateway while groupkeeper instances die (issue 36, item 7): two
gateway instances in front of Apache Kafka 4.4, confluent-kafka's read-process-write loop
(tests/support/eos_loop.py, a process of its own bootstrapped from both) copying a topic fed
all along, and an instance SIGKILLed under it the moment a transaction's offsets are pending
at groupkeeper, its EndTxn not sent yet:

- the instance that owns the loop's group, the producer relayed by the other: the survivor
  takes the group-partition over with the pending offsets (ZooKeeper has them) and learns
  the end the other instance recorded;
- the owner that also relays the producer (one kill, both): no instance records the end;
- the instance that relays the producer's transactional requests to the transaction
  coordinator (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn), the group
  owned by the other; then started again, taking its share of the group-partitions back
  under the running loop;
- the loop itself (its producer) SIGKILLed with its offsets pending, and started again with
  the same transactional id and group.

The loop's group is chosen once the instance relaying its producer is known (`run_loop`),
so that each kill is the one meant. Each time the output topic, read with read_committed,
holds every input record exactly once, the group's committed offsets are the input's end
offsets, nothing stays pending, no end is left unknown, and the group is groupkeeper's. How
each pending transaction was resolved (an end a gateway instance recorded, or its marker read
from the brokers' __consumer_offsets), and what the client saw, is printed (-s).

When the relay dies, the producer's transaction coordinator (the relay's own node, as
FindCoordinator through the gateway answers: coordinator/gateway/cluster.py) fails it, and
FindCoordinator through the survivor names the survivor's node, which librdkafka follows: the
same producer goes on (a broker's node id at the survivor's port, as the gateway answered
before, it did not follow, and had to be replaced). Its open transaction is aborted or
committed as it ends through the survivor; a pending transaction whose end no instance saw is
resolved from the brokers' marker.
EOS_LOOP_DEBUG=broker,metadata,eos writes librdkafka's debug log to the loop's log file."""

from __future__ import annotations

import glob
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kazoo.client import KazooClient

from coordinator.cluster.placement import partition_for
from coordinator.store import layout
from coordinator.topics.markers import offsets_partition
from tests.support import failover
from tests.support.clients import committed, find_coordinator, held_by_groupkeeper, produce_values, read_committed
from tests.support.coordinator_process import CoordinatorProcess
from tests.support.kafka import broker_groups, create_topic, metadata, start_gateway

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
BEFORE, RATE = 600, 100  # input records before the loop starts, and a second while it runs
# groupkeeper's failover settings (tests/support/failover.py: a 4 s ZooKeeper session), and a
# pending transaction whose end no instance recorded looked for at the brokers after 1 s, not 5
SETTINGS = {**failover.SETTINGS, "transactions_check_interval_ms": 1000}


class Feeder(threading.Thread):
    """The loop's input while it runs, until told to stop: records "PREFIX-i" to partition
    i % PARTITIONS at RATE a second, written to the brokers directly (not through a gateway:
    they are what is copied, not what is tested, and a gateway killed under them would only
    have them retried), idempotent, acks=all."""

    def __init__(self, bootstrap: str, topic: str, prefix: str):
        super().__init__(daemon=True)
        self.topic, self.prefix = topic, prefix
        self.values: list[str] = []  # what it wrote, in order
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "log_level": 3})
        self.failed: list = []
        self._halt = threading.Event()
        self.start()

    def run(self) -> None:
        began = time.monotonic()
        for i in itertools.count():
            if self._halt.wait(max(0.0, began + i / RATE - time.monotonic())):  # the pace, not a synchronization
                return
            self.values.append(f"{self.prefix}-{i}")
            self.producer.produce(self.topic, self.values[-1].encode(), partition=i % PARTITIONS,
                                  on_delivery=lambda error, _: error is None or self.failed.append(error))
            self.producer.poll(0)

    def finish(self) -> list[str]:
        """Stops writing: every value, once all were acknowledged."""
        self._halt.set()
        self.join(10)
        assert not self.is_alive(), "the feeder did not stop"
        assert self.producer.flush(60) == 0 and not self.failed, self.failed[:3]
        return self.values

    def stop(self) -> None:
        """Stops writing, and lets the producer go: it would go on asking for brokers that
        are gone once the tests' cluster stops."""
        self._halt.set()
        self.join(10)
        if self.producer is not None:
            self.producer.flush(5)
            self.producer = None


class LoopProcess:
    """tests/support/eos_loop.py as a process, its JSON lines followed by a thread (its
    stderr, librdkafka's log, in a file)."""

    def __init__(self, directory: Path, bootstrap: str, source: str, sink: str, transactional_id: str):
        self.stop_file = directory / f"stop-{transactional_id}"
        self.group_file = directory / f"group-{transactional_id}"
        self.log_path = directory / f"eos-loop-{transactional_id}.log"
        command = [sys.executable, "-m", "tests.support.eos_loop", "--bootstrap", bootstrap,
                   "--group-file", str(self.group_file), "--input", source, "--output", sink,
                   "--transactional-id", transactional_id,
                   "--seconds", "240", "--stop-file", str(self.stop_file)]
        if os.environ.get("EOS_LOOP_DEBUG"):
            command += ["--debug", os.environ["EOS_LOOP_DEBUG"]]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                            cwd=ROOT, text=True)
        self.lines: list[tuple[float, dict]] = []  # (time.monotonic() when read, line)
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                with self._changed:
                    self.lines.append((time.monotonic(), json.loads(line)))
                    self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def said(self, key: str) -> bool:
        with self._changed:
            return any(key in line for _, line in self.lines)

    def join(self, group: str) -> None:
        """Names the group its consumer joins (it waits for it)."""
        written = self.group_file.with_suffix(".tmp")
        written.write_text(group)
        written.rename(self.group_file)  # whole when it appears

    def _commits(self, since: float) -> list[float]:
        """When it said it committed a transaction, after `since` (time.monotonic())."""
        return [at for at, line in self.lines if at > since and "positions" in line]

    def commits(self, since: float = 0.0) -> int:
        with self._changed:
            return len(self._commits(since))

    def committing_again(self, since: float) -> float:
        """Seconds from `since` to its first commit after it."""
        with self._changed:
            return round(min(self._commits(since)) - since, 2)

    def wait_for(self, condition, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                assert self._reader.is_alive(), f"the loop ended ({self.process.poll()}) before {what}:\n{self.tail()}"
                left = deadline - time.monotonic()
                assert left > 0, f"the loop never reached {what} in {timeout} s:\n{self.tail()}"
                self._changed.wait(min(left, 0.5))

    def finish(self, total: int, timeout: float) -> dict:
        """Tells it the input holds `total` records: its last line, once it has copied them
        all and ended."""
        written = self.stop_file.with_suffix(".tmp")
        written.write_text(str(total))
        written.rename(self.stop_file)  # whole when it appears
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reader.join(10)
        done = next((line for _, line in self.lines if "done" in line), {})
        assert self.process.returncode == 0 and done.get("done") is True, \
            f"the loop exited {self.process.returncode} without copying everything: {done}\n{self.tail()}"
        return done

    def errors(self) -> list[dict]:
        """What the client raised and what the loop did about it, and every abort and new
        producer: what the client saw of the kill."""
        return [line for _, line in self.lines if {"error", "why", "rebalance"} & line.keys()]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def tail(self) -> str:
        said = "\n".join(json.dumps(line) for _, line in self.lines[-15:])
        return said + "\n-- stderr:\n" + self.log_path.read_text(errors="replace")[-4000:]


def start_instances(zookeeper, tmp_path: Path, kafka) -> list[CoordinatorProcess]:
    """Two gateway instances of one groupkeeper cluster, each serving once it reaches every
    broker, and the group-partitions shared out between them (25 each)."""
    instances = []
    for n in range(2):
        directory = tmp_path / f"gk{n}"
        directory.mkdir()
        chroot = {"chroot": instances[0].chroot} if instances else {}
        instances.append(start_gateway(zookeeper, directory, kafka, instance_id=n, **chroot, **SETTINGS))
    balanced(instances)
    return instances


def balanced(instances: list[CoordinatorProcess], timeout: float = 60.0) -> dict[int, list[int]]:
    """Until every group-partition is owned and the live instances hold equal shares: the
    group-partitions of each, by port."""
    live = [i for i in instances if i.process.poll() is None]
    deadline = time.monotonic() + timeout
    while True:
        status = json.loads(live[0].cli("cluster", "--json"))
        shares = {i["port"]: i["group_partitions"] for i in status["instances"]}
        if (not status["unowned"] and set(shares) == {i.port for i in live}
                and max(map(len, shares.values())) - min(map(len, shares.values())) <= 1):
            return shares
        assert time.monotonic() < deadline, f"the group-partitions never settled: {status}"
        time.sleep(0.1)


def owner(instances: list[CoordinatorProcess], group: str) -> CoordinatorProcess:
    """The instance coordinating `group`: FindCoordinator asked of every live instance, as
    clients ask it (tests/support/failover.py), each naming the same one."""
    live = [i for i in instances if i.process.poll() is None]
    named = {find_coordinator([i.port], group) for i in live}
    assert len(named) == 1, f"the instances disagree on {group}'s coordinator: {named}"
    return next(i for i in instances if i.port in named)


def transaction_coordinator(kafka, transactional_id: str) -> int:
    """The node that coordinates `transactional_id`'s transactions: the leader of its
    partition of __transaction_state (Kafka's abs(String.hashCode) % partitions, as for a
    group's partition of __consumer_offsets)."""
    topic = next(t for t in metadata(kafka.nodes[0].address, ["__transaction_state"]).topics if t.error_code == 0)
    n = offsets_partition(transactional_id, len(topic.partitions))
    return next(p.leader_id for p in topic.partitions if p.partition_index == n)


def relay(kafka, instances: list[CoordinatorProcess], loop: LoopProcess, transactional_id: str,
          timeout: float = 30.0) -> CoordinatorProcess:
    """The instance that relays the loop's producer's transactional requests to the broker
    that coordinates its transactional id: the one that relayed its InitProducerId there
    (`groupkeeper_gateway_requests_total`, by API and node). Asked when only the producer has
    started (its consumer waits for a group); the instance a producer asked FindCoordinator
    is its transaction coordinator (that instance's own node) until it fails the producer."""
    coordinator = str(transaction_coordinator(kafka, transactional_id))
    deadline = time.monotonic() + timeout
    while len(relays := [i for i in instances if (i.metric("groupkeeper_gateway_requests_total", api="InitProducerId",
                                                                node=coordinator) or 0) > 0]) != 1:
        assert time.monotonic() < deadline, f"no single relay of node {coordinator}: {[i.port for i in relays]}"
        time.sleep(0.1)
    return relays[0]


def kill_with_offsets_pending(victim: CoordinatorProcess, group: str, timeout: float = 30.0,
                              process: subprocess.Popen | None = None) -> tuple[list[dict], int]:
    """SIGKILLs `victim` (or `process`, the loop, with `victim` a live instance to ask)
    the moment `group`'s next transaction has its offsets pending: the
    loop holds a transaction open for `hold-ms` after its offsets were written (its EndTxn not
    sent yet), and the kill comes from a ZooKeeper watch on the group-partition's folder of
    pending transactions (store/pending.py; only this group's transactions are written
    there), armed while it is empty, so that the first change is their creation and the
    kill is sent from the watch's own thread, with no round trip before it. Returns what is
    pending right after the kill (where the victim owned the group, nobody can resolve
    anything until the survivor takes over: what it left behind), and how many ms after those
    offsets were written it was killed (-1: resolved before they could be read)."""
    client = KazooClient(hosts=victim.zookeeper)
    client.start(timeout=10)
    try:
        partitions = layout.decode(client.get(layout.config_path())[0])["group_partitions"]
        folder = layout.pending_path(partition_for(group, partitions))
        changed, killed = threading.Event(), threading.Event()

        target = process if process is not None else victim.process

        def kill(_) -> None:
            os.kill(target.pid, 9)  # SIGKILL
            killed.set()

        deadline = time.monotonic() + timeout
        while client.get_children(folder, watch=lambda _: changed.set()):  # the current transaction's
            assert changed.wait(max(0.0, deadline - time.monotonic())), f"{group}'s offsets stayed pending"
            changed.clear()
        client.get_children(folder, watch=kill)  # empty: the next write is the next transaction's
        assert killed.wait(max(0.0, deadline - time.monotonic())), f"{group} never had offsets pending"
        killed_ms = time.time() * 1000
        target.wait()  # reaped
        names = client.get_children(folder)
        written = client.exists(f"{folder}/{names[0]}") if names else None
    finally:
        client.stop()
        client.close()
    left = [row for row in json.loads(victim.cli("transactions", "list", "--json")) if row["group"] == group]
    return left, -1 if written is None else round(killed_ms - written.mtime)


def logs(instance: CoordinatorProcess) -> list[dict]:
    """Every line the instance logged, over all its starts, in order."""
    first = instance.tmp_path / f"groupkeeper-{instance.port}.log"
    later = sorted(glob.glob(str(instance.tmp_path / f"groupkeeper-{instance.port}-*.log")),
                   key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    return [json.loads(line) for path in [first, *map(Path, later)] if path.exists()
            for line in path.read_text().splitlines() if line.startswith("{")]


@dataclass
class Resolution:
    """A transaction's pending offsets resolved, as an instance logged it."""
    instance: int  # its index in the test's list
    at: float  # wall clock, s
    producer: tuple[int, int]  # producer id, epoch
    outcome: str  # committed, aborted
    way: str  # "recorded end" (an EndTxn a gateway instance recorded), "marker" (the brokers')


def resolutions(instances: list[CoordinatorProcess], transactional_id: str) -> list[Resolution]:
    """How the transactional id's pending offsets were resolved, on every instance: a
    resolution ("transactional offsets committed|aborted", store/pending.py) that follows at
    once "a transaction's end read from the brokers" for the same producer id and epoch was
    the marker's (cluster/pending_check.py resolves right after it logs it); any other, an
    end a gateway instance recorded. Warnings that an end could not be learned, as
    "unresolved"."""
    found = []
    for n, instance in enumerate(instances):
        marker: dict[tuple, float] = {}  # producer -> when its end was read from the brokers
        for line in logs(instance):
            if line.get("transactional_id") != transactional_id:
                continue
            producer, event = (line.get("producer_id"), line.get("producer_epoch")), line.get("event", "")
            at = datetime.fromisoformat(line["timestamp"]).timestamp()
            if event == "a transaction's end read from the brokers":
                marker[producer] = at
            elif event.startswith("transactional offsets "):
                read = marker.pop(producer, None)  # a read whose resolution found nothing left is no later one's
                way = "marker" if read is not None and at - read < 2.0 else "recorded end"
                found.append(Resolution(n, at, producer, event.rsplit(" ", 1)[1], way))
            elif event.startswith("a transaction ended without a known outcome"):
                found.append(Resolution(n, at, producer, "unknown", "unresolved"))
    return found


def counted(found: list[Resolution]) -> dict[str, dict[str, int]]:
    """Resolutions counted by instance, then way and outcome: the report."""
    counts: dict[str, dict[str, int]] = {}
    for r in found:
        by_way = counts.setdefault(f"instance {r.instance}", {})
        by_way[f"{r.way}, {r.outcome}"] = by_way.get(f"{r.way}, {r.outcome}", 0) + 1
    return counts


def resolved_after(found: list[Resolution], left: list[dict], killed_at: float) -> list[Resolution]:
    """What resolved the transactions pending at the kill (`left`): the first resolution of
    each one's producer id and epoch after it. Under transaction version 1 every transaction
    of a producer has one id and epoch; the first after the kill is the one left pending,
    since its successor's offsets come only once it ended."""
    firsts = []
    for row in left:
        producer = (row["producer_id"], row["producer_epoch"])
        later = sorted((r for r in found if r.producer == producer and r.at > killed_at), key=lambda r: r.at)
        assert later, f"the transaction pending at the kill, {producer}, was never resolved"
        firsts.append(later[0])
    return firsts


def end_offsets(kafka, topic: str) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "end-offsets"})
    try:
        return {(topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def check_exactly_once(kafka, instances: list[CoordinatorProcess], source: str, sink: str, group: str,
                       transactional_id: str, values: list[str]) -> None:
    """The output, read_committed, holds every input record once, copied; the group's
    committed offsets are the input's end offsets; nothing of the transactional id stays
    pending (the command, and every live instance's gauge); the group is groupkeeper's."""
    live = [i for i in instances if i.process.poll() is None]
    out = read_committed(live[0].bootstrap, sink, len(values))
    missing, twice = set("out-" + v for v in values) - set(out), len(out) - len(set(out))
    assert sorted(out) == sorted("out-" + v for v in values), \
        f"not every record exactly once: {len(out)} read, {twice} twice, {len(missing)} missing"
    ends = end_offsets(kafka, source)
    assert sum(ends.values()) == len(values)
    assert committed([i.port for i in live], group) == ends
    deadline = time.monotonic() + 30
    while rows := [r for r in json.loads(live[0].cli("transactions", "list", "--json"))
                   if r["transactional_id"] == transactional_id]:
        assert time.monotonic() < deadline, f"still pending: {rows}"
        time.sleep(0.2)
    assert all(i.metric("groupkeeper_transactions_pending") == 0 for i in live)
    held_by_groupkeeper(owner(instances, group).port, broker_groups(kafka), group)


def run_loop(kafka, tmp_path: Path, instances: list[CoordinatorProcess], name: str, owner_relays: bool):
    """Topics, the input before the loop, the loop's producer, the instance that relays its
    transactional requests, a group whose owner is that instance (`owner_relays`) or the
    other one, the loop's consumer in that group, and the feeder: (loop, feeder, the input so
    far, (source, sink, group, transactional id), the relay, the owner)."""
    source, sink, transactional_id = f"{name}-in", f"{name}-out", f"{name}-1"
    create_topic(kafka, source, PARTITIONS)
    create_topic(kafka, sink, PARTITIONS)
    before = produce_values(kafka.bootstrap, source, BEFORE, "in", PARTITIONS)
    loop = LoopProcess(tmp_path, ",".join(i.bootstrap for i in instances), source, sink, transactional_id)
    loop.wait_for(lambda: loop.said("producer"), "its producer ready", timeout=60)
    relaying = relay(kafka, instances, loop, transactional_id)
    for k in itertools.count():  # as tests/support/failover.py chooses groups by their coordinator
        group = f"{name}-copier-{k}"
        if (owner(instances, group) is relaying) == owner_relays:
            break
    loop.join(group)
    feeder = Feeder(kafka.bootstrap, source, "live")
    return loop, feeder, before, (source, sink, group, transactional_id), relaying, owner(instances, group)


def report(what: str, loop: LoopProcess, killed: float, left: list[dict], after_ms: int, done: dict,
           found: list[Resolution], at_kill: list[Resolution]) -> None:
    """What happened, for the record (-s): the kill, what the client saw, how the pending
    transactions were resolved."""
    print(f"\n{what}: killed {after_ms} ms after offsets were written, "
          f"{[(r['producer_id'], r['producer_epoch'], r['recorded']) for r in left]} pending then "
          f"(producer id, epoch, the transactional id's record); the loop committed again "
          f"{loop.committing_again(killed)} s after the kill; it saw {loop.errors()}; it ended {done}; "
          f"resolved: {counted(found)}; those pending at the kill: "
          f"{[(f'instance {r.instance}', r.way, r.outcome) for r in at_kill]}")


@pytest.mark.parametrize("relay_too", [False, True], ids=["owner", "owner-and-relay"])
def test_the_groups_owner_killed_with_a_transaction_open(zookeeper, tmp_path, kafka, relay_too):
    """The instance that owns the group killed while the loop's offsets are pending there:
    with the producer relayed by the survivor, or by the victim too (one kill, both)."""
    instances = start_instances(zookeeper, tmp_path, kafka)
    loop = feeder = None
    try:
        loop, feeder, before, (source, sink, group, transactional_id), _, victim = run_loop(
            kafka, tmp_path, instances, "txf-owner-relay" if relay_too else "txf-owner", owner_relays=relay_too)
        survivor = next(i for i in instances if i is not victim)
        loop.wait_for(lambda: loop.commits() >= 3, "three commits", timeout=90)
        left, after_ms = kill_with_offsets_pending(victim, group)
        killed, killed_at = time.monotonic(), time.time()
        assert left, "the owner died with nothing pending"  # the watch saw them: only it deletes them
        # the loop goes on: its member and its producer find the survivor
        loop.wait_for(lambda: loop.commits(since=killed) >= 3, "three commits after the kill", timeout=60)
        values = before + feeder.finish()
        done = loop.finish(len(values), timeout=120)
        found = resolutions(instances, transactional_id)
        at_kill = resolved_after(found, left, killed_at)
        report("the owner and the relay" if relay_too else "the owner", loop, killed, left, after_ms, done, found,
               at_kill)
        check_exactly_once(kafka, instances, source, sink, group, transactional_id, values)
        # what the dead owner left pending, the survivor resolved, and nothing stayed unknown
        assert {r.instance for r in at_kill} == {instances.index(survivor)}
        assert not [r for r in found if r.way == "unresolved"]
        assert survivor.stop() == 0
    finally:
        if feeder is not None:
            feeder.stop()
        if loop is not None:
            loop.kill()
        for instance in instances:
            instance.stop()


def test_the_instance_relaying_the_producer_killed_then_restarted(zookeeper, tmp_path, kafka):
    """The instance that relays the producer's transactional requests, not the group's
    owner, killed while the loop's offsets are pending (its EndTxn not sent yet); then
    started again under the running loop."""
    instances = start_instances(zookeeper, tmp_path, kafka)
    loop = feeder = None
    try:
        loop, feeder, before, (source, sink, group, transactional_id), victim, _ = run_loop(
            kafka, tmp_path, instances, "txf-relay", owner_relays=False)
        loop.wait_for(lambda: loop.commits() >= 3, "three commits", timeout=90)
        left, after_ms = kill_with_offsets_pending(victim, group)
        killed, killed_at = time.monotonic(), time.time()
        loop.wait_for(lambda: loop.commits(since=killed) >= 3, "three commits after the kill", timeout=60)
        # the same producer went on: FindCoordinator through the survivor named another node
        # (the survivor's own), which librdkafka follows (a broker's node id at another port
        # it does not: it would have been replaced after --retry-window)
        assert max(line.get("recreated", 0) for _, line in loop.lines) == 0, \
            [line for _, line in loop.lines if "why" in line]
        # started again on its ports: it takes its share of the group-partitions back from
        # the survivor, under the running loop (an orderly handover, transactions open)
        victim.start()
        for node in kafka.nodes:
            victim.wait_for_log("broker node reachable", node=node.node_id, timeout=60)
        balanced(instances)
        restarted = time.monotonic()
        loop.wait_for(lambda: loop.commits(since=restarted) >= 3, "three commits after the restart", timeout=60)
        values = before + feeder.finish()
        done = loop.finish(len(values), timeout=120)
        found = resolutions(instances, transactional_id)
        at_kill = resolved_after(found, left, killed_at)
        report(f"the relay (the group's owner after its restart: instance {instances.index(owner(instances, group))})",
               loop, killed, left, after_ms, done, found, at_kill)
        check_exactly_once(kafka, instances, source, sink, group, transactional_id, values)
        assert not [r for r in found if r.way == "unresolved"]
        # the restart broke nothing: nothing logged as an error, and both stop cleanly
        errors = [e for i in instances for e in logs(i) if e.get("level") in ("error", "critical")]
        assert not errors, errors[:5]
        assert [i.stop() for i in instances] == [0, 0]
    finally:
        if feeder is not None:
            feeder.stop()
        if loop is not None:
            loop.kill()
        for instance in instances:
            instance.stop()


def test_the_producer_killed_mid_transaction_and_started_again(zookeeper, tmp_path, kafka):
    """confluent-kafka's loop SIGKILLed the moment its transaction's offsets are pending (its
    EndTxn not sent), and started again with the same transactional id and group: its
    InitProducerId has Kafka abort the open transaction (the epoch bumped), which groupkeeper
    reads from the brokers' marker; the new loop copies the rest, the killed batch again."""
    instances = start_instances(zookeeper, tmp_path, kafka)
    loop = again = feeder = None
    try:
        loop, feeder, before, (source, sink, group, transactional_id), _, holder = run_loop(
            kafka, tmp_path, instances, "txf-producer", owner_relays=False)
        loop.wait_for(lambda: loop.commits() >= 3, "three commits", timeout=90)
        left, after_ms = kill_with_offsets_pending(holder, group, process=loop.process)
        killed, killed_at = time.monotonic(), time.time()
        assert left, "the loop died with nothing pending"
        again = LoopProcess(tmp_path, ",".join(i.bootstrap for i in instances), source, sink, transactional_id)
        again.wait_for(lambda: again.commits() >= 3, "three commits after the restart", timeout=90)
        values = before + feeder.finish()
        done = again.finish(len(values), timeout=120)
        found = resolutions(instances, transactional_id)
        at_kill = resolved_after(found, left, killed_at)
        report("the producer", again, killed, left, after_ms, done, found, at_kill)
        check_exactly_once(kafka, instances, source, sink, group, transactional_id, values)
        # the transaction the dead producer left open: aborted (by its successor's InitProducerId),
        # as read from the brokers' marker, no gateway having seen its end
        assert [(r.way, r.outcome) for r in at_kill] == [("marker", "aborted")]
        assert not [r for r in found if r.way == "unresolved"]
    finally:
        if feeder is not None:
            feeder.stop()
        for process in (loop, again):
            if process is not None:
                process.kill()
        for instance in instances:
            instance.stop()
