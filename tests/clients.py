"""Unmodified Kafka consumers for the end-to-end tests, driven from one test thread."""

from __future__ import annotations

import socket
import struct
import threading
import time

from confluent_kafka import Consumer as CKConsumer
from kafka import KafkaConsumer
from kafka.errors import CommitFailedError, RebalanceInProgressError

from protocol import ErrorCode, RequestHeader, decode_response, encode_request
from protocol.consumer import decode_assignment, encode_subscription
from protocol.messages import ConsumerProtocolSubscription, build
from protocol.schemas import HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, METADATA, OFFSET_COMMIT, SYNC_GROUP


def kp_consumer(bootstrap: str, group: str, *topics: str, **extra) -> KafkaConsumer:
    """A kafka-python consumer subscribed to `topics` once it knows their partitions.

    kafka-python 3.0.12 can wedge a member whose rejoin is triggered only by its own
    metadata changing (a leader that assigned before it knew a topic's partitions): if the
    join outlives one `poll()`, the next poll no longer sees a rejoin as needed and never
    completes it, so heartbeats stay disabled. Knowing the partitions before the first
    join keeps every rejoin on the path the coordinator asks for (REBALANCE_IN_PROGRESS).
    """
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500, **extra)
    deadline = time.monotonic() + 30
    for topic in topics:
        while not consumer.partitions_for_topic(topic):
            assert time.monotonic() < deadline, f"no metadata for {topic}"
            time.sleep(0.1)
    if topics:
        consumer.subscribe(list(topics))
    return consumer


class CK:
    """A confluent-kafka consumer that records what its rebalance callbacks saw: with a
    cooperative strategy they see increments, and it applies them as librdkafka expects."""

    def __init__(self, bootstrap: str, group: str, *topics: str, on_revoke=None, strategy: str = "range"):
        self.assigned: set[tuple[str, int]] = set()
        self.history: list[tuple[str, set[tuple[str, int]]]] = []
        self.on_revoke = on_revoke
        self.cooperative = strategy == "cooperative-sticky"
        self.consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                    "enable.auto.commit": False, "session.timeout.ms": 6000,
                                    "heartbeat.interval.ms": 500, "log_level": 3,
                                    "partition.assignment.strategy": strategy})
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


def poll_until(condition, *consumers, timeout: float = 45.0) -> None:
    """Poll every consumer in turn until `condition()` holds, failing after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        for c in consumers:
            c.poll(timeout_ms=100) if isinstance(c, KafkaConsumer) else c.poll()


class RawConnection:
    """One connection speaking the protocol through our own codec, one request at a time."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self._correlation = 0

    def call(self, api, version: int, body: dict):
        self._correlation += 1
        request = build(api.request.struct, body)
        self.sock.sendall(encode_request(RequestHeader(api.key, version, self._correlation, "raw"), request))
        size = struct.unpack(">i", self._read(4))[0]
        correlation_id, response = decode_response(api.key, version, self._read(size))
        assert correlation_id == self._correlation
        return response

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "connection closed by the server"
            data += chunk
        return data

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
        self.subscription = encode_subscription(ConsumerProtocolSubscription(topics=list(topics)), 0)

    def join(self):
        """One JoinGroup: the response (its member id is kept)."""
        joined = self.call(JOIN_GROUP, self.VERSIONS["join"], {
            "group_id": self.group, "session_timeout_ms": self.session_timeout_ms, "rebalance_timeout_ms": 10000,
            "member_id": self.member_id, "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": self.subscription} for name in self.strategies]})
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

    def heartbeat(self) -> ErrorCode:
        return ErrorCode(self.call(HEARTBEAT, self.VERSIONS["heartbeat"], {
            "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id}).error_code)

    def leave(self) -> ErrorCode:
        return ErrorCode(self.call(LEAVE_GROUP, 0, {"group_id": self.group, "member_id": self.member_id}).error_code)

    def commit(self, topic: str, offsets: dict[int, int]) -> list[ErrorCode]:
        """OffsetCommit v7 in this member's generation: the partitions' error codes."""
        answer = self.call(OFFSET_COMMIT, 7, {
            "group_id": self.group, "generation_id_or_member_epoch": self.generation, "member_id": self.member_id,
            "topics": [{"name": topic, "partitions": [{"partition_index": p, "committed_offset": o}
                                                      for p, o in offsets.items()]}]})
        return [ErrorCode(p.error_code) for t in answer.topics for p in t.partitions]
