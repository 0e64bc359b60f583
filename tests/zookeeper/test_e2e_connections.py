"""Connections a hostile or unlucky client makes, against a real `groupkeeper run`: a request
trickled in, many connections from one address, the open-file limit reached, answers never
read. Each costs that client its connection (or a wait), never the others their service."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tools.kafka_admin import NodeConnection, read_exactly
from protocol import RequestHeader, decode_response, encode_request
from protocol.messages import build
from protocol.schemas import API_VERSIONS, METADATA, OFFSET_COMMIT, OFFSET_FETCH

from tests.support.coordinator_process import CoordinatorProcess


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
    process.topic("t", 1)  # offsets are stored only for partitions that exist
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
    answered_size = NodeConnection("127.0.0.1", limited.port, 10).pipeline(METADATA, 1, [{"topics": [{"name": "wide"}]}])
    assert answered_size  # other clients are served meanwhile
    grown = _rss(limited) - before
    assert sent // len(request) > 10_000  # answers asked for: hundreds of MB of them...
    # ... while the server held a few MB for them (unbounded, tens of MB in these 5 s)
    assert grown < 16 << 20, grown
    flood.close()


def test_a_client_that_reads_late_gets_every_answer_in_order_and_is_served_on(limited):
    """Answers far over `max_queued_reply_bytes` asked for before any is read: the server
    stops reading the connection, and goes on when the client reads."""
    limited.topic("wide", 2000)
    sock = socket.create_connection(("127.0.0.1", limited.port), timeout=30)
    count = 400  # about 24 MB of answers: more than the limit and every socket buffer between
    requests = [encode_request(RequestHeader(METADATA.key, 1, i, "late"),
                               build(METADATA.request.struct, {"topics": [{"name": "wide"}]}))
                for i in range(count)]
    sender = threading.Thread(target=sock.sendall, args=(b"".join(requests),))
    sender.start()
    answers = [_answer(sock, METADATA, 1) for _ in range(count)]
    sender.join(timeout=30)
    assert [correlation for correlation, _ in answers] == list(range(count))
    assert all(len(body.topics[0].partitions) == 2000 for _, body in answers)
    sock.sendall(encode_request(RequestHeader(API_VERSIONS.key, 0, count, "late"),
                                build(API_VERSIONS.request.struct, {})))
    assert _answer(sock, API_VERSIONS, 0)[0] == count
    sock.close()


def test_more_waiting_requests_than_a_connection_may_have_are_all_answered_in_order(limited):
    """300 commits pipelined in one write, each waiting for ZooKeeper: the connection holds
    100 at a time, reads the rest as they finish, and they land in the order sent."""
    sock = socket.create_connection(("127.0.0.1", limited.port), timeout=30)
    count = 300

    def commit(i: int) -> bytes:
        return encode_request(RequestHeader(OFFSET_COMMIT.key, 8, i, "many"), build(OFFSET_COMMIT.request.struct, {
            "group_id": "many-waiting", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": i}]}]}))

    sock.sendall(b"".join(commit(i) for i in range(count)))
    answers = [_answer(sock, OFFSET_COMMIT, 8) for _ in range(count)]
    assert [correlation for correlation, _ in answers] == list(range(count))
    assert {body.topics[0].partitions[0].error_code for _, body in answers} == {0}
    sock.sendall(encode_request(RequestHeader(OFFSET_FETCH.key, 7, count, "many"), build(
        OFFSET_FETCH.request.struct, {"group_id": "many-waiting", "topics": [{"name": "t", "partition_indexes": [0]}]})))
    _, fetched = _answer(sock, OFFSET_FETCH, 7)
    assert fetched.topics[0].partitions[0].committed_offset == count - 1
    sock.close()


def _answer(sock: socket.socket, api, version: int):
    """The next answer on `sock`: (correlation id, body)."""
    size, = struct.unpack(">i", read_exactly(sock, 4))
    return decode_response(api.key, version, read_exactly(sock, size))


def _rss(process: CoordinatorProcess) -> int:
    for line in open(f"/proc/{process.process.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_client_that_closes_its_connection_leaves_no_info_line(limited):
    """The ordinary end of a connection (the client closed it) is logged at debug, not info:
    it was most of a short session's server log; closes for a reason stay at info."""
    for _ in range(3):
        assert answers(limited.port)  # each an ApiVersions, then closed by the client
    trickled = socket.create_connection(("127.0.0.1", limited.port), timeout=10)
    trickled.sendall(b"\x00\x00\x00\x40")  # a size, then nothing: cut after the read timeout
    limited.wait_for_log("connection closed", reason="request read timeout")
    trickled.close()
    closes = [e for e in limited.events() if e.get("event") == "connection closed"]
    assert closes and all(e["reason"] not in ("closed by peer", "peer went away") for e in closes), closes
