"""A coordinator crash costs the consumers one detection, not two.

Two `groupkeeper run --gateway` instances in front of Tansu, every client bootstrapped from
both; an idempotent librdkafka producer writes all along; a classic group (librdkafka,
kafka-python and, where installed, aiokafka, each with auto-commit every second) and a
KIP-848 group (librdkafka) read. Their sessions are as long as groupkeeper's ZooKeeper
session (the clash of the defaults: the clients' sessions run out during the failover, and
librdkafka's members come back under new member ids). The instance that coordinates both
groups is killed with SIGKILL. Every member must read again within `zk_session_timeout` +
3 s of the kill, nothing acknowledged is lost, and no more is read twice than the commits in
flight and the stall allow."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import threading
import time

import pytest
from confluent_kafka import Producer

from tests.support.clients import committed, find_coordinator
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.member_process import MemberProcess
from tests.support.tansu import tansu  # noqa: F401 - a fixture

TOPIC, PARTITIONS = "failover", 6
ZK_SESSION = 4.0  # seconds: groupkeeper's zk_session_timeout (the most the tests' ZooKeeper grants), and the
# members' session.timeout.ms
BUDGET = ZK_SESSION + 3.0  # issue 38: reading again within zk_session_timeout + 3 s
RATE = 100  # records a second
COMMIT_MS = 1000  # the members' auto-commit interval
FAST = {"metadata_max_age_ms": 500, "group_min_session_timeout_ms": 1000, "zk_session_timeout": ZK_SESSION}
CLASSIC = ["librdkafka", "kafka-python"] + (["aiokafka"] if importlib.util.find_spec("aiokafka") else [])


class Steady:
    """A producer thread writing RATE records a second to both gateways, numbering them; the
    values the brokers acknowledged."""

    def __init__(self, bootstrap: str):
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 120_000})
        self.acked: set[str] = set()
        self.failed: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.add(message.value().decode())
        else:
            self.failed.append(error)

    def _run(self) -> None:
        for n in itertools.count():
            if self._stop.is_set():
                break
            self.producer.produce(TOPIC, f"v{n}".encode(), on_delivery=self._delivered)
            self.producer.poll(0)
            time.sleep(1 / RATE)

    def stop(self) -> set[str]:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(120) == 0, "records never acknowledged"
        return self.acked


def member(client: str, protocol: str, bootstrap: str, group: str, directory, n: int) -> MemberProcess:
    stop_file = directory / f"stop-{group}-{n}"
    command = [sys.executable, "-m", "tests.support.pymember", "--client", client, "--bootstrap", bootstrap,
               "--group", group, "--protocol", protocol, "--topics", TOPIC, "--seconds", "600",
               "--stop-file", str(stop_file), "--session-timeout-ms", str(int(ZK_SESSION * 1000)),
               "--auto-commit-ms", str(COMMIT_MS), "--commit"]
    return MemberProcess(f"{client} ({protocol})", command, directory / f"member-{group}-{n}.log", stop_file)


def pauses(m: MemberProcess, start: float, end: float) -> tuple[float, float]:
    """How long in all the member read nothing in [start, end] (gaps over a second between
    its count lines, which come every half second while it reads), and when it last read
    again after one, counted from `start` (0: it never paused)."""
    times = [start] + [t for t, _ in m.counts if start < t < end] + [end]
    gaps = [(b - a, b - start) for a, b in zip(times, times[1:]) if b - a > 1.0]
    return round(sum(g for g, _ in gaps), 2), round(max((e for _, e in gaps), default=0.0), 2)


def test_a_killed_coordinator_costs_the_consumers_one_detection(zookeeper, tmp_path, tansu):  # noqa: F811
    tansu.create_topic(TOPIC, PARTITIONS)
    instances = [CoordinatorProcess(zookeeper, tmp_path, instance_id=0, gateway=tansu.bootstrap, **FAST)]
    instances.append(CoordinatorProcess(zookeeper, tmp_path, chroot=instances[0].chroot, instance_id=1,
                                        gateway=tansu.bootstrap, **FAST))
    for instance in instances:
        pin_node_ports(instance, [tansu.node_id])
        instance.start()
    ports = [i.port for i in instances]
    both = ",".join(i.bootstrap for i in instances)
    # two groups coordinated by the same instance, the one to be killed
    for k in itertools.count():
        classic, consumer = f"fo-classic-{k}", f"fo-consumer-{k}"
        owner = find_coordinator(ports, classic)
        if find_coordinator(ports, consumer) == owner:
            break
    victim = next(i for i in instances if i.port == owner)
    survivor = next(i for i in instances if i.port != owner)
    producer = Steady(both)
    members = [member(c, "classic", both, classic, tmp_path, n) for n, c in enumerate(CLASSIC)]
    members.append(member("librdkafka", "consumer", both, consumer, tmp_path, len(members)))
    groups = {classic: members[:-1], consumer: members[-1:]}
    try:
        for group_members in groups.values():
            first = group_members[0]
            first.wait_for(lambda _: sum(len(m.assigned) for m in group_members) == PARTITIONS
                           and all(m.count > 0 for m in group_members), what="every partition held and read")
        time.sleep(2)  # reading steadily
        victim.signal(9)  # SIGKILL
        killed = time.monotonic()
        for m in members:  # each reads again
            at_kill = m.count
            m.wait_for(lambda m: m.count > at_kill and m.counts[-1][0] > killed + 1, timeout=60,
                       what="reading again after the kill")
        time.sleep(BUDGET + 2)  # long enough for a second detection to show, had there been one
        observed = time.monotonic()
        paused = {m.name: pauses(m, killed, observed) for m in members}
        print(f"per member, seconds without reading after the kill and when it read again (budget {BUDGET} s): "
              f"{paused}")
        acked = producer.stop()
        expected = len(acked) + len(producer.failed)
        for group in groups:  # everything read and committed
            deadline = time.monotonic() + 90
            while sum(committed([survivor.port], group).values()) < expected:
                assert time.monotonic() < deadline, f"{group} never committed every record"
                time.sleep(0.5)
        results = {group: [m.stop() for m in group_members] for group, group_members in groups.items()}
    finally:
        for m in members:
            m.kill()
        for instance in instances:
            instance.stop()
    assert not producer.failed, producer.failed[:3]
    for group, answers in results.items():
        read = [v for answer in answers for v in answer["values"]]
        assert acked <= set(read), f"{group} lost {len(acked - set(read))} acknowledged records"
        twice = len(read) - len(set(read))
        print(f"{group}: {len(read)} read, {twice} twice")
        assert twice <= RATE * (COMMIT_MS / 1000 + BUDGET), f"{group} read {twice} records twice"
    assert all(again <= BUDGET for _, again in paused.values()), f"reading again after {BUDGET} s: {paused}"
    # the owner told of the clash once for the classic group (4 s sessions, 4 s + 3 s detection)
    warned = [e for e in victim.events() if e.get("event", "").startswith("session timeout within the failover")]
    assert [(e["group"], e["failover_detection_s"]) for e in warned] == [(classic, ZK_SESSION + 3.0)]
    replaced = [e for e in survivor.events() if e.get("event") == "member removed" and e.get("group") == classic]
    print(f"removed from {classic} by the survivor: {[e.get('reason') for e in replaced]}")
