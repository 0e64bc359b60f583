"""The gateway in front of a three-node Apache Kafka 4.4 cluster, with unmodified clients
bootstrapped from groupkeeper: a group of the Java client, librdkafka and kafka-python
sharing the partitions, static members coming back to their partitions, the Java client's
KIP-848 regular-expression subscription. Each group is coordinated by groupkeeper and
unknown to Kafka's own coordinators. (One client at a time, on Kafka and on Tansu, is the
conformance matrix: tests/conformance.)"""

from __future__ import annotations


import pytest

from tests.support.clients import committed, held_by_groupkeeper, produce_values
from tests.support.kafka import broker_groups, create_topic
from tests.support.members import CLIENTS, Member

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)


def test_java_librdkafka_and_kafka_python_share_one_group(kafka, gateway, tmp_path):
    topic, group, partitions = "mixed", "mixed-readers", 6
    create_topic(kafka, topic, partitions)
    # range: the one strategy all three offer by default (Java: range, cooperative-sticky;
    # librdkafka: range, roundrobin; kafka-python: range, roundrobin)
    # Each commits by its client's auto-commit, so that once everything read is committed,
    # stopping them one by one (each leave a rebalance; an eager member gives its partitions
    # up as that starts, librdkafka without a commit) moves nothing that has not been read.
    members = [Member(CLIENTS[name], gateway.bootstrap, group, tmp_path, topics=(topic,), strategy="range",
                      auto_commit_ms=200)
               for name in ("Java (classic)", "librdkafka (classic)", "kafka-python (classic)")]
    try:
        everything = {f"{topic}-{p}" for p in range(partitions)}

        def shared(_member=None) -> bool:
            held = [m.assigned for m in members]
            return all(held) and sum(map(len, held)) == partitions and set().union(*held) == everything

        members[0].wait_for(lambda _: shared(), what="three members sharing six partitions")
        values = produce_values(gateway.bootstrap, topic, 600, "mixed", partitions)
        members[0].wait_for(lambda _: shared() and sum(m.count for m in members) >= len(values),
                            what="the three together reading every record")
        members[0].wait_for(lambda _: sum(committed([gateway.port], group).values()) == len(values),
                            what="everything read committed", timeout=30)
        assert shared(), [m.assignments for m in members]
        results = [m.stop() for m in members]
    finally:
        for member in members:
            member.kill()
    read = [v for r in results for v in r["values"]]
    assert sorted(read) == sorted(values)  # no record twice: nothing moved while they read
    assert sum(committed([gateway.port], group).values()) == len(values)
    held_by_groupkeeper(gateway.port, broker_groups(kafka), group)


def test_static_members_come_back_to_their_partitions(kafka, gateway, tmp_path):
    """Two static members (the Java client and librdkafka); the Java member closes and comes
    back with its instance id within the session: it holds what it held, and librdkafka's
    assignment never changed (no rebalance)."""
    topic, group = "static", "static-readers"
    create_topic(kafka, topic, 4)
    common = dict(topics=(topic,), strategy="range", session_timeout_ms=30_000)
    stays = Member(CLIENTS["librdkafka (classic)"], gateway.bootstrap, group, tmp_path, instance_id="stays", **common)
    comes_back = Member(CLIENTS["Java (classic)"], gateway.bootstrap, group, tmp_path, instance_id="back", **common)
    try:
        stays.wait_for(lambda m: len(m.assigned) == 2 and len(comes_back.assigned) == 2, what="two partitions each")
        before, seen = comes_back.assigned, len(stays.assignments)
        comes_back.stop()
        comes_back = Member(CLIENTS["Java (classic)"], gateway.bootstrap, group, tmp_path, instance_id="back", **common)
        comes_back.wait_for(lambda m: m.assigned, what="its partitions back")
        assert comes_back.assigned == before
        produce_values(gateway.bootstrap, topic, 40, "static", 4)
        stays.wait_for(lambda m: m.count >= 20, what="reading its half")
        comes_back.wait_for(lambda m: m.count >= 20, what="reading its half")
        assert len(stays.assignments) == seen, stays.assignments
        assert stays.stop()["read"] == 20 and comes_back.stop()["read"] == 20
    finally:
        stays.kill()
        comes_back.kill()
    held_by_groupkeeper(gateway.port, broker_groups(kafka), group)


def test_the_java_clients_regular_expression_subscription(kafka, gateway, tmp_path):
    """KIP-848: the Java client sends its pattern to the coordinator, which resolves it
    (RE2, as Kafka does) against the cluster's topics, including one made after it joined."""
    for name in ("regex-a", "regex-b", "other-regex"):
        create_topic(kafka, name, 2)
    member = Member(CLIENTS["Java (consumer)"], gateway.bootstrap, "regex-readers", tmp_path, pattern="regex-.*")
    try:
        member.wait_for(lambda m: m.assigned == {"regex-a-0", "regex-a-1", "regex-b-0", "regex-b-1"},
                        what="the two matching topics")
        create_topic(kafka, "regex-c", 2)
        member.wait_for(lambda m: {"regex-c-0", "regex-c-1"} <= m.assigned, what="the topic made later")
        values = [v for t in ("regex-a", "regex-b", "regex-c", "other-regex")
                  for v in produce_values(gateway.bootstrap, t, 10, t, 2)]
        member.wait_for(lambda m: m.count >= 30, what="every matching record")
        result = member.stop()
    finally:
        member.kill()
    assert sorted(result["values"]) == sorted(v for v in values if v.startswith("regex-"))
    assert result["committed"] == {f"regex-{t}-{p}": 5 for t in "abc" for p in (0, 1)}
    held_by_groupkeeper(gateway.port, broker_groups(kafka), "regex-readers")
