"""The cluster changing under the gateway (issue 35 item 3): a three-node Apache Kafka 4.4
cluster of this module's own behind `groupkeeper run --gateway`, with idempotent acks=all
producers (the Java client's Produce.java and librdkafka) and a consumer group (two
librdkafka members) running through the gateway while

a) partition leadership moves: kafka-reassign-partitions reorders every partition's
   replicas and kafka-leader-election (PREFERRED) makes the new first replica the leader,
   both tools run through the gateway;
b) a broker is killed with SIGKILL and started again, then made the leader of what it led
   before (a preferred election by librdkafka's admin client through the gateway).

Checked: no acknowledged record is lost (every value a producer was told was written is
read by the group, at-least-once duplicates allowed); every partition's records flow again
within the clients' retry times; the gateway's node ports follow the cluster (the killed
node's port closes once the controller fences it, and refuses connections while it is
away; it reopens once the node is back, and Produce reaches the node through it again);
Metadata through the gateway names the leaders the brokers name; the group is coordinated
by groupkeeper throughout (no broker's coordinator knows it, FindCoordinator through the
gateway names a groupkeeper instance).

The figures (how long each partition's records stopped being read around each change,
duplicates, how long the node port took to close and reopen) are printed (`pytest -s`) and
written to figures.json in the module's folder.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer, ElectionType, Producer as CKProducer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from protocol.schemas import FIND_COORDINATOR, METADATA
from tests.support.clients import RawConnection, committed
from tests.support.kafka import (KraftCluster, broker_groups, java_command, kraft, metadata, node_port, run_tool,
                                 start_gateway, wait_for_brokers)
from tools.kafka_admin import NodeConnection, Unreachable

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)

PARTITIONS = 3
RATE = 40  # records a second from each producer
MEMBERS = 2  # librdkafka consumers in each test's group
FLOW_AGAIN = 60.0  # seconds within which every partition's records must flow again: librdkafka's
# message.timeout.ms below, half the Java producer's delivery.timeout.ms (120 s, its default)
SETTINGS = {
    # A killed node keeps its partitions, and its place in Metadata (so its gateway port), until
    # the controller fences it, one broker session after its last heartbeat: 4 s instead of
    # Kafka's 9 s keeps the module within its time; the path is the same.
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    # Leadership moves only when a test moves it (kafka-leader-election), never on the
    # controller's own schedule (every 5 s in KraftCluster's settings): what is measured
    # around each change is that change.
    "auto.leader.rebalance.enable": "false",
}
FIGURES: dict[str, dict] = {}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster-changes")
    try:
        yield path
    finally:
        if FIGURES:
            (path / "figures.json").write_text(json.dumps(FIGURES, indent=2))
            print("\ncluster changes under the gateway:", json.dumps(FIGURES, indent=2))


@pytest.fixture(scope="module")
def kafka(folder):
    """This module's own three nodes (overriding the package's shared cluster, which is then
    not started for this module)."""
    cluster = KraftCluster(folder / "kafka", nodes=3, heap_mb=384, extra=SETTINGS)
    with cluster:
        wait_for_brokers(cluster)
        yield cluster


@pytest.fixture(scope="module")
def gateway(zookeeper, folder, kafka):
    directory = folder / "gateway"
    directory.mkdir()
    process = start_gateway(zookeeper, directory, kafka)
    try:
        yield process
    finally:
        assert process.stop() == 0


class Traffic:
    """A topic's records through the gateway: librdkafka's idempotent producer (in a thread,
    each record to partition i % PARTITIONS, so every partition gets one every 75 ms, its
    send and acknowledgement times kept), the Java client's
    (a process, until its stop file exists) and a group of librdkafka consumers (threads,
    every record read kept with its partition and time)."""

    def __init__(self, gateway, topic: str, group: str, folder: Path):
        self.bootstrap, self.topic, self.group, self.folder = gateway.bootstrap, topic, group, folder
        self.lock = threading.Lock()
        self.reads: list[tuple[str, int, float]] = []  # (value, partition, when read)
        self.sent: dict[str, float] = {}  # librdkafka's values -> when produced
        self.acks: list[tuple[str, int, float]] = []  # librdkafka's values acknowledged
        self.failed: list[str] = []  # librdkafka's deliveries that failed, why
        self.assignments: list[tuple[int, str, float, list[int]]] = []  # (member, assign/revoke, when, partitions)
        self.client_errors: list[str] = []  # what librdkafka reported (error_cb): transport errors are expected
        self.coordinator_lost: list[float] = []  # when a member's connection to its group coordinator broke
        self.logger = logging.getLogger(f"{__name__}.{topic}")
        self.logger.addHandler(_Lines(self._logged))
        self.logger.propagate = False
        self.crashed: list[BaseException] = []
        self.stopping, self.closing = threading.Event(), threading.Event()
        self.stop_file = folder / f"{topic}.stop"
        self.java: subprocess.Popen | None = None
        self.threads: list[threading.Thread] = []
        self.began = time.monotonic()
        self.steady = float("inf")  # when every partition's records, and the Java producer's, were first read
        self.unread = None

    def __enter__(self) -> Traffic:
        self.began = time.monotonic()
        for member in range(MEMBERS):
            self._thread(self._consume, member)
        self._thread(self._produce)
        self.java = subprocess.Popen(
            java_command("Produce", "--topic", self.topic, "--stop-file", str(self.stop_file), "--rate", str(RATE),
                         "--prefix", "java", f"bootstrap.servers={self.bootstrap}", "acks=all",
                         "enable.idempotence=true", "linger.ms=5"),
            stdout=subprocess.PIPE, stderr=open(self.folder / f"{self.topic}-produce-java.log", "w"), text=True,
            preexec_fn=kraft._die_with_parent)
        return self

    def __exit__(self, *exc) -> None:
        """Everything stopped (for a test that failed midway: without checks)."""
        self.stopping.set()
        self.stop_file.touch()
        self.closing.set()
        if self.java is not None and self.java.poll() is None:
            try:
                self.java.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                self.java.kill()
                self.java.communicate()
        for thread in self.threads:
            thread.join(timeout=120)

    def _thread(self, target, *args) -> None:
        def run():
            try:
                target(*args)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.crashed.append(exc)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _logged(self, line: str) -> None:
        if "GroupCoordinator" in line and "Disconnected" in line:
            with self.lock:
                self.coordinator_lost.append(time.monotonic())

    def _error(self, error) -> None:
        with self.lock:
            self.client_errors.append(str(error))

    def _produce(self) -> None:
        producer = CKProducer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                               "linger.ms": 5, "message.timeout.ms": int(FLOW_AGAIN * 1000),
                               "client.id": f"{self.topic}-producer", "error_cb": self._error})

        def delivered(error, message) -> None:
            with self.lock:
                if error is not None:
                    self.failed.append(str(error))
                else:
                    self.acks.append((message.value().decode(), message.partition(), time.monotonic()))
        start, i = time.monotonic(), 0
        while not self.stopping.is_set():
            value = f"ck-{i}"
            with self.lock:
                self.sent[value] = time.monotonic()
            producer.produce(self.topic, value.encode(), partition=i % PARTITIONS, on_delivery=delivered)
            i += 1
            due = start + i / RATE
            while (wait := due - time.monotonic()) > 0:
                producer.poll(wait)
        self.unread = producer.flush(FLOW_AGAIN + 30)

    def _consume(self, member: int) -> None:
        consumer = CKConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                               "auto.offset.reset": "earliest", "enable.auto.commit": True,
                               "auto.commit.interval.ms": 1000, "client.id": f"{self.group}-{member}",
                               "error_cb": self._error, "logger": self.logger})

        def assigned(_, partitions) -> None:
            with self.lock:
                self.assignments.append((member, "assign", time.monotonic(), [p.partition for p in partitions]))

        def revoked(_, partitions) -> None:
            with self.lock:
                self.assignments.append((member, "revoke", time.monotonic(), [p.partition for p in partitions]))
        consumer.subscribe([self.topic], on_assign=assigned, on_revoke=revoked)
        try:
            while not self.closing.is_set():
                message = consumer.poll(0.2)
                if message is None:
                    continue
                if message.error() is not None:
                    self._error(message.error())
                    continue
                with self.lock:
                    self.reads.append((message.value().decode(), message.partition(), time.monotonic()))
        finally:
            consumer.close()

    # -- what the test reads -----------------------------------------------------------

    def flowing_since(self, since: float, timeout: float = FLOW_AGAIN) -> float:
        """Wait until every partition has had a record read that librdkafka produced at
        `since` or later; when that was. The first records (and the Java producer's, whose
        JVM takes seconds to start) are waited for with `since` = 0."""
        deadline = time.monotonic() + timeout
        while True:
            self.healthy()
            with self.lock:
                fresh = {p for v, p, _ in self.reads if v.startswith("ck-") and self.sent[v] >= since}
                java = since > 0 or any(v.startswith("java-") for v, _, _ in self.reads)
            if len(fresh) == PARTITIONS and java:
                now = time.monotonic()
                self.steady = min(self.steady, now)
                return now
            assert time.monotonic() < deadline, (
                f"{self.topic}: only partitions {sorted(fresh)} had records read within {timeout:.0f} s"
                f" (java read: {java}); librdkafka said {self.client_errors[-5:]}")
            time.sleep(0.05)

    def healthy(self) -> None:
        assert not self.crashed, self.crashed
        assert self.java.poll() is None, f"the Java producer exited {self.java.returncode} early"
        with self.lock:
            assert not self.failed, f"librdkafka's deliveries failed: {self.failed[:5]}"

    def stalls(self, start: float, end: float) -> dict[int, float]:
        """Per partition, the longest time without a record read that overlaps [start, end]:
        how long its records stopped flowing around a change made at `start`."""
        with self.lock:
            reads = list(self.reads)
        out = {}
        for partition in range(PARTITIONS):
            times = sorted(t for _, p, t in reads if p == partition)
            gaps = [b - a for a, b in zip(times, times[1:]) if b >= start and a <= end]
            out[partition] = round(max(gaps, default=0.0), 2)
        return out

    def latency(self, start: float, end: float) -> float:
        """The longest time from librdkafka's send to the group's first read, of the records
        sent in [start, end]."""
        with self.lock:
            first = {}
            for value, _, when in self.reads:
                if value.startswith("ck-") and start <= self.sent[value] <= end:
                    first.setdefault(value, when)
            return round(max((when - self.sent[v] for v, when in first.items()), default=0.0), 2)

    def finish(self) -> dict:
        """Stop producing; wait until the group has read every value a producer had
        acknowledged (none lost), then stop the group. The counts."""
        self.stopping.set()
        self.stop_file.touch()
        out, _ = self.java.communicate(timeout=FLOW_AGAIN + 60)
        assert self.java.returncode == 0, f"the Java producer exited {self.java.returncode}"
        java = json.loads(out.strip().splitlines()[-1])
        self.threads[-1].join(timeout=FLOW_AGAIN + 60)
        assert not self.crashed, self.crashed
        assert self.unread == 0 and not self.failed, (self.unread, self.failed[:5])
        assert java["failed"] == 0, f"the Java producer had {java['failed']} records fail"
        with self.lock:
            acked = {v for v, _, _ in self.acks} | set(java["acked"])
            produced = len(self.sent) + len(java["acked"])
        assert len(acked) == produced, f"{produced - len(acked)} records produced were not acknowledged"
        deadline = time.monotonic() + FLOW_AGAIN
        while True:
            with self.lock:
                missing = acked - {v for v, _, _ in self.reads}
            if not missing:
                break
            assert time.monotonic() < deadline, (
                f"{len(missing)} of {len(acked)} acknowledged records never read, e.g. {sorted(missing)[:10]}")
            time.sleep(0.1)
        self.closing.set()
        for thread in self.threads:
            thread.join(timeout=60)
        assert not self.crashed, self.crashed
        with self.lock:
            read = [v for v, _, _ in self.reads]
        assert set(read) == acked, f"read what was never acknowledged: {sorted(set(read) - acked)[:10]}"
        return {"acknowledged": len(acked), "java": len(java["acked"]), "librdkafka": len(acked) - len(java["acked"]),
                "read": len(read), "duplicates": len(read) - len(set(read)),
                "rebalances_after_start": sum(1 for _, kind, when, _ in self.assignments
                                              if kind == "assign" and when > self.steady),
                "client_errors": len(self.client_errors), "coordinator_connections_lost": len(self.coordinator_lost)}


class _Lines(logging.Handler):
    """librdkafka's log lines (its `logger`), each handed to `take`."""

    def __init__(self, take):
        super().__init__(logging.DEBUG)
        self.take = take

    def emit(self, record: logging.LogRecord) -> None:
        self.take(record.getMessage())


# -- the cluster and the gateway, as they are seen ---------------------------------------

def leaders(address: str, topic: str) -> dict[int, int]:
    [found] = [t for t in metadata(address, [topic]).topics if t.name == topic]
    return {p.partition_index: p.leader_id for p in found.partitions}


def replicas(address: str, topic: str) -> dict[int, list[int]]:
    [found] = [t for t in metadata(address, [topic]).topics if t.name == topic]
    return {p.partition_index: list(p.replica_nodes) for p in found.partitions}


def live(kafka: KraftCluster) -> list[int]:
    return [n.node_id for n in kafka.nodes if n.alive]


def until(condition, timeout: float, what: str, pause: float = 0.1):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(pause)
    return found


def followed(gateway, kafka: KraftCluster, topic: str, expected: dict[int, int] | None = None,
             timeout: float = 30.0) -> dict[int, int]:
    """Until every live node names the same leaders (`expected`, if given), and Metadata
    through the gateway names them too, with the live nodes at their node ports (and
    groupkeeper's instance) as its brokers; the leaders."""
    def agreed():
        try:
            seen = [leaders(kafka.node(n).address, topic) for n in live(kafka)]
            through = metadata(gateway.bootstrap, [topic])
        except Unreachable:
            return None
        [mine] = [t for t in through.topics if t.name == topic]
        brokers = {b.node_id: b.port for b in through.brokers}
        want = {n: node_port(gateway, n) for n in live(kafka)}
        if (all(s == seen[0] for s in seen) and (expected is None or seen[0] == expected)
                and {p.partition_index: p.leader_id for p in mine.partitions} == seen[0]
                and {n: p for n, p in brokers.items() if n < INSTANCE_NODE_BASE} == want
                and brokers.get(INSTANCE_NODE_BASE) == gateway.port):
            return seen[0]
        return None
    return until(agreed, timeout, f"the brokers and the gateway agreeing on {topic}'s leaders {expected or ''}")


def coordinated_here(gateway, kafka: KraftCluster, group: str) -> None:
    """The group lives in groupkeeper: no broker's coordinator knows it; FindCoordinator on
    the gateway's listener and on every open node port names groupkeeper's instance."""
    assert group not in broker_groups(kafka)
    for port in [gateway.port] + [node_port(gateway, n) for n in live(kafka)]:
        connection = RawConnection(port, timeout=10)
        try:
            found = connection.call(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        finally:
            connection.close()
        assert found.error_code == 0 and found.node_id == INSTANCE_NODE_BASE and found.port == gateway.port, found


def serves(gateway, node: int) -> list[int]:
    """A Metadata request relayed through node `node`'s port, answered: the brokers it names."""
    connection = NodeConnection("127.0.0.1", node_port(gateway, node), timeout=10)
    try:
        return sorted(b.node_id for b in connection.call(METADATA, {"topics": []}).brokers)
    finally:
        connection.close()


def event_after(gateway, mark: int, event: str, timeout: float, **fields) -> dict:
    """The first `event` (with `fields`) the gateway logs after its first `mark` entries."""
    def found():
        return next((e for e in gateway.events()[mark:]
                     if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())), None)
    return until(found, timeout, f"the gateway logging {event!r} {fields}", pause=0.05)


def at(entry: dict) -> float:
    """A log entry's time, as time.time() has it."""
    return datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()


def reassign(gateway, kafka: KraftCluster, topic: str, plan: dict[int, list[int]], folder: Path) -> None:
    """kafka-reassign-partitions --execute through the gateway, until every node names the
    replicas in `plan`'s order (a new order of the same replicas moves no data: it is done
    at once, and --verify, one more JVM, would say so)."""
    path = folder / f"{topic}-reassignment.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r} for p, r in sorted(plan.items())]}))
    run_tool("kafka-reassign-partitions", "--bootstrap-server", gateway.bootstrap, "--reassignment-json-file",
             str(path), "--execute")
    until(lambda: all(replicas(kafka.node(n).address, topic) == plan for n in live(kafka)), 30,
          f"{topic}'s replicas reordered")


def new_topic(gateway, kafka: KraftCluster, topic: str) -> dict[int, int]:
    """`topic` created through the gateway (librdkafka's admin client: CreateTopics relayed),
    replicated three times; once every node and the gateway name its leaders, those."""
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})  # kept until answered: its end fails the future
    [done] = admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=30).values()
    done.result(timeout=60)
    del admin
    return followed(gateway, kafka, topic, timeout=60)


def elect_preferred(gateway, kafka: KraftCluster, topic: str, expected: dict[int, int], folder: Path,
                    tool: bool = True) -> int:
    """A preferred leader election of `topic`'s partitions through the gateway, by Kafka's
    kafka-leader-election (the Java admin client) or, `tool` False, librdkafka's admin
    client; again while a preferred leader is not back in its partition's ISR yet, until
    the brokers and the gateway name `expected`. How many elections it took."""
    path = folder / f"{topic}-election.json"
    path.write_text(json.dumps({"partitions": [{"topic": topic, "partition": p} for p in range(PARTITIONS)]}))
    deadline, runs = time.monotonic() + 60, 0
    while True:
        runs += 1
        if tool:
            done = run_tool("kafka-leader-election", "--bootstrap-server", gateway.bootstrap, "--election-type",
                            "PREFERRED", "--path-to-json-file", str(path), check=False)
            said = f"{done.stdout}{done.stderr[-2000:]}"
        else:
            admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
            # no timeouts given: confluent-kafka 2.16.1's elect_leaders fails on any keyword (SystemError)
            said = str(admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(PARTITIONS)])
                       .result(timeout=60))
            del admin
        try:
            followed(gateway, kafka, topic, expected, timeout=5)
            return runs
        except AssertionError:
            assert time.monotonic() < deadline, f"the preferred leaders {expected} never elected: {said}"


# -- the tests ---------------------------------------------------------------------------

def test_records_go_on_while_leadership_moves(kafka, gateway, folder):
    topic, group = "moved", "moved-group"
    before = new_topic(gateway, kafka, topic)
    order = replicas(kafka.node(1).address, topic)
    assert before == {p: r[0] for p, r in order.items()}  # a new topic's preferred leaders lead
    with Traffic(gateway, topic, group, folder) as traffic:
        traffic.flowing_since(0, timeout=90)  # the Java producer's JVM starts meanwhile
        coordinated_here(gateway, kafka, group)
        plan = {p: r[1:] + r[:1] for p, r in order.items()}  # the second replica becomes the preferred leader
        reassign(gateway, kafka, topic, plan, folder)
        assert followed(gateway, kafka, topic) == before  # reordered, not moved yet
        moved = time.monotonic()
        runs = elect_preferred(gateway, kafka, topic, {p: r[0] for p, r in plan.items()}, folder)
        elected = time.monotonic()
        flowing = traffic.flowing_since(elected)
        coordinated_here(gateway, kafka, group)
        counts = traffic.finish()
    assert sum(committed([gateway.port], group).values()) > 0  # its commits went to groupkeeper
    assert group not in broker_groups(kafka)
    FIGURES["leadership moved"] = {
        "election_tool_s": round(elected - moved, 2), "election_runs": runs,
        "flowing_again_after_election_s": round(flowing - elected, 2),
        "longest_stall_per_partition_s": traffic.stalls(moved, flowing),
        "worst_send_to_read_s": traffic.latency(moved - 1, flowing), **counts}


def test_records_go_on_while_a_broker_is_killed_and_started_again(kafka, gateway, folder):
    topic, group = "killed", "killed-group"
    first = new_topic(gateway, kafka, topic)
    # Connections on the gateway's own port (where clients bootstrap, and find their group
    # coordinator) relay to any broker, in turn: three made one after another (nothing else
    # relays meanwhile) go to the three nodes. The one whose broker is killed is not the
    # broker's connection but groupkeeper's: it must stay open and be answered again.
    bystanders = [NodeConnection("127.0.0.1", gateway.port, timeout=10) for _ in range(3)]
    for connection in bystanders:
        connection.call(METADATA, {"topics": []})
    with Traffic(gateway, topic, group, folder) as traffic:
        traffic.flowing_since(0, timeout=90)
        coordinated_here(gateway, kafka, group)
        victim = first[0]
        assert serves(gateway, victim) == sorted(live(kafka) + [INSTANCE_NODE_BASE])
        port = node_port(gateway, victim)

        mark, killed_at, killed = len(gateway.events()), time.time(), time.monotonic()
        kafka.kill(victim)
        # the gateway saw its link to the victim end (a bystander's): until the controller
        # fences the victim, its port is still open, but a connection on the gateway's own
        # port relays to the brokers that are not in an outage
        address = kafka.node(victim).address
        until(lambda: any(e.get("event") in ("broker closed its connection", "broker unreachable")
                          and e.get("broker") == address for e in gateway.events()[mark:]),
              30, f"the gateway seeing broker {address} go", pause=0.02)
        for _ in range(3):
            fresh = NodeConnection("127.0.0.1", gateway.port, timeout=10)
            try:
                fresh.call(METADATA, {"topics": []})
            finally:
                fresh.close()
        # until the controller fences it, its port is open and the gateway closes what it
        # cannot relay; after, the port is closed: either way a client is turned away
        with pytest.raises((Unreachable, OSError)):
            serves(gateway, victim)
        left = event_after(gateway, mark, "broker node left: its ports closed", 60, node=victim)
        with pytest.raises(Unreachable, match="refused"):
            NodeConnection("127.0.0.1", port, timeout=10)
        moved = followed(gateway, kafka, topic)
        assert victim not in moved.values()
        for connection in bystanders:
            assert sorted(b.node_id for b in connection.call(METADATA, {"topics": []}).brokers) == sorted(
                live(kafka) + [INSTANCE_NODE_BASE])
        flowing = traffic.flowing_since(killed)
        coordinated_here(gateway, kafka, group)
        down = {"port_closed_after_kill_s": round(at(left) - killed_at, 2),
                "flowing_again_after_kill_s": round(flowing - killed, 2),
                "longest_stall_per_partition_s": traffic.stalls(killed, flowing),
                "worst_send_to_read_s": traffic.latency(killed - 1, flowing)}

        mark, starting = len(gateway.events()), time.time()
        kafka.start_node(victim)
        started = time.time()
        reopened = event_after(gateway, mark, "broker node reachable", 60, node=victim)
        assert serves(gateway, victim) == sorted(live(kafka) + [INSTANCE_NODE_BASE])
        followed(gateway, kafka, topic)
        produced = gateway.metric("groupkeeper_gateway_requests_total", api="Produce", node=str(victim))
        back = time.monotonic()
        runs = elect_preferred(gateway, kafka, topic, first, folder, tool=False)
        elected = time.monotonic()
        until(lambda: gateway.metric("groupkeeper_gateway_requests_total", api="Produce",
                                     node=str(victim)) > produced, 30, f"Produce relayed to node {victim} again")
        flowing = traffic.flowing_since(elected)
        coordinated_here(gateway, kafka, group)
        counts = traffic.finish()
    for connection in bystanders:
        connection.close()
    assert sum(committed([gateway.port], group).values()) > 0
    assert group not in broker_groups(kafka)
    events = [e for e in gateway.events() if e.get("logger") == "groupkeeper.gateway"]
    FIGURES["broker killed and started again"] = {
        "victim": victim, **down,
        "node_start_s": round(started - starting, 2),
        "port_reopened_after_node_started_s": round(at(reopened) - started, 2),
        "port_reopened_after_start_node_s": round(at(reopened) - starting, 2),
        "election_runs": runs, "election_s": round(elected - back, 2),
        "flowing_again_after_election_s": round(flowing - elected, 2),
        "longest_stall_per_partition_around_return_s": traffic.stalls(back, flowing),
        "worst_send_to_read_around_return_s": traffic.latency(back - 1, flowing),
        "gateway_events": sorted({e["event"] for e in events if at(e) >= killed_at - 1}),
        **counts}
