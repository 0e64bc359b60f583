"""`groupkeeper bench rebalance`: one scale-up, members joining a running group one after
another, under the classic protocol and under KIP-848's consumer protocol, in one run.

A fresh local ZooKeeper; for each protocol (a *row*) a fresh `groupkeeper run` in a chroot of
its own holding one topic of `partitions` partitions. Members are unmodified librdkafka
consumers (confluent-kafka) in this process, created one every `join_interval` seconds until
there are `members`:

- classic, `cooperative-sticky`: `partition.assignment.strategy=cooperative-sticky`, the best
  the classic protocol offers (incremental: only moved partitions are revoked, but every
  change takes two rebalances of the whole group);
- classic, `range`: the eager protocol (every rebalance revokes every partition of every
  member), for reference;
- `consumer`: `group.protocol=consumer` (KIP-848), the coordinator's server-side `uniform`
  assignor, each member reconciling on its own heartbeats.

Both protocols get the same heartbeat interval and session timeout: the classic consumers'
`heartbeat.interval.ms`/`session.timeout.ms`, the coordinator's
`group_consumer_heartbeat_interval_ms`/`group_consumer_session_timeout_ms` (KIP-848 clients
may not set them). `group_initial_rebalance_delay_ms` is 0: the group is running when the
second member comes, and the delay would only hold the classic group's first generation.

What counts is what the members' rebalance callbacks report: who holds which partition, from
`on_assign` (held once the assign call returns) and `on_revoke`/`on_lost` (released when the
callback starts). A row is *stable* when, after the last member's join, every partition is
held by exactly one member, every member holds at least one (when there are at least as many
partitions as members), and nothing has changed for `settle` seconds; it became stable at the
last change. Per row:

- *stable after last join*: from the last member's creation until it became stable;
- *total*: from the first member's creation until then;
- *paused per member*: the partitions revoked from (or lost by) each member over the run, its
  consumption of them stopped; mean and max over the members;
- *unowned partition-seconds*: summed over the partitions, the time each spent held by no one
  after it was first held (a stopped partition waiting for its next owner), and the longest
  such gap;
- *rebalances*: classic: generations completed for the group (the coordinator's "rebalance
  completed" log lines); consumer: the group epoch at the end (one bump per change of
  membership);
- the coordinator's own view at the end (DescribeGroups / ConsumerGroupDescribe) must match
  the members' (`coordinator_agrees`);
- CPU seconds of the coordinator, of ZooKeeper and of this process (the 100 consumers'
  librdkafka threads and the pollers) over the row, and the longest poll cycle, to show
  whether the clients were starved.

The consumers are driven from `POLLERS` threads, each calling `poll(0)` on its share of the
members in turn, then waiting `POLL_GAP`: a callback runs within about that long of
librdkafka queueing it. There is no Kafka broker: every partition is answered
LEADER_NOT_AVAILABLE, so nothing is fetched, which does not matter to group membership.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.request import urlopen


from protocol import ErrorCode
from protocol.consumer import decode_assignment
from protocol.schemas import DESCRIBE_GROUPS, METADATA
from protocol.schemas.consumer_group_describe import CONSUMER_GROUP_DESCRIBE

from ..kafka_admin import NodeConnection, Unreachable
from coordinator.store.zkserver import ZooKeeperServer, free_port
from ..topics_admin import RegistryAdmin
from .process import NotStarted, RunProcess, chroot, raise_open_files

TOPIC = "bench-rebalance"
POLLERS = 4
POLL_GAP = 0.01  # seconds a poller waits between rounds over its members


@dataclass(frozen=True)
class Row:
    protocol: str  # "classic" or "consumer"
    strategy: str  # the classic strategy, or the server-side assignor
    label: str

    @property
    def cooperative(self) -> bool:
        return self.protocol == "consumer" or self.strategy == "cooperative-sticky"


ROWS = {
    "cooperative-sticky": Row("classic", "cooperative-sticky", "classic, cooperative-sticky"),
    "range": Row("classic", "range", "classic, range (eager)"),
    "consumer": Row("consumer", "uniform", "consumer (KIP-848), uniform"),
}


@dataclass(frozen=True)
class Settings:
    members: int = 100
    partitions: int = 1000
    join_interval: float = 1.0  # seconds between one member's creation and the next's
    heartbeat_ms: int = 500
    session_timeout_ms: int = 10_000
    settle: float = 5.0  # seconds without a change for a row to count as stable
    timeout: float = 600.0  # seconds after the last join a row may take before it is reported unstable
    rows: tuple[str, ...] = tuple(ROWS)


class RebalanceBenchError(Exception):
    """A coordinator that did not start, did not learn of the topic or could not be asked; a
    poller that failed."""


# -- who holds what -----------------------------------------------------------------------------

class _Ledger:
    """Partitions held, per member, as the rebalance callbacks report them; kept up to date
    incrementally so that the watcher's check costs nothing (callbacks run on the pollers)."""

    def __init__(self, partitions: int):
        self.lock = threading.Lock()
        self.partitions = partitions
        self.holders = [0] * partitions
        self.held: list[set[int]] = []
        self.taken: list[int] = []  # per member: partitions revoked from it or lost
        self.first_assigned: list[float | None] = []
        self.unowned = partitions  # held by no one
        self.shared = 0  # held by two or more
        self.lost = 0
        self.callbacks = 0
        self.last_change: float | None = None
        self.gap_since: list[float | None] = [None] * partitions  # when a partition held before was let go
        self.unowned_s = 0.0
        self.longest_gap = 0.0
        self.frozen = False  # measured: what the closing members report is not counted
        self.gained_at: list[float | None] = [None] * partitions  # the last time each partition was gained
        self.departed: set[int] = set()  # members that left the group (closed), not expected to hold any

    def add_member(self) -> int:
        with self.lock:
            self.held.append(set())
            self.taken.append(0)
            self.first_assigned.append(None)
            return len(self.held) - 1

    def gain(self, member: int, partitions: list[int], now: float) -> None:
        with self.lock:
            if self.frozen or not partitions:
                return
            self.callbacks += 1
            mine = self.held[member]
            for p in partitions:
                if p in mine:
                    continue
                mine.add(p)
                self.gained_at[p] = now
                self.holders[p] += 1
                if self.holders[p] == 1:
                    self.unowned -= 1
                    since = self.gap_since[p]
                    if since is not None:
                        self.unowned_s += now - since
                        self.longest_gap = max(self.longest_gap, now - since)
                        self.gap_since[p] = None
                elif self.holders[p] == 2:
                    self.shared += 1
            if self.first_assigned[member] is None:
                self.first_assigned[member] = now
            self.last_change = now

    def drop(self, member: int, partitions: list[int], now: float, lost: bool = False) -> None:
        with self.lock:
            if self.frozen or not partitions:
                return
            self.callbacks += 1
            self.lost += lost
            mine = self.held[member]
            for p in partitions:
                if p not in mine:
                    continue
                mine.discard(p)
                self.taken[member] += 1
                self.holders[p] -= 1
                if self.holders[p] == 0:
                    self.unowned += 1
                    self.gap_since[p] = now
                elif self.holders[p] == 1:
                    self.shared -= 1
            self.last_change = now

    def depart(self, member: int) -> None:
        """`member` left the group: it is no longer expected to hold partitions."""
        with self.lock:
            self.departed.add(member)

    def settled(self) -> bool:
        """Every partition held once, and every member in the group holding some (if there
        are enough)."""
        with self.lock:
            if self.unowned or self.shared:
                return False
            present = [h for i, h in enumerate(self.held) if i not in self.departed]
            return self.partitions < len(present) or all(present)

    def state(self) -> dict:
        with self.lock:
            counts = [len(h) for i, h in enumerate(self.held) if i not in self.departed]
            return {"unowned": self.unowned, "held_twice_or_more": self.shared,
                    "members_without_partitions": sum(1 for c in counts if c == 0),
                    "partitions_per_member_min": min(counts, default=0),
                    "partitions_per_member_max": max(counts, default=0)}


# -- the members ----------------------------------------------------------------------------------

def classic_config(row: Row, settings) -> dict:
    """A classic row's consumer settings: its strategy, the row's heartbeat interval and session
    timeout (a KIP-848 consumer may not set them: the coordinator's)."""
    if row.protocol != "classic":
        return {}
    return {"partition.assignment.strategy": row.strategy, "heartbeat.interval.ms": settings.heartbeat_ms,
            "session.timeout.ms": settings.session_timeout_ms}


def take(row: Row, ledger: _Ledger, member: int, consumer, partitions) -> None:
    """An assign callback: apply the partitions (incrementally for a cooperative row), then
    record them as held by `member`."""
    if row.cooperative:
        consumer.incremental_assign(partitions)
    else:
        consumer.assign(partitions)
    ledger.gain(member, [p.partition for p in partitions], time.monotonic())


class _Member:
    """One confluent-kafka consumer subscribed to the topic, its callbacks reporting to the ledger."""

    def __init__(self, ledger: _Ledger, row: Row, bootstrap: str, group: str, settings: Settings):
        from confluent_kafka import Consumer

        self.ledger, self.row = ledger, row
        self.index = ledger.add_member()
        config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "client.id": f"bench-{self.index}", "log_level": 0, "group.protocol": row.protocol}
        self.consumer = Consumer({**config, **classic_config(row, settings)})
        self.consumer.subscribe([TOPIC], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._lost)

    def _assign(self, consumer, partitions) -> None:
        take(self.row, self.ledger, self.index, consumer, partitions)

    def _revoke(self, consumer, partitions) -> None:
        self._release(consumer, partitions, lost=False)

    def _lost(self, consumer, partitions) -> None:
        self._release(consumer, partitions, lost=True)

    def _release(self, consumer, partitions, lost: bool) -> None:
        self.ledger.drop(self.index, [p.partition for p in partitions], time.monotonic(), lost)
        if self.row.cooperative:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()


class _Poller(threading.Thread):
    """Polls its members in turn, `poll(0)` each, then waits POLL_GAP; records the longest cycle
    (a starved poller delays every callback it serves) and the errors poll() returned."""

    def __init__(self, stop: threading.Event):
        super().__init__(daemon=True)
        self.stop = stop
        self.members: list[_Member] = []
        self.errors: Counter[str] = Counter()
        self.longest_cycle = 0.0
        self.failure: Exception | None = None

    def run(self) -> None:
        last = time.monotonic()
        try:
            while not self.stop.is_set():
                for member in list(self.members):
                    message = member.consumer.poll(0)
                    if message is not None and message.error() is not None:
                        self.errors[message.error().name()] += 1
                self.stop.wait(POLL_GAP)
                now = time.monotonic()
                self.longest_cycle = max(self.longest_cycle, now - last)
                last = now
        except Exception as exc:  # reported by the row; a dead poller would stall its members
            self.failure = exc


# -- the coordinator ------------------------------------------------------------------------------

def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metrics_counts(port: int) -> tuple[dict[str, int], dict[str, int], int]:
    """From the coordinator's /metrics on `port`: requests answered so far, by API; ZooKeeper
    requests made, by operation; bytes of znode data its multi() writes carried."""
    with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    kafka: Counter[str] = Counter()
    answered = r'^groupkeeper_requests_total\{api="([^"]+)",error="[^"]*"\} (\S+)$'
    for api, n in re.findall(answered, text, re.MULTILINE):
        kafka[api] += int(float(n))
    zookeeper = {op: int(float(n)) for op, n in re.findall(
        r'^groupkeeper_zookeeper_request_duration_seconds_count\{op="([^"]+)"\} (\S+)$', text, re.MULTILINE)
        if float(n)}
    written = re.search(r'^groupkeeper_zookeeper_written_bytes_total (\S+)$', text, re.MULTILINE)
    return dict(sorted(kafka.items())), zookeeper, int(float(written.group(1))) if written else 0


def per_heartbeat(requests: dict[str, int], zookeeper_requests: dict[str, int], written_bytes: int) -> dict:
    """ZooKeeper writes (multi requests) and bytes written per heartbeat answered (Heartbeat
    and ConsumerGroupHeartbeat), over the same span."""
    heartbeats = requests.get("Heartbeat", 0) + requests.get("ConsumerGroupHeartbeat", 0)
    writes = zookeeper_requests.get("multi", 0)
    return {"heartbeats": heartbeats, "zookeeper_writes": writes, "zookeeper_written_bytes": written_bytes,
            "zookeeper_writes_per_heartbeat": round(writes / heartbeats, 3) if heartbeats else None,
            "zookeeper_bytes_per_heartbeat": round(written_bytes / heartbeats, 1) if heartbeats else None}


class _Coordinator:
    """A `groupkeeper run` of one row: its listener and /metrics on free ports, the row's
    heartbeat interval and session timeout for KIP-848 groups; `config` and `args` add keys
    and flags (the records scenario's embedded broker)."""

    def __init__(self, work: Path, name: str, zookeeper: str, settings, config: dict | None = None,
                 args: tuple[str, ...] = (), port: int | None = None):
        self.port, self.metrics_port = port or free_port(), free_port()
        self.log = work / f"{name}.log"
        self.data_dir = work / name
        path = work / f"{name}.toml"
        values = {"group_initial_rebalance_delay_ms": 0, "group_min_session_timeout_ms": 1000,
                  "group_consumer_heartbeat_interval_ms": settings.heartbeat_ms,
                  "group_consumer_session_timeout_ms": settings.session_timeout_ms,
                  "max_connections_per_ip": 10_000, **(config or {})}
        path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
        self.run = RunProcess(["--config", str(path), "--zookeeper", zookeeper,
                               "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}",
                               "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                               "--data-dir", str(self.data_dir), *args])

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, preexec_fn=None) -> None:
        try:
            self.run.start(self.log, timeout=60, preexec_fn=preexec_fn)
        except NotStarted as exc:
            raise RebalanceBenchError(f"the coordinator did not start: {exc} (log: {self.log})") from None

    def cpu(self) -> float:
        return _cpu_seconds(self.run.process.pid)

    def wait_for_topic(self, partitions: int, timeout: float = 30.0, topic: str = TOPIC) -> None:
        """Until its Metadata shows the topic with all its partitions (its registry learns of
        the topic a moment after it is written)."""
        deadline = time.monotonic() + timeout
        connection = NodeConnection("127.0.0.1", self.port, 10.0)
        try:
            while True:
                answer, = connection.pipeline(METADATA, 1, [{"topics": [{"name": topic}]}])
                if [len(t.partitions) for t in answer.topics if t.error_code == ErrorCode.NONE] == [partitions]:
                    return
                if time.monotonic() > deadline:
                    raise RebalanceBenchError(f"the coordinator did not see {topic} with {partitions} partitions")
                time.sleep(0.05)
        finally:
            connection.close()

    def requests(self) -> tuple[dict[str, int], dict[str, int], int]:
        """Requests answered so far, by API; ZooKeeper requests made, by operation; and the
        bytes of znode data its multi() writes carried (its /metrics)."""
        return metrics_counts(self.metrics_port)

    def view(self, row: Row, group: str) -> tuple[dict[str, set[int]], dict]:
        """The coordinator's assignment by member id, and what it says of the group."""
        connection = NodeConnection("127.0.0.1", self.port, 10.0)
        try:
            if row.protocol == "consumer":
                answer, = connection.pipeline(CONSUMER_GROUP_DESCRIBE, 0, [{"group_ids": [group],
                                                                           "include_authorized_operations": False}])
                described = answer.groups[0]
                owned = {m.member_id: {p for t in m.assignment.topic_partitions for p in t.partitions}
                         for m in described.members}
                epochs = Counter(m.member_epoch for m in described.members)
                return owned, {"state": described.group_state, "group_epoch": described.group_epoch,
                               "assignment_epoch": described.assignment_epoch,
                               "members_at_group_epoch": epochs.get(described.group_epoch, 0)}
            answer, = connection.pipeline(DESCRIBE_GROUPS, 5, [{"groups": [group],
                                                              "include_authorized_operations": False}])
            described = answer.groups[0]
            owned = {}
            for m in described.members:
                assigned = decode_assignment(m.member_assignment)[1].assigned_partitions if m.member_assignment else []
                owned[m.member_id] = {p for t in assigned for p in t.partitions}
            return owned, {"state": described.group_state}
        finally:
            connection.close()

    def log_entries(self, event: str, group: str) -> list[dict]:
        entries = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{") and f'"{event}"' in line:
                entry = json.loads(line)
                if entry.get("event") == event and entry.get("group") == group:
                    entries.append(entry)
        return entries

    def stop(self) -> None:
        self.run.stop(30)


def _topic(zookeeper: str, path: str, partitions: int) -> None:
    with RegistryAdmin(chroot(zookeeper, path)) as admin:
        admin.create_topic(TOPIC, partitions)


# -- one row --------------------------------------------------------------------------------------

def _row(name: str, settings: Settings, work: Path, zookeeper: ZooKeeperServer) -> dict:
    row = ROWS[name]
    chroot = f"/rebalance-{name}"
    _topic(zookeeper.connect_string, chroot, settings.partitions)
    coordinator = _Coordinator(work, name, zookeeper.connect_string + chroot, settings)
    coordinator.start()
    group = f"bench-rebalance-{name}"
    ledger = _Ledger(settings.partitions)
    stop = threading.Event()
    pollers = [_Poller(stop) for _ in range(POLLERS)]
    members: list[_Member] = []
    try:
        coordinator.wait_for_topic(settings.partitions)
        for poller in pollers:
            poller.start()
        requests_before = coordinator.requests()
        cpu_before = coordinator.cpu(), _cpu_seconds(zookeeper.process.pid), time.process_time()
        joins: list[float] = []
        join_lag = create_s = 0.0
        first = time.monotonic()
        for i in range(settings.members):
            due = first + i * settings.join_interval
            stop.wait(max(0.0, due - time.monotonic()))  # the schedule, not a synchronisation
            joined = time.monotonic()
            member = _Member(ledger, row, coordinator.bootstrap, group, settings)
            create_s = max(create_s, time.monotonic() - joined)
            join_lag = max(join_lag, joined - due)
            joins.append(joined)
            members.append(member)
            pollers[i % POLLERS].members.append(member)
        last = joins[-1]
        deadline = last + settings.timeout
        stable = False
        while time.monotonic() < deadline:
            dead = [p.failure for p in pollers if p.failure is not None]
            if dead:
                raise RebalanceBenchError(f"a poller failed: {dead[0]!r}")
            if ledger.settled() and time.monotonic() - ledger.last_change >= settings.settle:
                stable = True
                break
            stop.wait(0.05)
        ended = time.monotonic()
        with ledger.lock:
            ledger.frozen = True
            stable_at = max(ledger.last_change, joins[-1]) if stable else None  # fewer partitions than members
            taken = list(ledger.taken)
            last_first = ledger.first_assigned[-1]
        cpu_after = coordinator.cpu(), _cpu_seconds(zookeeper.process.pid), time.process_time()
        owned, described = coordinator.view(row, group)
        requests, zookeeper_requests, written = since(coordinator.requests(), requests_before)
        ours = {m.consumer.memberid(): ledger.held[m.index] for m in members}
        result = {
            "row": name, "label": row.label, "protocol": row.protocol, "strategy": row.strategy,
            "group": group, "stable": stable,
            "stable_after_last_join_s": round(stable_at - last, 3) if stable else None,
            "total_s": round(stable_at - first, 3) if stable else None,
            "joins_s": round(last - first, 3),
            "last_member_first_assignment_s": round(last_first - last, 3) if last_first else None,
            "paused_per_member": {"mean": round(sum(taken) / len(taken), 2), "max": max(taken),
                                  "total": sum(taken)},
            "unowned_partition_s": round(ledger.unowned_s, 2), "longest_unowned_s": round(ledger.longest_gap, 3),
            "callbacks": ledger.callbacks, "lost_callbacks": ledger.lost,
            "final": ledger.state(),
            "coordinator": described,
            "coordinator_agrees": owned == ours,
            "cpu_s": {"coordinator": round(cpu_after[0] - cpu_before[0], 2),
                      "zookeeper": round(cpu_after[1] - cpu_before[1], 2),
                      "clients": round(cpu_after[2] - cpu_before[2], 2)},
            "wall_s": round(ended - first, 2),
            "longest_poll_cycle_ms": round(max(p.longest_cycle for p in pollers) * 1000, 1),
            "join_lag_max_ms": round(join_lag * 1000, 1), "consumer_create_max_ms": round(create_s * 1000, 1),
            "poll_errors": dict(sum((p.errors for p in pollers), Counter())),
            "requests": requests, "zookeeper_requests": zookeeper_requests,
            **per_heartbeat(requests, zookeeper_requests, written),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
        if row.protocol == "classic":
            completed = coordinator.log_entries("rebalance completed", group)
            durations = [e.get("duration_s", 0.0) for e in completed]
            result["rebalances"] = len(completed)
            result["rebalance_s"] = {"mean": round(sum(durations) / len(durations), 3) if durations else None,
                                     "max": max(durations, default=None)}
        else:
            result["rebalances"] = described["group_epoch"]
        return result
    finally:
        stop.set()
        for poller in pollers:
            if poller.is_alive():
                poller.join(10)
        _close(members)
        coordinator.stop()


def _minus(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0)}


def since(after: tuple[dict[str, int], dict[str, int], int],
          before: tuple[dict[str, int], dict[str, int], int]) -> tuple[dict[str, int], dict[str, int], int]:
    """What `metrics_counts` counted between `before` and `after`."""
    return _minus(after[0], before[0]), _minus(after[1], before[1]), after[2] - before[2]


def _close(members: list[_Member], timeout: float = 60.0) -> None:
    """Close every member, many at once (each close leaves the group and waits for the
    answer); daemon threads, so that a close that never returns cannot hold the process."""
    pending = list(members)
    lock = threading.Lock()

    def closer() -> None:
        while True:
            with lock:
                if not pending:
                    return
                member = pending.pop()
            member.consumer.close()

    threads = [threading.Thread(target=closer, daemon=True) for _ in range(min(32, len(members)))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def each_row(rows: tuple[str, ...], prefix: str, row: Callable[[str, Path, ZooKeeperServer], dict]) -> list[dict]:
    """`row(name, work, zookeeper)` of each row in turn, beside one fresh ZooKeeper in a
    temporary directory (each row starts its own `groupkeeper run` in a chroot of its own)."""
    unknown = [r for r in rows if r not in ROWS]
    if unknown or not rows:
        raise RebalanceBenchError(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    results = []
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        with ZooKeeperServer(work / "zookeeper", free_port()) as zookeeper:
            for name in rows:
                try:
                    results.append(row(name, work, zookeeper))
                except Unreachable as exc:
                    raise RebalanceBenchError(f"{name}: {exc}") from None
    return results


def run(settings: Settings) -> dict:
    raise_open_files(4096 + 20 * settings.members)
    result: dict = {"settings": asdict(settings), "pollers": POLLERS, "poll_gap_ms": POLL_GAP * 1000,
                    "cpus": len(os.sched_getaffinity(0)), "load_average_before": [round(x, 2) for x in os.getloadavg()]}
    result["rows"] = each_row(settings.rows, "groupkeeper-rebalance-",
                              lambda name, work, zookeeper: _row(name, settings, work, zookeeper))
    result["zookeeper"] = zookeeper_summary(result["rows"])
    return result


# -- the table ------------------------------------------------------------------------------------

def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s" if value < 10 else f"{value:.1f}s"


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


ZOOKEEPER_CPU_TARGET = 1.5  # issue 30: KIP-848's ZooKeeper CPU at most this times classic's, same scale-up
WRITES_PER_HEARTBEAT_TARGET = 1.0  # issue 30: ZooKeeper writes per heartbeat at most this


def zookeeper_summary(rows: list[dict]) -> dict:
    """ZooKeeper's CPU under KIP-848 over cooperative-sticky's, and KIP-848's writes per
    heartbeat, with issue 30's targets (None where a row is missing)."""
    by = {r["row"]: r for r in rows}
    consumer, classic = by.get("consumer"), by.get("cooperative-sticky")
    ratio = None
    if consumer and classic and classic["cpu_s"]["zookeeper"] > 0:
        ratio = round(consumer["cpu_s"]["zookeeper"] / classic["cpu_s"]["zookeeper"], 2)
    return {"cpu_consumer_over_cooperative_sticky": ratio, "cpu_target": ZOOKEEPER_CPU_TARGET,
            "consumer_writes_per_heartbeat": consumer.get("zookeeper_writes_per_heartbeat") if consumer else None,
            "writes_per_heartbeat_target": WRITES_PER_HEARTBEAT_TARGET}


def zookeeper_footer(summary: dict) -> str:
    return (f"ZooKeeper CPU consumer / classic cooperative-sticky: "
            f"{_f(summary['cpu_consumer_over_cooperative_sticky'], '.2f')}x (target <= {summary['cpu_target']:g}x); "
            f"consumer ZooKeeper writes per heartbeat: {_f(summary['consumer_writes_per_heartbeat'], '.3f')} "
            f"(target <= {summary['writes_per_heartbeat_target']:g})")


def table(result: dict) -> str:
    s = result["settings"]
    rows = [(f"{'PROTOCOL':<28} {'AFTER LAST JOIN':>15} {'TOTAL':>7} {'PAUSED MEAN':>11} {'MAX':>5} "
             f"{'UNOWNED P-S':>11} {'LONGEST GAP':>11} {'REBALANCES':>10}  {'CPU S GK/ZK/CLIENTS':>19} "
             f"{'ZK WRITES/HB':>12} {'ZK BYTES/HB':>11}")]
    for r in result["rows"]:
        paused, cpu = r["paused_per_member"], r["cpu_s"]
        cpu_text = f"{cpu['coordinator']:.1f}/{cpu['zookeeper']:.1f}/{cpu['clients']:.1f}"
        rows.append(f"{r['label']:<28} {_s(r['stable_after_last_join_s']):>15} {_s(r['total_s']):>7} "
                    f"{paused['mean']:>11.1f} {paused['max']:>5,} {r['unowned_partition_s']:>11,.0f} "
                    f"{_s(r['longest_unowned_s']):>11} {r['rebalances']:>10,}  {cpu_text:>19} "
                    f"{_f(r.get('zookeeper_writes_per_heartbeat'), '.3f'):>12} "
                    f"{_f(r.get('zookeeper_bytes_per_heartbeat'), ',.0f'):>11}")
    rows.append(f"({s['members']} members joining one every {s['join_interval']:g} s, {s['partitions']:,} partitions; "
                f"heartbeat {s['heartbeat_ms']} ms, session {s['session_timeout_ms'] / 1000:g} s for both protocols. "
                f"Stable: every partition held once, every member holding some, nothing changed for {s['settle']:g} s. "
                "PAUSED: partitions revoked from a member over the run. UNOWNED P-S: partition-seconds held by no "
                "one after a first owner. REBALANCES: classic generations completed; KIP-848 group epoch. "
                "ZK WRITES/HB, ZK BYTES/HB: ZooKeeper writes (multi) and znode bytes they carried per heartbeat "
                "answered, Heartbeat or ConsumerGroupHeartbeat)")
    rows.append(zookeeper_footer(result["zookeeper"]))
    for r in result["rows"]:
        notes = []
        if not r["stable"]:
            notes.append(f"NOT STABLE within {s['timeout']:g} s of the last join: {r['final']}")
        if not r["coordinator_agrees"]:
            notes.append("the coordinator's assignment differs from what the members hold")
        if r["lost_callbacks"]:
            notes.append(f"{r['lost_callbacks']} lost-partition callbacks")
        if r["poll_errors"]:
            notes.append(f"poll errors {r['poll_errors']}")
        notes.append(f"last member's first partitions after {_s(r['last_member_first_assignment_s'])}; "
                     f"{r['final']['partitions_per_member_min']}-{r['final']['partitions_per_member_max']} "
                     f"partitions a member; longest poll cycle {r['longest_poll_cycle_ms']:.0f} ms; "
                     f"Metadata requests {r['requests'].get('Metadata', 0):,}; "
                     f"ZooKeeper writes {_n(r.get('zookeeper_requests', {}).get('multi'))} "
                     f"for {_n(r.get('heartbeats'))} heartbeats, {_n(r.get('zookeeper_written_bytes'))} bytes")
        if r.get("rebalance_s") and r["rebalance_s"]["mean"] is not None:
            took = r["rebalance_s"]
            notes.append(f"rebalances took {took['mean']:.2f} s on average, {took['max']:.2f} s at most")
        rows.append(f"  {r['row']}: " + "; ".join(notes))
    return "\n".join(rows)
