"""The gateway as tolerant of brokers as Kafka's clients are, and quiet about it (issue 38),
with a stand-in broker whose answers are made to measure: a Fetch answer the gateway cannot
walk (it reads the high watermarks for consumer lag) is passed on as it came; a Metadata
answer that does not read, which must be rewritten, closes its clients' connections, but
is logged once for the broker, not once a connection, and so are the closes themselves
(one line per burst); a client closed in a loop costs one line."""

from __future__ import annotations

import socket
import struct
import uuid

from protocol import RequestHeader, encode_request, encode_response
from protocol.messages import build
from protocol.schemas import FETCH, METADATA
from tests.pure.test_gateway_rewrite import ANSWERS, kp_frame, project
from tests.support.clients import read_exactly
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.standin_broker import StandInBroker

TOPIC, PARTITIONS, CLIENTS = "orders", 3, 12
CLIENT_ID = "lenient-test"


def start_gateway(zookeeper, tmp_path, broker: StandInBroker) -> CoordinatorProcess:
    process = CoordinatorProcess(zookeeper, tmp_path, gateway=f"127.0.0.1:{broker.port}", metadata_max_age_ms=500)
    process.node_offset = pin_node_ports(process, [1], max_node_id=50)
    process.start()
    process.wait_for_log("broker node reachable", node=1)
    return process


def gateway_to_fetch_from(zookeeper, tmp_path, answer) -> tuple[StandInBroker, CoordinatorProcess, int]:
    """A stand-in broker (node 1, Fetch v4-17) whose Fetch answers `answer(header, request)`
    makes, a gateway in front of it, both started; and the gateway's port for node 1."""
    broker = StandInBroker({}, {TOPIC: (PARTITIONS, uuid.uuid4())}, node_id=1, advertises={FETCH.key: (4, 17)})
    broker.raw[FETCH.key] = answer
    broker.start()
    process = start_gateway(zookeeper, tmp_path, broker)
    return broker, process, process.port + process.node_offset + 1


def ask(port: int, api, version: int, body: dict, correlation_id: int = 1) -> bytes:
    """One request on a new connection; the answer frame (size included), or b"" if closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(encode_request(RequestHeader(api.key, version, correlation_id, CLIENT_ID), build(
            api.request.struct, body)))
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return b""
        return head + read_exactly(sock, struct.unpack(">i", head)[0])


FETCH_REQUEST = {"max_wait_ms": 0, "min_bytes": 1, "isolation_level": 0, "session_id": 0, "topics": [],
                 "forgotten_topics_data": [], "rack_id": ""}


def test_a_fetch_answer_the_walk_cannot_follow_is_passed_on_as_it_came(zookeeper, tmp_path):
    version = 12  # below KIP-951: nothing in it to rewrite; walked for its high watermarks only
    sent = []

    def fetch_answer(header, request):
        data = kp_frame(FETCH.response, project(FETCH.response.struct, version, ANSWERS[FETCH.key]), version,
                        header.correlation_id)
        data = struct.pack(">i", len(data) - 4 + 3) + data[4:] + b"abc"  # three bytes past its fields
        sent.append(data)
        return data

    broker, process, port = gateway_to_fetch_from(zookeeper, tmp_path, fetch_answer)
    try:
        for n in range(1, 4):
            assert ask(port, FETCH, version, FETCH_REQUEST, correlation_id=n) == sent[-1]  # every byte as it came
        assert process.metric("groupkeeper_broker_answers_malformed_total", api="Fetch", kind="relayed") == 3
        lines = [e for e in process.events() if e.get("event", "").startswith("a broker's answer does not read")]
        assert len(lines) == 1 and lines[0]["api"] == "Fetch", lines
    finally:
        assert process.stop() == 0
        broker.stop()


def test_a_metadata_answer_that_does_not_read_closes_its_clients_and_is_logged_once(zookeeper, tmp_path):
    broker = StandInBroker({}, {TOPIC: (PARTITIONS, uuid.uuid4())}, node_id=1)

    def metadata(header, request):  # the stand-in's own for the gateway's topic source; garbage for clients
        if header.client_id == CLIENT_ID:
            return struct.pack(">ii", 7, header.correlation_id) + b"\xff\xff\xff"
        return encode_response(header, broker.metadata(request))

    broker.raw[METADATA.key] = metadata
    broker.start()
    process = start_gateway(zookeeper, tmp_path, broker)
    try:
        port = process.port + process.node_offset + 1
        for n in range(CLIENTS):  # a client that reconnects in a loop, closed each time
            assert ask(port, METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                            "include_topic_authorized_operations": False}, n) == b""
        assert process.metric("groupkeeper_broker_answers_malformed_total", api="Metadata", kind="closed") == CLIENTS
        events = process.events()
        assert len([e for e in events if e.get("event", "").startswith("a broker's answer does not read")]) == 1
        closes = [e for e in events if e.get("event") == "connection closed" and "broker link" in e.get("reason", "")]
        assert len(closes) == 1, closes  # one line for the burst
        assert process.metric("groupkeeper_connection_churn_total", reason="broker link") == CLIENTS - 1
        assert process.metric("groupkeeper_connections_closed_total", reason="broker link") == CLIENTS
    finally:
        assert process.stop() == 0
        broker.stop()
