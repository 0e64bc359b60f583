"""What we advertise, request by request against a running coordinator: the batched and
filtered forms that the clients under test do not all send (FindCoordinator v4 keys,
OffsetFetch v8 groups, ListGroups v4 states, LeaveGroup v3 members)."""

from __future__ import annotations

import struct
import uuid

import pytest

from tools.kafka_admin import read_exactly
from coordinator.topics.view import NO_TOPIC_ID
from protocol import ErrorCode, RequestHeader, decode_response, encode_request
from protocol.messages import build
from protocol.schemas import (API_VERSIONS, CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DESCRIBE_GROUPS, FETCH, FIND_COORDINATOR, HEARTBEAT, LEAVE_GROUP,
                              LIST_GROUPS, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH,
                              OFFSET_FOR_LEADER_EPOCH, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE)
from tests.support.clients import RawConnection, RawMember, join_together
from tests.support.coordinator_process import CoordinatorProcess

E = ErrorCode


@pytest.fixture(scope="module")
def groupkeeper(zookeeper, tmp_path_factory):
    process = CoordinatorProcess(zookeeper, tmp_path_factory.mktemp("protocol"))
    process.start()
    try:
        process.topic("events", 3)
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture
def raw(groupkeeper):
    connection = RawConnection(groupkeeper.port)
    try:
        yield connection
    finally:
        connection.close()


def test_api_versions_advertises_exactly_what_is_served(raw):
    body = raw.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
    assert ranges[OFFSET_COMMIT.key] == (2, 9) and ranges[FIND_COORDINATOR.key] == (0, 4)
    assert ranges[OFFSET_FETCH.key] == (1, 9)  # v9: KIP-848's member epochs; v10 names topics by id
    assert ranges[CONSUMER_GROUP_HEARTBEAT.key] == (0, 1) and ranges[CONSUMER_GROUP_DESCRIBE.key] == (0, 1)
    # and the leader-only APIs, as every ZooKeeper-mode Kafka since 2.8 serves them
    assert {k: ranges.pop(k) for k in (PRODUCE.key, FETCH.key, LIST_OFFSETS.key, OFFSET_FOR_LEADER_EPOCH.key)} == {
        PRODUCE.key: (3, 9), FETCH.key: (4, 12), LIST_OFFSETS.key: (1, 6), OFFSET_FOR_LEADER_EPOCH.key: (2, 4)}
    # SASL on every listener, as Kafka: on one without it, ILLEGAL_SASL_STATE
    assert ranges[SASL_HANDSHAKE.key] == (0, 1) and ranges[SASL_AUTHENTICATE.key] == (0, 2)
    assert raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == E.ILLEGAL_SASL_STATE
    assert raw.call(SASL_AUTHENTICATE, 2, {"auth_bytes": b"x"}).error_code == E.ILLEGAL_SASL_STATE
    assert ranges[47] == (0, 0)  # OffsetDelete
    assert len(ranges) == 17


def test_leader_only_requests_are_answered_as_a_broker_that_leads_nothing(groupkeeper):
    """A client that takes the bootstrap server's ApiVersions for every broker's (as KafkaJS
    does) and sends a leader's requests here: every partition NOT_LEADER_OR_FOLLOWER, at the
    versions advertised; a produce without acks closes the connection, as a broker does."""
    raw = RawConnection(groupkeeper.port)
    try:
        advertised = {k.api_key: k.max_version for k in raw.call(API_VERSIONS, 3, {
            "client_software_name": "t", "client_software_version": "1"}).api_keys}
        fetched = raw.call(FETCH, advertised[FETCH.key], {"max_wait_ms": 500, "min_bytes": 1, "topics": [
            {"topic": "events", "partitions": [{"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1024},
                                               {"partition": 2, "fetch_offset": 0, "partition_max_bytes": 1024}]}]})
        assert [(t.topic, [(p.partition_index, p.error_code, p.records) for p in t.partitions])
                for t in fetched.responses] == [("events", [(0, E.NOT_LEADER_OR_FOLLOWER, b""),
                                                            (2, E.NOT_LEADER_OR_FOLLOWER, b"")])]
        assert fetched.error_code == E.NONE and fetched.session_id == 0  # no fetch session opened
        stale = raw.call(FETCH, 12, {"max_wait_ms": 500, "min_bytes": 1, "session_id": 7, "session_epoch": 3,
                                     "topics": []})
        assert stale.error_code == E.FETCH_SESSION_ID_NOT_FOUND
        listed = raw.call(LIST_OFFSETS, advertised[LIST_OFFSETS.key], {"topics": [
            {"name": "events", "partitions": [{"partition_index": 1, "timestamp": -1}]}]})
        assert [(p.partition_index, p.error_code) for p in listed.topics[0].partitions] == [
            (1, E.NOT_LEADER_OR_FOLLOWER)]
        epochs = raw.call(OFFSET_FOR_LEADER_EPOCH, advertised[OFFSET_FOR_LEADER_EPOCH.key], {"topics": [
            {"topic": "events", "partitions": [{"partition": 1, "leader_epoch": 3}]}]})
        assert [(p.partition, p.error_code) for p in epochs.topics[0].partitions] == [(1, E.NOT_LEADER_OR_FOLLOWER)]
        produced = raw.call(PRODUCE, advertised[PRODUCE.key], {"acks": -1, "timeout_ms": 1000, "topic_data": [
            {"name": "events", "partition_data": [{"index": 0, "records": b""}]}]})
        assert [(p.index, p.error_code) for p in produced.responses[0].partition_responses] == [
            (0, E.NOT_LEADER_OR_FOLLOWER)]
        raw.send(PRODUCE, advertised[PRODUCE.key], {"acks": 0, "timeout_ms": 1000, "topic_data": [
            {"name": "events", "partition_data": [{"index": 0, "records": b""}]}]})
        assert raw.sock.recv(1) == b""  # closed: the producer learns it must look the leader up again
    finally:
        raw.close()


def test_metadata_lists_this_instance_and_the_registry(groupkeeper, raw):
    body = raw.call(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert [(b.host, b.port) for b in body.brokers] == [("127.0.0.1", groupkeeper.port)]
    (topic,) = [t for t in body.topics if t.name == "events"]
    assert topic.error_code == E.NONE and [p.partition_index for p in topic.partitions] == [0, 1, 2]


def test_metadata_gives_topic_ids_and_answers_topics_asked_for_by_id(raw):
    body = raw.call(METADATA, 12, {"topics": [{"name": "events"}], "allow_auto_topic_creation": False})
    (topic,) = body.topics
    assert topic.topic_id != NO_TOPIC_ID and not topic.is_internal
    stranger = uuid.uuid4()
    by_id = raw.call(METADATA, 12, {"topics": [{"topic_id": topic.topic_id, "name": None},
                                               {"topic_id": stranger, "name": None}],
                                    "allow_auto_topic_creation": False})
    assert [(t.name, t.topic_id, t.error_code, len(t.partitions)) for t in by_id.topics] == [
        ("events", topic.topic_id, E.NONE, 3), (None, stranger, E.UNKNOWN_TOPIC_ID, 0)]


def test_find_coordinator_v4_answers_each_key(groupkeeper, raw):
    body = raw.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["a", "b"]})
    assert [(c.key, c.error_code, c.port) for c in body.coordinators] == [
        ("a", E.NONE, groupkeeper.port), ("b", E.NONE, groupkeeper.port)]
    txn = raw.call(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["producer"]})
    assert [c.error_code for c in txn.coordinators] == [E.INVALID_REQUEST]  # not a group


def test_offset_fetch_v8_answers_several_groups_at_once(raw):
    for group, offset in (("ledger-a", 11), ("ledger-b", 22)):
        committed = raw.call(OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "events", "partitions": [
                {"partition_index": 1, "committed_offset": offset, "committed_metadata": "m"}]}]})
        assert committed.topics[0].partitions[0].error_code == E.NONE  # standalone commit to an empty group
    body = raw.call(OFFSET_FETCH, 8, {"groups": [
        {"group_id": "ledger-a", "topics": None},
        {"group_id": "ledger-b", "topics": [{"name": "events", "partition_indexes": [1, 2]}]},
        {"group_id": "ledger-none", "topics": None}], "require_stable": False})
    found = {g.group_id: {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}
             for g in body.groups}
    assert found == {"ledger-a": {("events", 1): 11}, "ledger-b": {("events", 1): 22, ("events", 2): -1},
                     "ledger-none": {}}
    described = raw.call(DESCRIBE_GROUPS, 5, {"groups": ["ledger-a", "ledger-none"]})
    assert [(g.group_id, g.group_state) for g in described.groups] == [("ledger-a", "Empty"), ("ledger-none", "Dead")]


def test_list_groups_filters_by_state_and_type_and_leave_group_v3_removes_a_batch(groupkeeper, raw):
    first, second = RawMember(groupkeeper.port, "crowd", "events"), RawMember(groupkeeper.port, "crowd", "events")
    try:
        assignments = join_together(first, second)
        assert sorted(p for a in assignments for p in a["events"]) == [0, 1, 2]
        stable = raw.call(LIST_GROUPS, 4, {"states_filter": ["Stable"]})
        assert [(g.group_id, g.group_state) for g in stable.groups] == [("crowd", "Stable")]
        assert raw.call(LIST_GROUPS, 4, {"states_filter": ["Empty"]}).groups[0].group_id.startswith("ledger")
        # v5: by type too (case aside, as Kafka); every group here is classic
        typed = raw.call(LIST_GROUPS, 5, {"states_filter": ["stable"], "types_filter": ["CLASSIC"]})
        assert [(g.group_id, g.group_type) for g in typed.groups] == [("crowd", "classic")]
        assert raw.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]}).groups == []
        left = raw.call(LEAVE_GROUP, 3, {"group_id": "crowd", "members": [
            {"member_id": first.member_id}, {"member_id": second.member_id}, {"member_id": "stranger"}]})
        assert left.error_code == E.NONE
        assert [m.error_code for m in left.members] == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
        empty = raw.call(LIST_GROUPS, 4, {"states_filter": ["Empty"]})
        assert "crowd" in {g.group_id for g in empty.groups}
    finally:
        first.close()
        second.close()


def test_heartbeats_answered_on_either_path_come_back_in_order(groupkeeper):
    """A Stable member's heartbeats of every version (answered from their bytes) pipelined
    among heartbeats the general path answers (a header's tagged field, a wrong generation,
    a static member, a stranger): every answer in request order, each with its error."""
    member = RawMember(groupkeeper.port, "steady", "events")
    try:
        member.join_and_sync()
        ok = {"group_id": "steady", "generation_id": member.generation, "member_id": member.member_id}
        sent = []  # (version, expected error)
        frames = []

        def add(version: int, body: dict, expected: ErrorCode, tagged_header: bool = False) -> None:
            frame = encode_request(RequestHeader(HEARTBEAT.key, version, len(sent), "raw"),
                                   build(HEARTBEAT.request.struct, body))
            if tagged_header:  # one tagged field (tag 5, one byte) in the v4 header, before the body
                head_end = 4 + 10 + len("raw")
                frame = struct.pack(">i", len(frame) - 4 + 3) + frame[4:head_end] + b"\x01\x05\x01\x07" + frame[head_end + 1:]
            frames.append(frame)
            sent.append((version, expected))

        for version in range(5):
            add(version, ok, E.NONE)
        add(4, ok, E.NONE, tagged_header=True)
        add(4, {**ok, "generation_id": member.generation + 1}, E.ILLEGAL_GENERATION)
        add(3, {**ok, "group_instance_id": "static-1"}, E.UNKNOWN_MEMBER_ID)
        add(2, {**ok, "member_id": "stranger"}, E.UNKNOWN_MEMBER_ID)
        add(1, ok, E.NONE)
        member.sock.sendall(b"".join(frames))
        answers = []
        for version, _ in sent:
            size = struct.unpack(">i", read_exactly(member.sock, 4))[0]
            answers.append(decode_response(HEARTBEAT.key, version, read_exactly(member.sock, size)))
        assert [(cid, body.error_code) for cid, body in answers] == [(i, e) for i, (_, e) in enumerate(sent)]
        assert member.heartbeat() == E.NONE  # still in its generation
    finally:
        member.close()
