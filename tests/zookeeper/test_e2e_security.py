"""Issue 16 with unmodified clients: kafka-python and confluent-kafka over SASL_SSL with
SCRAM-SHA-512 and over mutual TLS, against one coordinator with ACLs on; wrong passwords,
another group's data, ACL and credential changes without a restart, and clients that do
not speak TLS or skip SASL.

Users and ACLs are made with `groupkeeper users` and `groupkeeper acls`, in ZooKeeper's
Kafka layout; certificates by the test (tests/support/certs.py). The PLAINTEXT loopback listener is
the operators' (its ANONYMOUS principal is a super user), as a deployment might keep one.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time

import pytest
from confluent_kafka import KafkaError, TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError
from kafka.net.sasl.scram import ScramClient
from kafka.structs import OffsetAndMetadata

from tools.kafka_admin import read_exactly
from coordinator.store.zkserver import free_port
from protocol import ErrorCode as E
from protocol.schemas import (API_VERSIONS, CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DELETE_GROUPS, DESCRIBE_GROUPS, FIND_COORDINATOR, JOIN_GROUP, LIST_GROUPS,
                              METADATA, OFFSET_COMMIT, OFFSET_FETCH, SASL_HANDSHAKE)
from tests.support.certs import Authority
from tests.support.clients import CK, RawConnection, RawMember, SecureConnection, kp_assigned, kp_commit, kp_consumer, poll_until
from tests.support.coordinator_process import CoordinatorProcess

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
CAROL = "User:CN=carol,O=Example"  # the mTLS client's principal: its certificate's subject
ORDERS = {("orders", 0), ("orders", 1)}


class Secured:
    def __init__(self, process: CoordinatorProcess, authority: Authority, ports: tuple[int, int, int], tmp):
        self.process, self.authority, self.tmp = process, authority, tmp
        self.sasl_port, self.ssl_port, self.sasl_plaintext_port = ports
        self.carol = authority.issue("CN=carol,O=Example", "carol")

    def user(self, name: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        secret = self.tmp / f"{name}.password"
        secret.write_text(password + "\n")
        self.process.cli("users", "add", name, "--mechanism", mechanism, "--password-file", str(secret))

    def acl(self, *args: str) -> None:
        self.process.cli("acls", *args)

    def connect(self, user: str | None = None, password: str | None = None, **kwargs) -> SecureConnection:
        return SecureConnection(self.sasl_port, self.authority.cafile, user,
                                PASSWORDS.get(user) if password is None else password, **kwargs)

    def kafka_python(self, group: str, user: str, password: str | None = None) -> KafkaConsumer:
        return kp_consumer(f"127.0.0.1:{self.sasl_port}", group, "orders", security_protocol="SASL_SSL",
                           ssl_cafile=self.authority.cafile, sasl_mechanism="SCRAM-SHA-512",
                           sasl_plain_username=user, sasl_plain_password=password or PASSWORDS[user])


@pytest.fixture(scope="module")
def secured(zookeeper, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secured")
    authority = Authority(tmp)
    cert, key = authority.issue("CN=groupkeeper", "server", server=True)
    ports = free_port(), free_port(), free_port()
    process = CoordinatorProcess(
        zookeeper, tmp, listeners=(f"SASL_SSL://127.0.0.1:{ports[0]}", f"SSL://127.0.0.1:{ports[1]}",
                                   f"SASL_PLAINTEXT://127.0.0.1:{ports[2]}"),
        ssl_certfile=cert, ssl_keyfile=key, ssl_cafile=authority.cafile, ssl_client_auth="required",
        acls=True, super_users=["User:ANONYMOUS"], sasl_enabled_mechanisms=["SCRAM-SHA-512", "PLAIN"],
        connection_failed_authentication_delay_ms=20)
    setup = Secured(process, authority, ports, tmp)
    for name, password in PASSWORDS.items():
        setup.user(name, password)
    setup.acl("add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "team-a")
    setup.acl("add", "--allow-principal", "User:bob", "--operation", "Read", "--group", "team-b-",
              "--resource-pattern-type", "prefixed")
    setup.acl("add", "--allow-principal", CAROL, "--operation", "Read", "--group", "mtls")
    setup.acl("add", "--allow-principal", "User:alice", "--allow-principal", "User:bob", "--allow-principal", CAROL,
              "--operation", "Read", "--topic", "orders")
    process.start()
    try:
        process.topic("orders", 2)
        yield setup
    finally:
        assert process.stop() == 0


def _until(condition, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return result


def test_kafka_python_consumes_as_a_group_over_sasl_ssl_with_scram_sha_512(secured):
    consumer = secured.kafka_python("team-a", "alice")
    try:
        poll_until(lambda: kp_assigned(consumer) == ORDERS, consumer)
        kp_commit(consumer, {TopicPartition("orders", 0): OffsetAndMetadata(7, "", -1)})
        assert consumer.committed(TopicPartition("orders", 0)) == 7
    finally:
        consumer.close()
    entry = secured.process.wait_for_log("authenticated", principal="User:alice")
    assert entry["mechanism"] == "SCRAM-SHA-512"


def test_confluent_kafka_consumes_as_a_group_over_sasl_ssl_with_scram_sha_512(secured):
    """bob may read every group whose name starts with team-b- (a prefixed ACL)."""
    consumer = CK(f"127.0.0.1:{secured.sasl_port}", "team-b-ck", "orders", **{
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bob",
        "sasl.password": PASSWORDS["bob"], "ssl.ca.location": secured.authority.cafile})
    try:
        poll_until(lambda: consumer.assigned == ORDERS, consumer)
        consumer.consumer.commit(offsets=[CKTopicPartition("orders", 1, 11)], asynchronous=False)
        [committed] = consumer.consumer.committed([CKTopicPartition("orders", 1)], timeout=10)
        assert committed.offset == 11
    finally:
        consumer.consumer.close()


def test_both_clients_share_a_group_over_mutual_tls_as_their_certificate_subject(secured):
    carol_cert, carol_key = secured.carol
    bootstrap = f"127.0.0.1:{secured.ssl_port}"
    kp = kp_consumer(bootstrap, "mtls", "orders", security_protocol="SSL", ssl_cafile=secured.authority.cafile,
                     ssl_certfile=carol_cert, ssl_keyfile=carol_key)
    ck = CK(bootstrap, "mtls", "orders", **{
        "security.protocol": "SSL", "ssl.ca.location": secured.authority.cafile,
        "ssl.certificate.location": carol_cert, "ssl.key.location": carol_key})
    try:
        # both join at once, so a join waits for the other member: kafka-python's poll is
        # given long enough for it to end inside one poll (poll_until says why)
        poll_until(lambda: len(kp_assigned(kp)) == 1 and len(ck.assigned) == 1
                   and kp_assigned(kp) | ck.assigned == ORDERS, kp, ck, kp_poll_ms=3000)
    finally:
        kp.close()
        ck.consumer.close()
    # no certificate, no connection: the handshake itself fails
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        connection = SecureConnection(secured.ssl_port, secured.authority.cafile)
        connection.call(API_VERSIONS, 0, {})


def test_a_principal_reads_its_groups_only(secured):
    bob = secured.connect("bob")
    alice = secured.connect("alice")
    try:
        assert bob.authenticated == alice.authenticated == E.NONE
        committed = bob.call(OFFSET_COMMIT, 2, {"group_id": "team-b-1", "generation_id_or_member_epoch": -1,
                                                "member_id": "", "retention_time_ms": -1, "topics": [
                                                    {"name": "orders", "partitions": [
                                                        {"partition_index": 0, "committed_offset": 42}]}]})
        assert committed.topics[0].partitions[0].error_code == E.NONE
        # FindCoordinator and Metadata name the listener the client came in on
        found = alice.call(FIND_COORDINATOR, 1, {"key": "team-a"})
        assert (found.error_code, found.port) == (E.NONE, secured.sasl_port)
        assert [b.port for b in alice.call(METADATA, 1, {"topics": []}).brokers] == [secured.sasl_port]
        # alice may not find, join, describe, read the offsets of or delete bob's group
        assert alice.call(FIND_COORDINATOR, 1, {"key": "team-b-1"}).error_code == E.GROUP_AUTHORIZATION_FAILED
        joined = alice.call(JOIN_GROUP, 5, {"group_id": "team-b-1", "session_timeout_ms": 10_000,
                                            "rebalance_timeout_ms": 10_000, "member_id": "",
                                            "protocol_type": "consumer", "protocols": [{"name": "range",
                                                                                       "metadata": b""}]})
        assert joined.error_code == E.GROUP_AUTHORIZATION_FAILED
        assert [g.error_code for g in alice.call(DESCRIBE_GROUPS, 0, {"groups": ["team-b-1"]}).groups] == [
            E.GROUP_AUTHORIZATION_FAILED]
        fetched = alice.call(OFFSET_FETCH, 3, {"group_id": "team-b-1", "topics": None})
        assert fetched.error_code == E.GROUP_AUTHORIZATION_FAILED and not fetched.topics
        assert [r.error_code for r in alice.call(DELETE_GROUPS, 0, {"groups_names": ["team-b-1"]}).results] == [
            E.GROUP_AUTHORIZATION_FAILED]
        listed = {g.group_id for g in alice.call(LIST_GROUPS, 0, {}).groups}
        assert "team-b-1" not in listed and "team-b-1" in {g.group_id for g in bob.call(LIST_GROUPS, 0, {}).groups}
        # a topic it may not read: that partition refused, the others committed
        mixed = alice.call(OFFSET_COMMIT, 2, {"group_id": "team-a", "generation_id_or_member_epoch": -1,
                                              "member_id": "", "retention_time_ms": -1, "topics": [
                                                  {"name": "orders", "partitions": [{"partition_index": 1,
                                                                                     "committed_offset": 3}]},
                                                  {"name": "payroll", "partitions": [{"partition_index": 0,
                                                                                      "committed_offset": 3}]}]})
        assert [(t.name, t.partitions[0].error_code) for t in mixed.topics] == [
            ("orders", E.NONE), ("payroll", E.TOPIC_AUTHORIZATION_FAILED)]
        shown = alice.call(METADATA, 1, {"topics": [{"name": "orders"}, {"name": "payroll"}]})
        assert [(t.name, t.error_code) for t in shown.topics] == [
            ("orders", E.NONE), ("payroll", E.TOPIC_AUTHORIZATION_FAILED)]
        # and the bob's offsets are as bob left them
        kept = bob.call(OFFSET_FETCH, 3, {"group_id": "team-b-1", "topics": None})
        assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                for t in kept.topics] == [("orders", [(0, 42)])]
    finally:
        alice.close()
        bob.close()


def test_acl_and_credential_changes_take_effect_without_a_restart(secured):
    def finds(user: str, group: str) -> E:
        connection = secured.connect(user)
        try:
            return connection.call(FIND_COORDINATOR, 1, {"key": group}).error_code
        finally:
            connection.close()

    assert finds("alice", "team-c") == E.GROUP_AUTHORIZATION_FAILED
    secured.acl("add", "--allow-principal", "User:alice", "--operation", "Describe", "--group", "team-c")
    _until(lambda: finds("alice", "team-c") == E.NONE, "the new ACL was not applied")
    secured.acl("remove", "--force", "--allow-principal", "User:alice", "--operation", "Describe", "--group", "team-c")
    _until(lambda: finds("alice", "team-c") == E.GROUP_AUTHORIZATION_FAILED, "the removed ACL still applies")

    def authenticates(password: str) -> E:
        connection = secured.connect("dave", password)
        try:
            return connection.authenticated
        finally:
            connection.close()

    secured.user("dave", "first")
    _until(lambda: authenticates("first") == E.NONE, "the new user cannot authenticate")
    secured.user("dave", "second")
    _until(lambda: authenticates("first") == E.SASL_AUTHENTICATION_FAILED, "the old password still works")
    assert authenticates("second") == E.NONE
    secured.process.cli("users", "delete", "dave")
    _until(lambda: authenticates("second") == E.SASL_AUTHENTICATION_FAILED, "the deleted user still authenticates")


def test_a_stable_members_heartbeats_follow_its_acls(secured):
    """Heartbeats take the fast path only while the ACLs let the member read its group: a
    denial added meanwhile refuses the next one, and taking it away lets them through."""
    member = RawMember(secured.sasl_plaintext_port, "team-b-hb", "orders")  # bob's by the prefixed ACL
    try:
        assert SecureConnection.authenticate(member, "bob", PASSWORDS["bob"], "SCRAM-SHA-512") == E.NONE
        assert member.join_and_sync() == {"orders": [0, 1]}
        assert member.heartbeat() == E.NONE
        deny = ("--deny-principal", "User:bob", "--operation", "Read", "--group", "team-b-hb")
        secured.acl("add", *deny)
        _until(lambda: member.heartbeat() == E.GROUP_AUTHORIZATION_FAILED, "the denial was not applied")
        secured.acl("remove", "--force", *deny)
        _until(lambda: member.heartbeat() == E.NONE, "the denial still applies")
    finally:
        member.close()


def test_plaintext_to_a_tls_listener_and_skipping_sasl_are_refused_without_harm(secured):
    alice = secured.connect("alice")
    try:
        with socket.create_connection(("127.0.0.1", secured.sasl_port), timeout=10) as plain:  # no TLS
            plain.sendall(b"\x00\x00\x00\x0b\x00\x12\x00\x00\x00\x00\x00\x01\x00\x01x")
            assert _closed(plain)
        skipper = secured.connect()  # TLS, but straight to Metadata
        skipper.send(METADATA, 1, {"topics": None})
        assert _closed(skipper.sock)
        secured.process.wait_for_log("connection closed", reason="request before authentication: API 3")
        assert any(e.get("event") == "connection closed" and e.get("reason", "").startswith("TLS error")
                   for e in secured.process.events())
        # the authenticated connection beside them goes on
        assert alice.call(FIND_COORDINATOR, 1, {"key": "team-a"}).error_code == E.NONE
    finally:
        alice.close()


def test_plain_a_v0_handshake_and_an_unknown_mechanism(secured):
    """PLAIN (offered over TLS) checks the SCRAM credentials; after a v0 handshake the tokens
    come bare, as older clients send them; a mechanism not enabled is refused, and closed once
    the client sends more."""
    plain = secured.connect("alice", mechanism="PLAIN")
    try:
        assert plain.authenticated == E.NONE
        assert plain.call(FIND_COORDINATOR, 1, {"key": "team-a"}).error_code == E.NONE
    finally:
        plain.close()
    assert secured.connect("alice", "guess", mechanism="PLAIN").authenticated == E.SASL_AUTHENTICATION_FAILED
    bare = secured.connect()
    try:
        answer = bare.call(SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-512"})
        assert answer.error_code == E.NONE and answer.mechanisms == ["SCRAM-SHA-512", "PLAIN"]
        scram = ScramClient("bob", PASSWORDS["bob"], "SCRAM-SHA-512")
        scram.process_server_first_message(_bare(bare.sock, scram.first_message()))
        scram.process_server_final_message(_bare(bare.sock, scram.final_message()))
        assert bare.call(FIND_COORDINATOR, 1, {"key": "team-b-9"}).error_code == E.NONE
    finally:
        bare.close()
    refused = secured.connect()
    try:
        answer = refused.call(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert answer.error_code == E.UNSUPPORTED_SASL_MECHANISM and "GSSAPI" not in answer.mechanisms
        # open for the client to read that and close (kafka-python loses an answer that comes
        # with the close); anything more it sends closes it at once
        refused.send(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert _closed(refused.sock)
        secured.process.wait_for_log("connection closed", reason="SASL mechanism 'GSSAPI' not enabled")
    finally:
        refused.close()


def test_a_wrong_password_is_refused_by_either_client_and_touches_nothing(secured, caplog):
    """Each client sees why (the answer comes before the close, however late the client reads
    it: kafka-python drops an answer read together with the end of the stream). Its failures
    pace alice's later failures from 127.0.0.1, not her logins: the tests after it go on."""
    before = _failed_authentications(secured)
    with pytest.raises(KafkaTimeoutError):  # kafka-python gives up bootstrapping...
        KafkaConsumer(bootstrap_servers=f"127.0.0.1:{secured.sasl_port}", group_id="team-a-wrong",
                      security_protocol="SASL_SSL", ssl_cafile=secured.authority.cafile,
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password="guess",
                      bootstrap_timeout_ms=3000)
    assert "SaslAuthenticationFailedError" in caplog.text  # ...for this reason, each time
    errors = []
    ck = CK(f"127.0.0.1:{secured.sasl_port}", "team-a-wrong", "orders", **{
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
        "sasl.password": "guess", "ssl.ca.location": secured.authority.cafile, "error_cb": errors.append})
    try:
        poll_until(lambda: any(e.code() == KafkaError._AUTHENTICATION for e in errors), ck)
    finally:
        ck.consumer.close()
    assert _failed_authentications(secured) >= before + 2
    entry = secured.process.wait_for_log("authentication failed", user="alice", mechanism="SCRAM-SHA-512")
    assert "wrong password or unknown user" in entry["reason"]
    admin = RawConnection(secured.process.port)  # the operators' listener: nothing was made
    try:
        [group] = admin.call(DESCRIBE_GROUPS, 0, {"groups": ["team-a-wrong"]}).groups
        assert group.group_state == "Dead"
    finally:
        admin.close()


def _failed_authentications(secured) -> float:
    _, body = secured.process.scrape()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith("groupkeeper_authentications_total{") and 'outcome="failed"' in line)


def test_sasl_without_tls_offers_scram_but_not_plain(secured):
    """PLAIN would send the password in clear: not offered on SASL_PLAINTEXT (unless
    sasl_plain_without_tls); SCRAM never sends it, and works there."""
    plain = SecureConnection(secured.sasl_plaintext_port, None)
    try:
        answer = plain.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert answer.error_code == E.UNSUPPORTED_SASL_MECHANISM and answer.mechanisms == ["SCRAM-SHA-512"]
        time.sleep(0.5)  # a close sent with the answer would have come by now
        assert not plain.answered()  # still open, for the client to read the answer and close
    finally:
        plain.close()
    scram = SecureConnection(secured.sasl_plaintext_port, None, "alice", PASSWORDS["alice"])
    try:
        assert scram.authenticated == E.NONE
        found = scram.call(FIND_COORDINATOR, 1, {"key": "team-a"})
        assert (found.error_code, found.port) == (E.NONE, secured.sasl_plaintext_port)
    finally:
        scram.close()


def _bare(sock, token: bytes) -> bytes:
    """One bare SASL token out and its answer back (after a v0 handshake)."""
    sock.sendall(struct.pack(">i", len(token)) + token)
    size = struct.unpack(">i", read_exactly(sock, 4))[0]
    return read_exactly(sock, size)


def _closed(sock) -> bool:
    """Whether the server closed `sock` (without sending it anything but, maybe, a TLS alert)."""
    try:
        data = sock.recv(65536)
    except (ssl.SSLError, ConnectionError):
        return True
    return data == b"" or (not data.startswith(b"\x00") and _closed(sock))


def test_consumer_protocol_groups_follow_the_same_acls(secured):
    """A librdkafka member with group.protocol=consumer reads bob's group over SASL_SSL as bob;
    alice may neither heartbeat into it nor describe it."""
    consumer = CK(f"127.0.0.1:{secured.sasl_port}", "team-b-848", "orders", protocol="consumer", **{
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "bob",
        "sasl.password": PASSWORDS["bob"], "ssl.ca.location": secured.authority.cafile})
    alice, bob = secured.connect("alice"), secured.connect("bob")
    try:
        poll_until(lambda: consumer.assigned == ORDERS, consumer)
        joined = alice.call(CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": "team-b-848", "member_id": "alice-1", "member_epoch": 0, "rebalance_timeout_ms": 1000,
            "subscribed_topic_names": ["orders"]})
        assert joined.error_code == E.GROUP_AUTHORIZATION_FAILED and joined.assignment is None
        assert [g.error_code for g in alice.call(CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["team-b-848"]}).groups] == [
            E.GROUP_AUTHORIZATION_FAILED]
        [described] = bob.call(CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": ["team-b-848"]}).groups
        assert described.error_code == E.NONE and [m.member_type for m in described.members] == [1]
    finally:
        alice.close()
        bob.close()
        consumer.consumer.close()
