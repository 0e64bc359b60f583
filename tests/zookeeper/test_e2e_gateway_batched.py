"""Several requests, and several answers, that one read brings through a real gateway, with
a stand-in broker that holds its Fetch answers and then sends them back to back in one
write: the client's pipelined requests reach the broker in one read (the gateway relays
what one read of its client brought in one send), and the answers reach the client whole,
in the order asked, with the answers the gateway makes itself in their places and KIP-951's
node endpoints rewritten."""

from __future__ import annotations

import socket
import uuid

import pytest

from protocol.schemas import API_VERSIONS, FETCH
from tests.pure.test_gateway_rewrite import ENDPOINTS, FETCH_ANSWER, kp_frame, kp_read, project
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.standin_broker import StandInBroker, data_segments_in
from tests.zookeeper.test_e2e_gateway_lenient import FETCH_REQUEST, PARTITIONS, TOPIC, gateway_to_fetch_from
from tests.zookeeper.test_e2e_gateway_splice import read_answer, request

FETCHES = (1, 3, 4, 6)  # the correlation ids of the Fetches; 2 and 5 are ApiVersions
VERSIONS = {"client_software_name": "t", "client_software_version": "1"}


def small_answer(version: int, correlation_id: int) -> bytes:
    values = {**FETCH_ANSWER, "session_id": correlation_id, "node_endpoints": ENDPOINTS}
    return kp_frame(FETCH.response, project(FETCH.response.struct, version, values), version, correlation_id)


@pytest.mark.parametrize("version", [12, 16])
def test_pipelined_requests_go_in_one_send_and_answers_read_together_come_back_whole_in_order(
        zookeeper, tmp_path, version):
    held: list[bytes] = []

    def answer_all_at_once(header, _request):
        if header.correlation_id == 0:  # the first, alone: answered at once
            return small_answer(version, 0)
        held.append(small_answer(version, header.correlation_id))
        return [] if len(held) < len(FETCHES) else [b"".join(held)]  # the last: all of them, one write

    broker, process, node_port = gateway_to_fetch_from(zookeeper, tmp_path, answer_all_at_once)
    try:
        with socket.create_connection(("127.0.0.1", node_port), timeout=30) as sock:
            sock.sendall(request(FETCH, version, FETCH_REQUEST, 0))  # its answer: the link is through
            assert int.from_bytes(read_answer(sock)[4:8], "big") == 0
            before = data_segments_in(sock)
            asked = [(FETCH if n in FETCHES else API_VERSIONS, n) for n in range(1, 7)]
            sock.sendall(b"".join(
                request(api, version if api is FETCH else 3,
                        FETCH_REQUEST if api is FETCH else {"client_software_name": "t",
                                                            "client_software_version": "1"}, n)
                for api, n in asked))
            answers = [read_answer(sock) for _ in asked]
            # the four Fetch answers, read by the gateway in one read of the broker, came with
            # the two it made itself in one send
            assert data_segments_in(sock) - before == 1
        for (api, correlation_id), got in zip(asked, answers):
            assert int.from_bytes(got[4:8], "big") == correlation_id  # in the order asked
            if api is not FETCH:
                continue
            frame = small_answer(version, correlation_id)
            if version < 16:
                assert got == frame  # nothing to rewrite: as the broker sent it
                continue
            _, values, _ = kp_read(FETCH.response, got, version)
            assert values["session_id"] == correlation_id
            assert [(e["node_id"], e["host"], e["port"]) for e in values["node_endpoints"]] == [
                (1, "127.0.0.1", node_port)]
        # the four Fetches, read by the gateway in one read of its client, reached the broker
        # in one data segment: one send (the first Fetch came alone, in a segment of its own)
        assert [(keys, segments) for keys, segments in broker.reads if FETCH.key in keys] == [
            ([FETCH.key], 1), ([FETCH.key] * len(FETCHES), 2)], broker.reads
    finally:
        assert process.stop() == 0
        broker.stop()


def test_a_client_paused_while_its_answers_were_held_goes_on_once_they_have_gone(zookeeper, tmp_path):
    """Answers not yet taken past `max_queued_reply_bytes` pause a connection's requests; held
    for one send (two Fetch answers read together, the gateway's own answers behind them), they
    leave it paused until that send, which must then let it go on: the Fetch that waited is
    relayed and answered, and so is everything after it."""
    version, first_two = 12, []

    def answer(header, _request):
        if header.correlation_id > 2:  # the one that waited: at once
            return small_answer(version, header.correlation_id)
        first_two.append(small_answer(version, header.correlation_id))
        return [] if len(first_two) < 2 else [b"".join(first_two)]  # both in one write

    broker = StandInBroker({}, {TOPIC: (PARTITIONS, uuid.uuid4())}, node_id=1, advertises={FETCH.key: (4, 17)})
    broker.raw[FETCH.key] = answer
    broker.start()
    process = CoordinatorProcess(zookeeper, tmp_path, gateway=f"127.0.0.1:{broker.port}", metadata_max_age_ms=500,
                                 max_queued_reply_bytes=300)
    process.node_offset = pin_node_ports(process, [1], max_node_id=50)
    process.start()
    process.wait_for_log("broker node reachable", node=1)
    try:
        with socket.create_connection(("127.0.0.1", process.port + process.node_offset + 1), timeout=30) as sock:
            sock.sendall(request(API_VERSIONS, 3, VERSIONS, 0))  # the link is through before the rest
            read_answer(sock)
            # two Fetches the broker holds, then the gateway's own answers past the limit,
            # then a Fetch that must wait for them, and one more of the gateway's
            asked = [(FETCH, 1), (FETCH, 2), *[(API_VERSIONS, n) for n in range(3, 7)], (FETCH, 7), (API_VERSIONS, 8)]
            sock.sendall(b"".join(request(api, version if api is FETCH else 3,
                                          FETCH_REQUEST if api is FETCH else VERSIONS, n) for api, n in asked))
            answers = [read_answer(sock) for _ in asked]
        assert [int.from_bytes(a[4:8], "big") for a in answers] == [n for _, n in asked]
        assert answers[6] == small_answer(version, 7)
    finally:
        assert process.stop() == 0
        broker.stop()
