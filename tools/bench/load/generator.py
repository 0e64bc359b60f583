"""The load generator of `bench load`: many members over many connections, in a process of
its own, so that it never shares an interpreter (or a core) with the server it measures.

It reads a plan (JSON) on stdin and prints its findings (JSON) on stdout. One thread, one
epoll loop, plain non-blocking sockets: nothing between the generator and the kernel that
the server does not also have to pay for. Members join for real (JoinGroup, SyncGroup,
with the coordinator's server-side assignment), then heartbeat and commit in one of two modes:

- as fast as possible: every connection keeps `pipeline` heartbeats in flight. Their frames
  are encoded once; answers are checked a read at a time against the answers a healthy
  server gives (a mismatch is decoded one by one and counted);
- on schedule: each member's heartbeats (and commits) fall due at fixed times, spread evenly;
  a connection has at most `pipeline` requests in flight and the rest wait their turn, and a
  request's latency counts from when it was due, not when it went out, so a stalled server
  is charged for the wait it causes (no coordinated omission).

After the measured window the generator stops sending, waits for every answer, then checks
what a member would notice: a heartbeat of every member answered NONE (still in its
generation), and OffsetFetch returns every commit acknowledged to it.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import resource
import select
import socket
import struct
import subprocess
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from protocol import RequestHeader, decode_response, encode_request, encode_response, error_name
from protocol.consumer import decode_assignment, encode_subscription
from protocol.messages import build
from protocol.schemas import (CONSUMER_GROUP_HEARTBEAT, HEARTBEAT, JOIN_GROUP, METADATA, OFFSET_COMMIT, OFFSET_FETCH,
                              SUBSCRIPTION, SYNC_GROUP)

from . import profile

VERSIONS = {HEARTBEAT.key: 4, JOIN_GROUP.key: 9, SYNC_GROUP.key: 5, OFFSET_COMMIT.key: 8, OFFSET_FETCH.key: 8,
            METADATA.key: 12, CONSUMER_GROUP_HEARTBEAT.key: 1}
CLIENT_ID = "groupkeeper-bench"
ADDRESSES_PER_SOURCE = 20_000  # connections from one loopback source address (ephemeral ports)
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux's value
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

# what a client retries while joining (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
# COORDINATOR_LOAD_IN_PROGRESS, REBALANCE_IN_PROGRESS), and what makes it join afresh
RETRIABLE = {15, 16, 14, 27}
REJOIN = {25, 22}  # UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION
RETRY_BACKOFF = 0.1  # seconds
KEEP_ALIVE = 3.0  # seconds between a joined member's heartbeats while the others join (Kafka's default interval)


def _heartbeat_error(frame: bytes, at: int = 0) -> int:
    """The error code of the Heartbeat v4 answer at `at` (without its size prefix): after
    the correlation id, the header's tagged fields and the throttle time."""
    return _I16.unpack_from(frame, at + 9)[0]


@dataclass
class Plan:
    host: str
    port: int
    groups: int
    members: int
    connections: int
    topic: str
    pipeline: int = 1
    rate: float = 0.0  # requests/s offered in all; 0: as fast as possible
    duration: float = 5.0
    warmup: float = 1.0
    commit_interval: float = 0.0  # seconds between a member's commits; 0: none
    # what the as-fast-as-possible mode sends: heartbeat | commit | metadata | consumer; consumer:
    # the members are consumer-protocol ones (KIP-848) whose ConsumerGroupHeartbeats are counted
    # as consumer_heartbeat, in either mode
    requests: str = "heartbeat"
    partitions_per_member: int = 10
    join: bool = True  # False (a reference server): members take made-up ids and partitions
    rejoin: bool = False  # after the window, every member rejoins at once: the full-rebalance time
    verify: bool = True
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 60_000
    server_pid: int = 0  # whose CPU and RSS to read from /proc during the window
    profile: str = ""  # where py-spy's samples of the server during the window go; "": not sampled


@dataclass
class Member:
    index: int
    group: str
    member_id: str = ""
    generation: int = -1
    partitions: list[int] = field(default_factory=list)
    heartbeat: bytes = b""  # its Heartbeat frame (a consumer's steady ConsumerGroupHeartbeat), correlation id 0
    assignment: list | None = None  # a consumer's: what it was last given, to report (topic id, partitions)
    interval_ms: int = 0  # a consumer's: the heartbeat interval its coordinator answers
    commits: int = 0  # commits sent: the next commit's offsets
    acked: dict[int, int] = field(default_factory=dict)  # partition -> offset acknowledged


class LoadConnection:
    __slots__ = (
        "correlation",
        "fast_acked",
        "fast_batches",
        "fast_expected",
        "fast_frames",
        "fast_offsets",
        "fast_period",
        "fast_sent",
        "fast_size",
        "inbuf",
        "members",
        "out",
        "queued",
        "sock",
        "waiting",
        "want_write",
    )

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.members: list[Member] = []
        self.out = bytearray()
        self.inbuf = bytearray()
        self.waiting: deque = deque()  # (due time, on_answer) per request in flight, in order
        self.queued: deque = deque()  # (due time, commit?, member, again?): due but over the pipeline
        self.correlation = 0
        self.want_write = False


class Stats:
    """Answers per API inside the measured window: count, errors by name, latencies."""

    def __init__(self):
        self.count: Counter[str] = Counter()
        self.errors: Counter[tuple[str, str]] = Counter()
        self.latency: dict[str, list[float]] = {}
        self.weight: dict[str, list[int]] = {}

    def answer(self, api: str, latency: float, errors: dict[str, int] | None = None, n: int = 1) -> None:
        self.count[api] += n
        self.latency.setdefault(api, []).append(latency)
        self.weight.setdefault(api, []).append(n)
        for name, k in (errors or {}).items():
            self.errors[(api, name)] += k

    def summary(self, seconds: float) -> dict:
        out = {}
        for api, n in self.count.items():
            out[api] = {"answers": n, "per_second": n / seconds,
                        "errors": {name: k for (a, name), k in self.errors.items() if a == api},
                        **_percentiles(self.latency[api], self.weight[api])}
        return out


def _percentiles(values: list[float], weights: list[int]) -> dict:
    pairs = sorted(zip(values, weights))
    total = sum(weights)
    out, seen, i = {}, 0, 0
    for name, q in (("p50_ms", 0.5), ("p99_ms", 0.99), ("p999_ms", 0.999)):
        while i < len(pairs) and seen + pairs[i][1] < q * total:
            seen += pairs[i][1]
            i += 1
        out[name] = round(pairs[min(i, len(pairs) - 1)][0] * 1000, 3) if pairs else None
    out["max_ms"] = round(pairs[-1][0] * 1000, 3) if pairs else None
    return out


class LoadError(Exception):
    """The load cannot go on (the server went away, the join did not complete)."""


class Generator:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.epoll = select.epoll()
        self.connections: dict[int, LoadConnection] = {}
        self.members = [Member(j, f"load-{j % plan.groups}") for j in range(plan.members)]
        self.stats = Stats()
        self.measuring = False
        self.sending = True
        self.server = ServerReading(plan.server_pid)
        self.join_retries: Counter[str] = Counter()  # retriable errors met while joining, by name
        self.profiler: subprocess.Popen | None = None

    # -- connections --------------------------------------------------------------------

    def connect(self) -> None:
        """One socket per connection; members spread over them, a group's members on
        different connections where there are enough (as separate consumers would be)."""
        conns = []
        for i in range(self.plan.connections):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # the port is chosen at connect(), per destination: a bind(0) alone takes a port for
            # every destination, and the ports a load before left in TIME_WAIT ran out once
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((f"127.0.0.{2 + i // ADDRESSES_PER_SOURCE}", 0))
            sock.connect((self.plan.host, self.plan.port))
            sock.setblocking(False)
            conn = LoadConnection(sock)
            self.connections[sock.fileno()] = conn
            self.epoll.register(sock.fileno(), select.EPOLLIN)
            conns.append(conn)
        for member in self.members:
            conns[member.index % len(conns)].members.append(member)

    def send(self, conn: LoadConnection, data: bytes) -> None:
        if not conn.out:
            try:
                sent = conn.sock.send(data)
            except BlockingIOError:
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        conn.out += data
        if not conn.want_write:
            conn.want_write = True
            self.epoll.modify(conn.sock.fileno(), select.EPOLLIN | select.EPOLLOUT)

    def _flush(self, conn: LoadConnection) -> None:
        sent = conn.sock.send(conn.out)
        del conn.out[:sent]
        if not conn.out:
            conn.want_write = False
            self.epoll.modify(conn.sock.fileno(), select.EPOLLIN)

    def request(self, conn: LoadConnection, api_key: int, body: dict, due: float, on_answer) -> None:
        api = {HEARTBEAT.key: HEARTBEAT, JOIN_GROUP.key: JOIN_GROUP, SYNC_GROUP.key: SYNC_GROUP,
               OFFSET_COMMIT.key: OFFSET_COMMIT, OFFSET_FETCH.key: OFFSET_FETCH}[api_key]
        conn.correlation += 1
        frame = encode_request(RequestHeader(api_key, VERSIONS[api_key], conn.correlation, CLIENT_ID),
                               build(api.request.struct, body))
        self.send_frame(conn, frame, due, on_answer)

    def send_frame(self, conn: LoadConnection, frame: bytes, due: float, on_answer) -> None:
        conn.waiting.append((due, on_answer))
        self.send(conn, frame)

    def poll(self, timeout: float, read=None) -> None:
        """Wait up to `timeout` for answers and `read` them (by default: hand each to its
        request's `on_answer`)."""
        read = read or self._read
        for fd, events in self.epoll.poll(timeout):
            conn = self.connections[fd]
            if events & select.EPOLLOUT:
                self._flush(conn)
            if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                read(conn)

    def _answered(self, busy, what: str, read=None) -> None:
        """After the window: wait until no connection is `busy`, for 30 s at most."""
        deadline = time.perf_counter() + 30
        while any(busy(c) for c in self.connections.values()):
            if time.perf_counter() > deadline:
                raise LoadError(f"{what} still unanswered 30 s after the window")
            self.poll(0.05, read)

    @staticmethod
    def _receive(conn: LoadConnection) -> bytes | None:
        """What the socket has now (None: nothing yet); LoadError if the server closed it."""
        try:
            data = conn.sock.recv(1 << 20)
        except BlockingIOError:
            return None
        except ConnectionError as exc:
            raise LoadError(f"the server closed a connection: {exc}") from None
        if not data:
            raise LoadError("the server closed a connection")
        return data

    def _read(self, conn: LoadConnection) -> None:
        data = self._receive(conn)
        if data is None:
            return
        buf = conn.inbuf
        buf += data
        now = time.perf_counter()
        pos = 0
        while len(buf) - pos >= 4:
            size, = _I32.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            frame = bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            due, on_answer = conn.waiting.popleft()
            on_answer(conn, frame, due, now)
        del buf[:pos]

    # -- joining ------------------------------------------------------------------------

    def join_all(self, deadline: float) -> float:
        """Every member joins and syncs; returns seconds from the last JoinGroup sent to the
        last SyncGroup answered. Members already in a generation rejoin with their ids and,
        as a consumer's rejoin does, the partitions they own in their subscription: a full
        rebalance (a follower rejoining with its subscription unchanged is answered at once
        with the generation it has, and would leave the rebalance waiting for it)."""
        pending = set(range(len(self.members)))
        later: deque = deque()  # (when, member, connection): joins to send again
        beats: deque = deque()  # (when, member, connection): members in a generation, due to heartbeat
        retries: Counter[str] = Counter()
        start = time.perf_counter()
        last = [start, start]

        def joined(member: Member, conn: LoadConnection):
            def on_join(conn, frame, due, now):
                _, answer = decode_response(JOIN_GROUP.key, VERSIONS[JOIN_GROUP.key], frame)
                if answer.error_code == 79:  # MEMBER_ID_REQUIRED: again, with the id given
                    member.member_id = answer.member_id
                    send_join(member, conn)
                    return
                if answer.error_code in RETRIABLE or answer.error_code in REJOIN:  # as a client: again
                    retries[error_name(answer.error_code)] += 1
                    if answer.error_code == 25:
                        member.member_id = ""
                    later.append((now + RETRY_BACKOFF, member, conn))
                    return
                if answer.error_code:
                    raise LoadError(f"JoinGroup of {member.group}: {error_name(answer.error_code)}")
                member.member_id, member.generation = answer.member_id, answer.generation_id
                self.request(conn, SYNC_GROUP.key, {
                    "group_id": member.group, "generation_id": member.generation, "member_id": member.member_id,
                    "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                    "assignments": []}, now, synced(member))
            return on_join

        def synced(member: Member):
            def on_sync(conn, frame, due, now):
                _, answer = decode_response(SYNC_GROUP.key, VERSIONS[SYNC_GROUP.key], frame)
                if answer.error_code in RETRIABLE or answer.error_code in REJOIN:
                    retries[error_name(answer.error_code)] += 1
                    if answer.error_code == 25:  # UNKNOWN_MEMBER_ID: a new member
                        member.member_id = ""
                    later.append((now + RETRY_BACKOFF, member, conn))
                    return
                if answer.error_code:
                    raise LoadError(f"SyncGroup of {member.group}: {error_name(answer.error_code)}")
                _, assignment = decode_assignment(bytes(answer.assignment))
                member.partitions = sorted(p for tp in assignment.assigned_partitions
                                           if tp.topic == self.plan.topic for p in tp.partitions)
                pending.discard(member.index)
                beats.append((now + KEEP_ALIVE, member, conn))
                last[1] = now
            return on_sync

        def kept_alive(member: Member):
            def on_heartbeat(conn, frame, due, now):
                code = _heartbeat_error(frame)
                if not pending:  # everyone joined meanwhile: the window's heartbeats take over
                    return
                if code in REJOIN or code == 27:  # REBALANCE_IN_PROGRESS: rejoin, as a client does
                    retries[f"heartbeat {error_name(code)}"] += 1
                    if code == 25:
                        member.member_id = ""
                    pending.add(member.index)
                    send_join(member, conn)
                elif member.index not in pending:
                    beats.append((now + KEEP_ALIVE, member, conn))
            return on_heartbeat

        def send_join(member: Member, conn: LoadConnection):
            last[0] = time.perf_counter()
            self.request(conn, JOIN_GROUP.key, {
                "group_id": member.group, "session_timeout_ms": self.plan.session_timeout_ms,
                "rebalance_timeout_ms": self.plan.rebalance_timeout_ms, "member_id": member.member_id,
                "group_instance_id": None, "protocol_type": "consumer", "reason": None,
                "protocols": [{"name": "range", "metadata": subscriptions[member.index]}]},
                last[0], joined(member, conn))

        subscriptions = [encode_subscription(build(SUBSCRIPTION.struct, {
            "topics": [self.plan.topic],
            "owned_partitions": [{"topic": self.plan.topic, "partitions": m.partitions}] if m.partitions else []}), 1)
            for m in self.members]
        for conn in self.connections.values():
            for member in conn.members:
                send_join(member, conn)
        while pending:
            if time.perf_counter() > deadline:
                raise LoadError(f"{len(pending)} of {len(self.members)} members had not joined in time")
            self.poll(0.05)
            now = time.perf_counter()
            while later and later[0][0] <= now:
                _, member, conn = later.popleft()
                send_join(member, conn)
            while beats and beats[0][0] <= now:  # the joined keep their sessions while others join
                _, member, conn = beats.popleft()
                if member.index not in pending:
                    self.request(conn, HEARTBEAT.key, {
                        "group_id": member.group, "generation_id": member.generation,
                        "member_id": member.member_id, "group_instance_id": None}, now, kept_alive(member))
        self._answered(lambda c: c.waiting, "heartbeats of joined members")
        self.join_retries.update(retries)
        return last[1] - last[0]

    def consumer_join_all(self, deadline: float) -> float:
        """Every member joins as a consumer-protocol member (ConsumerGroupHeartbeat, epoch 0,
        its own id, subscribed to the topic) and reconciles as a client does, reporting what
        it was given in its next heartbeat; in rounds (every member once, all answers in),
        until a round in which nobody is given anything and each group's members share one
        epoch: then every member is steady. Seconds from the first join to that round's end."""
        start = time.perf_counter()
        retries: Counter[str] = Counter()
        api = CONSUMER_GROUP_HEARTBEAT
        for member in self.members:  # fixed length: every steady answer the same size
            member.member_id = f"{CLIENT_ID}-{member.index:08d}-{'0' * 13}"
            member.generation = 0

        def answered(member: Member, changed: list):
            def on_answer(conn, frame, due, now):
                _, answer = decode_response(api.key, VERSIONS[api.key], frame)
                if answer.error_code in RETRIABLE:
                    retries[error_name(answer.error_code)] += 1
                    changed.append(member)
                    return
                if answer.error_code in (25, 110):  # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH: join again
                    retries[error_name(answer.error_code)] += 1
                    member.generation, member.assignment = 0, None
                    changed.append(member)
                    return
                if answer.error_code:
                    raise LoadError(f"ConsumerGroupHeartbeat of {member.group}: {error_name(answer.error_code)}")
                member.generation, member.interval_ms = answer.member_epoch, answer.heartbeat_interval_ms
                if answer.assignment is not None:
                    member.assignment = [(t.topic_id, sorted(t.partitions)) for t in answer.assignment.topic_partitions]
                    member.partitions = sorted(p for _, ps in member.assignment for p in ps)
                    changed.append(member)
            return on_answer

        reporting: set[int] = set()  # members given something since their last report
        while True:
            if time.perf_counter() > deadline:
                raise LoadError(f"consumer-protocol members not steady after {deadline - start:.0f} s")
            changed: list[Member] = []
            for conn in self.connections.values():
                for member in conn.members:
                    body = {"group_id": member.group, "member_id": member.member_id,
                            "member_epoch": member.generation, "instance_id": None, "rack_id": None,
                            "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": None}
                    if member.generation == 0:
                        body.update(rebalance_timeout_ms=self.plan.rebalance_timeout_ms,
                                    subscribed_topic_names=[self.plan.topic], topic_partitions=[])
                    elif member.index in reporting:
                        body["topic_partitions"] = [{"topic_id": t, "partitions": ps}
                                                    for t, ps in member.assignment or []]
                    conn.correlation += 1
                    self.send_frame(conn, encode_request(RequestHeader(api.key, VERSIONS[api.key], conn.correlation,
                                                                       CLIENT_ID), build(api.request.struct, body)),
                                    0, answered(member, changed))
            self._answered(lambda c: c.waiting, "consumer-protocol joins")
            reporting = {m.index for m in changed}
            epochs: dict[str, set[int]] = {}
            for member in self.members:
                epochs.setdefault(member.group, set()).add(member.generation)
            if not changed and all(len(e) == 1 and 0 not in e for e in epochs.values()):
                break
            self.poll(0.02)  # a breath between rounds, as members' intervals would give
        self.join_retries.update(retries)
        return time.perf_counter() - start

    def pretend_joined(self) -> None:
        """Against a server that keeps no groups: ids and partitions as a join would give."""
        for member in self.members:
            member.member_id = f"{CLIENT_ID}-{member.index:08d}-{'0' * 27}"  # a client's id's length
            member.generation = 1
            first = (member.index // self.plan.groups) * self.plan.partitions_per_member
            member.partitions = list(range(first, first + self.plan.partitions_per_member))

    def encode_heartbeats(self) -> None:
        if self.plan.requests == "consumer":  # the steady heartbeat: every field null but id and epoch
            api = CONSUMER_GROUP_HEARTBEAT
            for member in self.members:
                member.heartbeat = encode_request(
                    RequestHeader(api.key, VERSIONS[api.key], 0, CLIENT_ID),
                    build(api.request.struct, {
                        "group_id": member.group, "member_id": member.member_id, "member_epoch": member.generation,
                        "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1,
                        "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                        "topic_partitions": None}))
            return
        for member in self.members:
            member.heartbeat = encode_request(
                RequestHeader(HEARTBEAT.key, VERSIONS[HEARTBEAT.key], 0, CLIENT_ID),
                build(HEARTBEAT.request.struct, {"group_id": member.group, "generation_id": member.generation,
                                                 "member_id": member.member_id, "group_instance_id": None}))

    # -- as fast as possible ------------------------------------------------------------

    def pipelined_heartbeats(self, start: float, end: float) -> None:
        """Each connection keeps `pipeline` heartbeats in flight, cycling over its members.
        A read's answers are checked at once against a healthy server's bytes; latency
        counts from when the oldest of them went out."""
        depth = self.plan.pipeline
        for conn in self.connections.values():
            frames, expected = [], []
            for member in conn.members:
                frame = bytearray(member.heartbeat)
                _I32.pack_into(frame, 8, member.index)
                frames.append(bytes(frame))
                expected.append(self._expected(member))
            conn.fast_size = len(expected[0])
            if any(len(e) != conn.fast_size for e in expected):
                raise LoadError("the members' answers differ in size")
            repeat = depth // len(frames) + 2
            conn.fast_frames = b"".join(frames) * repeat
            offsets, p = [], 0
            for frame in frames * repeat:
                offsets.append(p)
                p += len(frame)
            offsets.append(p)
            conn.fast_offsets = offsets
            conn.fast_expected = b"".join(expected) * repeat
            conn.fast_period = len(frames)
            conn.fast_sent = 0  # position (mod period) of the next heartbeat to send
            conn.fast_acked = 0  # ... and of the next answer expected
            conn.fast_batches = deque()  # (count, sent at) of the heartbeats in flight
            self._fast_send(conn, depth, time.perf_counter())
        now = time.perf_counter()
        while now < end:
            self._window(now, start)
            self.poll(0.1, self._fast_read)
            now = time.perf_counter()
        self._window(now, start, closing=True)
        self.sending = False
        self._answered(lambda c: c.fast_batches, "heartbeats", self._fast_read)

    def _expected(self, member: Member) -> bytes:
        """A healthy server's answer to the member's heartbeat (correlation id: its index)."""
        if self.plan.requests != "consumer":
            return _I32.pack(12) + _I32.pack(member.index) + b"\x00" + bytes(4) + bytes(2) + b"\x00"
        api = CONSUMER_GROUP_HEARTBEAT
        return encode_response(RequestHeader(api.key, VERSIONS[api.key], member.index, None), build(
            api.response.struct, {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                                  "member_id": member.member_id, "member_epoch": member.generation,
                                  "heartbeat_interval_ms": member.interval_ms, "assignment": None}))

    @property
    def _api(self) -> str:
        """The name the load's heartbeats are counted under."""
        return "consumer_heartbeat" if self.plan.requests == "consumer" else "heartbeat"

    def _fast_send(self, conn: LoadConnection, n: int, now: float) -> None:
        s, offsets = conn.fast_sent, conn.fast_offsets
        self.send(conn, conn.fast_frames[offsets[s]:offsets[s + n]])
        conn.fast_sent = (s + n) % conn.fast_period
        conn.fast_batches.append([n, now])

    def _fast_read(self, conn: LoadConnection) -> None:
        data = self._receive(conn)
        if data is None:
            return
        if conn.inbuf:
            data = bytes(conn.inbuf) + data
            conn.inbuf.clear()
        size = conn.fast_size
        n, rest = divmod(len(data), size)
        a = conn.fast_acked
        good = data[:n * size] == conn.fast_expected[a * size:(a + n) * size]
        if not good:  # answers of other sizes among them (an error's, with its message): frame by frame
            n, p = 0, 0
            while len(data) - p >= 4 and len(data) - p - 4 >= _I32.unpack_from(data, p)[0]:
                p += 4 + _I32.unpack_from(data, p)[0]
                n += 1
            rest = len(data) - p
        if rest:
            conn.inbuf += data[len(data) - rest:]
        if not n:
            return
        now = time.perf_counter()
        conn.fast_acked = (a + n) % conn.fast_period
        batches, left, oldest = conn.fast_batches, n, conn.fast_batches[0][1]
        while left:
            if batches[0][0] <= left:
                left -= batches.popleft()[0]
            else:
                batches[0][0] -= left
                left = 0
        if self.measuring:
            errors = None if good else self._heartbeat_errors(data[:len(data) - rest], size)
            self.stats.answer(self._api, now - oldest, errors, n)
        if self.sending:
            self._fast_send(conn, n, now)

    @staticmethod
    def _heartbeat_errors(data: bytes, expected_size: int) -> dict[str, int]:
        """By name, the errors of the answers in `data` (whole frames); one of a healthy
        answer's size and error 0 that is not the expected bytes is "answer differs"."""
        errors: Counter[str] = Counter()
        p = 0
        while p < len(data):
            size, = _I32.unpack_from(data, p)
            code = _heartbeat_error(data, p + 4) if size >= 11 else None  # the same place in both heartbeats
            if code is None:
                errors["malformed answer"] += 1
            elif code:
                errors[error_name(code)] += 1
            elif size != expected_size - 4:
                errors["answer differs"] += 1
            p += 4 + size
        return errors

    # -- Metadata, as fast as possible ---------------------------------------------------

    def pipelined_metadata(self, start: float, end: float) -> dict:
        """Each connection keeps `pipeline` Metadata requests for every topic in flight (v12,
        as librdkafka asks), each answer checked against the first: the same bytes but for
        its correlation id, since nothing changes meanwhile. Returns what the answer holds."""
        version = VERSIONS[METADATA.key]
        base = encode_request(RequestHeader(METADATA.key, version, 0, CLIENT_ID), build(METADATA.request.struct, {
            "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))
        first: list[bytes] = []

        def ask(conn: LoadConnection, now: float) -> None:
            conn.correlation += 1
            self.send_frame(conn, base[:8] + _I32.pack(conn.correlation) + base[12:], now, answered(conn.correlation))

        def answered(correlation: int):
            def on_answer(conn: LoadConnection, frame: bytes, sent: float, now: float) -> None:
                if not first:
                    first.append(frame[4:])
                good = _I32.unpack_from(frame)[0] == correlation and frame[4:] == first[0]
                if self.measuring:
                    self.stats.answer("metadata", now - sent, None if good else {"answer differs": 1})
                if self.sending:
                    ask(conn, now)
            return on_answer

        for conn in self.connections.values():
            for _ in range(self.plan.pipeline):
                ask(conn, time.perf_counter())
        now = time.perf_counter()
        while now < end:
            self._window(now, start)
            self.poll(0.1)
            now = time.perf_counter()
        self._window(now, start, closing=True)
        self.sending = False
        self._answered(lambda c: c.waiting, "metadata requests")
        _, answer = decode_response(METADATA.key, version, bytes(4) + first[0])
        found = {"version": version, "bytes": 8 + len(first[0]), "brokers": len(answer.brokers),
                 "topics": len(answer.topics), "partitions": sum(len(t.partitions) for t in answer.topics),
                 "leaderless": sum(p.leader_id < 0 for t in answer.topics for p in t.partitions)}
        # what two coordinators of the same cluster answer alike: all but their own nodes (their ports)
        answer.brokers = [b for b in answer.brokers if b.node_id < 1_000_000_000]
        same = encode_response(RequestHeader(METADATA.key, version, 0, None), answer)
        return {**found, "sha256": hashlib.sha256(same).hexdigest()}

    # -- on schedule (and pipelined commits) ---------------------------------------------

    def scheduled(self, start: float, end: float) -> None:
        """Heartbeats and commits due at fixed times (or, with rate 0 and commits, as fast
        as the pipeline allows); latency from the time each was due."""
        plan, timers = self.plan, []
        owner = {m.index: conn for conn in self.connections.values() for m in conn.members}
        fast_commits = plan.rate == 0 and plan.requests == "commit"
        if plan.rate > 0:
            interval = len(self.members) / plan.rate
            for m in self.members:
                timers.append((start - plan.warmup + interval * m.index / len(self.members), False, m.index, interval))
        elif not fast_commits and not plan.commit_interval:
            raise LoadError("a load on schedule needs a rate, or commits")
        if plan.commit_interval and not fast_commits:
            for m in self.members:
                timers.append((start - plan.warmup + plan.commit_interval * m.index / len(self.members), True,
                               m.index, plan.commit_interval))
        heapq.heapify(timers)
        if fast_commits:
            for conn in self.connections.values():
                for k in range(plan.pipeline):
                    self._due(conn, (time.perf_counter(), True, conn.members[k % len(conn.members)], True))
        now = time.perf_counter()
        while now < end:
            self._window(now, start)
            while timers and timers[0][0] <= now:
                due, commit, index, every = heapq.heappop(timers)
                heapq.heappush(timers, (due + every, commit, index, every))
                self._due(owner[index], (due, commit, self.members[index], False))
            wait = min(timers[0][0] - now, 0.05) if timers else 0.05
            self.poll(max(wait, 0))
            now = time.perf_counter()
        self._window(now, start, closing=True)
        self.sending = False
        self._answered(lambda c: c.waiting or c.queued, "requests")

    def _due(self, conn: LoadConnection, item) -> None:
        """Send a request that fell due, or queue it behind the connection's pipeline."""
        if len(conn.waiting) >= self.plan.pipeline:
            conn.queued.append(item)
            return
        due, commit, member, again = item
        if not commit:
            self.send_frame(conn, member.heartbeat, due, self._heartbeat_answer)
            return
        member.commits += 1
        offset = member.commits
        parts = member.partitions[:self.plan.partitions_per_member]
        self.request(conn, OFFSET_COMMIT.key, {
            "group_id": member.group, "generation_id_or_member_epoch": member.generation,
            "member_id": member.member_id, "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": self.plan.topic, "partitions": [
                {"partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""} for p in parts]}]}, due, self._commit_answer(member, offset, again))

    def _next(self, conn: LoadConnection) -> None:
        if conn.queued and self.sending:
            self._due(conn, conn.queued.popleft())
        elif conn.queued:
            conn.queued.clear()

    def _heartbeat_answer(self, conn: LoadConnection, frame: bytes, due: float, now: float) -> None:
        if self.measuring:
            code = _heartbeat_error(frame)  # in both kinds of heartbeat's answers, the same place
            self.stats.answer(self._api, now - due, {error_name(code): 1} if code else None)
        self._next(conn)

    def _commit_answer(self, member: Member, offset: int, again: bool):
        def on_answer(conn: LoadConnection, frame: bytes, due: float, now: float) -> None:
            _, answer = decode_response(OFFSET_COMMIT.key, VERSIONS[OFFSET_COMMIT.key], frame)
            errors = Counter(error_name(p.error_code) for t in answer.topics for p in t.partitions if p.error_code)
            if not errors:  # answers on a connection come in order: this offset is the newest
                for t in answer.topics:
                    for p in t.partitions:
                        member.acked[p.partition_index] = offset
            if self.measuring:
                self.stats.answer("offset_commit", now - due, dict(errors))
            if again and self.sending:
                self._due(conn, (now, True, member, True))
            else:
                self._next(conn)
        return on_answer

    def _window(self, now: float, start: float, closing: bool = False) -> None:
        """Open the measured window once `start` has passed, close it at the end: the
        server's CPU time is read at both ends."""
        if closing:
            if self.measuring:
                self.measuring = False
                self.server.close()
        elif not self.measuring and now >= start and self.sending:
            self.measuring = True
            self.server.open()
            if self.plan.profile and self.plan.server_pid:
                self.profiler = profile.start(self.plan.server_pid, self.plan.duration, Path(self.plan.profile))

    # -- afterwards ---------------------------------------------------------------------

    def verify(self, deadline: float) -> dict:
        """A heartbeat of every member, and OffsetFetch of every group's acknowledged commits
        (again after what a client retries: the fetch must find them, not just answer)."""
        out: dict = {"not_in_generation": Counter(), "commits_checked": 0, "commits_lost": 0,
                     "fetch_retries": Counter(), "fetch_errors": Counter()}
        pending = [0]
        later: deque = deque()  # (when, group): fetches to send again
        groups: dict[str, dict[int, int]] = {}
        for member in self.members:
            for p, offset in member.acked.items():
                groups.setdefault(member.group, {})[p] = max(groups.get(member.group, {}).get(p, 0), offset)

        def on_heartbeat(conn, frame, due, now):
            pending[0] -= 1
            code = _heartbeat_error(frame)
            if code:
                out["not_in_generation"][error_name(code)] += 1

        def on_fetch(group):
            def handle(conn, frame, due, now):
                pending[0] -= 1
                _, answer = decode_response(OFFSET_FETCH.key, VERSIONS[OFFSET_FETCH.key], frame)
                error = next((g.error_code for g in answer.groups if g.error_code), 0)
                if error in RETRIABLE:
                    out["fetch_retries"][error_name(error)] += 1
                    later.append((now + RETRY_BACKOFF, group))
                    return
                if error:
                    out["fetch_errors"][error_name(error)] += 1
                expected = groups[group]
                fetched = {p.partition_index: p.committed_offset for g in answer.groups for t in g.topics
                           for p in t.partitions if not p.error_code}
                out["commits_checked"] += len(expected)
                # an offset over the acknowledged one is a later commit that landed: only
                # an older one, or none, loses an acknowledged commit
                out["commits_lost"] += sum(1 for p, o in expected.items() if fetched.get(p, -1) < o)
            return handle

        def fetch(group: str) -> None:
            pending[0] += 1
            self.request(by_group[group], OFFSET_FETCH.key, {"groups": [{"group_id": group, "member_id": None,
                         "member_epoch": -1, "topics": [{"name": self.plan.topic,
                                                         "partition_indexes": sorted(groups[group])}]}],
                         "require_stable": True}, 0, on_fetch(group))

        by_group: dict[str, LoadConnection] = {}
        for conn in self.connections.values():
            for member in conn.members:
                pending[0] += 1
                self.send_frame(conn, member.heartbeat, 0, on_heartbeat)
                by_group.setdefault(member.group, conn)
        for group in groups:
            fetch(group)
        while pending[0] or later:
            if time.perf_counter() > deadline:
                raise LoadError("verification answers did not all come in time")
            self.poll(0.05)
            now = time.perf_counter()
            while later and later[0][0] <= now:
                fetch(later.popleft()[1])
        out["not_in_generation"] = dict(out["not_in_generation"])
        out["fetch_retries"] = dict(out["fetch_retries"])
        out["fetch_errors"] = dict(out["fetch_errors"])
        return out


class ServerReading:
    """The server's CPU time over the window and its resident memory, from /proc (pid 0:
    not known, nothing read)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.cpu: list[tuple[float, float]] = []  # user, system
        self.times: list[float] = []
        self.rss = self.peak_rss = None

    def open(self) -> None:
        self._read_cpu()

    def close(self) -> None:
        self._read_cpu()
        try:
            status = dict(line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines())
        except (OSError, ValueError):
            return
        self.rss = int(status["VmRSS"].split()[0]) * 1024
        self.peak_rss = int(status["VmHWM"].split()[0]) * 1024

    def _read_cpu(self) -> None:
        if not self.pid:
            return
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return
        tick = os.sysconf("SC_CLK_TCK")
        self.cpu.append((int(fields[11]) / tick, int(fields[12]) / tick))
        self.times.append(time.perf_counter())

    def reading(self) -> dict | None:
        if len(self.cpu) != 2:
            return None
        seconds = self.times[1] - self.times[0]
        user, system = ((after - before) / seconds for before, after in zip(*self.cpu))
        return {"cpu": round(user + system, 3), "cpu_user": round(user, 3), "cpu_system": round(system, 3),
                "rss_mb": round(self.rss / 2**20, 1) if self.rss else None,
                "peak_rss_mb": round(self.peak_rss / 2**20, 1) if self.peak_rss else None}


def run(plan: Plan) -> dict:
    gen = Generator(plan)
    result: dict = {"plan": plan.__dict__}
    gen.connect()
    if plan.join and plan.requests == "consumer":
        result["join_s"] = round(gen.consumer_join_all(time.perf_counter() + 120), 3)
        result["epochs"] = dict(Counter(m.generation for m in gen.members))
        result["join_retries"] = dict(gen.join_retries)
    elif plan.join:
        result["join_s"] = round(gen.join_all(time.perf_counter() + 120), 3)
        result["generations"] = dict(Counter(m.generation for m in gen.members))
        result["join_retries"] = dict(gen.join_retries)
    else:
        gen.pretend_joined()
    gen.encode_heartbeats()
    start = time.perf_counter() + plan.warmup
    end = start + plan.duration
    mine = resource.getrusage(resource.RUSAGE_SELF)
    if plan.requests == "metadata":
        result["metadata"] = gen.pipelined_metadata(start, end)
    elif plan.rate == 0 and plan.requests in ("heartbeat", "consumer") and not plan.commit_interval:
        gen.pipelined_heartbeats(start, end)
    else:
        gen.scheduled(start, end)
    used = resource.getrusage(resource.RUSAGE_SELF)
    result["window_s"] = plan.duration
    result["apis"] = gen.stats.summary(plan.duration)
    result["server"] = gen.server.reading()
    result["generator_cpu"] = round((used.ru_utime + used.ru_stime - mine.ru_utime - mine.ru_stime)
                                    / (time.perf_counter() - start + plan.warmup), 3)
    if gen.profiler is not None:
        gen.profiler.wait(60)
        result["profile"] = profile.summary(Path(plan.profile)) if Path(plan.profile).exists() else None
    if plan.verify and plan.join:
        result["verify"] = gen.verify(time.perf_counter() + 60)
    if plan.rejoin and plan.join and plan.requests != "consumer":
        result["rejoin_s"] = round(gen.join_all(time.perf_counter() + 120), 3)
        result["generations_after_rejoin"] = dict(Counter(m.generation for m in gen.members))
    return result


def main() -> None:
    plan = Plan(**json.loads(sys.stdin.read()))
    try:
        result = run(plan)
    except LoadError as exc:
        result = {"error": str(exc)}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
