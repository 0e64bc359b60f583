"""An unmodified librdkafka consumer-protocol member's heartbeats, seen on the wire between
it and a real `groupkeeper run` (the coordinator advertises a snooping relay's address):
once it holds its partitions, its heartbeats are the steady frame the fast path reads
(every field null but group, member id and epoch), and each is answered with the bytes the
fast path makes. Whether a frame is answered by the fast path or the general path cannot be
told from outside (both answer alike: tests/pure/test_consumer_group_fast_path.py); what this
shows is that a real client's steady heartbeat is the case the fast path takes."""

from __future__ import annotations

import socket
import struct
import threading
import time

from coordinator.store.zkserver import free_port
from protocol import decode_request, decode_response
from protocol.hot_consumer import consumer_heartbeat_answer, read_consumer_heartbeat
from protocol.schemas import CONSUMER_GROUP_HEARTBEAT as CGH
from tests.support.clients import CK, poll_until
from tests.support.coordinator_process import serving

TOPIC, PARTITIONS = "orders", 6
INTERVAL_MS = 300


class Relay:
    """Relays one port to another, keeping every frame each way of every connection."""

    def __init__(self, port: int, target: int):
        self.target = target
        self.connections: list[tuple[list[bytes], list[bytes]]] = []  # (requests, answers) of each, in order
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", port))
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            requests: list[bytes] = []
            answers: list[bytes] = []
            self.connections.append((requests, answers))
            threading.Thread(target=self._pipe, args=(client, upstream, requests), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, answers), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, kept: list) -> None:
        buf = b""
        while True:
            try:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
            except OSError:
                break
            buf += data
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                n = struct.unpack_from(">i", buf)[0]
                with self.lock:
                    kept.append(buf[:4 + n])
                buf = buf[4 + n:]

    def close(self) -> None:
        for s in self.sockets:
            s.close()


def test_a_librdkafka_members_steady_heartbeats_are_what_the_fast_path_reads(zookeeper, tmp_path):
    relay_port = free_port()
    with serving(zookeeper, tmp_path, {TOPIC: PARTITIONS}, group_consumer_heartbeat_interval_ms=INTERVAL_MS,
                 advertised_listeners=[f"PLAINTEXT://127.0.0.1:{relay_port}"]) as groupkeeper:
        relay = Relay(relay_port, groupkeeper.port)
        ck = CK(f"127.0.0.1:{relay_port}", "steady", TOPIC, protocol="consumer")
        try:
            poll_until(lambda: len(ck.assigned) == PARTITIONS, ck)
            end = time.monotonic() + 10 * INTERVAL_MS / 1000
            while time.monotonic() < end:
                ck.consumer.poll(0.1)
        finally:
            ck.consumer.close()
            time.sleep(0.2)
            relay.close()
    with relay.lock:  # a connection's answers come in the order of its requests
        heartbeats = [(request[4:], answer) for requests, answers in relay.connections
                      for request, answer in zip(requests, answers) if request[4:6] == CGH.key.to_bytes(2, "big")]
    steady = 0
    for frame, answer in heartbeats:
        header, request = decode_request(frame)
        read = read_consumer_heartbeat(frame)
        # a join and an acknowledgement (partitions reported) carry fields: not read; a leave is
        # read (its fields are null) and then declined by the steady check (epoch -1)
        assert (read is not None) == (request.member_epoch != 0 and request.topic_partitions is None), request
        if read is None or request.member_epoch < 0:
            continue
        steady += 1
        _, body = decode_response(CGH.key, header.api_version, answer[4:])
        assert body.error_code == 0 and body.assignment is None
        assert answer == consumer_heartbeat_answer(header.api_version, header.correlation_id,
                                                   request.member_id.encode(), request.member_epoch, INTERVAL_MS)
    assert steady >= 5, f"{steady} steady heartbeats of {len(heartbeats)}"
