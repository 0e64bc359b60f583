"""Issue 31 item 5: topic ACLs on the consumer protocol, as Kafka 4 checks them
(KAFKA-18813), against one real coordinator with ACLs on and a SASL_PLAINTEXT listener
(SCRAM-SHA-512). A ConsumerGroupHeartbeat whose subscription names a topic the client
may not describe is refused TOPIC_AUTHORIZATION_FAILED and changes nothing; so is one
whose expression matches such a topic, also when the topic appears later; a
ConsumerGroupDescribe of a group whose assignments name such a topic is refused for that
group, its members not shown. ACL changes take effect without a restart.

The PLAINTEXT listener is the operators' (its ANONYMOUS principal a super user): it makes
the topics, reads topic ids and sees every group as it is."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError

from coordinator.store.zkserver import free_port
from protocol import ErrorCode as E
from protocol.schemas import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, METADATA
from tests.support.clients import CK, RawConnection, SecureConnection, poll_until
from tests.support.coordinator_process import CoordinatorProcess

MECHANISM = "SCRAM-SHA-512"
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
TOPICS = {"orders": 2, "payroll": 1, "orders-secret": 1, "invoices": 1}


class Setup:
    def __init__(self, process: CoordinatorProcess, sasl_port: int):
        self.process, self.sasl_port = process, sasl_port

    def connect(self, user: str) -> SecureConnection:
        connection = SecureConnection(self.sasl_port, None, user, PASSWORDS[user], MECHANISM)
        assert connection.authenticated == E.NONE
        return connection

    def acl(self, *args: str) -> None:
        self.process.cli("acls", *args)

    def operator(self, api, version: int, body: dict):
        connection = RawConnection(self.process.port)
        try:
            return connection.call(api, version, body)
        finally:
            connection.close()

    def topic_ids(self) -> dict:
        answer = self.operator(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
        return {t.name: t.topic_id for t in answer.topics}

    def described(self, group: str):
        [found] = self.operator(CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group]}).groups
        return found


@pytest.fixture(scope="module")
def acls_on(zookeeper, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("topic-acls")
    port = free_port()
    process = CoordinatorProcess(zookeeper, tmp, listeners=(f"SASL_PLAINTEXT://127.0.0.1:{port}",), acls=True,
                                 super_users=["User:ANONYMOUS"], sasl_enabled_mechanisms=[MECHANISM])
    setup = Setup(process, port)
    for name, password in PASSWORDS.items():
        secret = tmp / f"{name}.password"
        secret.write_text(password + "\n")
        process.cli("users", "add", name, "--mechanism", MECHANISM, "--password-file", str(secret))
    setup.acl("add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "team-",
              "--resource-pattern-type", "prefixed")
    setup.acl("add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders")
    setup.acl("add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "invoices")
    setup.acl("add", "--allow-principal", "User:bob", "--operation", "Describe", "--group", "team-",
              "--resource-pattern-type", "prefixed")
    process.start()
    try:
        for name, partitions in TOPICS.items():
            process.topic(name, partitions)
        yield setup
    finally:
        assert process.stop() == 0


def _heartbeat(connection, group: str, member: str, epoch: int, **fields):
    return connection.call(CONSUMER_GROUP_HEARTBEAT, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch,
        "rebalance_timeout_ms": 10_000 if epoch == 0 else -1, **fields})


def _assigned(answer, ids: dict) -> set[tuple[str, int]]:
    names = {topic_id: name for name, topic_id in ids.items()}
    return {(names[t.topic_id], p) for t in answer.assignment.topic_partitions for p in t.partitions}


def _until(condition, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return result


def test_a_subscription_naming_a_topic_it_may_not_describe_is_refused(acls_on):
    ids = acls_on.topic_ids()
    alice = acls_on.connect("alice")
    try:
        refused = _heartbeat(alice, "team-names", "a-1", 0, subscribed_topic_names=["orders", "payroll"])
        assert refused.error_code == E.TOPIC_AUTHORIZATION_FAILED and refused.assignment is None
        assert acls_on.described("team-names").error_code == E.GROUP_ID_NOT_FOUND  # nothing joined
        joined = _heartbeat(alice, "team-names", "a-1", 0, subscribed_topic_names=["orders"])
        assert joined.error_code == E.NONE and _assigned(joined, ids) == {("orders", 0), ("orders", 1)}
        # a change of subscription to such a topic is refused, and the one it had is kept
        changed = _heartbeat(alice, "team-names", "a-1", joined.member_epoch, subscribed_topic_names=["payroll"])
        assert changed.error_code == E.TOPIC_AUTHORIZATION_FAILED
        [member] = acls_on.described("team-names").members
        assert member.subscribed_topic_names == ["orders"]
        assert _heartbeat(alice, "team-names", "a-1", joined.member_epoch).error_code == E.NONE
    finally:
        alice.close()


def test_an_expression_resolves_to_the_topics_it_may_describe_only_even_one_made_later(acls_on):
    """As Kafka 4 (KAFKA-18813): a member's expression leaves out the topics its client may
    not describe, and goes on with the rest; a topic made later that it may not describe is
    never assigned to it, and one it may describe once the ACLs allow it is."""
    ids = acls_on.topic_ids()
    alice = acls_on.connect("alice")
    try:
        joined = _heartbeat(alice, "team-regex", "a-1", 0, subscribed_topic_regex="orders.*")  # and orders-secret
        assert joined.error_code == E.NONE and _assigned(joined, ids) == {("orders", 0), ("orders", 1)}
        epoch, seen = joined.member_epoch, [joined]
        acls_on.process.topic("orders-later", 1)  # matches its expression; it may not describe it
        acls_on.acl("add", "--allow-principal", "User:bob", "--operation", "Describe", "--topic", "orders-later")

        def beats(n: int) -> None:
            nonlocal epoch
            for _ in range(n):
                answer = _heartbeat(alice, "team-regex", "a-1", epoch)
                assert answer.error_code == E.NONE
                epoch = answer.member_epoch
                seen.append(answer)
                time.sleep(0.1)

        beats(10)
        assert all(a.assignment is None or _assigned(a, acls_on.topic_ids()) == {("orders", 0), ("orders", 1)}
                   for a in seen)  # neither orders-secret nor orders-later was ever sent to it
        # allowed to describe the new one: it is assigned it, and still not the secret one
        acls_on.acl("add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", "orders-later")

        def assigned_it() -> bool:
            nonlocal epoch
            answer = _heartbeat(alice, "team-regex", "a-1", epoch)
            assert answer.error_code == E.NONE
            epoch = answer.member_epoch
            return answer.assignment is not None and _assigned(answer, acls_on.topic_ids()) == {
                ("orders", 0), ("orders", 1), ("orders-later", 0)}

        _until(assigned_it, "the member was not given the topic it may now describe")
    finally:
        alice.close()


def test_a_description_naming_a_topic_the_client_may_not_describe_is_refused(acls_on):
    alice, bob = acls_on.connect("alice"), acls_on.connect("bob")
    try:
        joined = _heartbeat(alice, "team-described", "a-1", 0, subscribed_topic_names=["orders"])
        assert joined.error_code == E.NONE and joined.assignment.topic_partitions

        def described(connection):
            [group] = connection.call(CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["team-described"]}).groups
            return group

        hidden = described(bob)  # bob may describe the group, not the topic its member is assigned
        assert hidden.error_code == E.TOPIC_AUTHORIZATION_FAILED and hidden.error_message
        assert hidden.members == [] and hidden.group_id == "team-described"
        shown = described(alice)
        assert shown.error_code == E.NONE and [m.member_id for m in shown.members] == ["a-1"]
        assert acls_on.described("team-described").error_code == E.NONE  # a super user sees it
        acls_on.acl("add", "--allow-principal", "User:bob", "--operation", "Describe", "--topic", "orders")
        group = _until(lambda: (g := described(bob)).error_code == E.NONE and g, "bob's new ACL was not applied")
        [member] = group.members
        assert {t.topic_name for t in member.assignment.topic_partitions} == {"orders"}
    finally:
        alice.close()
        bob.close()


def test_librdkafka_is_told_its_subscription_names_a_topic_it_may_not_describe(acls_on):
    """librdkafka on the consumer protocol reports TOPIC_AUTHORIZATION_FAILED to the
    application and keeps trying; given the ACL, it joins and is assigned."""
    acls_on.process.topic("ledger", 1)  # its own: the tests before must not see its ACL
    errors = []
    consumer = CK(f"127.0.0.1:{acls_on.sasl_port}", "team-rdkafka", "orders", "ledger", protocol="consumer", **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": MECHANISM, "sasl.username": "alice",
        "sasl.password": PASSWORDS["alice"], "error_cb": errors.append})
    try:
        def told() -> bool:
            message = consumer.consumer.poll(0.1)
            if message is not None and message.error() is not None:
                errors.append(message.error())
            return any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors)

        _until(told, f"librdkafka was not told: {errors}", timeout=30)
        assert consumer.assigned == set()  # nothing assigned meanwhile
        acls_on.acl("add", "--allow-principal", "User:alice", "--operation", "Describe", "--topic", "ledger")
        poll_until(lambda: consumer.assigned == {("orders", 0), ("orders", 1), ("ledger", 0)}, consumer)
    finally:
        consumer.consumer.close()
