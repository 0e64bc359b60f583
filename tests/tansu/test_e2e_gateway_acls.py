"""The gateway with ACLs, with real parts: Tansu behind `groupkeeper run --gateway` with a
SASL_PLAINTEXT listener (SCRAM-SHA-512 users made by `groupkeeper users`) and `acls`, so
that relayed requests are authorized for the client's principal before they reach the
broker (where the gateway has every right): unmodified librdkafka and kafka-python clients
produce and consume what their ACLs allow (transactions too, with Write on their
transactional id), and are told TOPIC_AUTHORIZATION_FAILED (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
for the rest, as a broker would tell them; a super user may do anything."""

from __future__ import annotations

import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer, KafkaError, KafkaException, Producer as CKProducer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import TopicAuthorizationFailedError
from kafka.structs import TopicPartition as KPPartition

from coordinator.store.zkserver import free_port
from protocol.schemas import API_VERSIONS
from tests.support.clients import SecureConnection
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.tansu import Tansu
from tests.tansu.test_e2e_gateway import FAST, read_values

ALLOWED, FORBIDDEN, DESCRIBED = "acl-allowed", "acl-forbidden", "acl-described"  # the last: Describe only
GROUP = "acl-group"
TRANSACTIONAL_PREFIX = "alice-tx-"  # alice may Write on the transactional ids it starts
PASSWORDS = {"alice": "alice-secret", "admin": "admin-secret"}


class Setup:
    def __init__(self, tmp, zookeeper):
        self.tmp = tmp
        self.tansu = Tansu(tmp)
        self.port = free_port()
        self.gateway = CoordinatorProcess(
            zookeeper, tmp, listeners=(f"SASL_PLAINTEXT://127.0.0.1:{self.port}",), gateway=self.tansu.bootstrap,
            acls=True, super_users=["User:admin"], sasl_enabled_mechanisms=["SCRAM-SHA-512"], **FAST)
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.tansu.start()
        for topic in (ALLOWED, FORBIDDEN, DESCRIBED):
            self.tansu.create_topic(topic, 2)
        pin_node_ports(self.gateway, [self.tansu.node_id], 2)
        for name, password in PASSWORDS.items():
            secret = self.tmp / f"{name}.password"
            secret.write_text(password + "\n")
            self.gateway.cli("users", "add", name, "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret))
        for operation in ("Write", "Read"):
            self.acl("--operation", operation, "--topic", ALLOWED)
        self.acl("--operation", "Describe", "--topic", DESCRIBED)
        self.acl("--operation", "Read", "--group", GROUP)
        self.acl("--operation", "Write", "--transactional-id", TRANSACTIONAL_PREFIX, "--resource-pattern-type",
                 "prefixed")
        self.gateway.start()
        self.gateway.wait_for_log("broker node reachable", node=self.tansu.node_id)

    def acl(self, *args: str) -> None:
        self.gateway.cli("acls", "add", "--allow-principal", "User:alice", *args)

    def ck(self, user: str, **config) -> dict:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": PASSWORDS[user], **config}

    def kafka_python(self, user: str) -> dict:
        return {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": user,
                "sasl_plain_password": PASSWORDS[user]}

    def stop(self) -> None:
        try:
            assert self.gateway.stop() == 0
        finally:
            self.tansu.stop()


@pytest.fixture(scope="module")
def setup(zookeeper, tmp_path_factory):
    s = Setup(tmp_path_factory.mktemp("gateway-acls"), zookeeper)
    try:
        s.start()
        yield s
    finally:
        s.stop()


def produce(setup: Setup, user: str, topic: str, values: list[bytes], **config) -> list:
    """Delivery errors of a librdkafka producer as `user` (empty: every record delivered)."""
    failed = []
    producer = CKProducer(setup.ck(user, **{"linger.ms": 5, "message.timeout.ms": 15000, **config}))
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: err and failed.append(err))
        producer.poll(0)
    producer.flush(30)
    return failed


def test_a_user_produces_and_consumes_its_topic_in_its_group(setup):
    values = [f"v{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(200)]
    assert produce(setup, "alice", ALLOWED, values, **{"enable.idempotence": True}) == []
    consumer = CKConsumer(setup.ck("alice", **{"group.id": GROUP, "auto.offset.reset": "earliest",
                                                "enable.auto.commit": False}))
    try:
        consumer.subscribe([ALLOWED])
        read = read_values(consumer, len(values))
        assert sorted(read) == sorted(values)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # kafka-python asks for fetch sessions (KIP-227); through the gateway with ACLs it gets none
    consumer = KafkaConsumer(**setup.kafka_python("alice"), group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([KPPartition(ALLOWED, 0), KPPartition(ALLOWED, 1)])
        read, deadline = [], time.monotonic() + 60
        while not set(values) <= set(read) and time.monotonic() < deadline:
            read += [r.value for records in consumer.poll(timeout_ms=500).values() for r in records]
        assert set(values) <= set(read)
    finally:
        consumer.close()


def test_producing_to_a_topic_without_write_is_topic_authorization_failed(setup):
    failed = produce(setup, "alice", FORBIDDEN, [b"x", b"y"])
    assert failed and {e.code() for e in failed} == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    producer = KafkaProducer(**setup.kafka_python("alice"), max_block_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(FORBIDDEN, b"z").get(timeout=15)
        producer.send(ALLOWED, b"kafka-python").get(timeout=15)  # and what it may do, it does
    finally:
        producer.close()
    assert produce(setup, "admin", FORBIDDEN, [b"from the super user"]) == []


def test_reading_a_topic_without_read_is_topic_authorization_failed(setup):
    assert produce(setup, "admin", DESCRIBED, [b"secret"] * 5) == []
    consumer = CKConsumer(setup.ck("alice", **{"group.id": GROUP, "auto.offset.reset": "earliest",
                                                "enable.auto.commit": False}))
    try:  # Describe but not Read: its Fetch is denied
        consumer.assign([TopicPartition(DESCRIBED, 0, 0), TopicPartition(DESCRIBED, 1, 0)])
        deadline, errors, read = time.monotonic() + 20, set(), []
        while time.monotonic() < deadline and not errors:
            message = consumer.poll(0.5)
            if message is not None:
                (errors.add(message.error().code()) if message.error() else read.append(message.value()))
        assert errors == {KafkaError.TOPIC_AUTHORIZATION_FAILED} and read == []
    finally:
        consumer.close()
    consumer = KafkaConsumer(**setup.kafka_python("alice"), group_id=GROUP, auto_offset_reset="earliest")
    try:  # not even Describe: the subscription's Metadata is denied
        consumer.subscribe([FORBIDDEN])
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(40):
                assert not any(consumer.poll(timeout_ms=500).values())
    finally:
        consumer.close()


def test_creating_topics_needs_create_which_a_super_user_has(setup):
    name = f"acl-new-{uuid.uuid4().hex[:6]}"
    alice = AdminClient(setup.ck("alice"))
    error = alice.create_topics([NewTopic(name, 1)], operation_timeout=10)[name].exception(timeout=20)
    assert error is not None and error.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = AdminClient(setup.ck("admin"))
    assert admin.create_topics([NewTopic(name, 1)], operation_timeout=10)[name].result(timeout=20) is None
    deadline = time.monotonic() + 20
    while name not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert name not in alice.list_topics(timeout=10).topics


def test_metadata_of_every_topic_lists_only_what_the_user_may_describe(setup):
    alice = AdminClient(setup.ck("alice")).list_topics(timeout=10)
    assert set(alice.topics) == {ALLOWED, DESCRIBED}
    assert alice.brokers  # the node ports (and the coordinator) still listed
    everything = AdminClient(setup.ck("admin")).list_topics(timeout=10)
    assert {ALLOWED, FORBIDDEN, DESCRIBED} <= set(everything.topics)
    named = AdminClient(setup.ck("alice")).list_topics(FORBIDDEN, timeout=10).topics[FORBIDDEN]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_transactional_producer_needs_write_on_its_transactional_id(setup):
    producer = CKProducer(setup.ck("alice", **{"transactional.id": f"tx-{uuid.uuid4().hex[:6]}"}))
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(20)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_transactional_producer_with_write_on_its_transactional_id_commits(setup):
    values = [f"tx{i}-{uuid.uuid4().hex[:6]}".encode() for i in range(20)]
    failed = []
    producer = CKProducer(setup.ck("alice", **{"transactional.id": f"{TRANSACTIONAL_PREFIX}{uuid.uuid4().hex[:6]}",
                                               "message.timeout.ms": 15000}))
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(ALLOWED, value, on_delivery=lambda err, msg: err and failed.append(err))
    producer.commit_transaction(30)
    assert failed == []
    consumer = CKConsumer(setup.ck("alice", **{"group.id": GROUP, "isolation.level": "read_committed",
                                                "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    try:
        consumer.assign([TopicPartition(ALLOWED, 0, 0), TopicPartition(ALLOWED, 1, 0)])
        read, deadline = [], time.monotonic() + 60
        while not set(values) <= set(read) and time.monotonic() < deadline:
            read += read_values(consumer, len(values), timeout=2)
        assert set(values) <= set(read)
    finally:
        consumer.close()


def test_configs_are_described_only_where_the_user_may(setup):
    alice = AdminClient(setup.ck("alice"))
    futures = alice.describe_configs([ConfigResource("topic", ALLOWED), ConfigResource("topic", FORBIDDEN)])
    error = next(f for r, f in futures.items() if r.name == FORBIDDEN).exception(timeout=20)
    assert error is not None and error.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    allowed = next(f for r, f in futures.items() if r.name == ALLOWED).exception(timeout=20)
    assert allowed is not None and allowed.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # no DescribeConfigs
    admin = AdminClient(setup.ck("admin"))
    (future,) = admin.describe_configs([ConfigResource("topic", FORBIDDEN)]).values()
    assert future.exception(timeout=20) is None or future.exception().args[0].code() != \
        KafkaError.TOPIC_AUTHORIZATION_FAILED  # relayed: whatever the broker makes of it


def test_apis_the_gateway_cannot_authorize_are_not_advertised_and_close_the_connection(setup):
    # DescribeTopicPartitions v0 (key 75, flexible; Tansu serves it) for one topic, by hand
    name = ALLOWED.encode()
    unmapped = struct.pack(">hhih3s", 75, 0, 99, 3, b"raw") + b"\x00" + bytes([2, len(name) + 1]) + name + \
        b"\x00" + struct.pack(">i", 2000) + b"\xff\x00"
    alice = SecureConnection(setup.port, None, "alice", PASSWORDS["alice"])
    try:
        versions = {k.api_key: (k.min_version, k.max_version) for k in alice.call(API_VERSIONS, 2, {}).api_keys}
        assert not {21, 29, 75} & set(versions)  # DeleteRecords, DescribeAcls, DescribeTopicPartitions
        assert versions[0] == (3, 11) and versions[1][1] <= 14 and versions[3][0] == 4  # Produce, Fetch, Metadata
        alice.sock.sendall(struct.pack(">i", len(unmapped)) + unmapped)
        assert alice.sock.recv(100) == b""  # closed
    finally:
        alice.close()
    admin = SecureConnection(setup.port, None, "admin", PASSWORDS["admin"])
    try:  # a super user's passes, as bytes, and the broker answers it
        admin.sock.sendall(struct.pack(">i", len(unmapped)) + unmapped)
        size, correlation_id = struct.unpack(">ii", admin.sock.recv(8))
        assert correlation_id == 99 and size >= 4
    finally:
        admin.close()


def test_denials_are_counted(setup):
    _, text = setup.gateway.scrape()
    counted = [line for line in text.splitlines() if line.startswith("groupkeeper_authorization_denials_total{")
               and 'resource_type="Topic"' in line]
    assert counted and sum(float(line.rsplit(" ", 1)[1]) for line in counted) > 0
    transactional = [line for line in text.splitlines() if line.startswith("groupkeeper_authorization_denials_total{")
                     and 'resource_type="TransactionalId"' in line]  # the refused transactional producer
    assert transactional and sum(float(line.rsplit(" ", 1)[1]) for line in transactional) > 0
