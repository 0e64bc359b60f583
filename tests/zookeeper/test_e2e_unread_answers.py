"""Answers a client asks for and never reads, against a real `groupkeeper run`: those that
wait (OffsetFetch runs in a task of its own) as well as those made at once are bounded by
`max_queued_reply_bytes`, and the coordinator's memory comes back when the client goes.
Resident memory is read from /proc, so the server is a process of its own."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from protocol import RequestHeader, decode_response, encode_request
from protocol.messages import build
from protocol.schemas import API_VERSIONS, METADATA, OFFSET_COMMIT, OFFSET_FETCH
from tools.kafka_admin import read_exactly

from tests.support.clients import RawConnection
from tests.support.coordinator_process import CoordinatorProcess

MiB = 1 << 20
LIMIT = 1 * MiB  # the coordinator's max_queued_reply_bytes
PARTITIONS, METADATA_CHARS = 10_000, 100  # a group's offsets: about 1 MB of metadata, its limit
REPEATS = 4  # the group named this many times in one OffsetFetch v8: an answer of about 4.8 MB


@pytest.fixture
def coordinator(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, max_queued_reply_bytes=LIMIT, connections_max_idle_ms=60_000,
                                 events=False)
    # what committed_group commits to (offsets are stored only for partitions that exist), read at start-up
    process.cli("topics", "create", "offsets", "--partitions", str(PARTITIONS))
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def committed_group(process: CoordinatorProcess, group: str) -> None:
    """`group` with PARTITIONS offsets of METADATA_CHARS of metadata each."""
    connection = RawConnection(process.port)
    try:
        answer = connection.call(OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "offsets", "partitions": [
                {"partition_index": p, "committed_offset": p, "committed_metadata": "m" * METADATA_CHARS}
                for p in range(PARTITIONS)]}]})
    finally:
        connection.close()
    assert {p.error_code for t in answer.topics for p in t.partitions} == {0}


def big_fetch(group: str, correlation: int = 1) -> bytes:
    return encode_request(RequestHeader(OFFSET_FETCH.key, 8, correlation, "unread"), build(
        OFFSET_FETCH.request.struct, {"groups": [{"group_id": group, "topics": None}] * REPEATS}))


def flood(process: CoordinatorProcess, request: bytes, seconds: float) -> tuple[int, int]:
    """Pipeline `request` for `seconds` as fast as the server reads it, never reading an
    answer, then close: (requests sent, peak resident bytes of the server meanwhile)."""
    sock = socket.create_connection(("127.0.0.1", process.port), timeout=5)
    sock.setblocking(False)
    batch = request * max(1, 65536 // len(request))
    sent, peak, pending = 0, rss(process), memoryview(b"")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            pending = pending or memoryview(batch)
            try:
                took = sock.send(pending)
                sent, pending = sent + took, pending[took:]
            except BlockingIOError:
                time.sleep(0.01)
            peak = max(peak, rss(process))
    finally:
        sock.close()
    return sent // len(request), peak


def settled_rss(process: CoordinatorProcess, at_most: int, timeout: float = 15.0) -> int:
    """The server's resident bytes once at or below `at_most`; the last reading if not within
    `timeout` (the server notices the close, drops what it held, and returns it)."""
    deadline = time.monotonic() + timeout
    while (now := rss(process)) > at_most and time.monotonic() < deadline:
        time.sleep(0.1)
    return now


def test_waiting_answers_never_read_are_bounded_and_their_memory_returned_on_close(coordinator):
    """OffsetFetch answers wait (in a task each): before, up to max_in_flight (100) of them
    were made per connection whatever their size, 0.8-2 GB, and kept after the close."""
    committed_group(coordinator, "big")
    reader = RawConnection(coordinator.port)
    try:  # one answer read whole: its size, and the server warmed up to it
        reader.sock.sendall(big_fetch("big"))
        answer_bytes = 4 + struct.unpack(">i", read_exactly(reader.sock, 4))[0]
        read_exactly(reader.sock, answer_bytes - 4)
    finally:
        reader.close()
    assert answer_bytes > 4 * MiB
    before = rss(coordinator)  # the answer read whole: sent, and dropped
    requests, peak = flood(coordinator, big_fetch("big"), seconds=4.0)
    assert requests >= 100  # answers asked for: hundreds of MB of them...
    # ... of which the server made what the limit allows: past it, at most one answer more
    # per connection (and its encoding's copy), and what the kernel holds of the socket
    assert peak - before < LIMIT + 3 * answer_bytes + 16 * MiB, (before, peak)
    after = settled_rss(coordinator, before + 4 * MiB)
    assert after <= before + 4 * MiB, (before, peak, after)
    # and the coordinator serves as before
    connection = RawConnection(coordinator.port)
    try:
        assert connection.call(API_VERSIONS, 0, {}).error_code == 0
    finally:
        connection.close()


def test_answers_made_at_once_are_bounded_too_unsupported_api_versions_included(coordinator):
    """ApiVersions of a version we do not read is answered (as v0, by Kafka's rule) where the
    limit was not looked at: a client pipelining it without reading grew the server without end."""
    header = struct.pack(">hhih", API_VERSIONS.key, 99, 1, 6) + b"unread" + b"\x00"  # v2, as clients send it
    request = struct.pack(">i", len(header)) + header
    before = rss(coordinator)
    requests, peak = flood(coordinator, request, seconds=3.0)
    assert requests > 10_000
    assert peak - before < 2 * LIMIT + 16 * MiB, (before, peak)


def test_a_waiting_answer_behind_which_the_limit_filled_is_made_and_all_arrive_in_order(coordinator):
    """A waiting answer may be made only while the answers not yet taken are within the limit,
    except at the head of the line: there only those before it can go first, and those behind
    it (here Metadata answers, made while it waited to start) wait for it."""
    committed_group(coordinator, "head")
    coordinator.topic("wide", 2000)  # Metadata answers of tens of kilobytes
    sock = socket.create_connection(("127.0.0.1", coordinator.port), timeout=30)
    metadata = [encode_request(RequestHeader(METADATA.key, 1, i, "late"),
                               build(METADATA.request.struct, {"topics": [{"name": "wide"}]})) for i in range(1, 80)]
    sock.sendall(b"".join([big_fetch("head", 0), *metadata, big_fetch("head", 80)]))
    time.sleep(0.5)  # everything asked before anything is read
    size, = struct.unpack(">i", read_exactly(sock, 4))
    correlation, fetched = decode_response(OFFSET_FETCH.key, 8, read_exactly(sock, size))
    assert correlation == 0 and len(fetched.groups) == REPEATS
    assert sum(len(p.partitions) for p in fetched.groups[0].topics) == PARTITIONS
    for i in range(1, 80):
        size, = struct.unpack(">i", read_exactly(sock, 4))
        assert decode_response(METADATA.key, 1, read_exactly(sock, size))[0] == i
    size, = struct.unpack(">i", read_exactly(sock, 4))
    assert decode_response(OFFSET_FETCH.key, 8, read_exactly(sock, size))[0] == 80
    sock.close()


def rss(process: CoordinatorProcess) -> int:
    for line in open(f"/proc/{process.process.pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")
