"""Unmodified librdkafka consumers speaking KIP-848's consumer protocol
(`group.protocol=consumer`) to a real `groupkeeper run`: the coordinator assigns, and
members reconcile a step per heartbeat."""

from __future__ import annotations

import signal
import textwrap
import time

import pytest
from confluent_kafka import ConsumerGroupType, KafkaException
from confluent_kafka import TopicPartition as CKPartition
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from protocol import ErrorCode as E
from protocol.schemas import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, OFFSET_COMMIT, OFFSET_FETCH
from tests.support.clients import (CK, RawConnection, find_coordinator, kill_and_take_over, kp_assigned, kp_commit,
                           kp_consumer, member_process, poll_until)
from tests.support.coordinator_process import cluster, serving

TOPIC, PARTITIONS = "orders", 6
ALL = {(TOPIC, p) for p in range(PARTITIONS)}
FAST = {"group_consumer_heartbeat_interval_ms": 300, "group_consumer_session_timeout_ms": 6000}


@pytest.fixture
def groupkeeper(zookeeper, tmp_path):
    with serving(zookeeper, tmp_path, {TOPIC: PARTITIONS}, **FAST) as process:
        yield process


def consumer(groupkeeper, group: str, *topics: str, **config) -> CK:
    return CK(groupkeeper.bootstrap, group, *(topics or (TOPIC,)), protocol="consumer", **config)


def test_a_consumer_protocol_member_gets_every_partition_and_commits(groupkeeper):
    ck = consumer(groupkeeper, "kip848")
    try:
        poll_until(lambda: ck.assigned == ALL, ck)
        ck.consumer.commit(offsets=[CKPartition(TOPIC, p, 10 + p) for p in range(PARTITIONS)], asynchronous=False)
        committed = ck.consumer.committed([CKPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        assert {p.partition: p.offset for p in committed} == {p: 10 + p for p in range(PARTITIONS)}
    finally:
        ck.consumer.close()


def settled(*members: CK) -> bool:
    """Every partition owned by exactly one member."""
    owned = [tp for m in members for tp in m.assigned]
    return len(owned) == len(set(owned)) == PARTITIONS and set(owned) == ALL


def test_members_reconcile_incrementally_and_only_moved_partitions_are_revoked(groupkeeper):
    first = consumer(groupkeeper, "incremental")
    second = third = None
    try:
        poll_until(lambda: first.assigned == ALL, first)
        second = consumer(groupkeeper, "incremental")
        poll_until(lambda: settled(first, second) and len(second.assigned) == 3, first, second)
        kept = set(first.assigned)
        revoked = set().union(*(tps for kind, tps in first.history if kind == "revoke"))
        assert revoked == ALL - kept  # only what moved was taken back; the rest never stopped
        third = consumer(groupkeeper, "incremental")
        poll_until(lambda: settled(first, second, third) and all(len(m.assigned) == 2 for m in (first, second, third)),
                   first, second, third)
        assert first.assigned <= kept  # sticky: each kept a share of what it had
        before = set(second.assigned)
        third.consumer.close()  # a clean leave (epoch -1): its partitions go to the others at once
        poll_until(lambda: settled(first, second), first, second, timeout=20)
        assert before <= second.assigned
        groupkeeper.wait_for_log("member removed", group="incremental", reason="left")
    finally:
        for member in (first, second):
            if member is not None:
                member.consumer.close()


def test_a_killed_member_loses_its_partitions_after_the_session_timeout(groupkeeper, tmp_path):
    script = tmp_path / "victim.py"
    script.write_text(textwrap.dedent(f"""
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": {groupkeeper.bootstrap!r}, "group.id": "kill",
                      "group.protocol": "consumer", "enable.auto.commit": False, "log_level": 3}})
        c.subscribe([{TOPIC!r}], on_assign=lambda c, ps: c.incremental_assign(ps),
                    on_revoke=lambda c, ps: c.incremental_unassign(ps))
        while not c.assignment():
            c.poll(0.1)
        print("assigned", flush=True)
        while True:
            c.poll(0.1)
    """))
    with member_process(script) as victim:
        survivor = consumer(groupkeeper, "kill")
        poll_until(lambda: survivor.assigned and len(survivor.assigned) == 3, survivor)
        kill_and_take_over(groupkeeper, victim, survivor, "kill", ALL, at_least=5.0)  # its session: 6 s


def test_a_static_member_restarted_gets_its_partitions_back_and_the_other_sees_nothing(groupkeeper):
    first = consumer(groupkeeper, "static", **{"group.instance.id": "one"})
    second = consumer(groupkeeper, "static", **{"group.instance.id": "two"})
    again = None
    try:
        poll_until(lambda: settled(first, second) and len(first.assigned) == 3, first, second)
        had, seen = set(first.assigned), len(second.history)
        first.consumer.close()  # a static member's leave (epoch -2): its place is kept
        groupkeeper.wait_for_log("member removed", group="static", reason="left (static)")
        again = consumer(groupkeeper, "static", **{"group.instance.id": "one"})
        poll_until(lambda: again.assigned == had, again, second)
        for _ in range(10):  # the other member keeps polling: nothing is revoked from it or given to it
            second.poll()
        assert len(second.history) == seen and settled(again, second)
    finally:
        second.consumer.close()
        if again is not None:
            again.consumer.close()


def test_a_regular_expression_takes_in_a_topic_created_later(groupkeeper):
    ck = consumer(groupkeeper, "pattern", "^orders-.*")
    try:
        groupkeeper.topic("orders-eu", 2)
        poll_until(lambda: ck.assigned == {("orders-eu", 0), ("orders-eu", 1)}, ck)
        groupkeeper.topic("orders-us", 1)
        groupkeeper.topic("payments", 1)  # does not match
        poll_until(lambda: ck.assigned == {("orders-eu", 0), ("orders-eu", 1), ("orders-us", 0)}, ck)
    finally:
        ck.consumer.close()


def test_admin_clients_see_a_consumer_group_as_one(groupkeeper):
    ck = consumer(groupkeeper, "admin-view", **{"client.id": "ck-848"})
    classic = CK(groupkeeper.bootstrap, "old-style", TOPIC)
    try:
        poll_until(lambda: ck.assigned == ALL and classic.assigned == ALL, ck, classic)
        admin = AdminClient({"bootstrap.servers": groupkeeper.bootstrap})
        described = admin.describe_consumer_groups(["admin-view"])["admin-view"].result(timeout=30)
        assert described.type == ConsumerGroupType.CONSUMER and str(described.state).endswith("STABLE")
        assert [(m.client_id, {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions})
                for m in described.members] == [("ck-848", ALL)]
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=30)
        assert [g.group_id for g in listed.valid] == ["admin-view"]
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(timeout=30)
        assert [g.group_id for g in listed.valid] == ["old-style"]
    finally:
        ck.consumer.close()
        classic.consumer.close()


def test_commits_carry_member_epochs_and_a_stale_one_is_refused(groupkeeper):
    ck = consumer(groupkeeper, "epochs")
    raw = RawConnection(groupkeeper.port)
    try:
        poll_until(lambda: ck.assigned == ALL, ck)
        member = raw.call(CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["epochs"]}).groups[0].members[0]

        def commit(version: int, member_id: str, epoch: int) -> set:
            answer = raw.call(OFFSET_COMMIT, version, {
                "group_id": "epochs", "generation_id_or_member_epoch": epoch, "member_id": member_id,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 7}]}]})
            return {p.error_code for t in answer.topics for p in t.partitions}

        assert commit(9, member.member_id, member.member_epoch) == {E.NONE}
        assert commit(9, member.member_id, member.member_epoch - 1) == {E.STALE_MEMBER_EPOCH}
        assert commit(9, member.member_id, member.member_epoch + 1) == {E.FENCED_MEMBER_EPOCH}
        assert commit(9, "someone-else", member.member_epoch) == {E.UNKNOWN_MEMBER_ID}
        assert commit(8, member.member_id, member.member_epoch) == {E.UNSUPPORTED_VERSION}
        assert commit(9, "", -1) == {E.UNKNOWN_MEMBER_ID}  # an administrator's, while the group has members

        def fetch(member_id, epoch):
            group = raw.call(OFFSET_FETCH, 9, {"groups": [{"group_id": "epochs", "member_id": member_id,
                                                           "member_epoch": epoch, "topics": None}]}).groups[0]
            return group.error_code, [(p.partition_index, p.committed_offset) for t in group.topics
                                      for p in t.partitions]

        assert fetch(member.member_id, member.member_epoch) == (E.NONE, [(0, 7)])
        assert fetch(member.member_id, member.member_epoch - 1)[0] == E.STALE_MEMBER_EPOCH
        assert fetch(None, -1) == (E.NONE, [(0, 7)])  # an administrator's read
    finally:
        raw.close()
        ck.consumer.close()


def test_a_new_owner_goes_on_from_the_stored_epochs_and_no_member_rejoins(zookeeper, tmp_path):
    """The coordinator of a settled consumer group is killed: the instance that takes its
    group-partition over loads the epochs and assignments, and the members go on with them
    (no partition revoked or given, no member joining again), their commits accepted."""
    # members' sessions long enough for librdkafka's reconnection backoff on a loaded machine:
    # what is tested is that they go on, not how soon they find the new owner
    a, b = cluster(zookeeper, tmp_path, 2, zk_session_timeout=3.0, **{**FAST, "group_consumer_session_timeout_ms": 30_000})
    for process in (a, b):
        process.start()
    try:
        a.topic(TOPIC, PARTITIONS)
        RawConnection(b.port).wait_for_topic(TOPIC, PARTITIONS)
        group = next(g for i in range(1000) if find_coordinator([a.port], g := f"moving-{i}") == a.port)
        both = f"{a.bootstrap},{b.bootstrap}"
        first = CK(both, group, TOPIC, protocol="consumer")
        second = CK(both, group, TOPIC, protocol="consumer")
        try:
            poll_until(lambda: settled(first, second) and len(first.assigned) == 3, first, second)
            histories = (len(first.history), len(second.history))
            a.signal(signal.SIGKILL)
            b.wait_for_log("group-partition gained", timeout=30, reason="failover")
            offsets = [CKPartition(t, p, 40 + p) for t, p in sorted(first.assigned)]
            deadline = time.monotonic() + 30
            while True:  # the first commits may reach no coordinator yet: an application retries
                try:
                    first.consumer.commit(offsets=offsets, asynchronous=False)
                    break
                except KafkaException:
                    assert time.monotonic() < deadline, "no commit accepted by the new owner"
                    first.poll()
            for _ in range(20):  # several heartbeats with the new owner
                first.poll()
                second.poll()
            assert (len(first.history), len(second.history)) == histories, (first.history, second.history)
            assert settled(first, second)
            assert not [e for e in b.events() if e.get("event") == "member joined" and e.get("group") == group]
            committed = first.consumer.committed([CKPartition(t, p) for t, p in sorted(first.assigned)], timeout=30)
            assert [p.offset for p in committed] == [o.offset for o in offsets]
        finally:
            first.consumer.close()
            second.consumer.close()
    finally:
        for process in (a, b):
            process.stop()


def test_a_live_classic_group_migrates_to_the_consumer_protocol_and_back(groupkeeper):
    """kafka-python and librdkafka (classic) share a group with commits; the librdkafka member
    restarts with group.protocol=consumer: the group becomes a consumer group around the
    kafka-python member, which goes on through JoinGroup/SyncGroup/Heartbeat; when the
    consumer-protocol member leaves, the group is classic again. The offsets stay throughout."""
    kp = kp_consumer(groupkeeper.bootstrap, "migrating", TOPIC)
    old = CK(groupkeeper.bootstrap, "migrating", TOPIC)
    new = None
    try:
        # kafka-python's rejoins here wait for librdkafka's: each within one poll (poll_until)
        poll_until(lambda: kp_assigned(kp) and old.assigned and not kp_assigned(kp) & old.assigned
                   and kp_assigned(kp) | old.assigned == ALL, kp, old, kp_poll_ms=3000)
        kp_commit(kp, {TopicPartition(t, p): OffsetAndMetadata(300 + p, "", -1) for t, p in kp_assigned(kp)})
        old.consumer.commit(offsets=[CKPartition(t, p, 300 + p) for t, p in old.assigned], asynchronous=False)
        old.consumer.close()
        new = consumer(groupkeeper, "migrating")
        groupkeeper.wait_for_log("group upgraded to the consumer protocol", group="migrating")
        poll_until(lambda: kp_assigned(kp) and new.assigned and not kp_assigned(kp) & new.assigned
                   and kp_assigned(kp) | new.assigned == ALL, kp, new, kp_poll_ms=3000)
        raw = RawConnection(groupkeeper.port)
        try:
            described = raw.call(CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["migrating"]}).groups[0]
            assert described.error_code == E.NONE  # a mixed group, described member by member (v1):
            assert sorted((m.member_type, m.client_id[:5]) for m in described.members) == [
                (0, "kafka"), (1, "rdkaf")]  # kafka-python still classic, librdkafka on the consumer protocol
        finally:
            raw.close()
        mine = kp_assigned(kp)  # its commit as a classic member of a consumer group: accepted
        kp_commit(kp, {TopicPartition(t, p): OffsetAndMetadata(400 + p, "", -1) for t, p in mine})
        new.consumer.close()  # the last consumer-protocol member leaves: classic again
        groupkeeper.wait_for_log("group downgraded to the classic protocol", group="migrating")
        poll_until(lambda: kp_assigned(kp) == ALL, kp, kp_poll_ms=3000)
        committed = {p: kp.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)}
        assert committed == {p: 400 + p if (TOPIC, p) in mine else 300 + p for p in range(PARTITIONS)}
        groupkeeper.wait_for_log("rebalance completed", group="migrating")  # a classic generation again
    finally:
        kp.close()


def test_what_a_member_would_make_the_group_keep_is_bounded(groupkeeper):
    raw = RawConnection(groupkeeper.port)
    try:
        def join(**extra):
            body = {"group_id": "bounded", "member_id": "m-1", "member_epoch": 0, "rebalance_timeout_ms": 1000,
                    "subscribed_topic_names": [TOPIC], **extra}
            return raw.call(CONSUMER_GROUP_HEARTBEAT, 1, body)

        for bad in ({"member_id": "m" * 1025}, {"instance_id": "i" * 1025},
                    {"subscribed_topic_names": ["t" * 250]}, {"subscribed_topic_names": [f"t{n}" for n in range(10_001)]},
                    {"subscribed_topic_regex": "o" * 4097}, {"subscribed_topic_names": None}, {"member_id": ""}):
            answer = join(**bad)
            assert answer.error_code == E.INVALID_REQUEST and answer.error_message, bad
        assert join(subscribed_topic_regex="(").error_code == E.INVALID_REGULAR_EXPRESSION
        good = join()
        assert good.error_code == E.NONE and good.member_epoch == 1
        assert good.assignment.topic_partitions[0].partitions == list(range(PARTITIONS))
    finally:
        raw.close()
