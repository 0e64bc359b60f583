"""The gateway's own connections to the brokers, secured (`gateway_security_protocol`), with
real parts.

The Tansu build the tests use (0.6.0) cannot be the secured broker: its `--cert` and `--key`
refuse to be given together (so it never speaks TLS), and with `--authentication` its own
`user create` is refused before it can make a user (and PLAIN is not offered). So the
secured broker is groupkeeper itself: gateway B fronts Tansu and listens SASL_SSL, SSL
(client certificates required) and SASL_PLAINTEXT, with users made by `groupkeeper users
add`; gateway A fronts B with its own credentials. A confluent-kafka producer and consumer
group through A produce and read back records that pass A -> B -> Tansu, while the group
lives in A (neither B nor Tansu knows it). Then what must be refused is: a wrong password
(the client's connection through A closed, A's log says so once), a broker whose
certificate another CA signed, and a gateway without the client certificate a broker asks
for.
"""

from __future__ import annotations

import random
import socket
import time

import pytest
from confluent_kafka import Consumer as CKConsumer

from coordinator.store.zkserver import free_port
from protocol import RequestHeader, encode_request
from protocol.messages import build
from protocol.schemas import LIST_GROUPS, METADATA
from tests.support.certs import Authority
from tests.support.clients import RawConnection, committed
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.tansu import Tansu
from tests.tansu.test_e2e_gateway import TOPIC, PARTITIONS, broker_committed, broker_groups, produce_with_librdkafka

FAST = {"metadata_max_age_ms": 500, "group_min_session_timeout_ms": 1000}
PASSWORD = "gateway-secret"
REFUSED_LOGIN = "broker refused the gateway's login: client connections to it are closed"
REFUSED_TLS = "TLS with the broker failed: client connections to it are closed"


class Upstream:
    """Tansu, and gateway B in front of it with secured listeners: what A connects to."""

    def __init__(self, tmp, zookeeper):
        self.tmp, self.zookeeper = tmp, zookeeper
        self.authority = Authority(tmp)
        cert, key = self.authority.issue("CN=gateway-b", "b", server=True)
        self.gateway_cert = self.authority.issue("CN=gateway-a,O=Example", "gateway-a")
        self.tansu = Tansu(tmp)
        self.ports = {"SASL_SSL": free_port(), "SSL": free_port(), "SASL_PLAINTEXT": free_port()}
        self.b = CoordinatorProcess(
            zookeeper, tmp, listeners=tuple(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items()),
            gateway=self.tansu.bootstrap, instance_id=7,
            ssl_certfile=cert, ssl_keyfile=key, ssl_cafile=self.authority.cafile, ssl_client_auth="required",
            sasl_enabled_mechanisms=["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"],
            connection_failed_authentication_delay_ms=20, **FAST)
        self.password_file = self.secret("gateway", PASSWORD)

    def secret(self, name: str, password: str) -> str:
        path = self.tmp / f"{name}.password"
        path.write_text(password + "\n")
        path.chmod(0o600)
        return str(path)

    def start(self) -> None:
        self.tansu.start()
        self.tansu.create_topic(TOPIC, PARTITIONS)
        pin_node_ports(self.b, [self.tansu.node_id], 1 + len(self.ports))
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            self.b.cli("users", "add", "gateway", "--mechanism", mechanism, "--password-file", self.password_file)
        self.b.cli("users", "add", "mallory", "--mechanism", "SCRAM-SHA-512", "--password-file",
                   self.secret("mallory", "mallory-secret"))
        self.b.start()
        self.b.wait_for_log("broker node reachable", node=self.tansu.node_id)

    def front(self, protocol: str, listener: str | None = None, **settings) -> CoordinatorProcess:
        """Gateway A, fronting B's `listener` (default: the one speaking `protocol`) with
        `gateway_security_protocol = protocol`; started."""
        a = CoordinatorProcess(self.zookeeper, self.tmp, gateway=f"127.0.0.1:{self.ports[listener or protocol]}",
                               gateway_security_protocol=protocol, **{**FAST, **settings})
        pin_node_ports(a, [self.tansu.node_id], 1)
        a.start()
        return a

    def stop(self) -> None:
        try:
            assert self.b.stop() == 0
        finally:
            self.tansu.stop()


@pytest.fixture(scope="module")
def upstream(zookeeper, tmp_path_factory):
    setup = Upstream(tmp_path_factory.mktemp("upstream"), zookeeper)
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


VARIANTS = {
    "SASL_SSL with SCRAM-SHA-512": ("SASL_SSL", {"gateway_sasl_mechanism": "SCRAM-SHA-512"}),
    "SASL_SSL with PLAIN": ("SASL_SSL", {"gateway_sasl_mechanism": "PLAIN"}),
    "SASL_PLAINTEXT with SCRAM-SHA-256": ("SASL_PLAINTEXT", {"gateway_sasl_mechanism": "SCRAM-SHA-256"}),
    "SSL with a client certificate": ("SSL", {}),
}


def _settings(upstream: Upstream, protocol: str, extra: dict) -> dict:
    settings = dict(extra)
    if protocol.endswith("SSL"):
        settings["gateway_ssl_cafile"] = upstream.authority.cafile
    if protocol == "SSL":
        settings["gateway_ssl_certfile"], settings["gateway_ssl_keyfile"] = upstream.gateway_cert
    if protocol.startswith("SASL_"):
        settings.update(gateway_sasl_username="gateway", gateway_sasl_password_file=upstream.password_file)
    return settings


def _relayed(process: CoordinatorProcess, api: str) -> float:
    """How many `api` requests `process` has relayed to the brokers."""
    _, body = process.scrape()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith("groupkeeper_gateway_requests_total{") and f'api="{api}"' in line)


def _failures(process: CoordinatorProcess, reason: str) -> float:
    _, body = process.scrape()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith("groupkeeper_gateway_upstream_failures_total{") and f'reason="{reason}"' in line)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_records_pass_a_gateway_that_logs_in_to_the_next_and_the_group_lives_in_the_first(upstream, variant):
    protocol, extra = VARIANTS[variant]
    b_produced = _relayed(upstream.b, "Produce")
    a = upstream.front(protocol, **_settings(upstream, protocol, extra))
    group = "front-" + variant.split()[0].lower() + "-" + extra.get("gateway_sasl_mechanism", "mtls").lower()
    try:
        # A's topic source got through to B (TLS and SASL in trio), and A gave Tansu's node a port
        a.wait_for_log("broker node reachable", node=upstream.tansu.node_id)
        values = [f"{group}-{i}".encode() for i in range(300)]
        produce_with_librdkafka(a.bootstrap, values)
        consumer = CKConsumer({"bootstrap.servers": a.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                               "enable.auto.commit": False, "session.timeout.ms": 6000,
                               "heartbeat.interval.ms": 500})
        consumer.subscribe([TOPIC])
        read = []
        try:
            deadline = time.monotonic() + 60
            while len([v for v in read if v.startswith(group.encode())]) < len(values) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    read.append(message.value())
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        mine = [v for v in read if v.startswith(group.encode() + b"-")]
        assert sorted(mine) == sorted(values)
        # every record went A -> B -> Tansu and back: B relayed the produce requests
        assert _relayed(a, "Produce") > 0 and _relayed(upstream.b, "Produce") > b_produced
        assert _relayed(a, "Fetch") > 0
        # the group lives in A: its commits there, unknown to B and to Tansu
        assert sum(committed([a.port], group).values()) == len(read)
        b_admin = RawConnection(upstream.b.port)
        try:
            assert group not in {g.group_id for g in b_admin.call(LIST_GROUPS, 0, {}).groups}
        finally:
            b_admin.close()
        assert group not in broker_groups(upstream.tansu)
        assert set(broker_committed(upstream.tansu, group).values()) == {-1}
        if protocol.startswith("SASL_"):  # B saw the gateway's own login
            upstream.b.wait_for_log("authenticated", principal="User:gateway",
                                    mechanism=extra["gateway_sasl_mechanism"])
        assert not [e for e in a.events() if e.get("event") in (REFUSED_LOGIN, REFUSED_TLS)]
    finally:
        assert a.stop() == 0


def _relay_closed(port: int, timeout: float = 30.0) -> bool:
    """A Metadata request (relayed to the brokers) on a fresh connection to `port`: whether
    the gateway closed the connection instead of answering."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(encode_request(RequestHeader(METADATA.key, 1, 1, "probe"),
                                    build(METADATA.request.struct, {"topics": None})))
        try:
            data = sock.recv(65536)
        except ConnectionError:
            return True
        return data == b""


def _events(process: CoordinatorProcess, name: str) -> list[dict]:
    return [e for e in process.events() if e.get("event") == name]


def test_a_wrong_password_closes_the_clients_connections_and_is_logged_once(upstream):
    wrong = upstream.secret("mallory-guess", "guess")
    a = upstream.front("SASL_SSL", gateway_ssl_cafile=upstream.authority.cafile,
                       gateway_sasl_username="mallory", gateway_sasl_password_file=wrong, metadata_max_age_ms=60_000)
    try:
        for _ in range(3):  # fail closed: nothing answered, each client connection closed
            assert _relay_closed(a.port)
        entry = a.wait_for_log(REFUSED_LOGIN)
        assert entry["user"] == "mallory" and entry["mechanism"] == "SCRAM-SHA-512"
        assert "SASL_AUTHENTICATION_FAILED" in entry["reason"]
        assert len(_events(a, REFUSED_LOGIN)) == 1  # once per outage
        assert _failures(a, "authentication") >= 3
        # the three closes are one burst from one address for one reason: one line, the others counted
        closed = [e for e in _events(a, "connection closed") if "login to the broker failed" in e.get("reason", "")]
        assert len(closed) == 1
        assert a.metric("groupkeeper_connection_churn_total", reason="broker link") >= 2
        # the topic source, with the same settings, is refused too, and says why
        tried = a.wait_for_log("no broker answered Metadata: serving from what was known")["tried"]
        assert "SASL_AUTHENTICATION_FAILED" in tried[0]
        assert upstream.b.wait_for_log("authentication failed", user="mallory")
        assert not _events(a, "broker node reachable")
    finally:
        assert a.stop() == 0


def test_a_broker_whose_certificate_another_ca_signed_is_refused(upstream, tmp_path):
    other = Authority(tmp_path, "CN=someone else's CA")
    a = upstream.front("SASL_SSL", gateway_ssl_cafile=other.cafile, gateway_sasl_username="gateway",
                       gateway_sasl_password_file=upstream.password_file, metadata_max_age_ms=60_000)
    try:
        assert _relay_closed(a.port) and _relay_closed(a.port)
        entry = a.wait_for_log(REFUSED_TLS)
        assert "CERTIFICATE_VERIFY_FAILED" in entry["reason"]
        assert len(_events(a, REFUSED_TLS)) == 1
        assert _failures(a, "tls") >= 2
        tried = a.wait_for_log("no broker answered Metadata: serving from what was known")["tried"]
        assert "CERTIFICATE_VERIFY_FAILED" in tried[0]
    finally:
        assert a.stop() == 0


def test_a_gateway_without_the_client_certificate_a_broker_asks_for_is_refused(upstream):
    a = upstream.front("SSL", gateway_ssl_cafile=upstream.authority.cafile, metadata_max_age_ms=60_000)
    try:
        assert _relay_closed(a.port)
        entry = a.wait_for_log(REFUSED_TLS)
        # TLS 1.3: the broker refuses the certificate after our side of the handshake ended;
        # its alert is read, or lost when it resets the connection with our request unread
        assert "CERTIFICATE_REQUIRED" in entry["reason"] or entry["reason"].endswith("before its first answer")
        assert not _events(a, "broker node reachable")
    finally:
        assert a.stop() == 0


def test_a_plaintext_gateway_is_not_served_by_a_sasl_listener(upstream):
    """The default (PLAINTEXT) towards a SASL_SSL listener: nothing gets through, and the
    client's connection is closed as for a broker that closes."""
    a = upstream.front("PLAINTEXT", listener="SASL_PLAINTEXT", metadata_max_age_ms=60_000)
    try:
        assert _relay_closed(a.port)
        a.wait_for_log("broker closed its connection")
    finally:
        assert a.stop() == 0


def test_startup_refuses_sasl_without_a_user(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, gateway="127.0.0.1:9", gateway_security_protocol="SASL_SSL")
    with pytest.raises(AssertionError, match="gateway_security_protocol SASL_SSL needs gateway_sasl_username"):
        process.start(timeout=20)
    assert process.process.wait(timeout=10) == 1


def test_a_broker_that_never_answers_the_handshake_is_given_up_on(zookeeper, tmp_path):
    """A port that accepts (the kernel's backlog) and never speaks: the link gives up after
    request_read_timeout_ms, and the client's connection is closed, not left hanging."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    authority = Authority(tmp_path)
    a = CoordinatorProcess(zookeeper, tmp_path, gateway=f"127.0.0.1:{silent.getsockname()[1]}",
                           gateway_security_protocol="SSL", gateway_ssl_cafile=authority.cafile,
                           request_read_timeout_ms=1000, **FAST)
    try:
        a.start()
        started = time.monotonic()
        assert _relay_closed(a.port, timeout=20)
        assert time.monotonic() - started < 10
        entry = a.wait_for_log(REFUSED_TLS)
        assert "not through in time" in entry["reason"]
    finally:
        assert a.stop() == 0
        silent.close()
