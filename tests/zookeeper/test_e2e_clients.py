"""Unmodified Kafka clients against a real `groupkeeper run` and a real ZooKeeper:
kafka-python and confluent-kafka (librdkafka) consumers in one group, their admin clients."""

from __future__ import annotations

import textwrap

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, ConsumerGroupType, KafkaError, KafkaException
from confluent_kafka import TopicPartition as CKPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from tests.support.clients import CK, kill_and_take_over, kp_assigned, kp_commit, kp_consumer, member_process, poll_until
from tests.support.coordinator_process import serving

TOPIC, PARTITIONS = "orders", 6
ALL = {(TOPIC, p) for p in range(PARTITIONS)}


@pytest.fixture
def groupkeeper(zookeeper, tmp_path):
    with serving(zookeeper, tmp_path, {TOPIC: PARTITIONS}) as process:
        yield process


def test_mixed_group_then_clean_leave_then_offsets_read_back(groupkeeper):
    # librdkafka first: the kafka-python member then joins a formed group and never has to
    # rejoin, which kafka-python 3.0.12 sometimes fails to finish (see tests/support/clients.py)
    ck = CK(groupkeeper.bootstrap, "mixed", TOPIC)
    try:
        poll_until(lambda: ck.assigned == ALL, ck)
        kp = kp_consumer(groupkeeper.bootstrap, "mixed", TOPIC)
        poll_until(lambda: kp_assigned(kp) and ck.assigned and kp_assigned(kp) | ck.assigned == ALL
                   and not kp_assigned(kp) & ck.assigned, kp, ck)
        kp_commit(kp, {TopicPartition(t, p): OffsetAndMetadata(100 + p, "kp", -1) for t, p in kp_assigned(kp)})
        ck.consumer.commit(offsets=[CKPartition(t, p, 200 + p) for t, p in ck.assigned], asynchronous=False)
        mine = kp_assigned(kp)
        kp.close()  # a clean leave: its partitions move to the other member
        poll_until(lambda: ck.assigned == ALL, ck)
    finally:
        ck.consumer.close()

    expected = {p: (100 + p if (TOPIC, p) in mine else 200 + p) for p in range(PARTITIONS)}
    admin = KafkaAdminClient(bootstrap_servers=groupkeeper.bootstrap)
    try:
        offsets = admin.list_group_offsets({"mixed": None})["mixed"]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == expected
    finally:
        admin.close()
    ck_admin = AdminClient({"bootstrap.servers": groupkeeper.bootstrap})
    future = ck_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("mixed")])["mixed"]
    assert {p.partition: p.offset for p in future.result(timeout=30).topic_partitions} == expected


def test_a_killed_consumer_loses_its_partitions_after_the_session_timeout(groupkeeper, tmp_path):
    script = tmp_path / "victim.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from kafka import KafkaConsumer
        c = KafkaConsumer(bootstrap_servers={groupkeeper.bootstrap!r}, group_id="kill",
                          enable_auto_commit=False, session_timeout_ms=3000, heartbeat_interval_ms=300)
        while not c.partitions_for_topic({TOPIC!r}):  # see tests/support/clients.py
            pass
        c.subscribe([{TOPIC!r}])
        while not c.assignment():
            c.poll(timeout_ms=100)
        print("assigned", flush=True)
        while True:
            c.poll(timeout_ms=100)
    """))
    with member_process(script) as victim:
        ck = CK(groupkeeper.bootstrap, "kill", TOPIC)  # joins once the victim is a member: it moves partitions
        poll_until(lambda: ck.assigned and len(ck.assigned) < PARTITIONS, ck)
        kill_and_take_over(groupkeeper, victim, ck, "kill", ALL, at_least=2.0)  # its session: 3 s


def test_seed_commit_in_the_revoke_callback_is_kept_for_the_next_owner(groupkeeper):
    """Seed 003: the owner commits in its revoke callback, before it rejoins; the next owner
    of each moved partition starts exactly at that commit."""
    committed_on_revoke: dict[int, int] = {}

    def commit_on_revoke(consumer, partitions):
        offsets = [CKPartition(p.topic, p.partition, 500 + p.partition) for p in partitions]
        if offsets:
            consumer.commit(offsets=offsets, asynchronous=False)
            committed_on_revoke.update({p.partition: p.offset for p in offsets})

    first = CK(groupkeeper.bootstrap, "revoke", TOPIC, on_revoke=commit_on_revoke)
    poll_until(lambda: first.assigned == ALL, first)
    second = kp_consumer(groupkeeper.bootstrap, "revoke", TOPIC)
    try:
        poll_until(lambda: first.assigned and kp_assigned(second) and
                   first.assigned | kp_assigned(second) == ALL, first, second)
        moved = kp_assigned(second)
        assert {p: committed_on_revoke.get(p) for _, p in moved} == {p: 500 + p for _, p in moved}
        assert {p: second.committed(TopicPartition(t, p)) for t, p in moved} == {p: 500 + p for _, p in moved}
    finally:
        second.close()
        first.consumer.close()


def test_both_admin_clients_list_and_describe_groups(groupkeeper):
    kp = kp_consumer(groupkeeper.bootstrap, "described", TOPIC, client_id="kp-client")
    try:
        poll_until(lambda: kp_assigned(kp) == ALL, kp)
        admin = KafkaAdminClient(bootstrap_servers=groupkeeper.bootstrap)
        try:
            assert "described" in {g["group_id"] for g in admin.list_groups()}
            described = admin.describe_groups(["described"])["described"]
            assert described["error"] is None and described["group_state"] == "Stable"
            assert described["protocol_type"] == "consumer" and described["protocol_data"] == "range"
            (member,) = described["members"]
            assert member["client_id"] == "kp-client"
            assigned = {(tp["topic"], p) for tp in member["member_assignment"]["assigned_partitions"]
                        for p in tp["partitions"]}
            assert assigned == ALL
            missing = admin.describe_groups(["no-such-group"])["no-such-group"]
            assert missing["group_state"] == "Dead" and missing["error"] is None
        finally:
            admin.close()
        ck_admin = AdminClient({"bootstrap.servers": groupkeeper.bootstrap})
        listed = ck_admin.list_consumer_groups().result(timeout=30)
        assert "described" in {g.group_id for g in listed.valid}
        # ListGroups v5: by type, and each with its own (KIP-848's name for these groups: classic)
        classic = ck_admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(timeout=30)
        assert {g.type for g in classic.valid if g.group_id == "described"} == {ConsumerGroupType.CLASSIC}
        consumer = ck_admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=30)
        assert consumer.valid == [] and consumer.errors == []
        description = ck_admin.describe_consumer_groups(["described"])["described"].result(timeout=30)
        assert description.group_id == "described" and len(description.members) == 1
        assert {(tp.topic, tp.partition) for tp in description.members[0].assignment.topic_partitions} == ALL
    finally:
        kp.close()


def test_the_metrics_endpoint_counts_what_the_group_did(groupkeeper):
    kp = kp_consumer(groupkeeper.bootstrap, "measured", TOPIC)
    try:
        poll_until(lambda: kp_assigned(kp) == ALL, kp)
        groupkeeper.wait_for_log("rebalance completed", group="measured")
        status, text = groupkeeper.scrape()
    finally:
        kp.close()
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("groupkeeper_rebalances_total", (("reason", "member joined"),))] >= 1
    assert samples[("groupkeeper_rebalance_duration_seconds_count", ())] >= 1
    assert samples[("groupkeeper_requests_total", (("api", "JoinGroup"), ("error", "NONE")))] >= 1
    assert samples[("groupkeeper_requests_total", (("api", "SyncGroup"), ("error", "NONE")))] >= 1
    assert samples[("groupkeeper_groups", (("state", "Stable"), ("type", "classic")))] == 1
    assert samples[("groupkeeper_owned_group_partitions", ())] == 50
    assert samples[("groupkeeper_connections", ())] >= 1
    assert not any("member" in label for _, labels in samples for label, _ in labels)
    groupkeeper.wait_for_log("member removed", group="measured", reason="left")
    _, after = groupkeeper.scrape()
    assert 'groupkeeper_members_removed_total{reason="left"} 1.0' in after
    assert groupkeeper.scrape("/other")[0] == 404


def test_admin_clients_delete_only_empty_groups(groupkeeper):
    # the member is librdkafka: a kafka-python member can wedge in a rejoin it started on its
    # own (tests/support/pymember.py's kp_subscribe), and this test is about the admin clients
    member = CK(groupkeeper.bootstrap, "doomed", TOPIC)
    ck_admin = AdminClient({"bootstrap.servers": groupkeeper.bootstrap})
    try:
        poll_until(lambda: member.assigned == ALL, member)
        member.consumer.commit(offsets=[CKPartition(TOPIC, p, 5) for p in range(PARTITIONS)], asynchronous=False)
        with pytest.raises(KafkaException) as refused:
            ck_admin.delete_consumer_groups(["doomed"])["doomed"].result(timeout=30)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.consumer.close()
    groupkeeper.wait_for_log("member removed", group="doomed", reason="left")
    ck_admin.delete_consumer_groups(["doomed"])["doomed"].result(timeout=30)
    admin = KafkaAdminClient(bootstrap_servers=groupkeeper.bootstrap)
    try:
        assert admin.describe_groups(["doomed"])["doomed"]["group_state"] == "Dead"
        assert admin.list_group_offsets({"doomed": None})["doomed"] == {}
        assert "doomed" not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()


def test_cooperative_sticky_librdkafka_members_move_only_what_they_must(groupkeeper):
    first = CK(groupkeeper.bootstrap, "cooperative", TOPIC, strategy="cooperative-sticky")
    second = None
    try:
        poll_until(lambda: first.assigned == ALL, first)
        assert first.history == [("assign", ALL)]
        second = CK(groupkeeper.bootstrap, "cooperative", TOPIC, strategy="cooperative-sticky")
        poll_until(lambda: len(first.assigned) == 3 and len(second.assigned) == 3, first, second)
        assert first.assigned | second.assigned == ALL
        moved = second.assigned
        # the first member gave up exactly the moved partitions and kept the rest throughout
        revoked = set().union(*(ps for kind, ps in first.history if kind == "revoke"))
        assert revoked == moved
        assert all(not ps for kind, ps in first.history[1:] if kind == "assign")
        # and nobody held a moved partition while its previous owner did (two rebalances)
        assert [kind for kind, ps in second.history if ps] == ["assign"]
        completed = [e["generation"] for e in groupkeeper.events()
                     if e.get("event") == "rebalance completed" and e.get("group") == "cooperative"]
        assert len(completed) >= 3  # first alone, the revoking round, the follow-up
    finally:
        first.consumer.close()
        if second is not None:
            second.consumer.close()
