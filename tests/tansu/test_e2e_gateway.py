"""The gateway with real parts: Tansu (a Kafka-protocol broker) behind `groupkeeper run
--gateway`, unmodified kafka-python and confluent-kafka (librdkafka) clients bootstrapping
from groupkeeper: records produced and read back in full through the node ports, commits,
and every group coordinated by groupkeeper, unknown to the broker's own coordinator."""

from __future__ import annotations

import socket
import textwrap
import time
import uuid

import pytest
from confluent_kafka import Consumer as CKConsumer, Producer as CKProducer, TopicPartition as CKPartition
from kafka import KafkaProducer
from kafka.structs import OffsetAndMetadata

from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from coordinator.store.zkserver import free_port
from protocol import RequestHeader, encode_request, encode_response
from protocol.messages import build
from protocol.schemas import FETCH, FIND_COORDINATOR, LIST_GROUPS, METADATA, OFFSET_FETCH
from tests.support.clients import (CK, RawConnection, committed, kill_and_take_over, kp_commit, kp_consumer, member_process,
                           read_exactly)
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.standin_broker import StandInBroker
from tests.support.tansu import tansu  # noqa: F401 - a fixture
from tests.pure.test_gateway_rewrite import FETCH_ANSWER, kip951_leaders, kp_frame, kp_read, project
from tools.kafka_admin import NodeConnection, Unreachable

TOPIC, PARTITIONS, RECORDS = "orders", 3, 1000
TANSU_NODE = 111  # Tansu's one node (tests/support/tansu.py)
FAST = {"metadata_max_age_ms": 500, "group_min_session_timeout_ms": 1000}


def start_gateway(zookeeper, tmp_path, bootstrap: str, nodes: tuple[int, ...] = (TANSU_NODE,),
                  max_node_id: int | None = None, **config) -> CoordinatorProcess:
    """A gateway to `bootstrap`, started, whose ports for `nodes` are pinned to free ports
    (`node_port` tells which)."""
    process = CoordinatorProcess(zookeeper, tmp_path, gateway=bootstrap, **{**FAST, **config})
    process.node_offset = pin_node_ports(process, list(nodes), max_node_id=max_node_id)
    process.start()
    return process


@pytest.fixture
def gateway(zookeeper, tmp_path, tansu):  # noqa: F811 - the fixture
    tansu.create_topic(TOPIC, PARTITIONS)
    process = start_gateway(zookeeper, tmp_path, tansu.bootstrap)
    try:
        process.wait_for_log("broker node reachable", node=tansu.node_id)
        yield process
    finally:
        assert process.stop() == 0


def node_port(gateway: CoordinatorProcess, node: int) -> int:
    """The port of broker `node` on the gateway's one listener."""
    return gateway.port + gateway.node_offset + node


def broker_groups(tansu) -> list[str]:  # noqa: F811 - the fixture's object
    """The groups the broker's own coordinator knows."""
    connection = NodeConnection("127.0.0.1", tansu.port, timeout=10)
    try:
        return [g.group_id for g in connection.call(LIST_GROUPS, {}).groups]
    finally:
        connection.close()


def broker_committed(tansu, group: str) -> dict[int, int]:  # noqa: F811
    """What the broker's own coordinator has committed for `group` on TOPIC (-1: nothing)."""
    connection = NodeConnection("127.0.0.1", tansu.port, timeout=10)
    try:
        answer = connection.call(OFFSET_FETCH, {"group_id": group, "topics": [
            {"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})
        return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}
    finally:
        connection.close()


def coordinated_here(gateway: CoordinatorProcess, tansu, group: str, expected_total: int) -> None:  # noqa: F811
    """The group lives in groupkeeper: found there, its commits there, none at the broker."""
    connection = RawConnection(gateway.port)
    try:
        found = connection.call(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        assert found.error_code == 0 and found.node_id >= INSTANCE_NODE_BASE and found.port == gateway.port
    finally:
        connection.close()
    offsets = committed([gateway.port], group)
    assert sum(offsets.values()) == expected_total, offsets
    assert group not in broker_groups(tansu)
    assert set(broker_committed(tansu, group).values()) == {-1}


def produce_with_kafka_python(bootstrap: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        for future in [producer.send(TOPIC, value) for value in values]:
            future.get(timeout=30)
    finally:
        producer.close()


def produce_with_librdkafka(bootstrap: str, values: list[bytes]) -> None:
    failed = []
    producer = CKProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(TOPIC, value, on_delivery=lambda err, msg: err and failed.append(err))
        producer.poll(0)
    assert producer.flush(30) == 0 and not failed, failed


def read_values(consumer: CKConsumer, count: int, timeout: float = 60.0) -> list[bytes]:
    """The values a librdkafka consumer reads, polled until `count` are read or `timeout` passes."""
    read = []
    deadline = time.monotonic() + timeout
    while len(read) < count and time.monotonic() < deadline:
        if (message := consumer.poll(0.5)) is not None and message.error() is None:
            read.append(message.value())
    return read


def test_kafka_python_reads_through_the_gateway_in_a_group_groupkeeper_coordinates(gateway, tansu):  # noqa: F811
    values = [f"kp-{i}".encode() for i in range(RECORDS)]
    produce_with_kafka_python(gateway.bootstrap, values)
    consumer = kp_consumer(gateway.bootstrap, "kp-readers", TOPIC, auto_offset_reset="earliest")
    read = []
    try:
        deadline = time.monotonic() + 60
        while len(read) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(500).values():
                read += [r.value for r in records]
        assert sorted(read) == sorted(values)
        kp_commit(consumer, {p: OffsetAndMetadata(consumer.position(p), "", -1) for p in consumer.assignment()})
    finally:
        consumer.close()
    coordinated_here(gateway, tansu, "kp-readers", RECORDS)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_librdkafka_reads_through_the_gateway_in_a_group_groupkeeper_coordinates(gateway, tansu, protocol):  # noqa: F811
    values = [f"ck-{protocol}-{i}".encode() for i in range(RECORDS)]
    produce_with_librdkafka(gateway.bootstrap, values)
    group = f"ck-{protocol}"
    config = {"bootstrap.servers": gateway.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "group.protocol": protocol}
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer = CKConsumer(config)
    consumer.subscribe([TOPIC])
    try:
        assert sorted(read_values(consumer, RECORDS)) == sorted(values)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    coordinated_here(gateway, tansu, group, RECORDS)


def test_metadata_names_the_node_ports_and_the_coordinator_nodes(gateway, tansu):  # noqa: F811
    connection = RawConnection(gateway.port)
    try:
        answer = connection.call(METADATA, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
    finally:
        connection.close()
    brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
    assert brokers == {tansu.node_id: ("127.0.0.1", node_port(gateway, tansu.node_id)),
                       INSTANCE_NODE_BASE: ("127.0.0.1", gateway.port)}
    assert [len(t.partitions) for t in answer.topics] == [PARTITIONS]
    assert {p.leader_id for t in answer.topics for p in t.partitions} == {tansu.node_id}


def test_a_member_killed_has_its_partitions_taken_over_after_its_session(gateway, tmp_path):
    script = tmp_path / "member.py"
    script.write_text(textwrap.dedent(f"""
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": "{gateway.bootstrap}", "group.id": "kill", "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 500, "enable.auto.commit": False, "log_level": 3}})
        assigned = []
        c.subscribe(["{TOPIC}"], on_assign=lambda consumer, partitions: assigned.extend(partitions))
        while not assigned:
            c.poll(0.1)
        print("assigned", flush=True)
        while True:
            c.poll(0.1)
    """))
    everything = {(TOPIC, p) for p in range(PARTITIONS)}
    with member_process(script) as victim:
        survivor = CK(gateway.bootstrap, "kill", TOPIC)
        deadline = time.monotonic() + 45
        while not (survivor.assigned and survivor.assigned != everything):
            assert time.monotonic() < deadline, "the two members never shared the partitions"
            survivor.poll()
        kill_and_take_over(gateway, victim, survivor, "kill", everything, at_least=5.0)


def test_clients_go_on_after_the_broker_restarts_under_them(gateway, tansu):  # noqa: F811
    first = [f"before-{i}".encode() for i in range(100)]
    produce_with_librdkafka(gateway.bootstrap, first)
    producer = CKProducer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 5, "message.timeout.ms": 60000})
    try:
        producer.produce(TOPIC, b"warm")  # its connections to the node port, and their links, are up
        assert producer.flush(30) == 0
        tansu.kill()  # a crash: every link to it breaks, and its clients' connections with them
        gateway.wait_for_log("broker closed its connection", timeout=30)
        tansu.start()
        tansu.create_topic(TOPIC, PARTITIONS)  # memory storage: the broker came back empty
        failed = []
        after = [f"after-{i}".encode() for i in range(100)]
        for value in after:
            producer.produce(TOPIC, value, on_delivery=lambda err, msg: err and failed.append(err))
        assert producer.flush(60) == 0 and not failed, failed
    finally:
        producer.flush(1)
    consumer = CKConsumer({"bootstrap.servers": gateway.bootstrap, "group.id": "after-restart",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    try:
        assert sorted(read_values(consumer, len(after))) == sorted(after)
    finally:
        consumer.close()
    gateway.wait_for_log("broker reachable again", timeout=30)


def test_two_gateways_keep_clients_going_when_one_is_killed(zookeeper, tmp_path, tansu):  # noqa: F811
    tansu.create_topic(TOPIC, PARTITIONS)
    first = start_gateway(zookeeper, tmp_path, tansu.bootstrap, instance_id=0, zk_session_timeout=4.0)
    second = CoordinatorProcess(zookeeper, tmp_path, chroot=first.chroot, instance_id=1,
                                gateway=tansu.bootstrap, zk_session_timeout=4.0, **FAST)
    pin_node_ports(second, [TANSU_NODE])
    second.start()
    both = f"{first.bootstrap},{second.bootstrap}"
    consumer = None
    try:
        consumer = CKConsumer({"bootstrap.servers": both, "group.id": "two-gateways", "auto.offset.reset": "earliest",
                               "enable.auto.commit": False, "session.timeout.ms": 6000,
                               "heartbeat.interval.ms": 500})
        consumer.subscribe([TOPIC])
        produce_with_librdkafka(both, [b"one"])
        assert read_values(consumer, 1) == [b"one"]
        consumer.commit(asynchronous=False)
        first.process.kill()  # SIGKILL: its groups move to the other instance once its session expires
        first.process.wait(timeout=10)
        later = [f"later-{i}".encode() for i in range(50)]
        produce_with_librdkafka(both, later)
        assert sorted(read_values(consumer, len(later), timeout=90)) == sorted(later)
        consumer.commit(asynchronous=False)
        assert sum(committed([second.port], "two-gateways").values()) == 1 + len(later)
    finally:
        if consumer is not None:
            consumer.close()
        first.stop()
        assert second.stop() == 0


def test_nodes_that_come_and_go_get_ports_and_lose_them(zookeeper, tmp_path):
    """A cluster of several nodes (the stand-in broker lists others beside itself): each
    node's port opens as it appears and closes as it leaves, with its clients' connections;
    a node whose id is out of range is one log line and no port."""
    broker = StandInBroker({}, {TOPIC: (PARTITIONS, uuid.uuid4())}, node_id=1).start()
    process = start_gateway(zookeeper, tmp_path, f"127.0.0.1:{broker.port}", nodes=(1, 2), max_node_id=50)
    try:
        process.wait_for_log("broker node reachable", node=1)
        broker.others = {2: ("127.0.0.1", broker.port), 99: ("127.0.0.1", broker.port)}
        process.wait_for_log("broker node reachable", node=2)
        process.wait_for_log("broker node not reachable through this gateway", node=99)
        through_two = NodeConnection("127.0.0.1", node_port(process, 2), timeout=10)
        brokers = {b.node_id: b.port for b in through_two.call(METADATA, {"topics": None}).brokers}
        assert brokers == {1: node_port(process, 1), 2: node_port(process, 2), INSTANCE_NODE_BASE: process.port}
        broker.others = {}  # node 2 leaves the cluster
        process.wait_for_log("broker node left: its ports closed", node=2)
        with pytest.raises((Unreachable, OSError, ConnectionError)):  # its clients are closed, its port too
            through_two.call(METADATA, {"topics": None})
        with pytest.raises(Unreachable):
            NodeConnection("127.0.0.1", node_port(process, 2), timeout=5)
        NodeConnection("127.0.0.1", node_port(process, 1), timeout=5).close()  # the other stays
    finally:
        assert process.stop() == 0
        broker.stop()


def test_the_embedded_broker_serves_records_and_never_outlives_its_instance(zookeeper, tmp_path):
    """`make run`'s shape: a broker of the instance's own (Tansu, in memory) behind it."""
    broker_port = free_port()
    process = CoordinatorProcess(zookeeper, tmp_path, embedded_broker=f"127.0.0.1:{broker_port}", **FAST)
    pin_node_ports(process, [TANSU_NODE])
    process.start()
    try:
        process.wait_for_log("broker node reachable")
        values = [f"embedded-{i}".encode() for i in range(100)]
        produce_with_librdkafka(process.bootstrap, values)  # the topic is created on first use
        consumer = CKConsumer({"bootstrap.servers": process.bootstrap, "group.id": "embedded",
                               "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        try:
            assert sorted(read_values(consumer, len(values))) == sorted(values)
        finally:
            consumer.close()
    finally:
        process.process.kill()  # SIGKILL: the kernel takes its broker with it
        process.process.wait(timeout=10)
    deadline = time.monotonic() + 10
    while True:
        try:
            NodeConnection("127.0.0.1", broker_port, timeout=1).close()
        except Unreachable:
            break
        assert time.monotonic() < deadline, "the embedded broker outlived its instance"
        time.sleep(0.1)


def test_connections_to_a_broker_are_bounded(zookeeper, tmp_path, tansu):  # noqa: F811
    """gateway_max_connections_per_broker: a client connection past it is closed when it first
    relays; once one goes, the next gets through."""
    process = start_gateway(zookeeper, tmp_path, tansu.bootstrap, gateway_max_connections_per_broker=1)
    try:
        process.wait_for_log("broker node reachable", node=TANSU_NODE)
        first = NodeConnection("127.0.0.1", node_port(process, TANSU_NODE), timeout=10)
        assert first.call(METADATA, {"topics": None}).brokers  # relayed: its link is the one
        second = NodeConnection("127.0.0.1", node_port(process, TANSU_NODE), timeout=10)
        with pytest.raises((Unreachable, OSError, ConnectionError)):
            second.call(METADATA, {"topics": None})
        process.wait_for_log("connections to a broker at their limit: clients beyond it are closed", limit=1)
        first.close()
        deadline = time.monotonic() + 30
        while True:  # the first's link goes with it, a moment later
            third = NodeConnection("127.0.0.1", node_port(process, TANSU_NODE), timeout=10)
            try:
                assert third.call(METADATA, {"topics": None}).brokers
                break
            except (Unreachable, OSError, ConnectionError):
                assert time.monotonic() < deadline, "no connection got through after the first went"
                time.sleep(0.1)
            finally:
                third.close()
    finally:
        assert process.stop() == 0


def test_fetch_answers_naming_new_leaders_are_rewritten_whole_or_as_they_stream(zookeeper, tmp_path):
    """KIP-951 through the gateway: a Fetch v16+ answer whose node_endpoints name brokers
    reaches the client naming their node ports, whether it came in one read (rewritten
    whole) or streamed past in parts (4 MiB of records: its tagged fields fixed in place,
    padded to the size that went out first), its records byte for byte as the broker sent them."""
    version = 16
    records = {"small": bytes(range(200)), "streamed": bytes(range(256)) * 16_384}
    asked: list[str] = []
    endpoints = [{"node_id": 1, "host": "kafka-1.cluster.internal", "port": 9092, "rack": "r1"},
                 {"node_id": 2, "host": "kafka-2.cluster.internal", "port": 9092, "rack": None}]

    def vals(which: str) -> dict:
        parts = FETCH_ANSWER["responses"][0]["partitions"]
        return project(FETCH.response.struct, version, {**FETCH_ANSWER, "node_endpoints": endpoints, "responses": [
            {**FETCH_ANSWER["responses"][0], "partitions": [*parts[:2], {**parts[2], "records": records[which]}]}]})

    def fetch_answer(header, request):
        return kp_frame(FETCH.response, vals(asked[-1]), header.api_version, header.correlation_id,
                        tweak=kip951_leaders(FETCH))

    broker = StandInBroker({}, {TOPIC: (PARTITIONS, uuid.uuid4())}, node_id=1, advertises={FETCH.key: (4, 17)})
    broker.raw[FETCH.key] = fetch_answer
    broker.start()
    process = start_gateway(zookeeper, tmp_path, f"127.0.0.1:{broker.port}", nodes=(1,), max_node_id=50)
    try:
        process.wait_for_log("broker node reachable", node=1)
        sock = socket.create_connection(("127.0.0.1", node_port(process, 1)), timeout=30)
        for n, which in enumerate(("small", "streamed", "small"), start=1):
            asked.append(which)
            request = build(FETCH.request.struct, {"max_wait_ms": 0, "min_bytes": 1, "isolation_level": 0,
                                                   "session_id": 0, "topics": [], "forgotten_topics_data": [],
                                                   "rack_id": ""})
            sock.sendall(encode_request(RequestHeader(FETCH.key, version, n, "kip951"), request))
            size = int.from_bytes(read_exactly(sock, 4), "big")
            data = size.to_bytes(4, "big") + read_exactly(sock, size)
            correlation_id, got, _ = kp_read(FETCH.response, data, version)
            assert correlation_id == n
            assert got["responses"] == vals(which)["responses"]  # the records, every byte
            # node 1 at its node port; node 2, not in the cluster, left out
            assert got["node_endpoints"] == [{"node_id": 1, "host": "127.0.0.1", "port": node_port(process, 1),
                                              "rack": "r1"}], which
            sent = len(kp_frame(FETCH.response, vals(which), version, n, kip951_leaders(FETCH))) - 4
            if which == "streamed":  # streamed: the size the broker gave, the tail padded
                assert size == sent
            else:  # in one read: rewritten whole, without padding (node 2's entry, 35 bytes; a
                assert size == sent - 35 - 15  # name shorter by 15)
        sock.close()
    finally:
        assert process.stop() == 0
        broker.stop()


def test_consumer_lag_is_read_from_the_fetch_answers_relayed(gateway, tansu):  # noqa: F811
    """Lag on /metrics through the gateway: each committed offset against the high
    watermark of the Fetch answers the gateway relayed to the group's consumer, with no
    ListOffsets asked of the broker for it."""
    values = [f"lag-{i}".encode() for i in range(90)]
    produce_with_librdkafka(gateway.bootstrap, values)
    consumer = CKConsumer({"bootstrap.servers": gateway.bootstrap, "group.id": "lagging",
                           "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    try:
        read, ends = 0, {}
        deadline = time.monotonic() + 60
        while read < len(values) and time.monotonic() < deadline:
            if (message := consumer.poll(0.5)) is not None and message.error() is None:
                read += 1
                ends[message.partition()] = message.offset() + 1
        assert read == len(values)
        # each partition committed 7 records short of its end (or at 0)
        positions = {p: max(0, end - 7) for p, end in ends.items()}
        consumer.commit(offsets=[CKPartition(TOPIC, p, o) for p, o in positions.items()], asynchronous=False)
        expected = sum(ends[p] - positions[p] for p in ends)
        deadline = time.monotonic() + 30
        while gateway.metric("groupkeeper_consumergroup_lag", group="lagging", topic=TOPIC) != expected:
            assert time.monotonic() < deadline, gateway.metric("groupkeeper_consumergroup_lag", group="lagging")
            consumer.poll(0.2)  # keeps fetching: the high watermarks keep coming
        assert not gateway.metric("groupkeeper_lag_list_offsets_requests_total", outcome="ok")
        assert gateway.metric("groupkeeper_consumergroup_lag_unknown_partitions") == 0
    finally:
        consumer.close()


def test_share_groups_are_relayed_to_the_broker_that_coordinates_them(zookeeper, tmp_path):
    """KIP-932 through the gateway, with stand-in brokers (no broker here serves share
    groups): a share consumer finds its coordinator at groupkeeper (FindCoordinator key type
    0, as for any group); its ShareGroupHeartbeat goes on to the broker that coordinates the
    group, asked of the cluster once; NOT_COORDINATOR makes the gateway ask again; no broker
    to say is COORDINATOR_NOT_AVAILABLE; ShareFetch answers name the leaders' node ports."""
    from protocol import messages as m
    from protocol.schemas import SHARE_FETCH, SHARE_GROUP_HEARTBEAT

    topic_id = uuid.uuid4()
    share = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), FIND_COORDINATOR.key: (0, 6)}
    one = StandInBroker({}, {TOPIC: (PARTITIONS, topic_id)}, node_id=1, advertises=share)
    two = StandInBroker({}, {TOPIC: (PARTITIONS, topic_id)}, node_id=2, advertises=share)
    coordinator_of = {"sg": 2}  # what broker 1 answers FindCoordinator with (absent: an error)
    heartbeat_errors = {2: [0, 16]}  # broker 2 answers its first heartbeat, then NOT_COORDINATOR

    def find(header, request):
        node = coordinator_of.get(request.coordinator_keys[0] if header.api_version >= 4 else request.key)
        entry = ({"node_id": node, "host": "127.0.0.1", "port": (one if node == 1 else two).port, "error_code": 0}
                 if node else {"node_id": -1, "host": "", "port": -1, "error_code": 15})
        if header.api_version >= 4:
            body = m.FindCoordinatorResponse(coordinators=[m.Coordinator(key=request.coordinator_keys[0], **entry)])
        else:
            body = m.FindCoordinatorResponse(**entry)
        return encode_response(header, body)

    def heartbeat(broker):
        def answer(header, request):
            errors = heartbeat_errors.setdefault(broker.node_id, [0])
            error = errors.pop(0) if len(errors) > 1 else errors[0]
            return encode_response(header, m.ShareGroupHeartbeatResponse(
                error_code=error, member_id=request.member_id, member_epoch=7 if not error else 0,
                heartbeat_interval_ms=5000, assignment=None if error else m.ShareGroupHeartbeatAssignment(
                    topic_partitions=[m.ShareGroupHeartbeatTopicPartitions(topic_id=topic_id, partitions=[0, 1])])))
        return answer

    def share_fetch(header, request):  # partition 1 moved to node 2: its endpoint named
        return encode_response(header, m.ShareFetchResponse(acquisition_lock_timeout_ms=30_000, responses=[
            m.ShareFetchableTopicResponse(topic_id=topic_id, partitions=[
                m.ShareFetchPartitionData(partition_index=0, records=b"\x00" * 70,
                                          current_leader=m.ShareLeaderIdAndEpoch(leader_id=1, leader_epoch=3)),
                m.ShareFetchPartitionData(partition_index=1, error_code=6, records=b"",
                                          current_leader=m.ShareLeaderIdAndEpoch(leader_id=2, leader_epoch=4))])],
            node_endpoints=[m.NodeEndpoint(node_id=2, host="kafka-2.internal", port=9092, rack=None)]))

    one.raw.update({FIND_COORDINATOR.key: find, 76: heartbeat(one), 78: share_fetch})
    two.raw.update({76: heartbeat(two)})
    one.start()
    two.start()
    one.others = {2: ("127.0.0.1", two.port)}
    process = start_gateway(zookeeper, tmp_path, f"127.0.0.1:{one.port}", nodes=(1, 2), max_node_id=50)
    try:
        process.wait_for_log("broker node reachable", node=2)
        client = RawConnection(process.port)  # groupkeeper's own port: where FindCoordinator sends it
        found = client.call(FIND_COORDINATOR, 3, {"key": "sg", "key_type": 0})
        assert found.error_code == 0 and found.port == process.port  # as for any group: groupkeeper
        beat = {"group_id": "sg", "member_id": "m-1", "member_epoch": 0, "rack_id": None,
                "subscribed_topic_names": [TOPIC]}
        first = client.call(SHARE_GROUP_HEARTBEAT, 1, beat)
        assert first.error_code == 0 and first.member_epoch == 7
        assert first.assignment.topic_partitions[0].partitions == [0, 1]
        assert (76, 1) in two.requests and (76, 1) not in one.requests  # routed to the coordinator
        assert [r for r in one.requests if r[0] == FIND_COORDINATOR.key]  # asked of the cluster
        moved = client.call(SHARE_GROUP_HEARTBEAT, 1, beat)  # broker 2: NOT_COORDINATOR
        assert moved.error_code == 16
        coordinator_of["sg"] = 1  # it moved to broker 1: asked again, routed there
        again = client.call(SHARE_GROUP_HEARTBEAT, 1, beat)
        assert again.error_code == 0 and (76, 1) in one.requests
        nobody = client.call(SHARE_GROUP_HEARTBEAT, 1, {**beat, "group_id": "no-such"})
        assert nobody.error_code == 15  # COORDINATOR_NOT_AVAILABLE: retriable
        client.close()

        leader = RawConnection(node_port(process, 1))
        fetched = leader.call(SHARE_FETCH, 1, {"group_id": "sg", "member_id": "m-1", "share_session_epoch": 0,
                                                "max_wait_ms": 0, "min_bytes": 1, "max_records": 10,
                                                "batch_size": 10, "topics": [], "forgotten_topics_data": []})
        assert [(e.node_id, e.host, e.port) for e in fetched.node_endpoints] == [
            (2, "127.0.0.1", node_port(process, 2))]
        assert fetched.responses[0].partitions[0].records == b"\x00" * 70
        assert fetched.acquisition_lock_timeout_ms == 30_000
        leader.close()
    finally:
        assert process.stop() == 0
        one.stop()
        two.stop()


def test_librdkafka_batches_stream_in_and_their_records_come_back_spliced(gateway, tansu):  # noqa: F811
    """The data path's kernel moves with a real broker and unmodified clients: librdkafka's
    produce batches of about a megabyte pass the gateway as they arrive (their rest sent on
    as read, never held whole), and the record sets of the Fetch answers that read them back
    are spliced; every record comes back as it was produced, and both moves are counted."""
    count, size = 12_000, 1024

    def value(i: int) -> bytes:
        return i.to_bytes(8, "big") + bytes([i % 251]) * (size - 8)

    failed = []
    producer = CKProducer({"bootstrap.servers": gateway.bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                           "acks": "all", "compression.type": "none"})
    for i in range(count):
        while True:
            try:
                producer.produce(TOPIC, value(i), partition=i % PARTITIONS,
                                 on_delivery=lambda err, msg: err and failed.append(err))
                break
            except BufferError:  # librdkafka's queue is full: let it send
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0 and not failed, failed
    consumer = CKConsumer({"bootstrap.servers": gateway.bootstrap, "group.id": "stream-readers",
                           "enable.auto.commit": False})
    consumer.assign([CKPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    try:
        read = read_values(consumer, count)
    finally:
        consumer.close()
    assert len(read) == count
    assert sorted(read) == [value(i) for i in range(count)]  # each record whole, none twice
    produced = count * size
    streamed = gateway.metric("groupkeeper_gateway_streamed_bytes_total", node=str(TANSU_NODE))
    spliced = gateway.metric("groupkeeper_gateway_spliced_bytes_total", node=str(TANSU_NODE))
    # all but each Produce's first read (64 KiB at most, and the link's first request whole)
    # streams; the Fetch answers' record sets (more than the records: their batches' headers)
    # are spliced but for the small ones read at the log's end
    assert produced / 2 < streamed < produced, (streamed, produced)
    assert produced / 2 < spliced < produced * 1.2, (spliced, produced)
