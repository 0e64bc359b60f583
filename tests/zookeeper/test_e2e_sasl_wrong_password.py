"""Issue 31 item 4: a wrong password slows only the connection that sent it. Against one
real coordinator with a SASL_PLAINTEXT listener (SCRAM-SHA-512): a client retrying with a
wrong password, and more guesses on connections of their own, beside the same user's
correct logins from the same host (ours and librdkafka's admin client's), which must be
answered at once while every guess still waits for its answer; and what a failing client
sees: SASL_AUTHENTICATION_FAILED after the delay, then the close, a guesser's parallel
connections answered a gap apart."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient
from kafka.net.sasl.scram import ScramClient

from coordinator.security.sasl import LINGER
from coordinator.store.zkserver import free_port
from protocol import ErrorCode as E
from protocol.schemas import FIND_COORDINATOR, SASL_AUTHENTICATE, SASL_HANDSHAKE
from tests.support.clients import SecureConnection
from tests.support.coordinator_process import CoordinatorProcess

MECHANISM = "SCRAM-SHA-512"
PASSWORD = "alice-secret"
LOGINS = 20  # correct logins made while the guesses wait


def _coordinator(zookeeper, tmp, delay_ms: int) -> tuple[CoordinatorProcess, int]:
    port = free_port()
    process = CoordinatorProcess(zookeeper, tmp, listeners=(f"SASL_PLAINTEXT://127.0.0.1:{port}",),
                                 sasl_enabled_mechanisms=[MECHANISM],
                                 connection_failed_authentication_delay_ms=delay_ms)
    secret = tmp / "alice.password"
    secret.write_text(PASSWORD + "\n")
    process.cli("users", "add", "alice", "--mechanism", MECHANISM, "--password-file", str(secret))
    process.start()
    return process, port


@pytest.fixture
def slow_failures(zookeeper, tmp_path):
    """A failure's answer waits 30 s: long enough that whatever the test does meanwhile
    happens before any guess is answered, however slow the machine."""
    process, port = _coordinator(zookeeper, tmp_path, 30_000)
    try:
        yield process, port
    finally:
        assert process.stop() == 0


@pytest.fixture
def quick_failures(zookeeper, tmp_path):
    process, port = _coordinator(zookeeper, tmp_path, 500)
    try:
        yield process, port
    finally:
        assert process.stop() == 0


def _guess(port: int, password: str = "guess") -> SecureConnection:
    """A connection that has sent alice's SCRAM proof for `password`, its answer not read."""
    connection = SecureConnection(port, None, timeout=60)
    assert connection.call(SASL_HANDSHAKE, 1, {"mechanism": MECHANISM}).error_code == E.NONE
    scram = ScramClient("alice", password, MECHANISM)
    first = connection.call(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first_message()})
    assert first.error_code == E.NONE
    scram.process_server_first_message(first.auth_bytes)
    connection.send(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.final_message()})
    return connection


def _failures_checked(process: CoordinatorProcess) -> int:
    return sum(1 for e in process.events() if e.get("event") == "authentication failed" and e.get("user") == "alice")


def _until(condition, what: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return result


class Retrier(threading.Thread):
    """A client with a wrong password: a new connection as soon as each failure is answered."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port = port
        self.answers: list[int] = []
        self.connection: SecureConnection | None = None
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            self.connection = _guess(self.port)
            try:
                self.answers.append(self.connection.receive(SASL_AUTHENTICATE, 2).error_code)
            except OSError:  # stopped, or closed without an answer
                pass
            self.connection.close()

    def stop(self) -> None:
        self.stopping = True
        if self.connection is not None:
            self.connection.sock.shutdown(socket.SHUT_RDWR)  # ends the wait for its answer
        self.join(10)


def test_correct_logins_are_answered_at_once_while_a_wrong_password_retries(slow_failures):
    """Before issue 31 every password check of a user from a host took a turn, and a
    failure put the next turn 30 s away here: the first correct login would have waited
    for it (and librdkafka's admin request timed out)."""
    process, port = slow_failures
    retrier = Retrier(port)
    retrier.start()
    storm: list[SecureConnection] = []
    try:
        _until(lambda: _failures_checked(process) >= 1, "the retrier's guess was never checked")
        for _ in range(LOGINS):
            storm.append(_guess(port))  # another guess, on a connection of its own
            alice = SecureConnection(port, None, "alice", PASSWORD, timeout=10)
            try:
                assert alice.authenticated == E.NONE
                assert alice.call(FIND_COORDINATOR, 1, {"key": "team-a"}).error_code == E.NONE
            finally:
                alice.close()
        # librdkafka's admin client, which logs in twice for this (bootstrap, then broker 0)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanisms": MECHANISM, "sasl.username": "alice", "sasl.password": PASSWORD,
                             "log_level": 3})
        listed = admin.list_consumer_groups(request_timeout=10).result()
        assert not listed.errors
        assert process.wait_for_log("authenticated", principal="User:alice")["mechanism"] == MECHANISM
        # each guess was checked at once, and is still waiting for its answer
        _until(lambda: _failures_checked(process) >= LOGINS + 1, "the guesses were not checked at once")
        assert retrier.answers == [] and not any(c.answered() for c in storm)
    finally:
        retrier.stop()
        for connection in storm:
            connection.close()


def test_a_failure_is_answered_after_the_delay_and_a_guessers_connections_in_turn(quick_failures):
    """Kafka's semantics: the failure's answer waits. A second and third guess sent at once
    wait a doubled, then doubled again, gap after the one before. The close then waits for
    the client's, up to LINGER: a client that reads the answer and the end of the stream in
    one go may drop the answer (kafka-python 3.0 does)."""
    process, port = quick_failures
    started = time.monotonic()
    first = _guess(port)
    try:
        assert first.receive(SASL_AUTHENTICATE, 2).error_code == E.SASL_AUTHENTICATION_FAILED
        answered = time.monotonic()
        assert answered - started >= 0.5
        assert first.sock.recv(1) == b""  # this client does not close: the server does, LINGER later
        assert time.monotonic() - answered >= LINGER
    finally:
        first.close()
    started = time.monotonic()
    second, third = _guess(port), _guess(port)
    try:
        assert second.receive(SASL_AUTHENTICATE, 2).error_code == E.SASL_AUTHENTICATION_FAILED
        assert time.monotonic() - started >= 1.0  # 0.5 s doubled
        assert third.receive(SASL_AUTHENTICATE, 2).error_code == E.SASL_AUTHENTICATION_FAILED
        assert time.monotonic() - started >= 1.0 + 2.0  # after the second's, doubled again
    finally:
        second.close()
        third.close()
    entry = process.wait_for_log("authentication failed", user="alice", mechanism=MECHANISM)
    assert entry["delay_s"] == 0.5 and "wrong password" in entry["reason"]
    # the right password, after all that, at once
    alice = SecureConnection(port, None, "alice", PASSWORD, timeout=10)
    try:
        assert alice.authenticated == E.NONE
    finally:
        alice.close()


def test_a_refused_connection_stays_open_until_its_client_closes_or_sends_more(quick_failures):
    """What kafka-python needs to see its error: the answer, and no end of the stream behind it
    while the client reads. A client that sends anything after it is closed at once."""
    process, port = quick_failures
    waiting = _guess(port)
    try:
        assert waiting.receive(SASL_AUTHENTICATE, 2).error_code == E.SASL_AUTHENTICATION_FAILED
        time.sleep(0.5)  # long enough for a close sent with the answer to have come (well within LINGER)
        assert not waiting.answered()  # nothing more, not even the end, while the client reads
        waiting.send(FIND_COORDINATOR, 1, {"key": "team-a"})
        waiting.sock.settimeout(LINGER / 2)
        assert waiting.sock.recv(1) == b""  # closed for it, well before LINGER
    finally:
        waiting.close()


def test_requests_before_login_wait_in_order_when_their_answers_are_not_taken(zookeeper, tmp_path):
    """A client that pipelines ApiVersions before logging in and reads nothing is paused like
    any other; once it reads, every answer comes, in order, and its login after them: none
    is dropped (before: each paused ApiVersions replaced the last, and the SaslHandshake's
    answer could pass the ones still waiting)."""
    import socket
    import struct

    from protocol import RequestHeader, decode_response, encode_request
    from protocol.messages import build
    from protocol.schemas import API_VERSIONS
    from tests.support.clients import read_exactly

    port = free_port()
    process = CoordinatorProcess(zookeeper, tmp_path, listeners=(f"SASL_PLAINTEXT://127.0.0.1:{port}",),
                                 sasl_enabled_mechanisms=[MECHANISM], max_queued_reply_bytes=4096)
    process.start()
    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # little held by the kernels on the way
        sock.settimeout(30)
        sock.connect(("127.0.0.1", port))
        count = 5000  # ApiVersions answers of some 400 bytes each: megabytes, far past 4 KiB unread
        frames = [encode_request(RequestHeader(API_VERSIONS.key, 3, n, "flood"), build(
            API_VERSIONS.request.struct, {"client_software_name": "x", "client_software_version": "1"}))
            for n in range(1, count + 1)]
        frames.append(encode_request(RequestHeader(SASL_HANDSHAKE.key, 1, count + 1, "flood"),
                                     build(SASL_HANDSHAKE.request.struct, {"mechanism": MECHANISM})))
        import threading
        sender = threading.Thread(target=sock.sendall, args=(b"".join(frames),), daemon=True)
        sender.start()  # while nothing is read: the server pauses the connection at its limit
        time.sleep(1)
        seen = []
        for n in range(1, count + 2):
            size = struct.unpack(">i", read_exactly(sock, 4))[0]
            body = read_exactly(sock, size)
            key = API_VERSIONS.key if n <= count else SASL_HANDSHAKE.key
            correlation_id, answer = decode_response(key, 3 if n <= count else 1, body)
            seen.append(correlation_id)
            assert answer.error_code == 0
        assert seen == list(range(1, count + 2))
        sender.join(timeout=30)
        sock.close()
    finally:
        assert process.stop() == 0
