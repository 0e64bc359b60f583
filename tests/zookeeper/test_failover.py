"""The owner of a group killed (SIGKILL) in each phase of a rebalance, as seed 001's
"Co-ordinator failure during rebalance" lists them, or paused (SIGSTOP) past its session:
real `groupkeeper run` processes and a real ZooKeeper. Whatever the phase, the group ends in
one consistent generation on the new owner, every acknowledged offset commit is still
there, and no partition is owned by two members of one generation.

The phases, in this coordinator's protocol:
1. the trigger reached the owner (a topic grew) but it never acted on it;
2. the rebalance started: some members were told (REBALANCE_IN_PROGRESS), others not;
3. some members' JoinGroups arrived and wait for the others;
4. the generation was formed and written to ZooKeeper, but no SyncGroup was answered (and,
   its variant, formed and answered at JoinGroup but not yet written: the leader's assignment
   had not arrived);
5. the generation's answers reached some members only.
"""

from __future__ import annotations

import signal
import time

import pytest
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from coordinator.cluster.placement import DEFAULT_GROUP_PARTITIONS, partition_for
from coordinator.store import layout
from protocol import ErrorCode
from protocol.schemas import METADATA, OFFSET_COMMIT, OFFSET_FETCH

from tests.support.clients import (RawConnection, RoamingMember, committed, converge, described, find_coordinator,
                      one_generation)
from tests.support.coordinator_process import CoordinatorProcess, cluster, read_events

SESSION = 3.0  # the instances' ZooKeeper session timeout: how long a failover takes to detect


@pytest.fixture
def instances(zookeeper, tmp_path):
    started = cluster(zookeeper, tmp_path, 2, zk_session_timeout=SESSION)
    for process in started:
        process.start()
    try:
        yield started
    finally:
        for process in started:
            if process.process.poll() is None:
                process.signal(signal.SIGCONT)
            process.stop()


def group_owned_by(owner: CoordinatorProcess, everyone: list[CoordinatorProcess], prefix: str) -> str:
    ports = [p.port for p in everyone]
    return next(g for i in range(1000) if find_coordinator(ports, g := f"{prefix}-{i}") == owner.port)


def check_the_group(everyone: list[CoordinatorProcess], group: str, members: list[RoamingMember], acked: dict):
    """The coordinator's view agrees with the members', and every acknowledged commit is there."""
    ports = [p.port for p in everyone if p.process.poll() is None]
    found = described(ports, group)
    assert found.error_code == ErrorCode.NONE and found.group_state == "Stable"
    assert {m.member_id for m in found.members} == {m.member_id for m in members}
    stored = committed(ports, group)
    assert acked and all(stored.get(tp, -1) >= offset for tp, offset in acked.items()), (acked, stored)


def stored_generation(process: CoordinatorProcess, group: str) -> int | None:
    client = KazooClient(hosts=process.zookeeper)
    client.start(timeout=10)
    try:
        path = layout.group_path(partition_for(group, DEFAULT_GROUP_PARTITIONS), group)
        if client.exists(path) is None:
            return None
        data, _ = client.get(path)
        return layout.decode_group(data)["generation"] if data else None
    finally:
        client.stop()
        client.close()


def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout}s"
        time.sleep(0.02)


def start_group(a: CoordinatorProcess, instances, prefix: str, topic: str = "t", partitions: int = 4,
                strategies=("range",), leader_partitions: dict | None = None):
    """A group owned by `a`: two members in a stable first generation, with commits."""
    a.topic(topic, partitions)
    for other in instances:
        _wait_for_topic(other, topic, partitions)
    group = group_owned_by(a, instances, prefix)
    ports = [p.port for p in instances]
    members = [RoamingMember(ports, group, topic, strategies=strategies, partitions=leader_partitions,
                             session_timeout_ms=10000) for _ in range(2)]
    acked: dict = {}
    converge(members, {(topic, p) for p in range(partitions)}, acked)
    return group, members, acked, ports


def grow_and_rejoin(via: CoordinatorProcess, members: list[RoamingMember]) -> int:
    """Topic t grows to 6 partitions; once told, every member rejoins, JoinGroups sent
    together (the generation forms when the last arrives): the new generation, joined by all
    and synced by none."""
    new = members[0].generation + 1
    via.cli("topics", "alter", "t", "--partitions", "6")
    wait_for(lambda: all(m.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS for m in members),
             what="every member told")
    for m in members:
        m.send_join()
    for m in members:
        joined = m.receive_join()
        assert joined.error_code == ErrorCode.NONE and joined.generation_id == new
    return new


def _wait_for_topic(process: CoordinatorProcess, topic: str, partitions: int) -> None:
    connection = RawConnection(process.port)
    try:
        connection.wait_for_topic(topic, partitions)
    finally:
        connection.close()


def test_phase_1_the_owner_dies_before_acting_on_a_topic_change(instances):
    a, b = instances
    group, members, acked, ports = start_group(a, instances, "phase1")
    first = members[0].generation
    a.signal(signal.SIGSTOP)  # it will never act on what comes next
    b.cli("topics", "alter", "t", "--partitions", "6")
    _wait_for_topic(b, "t", 6)
    a.signal(signal.SIGKILL)
    # the new owner compares the stored generation's partition counts with the registry
    converge(members, {("t", p) for p in range(6)}, acked)
    assert members[0].generation == first + 1
    check_the_group(instances, group, members, acked)


def test_phase_2_the_owner_dies_when_only_some_members_were_told(instances):
    a, b = instances
    group, members, acked, ports = start_group(a, instances, "phase2")
    newcomer = RoamingMember(ports, group, "t", session_timeout_ms=10000)
    assert newcomer.join().error_code == ErrorCode.MEMBER_ID_REQUIRED
    newcomer.send_join()  # with its member id: it waits for the others
    told = members[0]
    wait_for(lambda: told.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS, what="a member told")
    a.signal(signal.SIGKILL)  # the other member never heard of the rebalance
    everyone = [*members, newcomer]
    converge(everyone, {("t", p) for p in range(4)}, acked)
    assert len({m.member_id for m in everyone}) == 3
    check_the_group(instances, group, everyone, acked)


def test_phase_3_the_owner_dies_with_some_join_requests_waiting(instances):
    a, b = instances
    group, members, acked, ports = start_group(a, instances, "phase3")
    b.cli("topics", "create", "u", "--partitions", "2")
    for process in instances:
        _wait_for_topic(process, "u", 2)
    first = members[0]
    first.subscribe("t", "u")  # a changed subscription: a rebalance
    first.send_join()  # waits for the other member, which never comes
    wait_for(lambda: described(ports, group).group_state == "PreparingRebalance", what="the rebalance")
    a.signal(signal.SIGKILL)
    converge(members, {("t", p) for p in range(4)} | {("u", 0), ("u", 1)}, acked)
    check_the_group(instances, group, members, acked)


def test_phase_4_the_owner_dies_after_writing_the_generation_before_any_sync(instances):
    a, b = instances
    group, members, acked, ports = start_group(a, instances, "phase4")
    new = grow_and_rejoin(b, members)
    wait_for(lambda: stored_generation(b, group) == new, what="the new generation in ZooKeeper")
    a.signal(signal.SIGKILL)
    # the new owner completes the written generation: each member's sync gets its share of it
    for m in members:
        wait_for(lambda: m.step() == ErrorCode.NONE and not m.syncing, what="the sync answered")
    assert one_generation(members, {("t", p) for p in range(6)}) and members[0].generation == new
    converge(members, {("t", p) for p in range(6)}, acked)
    assert members[0].generation == new  # completed, not repeated
    check_the_group(instances, group, members, acked)


def test_phase_4_variant_the_owner_dies_after_the_join_answers_before_the_write(instances):
    """With a strategy only the leader knows, the generation is written once the leader's
    assignment arrives: the owner dies before it does. The members' generation is unknown to
    the new owner (ILLEGAL_GENERATION) and they rejoin."""
    a, b = instances
    group, members, acked, ports = start_group(a, instances, "phase4b", strategies=("custom",),
                                               leader_partitions={"t": 4})
    new = grow_and_rejoin(b, members)
    assert stored_generation(b, group) == new - 1  # no assignment yet, nothing written
    a.signal(signal.SIGKILL)
    for m in members:
        m.partitions = {"t": 6}
    converge(members, {("t", p) for p in range(6)}, acked)
    check_the_group(instances, group, members, acked)


def test_phase_5_the_owner_dies_with_the_generation_answered_to_some_members(instances):
    a, b = instances
    group, members, acked, ports = start_group(a, instances, "phase5")
    new = grow_and_rejoin(b, members)
    answered, unanswered = members
    assert answered.step() == ErrorCode.NONE and not answered.syncing and answered.generation == new
    a.signal(signal.SIGKILL)
    converge(members, {("t", p) for p in range(6)}, acked)
    assert answered.generation == unanswered.generation == new
    check_the_group(instances, group, members, acked)


def test_a_paused_owner_resumed_after_a_takeover_answers_nothing_as_owner_and_lands_nothing(instances):
    a, b = instances
    group, members, acked, ports = start_group(a, instances, "paused")
    spy = RawConnection(a.port)  # a connection to the owner, its requests read only after the pause
    a.signal(signal.SIGSTOP)
    converge(members, {("t", p) for p in range(4)}, acked)  # taken over by b once a's session expired
    assert find_coordinator([b.port], group) == b.port
    before = committed([b.port], group)
    # queued at the paused owner: a heartbeat, an offset fetch and a commit of stale offsets
    first = members[0]
    spy.send(*first.heartbeat_request())
    a.signal(signal.SIGCONT)
    heartbeat = spy.receive(*first.heartbeat_request()[:2])
    assert heartbeat.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    fetched = spy.call(OFFSET_FETCH, 5, {"group_id": group, "topics": None})
    assert fetched.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    stale = spy.call(*first.commit_request("t", {p: 0 for p in range(4)}))
    assert all(p.error_code != ErrorCode.NONE for t in stale.topics for p in t.partitions)
    spy.close()
    assert committed([b.port], group) == before
    # a, resumed, takes a fair share back without a restart
    wait_for(lambda: _metadata_nodes(b.port) == 2 and _serving(a) > 0, timeout=30, what="a back")
    assert a.process.poll() is None and a.starts == 1
    converge(members, {("t", p) for p in range(4)}, acked)
    check_the_group(instances, group, members, acked)
    # what each instance recorded: a lost its session and took a share back; b took over a's share
    gained_b = _metric(b, "groupkeeper_group_partitions_gained_total", reason="failover")
    assert gained_b == 25 and _metric(b, "groupkeeper_group_partition_takeover_seconds_count", reason="failover") == 25
    assert _metric(a, "groupkeeper_group_partitions_lost_total", reason="session lost") == 25
    assert _metric(a, "groupkeeper_group_partitions_gained_total", reason="handover") > 0
    for process in instances:
        assert process.stop() == 0
    events = read_events(a.tmp_path / "events")
    lost = [e["reason"] for e in events if e["type"] == "ownership_lost" and e["instance"] == 0]
    assert lost.count("session lost") == 25 and lost[-1] == "shutdown"
    gained = [e for e in events if e["type"] == "ownership_gained" and e["instance"] == 1]
    assert sum(e["reason"] == "failover" for e in gained) == 25


def _metadata_nodes(port: int) -> int:
    connection = RawConnection(port)
    try:
        return len(connection.call(METADATA, 1, {"topics": []}).brokers)
    finally:
        connection.close()


def _serving(process: CoordinatorProcess) -> int:
    return int(_metric(process, "groupkeeper_owned_group_partitions"))


def _metric(process: CoordinatorProcess, name: str, **labels: str) -> float:
    """A sample of the process's /metrics (0 when it has no such series yet)."""
    _, body = process.scrape()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


def test_a_second_instance_serves_half_of_the_groups_within_seconds(zookeeper, tmp_path):
    a, b = cluster(zookeeper, tmp_path, 2)
    a.start()
    try:
        a.topic("t", 1)  # offsets are stored only for partitions that exist
        groups = [f"standalone-{i}" for i in range(40)]
        connection = RawConnection(a.port)
        for i, group in enumerate(groups):  # committed offsets only, as standalone consumers leave them
            answer = connection.call(*_standalone_commit(group, i))
            assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
        connection.close()
        started = time.monotonic()
        b.start()
        took = time.monotonic() - started
        assert took < 10, took
        assert _metadata_nodes(a.port) == _metadata_nodes(b.port) == 2
        on_b = [g for g in groups if find_coordinator([a.port], g) == b.port]
        assert 10 <= len(on_b) <= 30, len(on_b)  # about half: 25 of 50 group-partitions each
        assert _serving(a) == _serving(b) == 25
        for group in groups:  # each served where FindCoordinator says, with its offsets
            i = groups.index(group)
            assert committed([b.port], group) == {("t", 0): 1000 + i}
    finally:
        b.stop()
        a.stop()


def _standalone_commit(group: str, i: int):
    return OFFSET_COMMIT, 7, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                              "topics": [{"name": "t", "partitions": [{"partition_index": 0,
                                                                      "committed_offset": 1000 + i}]}]}


def test_an_instance_killed_and_started_again_at_once_comes_back_when_its_old_session_ends(instances):
    """Its predecessor's registration and owner znodes live until that session expires: the
    new process waits for them instead of refusing to start, then takes its share back."""
    a, b = instances
    group, members, acked, ports = start_group(a, instances, "restarted")
    a.signal(signal.SIGKILL)
    a.start()
    a.wait_for_log("instance id held by another session; waiting for it to expire")
    assert _serving(a) == _serving(b) == 25
    converge(members, {("t", p) for p in range(4)}, acked)
    check_the_group(instances, group, members, acked)
