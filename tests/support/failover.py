"""A coordinator crash under real consumers, measured: the scenario of
tests/tansu/test_failover_clients.py and tests/kafka/test_failover_clients.py.

Two `groupkeeper run --gateway` instances of one cluster in front of a broker, every client
bootstrapped from both; an idempotent librdkafka producer writes RATE records a second all
along; a classic group and a KIP-848 group of the members the test names read with
auto-commit every second and sessions as long as groupkeeper's ZooKeeper session (the clash
of the defaults: the clients' sessions run out during the failover). The instance that
coordinates both groups is killed with SIGKILL; `run` returns, per member, how long it read
nothing after the kill and when it last read again, and per group what was read, so that
the test asserts what it must."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from tests.support import kafka as java
from tests.support.clients import committed, find_coordinator
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.member_process import MemberProcess

TOPIC, PARTITIONS = "failover", 6
ZK_SESSION = 4.0  # seconds: groupkeeper's zk_session_timeout (the most the tests' ZooKeeper grants)
SESSION_MS = int(ZK_SESSION * 1000)  # the classic members' session.timeout.ms: the clash
BUDGET = ZK_SESSION + 3.0  # issue 38: reading again within zk_session_timeout + 3 s
RATE = 100  # records a second
COMMIT_MS = 1000  # the members' auto-commit interval
SETTINGS = {"metadata_max_age_ms": 500, "group_min_session_timeout_ms": 1000, "zk_session_timeout": ZK_SESSION}

# (bootstrap, group, directory, n) -> a member process reading TOPIC
MemberFactory = Callable[[str, str, Path, int], MemberProcess]


def python_member(client: str, protocol: str) -> MemberFactory:
    """A member of kafka-python, librdkafka or aiokafka (tests/support/pymember.py)."""
    def start(bootstrap: str, group: str, directory: Path, n: int) -> MemberProcess:
        stop_file = directory / f"stop-{group}-{n}"
        command = [sys.executable, "-m", "tests.support.pymember", "--client", client, "--bootstrap", bootstrap,
                   "--group", group, "--protocol", protocol, "--topics", TOPIC, "--seconds", "600",
                   "--stop-file", str(stop_file), "--session-timeout-ms", str(SESSION_MS),
                   "--auto-commit-ms", str(COMMIT_MS), "--commit"]
        return MemberProcess(f"{client} ({protocol})", command, directory / f"member-{group}-{n}.log", stop_file)
    return start


def java_member(protocol: str) -> MemberFactory:
    """A member of the Java client (tests/kafka/java/GroupConsumer.java)."""
    def start(bootstrap: str, group: str, directory: Path, n: int) -> MemberProcess:
        stop_file = directory / f"stop-{group}-{n}"
        props = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                 "enable.auto.commit": "true", "auto.commit.interval.ms": COMMIT_MS}
        if protocol == "classic":  # a consumer-protocol member's session is the coordinator's
            props.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 1000})
        command = java.java_command("GroupConsumer", "--topics", TOPIC, "--seconds", "600", "--stop-file",
                                    str(stop_file), "--commit", *(f"{k}={v}" for k, v in props.items()))
        return MemberProcess(f"Java ({protocol})", command, directory / f"member-{group}-{n}.log", stop_file)
    return start


class Steady:
    """A producer thread writing RATE records a second, numbering them; the values the
    brokers acknowledged."""

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


def pauses(m: MemberProcess, start: float, end: float) -> tuple[float, float]:
    """How long in all the member read nothing in [start, end] (gaps over a second between
    its count lines, which come every half second while it reads), and when it last read
    again after one, counted from `start` (0: it never paused)."""
    times = [start] + [t for t, _ in m.counts if start < t < end] + [end]
    gaps = [(b - a, b - start) for a, b in zip(times, times[1:]) if b - a > 1.0]
    return round(sum(g for g, _ in gaps), 2), round(max((e for _, e in gaps), default=0.0), 2)


@dataclass
class Outcome:
    groups: dict[str, str]  # "classic" / "consumer" -> the group's id
    paused: dict[str, tuple[float, float]]  # member -> (seconds without reading, read again at)
    read: dict[str, list[str]]  # group id -> every value its members read, in all
    acked: set[str]  # what the brokers acknowledged
    failed: list  # deliveries that failed
    victim: CoordinatorProcess
    survivor: CoordinatorProcess


def run(zookeeper, tmp_path: Path, bootstrap: str, node_ids: list[int], create_topic: Callable[[str, int], None],
        classic: list[MemberFactory], consumer: list[MemberFactory], start_timeout: float = 90.0) -> Outcome:
    create_topic(TOPIC, PARTITIONS)
    instances = [CoordinatorProcess(zookeeper, tmp_path, instance_id=0, gateway=bootstrap, **SETTINGS)]
    instances.append(CoordinatorProcess(zookeeper, tmp_path, chroot=instances[0].chroot, instance_id=1,
                                        gateway=bootstrap, **SETTINGS))
    members: list[MemberProcess] = []
    producer = None
    try:
        for instance in instances:
            pin_node_ports(instance, node_ids)
            instance.start()
        for instance in instances:
            for node in node_ids:
                instance.wait_for_log("broker node reachable", node=node, timeout=60)
        ports = [i.port for i in instances]
        both = ",".join(i.bootstrap for i in instances)
        for k in itertools.count():  # two groups coordinated by the same instance, the one to be killed
            groups = {"classic": f"fo-classic-{k}", "consumer": f"fo-consumer-{k}"}
            owner = find_coordinator(ports, groups["classic"])
            if find_coordinator(ports, groups["consumer"]) == owner:
                break
        victim = next(i for i in instances if i.port == owner)
        survivor = next(i for i in instances if i.port != owner)
        producer = Steady(both)
        by_group = {}
        for kind, factories in (("classic", classic), ("consumer", consumer)):
            by_group[groups[kind]] = [f(both, groups[kind], tmp_path, len(members) + i)
                                      for i, f in enumerate(factories)]
            members += by_group[groups[kind]]
        for group_members in by_group.values():
            group_members[0].wait_for(lambda _: sum(len(m.assigned) for m in group_members) == PARTITIONS
                                      and all(m.count > 0 for m in group_members),
                                      what="every partition held and read", timeout=start_timeout)
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
        acked = producer.stop()
        expected = len(acked) + len(producer.failed)
        for group in by_group:  # everything read and committed
            deadline = time.monotonic() + 90
            while sum(committed([survivor.port], group).values()) < expected:
                assert time.monotonic() < deadline, f"{group} never committed every record"
                time.sleep(0.5)
        read = {group: [v for m in group_members for v in m.stop()["values"]]
                for group, group_members in by_group.items()}
        return Outcome(groups, paused, read, acked, producer.failed, victim, survivor)
    finally:
        if producer is not None:
            producer._stop.set()
        for m in members:
            m.kill()
        for instance in instances:
            instance.stop()


def check(outcome: Outcome) -> None:
    """What a failover must keep: every acknowledged record read by each group, no more read
    twice than the commits in flight and the stall allow, every member reading again within
    BUDGET of the kill, and the owner's warning of the clashing sessions, once."""
    print(f"per member, seconds without reading after the kill and when it read again (budget {BUDGET} s): "
          f"{outcome.paused}")
    assert not outcome.failed, outcome.failed[:3]
    for group, read in outcome.read.items():
        assert outcome.acked <= set(read), f"{group} lost {len(outcome.acked - set(read))} acknowledged records"
        twice = len(read) - len(set(read))
        print(f"{group}: {len(read)} read, {twice} twice")
        assert twice <= RATE * (COMMIT_MS / 1000 + BUDGET), f"{group} read {twice} records twice"
    assert all(again <= BUDGET for _, again in outcome.paused.values()), \
        f"reading again after {BUDGET} s: {outcome.paused}"
    classic = outcome.groups["classic"]
    warned = [e for e in outcome.victim.events()
              if e.get("event", "").startswith("session timeout within the failover")]
    assert [(e["group"], e["failover_detection_s"]) for e in warned] == [(classic, ZK_SESSION + 3.0)]
    removed = [e.get("reason") for e in outcome.survivor.events()
               if e.get("event") == "member removed" and e.get("group") == classic]
    print(f"removed from {classic} by the survivor: {removed}")
