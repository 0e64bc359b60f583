"""A stand-in for a Kafka broker: it answers ApiVersions, Metadata and ListOffsets from
tables the test describes and changes, what the test answers itself (`raw`), and closes the
connection on anything else.

Why it exists: no real Kafka broker can run on this machine (none is packaged, and there is
no network to fetch one), and groupkeeper learns from brokers twice: the `groups` CLI reads
LOG-END-OFFSET, LAG and the log bounds that reset-offsets needs from the partition leaders
(ListOffsets), and the `brokers` topic source learns topics, partitions, leaders and topic
ids from Metadata, as a broker of a cluster without ZooKeeper (KRaft, Redpanda) answers it.
It speaks through our own codec, which tests/pure/test_protocol_crosscheck.py checks against
kafka-python's, and tests/pure/test_topics_brokers.py checks its answers with kafka-python's own
classes. It can also register itself in Kafka's ZooKeeper layout as a broker does.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field

from kazoo.client import KazooClient

from protocol import FrameReader, decode_request, encode_response, messages as m
from protocol.schemas import API_VERSIONS, LIST_OFFSETS, METADATA

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
    """`topics` (name -> (partition count, topic id)) is what Metadata lists, every partition
    led by this broker (node `node_id`), or by none without `leads`; the test may change it
    at any time. `metadata_versions` is the Metadata range ApiVersions advertises, and
    `advertises` more ranges it claims (to stand for a cluster's), though it serves none of them."""

    def __init__(self, logs: dict[tuple[str, int], Log], topics: dict[str, tuple[int, uuid.UUID]] | None = None,
                 node_id: int = 1, port: int = 0, metadata_versions: tuple[int, int] = (0, 12), leads: bool = True,
                 advertises: dict[int, tuple[int, int]] | None = None, advertised_port: int | None = None):
        self.logs = logs
        self.topics = {} if topics is None else topics
        self.node_id = node_id
        self.leads = leads
        self.advertises = advertises or {}
        self.advertised_port = advertised_port  # the port its Metadata names for it; default: its own
        self.metadata_versions = metadata_versions
        self.others: dict[int, tuple[str, int]] = {}  # more nodes its Metadata lists (id -> host, port)
        # answers the test makes itself, by API key: (request header, request) -> framed answer
        self.raw: dict[int, object] = {}
        self.listener = socket.create_server(("127.0.0.1", port))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.requests: list[tuple[int, int]] = []  # (API key, version) in arrival order
        # each read's whole requests (their API keys) and the data segments its connection had
        # received by then (TCP_INFO's tcpi_data_segs_in): how many sends brought them
        self.reads: list[tuple[list[int], int]] = []
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
            frames = reader.frames()
            self.reads.append(([struct.unpack_from(">h", frame)[0] for frame in frames], data_segments_in(connection)))
            for frame in frames:
                header, request = decode_request(frame)
                self.requests.append((header.api_key, header.api_version))
                if header.api_key in self.raw:  # bytes, or a list of parts sent a few ms apart
                    answer = self.raw[header.api_key](header, request)
                    for part in answer if isinstance(answer, list) else [answer]:
                        connection.sendall(part)
                        if isinstance(answer, list):
                            time.sleep(0.005)
                    continue
                if header.api_key not in (API_VERSIONS.key, LIST_OFFSETS.key, METADATA.key):
                    connection.close()  # as a broker does with a request it does not serve
                    return
                connection.sendall(encode_response(header, self._answer(header.api_key, header.api_version, request)))

    def _answer(self, api_key: int, version: int, request):
        if api_key == API_VERSIONS.key:
            return m.ApiVersionsResponse(api_keys=[
                m.ApiVersion(api_key=API_VERSIONS.key, min_version=0, max_version=4),
                m.ApiVersion(api_key=LIST_OFFSETS.key, min_version=1, max_version=7),
                m.ApiVersion(api_key=METADATA.key, min_version=self.metadata_versions[0],
                             max_version=self.metadata_versions[1])] + [
                m.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in self.advertises.items()])
        if api_key == METADATA.key:
            return self.metadata(request)
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


    def metadata(self, request) -> m.MetadataResponse:
        """Every topic asked for (all of them for a null list), each partition led by this
        broker, or leaderless (LEADER_NOT_AVAILABLE) without `leads`."""
        topics = dict(self.topics)  # the test may change it meanwhile
        asked = sorted(topics) if request.topics is None else [t.name for t in request.topics]
        answered = []
        for name in asked:
            if name not in topics:
                answered.append(m.MetadataResponseTopic(error_code=3, name=name))  # UNKNOWN_TOPIC_OR_PARTITION
                continue
            count, topic_id = topics[name]
            leader = self.node_id if self.leads else -1
            answered.append(m.MetadataResponseTopic(error_code=0, name=name, topic_id=topic_id, partitions=[
                m.MetadataResponsePartition(error_code=0 if self.leads else 5, partition_index=p, leader_id=leader,
                                            leader_epoch=0, replica_nodes=[self.node_id],
                                            isr_nodes=[self.node_id] if self.leads else [])
                for p in range(count)]))
        return m.MetadataResponse(brokers=[m.MetadataResponseBroker(node_id=self.node_id, host="127.0.0.1",
                                                                    port=self.advertised_port or self.port)] + [
                                      m.MetadataResponseBroker(node_id=node, host=host, port=port)
                                      for node, (host, port) in sorted(dict(self.others).items())],
                                  cluster_id="standin-cluster", controller_id=self.node_id, topics=answered)


def data_segments_in(sock: socket.socket) -> int:
    """The data segments `sock` has received (Linux's tcp_info, `tcpi_data_segs_in`, 4.6+):
    on loopback, one per send of its peer that fits in a segment, pure ACKs not counted."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("=I", info, _DATA_SEGS_IN)[0]


_DATA_SEGS_IN = 152  # its offset in struct tcp_info (include/uapi/linux/tcp.h)


def set_leader(client: KazooClient, topic: str, partition: int, broker_id: int) -> None:
    """Kafka's partition state znode, naming `broker_id` the leader."""
    client.create(f"/brokers/topics/{topic}/partitions/{partition}/state", json.dumps({
        "controller_epoch": 1, "leader": broker_id, "version": 1, "leader_epoch": 0,
        "isr": [broker_id]}).encode(), makepath=True)

