"""Groups larger than one ZooKeeper znode, against a real ZooKeeper and `groupkeeper run`
processes: a 10,000-member group forms in one generation, its record is stored in chunks and
a restarted coordinator serves it from them; a group that cannot be stored turns the members
that do not fit away with GROUP_MAX_SIZE_REACHED, logs and counts it, and stops rebalancing."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kazoo.client import KazooClient

from tools.kafka_admin import Connection
from coordinator.cluster.placement import DEFAULT_GROUP_PARTITIONS, partition_for
from coordinator.store import layout
from protocol import ErrorCode as E
from protocol.consumer import decode_assignment, encode_subscription
from protocol.messages import ConsumerProtocolSubscription
from protocol.schemas import DESCRIBE_GROUPS, HEARTBEAT, JOIN_GROUP, SYNC_GROUP
from tests.coordinator_process import CoordinatorProcess

TOPIC, PARTITIONS = "orders", 200
SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=[TOPIC]), 0)
PER_CONNECTION = 100  # requests of one connection the server works on at once


class Fleet:
    """`n` members of one group, their requests pipelined `PER_CONNECTION` to a connection,
    every connection at once (a generation forms only with every JoinGroup in flight)."""

    def __init__(self, port: int, group: str, n: int):
        self.group, self.n = group, n
        self.lanes = [range(i, min(i + PER_CONNECTION, n)) for i in range(0, n, PER_CONNECTION)]
        self.connect(port)
        self.member_ids, self.generations = [""] * n, [-1] * n
        self.errors: list[int] = [-1] * n
        self.assignments: list[bytes] = [b""] * n

    def connect(self, port: int) -> None:
        self.connections = [Connection("127.0.0.1", port, timeout=120) for _ in self.lanes]

    def ask(self, api, version: int, body_of, members: set[int]) -> dict[int, object]:
        def lane(k: int) -> dict[int, object]:
            mine = [i for i in self.lanes[k] if i in members]
            answers = self.connections[k].pipeline(api, version, [body_of(i) for i in mine], chunk=PER_CONNECTION)
            for i, answer in zip(mine, answers):
                self.errors[i] = answer.error_code
            return dict(zip(mine, answers))
        with ThreadPoolExecutor(len(self.lanes)) as pool:
            return {i: a for done in pool.map(lane, range(len(self.lanes))) for i, a in done.items()}

    def join(self, members: set[int]) -> None:
        for i, answer in self.ask(JOIN_GROUP, 3, lambda i: {
                "group_id": self.group, "session_timeout_ms": 120_000, "rebalance_timeout_ms": 60_000,
                "member_id": self.member_ids[i], "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}, members).items():
            self.member_ids[i], self.generations[i] = answer.member_id, answer.generation_id

    def sync(self, members: set[int]) -> None:
        for i, answer in self.ask(SYNC_GROUP, 3, lambda i: {
                "group_id": self.group, "generation_id": self.generations[i], "member_id": self.member_ids[i],
                "assignments": []}, members).items():
            self.assignments[i] = answer.assignment

    def heartbeat(self, members: set[int]) -> dict[int, int]:
        return {i: a.error_code for i, a in self.ask(HEARTBEAT, 3, lambda i: {
            "group_id": self.group, "generation_id": self.generations[i], "member_id": self.member_ids[i]},
            members).items()}

    def ok(self) -> set[int]:
        return {i for i in range(self.n) if self.errors[i] == E.NONE}

    def describe(self):
        return self.connections[0].call(DESCRIBE_GROUPS, {"groups": [self.group]}).groups[0]

    def close(self) -> None:
        for connection in self.connections:
            connection.close()


def _partitions(assignment: bytes) -> list[tuple[str, int]]:
    return [(tp.topic, p) for tp in decode_assignment(assignment)[1].assigned_partitions for p in tp.partitions]


def test_a_10000_member_group_forms_is_stored_in_chunks_and_survives_a_restart(zookeeper, tmp_path):
    coordinator = CoordinatorProcess(zookeeper, tmp_path, group_initial_rebalance_delay_ms=3000)
    coordinator.start()
    coordinator.topic(TOPIC, PARTITIONS)
    group, n = "the-large-group", 10_000
    fleet = Fleet(coordinator.port, group, n)
    try:
        everyone = set(range(n))
        fleet.join(everyone)
        assert fleet.ok() == everyone and set(fleet.generations) == {1}  # one generation for all
        fleet.sync(everyone)
        assert fleet.ok() == everyone
        owned = [tp for a in fleet.assignments for tp in _partitions(a)]
        assert sorted(owned) == [(TOPIC, p) for p in range(PARTITIONS)]  # each partition once
        described = fleet.describe()
        assert (described.group_state, len(described.members)) == ("Stable", n)

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
        assert set(fleet.heartbeat(everyone).values()) == {E.NONE}  # every member, same generation
        fleet.sync(everyone)
        assert sorted(tp for a in fleet.assignments for tp in _partitions(a)) == sorted(owned)
    finally:
        fleet.close()
        coordinator.stop()


class Member(threading.Thread):
    """One member on a connection of its own, as a client behaves: join, sync, heartbeat;
    rejoin when asked; rejoin as a new member when its id is unknown; stop when refused."""

    def __init__(self, port: int, group: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.group, self.stop = port, group, stop
        self.member_id, self.generation, self.last, self.beats = "", -1, -1, 0

    def run(self) -> None:
        connection = Connection("127.0.0.1", self.port, timeout=120)
        try:
            while not self.stop.is_set() and self.last != E.GROUP_MAX_SIZE_REACHED:
                joined, = connection.pipeline(JOIN_GROUP, 3, [{
                    "group_id": self.group, "session_timeout_ms": 120_000, "rebalance_timeout_ms": 60_000,
                    "member_id": self.member_id, "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}])
                self.last = joined.error_code
                if joined.error_code != E.NONE:
                    continue
                self.member_id, self.generation = joined.member_id, joined.generation_id
                body = {"group_id": self.group, "generation_id": self.generation, "member_id": self.member_id}
                self.last = connection.pipeline(SYNC_GROUP, 3, [{**body, "assignments": []}])[0].error_code
                while self.last == E.NONE and not self.stop.wait(0.2):  # a heartbeat every 200 ms
                    self.last = connection.pipeline(HEARTBEAT, 3, [body])[0].error_code
                    self.beats += 1
                if self.last == E.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
        finally:
            connection.close()


def test_a_group_too_large_to_store_turns_members_away_and_stops_rebalancing(zookeeper, tmp_path):
    coordinator = CoordinatorProcess(zookeeper, tmp_path, group_initial_rebalance_delay_ms=2000,
                                     group_max_record_bytes=65536)
    coordinator.start()
    coordinator.topic(TOPIC, PARTITIONS)
    group, n = "too-large", 400  # about 250 bytes a member: some 260 of them fit
    stop = threading.Event()
    members = [Member(coordinator.port, group, stop) for _ in range(n)]
    observer = Connection("127.0.0.1", coordinator.port, timeout=30)
    try:
        for member in members:
            member.start()

        def settled() -> tuple[set, set]:
            stable = {m for m in members if m.last == E.NONE}
            refused = {m for m in members if m.last == E.GROUP_MAX_SIZE_REACHED}
            return stable, refused

        deadline = time.monotonic() + 60
        while True:
            stable, refused = settled()
            described = observer.call(DESCRIBE_GROUPS, {"groups": [group]}).groups[0]
            if (len(stable) + len(refused) == n and described.group_state == "Stable"
                    and len(described.members) == len(stable)):
                break
            assert time.monotonic() < deadline, f"not settled: {len(stable)} stable, {len(refused)} refused"
            time.sleep(0.1)
        assert 200 <= len(stable) <= 300 and refused
        generation = {m.generation for m in stable}
        assert len(generation) == 1

        late = Member(coordinator.port, group, stop)  # one more: refused at JoinGroup, nothing moves
        late.start()
        late.join(30)
        assert late.last == E.GROUP_MAX_SIZE_REACHED and late.member_id == ""
        beats = {m: m.beats for m in stable}
        while any(m.beats < beats[m] + 5 for m in stable):  # five more heartbeats each: a rebalance shows in them
            assert time.monotonic() < deadline + 30, "members stopped heartbeating"
            time.sleep(0.05)
        assert settled()[0] == stable and {m.generation for m in stable} == generation
        assert observer.call(DESCRIBE_GROUPS, {"groups": [group]}).groups[0].group_state == "Stable"

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
