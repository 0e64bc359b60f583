"""`groupkeeper bench abuse`: hostile and unlucky clients against a coordinator, each probe
answered `held` or `broke` with its figures.

The limits in docs/operations.md are tested in the suite against a test configuration;
this checks them against a deployment, with its own configuration and load.
`--bootstrap HOST:PORT` targets a running coordinator. Without it the bench starts its own:
a temporary ZooKeeper and one `groupkeeper run` with small limits, stopped at the end.

Each probe is bounded in time. While it runs, a bystander (an ordinary member of a group of
its own that commits, heartbeats and fetches on its own connection) must get every answer
without an error and within the deadline, and afterwards OffsetFetch must return every
commit acknowledged to it. A probe that harms the bystander broke, whatever else it saw.
"""

from __future__ import annotations

import json
import os
import re
import resource
import secrets
import select
import socket
import ssl
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from protocol import ErrorCode, RequestHeader, encode_request, error_name
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription, build
from protocol.schemas import (API_VERSIONS, DELETE_GROUPS, DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT,
                              JOIN_GROUP, LEAVE_GROUP, METADATA, OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP)

from ..kafka_admin import AdminError, NodeConnection, Unreachable, read_exactly
from ..kafka_admin import parse_address
from ..topics_admin import RegistryAdmin
from coordinator.store.zkserver import ZooKeeperServer, free_port
from coordinator.security.upstream import LoginFailed, UpstreamSecurity
from coordinator.security.users import UserAdmin
from .process import NotStarted, RunProcess, raise_open_files

E = ErrorCode
MiB = 1 << 20
LONG_GROUP_ID = 300_000  # characters: far over any sane group_id_max_length
LONG_TOPIC = 250  # characters: one over Kafka's limit on topic names
METADATA_CHARS = 4096  # Kafka's offset.metadata.max.bytes, the most a partition may carry
CONTROL_PARTITIONS = 64
HUGE_GROUPS = 3
NEIGHBOURS, NEIGHBOUR_CONNECTIONS = 8, 4  # ordinary commits beside the empty names
WIDE_PARTITIONS = 2000  # the topic the bench creates for large Metadata answers and assignments
OFFSETS_TOPIC = "groupkeeper-abuse-offsets"  # the topic the bench creates for its commits: offsets are stored
OFFSETS_PARTITIONS = 10_000  # only for partitions that exist (or, against a deployment, its largest topic)
OFFSETS_MAX_PARTITIONS = 50_000  # created at most (Kafka's registry keeps a topic in one znode); more: refused
SMALL_ANSWER = 16 * 1024  # bytes: a Metadata answer too small to press a server that queues answers
# A JoinGroup waits for its whole generation, and the server handles at most 100 requests of
# one connection at once: more members on one connection would wait for the generation after.
JOINS_PER_CONNECTION = 100
LARGE_GROUP_ROUNDS = 3  # join/sync rounds before the large group counts as rebalancing for ever
LARGE_GROUP_SETTLE_S = 1.0  # after the syncs, before the heartbeats that tell whether it is settled
SESSION_MS, REBALANCE_MS = 30_000, 60_000  # the large group's members'
# The group whose OffsetFetch answers wait and go unread: about 1 MB of metadata (the default
# group_max_offset_metadata_bytes), named 8 times in each OffsetFetch v8, about 9.6 MB an answer
WAITING_PARTITIONS, WAITING_METADATA_CHARS, WAITING_REPEATS = 10_000, 100, 8
WAITING_RETURNED = 8 * MiB  # how far over where it began the coordinator's memory may stay after


class AbuseError(Exception):
    """The bench cannot run at all (no coordinator to probe); one line for the operator."""


class Skipped(Exception):
    """A probe this machine cannot run; the reason is reported instead of a verdict."""


@dataclass(frozen=True)
class Settings:
    """What the operator asked for. The limits are the coordinator's: set on one the bench
    starts, and expected of one it is pointed at (it cannot read another's configuration)."""
    bootstrap: tuple[str, int] | None  # None: start a local coordinator
    metrics: tuple[str, int] | None
    probes: tuple[str, ...]
    deadline: float  # seconds any request, a probe's or the bystander's, may go unanswered
    read_timeout: float  # the coordinator's request_read_timeout, seconds
    per_ip_limit: int  # its max_connections_per_ip
    connections: int  # the flood's
    queued_reply_bytes: int  # its max_queued_reply_bytes
    never_reads_seconds: float
    huge_partitions: int
    members: int

    @property
    def trickle_bound(self) -> float:
        """The read timeout, and a margin for this client's one-second steps and a busy server."""
        return self.read_timeout + max(2.0, self.read_timeout / 10)

    @property
    def memory_bound(self) -> int:
        return 2 * self.queued_reply_bytes + 64 * MiB


@dataclass
class Findings:
    """A probe's figures, and what it found wrong: any problem makes the probe broke."""
    figures: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def expect(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)


# -- the coordinator under test --------------------------------------------------------------

class Target:
    """The coordinator under test: its bootstrap address, where each group is served, and
    its resident memory where it can be read."""

    def __init__(self, address: tuple[str, int], deadline: float, pid: int | None = None,
                 metrics: tuple[str, int] | None = None):
        self.host, self.port = address
        self.deadline = deadline
        self.pid, self.metrics = pid, metrics
        self._coordinators: dict[str, tuple[str, int]] = {}

    def connect(self, address: tuple[str, int] | None = None, timeout: float | None = None) -> NodeConnection:
        host, port = address or (self.host, self.port)
        return NodeConnection(host, port, timeout or self.deadline)

    def coordinator(self, group: str) -> tuple[str, int]:
        """Where FindCoordinator puts `group`, asked again while the answer is retriable."""
        if group not in self._coordinators:
            connection = self.connect()
            try:
                give_up = time.monotonic() + self.deadline
                while True:
                    found, = connection.pipeline(FIND_COORDINATOR, 3, [{"key": group, "key_type": 0}])
                    if found.error_code == E.NONE:
                        break
                    if not E(found.error_code).retriable or time.monotonic() > give_up:
                        raise Unreachable(f"FindCoordinator({group[:40]!r}): {error_name(found.error_code)}")
                    time.sleep(0.1)
            finally:
                connection.close()
            self._coordinators[group] = (found.host, found.port)
        return self._coordinators[group]

    def at(self, group: str, timeout: float | None = None) -> NodeConnection:
        """A new connection to `group`'s coordinator."""
        return self.connect(self.coordinator(group), timeout)

    def served_within(self, seconds: float) -> float | None:
        """Seconds until a new ordinary client got ApiVersions answered; None: not within."""
        started = time.monotonic()
        while True:
            try:
                self.connect(timeout=min(self.deadline, seconds)).close()
                return time.monotonic() - started
            except Unreachable:
                if time.monotonic() - started > seconds:
                    return None
                time.sleep(0.1)

    def rss(self) -> int | None:
        """Resident bytes of the coordinator: from /proc for one the bench started, else the
        metrics endpoint's process_resident_memory_bytes; None where neither says."""
        if self.pid is not None:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
            return None
        if self.metrics is None:
            return None
        try:
            with urllib.request.urlopen(f"http://{self.metrics[0]}:{self.metrics[1]}/metrics",
                                        timeout=self.deadline) as answer:
                text = answer.read().decode()
        except OSError:
            return None
        found = re.search(r"^process_resident_memory_bytes(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE)
        return int(float(found.group(1))) if found else None

    def memory_source(self) -> str | None:
        """Where `rss()` reads from, for the report; None: nowhere."""
        if self.pid is not None:
            return f"/proc/{self.pid}/status"
        if self.metrics is None:
            return None
        return f"http://{self.metrics[0]}:{self.metrics[1]}/metrics"


class LocalCoordinator:
    """A temporary ZooKeeper and one `groupkeeper run` on free ports, with the limits the
    probes expect set in a config file; both stopped and their files removed on exit."""

    def __init__(self, settings: Settings, wide_topic: str):
        self.settings, self.wide_topic = settings, wide_topic
        self.port = free_port()
        self.run: RunProcess | None = None

    def __enter__(self) -> LocalCoordinator:
        self._tmp = tempfile.TemporaryDirectory(prefix="groupkeeper-abuse-")
        work = Path(self._tmp.name)
        self.zookeeper = ZooKeeperServer(work / "zookeeper", free_port())
        try:
            self.zookeeper.start()
            with RegistryAdmin(self.zookeeper.connect_string) as admin:  # read by the coordinator as it starts
                admin.create_topic(self.wide_topic, WIDE_PARTITIONS)
                admin.create_topic(OFFSETS_TOPIC, offsets_partitions(self.settings))
            self._start(work)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, work: Path) -> None:
        s = self.settings
        config = {"request_read_timeout_ms": max(1, int(s.read_timeout * 1000)),
                  "max_connections_per_ip": s.per_ip_limit, "max_queued_reply_bytes": s.queued_reply_bytes,
                  "events": False}
        config_path = work / "groupkeeper.toml"
        config_path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items()))
        self.run = RunProcess(["--config", str(config_path), "--zookeeper", self.zookeeper.connect_string,
                               "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}", "--metrics-listen", "",
                               "--data-dir", str(work / "data")])
        try:
            self.run.start(work / "groupkeeper.log")
        except NotStarted as exc:
            raise AbuseError(f"the local coordinator did not start: {str(exc)[:300]}") from None

    def __exit__(self, *exc) -> None:
        if self.run is not None:
            self.run.stop(30)
        self.zookeeper.stop()
        self._tmp.cleanup()


# -- the bystander -------------------------------------------------------------------------

class Bystander:
    """An ordinary consumer beside the probes: the one member of a group of its own, which
    commits, heartbeats and fetches on its own connection every INTERVAL, each answer timed.
    It runs for the whole bench; `begin()` and `end()` frame one probe's share of it."""

    INTERVAL = 0.05
    PARTITIONS = 4

    def __init__(self, target: Target, group: str, topic: tuple[str, int]):
        """`topic`: (name, partitions) of the topic it commits to, which must exist."""
        self.target, self.group, self.topic = target, group, topic[0]
        self.PARTITIONS = min(self.PARTITIONS, topic[1])
        self.deadline = target.deadline
        self.connection: NodeConnection | None = None
        self.member_id, self.generation = "", -1
        self.sequence = 0
        self.acked: dict[int, int] = {}  # partition -> the offset last acknowledged
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._committing = threading.Event()
        self._rounds = 0  # rounds of the loop completed, answered or failed
        self._round_done = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._run, name="bystander", daemon=True)
        self._clear()

    def _clear(self) -> None:
        self.latencies: list[float] = []
        self.failures: Counter[str] = Counter()
        self.commits = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.deadline * 4)
        if self.connection is not None:
            try:
                self.connection.pipeline(LEAVE_GROUP, 3, [{"group_id": self.group, "members": [
                    {"member_id": self.member_id}]}])
            except Unreachable:
                pass  # its session expires instead
            self.connection.close()

    def begin(self) -> None:
        """Start a probe's share: commits resume, and one round has run before the probe does."""
        with self._lock:
            self._clear()
        self._committing.set()
        self._next_round()

    def _next_round(self) -> bool:
        """Wait for the round under way to finish (False: not within a few deadlines)."""
        with self._round_done:
            wanted = self._rounds + 1
            return self._round_done.wait_for(lambda: self._rounds >= wanted, self.deadline * 3 + 1)

    def end(self) -> Findings:
        """What the bystander saw since `begin()`, one round after the probe included, and
        whether OffsetFetch on a new connection returns the last commit acknowledged to it."""
        findings = Findings()
        finished = self._next_round()
        self._committing.clear()
        finished = finished and self._next_round()  # no commit in flight from here on
        findings.expect(finished, "the bystander's loop stopped answering")
        with self._lock:
            latencies, failures, commits, acked = sorted(self.latencies), +self.failures, self.commits, dict(self.acked)
        stalls = sum(1 for s in latencies if s > self.deadline)
        findings.figures = {
            "requests": len(latencies), "commits_acked": commits,
            "p99_ms": _ms(latencies[int(len(latencies) * 0.99)]) if latencies else None,
            "max_ms": _ms(latencies[-1]) if latencies else None}
        findings.expect(bool(latencies), "the bystander got no answer at all")
        findings.expect(not failures, "bystander: " + ", ".join(f"{n} x {what}" for what, n in failures.items()))
        findings.expect(not stalls, f"bystander: {stalls} answers slower than {self.deadline:g} s")
        if acked:
            try:
                connection = self.target.at(self.group)
                try:
                    fetched = _fetch(connection, self.group, {(self.topic, p) for p in acked})
                finally:
                    connection.close()
                lost = [p for p, o in acked.items() if fetched.get((self.topic, p), (None,))[0] != o]
                findings.figures["fetched_back"] = f"{len(acked) - len(lost)}/{len(acked)}"
                findings.expect(not lost, f"bystander: acknowledged commits of partitions {lost} not fetched back")
            except Unreachable as exc:
                findings.problems.append(f"bystander: its offsets could not be fetched: {exc}")
        return findings

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.connection is None:
                    self._join()
                self._round()
            except Unreachable as exc:
                self._fail(str(exc))
                if self.connection is not None:
                    self.connection.close()
                    self.connection = None
                self._stop.wait(0.5)  # not a tight loop of connections against a coordinator in trouble
            with self._round_done:
                self._rounds += 1
                self._round_done.notify_all()
            self._stop.wait(self.INTERVAL)

    def _fail(self, what: str) -> None:
        with self._lock:
            self.failures[what] += 1

    def _join(self) -> None:
        connection = self.target.at(self.group)
        try:
            member = self.member_id
            for _ in range(3):  # MEMBER_ID_REQUIRED, or a member id its group has forgotten
                joined, = connection.pipeline(JOIN_GROUP, 5, [{
                    "group_id": self.group, "session_timeout_ms": 10_000,
                    "rebalance_timeout_ms": int(self.deadline * 1000), "member_id": member,
                    "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": encode_subscription(
                        ConsumerProtocolSubscription(topics=[self.topic]), 0)}]}])
                if joined.error_code not in (E.MEMBER_ID_REQUIRED, E.UNKNOWN_MEMBER_ID):
                    break
                member = joined.member_id if joined.error_code == E.MEMBER_ID_REQUIRED else ""
            if joined.error_code != E.NONE:
                raise Unreachable(f"JoinGroup: {error_name(joined.error_code)}")
            synced, = connection.pipeline(SYNC_GROUP, 3, [{
                "group_id": self.group, "generation_id": joined.generation_id, "member_id": joined.member_id,
                "assignments": []}])
            if synced.error_code != E.NONE:
                raise Unreachable(f"SyncGroup: {error_name(synced.error_code)}")
        except Unreachable:
            connection.close()
            raise
        self.connection, self.member_id, self.generation = connection, joined.member_id, joined.generation_id

    def _round(self) -> None:
        if self._committing.is_set():
            self.sequence += 1
            offsets = {p: self.sequence * 10 + p for p in range(self.PARTITIONS)}
            answer = self._timed(OFFSET_COMMIT, 7, _commit_body(
                self.group, {(self.topic, p): (o, "") for p, o in offsets.items()}, self.generation, self.member_id))
            errors = {e for e in _errors(answer).values() if e != E.NONE}
            if errors:
                self._fail("OffsetCommit: " + "/".join(sorted(error_name(e) for e in errors)))
            else:
                with self._lock:
                    self.acked, self.commits = offsets, self.commits + 1
        beat = self._timed(HEARTBEAT, 3, {"group_id": self.group, "generation_id": self.generation,
                                          "member_id": self.member_id})
        fetched = self._timed(OFFSET_FETCH, 5, {"group_id": self.group, "topics": [
            {"name": self.topic, "partition_indexes": list(range(self.PARTITIONS))}]})
        if fetched.error_code != E.NONE:
            self._fail(f"OffsetFetch: {error_name(fetched.error_code)}")
        if beat.error_code != E.NONE:
            raise Unreachable(f"Heartbeat: {error_name(beat.error_code)}")  # rejoin, as a consumer does

    def _timed(self, api, version: int, body: dict):
        started = time.perf_counter()
        answer, = self.connection.pipeline(api, version, [body])
        with self._lock:
            self.latencies.append(time.perf_counter() - started)
        return answer


# -- helpers -------------------------------------------------------------------------------

Offsets = dict[tuple[str, int], tuple[int, str]]  # (topic, partition) -> (offset, metadata)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _commit_body(group: str, offsets: Offsets, generation: int = -1, member: str = "") -> dict:
    topics: dict[str, list[dict]] = {}
    for (topic, p), (offset, metadata) in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": p, "committed_offset": offset,
                                             "committed_metadata": metadata})
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def _errors(answer) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def _fetch(connection: NodeConnection, group: str, keys) -> Offsets:
    """The committed (offset, metadata) of each of `keys` that has one."""
    topics: dict[str, list[int]] = {}
    for topic, p in sorted(keys):
        topics.setdefault(topic, []).append(p)
    answer, = connection.pipeline(OFFSET_FETCH, 5, [{"group_id": group, "topics": [
        {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}])
    if answer.error_code != E.NONE:
        raise Unreachable(f"OffsetFetch({group[:40]!r}): {error_name(answer.error_code)}")
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in answer.topics
            for p in t.partitions if p.error_code == E.NONE and p.committed_offset >= 0}


def _commit_and_fetch(run: "_Run", group: str, offsets: Offsets) -> tuple[dict[tuple[str, int], int], Offsets]:
    """One OffsetCommit at the group's coordinator: each partition's answer, and what
    OffsetFetch then returns for them."""
    connection = run.target.at(group)
    try:
        answers = _errors(connection.pipeline(OFFSET_COMMIT, 8, [_commit_body(group, offsets)])[0])
        return answers, _fetch(connection, group, offsets)
    finally:
        connection.close()


def _named(codes) -> dict[str, int]:
    return dict(Counter(error_name(c) for c in codes))


def _closed(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closed `sock` within `seconds` (what it sends meanwhile is dropped)."""
    give_up = time.monotonic() + seconds
    while (left := give_up - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except OSError:  # reset
            return True
    return False


class _Run:
    """One bench run: its settings, its target and the names it made up."""

    def __init__(self, settings: Settings, target: Target, wide_topic: str | None, offsets_topic: tuple[str, int]):
        self.settings, self.target, self.wide_topic = settings, target, wide_topic
        self.offsets_topic = offsets_topic  # (name, partitions): what the probes commit to
        self.tag = f"groupkeeper-abuse-{secrets.token_hex(4)}"
        self.created: list[str] = []  # groups to delete at the end
        self.empty_group_was_unused = False

    def group(self, name: str) -> str:
        group = f"{self.tag}-{name}"
        self.created.append(group)
        return group

    def topic(self, partitions: int) -> str:
        """The topic to commit `partitions` partitions of (offsets are stored only for
        partitions that exist; each probe commits for groups of its own); Skipped if it has fewer."""
        name, has = self.offsets_topic
        if has < partitions:
            raise Skipped(f"needs a topic of {partitions:,} partitions to commit to (offsets are stored only for "
                          f"partitions that exist); the largest has {has:,}" + (f" ({name})" if name else ""))
        return name


# -- the probes ----------------------------------------------------------------------------

NO_TOPIC = {("", 0): E.UNKNOWN_TOPIC_OR_PARTITION}  # what the empty-names probe expects for the empty topic name


def probe_empty_names(run: _Run) -> Findings:
    """Kafka accepts an empty group id in the offset APIs, and answers an empty topic name
    UNKNOWN_TOPIC_OR_PARTITION (no topic has it); commits are batched into one ZooKeeper
    multi() per group-partition, so such a commit must not fail, or fail its batch neighbours."""
    f = Findings()
    topic = run.topic(2)
    connection = run.target.at("")
    try:
        before, = connection.pipeline(OFFSET_FETCH, 5, [{"group_id": "", "topics": None}])
    finally:
        connection.close()
    run.empty_group_was_unused = before.error_code == E.NONE and not before.topics  # the bench may delete it
    commits: dict[str, Offsets] = {"": {(topic, 0): (11, "")},
                                   run.group("empty-topic"): {("", 0): (12, ""), (topic, 0): (13, "")}}
    neighbours = {run.group(f"neighbour-{i}"): {(topic, 0): (100 + i, ""), (topic, 1): (200 + i, "")}
                  for i in range(NEIGHBOURS)}
    lanes = [[g] for g in commits] + [list(neighbours)[i::NEIGHBOUR_CONNECTIONS] for i in range(NEIGHBOUR_CONNECTIONS)]
    wanted = {**commits, **neighbours}
    together = threading.Barrier(len(lanes))

    def lane(groups: list[str]) -> dict[str, object]:
        """Commit `groups` on connections of this lane's own, once every lane is ready."""
        connections: dict[tuple[str, int], NodeConnection] = {}
        try:
            for g in groups:
                address = run.target.coordinator(g)
                if address not in connections:
                    connections[address] = run.target.connect(address)
            together.wait(run.settings.deadline)
            return {g: _errors(connections[run.target.coordinator(g)].pipeline(
                OFFSET_COMMIT, 7, [_commit_body(g, wanted[g])])[0]) for g in groups}
        except (Unreachable, threading.BrokenBarrierError) as exc:
            together.abort()
            return dict.fromkeys(groups, str(exc) or "another connection failed first")
        finally:
            for connection in connections.values():
                connection.close()

    with ThreadPoolExecutor(len(lanes)) as pool:
        answers = {g: a for result in pool.map(lane, lanes) for g, a in result.items()}
    acked = fetched = 0
    for group, offsets in wanted.items():
        answer = answers[group]
        if isinstance(answer, str):
            f.problems.append(f"commit of {group or 'the empty group id'!r}: {answer}")
            continue
        refused = {k: error_name(e) for k, e in answer.items() if e != NO_TOPIC.get(k, E.NONE)}
        f.expect(not refused, f"commit of {group!r} answered: {refused}")
        acked += sum(e == E.NONE for e in answer.values())
        connection = run.target.at(group)
        try:
            got = _fetch(connection, group, offsets)
        finally:
            connection.close()
        fetched += sum(got.get(k) == v for k, v in offsets.items() if k not in NO_TOPIC)
        f.expect(not set(got) & set(NO_TOPIC), f"{group!r}: an offset of the empty topic name was stored")
    total = sum(len(o) for o in wanted.values()) - sum(k in NO_TOPIC for o in wanted.values() for k in o)
    f.expect(fetched == total, f"{total - fetched} acknowledged offsets not fetched back")
    f.figures = {"commits": len(wanted), "offsets": total, "acked": acked, "fetched_back": fetched,
                 "connections": len(lanes)}
    return f


def probe_long_group_id(run: _Run) -> Findings:
    """A group id is part of every ZooKeeper path of its group: an unbounded one would make
    unbounded requests and memory, so it must be refused before anything of it is kept."""
    f = Findings()
    huge = "g" * LONG_GROUP_ID
    connection = run.target.connect()
    started = time.perf_counter()
    try:
        found, = connection.pipeline(FIND_COORDINATOR, 3, [{"key": huge, "key_type": 0}])
        joined, = connection.pipeline(JOIN_GROUP, 6, [{
            "group_id": huge, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}])
        committed, = connection.pipeline(OFFSET_COMMIT, 8, [_commit_body(huge, {("t", 0): (1, "")})])
        answers = {"FindCoordinator": found.error_code, "JoinGroup": joined.error_code,
                   "OffsetCommit": _errors(committed)[("t", 0)]}
        elapsed = time.perf_counter() - started
        connection.pipeline(API_VERSIONS, 0, [{}])  # the same connection still served
    finally:
        connection.close()
    for api, code in answers.items():
        f.expect(code == E.INVALID_GROUP_ID, f"{api} with a {LONG_GROUP_ID:,}-character group id: {error_name(code)}")
    group, good = run.group("long-topic"), run.topic(1)
    offsets = {("t" * LONG_TOPIC, 0): (5, ""), (good, 0): (6, "")}
    topic_answers, got = _commit_and_fetch(run, group, offsets)
    long_code, good_code = topic_answers[("t" * LONG_TOPIC, 0)], topic_answers[(good, 0)]
    f.expect(long_code == E.INVALID_TOPIC_EXCEPTION, f"a {LONG_TOPIC}-character topic name: {error_name(long_code)}")
    f.expect(good_code == E.NONE, f"the same request's other topic: {error_name(good_code)}")
    f.expect(got == {(good, 0): (6, "")}, f"fetched back {got} instead of only the other topic's offset")
    f.figures = {"group_id_chars": LONG_GROUP_ID, **{api: error_name(c) for api, c in answers.items()},
                 "three_answers_ms": _ms(elapsed), "long_topic": error_name(long_code),
                 "other_topic": error_name(good_code)}
    return f


def probe_control_metadata(run: _Run) -> Findings:
    """Control characters take six bytes each once escaped as JSON: a shard of offsets may
    outgrow a ZooKeeper request though each partition is within Kafka's limit."""
    f = Findings()
    group, topic = run.group("control"), run.topic(CONTROL_PARTITIONS)
    offsets = {(topic, p): (1000 + p, "\x01" * METADATA_CHARS) for p in range(CONTROL_PARTITIONS)}
    answer, got = _commit_and_fetch(run, group, offsets)
    refused = _named(e for e in answer.values() if e != E.NONE)
    intact = sum(got.get(k) == v for k, v in offsets.items())
    f.expect(not refused, f"partitions refused: {refused}")
    f.expect(intact == len(offsets), f"{len(offsets) - intact} of {len(offsets)} partitions not fetched back intact")
    f.figures = {"partitions": len(offsets), "metadata_chars": METADATA_CHARS,
                 "acked": sum(e == E.NONE for e in answer.values()), "refused": refused, "fetched_intact": intact}
    return f


def probe_huge_commit(run: _Run) -> Findings:
    """One client committing tens of megabytes of offsets must get an answer for each
    partition, without taking the coordinator or its ZooKeeper down with it."""
    f = Findings()
    n, deadline = run.settings.huge_partitions, run.settings.deadline
    topic = run.topic(min(n, OFFSETS_MAX_PARTITIONS))  # past what exists: answered UNKNOWN_TOPIC_OR_PARTITION
    groups = [run.group(f"huge-{i}") for i in range(HUGE_GROUPS)]
    before = run.target.rss()

    def commit(group: str) -> dict:
        offsets = {(topic, p): (p, "m" * METADATA_CHARS) for p in range(n)}
        body = _commit_body(group, offsets)
        connection = run.target.at(group)
        started = time.perf_counter()
        try:
            answer, = connection.pipeline(OFFSET_COMMIT, 8, [body])
        except Unreachable as exc:
            return {"failed": str(exc), "seconds": time.perf_counter() - started}
        finally:
            connection.close()
        return {"errors": list(_errors(answer).values()), "seconds": time.perf_counter() - started}

    with ThreadPoolExecutor(HUGE_GROUPS) as pool:
        results = list(pool.map(commit, groups))
    after = run.target.rss()
    outcomes = []
    for group, result in zip(groups, results):
        if "failed" in result:
            f.problems.append(f"{group}: {result['failed']}")
            outcomes.append("no answer")
            continue
        answered = len(result["errors"])
        f.expect(answered == n, f"{group}: {answered} of {n} partitions answered")
        f.expect(result["seconds"] <= deadline, f"{group}: answered after {result['seconds']:.1f} s")
        outcomes.append(_named(result["errors"]))
    served = run.target.served_within(deadline)
    f.expect(served is not None, f"no new client served within {deadline:g} s afterwards")
    f.figures = {"groups": HUGE_GROUPS, "partitions": n, "request_mib": round(n * (METADATA_CHARS + 24) / MiB, 1),
                 "answers": outcomes, "answer_s": [round(r["seconds"], 2) for r in results]}
    if before is not None and after is not None:
        f.figures["rss_growth_mib"] = round((after - before) / MiB, 1)
    return f


def probe_trickle(run: _Run) -> Findings:
    """A client that keeps a request incomplete (slowloris) must lose its connection after the
    read timeout, rather than hold it for the idle timeout, or for ever."""
    f = Findings()
    bound = run.settings.trickle_bound
    name = "t" * (int(bound) + 16)  # longer than the bound in seconds: never whole in time
    frame = encode_request(RequestHeader(METADATA.key, 1, 1, "groupkeeper-abuse"),
                           build(METADATA.request.struct, {"topics": [{"name": name}]}))
    sock = socket.create_connection((run.target.host, run.target.port), timeout=run.settings.deadline)
    started, sent, closed = time.monotonic(), 0, False
    try:
        while not closed and time.monotonic() - started < bound and sent < len(frame) - 1:
            try:
                sock.sendall(frame[sent:sent + 1])
                sent += 1
            except OSError:
                closed = True
                break
            closed = _closed(sock, 1.0)  # one byte a second
        closed = closed or _closed(sock, max(0.0, bound - (time.monotonic() - started)))
    finally:
        sock.close()
    after = time.monotonic() - started
    f.expect(closed, f"the connection was still open after {after:.1f} s (bound {bound:.1f} s)")
    served = run.target.served_within(run.settings.deadline)
    f.expect(served is not None, "no new client served afterwards")
    f.figures = {"bytes_sent": sent, "frame_bytes": len(frame), "closed_after_s": round(after, 2) if closed else None,
                 "bound_s": round(bound, 2)}
    return f


def probe_connection_flood(run: _Run) -> Findings:
    """One misbehaving host must not take every connection of the coordinator."""
    f = Findings()
    s = run.settings
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < s.connections + 64:
        raise Skipped(f"{s.connections:,} connections need {s.connections + 64:,} open files; "
                      f"this process may have {soft:,} (hard limit {hard:,}): lower --connections or raise ulimit -Hn")
    opened: list[socket.socket] = []
    refused_at_connect = 0
    poller = select.poll()
    started = time.monotonic()
    try:
        for _ in range(s.connections):
            try:
                sock = socket.create_connection((run.target.host, run.target.port), timeout=s.deadline)
            except OSError:
                refused_at_connect += 1
                continue
            opened.append(sock)
            poller.register(sock, select.POLLIN)
        by_fd = {sock.fileno(): sock for sock in opened}
        over = s.connections - s.per_ip_limit
        closed: set[int] = set()
        give_up, settled = time.monotonic() + s.deadline, None
        while time.monotonic() < (settled or give_up):
            for fd, _ in poller.poll(100):
                try:
                    data = by_fd[fd].recv(65536)
                except OSError:
                    data = b""
                if not data:
                    closed.add(fd)
                    poller.unregister(fd)
            if settled is None and len(closed) + refused_at_connect >= over:
                settled = time.monotonic() + 1.0  # a moment more: does it close more than the excess?
        flood_s = time.monotonic() - started
    finally:
        for sock in opened:
            sock.close()
    served = run.target.served_within(s.deadline)
    shut = len(closed) + refused_at_connect
    f.expect(shut >= over, f"{shut:,} of the {s.connections:,} connections closed; "
                           f"{over:,} are over max_connections_per_ip ({s.per_ip_limit:,})")
    f.expect(served is not None, f"no new client served within {s.deadline:g} s of the flood's release")
    f.figures = {"connections": s.connections, "limit": s.per_ip_limit, "closed_by_server": len(closed),
                 "refused_at_connect": refused_at_connect, "kept": s.connections - shut,
                 "flood_s": round(flood_s, 2), "served_after_release_ms": None if served is None else _ms(served)}
    return f


def probe_never_reads(run: _Run) -> Findings:
    """Answers a client never reads must not pile up in the coordinator's memory."""
    f = Findings()
    s = run.settings
    topics = [{"name": run.wide_topic}] if run.wide_topic else None  # else every topic of the deployment
    sock = socket.create_connection((run.target.host, run.target.port), timeout=s.deadline)
    try:
        frame, answer_bytes = _metadata_answered(sock, topics)
        if answer_bytes < SMALL_ANSWER:  # a deployment with few topics: name many that do not exist
            topics = [{"name": f"{run.tag}-{i:03d}".ljust(LONG_TOPIC - 1, "x")} for i in range(100)]
            frame, answer_bytes = _metadata_answered(sock, topics)
        before = run.target.rss()

        def other_client() -> None:
            other = run.target.connect()
            try:
                other.pipeline(METADATA, 1, [{"topics": topics}])
            finally:
                other.close()
        sent, peak, closed_after, other_ms = _send_never_reading(run, sock, frame * 64, before, other_client)
    finally:
        sock.close()
    requests = sent // len(frame)
    f.figures = {"requests_sent": requests, "bytes_sent": sent, "answer_bytes": answer_bytes,
                 "answers_asked_mib": round(requests * answer_bytes / MiB, 1), "other_client_ms": other_ms,
                 "memory": run.target.memory_source()}
    if closed_after is not None:
        f.figures["closed_by_server_after_s"] = round(closed_after, 2)
    if before is None or peak is None:
        f.figures["memory"] = _unmeasured(run)
    else:
        growth = peak - before
        f.figures.update({"rss_before_mib": round(before / MiB, 1), "rss_growth_mib": round(growth / MiB, 1),
                          "bound_mib": round(s.memory_bound / MiB, 1)})
        f.expect(growth < s.memory_bound, f"resident memory grew {growth / MiB:.0f} MiB "
                                          f"(bound {s.memory_bound / MiB:.0f} MiB)")
    f.expect(other_ms is not None, "no other client was served during the flood")
    return f


def probe_never_reads_waiting(run: _Run) -> Findings:
    """Answers that wait (OffsetFetch is answered from a task of its own) and are never read
    must be bounded like the others, and their memory given back when the client goes."""
    f = Findings()
    s = run.settings
    group, unread = run.group("unread-fetch"), run.topic(WAITING_PARTITIONS)
    connection = run.target.at(group)
    try:  # a group of WAITING_PARTITIONS offsets, each with metadata if the deployment takes it
        for metadata in ("m" * WAITING_METADATA_CHARS, ""):
            committed = _errors(connection.pipeline(OFFSET_COMMIT, 8, [_commit_body(
                group, {(unread, p): (p, metadata) for p in range(WAITING_PARTITIONS)})])[0])
            if set(committed.values()) == {E.NONE}:
                break
        else:
            raise Skipped(f"its {WAITING_PARTITIONS:,} offsets were not committed: {_named(committed.values())}")
    finally:
        connection.close()
    host, port = run.target.coordinator(group)
    frame = encode_request(RequestHeader(OFFSET_FETCH.key, 8, 1, "groupkeeper-abuse"), build(
        OFFSET_FETCH.request.struct, {"groups": [{"group_id": group, "topics": None}] * WAITING_REPEATS}))
    sock = socket.create_connection((host, port), timeout=s.deadline)
    try:
        sock.sendall(frame)  # one answer read whole: its size
        answer_bytes = 4 + int.from_bytes(read_exactly(sock, 4), "big", signed=True)
        read_exactly(sock, answer_bytes - 4)
        before = run.target.rss()

        def other_client() -> None:
            other = run.target.connect((host, port))
            try:
                other.pipeline(API_VERSIONS, 0, [{}])
            finally:
                other.close()
        sent, peak, _, other_ms = _send_never_reading(run, sock, frame * max(1, 65536 // len(frame)), before,
                                                      other_client)
    finally:
        sock.close()
    closed = time.monotonic()
    after = before
    while before is not None and time.monotonic() - closed < s.deadline:  # the server notices, frees, trims
        after = run.target.rss()
        if after is None or after - before < WAITING_RETURNED:
            break
        time.sleep(0.2)
    requests = sent // len(frame)
    f.figures = {"requests_sent": requests, "answer_bytes": answer_bytes,
                 "answers_asked_mib": round(requests * answer_bytes / MiB, 1), "other_client_ms": other_ms,
                 "memory": run.target.memory_source()}
    if before is None or peak is None or after is None:
        f.figures["memory"] = _unmeasured(run)
    else:
        bound = s.memory_bound + 2 * answer_bytes  # the limit's, and an answer or two past it
        f.figures.update({"rss_before_mib": round(before / MiB, 1), "rss_growth_mib": round((peak - before) / MiB, 1),
                          "rss_after_close_mib": round((after - before) / MiB, 1), "bound_mib": round(bound / MiB, 1),
                          "after_close_bound_mib": round(WAITING_RETURNED / MiB, 1)})
        f.expect(peak - before < bound, f"resident memory grew {(peak - before) / MiB:.0f} MiB "
                                        f"(bound {bound / MiB:.0f} MiB)")
        f.expect(after - before < WAITING_RETURNED,
                 f"resident memory {(after - before) / MiB:.0f} MiB over where it began, "
                 f"{s.deadline:g} s after the client closed")
    f.expect(other_ms is not None, "no other client was served during the flood")
    return f


def _unmeasured(run: _Run) -> str:
    """Why the coordinator's resident memory could not be read."""
    source = run.target.memory_source()
    return ("unmeasured: no --metrics" if source is None else
            f"unmeasured: no process_resident_memory_bytes at {source}")


def _send_never_reading(run: _Run, sock: socket.socket, batch: bytes, before: int | None,
                        other_client: Callable[[], None]) -> tuple[int, int | None, float | None, float | None]:
    """`batch` (requests) sent on `sock` over and over for `never_reads_seconds`, no answer
    ever read, the coordinator's resident memory followed, and `other_client` served once
    halfway: (bytes sent, peak memory (None: unmeasured), seconds until the server closed the
    connection (None: it did not), the other client's ms (None: it did not get that far))."""
    s = run.settings
    sock.setblocking(False)
    peak = before
    pending = memoryview(b"")  # the rest of a batch the socket took only part of
    sent, closed_after, other_ms = 0, None, None
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < s.never_reads_seconds:
        _, writable, _ = select.select([], [sock], [], 0.1)
        if writable:
            pending = pending or memoryview(batch)
            try:
                took = sock.send(pending)
                sent, pending = sent + took, pending[took:]
            except BlockingIOError:
                pass
            except OSError:
                closed_after = elapsed
                break
        if peak is not None:
            peak = max(peak, run.target.rss() or 0)
        if other_ms is None and elapsed > s.never_reads_seconds / 2:
            t0 = time.perf_counter()
            other_client()
            other_ms = _ms(time.perf_counter() - t0)
    return sent, peak, closed_after, other_ms


def _metadata_answered(sock: socket.socket, topics: list[dict] | None) -> tuple[bytes, int]:
    """A Metadata request for `topics`, and the size of its answer (asked once, read whole)."""
    frame = encode_request(RequestHeader(METADATA.key, 1, 1, "groupkeeper-abuse"),
                           build(METADATA.request.struct, {"topics": topics}))
    sock.sendall(frame)
    size = int.from_bytes(read_exactly(sock, 4), "big", signed=True)
    read_exactly(sock, size)
    return frame, 4 + size


def probe_large_group(run: _Run) -> Findings:
    """A group's generation is one record in ZooKeeper: a large group must form, or turn members
    away cleanly (GROUP_MAX_SIZE_REACHED), and never rebalance for ever."""
    f = Findings()
    n = run.settings.members
    group = run.group("large")
    subscription = encode_subscription(ConsumerProtocolSubscription(topics=[run.wide_topic or f"{run.tag}-topic"]), 0)
    address = run.target.coordinator(group)
    lanes = [range(i, min(i + JOINS_PER_CONNECTION, n)) for i in range(0, n, JOINS_PER_CONNECTION)]
    timeout = REBALANCE_MS / 1000 + run.settings.deadline
    connections = [run.target.connect(address, timeout) for _ in lanes]
    member_ids, generations = [""] * n, [-1] * n
    status: list[int | str] = [""] * n  # each member's last error code, or what broke its connection

    def ask(api, version: int, body_of, members: set[int]) -> dict[int, object]:
        """`body_of(i)` for each of `members`, every lane's requests pipelined on its connection
        at once (as many JoinGroups must be in flight together to form one generation)."""
        def lane(k: int) -> dict[int, object]:
            mine = [i for i in lanes[k] if i in members]
            if not mine:
                return {}
            try:
                answers = connections[k].pipeline(api, version, [body_of(i) for i in mine], chunk=len(mine))
            except Unreachable as exc:
                answers = [str(exc)] * len(mine)
            for i, answer in zip(mine, answers):
                status[i] = answer if isinstance(answer, str) else answer.error_code
            return dict(zip(mine, answers))
        with ThreadPoolExecutor(len(lanes)) as pool:
            return {i: a for result in pool.map(lane, range(len(lanes))) for i, a in result.items()}

    rejoin = {E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID}
    asking = set(range(n))
    started = time.monotonic()
    last_sync, rounds = None, 0
    try:
        while asking and rounds < LARGE_GROUP_ROUNDS:
            rounds += 1
            joined = ask(JOIN_GROUP, 3, lambda i: {
                "group_id": group, "session_timeout_ms": SESSION_MS, "rebalance_timeout_ms": REBALANCE_MS,
                "member_id": member_ids[i], "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription}]}, asking)
            for i, answer in joined.items():
                if not isinstance(answer, str):
                    member_ids[i], generations[i] = answer.member_id, answer.generation_id
            ask(SYNC_GROUP, 3, lambda i: {"group_id": group, "generation_id": generations[i],
                                          "member_id": member_ids[i], "assignments": []},
                {i for i in asking if status[i] == E.NONE})
            last_sync = time.monotonic()
            time.sleep(LARGE_GROUP_SETTLE_S)  # long enough for a rebalance the last answers set off to show
            ask(HEARTBEAT, 3, lambda i: {"group_id": group, "generation_id": generations[i],
                                         "member_id": member_ids[i]},
                {i for i in range(n) if status[i] == E.NONE})
            asking = {i for i in range(n) if status[i] in rejoin}
            for i in asking:
                if status[i] == E.UNKNOWN_MEMBER_ID:
                    member_ids[i] = ""
        stable = [i for i in range(n) if status[i] == E.NONE]
        described, = connections[0].pipeline(DESCRIBE_GROUPS, 1, [{"groups": [group]}])
        state, described_members = described.groups[0].group_state, len(described.groups[0].members)
        for start in range(0, len(stable), 1000):
            connections[0].pipeline(LEAVE_GROUP, 3, [{"group_id": group, "members": [
                {"member_id": member_ids[i]} for i in stable[start:start + 1000]]}])
    finally:
        for connection in connections:
            connection.close()
    refused = sum(s == E.GROUP_MAX_SIZE_REACHED for s in status)
    failed = Counter(s if isinstance(s, str) else error_name(s) for s in status
                     if s not in (E.NONE, E.GROUP_MAX_SIZE_REACHED))
    f.expect(not asking, f"{len(asking)} members still told to rejoin after {rounds} rounds: the group keeps rebalancing")
    f.expect(not failed, f"members failed: {dict(failed)}")
    f.expect(bool(stable), "no member got an assignment")
    f.expect(state == "Stable" and described_members == len(stable),
             f"DescribeGroups: {state} with {described_members} members, {len(stable)} expected")
    f.figures = {"members": n, "connections": len(lanes), "stable": len(stable), "refused_81": refused,
                 "failed": dict(failed), "rounds": rounds, "generation": max(generations),
                 "first_join_to_last_sync_s": None if last_sync is None else round(last_sync - started, 2),
                 "state": state}
    return f


# The wrong-password storm: where a deployment's SASL listener is, and a user of it, are
# given in these variables (its configuration is not the bench's to read); without them, where
# the bench starts its own coordinator, it starts one more, with a SASL_PLAINTEXT listener.
STORM_VARIABLES = ("GROUPKEEPER_ABUSE_SASL", "GROUPKEEPER_ABUSE_SASL_USER", "GROUPKEEPER_ABUSE_SASL_PASSWORD_FILE")
STORM_GUESSERS = 20  # connections retrying a wrong password at once
STORM_SECONDS = 5.0  # how long they do, while correct logins are timed
STORM_BASELINE = 5  # correct logins timed before the storm
STORM_BOUND_S = 1.0  # a correct login slower than this (or than 5 x the slowest before) broke
STORM_MECHANISM = "SCRAM-SHA-512"


class _SaslCoordinator(LocalCoordinator):
    """A LocalCoordinator with a SASL_PLAINTEXT listener beside its PLAINTEXT one and one
    SCRAM user, for the storm where the bench's own coordinator has no SASL listener."""

    USER = "groupkeeper-abuse"

    def _start(self, work: Path) -> None:
        self.sasl_port, self.password = free_port(), secrets.token_urlsafe(16)
        with UserAdmin(self.zookeeper.connect_string) as admin:
            admin.add(self.USER, STORM_MECHANISM, self.password, 4096)
        s = self.settings
        config = {"request_read_timeout_ms": max(1, int(s.read_timeout * 1000)),
                  "max_connections_per_ip": s.per_ip_limit, "sasl_enabled_mechanisms": [STORM_MECHANISM],
                  "events": False}
        config_path = work / "groupkeeper.toml"
        config_path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in config.items()))
        self.run = RunProcess(["--config", str(config_path), "--zookeeper", self.zookeeper.connect_string,
                               "--listeners", f"PLAINTEXT://127.0.0.1:{self.port},"
                                              f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
                               "--metrics-listen", "", "--data-dir", str(work / "data")])
        try:
            self.run.start(work / "groupkeeper.log")
        except NotStarted as exc:
            raise AdminError(f"the coordinator for the wrong-password storm did not start: {str(exc)[:300]}") from None


def probe_wrong_password_storm(run: _Run) -> Findings:
    """Connections retrying a wrong password must slow only themselves: the same user's
    correct logins from the same host answered as fast as before the storm (a pacing of
    every password check once held them up to 10 s each), and no guess let in."""
    given = {name: os.environ.get(name) for name in STORM_VARIABLES}
    if all(given.values()):
        protocol, _, address = given["GROUPKEEPER_ABUSE_SASL"].partition("://")
        if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            raise Skipped("GROUPKEEPER_ABUSE_SASL: SASL_PLAINTEXT://HOST:PORT or SASL_SSL://HOST:PORT")
        try:
            password = Path(given["GROUPKEEPER_ABUSE_SASL_PASSWORD_FILE"]).read_text().splitlines()[0]
        except (OSError, IndexError, UnicodeDecodeError) as exc:
            raise Skipped(f"GROUPKEEPER_ABUSE_SASL_PASSWORD_FILE: no password read: {exc}") from None
        cafile = os.environ.get("GROUPKEEPER_ABUSE_SASL_CAFILE")  # SASL_SSL: the CA, else the system's
        tls = ssl.create_default_context(cafile=cafile) if protocol == "SASL_SSL" else None
        mechanism = os.environ.get("GROUPKEEPER_ABUSE_SASL_MECHANISM", STORM_MECHANISM)
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise Skipped("GROUPKEEPER_ABUSE_SASL_MECHANISM: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        user = given["GROUPKEEPER_ABUSE_SASL_USER"]
        return _storm(run, _parse(address), protocol, tls, mechanism, user, password)
    if run.wide_topic is None:  # a deployment, and not told where its SASL listener is
        raise Skipped("set " + ", ".join(STORM_VARIABLES) + ": the listener as SASL_PLAINTEXT://HOST:PORT or "
                      "SASL_SSL://HOST:PORT, a user of it, a file with its password (and, if need be, "
                      "GROUPKEEPER_ABUSE_SASL_CAFILE for SASL_SSL, GROUPKEEPER_ABUSE_SASL_MECHANISM, default "
                      f"{STORM_MECHANISM})")
    with _SaslCoordinator(run.settings, f"{run.tag}-storm") as local:
        return _storm(run, ("127.0.0.1", local.sasl_port), "SASL_PLAINTEXT", None, STORM_MECHANISM, local.USER,
                      local.password)


def _parse(address: str) -> tuple[str, int]:
    try:
        return parse_address(address)
    except AdminError as exc:
        raise Skipped(f"GROUPKEEPER_ABUSE_SASL: {exc}") from None


def _log_in(host: str, port: int, timeout: float, security: UpstreamSecurity) -> str:
    """A SASL login on a new connection, closed after: ok, refused, unanswered (within
    `timeout`), or what went wrong. Straight to SaslHandshake, as the server allows."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return f"cannot connect: {exc}"
    try:
        if security.tls is not None:
            sock = security.tls.wrap_socket(sock, server_hostname=host)
        login = security.login()
        frame = login.first()
        while frame is not None:
            sock.sendall(frame)
            size = int.from_bytes(read_exactly(sock, 4), "big", signed=True)
            if not 0 <= size <= MiB:
                return f"an answer of {size} bytes"
            frame = login.feed(read_exactly(sock, size))
        return "ok"
    except LoginFailed:
        return "refused"
    except TimeoutError:
        return "unanswered"
    except OSError as exc:  # ssl.SSLError among them
        return f"lost: {exc}"
    finally:
        sock.close()


def _storm(run: _Run, address: tuple[str, int], protocol: str, tls, mechanism: str, user: str,
           password: str) -> Findings:
    f = Findings()
    host, port = address
    right = UpstreamSecurity(protocol, tls, mechanism, user, password)  # keeps SCRAM's salted password
    wrong = UpstreamSecurity(protocol, tls, mechanism, user, password + secrets.token_hex(4))

    def login(security: UpstreamSecurity, timeout: float) -> tuple[str, float]:
        """One login: how it ended (ok, refused, unanswered, or why not), and how long it took."""
        started = time.perf_counter()
        return _log_in(host, port, timeout, security), time.perf_counter() - started

    before = [login(right, run.settings.deadline) for _ in range(STORM_BASELINE)]
    f.expect(all(outcome == "ok" for outcome, _ in before),
             f"the correct password was refused before the storm: {[o for o, _ in before if o != 'ok'][:1]}")
    bound = max(STORM_BOUND_S, 5 * max(seconds for _, seconds in before))
    stop = threading.Event()
    guesses: list[tuple[str, float]] = []

    def guess() -> None:
        while not stop.is_set():  # a new connection as soon as the last guess was answered
            guesses.append(login(wrong, STORM_SECONDS))

    guessers = [threading.Thread(target=guess, daemon=True) for _ in range(STORM_GUESSERS)]
    for thread in guessers:
        thread.start()
    correct: list[tuple[str, float]] = []
    until = time.monotonic() + STORM_SECONDS
    while time.monotonic() < until:
        correct.append(login(right, run.settings.deadline))
    stop.set()
    for thread in guessers:
        thread.join(STORM_SECONDS + run.settings.deadline)
    times = sorted(seconds for outcome, seconds in correct if outcome == "ok")
    failed = Counter(outcome for outcome, _ in correct if outcome != "ok")
    outcomes = Counter(outcome for outcome, _ in guesses)
    answered = sorted(seconds for outcome, seconds in guesses if outcome == "refused")
    f.expect(not failed, f"correct logins failed during the storm: {dict(failed)}")
    f.expect(bool(times) and times[-1] <= bound,
             f"a correct login took {times[-1] if times else 0:.2f} s during the storm (bound {bound:.2f} s)")
    f.expect(not outcomes["ok"], f"{outcomes['ok']} logins with a wrong password were let in")
    f.expect(bool(guesses) and outcomes["refused"] + outcomes["unanswered"] == len(guesses),
             f"the guesses did not reach the server: {dict(outcomes)}")
    f.figures = {"listener": f"{protocol}://{host}:{port}", "mechanism": mechanism, "guessers": STORM_GUESSERS,
                 "seconds": STORM_SECONDS,
                 "correct_logins": len(correct), "before_max_ms": _ms(max(s for _, s in before)),
                 "correct_p50_ms": _ms(times[len(times) // 2]) if times else None,
                 "correct_p99_ms": _ms(times[int(len(times) * 0.99)]) if times else None,
                 "correct_max_ms": _ms(times[-1]) if times else None, "bound_ms": _ms(bound),
                 "guesses": dict(outcomes),
                 "guess_answered_p50_s": round(answered[len(answered) // 2], 2) if answered else None}
    return f


# The ZooKeeper data budget (issue 31): offset commits that keep every per-request and
# per-group limit, to ever more groups of one client. Without a budget 129 of them took a
# 512 MiB ZooKeeper to OutOfMemoryError (about 1.5 MB of its data each).
BUDGET_GROUPS, BUDGET_PARTITIONS, BUDGET_METADATA_CHARS = 129, 10_000, 104
BUDGET_REFUSALS_ENOUGH = 5  # groups refused in a row: the budget holds, the rest would be refused as well


def probe_zookeeper_budget(run: _Run) -> Findings:
    """Commits of 10,000 partitions x 104 characters of metadata (inside offset_commit_max_partitions
    and group_max_offset_metadata_bytes) to up to 129 groups: each acknowledged, or refused whole
    with INVALID_COMMIT_OFFSET_SIZE once the ZooKeeper data budget is reached; ZooKeeper still
    takes writes afterwards (a commit of moved offsets, the bystander's); the groups deleted, a
    group refused before is taken."""
    f = Findings()
    topic = run.topic(BUDGET_PARTITIONS)
    offsets = {(topic, p): (p, "m" * BUDGET_METADATA_CHARS) for p in range(BUDGET_PARTITIONS)}
    connections: dict[tuple[str, int], NodeConnection] = {}

    def commit(group: str, moved: int = 0) -> tuple[dict[str, int], float]:
        """One commit of the probe's offsets (moved on by `moved`): its answers by error, and its time."""
        address = run.target.coordinator(group)
        if address not in connections:
            connections[address] = run.target.connect(address)
        body = _commit_body(group, {key: (o + moved, md) for key, (o, md) in offsets.items()} if moved else offsets)
        started = time.perf_counter()
        try:
            answer, = connections[address].pipeline(OFFSET_COMMIT, 8, [body])
        except Unreachable as exc:
            connections.pop(address).close()
            return {f"no answer: {exc}": BUDGET_PARTITIONS}, time.perf_counter() - started
        return _named(_errors(answer).values()), time.perf_counter() - started

    accepted, refused, answers, seconds, in_a_row = [], [], Counter(), [], 0
    try:
        for i in range(BUDGET_GROUPS):
            group = run.group(f"budget-{i}")
            named, took = commit(group)
            seconds.append(took)
            outcome = next(iter(named)) if len(named) == 1 else "mixed"
            answers[outcome] += 1
            if outcome == "NONE":
                accepted.append(group)
                in_a_row = 0
            elif outcome == "INVALID_COMMIT_OFFSET_SIZE":
                refused.append(group)
                in_a_row += 1
                if in_a_row >= BUDGET_REFUSALS_ENOUGH:
                    break
            else:
                f.problems.append(f"{group}: answered {named}: the coordinator or its ZooKeeper gave way")
                break
        after = commit(accepted[0], moved=1)[0] if accepted else None  # moved offsets: nothing added
        f.expect(after in (None, {"NONE": BUDGET_PARTITIONS}),
                 f"a commit of moved offsets after the pressure was answered {after}: ZooKeeper takes no writes")
        deleted = _delete(run.target, accepted)
        again = None
        if refused and accepted:  # the room given back is taken again
            again, _ = commit(refused[0])
            f.expect(again == {"NONE": BUDGET_PARTITIONS},
                     f"{refused[0]}, refused before, was answered {again} once {len(accepted)} groups were deleted")
            _delete(run.target, refused[:1])
    finally:
        for connection in connections.values():
            connection.close()
    served = run.target.served_within(run.settings.deadline)
    f.expect(served is not None, f"no new client served within {run.settings.deadline:g} s afterwards")
    slowest = max(seconds, default=0.0)
    f.expect(slowest <= run.settings.deadline, f"a commit was answered after {slowest:.1f} s")
    f.figures = {"groups_sent": len(seconds), "acknowledged": len(accepted), "refused": len(refused),
                 # ZooKeeper's own figure (mntr) for one such group: 1.47 MB
                 "stored_mb": round(len(accepted) * BUDGET_PARTITIONS * 147 / 1e6, 1), "answers": dict(answers),
                 "commit_p50_s": round(sorted(seconds)[len(seconds) // 2], 2) if seconds else None,
                 "commit_max_s": round(slowest, 2), "moved_after": _show(after) if after else None,
                 "deleted": deleted, "refused_then_taken": _show(again) if again else None}
    if not refused:
        f.figures["budget"] = f"not reached within {len(seconds)} groups"
        # the coordinator the bench starts has the default budget (64 MiB, from a 512 MiB heap, half
        # of it a client's): about 15 such groups; a deployment's may hold all 129
        f.expect(run.wide_topic is None, f"all {len(accepted)} groups acknowledged ({f.figures['stored_mb']} MB in "
                                         "ZooKeeper) by a coordinator with the default data budget: nothing bounds them")
    return f


PROBES = {
    "empty-names": (probe_empty_names,
                    "OffsetCommit with an empty group id and with an empty topic name, beside commits of "
                    f"{NEIGHBOURS} other groups on other connections: all acknowledged and fetched back but the "
                    "empty topic name's, answered UNKNOWN_TOPIC_OR_PARTITION and not stored"),
    "long-group-id": (probe_long_group_id,
                      f"a {LONG_GROUP_ID:,}-character group id in FindCoordinator, JoinGroup and OffsetCommit: "
                      f"INVALID_GROUP_ID and the connection still served; a {LONG_TOPIC}-character topic: "
                      "INVALID_TOPIC_EXCEPTION while the request's other topic commits"),
    "control-metadata": (probe_control_metadata,
                         f"one OffsetCommit of {CONTROL_PARTITIONS} partitions with {METADATA_CHARS:,} control "
                         "characters of metadata each: all acknowledged, fetched back intact"),
    "huge-commit": (probe_huge_commit,
                    "{huge_partitions:,} partitions x 4,096 bytes of metadata committed to 3 groups at once: every "
                    "partition answered (acknowledged or refused) within {deadline:g} s, new clients served"),
    "trickle": (probe_trickle,
                "a request trickled at one byte a second: the connection closed within the read timeout "
                "({read_timeout:g} s) plus a margin"),
    "connection-flood": (probe_connection_flood,
                         "{connections:,} idle connections from this address: those over max_connections_per_ip "
                         "({per_ip_limit:,}) closed by the server, a new client served once released"),
    "never-reads": (probe_never_reads,
                    "Metadata pipelined for {never_reads_seconds:g} s, answers never read: resident memory grows "
                    "less than 2 x max_queued_reply_bytes + 64 MiB, other clients served"),
    "never-reads-waiting": (probe_never_reads_waiting,
                            "OffsetFetch answers of megabytes (made in tasks of their own) pipelined for "
                            "{never_reads_seconds:g} s, never read: resident memory grows less than 2 x "
                            "max_queued_reply_bytes + 64 MiB + two answers, and is back within 8 MiB of where it "
                            "began once the client closed; other clients served"),
    "large-group": (probe_large_group,
                    "{members:,} members join one group (JoinGroup v3 pipelined, 100 a connection) and sync: each "
                    "assigned (error 0) or refused GROUP_MAX_SIZE_REACHED, the group Stable, not rebalancing"),
    "wrong-password-storm": (probe_wrong_password_storm,
                             f"{STORM_GUESSERS} connections retrying a wrong password for {STORM_SECONDS:g} s beside "
                             "the same user's correct logins from the same host: every correct login let in "
                             f"within max({STORM_BOUND_S:g} s, 5 x its time before the storm), no guess let in"),
    "zookeeper-budget": (probe_zookeeper_budget,
                         f"{BUDGET_PARTITIONS:,} partitions x {BUDGET_METADATA_CHARS} characters of metadata "
                         f"committed to up to {BUDGET_GROUPS} groups: each acknowledged or refused whole "
                         "(INVALID_COMMIT_OFFSET_SIZE) within the deadline, ZooKeeper still taking writes after "
                         "(moved offsets, the bystander's), room given back when the groups are deleted"),
}


# -- the run -------------------------------------------------------------------------------

def run(settings: Settings) -> dict:
    if "connection-flood" in settings.probes:
        raise_open_files(settings.connections + 256)
    if settings.bootstrap is not None:
        return _probe_all(settings, Target(settings.bootstrap, settings.deadline, metrics=settings.metrics), None)
    wide = "groupkeeper-abuse-wide"
    with LocalCoordinator(settings, wide) as local:
        target = Target(("127.0.0.1", local.port), settings.deadline, pid=local.run.process.pid)
        return _probe_all(settings, target, wide, (OFFSETS_TOPIC, offsets_partitions(settings)))


def offsets_partitions(settings: Settings) -> int:
    """The partitions of the topic the bench creates for its commits: the most a probe commits."""
    return min(max(OFFSETS_PARTITIONS, settings.huge_partitions), OFFSETS_MAX_PARTITIONS)


def _largest_topic(target: Target) -> tuple[str, int]:
    """A deployment's topic with the most partitions, which the probes commit to (offsets are
    stored only for partitions that exist, and the bench does not create topics there); ("", 0)
    when it lists none (or does not answer Metadata): the probes that commit are then skipped."""
    try:
        connection = target.connect()
        try:
            answer, = connection.pipeline(METADATA, 12, [{"topics": None, "allow_auto_topic_creation": False,
                                                           "include_topic_authorized_operations": False}])
        finally:
            connection.close()
    except Unreachable:
        return "", 0
    topics = [(t.name, len(t.partitions)) for t in answer.topics
              if t.error_code == E.NONE and t.name and not t.is_internal and t.partitions]
    return max(topics, key=lambda t: (t[1], t[0]), default=("", 0))


def _probe_all(settings: Settings, target: Target, wide_topic: str | None,
               offsets_topic: tuple[str, int] | None = None) -> dict:
    try:
        target.connect().close()
    except Unreachable as exc:
        raise AbuseError(str(exc)) from None
    offsets_topic = offsets_topic or _largest_topic(target)
    bench = _Run(settings, target, wide_topic, offsets_topic)
    bystander = Bystander(target, f"{bench.tag}-bystander", offsets_topic)
    bystander.start()
    rows = []
    try:
        for name in settings.probes:
            probe, checked = PROBES[name]
            bystander.begin()
            started = time.monotonic()
            findings, skipped = Findings(), None
            try:
                findings = probe(bench)
            except Skipped as exc:
                skipped = str(exc)
            except (AdminError, OSError) as exc:
                findings.problems.append(f"lost: {exc}")
            seen = bystander.end()
            rows.append({"probe": name, "verdict": verdict(findings.problems + seen.problems, skipped),
                         "figures": findings.figures, "bystander": seen.figures,
                         "problems": findings.problems + seen.problems, "skipped": skipped,
                         "seconds": round(time.monotonic() - started, 2),
                         "checked": checked.format(**asdict(settings))})
    finally:
        bystander.stop()
    result = {"target": f"{target.host}:{target.port}", "started_by_bench": wide_topic is not None,
              "settings": {k: v for k, v in asdict(settings).items() if k not in ("bootstrap", "metrics")},
              "probes": rows, "broke": sum(r["verdict"] == "broke" for r in rows)}
    if wide_topic is None:
        bench.created.append(bystander.group)
        if bench.empty_group_was_unused:
            bench.created.append("")
        result["cleanup"] = _delete(target, bench.created)
    return result


def verdict(problems: list[str], skipped: str | None) -> str:
    """`skipped` when the probe could not run; otherwise `broke` on any problem, its own or
    the bystander's."""
    if skipped is not None:
        return "skipped"
    return "broke" if problems else "held"


def _delete(target: Target, groups: list[str]) -> dict:
    """Delete what the bench wrote to a deployment (best effort): DeleteGroups' answer, by name."""
    answers: Counter[str] = Counter()
    for group in groups:
        try:
            connection = target.at(group)
            try:
                answer, = connection.pipeline(DELETE_GROUPS, 1, [{"groups_names": [group]}])
            finally:
                connection.close()
            answers[error_name(answer.results[0].error_code)] += 1
        except Unreachable as exc:
            answers[str(exc)] += 1
    return dict(answers)


def table(result: dict) -> str:
    rows = [("PROBE", "VERDICT", "BYSTANDER", "FIGURES", "CHECKED")]
    for r in result["probes"]:
        b = {key: "-" if value is None else value for key, value in r["bystander"].items()}
        rows.append((r["probe"], r["verdict"],
                     f"{b['requests']} req, p99 {b['p99_ms']} ms, max {b['max_ms']} ms, back {b.get('fetched_back', '-')}",
                     r["skipped"] or " ".join(f"{k}={_show(v)}" for k, v in r["figures"].items()), r["checked"]))
    widths = [max(len(row[c]) for row in rows) for c in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4] for row in rows]
    lines += [f"{r['probe']} {r['verdict']}: {problem}" for r in result["probes"] for problem in r["problems"]]
    where = "a local coordinator the bench started" if result["started_by_bench"] else result["target"]
    lines.append(f"{len(result['probes']) - result['broke']} of {len(result['probes'])} probes held or skipped, "
                 f"{result['broke']} broke, against {where}")
    if "cleanup" in result:
        lines.append(f"groups the bench wrote, deleted: {_show(result['cleanup'])}")
    return "\n".join(lines)


def _show(value) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{v}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_show(v) for v in value) + "]"
    return str(value)
