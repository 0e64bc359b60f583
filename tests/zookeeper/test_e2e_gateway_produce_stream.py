"""Large Produce requests relayed as they arrive (their rest sent on as it comes, never held
whole) through a real gateway, with a stand-in broker: requests sent in pieces, pipelined
with small ones and with one the gateway answers itself; a broker that stops reading for a
while (the link fills, the client is read no more until it drains); a request without an
answer (acks=0); clients that go away halfway through one. Every request reaches the broker
whole and in order, every answer comes back in order, and what was streamed is counted."""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from pathlib import Path

import pytest

from protocol import RequestHeader, encode_request
from protocol.messages import build
from protocol.schemas import API_VERSIONS, PRODUCE
from tests.pure.test_gateway_rewrite import kp_frame, project
from tests.support.clients import read_exactly
from tests.support.standin_broker import StandInBroker
from tests.zookeeper.test_e2e_gateway_lenient import start_gateway

VERSION = 9  # flexible (librdkafka 2.16 sends 9-11)
TOPIC = "orders"


def produce(correlation_id: int, sizes: list[int], acks: int = -1) -> tuple[bytes, list[bytes]]:
    """A framed Produce request with record sets of `sizes` bytes (random: nothing reads
    them), and those record sets."""
    records = [os.urandom(n) for n in sizes]
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 30_000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": i, "records": r} for i, r in enumerate(records)]}]}
    return encode_request(RequestHeader(PRODUCE.key, VERSION, correlation_id, "stream-test"),
                          build(PRODUCE.request.struct, project(PRODUCE.request.struct, VERSION, body))), records


def api_versions(correlation_id: int) -> bytes:
    return encode_request(RequestHeader(API_VERSIONS.key, 3, correlation_id, "stream-test"),
                          build(API_VERSIONS.request.struct, {"client_software_name": "t",
                                                              "client_software_version": "1"}))


def read_answer(sock: socket.socket) -> bytes:
    head = read_exactly(sock, 4)
    return head + read_exactly(sock, struct.unpack(">i", head)[0])


def send_in_pieces(sock: socket.socket, data: bytes, cuts=(3, 40, 300, 70_000, 333_333, 800_000)) -> None:
    """`data` in pieces a few ms apart: a request's head and records cut anywhere."""
    bounds = [0, *(c for c in cuts if c < len(data)), len(data)]
    for a, b in zip(bounds, bounds[1:]):
        sock.sendall(data[a:b])
        time.sleep(0.005)


class Broker:
    """A stand-in broker (node 1) that keeps the Produce requests it got and answers each,
    after `pause` seconds for the correlation ids in `pauses` (not reading meanwhile)."""

    def __init__(self):
        self.got: list[tuple[int, int, list[bytes]]] = []  # (correlation id, acks, record sets)
        self.pauses: dict[int, float] = {}
        self.stand_in = StandInBroker({}, {TOPIC: (3, uuid.uuid4())}, node_id=1, advertises={PRODUCE.key: (3, 11)})
        self.stand_in.raw[PRODUCE.key] = self.answer
        # a small receive buffer (its connections inherit it): a pause in reading soon fills the
        # link's socket, then its pipe, and the client is read no more until it drains
        self.stand_in.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)

    def answer(self, header, request):
        self.got.append((header.correlation_id, request.acks,
                         [bytes(p.records) for t in request.topic_data for p in t.partition_data]))
        time.sleep(self.pauses.get(header.correlation_id, 0))
        if request.acks == 0:
            return b""
        values = {"responses": [{"name": TOPIC, "partition_responses": [
            {"index": p.index, "error_code": 0, "base_offset": 7} for p in request.topic_data[0].partition_data]}],
            "throttle_time_ms": 0}
        return kp_frame(PRODUCE.response, project(PRODUCE.response.struct, header.api_version, values),
                        header.api_version, header.correlation_id)


@pytest.fixture
def gateway(zookeeper, tmp_path):
    broker = Broker()
    broker.stand_in.start()
    process = start_gateway(zookeeper, tmp_path, broker.stand_in)
    try:
        yield broker, process, process.port + process.node_offset + 1
    finally:
        assert process.stop() == 0
        broker.stand_in.stop()


def test_large_produce_requests_stream_whole_and_in_order_past_a_broker_that_stops_reading(gateway):
    broker, process, node_port = gateway
    sizes = {1: [400_000, 5, 700_000], 3: [10, 20, 30], 4: [3_000_000, 3_000_000], 5: [300_000]}
    sent = {}
    broker.pauses[1] = 1.5  # the first is not answered, nor anything after it read, for 1.5 s
    with socket.create_connection(("127.0.0.1", node_port), timeout=60) as sock:
        for correlation_id in (1, 2, 3, 4, 5):  # Produce, ApiVersions (answered here), Produce x 3
            if correlation_id == 2:
                sock.sendall(api_versions(2))
                continue
            frame, sent[correlation_id] = produce(correlation_id, sizes[correlation_id])
            send_in_pieces(sock, frame)
        answers = [read_answer(sock) for _ in range(5)]
    assert [struct.unpack_from(">i", a, 4)[0] for a in answers] == [1, 2, 3, 4, 5]  # in the order asked
    assert [(c, acks) for c, acks, _ in broker.got] == [(1, -1), (3, -1), (4, -1), (5, -1)]
    for correlation_id, _, records in broker.got:
        assert records == sent[correlation_id]  # every byte, as the client sent it
    streamed = process.metric("groupkeeper_gateway_streamed_bytes_total", node="1")
    # the first request opens the link (read whole: the link is not through yet); of the
    # others, each one's first read (64 KiB at most) is read in and the rest streams
    assert sum(sum(sizes[c]) for c in (4, 5)) - 2 * 65536 <= streamed <= sum(sum(sizes[c]) for c in (4, 5)), streamed


def test_a_large_produce_without_an_answer_streams_and_the_next_is_answered(gateway):
    broker, process, node_port = gateway
    with socket.create_connection(("127.0.0.1", node_port), timeout=60) as sock:
        quiet, quiet_records = produce(1, [600_000], acks=0)
        answered, answered_records = produce(2, [200_000, 100])
        send_in_pieces(sock, quiet)
        send_in_pieces(sock, answered)
        answer = read_answer(sock)
    assert struct.unpack_from(">i", answer, 4)[0] == 2
    assert [(c, acks, r) for c, acks, r in broker.got] == [(1, 0, quiet_records), (2, -1, answered_records)]


def test_small_produce_requests_each_read_whole_relay_and_answer_in_order(gateway):
    """The data path's common case (one whole Produce per read, relayed as it came, its
    answer set up after it went: `Gateway.express`): answered ones, one without an answer,
    one held at the broker while the next passes, answers in order; and a Produce whose
    header does not read goes no further than the gateway."""
    broker, process, node_port = gateway
    sent = {}
    broker.pauses[4] = 0.5  # its answer comes after the next request went out
    with socket.create_connection(("127.0.0.1", node_port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for correlation_id, acks in ((1, -1), (2, 0), (3, 1), (4, -1), (5, -1)):
            frame, sent[correlation_id] = produce(correlation_id, [100 * correlation_id, 7], acks=acks)
            sock.sendall(frame)
            time.sleep(0.2 if correlation_id == 1 else 0.1)  # the first opens the link; each is read alone
        answers = [read_answer(sock) for _ in range(4)]
        assert [struct.unpack_from(">i", a, 4)[0] for a in answers] == [1, 3, 4, 5]
        sock.sendall(struct.pack(">ihhih", 10, PRODUCE.key, VERSION, 6, 200))  # a client id longer than the frame
        sock.settimeout(10)
        assert sock.recv(100) == b""  # closed
    assert [(c, acks) for c, acks, _ in broker.got] == [(1, -1), (2, 0), (3, 1), (4, -1), (5, -1)]
    for correlation_id, _, records in broker.got:
        assert records == sent[correlation_id]
    assert process.metric("groupkeeper_gateway_requests_total", api="Produce", node="1") == 5


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_clients_that_leave_halfway_through_a_streaming_request_leave_nothing_open(gateway):
    broker, process, node_port = gateway
    frame, _ = produce(1, [800_000])

    def leave_halfway() -> None:
        with socket.create_connection(("127.0.0.1", node_port), timeout=30) as sock:
            sock.sendall(frame[:500_000])
            time.sleep(0.05)  # streamed as far as it came

    leave_halfway()  # the first opens what every later one opens too (the broker's link's pool, logs)
    deadline = time.monotonic() + 30
    while True:  # its link closed with it
        settled = open_descriptors(process.process.pid)
        time.sleep(0.3)
        if open_descriptors(process.process.pid) == settled or time.monotonic() > deadline:
            break
    for _ in range(20):
        leave_halfway()
    deadline = time.monotonic() + 30
    while open_descriptors(process.process.pid) > settled:  # a link left would stay
        assert time.monotonic() < deadline, (open_descriptors(process.process.pid), settled)
        time.sleep(0.1)
    # and the gateway serves on: a whole request through it
    with socket.create_connection(("127.0.0.1", node_port), timeout=30) as sock:
        whole, records = produce(9, [250_000])
        sock.sendall(whole)
        assert struct.unpack_from(">i", read_answer(sock), 4)[0] == 9
    assert broker.got[-1] == (9, -1, records)
    assert Path(f"/proc/{process.process.pid}").exists()
