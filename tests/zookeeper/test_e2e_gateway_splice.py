"""The record sets of Fetch answers moved by the kernel (splice) through a real gateway,
with a stand-in broker whose answers are made to measure: large record sets arriving in
pieces, answers pipelined back to back with answers the gateway makes itself between them,
a client that reads slowly (the pipe fills, the link waits for it). Every byte reaches the
client in order, as the broker sent it (KIP-951's node endpoints rewritten in place), and
the spliced bytes are counted."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from protocol import RequestHeader, encode_request
from protocol.messages import build
from protocol.schemas import API_VERSIONS, FETCH
from tests.pure.test_gateway_rewrite import ENDPOINTS, FETCH_ANSWER, kp_frame, kp_read, project
from tests.support.clients import read_exactly
from tests.zookeeper.test_e2e_gateway_lenient import FETCH_REQUEST, gateway_to_fetch_from

pytestmark = pytest.mark.skipif(not hasattr(os, "splice"), reason="splice(2) is Linux's")

SIZES = (400_000, 5, 700_000)  # the three partitions' record sets


def fetch_answer(version: int, correlation_id: int, seed: int) -> tuple[bytes, list[bytes]]:
    """A framed Fetch answer with large record sets (random bytes: a relay does not read
    them), and those record sets."""
    records = [os.urandom(n) for n in SIZES]
    partitions = [{**p, "records": r} for p, r in zip(FETCH_ANSWER["responses"][0]["partitions"], records)]
    values = {**FETCH_ANSWER, "session_id": seed, "node_endpoints": ENDPOINTS,
              "responses": [{**FETCH_ANSWER["responses"][0], "partitions": partitions}]}
    return kp_frame(FETCH.response, project(FETCH.response.struct, version, values), version, correlation_id), records


def request(api, version: int, body: dict, correlation_id: int) -> bytes:
    return encode_request(RequestHeader(api.key, version, correlation_id, "splice-test"),
                          build(api.request.struct, body))


def read_answer(sock: socket.socket) -> bytes:
    head = read_exactly(sock, 4)
    return head + read_exactly(sock, struct.unpack(">i", head)[0])


@pytest.mark.parametrize("version", [12, 16])
def test_large_record_sets_pass_spliced_in_order_to_a_slow_reader(zookeeper, tmp_path, version):
    sent: dict[int, tuple[bytes, list[bytes]]] = {}

    def answer_in_pieces(header, _request):
        frame, records = sent[header.correlation_id] = fetch_answer(version, header.correlation_id,
                                                                    header.correlation_id)
        cuts = [0, 3, 40, 1000, 150_000, 600_000, 900_000, len(frame)]  # heads and records cut anywhere
        return [frame[a:b] for a, b in zip(cuts, cuts[1:])]

    broker, process, node_port = gateway_to_fetch_from(zookeeper, tmp_path, answer_in_pieces)
    try:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)  # a slow, small reader
            sock.settimeout(60)
            sock.connect(("127.0.0.1", node_port))
            # pipelined: Fetch, ApiVersions (answered by the gateway itself), Fetch, Fetch
            asked = [(FETCH, 1), (API_VERSIONS, 2), (FETCH, 3), (FETCH, 4)]
            sock.sendall(b"".join(request(api, version if api is FETCH else 3,
                                          FETCH_REQUEST if api is FETCH else {"client_software_name": "t",
                                                                              "client_software_version": "1"}, n)
                                  for api, n in asked))
            time.sleep(1.0)  # nothing read meanwhile: the gateway's pipe and the socket fill
            answers = [read_answer(sock) for _ in asked]
        for (api, correlation_id), got in zip(asked, answers):
            assert struct.unpack_from(">i", got, 4)[0] == correlation_id  # in the order asked
            if api is not FETCH:
                continue
            frame, records = sent[correlation_id]
            assert len(got) == len(frame)
            if version < 16:
                assert got == frame  # nothing in it to rewrite: every byte as the broker sent it
                continue
            _, values, _ = kp_read(FETCH.response, got, version)
            assert [p["records"] for p in values["responses"][0]["partitions"]] == records
            assert got[:len(got) - 200] == frame[:len(frame) - 200]  # only the tagged fields at its end differ
            assert [(e["node_id"], e["host"], e["port"]) for e in values["node_endpoints"]] == [
                (1, "127.0.0.1", node_port)]  # node 2 is not in this cluster: left out
        spliced = process.metric("groupkeeper_gateway_spliced_bytes_total", node="1")
        # each answer's first read takes the head and a little of the first record set; the
        # rest of the large ones is spliced
        assert spliced >= 3 * (sum(SIZES) - 2 * 32 * 1024 - 5), spliced
    finally:
        assert process.stop() == 0
        broker.stop()
