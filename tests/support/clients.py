"""Unmodified Kafka consumers for the end-to-end tests, driven from one test thread."""

from __future__ import annotations

import itertools
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer as CKConsumer
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import CommitFailedError, RebalanceInProgressError
from kafka.net.sasl.scram import ScramClient

from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from tests.support.pymember import kp_subscribe
from tools.kafka_admin import read_exactly
from protocol import ErrorCode, RequestHeader, decode_response, encode_request
from protocol.consumer import decode_assignment, encode_assignment, encode_subscription
from protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicPartition, build
from protocol.schemas import (DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, METADATA, OFFSET_COMMIT,
                              OFFSET_FETCH, SASL_AUTHENTICATE, SASL_HANDSHAKE, SYNC_GROUP)


def kp_consumer(bootstrap: str, group: str, *topics: str, **extra) -> KafkaConsumer:
    """A kafka-python consumer subscribed to `topics` as kafka-python 3.0.12 needs
    (tests/support/pymember.py's kp_subscribe says why)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500, **extra)
    if topics:
        kp_subscribe(consumer, list(topics), seconds=30)
    return consumer


class CK:
    """A confluent-kafka consumer that records what its rebalance callbacks saw: with a
    cooperative strategy, or the consumer protocol (KIP-848, `group.protocol=consumer`:
    the coordinator sets the timing and assigns), they see increments, and it applies them
    as librdkafka expects."""

    def __init__(self, bootstrap: str, group: str, *topics: str, on_revoke=None, strategy: str = "range",
                 protocol: str = "classic", **config):
        self.assigned: set[tuple[str, int]] = set()
        self.history: list[tuple[str, set[tuple[str, int]]]] = []
        self.on_revoke = on_revoke
        self.cooperative = strategy == "cooperative-sticky" or protocol == "consumer"
        classic = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "partition.assignment.strategy": strategy}
        self.consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                                    "log_level": 3, "group.protocol": protocol,
                                    **(classic if protocol == "classic" else {}), **config})
        self.consumer.subscribe(list(topics), on_assign=self._assign, on_revoke=self._revoke)

    def _assign(self, consumer, partitions):
        given = {(p.topic, p.partition) for p in partitions}
        self.history.append(("assign", given))
        if self.cooperative:
            self.assigned |= given
            consumer.incremental_assign(partitions)
        else:
            self.assigned = given

    def _revoke(self, consumer, partitions):
        if self.on_revoke is not None:
            self.on_revoke(consumer, partitions)
        taken = {(p.topic, p.partition) for p in partitions}
        self.history.append(("revoke", taken))
        self.assigned -= taken
        if self.cooperative:
            consumer.incremental_unassign(partitions)

    def poll(self):
        self.consumer.poll(0.1)


@contextmanager
def member_process(script: Path):
    """A member running `script` in a process of its own, once it prints "assigned"; killed
    on the way out if still alive."""
    victim = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline().strip() == "assigned"
        yield victim
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(timeout=10)


def kill_and_take_over(coordinator, victim: subprocess.Popen, survivor: CK, group: str, everything: set,
                       at_least: float) -> None:
    """SIGKILL the member process `victim` while `survivor` polls: the survivor ends up with
    `everything`, not before `at_least` seconds (the session timeout); it is closed after."""
    try:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        killed = time.monotonic()
        poll_until(lambda: survivor.assigned == everything, survivor, timeout=30)
        assert time.monotonic() - killed >= at_least  # after the session timeout, not before
        coordinator.wait_for_log("member removed", group=group, reason="session timeout")
    finally:
        survivor.consumer.close()


def kp_commit(consumer: KafkaConsumer, offsets: dict, timeout: float = 30.0) -> None:
    """Commit as an application would: a rebalance under way (the member rejoins when its
    own metadata snapshot changes) is finished by polling, then the commit is retried."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(offsets)
            return
        except (RebalanceInProgressError, CommitFailedError):
            assert time.monotonic() < deadline, "no commit accepted in time"
            consumer.poll(timeout_ms=100)


def kp_assigned(consumer: KafkaConsumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


def poll_until(condition, *consumers, timeout: float = 45.0, kp_poll_ms: int = 100) -> None:
    """Poll every consumer in turn until `condition()` holds, failing after `timeout`.
    `kp_poll_ms`: each kafka-python poll's timeout. A kafka-python 3.0.12 member that starts
    a rejoin by itself wedges if the join outlives one poll (pymember.kp_subscribe says how;
    a member it subscribed starts none): where a join waits for another member, a poll long
    enough for the join to end inside it guards against one started anyway."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        for c in consumers:
            c.poll(timeout_ms=kp_poll_ms) if isinstance(c, KafkaConsumer) else c.poll()


class RawConnection:
    """One connection speaking the protocol through our own codec, one request at a time."""

    def __init__(self, port: int, timeout: float = 30.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self._correlation = 0

    def call(self, api, version: int, body: dict):
        self.send(api, version, body)
        return self.receive(api, version)

    def send(self, api, version: int, body: dict) -> None:
        """A request without waiting for its answer (`receive` reads it)."""
        self._correlation += 1
        request = build(api.request.struct, body)
        self.sock.sendall(encode_request(RequestHeader(api.key, version, self._correlation, "raw"), request))

    def receive(self, api, version: int):
        size = struct.unpack(">i", read_exactly(self.sock, 4))[0]
        correlation_id, response = decode_response(api.key, version, read_exactly(self.sock, size))
        assert correlation_id == self._correlation
        return response

    def answered(self) -> bool:
        """Whether the server has sent anything (or closed the connection) by now, without
        waiting for it or reading it. Plain sockets only: TLS cannot peek."""
        timeout = self.sock.gettimeout()
        self.sock.setblocking(False)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
            return True
        except BlockingIOError:
            return False
        finally:
            self.sock.settimeout(timeout)

    def close(self) -> None:
        self.sock.close()

    def wait_for_topic(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        """Until the coordinator's Metadata shows `topic` with `partitions`: its registry
        learns of a topic created in ZooKeeper a moment after the write."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self.call(METADATA, 1, {"topics": [{"name": topic}]})
            if [len(t.partitions) for t in answer.topics if t.error_code == 0] == [partitions]:
                return
            assert time.monotonic() < deadline, f"the coordinator never saw {topic} with {partitions} partitions"
            time.sleep(0.05)


class SecureConnection(RawConnection):
    """A RawConnection over TLS (`cafile` checks the server; None: no TLS; `cert`/`key`: a
    client certificate) that authenticates with SASL first when given a user: SaslHandshake
    v1, then kafka-python's own SCRAM client (or a PLAIN token) in SaslAuthenticate requests.
    `authenticated` is the last SaslAuthenticate answer's error."""

    def __init__(self, port: int, cafile: str | None, user: str | None = None, password: str | None = None,
                 mechanism: str = "SCRAM-SHA-512", cert: str | None = None, key: str | None = None,
                 timeout: float = 30.0):
        super().__init__(port, timeout)
        if cafile is not None:
            context = ssl.create_default_context(cafile=cafile)
            if cert is not None:
                context.load_cert_chain(cert, key)
            self.sock = context.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.authenticated = None
        if user is not None:
            self.authenticated = self.authenticate(user, password, mechanism)

    def authenticate(self, user: str, password: str, mechanism: str) -> ErrorCode:
        assert self.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == ErrorCode.NONE
        if mechanism == "PLAIN":
            return self.call(SASL_AUTHENTICATE, 2, {"auth_bytes": f"\0{user}\0{password}".encode()}).error_code
        scram = ScramClient(user, password, mechanism)
        first = self.call(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first_message()})
        if first.error_code != ErrorCode.NONE:
            return first.error_code
        scram.process_server_first_message(first.auth_bytes)
        final = self.call(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.final_message()})
        if final.error_code == ErrorCode.NONE:
            scram.process_server_final_message(final.auth_bytes)  # the server proved it knows the key
        return final.error_code


def join_together(first: "RawMember", second: "RawMember") -> tuple[dict, dict]:
    """Two members in one generation, deterministically: the first forms a generation alone,
    the second's join starts a rebalance that the first follows, as a client would."""
    mine = first.join_and_sync()
    theirs: dict = {}
    joining = threading.Thread(target=lambda: theirs.update(second.join_and_sync()))
    joining.start()
    mine = first.rejoin_when_asked()
    joining.join(30)
    assert not joining.is_alive(), "the second member never got its assignment"
    return mine, theirs


REBALANCE_TIMEOUT = 10.0  # seconds, of RawMember's JoinGroups


class RawMember(RawConnection):
    """A group member without a client's own decisions: for server behaviour a real client
    would hide, or race with."""

    VERSIONS = {"join": 5, "sync": 3, "heartbeat": 3}

    def __init__(self, port: int, group: str, *topics: str, strategies: tuple[str, ...] = ("range",),
                 session_timeout_ms: int = 10000):
        super().__init__(port)
        self.strategies = strategies
        self.session_timeout_ms = session_timeout_ms
        self.group, self.member_id, self.generation = group, "", -1
        self.subscribe(*topics)

    def subscribe(self, *topics: str) -> None:
        """What the next JoinGroup subscribes to."""
        self.subscription = encode_subscription(ConsumerProtocolSubscription(topics=list(topics)), 0)

    def join_request(self) -> tuple:
        """(api, version, body) of this member's JoinGroup."""
        return JOIN_GROUP, self.VERSIONS["join"], {
            "group_id": self.group, "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": int(REBALANCE_TIMEOUT * 1000),
            "member_id": self.member_id, "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": self.subscription} for name in self.strategies]}

    def join(self):
        """One JoinGroup: the response (its member id is kept)."""
        joined = self.call(*self.join_request())
        self.member_id = joined.member_id
        return joined

    def join_and_sync(self) -> dict[str, list[int]]:
        """(Re)join until a generation is formed; the assignment the server computed."""
        while True:
            joined = self.join()
            if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                continue
            assert joined.error_code == ErrorCode.NONE, ErrorCode(joined.error_code)
            self.generation = joined.generation_id
            synced = self.call(SYNC_GROUP, self.VERSIONS["sync"], {
                "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
                "assignments": []})
            if synced.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            assert synced.error_code == ErrorCode.NONE, ErrorCode(synced.error_code)
            if not synced.assignment:
                return {}
            return {tp.topic: sorted(tp.partitions)
                    for tp in decode_assignment(synced.assignment)[1].assigned_partitions}

    def rejoin_when_asked(self, timeout: float = 30.0) -> dict[str, list[int]]:
        """Heartbeat until the coordinator asks for a rejoin, then rejoin: a client's loop."""
        deadline = time.monotonic() + timeout
        while self.heartbeat() != ErrorCode.REBALANCE_IN_PROGRESS:
            assert time.monotonic() < deadline, "no rebalance asked for"
            time.sleep(0.01)
        return self.join_and_sync()

    def heartbeat_request(self) -> tuple:
        return HEARTBEAT, self.VERSIONS["heartbeat"], {
            "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id}

    def heartbeat(self) -> ErrorCode:
        return ErrorCode(self.call(*self.heartbeat_request()).error_code)

    def leave(self) -> ErrorCode:
        return ErrorCode(self.call(LEAVE_GROUP, 0, {"group_id": self.group, "member_id": self.member_id}).error_code)

    def commit_request(self, topic: str, offsets: dict[int, int]) -> tuple:
        return OFFSET_COMMIT, 7, {
            "group_id": self.group, "generation_id_or_member_epoch": self.generation, "member_id": self.member_id,
            "topics": [{"name": topic, "partitions": [{"partition_index": p, "committed_offset": o}
                                                      for p, o in offsets.items()]}]}

    def commit(self, topic: str, offsets: dict[int, int]) -> list[ErrorCode]:
        """OffsetCommit v7 in this member's generation: the partitions' error codes."""
        answer = self.call(*self.commit_request(topic, offsets))
        return [ErrorCode(p.error_code) for t in answer.topics for p in t.partitions]


MOVED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)
ANSWER_WITHIN = 2.0  # seconds a roaming member waits for an answer, but for a JoinGroup
WAIT = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REBALANCE_IN_PROGRESS)


def find_coordinator(bootstraps: list[int], group: str, timeout: float = 30.0) -> int:
    """The port of `group`'s coordinator, asking each instance in turn until one answers."""
    deadline = time.monotonic() + timeout
    while True:
        for port in bootstraps:
            try:  # an instance that does not answer at once is dead or paused: ask another
                connection = RawConnection(port, timeout=ANSWER_WITHIN)
            except OSError:
                continue
            try:
                answer = connection.call(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
            except OSError:
                continue
            finally:
                connection.close()
            if answer.error_code == ErrorCode.NONE:
                return answer.port
        assert time.monotonic() < deadline, f"no coordinator found for {group}"
        time.sleep(0.05)


def described(bootstraps: list[int], group: str):
    """DescribeGroups' answer for `group`, from its coordinator wherever it is now."""
    connection = RawConnection(find_coordinator(bootstraps, group))
    try:
        return connection.call(DESCRIBE_GROUPS, 5, {"groups": [group]}).groups[0]
    finally:
        connection.close()


def committed(bootstraps: list[int], group: str, timeout: float = 30.0) -> dict[tuple[str, int], int]:
    """Every committed offset of `group`, from its coordinator wherever it is now."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection = RawConnection(find_coordinator(bootstraps, group))
            try:
                answer = connection.call(OFFSET_FETCH, 5, {"group_id": group, "topics": None})
            finally:
                connection.close()
            if answer.error_code == ErrorCode.NONE:
                return {(t.name, p.partition_index): p.committed_offset for t in answer.topics
                        for p in t.partitions if p.committed_offset >= 0}
        except OSError:
            pass
        assert time.monotonic() < deadline, f"the offsets of {group} could not be fetched"
        time.sleep(0.05)


class RoamingMember(RawMember):
    """A raw member that finds its coordinator through any instance and follows it when it
    moves, as a client does: a coordinator error or a broken connection sends it to
    FindCoordinator again, and the request is repeated there. For strategies the server does
    not know, the leader assigns `partitions` round-robin."""

    def __init__(self, bootstraps: list[int], group: str, *topics: str, partitions: dict[str, int] | None = None,
                 **kwargs):
        self.bootstraps = list(bootstraps)
        self.partitions = partitions or {}
        super().__init__(find_coordinator(self.bootstraps, group), group, *topics, **kwargs)
        self.assignment: dict[str, list[int]] = {}
        self.joining = False  # a JoinGroup was sent and its answer not read
        self.syncing = False  # a generation joined, its assignment not collected yet

    def send_join(self) -> None:
        """Send a JoinGroup without waiting for its answer (it may wait for a rebalance)."""
        self.send(*self.join_request())
        self.joining = True

    def receive_join(self):
        """The answer to `send_join`; its generation becomes this member's."""
        joined = self.receive(*self.join_request()[:2])
        self.joining = False
        self.member_id, self.generation = joined.member_id, joined.generation_id
        self.syncing = joined.error_code == ErrorCode.NONE
        return joined

    def relocate(self, timeout: float = 30.0) -> None:
        self.sock.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection(
                    ("127.0.0.1", find_coordinator(self.bootstraps, self.group)), timeout=ANSWER_WITHIN)
                return
            except OSError:
                assert time.monotonic() < deadline, "the coordinator could not be reached"
                time.sleep(0.05)

    def call(self, api, version: int, body: dict):
        for _ in range(200):
            # a JoinGroup waits for the rebalance, up to its timeout; anything else answers at once
            self.sock.settimeout(REBALANCE_TIMEOUT + ANSWER_WITHIN if api is JOIN_GROUP else ANSWER_WITHIN)
            try:
                return super().call(api, version, body)
            except OSError:  # the coordinator went away mid-request: ask again, elsewhere
                self.relocate()
        raise AssertionError("no coordinator answered")

    def step(self) -> ErrorCode:
        """One turn of a client's loop: a heartbeat, and what its answer asks for; a JoinGroup
        whose answer was lost (its coordinator died) is sent again first."""
        if self.joining:
            self.relocate()  # what was sent on the old connection is gone with it
            self.joining = False
            self.rejoin()
            return ErrorCode.NONE
        if self.syncing:  # a client collects the assignment of the generation it joined
            error, assignment = self.sync([])
            if error == ErrorCode.NONE:
                self.syncing, self.assignment = False, assignment
            elif error in MOVED:
                self.relocate()
            elif error in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION,
                           ErrorCode.UNKNOWN_MEMBER_ID):
                self.syncing = False
                self.member_id = "" if error == ErrorCode.UNKNOWN_MEMBER_ID else self.member_id
                self.rejoin()
            return error
        error = self.heartbeat()
        if error in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            self.rejoin()
        elif error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.member_id = ""
            self.rejoin()
        elif error in MOVED:
            self.relocate()
        elif error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            time.sleep(0.05)
        return error

    def rejoin(self, timeout: float = 60.0) -> dict[str, list[int]]:
        """Join and sync until a generation is formed, whatever happens meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, "no generation formed in time"
            joined = self.join()
            error = ErrorCode(joined.error_code)
            if error in (ErrorCode.MEMBER_ID_REQUIRED, ErrorCode.UNKNOWN_MEMBER_ID):
                self.member_id = "" if error == ErrorCode.UNKNOWN_MEMBER_ID else self.member_id
                continue
            if error in MOVED:
                self.relocate()
                continue
            if error in WAIT:
                time.sleep(0.05)
                continue
            assert error == ErrorCode.NONE, error
            self.generation = joined.generation_id
            error, assignment = self.sync(self._leader_assignments(joined))
            if error == ErrorCode.NONE:
                self.syncing, self.assignment = False, assignment
                return assignment
            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            elif error in MOVED:
                self.relocate()
            else:
                assert error in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION), error

    def sync(self, assignments: list[dict]) -> tuple[ErrorCode, dict[str, list[int]]]:
        synced = self.call(SYNC_GROUP, self.VERSIONS["sync"], {
            "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
            "assignments": assignments})
        if synced.error_code != ErrorCode.NONE or not synced.assignment:
            return ErrorCode(synced.error_code), {}
        return ErrorCode.NONE, {tp.topic: sorted(tp.partitions)
                                for tp in decode_assignment(synced.assignment)[1].assigned_partitions}

    def _leader_assignments(self, joined) -> list[dict]:
        if not self.partitions or joined.leader != self.member_id:
            return []
        members = sorted(m.member_id for m in joined.members)
        given: dict[str, dict[str, list[int]]] = {m: {} for m in members}
        every = [(t, p) for t in sorted(self.partitions) for p in range(self.partitions[t])]
        for i, (t, p) in enumerate(every):
            given[members[i % len(members)]].setdefault(t, []).append(p)
        return [{"member_id": m, "assignment": encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
            TopicPartition(topic=t, partitions=ps) for t, ps in sorted(tps.items())]), 0)}
            for m, tps in given.items()]

    def commit_assigned(self, offset: int, acked: dict[tuple[str, int], int]) -> None:
        """Commit `offset` for every assigned partition; what is acknowledged goes to `acked`."""
        for topic, partitions in sorted(self.assignment.items()):
            errors = self.commit(topic, {p: offset for p in partitions})
            for p, error in zip(partitions, errors):
                if error == ErrorCode.NONE:
                    acked[(topic, p)] = max(acked.get((topic, p), -1), offset)


class ClientLoop(threading.Thread):
    """Runs members' client loops (heartbeat, rejoin, follow the coordinator) and commits a
    rising offset on every assigned partition each turn, recording every acknowledgement."""

    _offsets = itertools.count(1)

    def __init__(self, member: RoamingMember, acked: dict[tuple[str, int], int], lock: threading.Lock,
                 commit: bool = True):
        super().__init__(daemon=True)
        self.member, self.acked, self.lock, self.commit = member, acked, lock, commit
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.turns = 0

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.turns += 1
                self.member.step()
                if self.commit and self.member.assignment:
                    with self.lock:
                        offset = next(self._offsets)
                    mine: dict[tuple[str, int], int] = {}
                    self.member.commit_assigned(offset, mine)
                    with self.lock:
                        for tp, o in mine.items():
                            self.acked[tp] = max(self.acked.get(tp, -1), o)
                self.stopping.wait(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.failure = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)
        assert not self.is_alive(), "a client loop did not stop"
        if self.failure is not None:
            raise self.failure


def converge(members: list[RoamingMember], partitions: set[tuple[str, int]], acked: dict, timeout: float = 60.0):
    """Run every member's client loop until they share one generation whose assignment covers
    `partitions` exactly once; then stop them (commits included) and check it again."""
    lock = threading.Lock()
    loops = [ClientLoop(m, acked, lock) for m in members]
    for loop in loops:
        loop.start()
    deadline = time.monotonic() + timeout
    try:
        while not one_generation(members, partitions):
            assert time.monotonic() < deadline, [(m.generation, m.assignment) for m in members]
            assert all(loop.is_alive() for loop in loops), [loop.failure for loop in loops]
            time.sleep(0.05)
        then = [loop.turns for loop in loops]  # a few more turns (heartbeats, commits) in that generation
        while any(loop.turns < turns + 3 for loop, turns in zip(loops, then)):
            assert time.monotonic() < deadline and all(loop.is_alive() for loop in loops)
            time.sleep(0.05)
    finally:
        for loop in loops:
            loop.stop()
    assert one_generation(members, partitions)
    assert all(m.heartbeat() == ErrorCode.NONE for m in members)


def one_generation(members: list[RoamingMember], partitions: set[tuple[str, int]]) -> bool:
    owned = [(t, p) for m in members for t, ps in m.assignment.items() for p in ps]
    return (len({m.generation for m in members}) == 1 and len(owned) == len(set(owned))
            and set(owned) == partitions)


def produce_values(bootstrap: str, topic: str, count: int, prefix: str, partitions: int | None = None) -> list[str]:
    """`count` records "PREFIX-i" through `bootstrap` with kafka-python (acks=all), record i
    to partition i % `partitions` when given; their values."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    values = [f"{prefix}-{i}" for i in range(count)]
    try:
        futures = [producer.send(topic, v.encode(), partition=None if partitions is None else i % partitions)
                   for i, v in enumerate(values)]
        for future in futures:
            future.get(timeout=60)
    finally:
        producer.close()
    return values


def read_committed(bootstrap: str, topic: str, count: int, timeout: float = 60.0) -> list[str]:
    """Every value of `topic` a read_committed consumer (a group of its own) reads, until it has
    `count` and a poll finds nothing more, or `timeout` passes: the caller compares them with
    what it expects, duplicates included. Values in each partition's order."""
    consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}-{time.monotonic_ns()}",
                           "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                           "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        values, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
            elif len(values) >= count and message is None:
                break
        return values
    finally:
        consumer.close()


def held_by_groupkeeper(gateway_port: int, broker_groups: set[str], group: str) -> None:
    """FindCoordinator through the gateway names a groupkeeper instance (this gateway), and
    the broker's own coordinators (`broker_groups`: the groups they know) do not know it."""
    connection = RawConnection(gateway_port)
    try:
        found = connection.call(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    finally:
        connection.close()
    assert found.error_code == 0 and found.node_id >= INSTANCE_NODE_BASE and found.port == gateway_port
    assert group not in broker_groups
