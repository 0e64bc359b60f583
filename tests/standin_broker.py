"""A stand-in for a Kafka broker that leads some partitions: it answers ApiVersions and
ListOffsets from logs the test describes, and nothing else.

Why it exists: the `groups` CLI reads LOG-END-OFFSET, LAG and the log bounds that
reset-offsets needs from the partition leaders, and no real Kafka broker can run on this
machine (none is packaged, and there is no network to fetch one). It speaks through our own
codec, which tests/test_protocol_crosscheck.py checks against kafka-python's, and
registers itself in Kafka's ZooKeeper layout as a broker does.
"""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field

from kazoo.client import KazooClient

from protocol import FrameReader, decode_request, encode_response, messages as m
from protocol.schemas import API_VERSIONS, LIST_OFFSETS

NOT_LEADER_OR_FOLLOWER = 6


@dataclass
class Log:
    start: int
    end: int  # the next offset to be written
    timestamps: list[tuple[int, int]] = field(default_factory=list)  # (offset, record time ms), ascending

    def offset_for(self, timestamp: int) -> int:
        if timestamp == -1:
            return self.end
        if timestamp == -2:
            return self.start
        return next((o for o, ts in self.timestamps if ts >= timestamp), -1)


class StandInBroker:
    def __init__(self, logs: dict[tuple[str, int], Log]):
        self.logs = logs
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.requests: list[tuple[int, int]] = []  # (API key, version) in arrival order
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._connections: list[socket.socket] = []

    def start(self) -> StandInBroker:
        self._threads[0].start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for connection in self._connections:
            connection.close()
        for thread in self._threads:
            if thread.ident is not None:  # started
                thread.join(timeout=10)
        self.listener.close()

    def register(self, zookeeper: str, broker_id: int) -> None:
        """Write /brokers/ids/<id> and a state znode naming this broker the leader of each of
        its partitions, as a Kafka broker and controller do."""
        client = KazooClient(hosts=zookeeper)
        client.start(timeout=10)
        try:
            client.create(f"/brokers/ids/{broker_id}", json.dumps({
                "host": "127.0.0.1", "port": self.port, "version": 4, "rack": None,
                "endpoints": [f"PLAINTEXT://127.0.0.1:{self.port}"]}).encode(), makepath=True)
            for topic, p in self.logs:
                set_leader(client, topic, p, broker_id)
        finally:
            client.stop()
            client.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            connection.settimeout(0.1)
            self._connections.append(connection)
            thread = threading.Thread(target=self._serve, args=(connection,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, connection: socket.socket) -> None:
        reader = FrameReader()
        while not self._stop.is_set():
            try:
                data = connection.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            reader.feed(data)
            for frame in reader.frames():
                header, request = decode_request(frame)
                self.requests.append((header.api_key, header.api_version))
                if header.api_key not in (API_VERSIONS.key, LIST_OFFSETS.key):
                    connection.close()  # as a broker does with a request it does not serve
                    return
                connection.sendall(encode_response(header, self._answer(header.api_key, request)))

    def _answer(self, api_key: int, request):
        if api_key == API_VERSIONS.key:
            return m.ApiVersionsResponse(api_keys=[
                m.ApiVersion(api_key=API_VERSIONS.key, min_version=0, max_version=3),
                m.ApiVersion(api_key=LIST_OFFSETS.key, min_version=1, max_version=7)])
        topics = []
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                log = self.logs.get((t.name, p.partition_index))
                if log is None:
                    partitions.append(m.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=NOT_LEADER_OR_FOLLOWER))
                else:
                    partitions.append(m.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, offset=log.offset_for(p.timestamp)))
            topics.append(m.ListOffsetsTopicResponse(name=t.name, partitions=partitions))
        return m.ListOffsetsResponse(topics=topics)


def set_leader(client: KazooClient, topic: str, partition: int, broker_id: int) -> None:
    """Kafka's partition state znode, naming `broker_id` the leader."""
    client.create(f"/brokers/topics/{topic}/partitions/{partition}/state", json.dumps({
        "controller_epoch": 1, "leader": broker_id, "version": 1, "leader_epoch": 0,
        "isr": [broker_id]}).encode(), makepath=True)

