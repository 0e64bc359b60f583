"""Connections a hostile or unlucky client makes, against a real `groupkeeper run`: a request
trickled in, many connections from one address, the open-file limit reached, answers never
read. Each costs that client its connection (or a wait), never the others their service."""

from __future__ import annotations

import socket
import time

import pytest

from coordinator.admin import Connection
from protocol import RequestHeader, encode_request
from protocol.messages import build
from protocol.schemas import API_VERSIONS, METADATA

from .coordinator_process import CoordinatorProcess


def answers(port: int, source: str = "127.0.0.1") -> bool:
    """Whether a new connection (from `source`) is served: ApiVersions answered in time."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=3, source_address=(source, 0))
    except OSError:
        return False
    try:
        sock.sendall(encode_request(RequestHeader(API_VERSIONS.key, 0, 1, "probe"),
                                    build(API_VERSIONS.request.struct, {})))
        return len(sock.recv(4)) == 4
    except OSError:
        return False
    finally:
        sock.close()


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.fixture
def limited(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, request_read_timeout_ms=1000, connections_max_idle_ms=20000,
                                 max_connections_per_ip=5, max_connections=40, max_queued_reply_bytes=1 << 20)
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_a_trickled_request_is_cut_after_the_read_timeout_not_the_idle_one(limited):
    sock = socket.create_connection(("127.0.0.1", limited.port), timeout=10)
    frame = encode_request(RequestHeader(API_VERSIONS.key, 0, 1, "slow"), build(API_VERSIONS.request.struct, {}))
    started = time.monotonic()
    for byte in frame[:-1]:  # never the last byte, one every 0.1 s: never idle, never whole
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
        if closed_within(sock, 0.1):
            break
    else:
        assert closed_within(sock, 5)
    assert time.monotonic() - started < 5  # the idle timeout is 20 s
    sock.close()
    limited.wait_for_log("connection closed", reason="request read timeout")
    assert answers(limited.port)


def test_connections_per_address_are_bounded_and_other_addresses_still_get_in(limited):
    held = [socket.create_connection(("127.0.0.1", limited.port), timeout=5) for _ in range(5)]
    try:
        for sock in held:  # all five served
            assert answers_on(sock)
        extra = socket.create_connection(("127.0.0.1", limited.port), timeout=5)
        assert closed_within(extra, 5)  # the sixth from this address
        extra.close()
        assert answers(limited.port, source="127.0.0.2")  # another address is served
        limited.wait_for_log("connection refused", reason="max connections per address reached")
    finally:
        for sock in held:
            sock.close()


def answers_on(sock: socket.socket) -> bool:
    sock.sendall(encode_request(RequestHeader(API_VERSIONS.key, 0, 7, "held"), build(API_VERSIONS.request.struct, {})))
    return len(sock.recv(4)) == 4


def test_the_open_file_limit_pauses_accepting_and_the_instance_serves_on(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, open_files=64, max_connections_per_ip=1000)
    process.start()
    opened: list[socket.socket] = []
    try:
        first = socket.create_connection(("127.0.0.1", process.port), timeout=5)
        assert answers_on(first)
        for _ in range(80):  # more than the process has descriptors for
            opened.append(socket.create_connection(("127.0.0.1", process.port), timeout=5))
        process.wait_for_log("cannot accept connections")
        assert answers_on(first)  # connections it has are served
        for sock in opened:
            sock.close()
        opened.clear()
        deadline = time.monotonic() + 20
        while not answers(process.port):  # and, descriptors free again, new ones too
            assert time.monotonic() < deadline, "no new connection served after the descriptors came back"
            time.sleep(0.1)
        assert process.process.poll() is None
        first.close()
    finally:
        for sock in opened:
            sock.close()
        assert process.stop() == 0


def test_a_client_that_never_reads_its_answers_holds_the_server_to_a_bounded_memory(limited):
    limited.topic("wide", 2000)  # a Metadata answer of tens of kilobytes
    before = _rss(limited)
    flood = socket.create_connection(("127.0.0.1", limited.port), timeout=5)
    flood.setblocking(False)
    request = encode_request(RequestHeader(METADATA.key, 1, 1, "flood"),
                             build(METADATA.request.struct, {"topics": [{"name": "wide"}]}))
    sent, deadline = 0, time.monotonic() + 5
    while time.monotonic() < deadline:  # pipeline as fast as the server reads, never reading
        try:
            sent += flood.send(request * 64)
        except BlockingIOError:
            time.sleep(0.01)
    answered_size = Connection("127.0.0.1", limited.port, 10).pipeline(METADATA, 1, [{"topics": [{"name": "wide"}]}])
    assert answered_size  # other clients are served meanwhile
    grown = _rss(limited) - before
    assert sent // len(request) > 10_000  # answers asked for: hundreds of MB of them...
    # ... while the server held a few MB for them (unbounded, tens of MB in these 5 s)
    assert grown < 16 << 20, grown
    flood.close()


def _rss(process: CoordinatorProcess) -> int:
    for line in open(f"/proc/{process.process.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")
