"""Groups larger than one ZooKeeper znode, against a real ZooKeeper and `groupkeeper run`
processes: a 10,000-member group settles in one generation with every partition assigned once,
its record is stored in chunks and a restarted coordinator serves it from them; a group that
cannot be stored turns the members that do not fit away with GROUP_MAX_SIZE_REACHED, logs and
counts it, and stops rebalancing.

Neither test counts on when each JoinGroup arrives. A new group's first generation closes
group_initial_rebalance_delay_ms after the last join so far, so under CPU load it may close
before every member has joined; the members that come later start another rebalance, which
completes once every known member has rejoined (or the rebalance timeout passes), as in
Kafka's classic protocol. The members here do what clients do: rejoin when a heartbeat or a
SyncGroup answers REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION, as a new member when their id
is unknown; ask again a moment later when the coordinator cannot answer now (an instance
whose ZooKeeper lease lapsed says COORDINATOR_NOT_AVAILABLE). The tests wait, with deadlines,
until the group has settled, in whichever generation that is. So that every member of the
first test is in its first generation, they join with JoinGroup v4 (a generation does not
form while a member id given out is not back); in the second, a member holds the rebalance the
others start open until every one of them has joined or was turned away."""

from __future__ import annotations

import re
import selectors
import socket
import threading
import time
from collections import Counter, deque
from functools import partial

import pytest
from kazoo.client import KazooClient

from tools.kafka_admin import NodeConnection
from coordinator.cluster.placement import DEFAULT_GROUP_PARTITIONS, partition_for
from coordinator.store import layout
from coordinator.store.zkserver import ZooKeeperServer, free_port
from protocol import ErrorCode as E, FrameReader, RequestHeader, decode_response, encode_request, error_name
from protocol.consumer import decode_assignment, encode_subscription
from protocol.messages import ConsumerProtocolSubscription, build
from protocol.schemas import DESCRIBE_GROUPS, HEARTBEAT, JOIN_GROUP, SYNC_GROUP
from tests.support.coordinator_process import CoordinatorProcess

TOPIC, PARTITIONS = "orders", 200
SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=[TOPIC]), 0)
PER_CONNECTION = 100  # members sharing a connection: requests of one connection the server works on at once
HEARTBEAT_INTERVAL = 0.5  # seconds between a member's heartbeats while other members wait in a JoinGroup
JOINING, SYNCING, JOINED = "joining", "syncing", "joined"  # what a Fleet member waits for: none when joined
# The coordinator cannot answer now (busy, or its group-partition moving): clients ask again
# after retry.backoff.ms, a heartbeat at the next beat.
RETRIABLE = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS})
RETRY_BACKOFF = 0.1  # seconds


class Lane:
    """One connection: each request written when asked, each answer read when it arrives,
    without waiting for the others' (the server answers a connection's requests in order)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setblocking(False)
        self.out = bytearray()
        self.reader = FrameReader()
        self.asked: deque[tuple] = deque()  # (api, version, correlation id, tag), in the order asked
        self.correlation = 0

    def ask(self, api, version: int, body: dict, tag) -> None:
        self.correlation += 1
        self.out += encode_request(RequestHeader(api.key, version, self.correlation, "large-group"),
                                   build(api.request.struct, body))
        self.asked.append((api, version, self.correlation, tag))

    def write(self) -> None:
        if self.out:
            try:
                del self.out[:self.sock.send(self.out)]
            except BlockingIOError:
                pass

    def read(self) -> list[tuple]:
        """(tag, answer) of each answer arrived."""
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return []
        assert data, "the coordinator closed a connection"
        self.reader.feed(data)
        answers = []
        for frame in self.reader.frames():
            api, version, correlation, tag = self.asked.popleft()
            answered, answer = decode_response(api.key, version, frame)
            assert answered == correlation, "answered out of order"
            answers.append((tag, answer))
        return answers

    def close(self) -> None:
        self.sock.close()


class Fleet:
    """`n` members of one group, each doing what a client does (join; sync; heartbeat; rejoin
    when told to), `PER_CONNECTION` of them sharing a connection, all their requests in flight
    at once. JoinGroups go on connections of their own: one waiting for its generation holds
    up the answers behind it, and a member that has its generation must meanwhile sync and hear
    from its heartbeat that it is to rejoin, since the waiting rebalance waits for it. (An
    answer given at once can still wait behind a JoinGroup that waits on its connection, a
    COORDINATOR_NOT_AVAILABLE say; its member cannot act on it, and the rebalance timeout,
    60 s, completes the generation without it; it then joins again as a new member: slower,
    never wrong.)"""

    def __init__(self, port: int, group: str, n: int):
        self.group, self.n = group, n
        self.member_ids, self.generations = [""] * n, [-1] * n
        self.states = [JOINING] * n
        self.assignments: list[bytes] = [b""] * n
        self.beating: set[int] = set()  # members with a heartbeat in flight
        self.later: deque[tuple[float, partial]] = deque()  # (when, ask): requests asked again after the backoff
        self.connect(port)

    def connect(self, port: int) -> None:
        self.port = port
        self.joins = [Lane(port) for _ in range(0, self.n, PER_CONNECTION)]
        self.others = [Lane(port) for _ in range(0, self.n, PER_CONNECTION)]  # SyncGroup, Heartbeat
        self.selector = selectors.DefaultSelector()
        for lane in self.joins + self.others:
            self.selector.register(lane.sock, selectors.EVENT_READ, lane)

    def _in_generation(self, i: int) -> dict:
        return {"group_id": self.group, "generation_id": self.generations[i], "member_id": self.member_ids[i]}

    def _join(self, i: int) -> None:
        """JoinGroup v4, as clients since Kafka 2.2: a new member is first given its id
        (MEMBER_ID_REQUIRED), and a generation does not form while an id given is not back."""
        self.states[i] = JOINING
        self.joins[i // PER_CONNECTION].ask(JOIN_GROUP, 4, {
            "group_id": self.group, "session_timeout_ms": 120_000, "rebalance_timeout_ms": 60_000,
            "member_id": self.member_ids[i], "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}, (i, JOIN_GROUP, None))

    def _ask(self, api, i: int, into: dict | None = None) -> None:
        """SyncGroup or Heartbeat of member `i` in its generation; the answer goes to `into`
        if given, else the member acts on it."""
        body = {**self._in_generation(i), "assignments": []} if api is SYNC_GROUP else self._in_generation(i)
        if into is None:
            if api is SYNC_GROUP:
                self.states[i] = SYNCING
            else:
                self.beating.add(i)
        self.others[i // PER_CONNECTION].ask(api, 3, body, (i, api, into))

    def _answered(self, i: int, api, answer) -> None:
        """What a client does with an answer."""
        self.beating.discard(i)
        error = answer.error_code
        if error == E.MEMBER_ID_REQUIRED and api is JOIN_GROUP:
            self.member_ids[i] = answer.member_id
            self._join(i)
            return
        if error == E.NONE:
            if api is JOIN_GROUP:
                self.member_ids[i], self.generations[i] = answer.member_id, answer.generation_id
                self._ask(SYNC_GROUP, i)
            elif api is SYNC_GROUP:
                self.assignments[i], self.states[i] = answer.assignment, JOINED
            return
        if error in RETRIABLE:
            if api is not HEARTBEAT:  # JoinGroup again, as clients do after a SyncGroup too
                self.states[i] = JOINING
                self._again(partial(self._join, i))
            return
        if error == E.UNKNOWN_MEMBER_ID:
            self.member_ids[i] = ""  # no longer a member: join as a new one
        elif error not in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION):
            raise AssertionError(f"member {i}: {api.name} answered {error_name(error)}")
        self._join(i)

    def _again(self, ask: partial) -> None:
        self.later.append((time.monotonic() + RETRY_BACKOFF, ask))

    def _pump(self, deadline: float, failure: str) -> None:
        """Write what is asked, act on what is answered; at most a moment's wait."""
        while self.later and self.later[0][0] <= time.monotonic():
            self.later.popleft()[1]()
        for lane in self.joins + self.others:
            lane.write()
        for key, _ in self.selector.select(0.05):
            for (i, api, into), answer in key.data.read():
                if into is None:
                    self._answered(i, api, answer)
                elif answer.error_code in RETRIABLE:
                    self._again(partial(self._ask, api, i, into))
                else:
                    into[i] = answer
        assert time.monotonic() < deadline, (
            f"{failure}: members {dict(Counter(self.states))}, generations "
            f"{dict(Counter(g for g, s in zip(self.generations, self.states) if s == JOINED))}")

    def form(self, timeout: float) -> None:
        """Every member joins, then acts as a client, until each is in the group's current
        generation with its assignment: the heartbeat of every member, at its generation,
        answered NONE. While some members wait for a generation the others heartbeat: that
        generation may wait for them to rejoin."""
        deadline = time.monotonic() + timeout
        for i in range(self.n):
            self._join(i)
        next_beats = 0.0
        while True:
            while self.beating or any(state != JOINED for state in self.states):
                if JOINING in self.states and time.monotonic() >= next_beats:
                    for i in range(self.n):
                        if self.states[i] == JOINED and i not in self.beating:
                            self._ask(HEARTBEAT, i)
                    next_beats = time.monotonic() + HEARTBEAT_INTERVAL
                self._pump(deadline, "the group did not settle in one generation")
            told = {i: a for i, a in self.round(HEARTBEAT, range(self.n), deadline).items() if a.error_code != E.NONE}
            if not told:
                return
            for i, answer in told.items():
                self._answered(i, HEARTBEAT, answer)

    def round(self, api, members, deadline: float) -> dict[int, object]:
        """SyncGroup or Heartbeat of each of `members` in its generation, all at once: the answers
        (each asked again while the coordinator cannot answer)."""
        answers: dict[int, object] = {}
        members = list(members)
        for i in members:
            self._ask(api, i, answers)
        while len(answers) < len(members):
            self._pump(deadline, f"{len(members) - len(answers)} {api.name} requests unanswered")
        return answers

    def describe(self):
        connection = NodeConnection("127.0.0.1", self.port, timeout=60)
        try:
            return _described(connection, self.group)
        finally:
            connection.close()

    def close(self) -> None:
        self.selector.close()
        for lane in self.joins + self.others:
            lane.close()


def _described(connection: NodeConnection, group: str, timeout: float = 60.0):
    """DescribeGroups' answer for `group`, asked again while the coordinator cannot answer."""
    deadline = time.monotonic() + timeout
    while True:
        described = connection.call(DESCRIBE_GROUPS, {"groups": [group]}).groups[0]
        if described.error_code not in RETRIABLE:
            return described
        assert time.monotonic() < deadline, f"DescribeGroups answered {error_name(described.error_code)} throughout"
        time.sleep(RETRY_BACKOFF)


def _partitions(assignment: bytes) -> list[tuple[str, int]]:
    return [(tp.topic, p) for tp in decode_assignment(assignment)[1].assigned_partitions for p in tp.partitions]


@pytest.fixture
def zookeeper_of_its_own(tmp_path):
    """A ZooKeeper with its usual 2 s tick. An instance answers for its group-partitions only
    within 2/3 of its ZooKeeper session after its last round trip; the session fixture's 200 ms
    ticks cap sessions at 4 s, and on a loaded machine an instance busy with 10,000 joins goes
    longer than that between round trips, answering COORDINATOR_NOT_AVAILABLE meanwhile."""
    server = ZooKeeperServer(tmp_path / "zk", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_10000_member_group_forms_is_stored_in_chunks_and_survives_a_restart(zookeeper_of_its_own, tmp_path):
    # Room for 10,000 members (2.2 MB) even as counted should a first generation form of one
    # member: each newcomer is then counted with an assignment as large as that member's, every
    # partition (822 bytes), and the default 8 MiB would turn members away from 8,097 on.
    coordinator = CoordinatorProcess(zookeeper_of_its_own, tmp_path, group_initial_rebalance_delay_ms=3000,
                                     group_max_record_bytes=16 * 1024 * 1024, zk_session_timeout=30.0)
    coordinator.start()
    coordinator.topic(TOPIC, PARTITIONS)
    group, n = "the-large-group", 10_000
    fleet = Fleet(coordinator.port, group, n)
    try:
        everyone = range(n)
        fleet.form(timeout=300)  # one generation for all, whichever
        generation = fleet.generations[0]
        assert set(fleet.generations) == {generation} and len(set(fleet.member_ids)) == n
        owned = [tp for a in fleet.assignments for tp in _partitions(a)]
        assert sorted(owned) == [(TOPIC, p) for p in range(PARTITIONS)]  # each partition once
        described = fleet.describe()
        assert (described.group_state, len(described.members)) == ("Stable", n)
        assert {m.member_id for m in described.members} == set(fleet.member_ids)

        client = KazooClient(hosts=coordinator.zookeeper)
        client.start(10)
        try:
            data, _ = client.get(layout.group_path(partition_for(group, DEFAULT_GROUP_PARTITIONS), group))
            chunks = layout.decode_group(data)
            assert isinstance(chunks, list) and len(chunks) >= 2  # larger than one znode: in chunks
        finally:
            client.stop()
            client.close()

        assert coordinator.stop() == 0
        fleet.close()
        coordinator.start()  # a new process: the group is what it reads back from the chunks
        fleet.connect(coordinator.port)
        described = fleet.describe()
        assert (described.group_state, len(described.members)) == ("Stable", n)
        assert {m.member_id for m in described.members} == set(fleet.member_ids)
        deadline = time.monotonic() + 120
        beats = fleet.round(HEARTBEAT, everyone, deadline)
        assert {a.error_code for a in beats.values()} == {E.NONE}  # every member, same generation
        synced = fleet.round(SYNC_GROUP, everyone, deadline)
        assert {a.error_code for a in synced.values()} == {E.NONE}
        assert sorted(tp for a in synced.values() for tp in _partitions(a.assignment)) == sorted(owned)
        assert [_partitions(synced[i].assignment) for i in everyone] == [_partitions(a) for a in fleet.assignments]
    finally:
        fleet.close()
        coordinator.stop()


class Member(threading.Thread):
    """One member on a connection of its own, as a client behaves: join, sync, heartbeat;
    rejoin when asked; rejoin as a new member when its id is unknown; ask again when the
    coordinator cannot answer now; stop when refused. `rejoin`: an event a rebalance's
    JoinGroup waits for, the member heartbeating meanwhile, so that the rebalance waits too."""

    def __init__(self, port: int, group: str, stop: threading.Event, topic: str = TOPIC,
                 rejoin: threading.Event | None = None):
        super().__init__(daemon=True)
        self.port, self.group, self.stop, self.rejoin = port, group, stop, rejoin
        self.subscription = encode_subscription(ConsumerProtocolSubscription(topics=[topic]), 0)
        self.member_id, self.generation, self.last, self.beats = "", -1, -1, 0

    def run(self) -> None:
        connection = NodeConnection("127.0.0.1", self.port, timeout=120)
        try:
            while not self.stop.is_set() and self.last != E.GROUP_MAX_SIZE_REACHED:
                joined, = connection.pipeline(JOIN_GROUP, 3, [{
                    "group_id": self.group, "session_timeout_ms": 120_000,
                    "rebalance_timeout_ms": 60_000 if self.rejoin is None else 300_000,
                    "member_id": self.member_id, "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": self.subscription}]}])
                self.last = joined.error_code
                if joined.error_code != E.NONE:
                    if joined.error_code == E.UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                    elif joined.error_code in RETRIABLE:
                        self.stop.wait(RETRY_BACKOFF)
                    continue
                self.member_id, self.generation = joined.member_id, joined.generation_id
                body = {"group_id": self.group, "generation_id": self.generation, "member_id": self.member_id}
                self.last = connection.pipeline(SYNC_GROUP, 3, [{**body, "assignments": []}])[0].error_code
                while self.last == E.NONE and not self.stop.wait(0.2):  # a heartbeat every 200 ms
                    self.last = connection.pipeline(HEARTBEAT, 3, [body])[0].error_code
                    self.beats += 1
                    while self.last in RETRIABLE and not self.stop.wait(0.2):  # not a rebalance: beat on
                        self.last = connection.pipeline(HEARTBEAT, 3, [body])[0].error_code
                        self.beats += 1
                while (self.rejoin is not None and not self.rejoin.is_set()
                       and (self.last == E.REBALANCE_IN_PROGRESS or self.last in RETRIABLE)
                       and not self.stop.wait(0.2)):  # holding the rebalance open; its session goes on
                    self.last = connection.pipeline(HEARTBEAT, 3, [body])[0].error_code
                if self.last == E.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                elif self.last in RETRIABLE:
                    self.stop.wait(RETRY_BACKOFF)
        finally:
            connection.close()


def test_a_group_too_large_to_store_turns_members_away_and_stops_rebalancing(zookeeper, tmp_path):
    coordinator = CoordinatorProcess(zookeeper, tmp_path, group_initial_rebalance_delay_ms=2000,
                                     group_max_record_bytes=65536)
    coordinator.start()
    coordinator.topic(TOPIC, PARTITIONS)
    group, n = "too-large", 400  # about 250 bytes a member: some 260 of them fit
    stop = threading.Event()
    # The n members must join one generation together, whenever each JoinGroup comes: how many
    # get in depends on it (a generation of the first few would count each newcomer with an
    # assignment as large as theirs), and those turned away do not come back. So a member with
    # no partition (its topic has none) holds the rebalance they start open (a rebalance waits
    # for every known member to rejoin) until each of them has joined or been turned away.
    release = threading.Event()
    holder = Member(coordinator.port, group, stop, topic="none-such", rejoin=release)
    members = [holder]
    observer = NodeConnection("127.0.0.1", coordinator.port, timeout=30)
    try:
        def settled(timeout: float) -> tuple[set, set, int]:
            """Once every member is in the group's one Stable generation (answered NONE, and
            described as a member) or was turned away (GROUP_MAX_SIZE_REACHED): those in, those
            turned away, and the generation."""
            deadline = time.monotonic() + timeout
            while True:
                stable = {m for m in members if m.last == E.NONE}
                refused = {m for m in members if m.last == E.GROUP_MAX_SIZE_REACHED}
                generations = {m.generation for m in stable}
                described = observer.call(DESCRIBE_GROUPS, {"groups": [group]}).groups[0]  # an error: not Stable
                if (len(stable) + len(refused) == len(members) and described.group_state == "Stable"
                        and {d.member_id for d in described.members} == {m.member_id for m in stable}
                        and len(generations) == 1):
                    return stable, refused, generations.pop()
                assert time.monotonic() < deadline, (
                    f"not settled: {len(stable)} stable in generations {sorted(generations)}, {len(refused)} refused, "
                    f"the group {described.group_state} with {len(described.members)} members")
                time.sleep(0.1)

        holder.start()
        settled(60)
        fleet = [Member(coordinator.port, group, stop) for _ in range(n)]
        members += fleet
        for member in fleet:
            member.start()
        deadline = time.monotonic() + 120
        while True:  # each of them waiting in the rebalance, or turned away
            described = observer.call(DESCRIBE_GROUPS, {"groups": [group]}).groups[0]
            waiting = len(described.members) - 1
            turned_away = sum(m.last == E.GROUP_MAX_SIZE_REACHED for m in fleet)
            if described.group_state == "PreparingRebalance" and waiting + turned_away == n:
                break
            assert time.monotonic() < deadline, (f"of {n} members {waiting} joined and {turned_away} were turned away; "
                                                 f"the group {described.group_state}")
            time.sleep(0.1)
        release.set()

        stable, refused, generation = settled(120)
        assert 200 <= len(stable) <= 300 and refused

        late = Member(coordinator.port, group, stop)  # one more: refused at JoinGroup, nothing moves
        late.start()
        late.join(30)
        assert late.last == E.GROUP_MAX_SIZE_REACHED and late.member_id == ""
        beats = {m: m.beats for m in stable}
        deadline = time.monotonic() + 30
        while any(m.beats < beats[m] + 5 for m in stable):  # five more heartbeats each: a rebalance shows in them
            assert time.monotonic() < deadline, "members stopped heartbeating"
            time.sleep(0.05)
        assert settled(30)[0::2] == (stable, generation) and {m.generation for m in stable} == {generation}
        assert _described(observer, group).group_state == "Stable"

        full = [e for e in coordinator.events() if e.get("event") == "group full: members turned away"]
        assert full and all(e["group"] == group and e["limit"] == "group_max_record_bytes" for e in full)
        _, body = coordinator.scrape()
        counted = re.search(r'^groupkeeper_group_full_refusals_total\{limit="group_max_record_bytes"\} (\S+)$',
                            body, re.M)
        assert counted and float(counted.group(1)) >= len(refused) + 1  # members shed at sync count too
    finally:
        stop.set()
        for member in members:
            member.join(30)
        observer.close()
        coordinator.stop()
