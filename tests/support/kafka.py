"""Apache Kafka 4.4 for the tests: deploy/kafka/kraft.py's KraftCluster (combined
broker+controller nodes from the jars `make install` caches in var/kafka/libs, KRaft,
storage formatted per run, logs in the test's folder), the Java client's programs
(tests/kafka/java/*.java, run as single-file source against the same jars), Kafka's own
command-line tools, and a gateway fronting the cluster.

What the tests may rely on, measured here (2 cores): three nodes, formatted and started in
parallel, said they had started 10.8 s after `start()` while other tests ran beside them; a
node started again under heavy load (load average 30-45) took 19-37 s; a clean stop of three
took 6.7 s. Wait on conditions, never on these figures. Node ids are
1..n and every node is a controller, so a three-node cluster keeps its quorum with one node
down. Internal topics are replicated min(3, nodes) times with min.insync.replicas 2 where
there are three.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from protocol.schemas import LIST_GROUPS, METADATA
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tools.kafka_admin import NodeConnection, Unreachable
from tools.kraft import KafkaError, KraftCluster, kraft, run_tool  # noqa: F401 (the tests take them from here)

ROOT = Path(__file__).resolve().parents[2]
JAVA_SOURCES = ROOT / "tests" / "kafka" / "java"
FAST = {"metadata_max_age_ms": 500, "group_min_session_timeout_ms": 1000}


def metadata(address: str, topics: list[str] | None = None):
    host, port = address.rsplit(":", 1)
    connection = NodeConnection(host, int(port), timeout=10.0)
    try:
        return connection.call(METADATA, {"topics": None if topics is None else [{"name": t} for t in topics],
                                          "allow_auto_topic_creation": False})
    finally:
        connection.close()


def wait_for_brokers(cluster: KraftCluster, count: int | None = None, timeout: float = 60.0) -> None:
    """Until every running node's Metadata lists `count` brokers (default: all nodes)."""
    count = len(cluster.nodes) if count is None else count
    deadline = time.monotonic() + timeout
    for node in cluster.nodes:
        if not node.alive:
            continue
        while True:
            try:
                if len(metadata(node.address, []).brokers) == count:
                    break
            except Unreachable:
                pass
            assert time.monotonic() < deadline, f"node {node.node_id} never listed {count} brokers"
            time.sleep(0.1)


def create_topic(cluster: KraftCluster, name: str, partitions: int, replicas: int | None = None,
                 timeout: float = 60.0) -> None:
    """Create `name` (kafka-topics.sh) and wait until every live node's Metadata shows every
    partition with a leader."""
    replicas = replicas or min(3, len(cluster.nodes))
    run_tool("kafka-topics", "--bootstrap-server", cluster.bootstrap, "--create", "--if-not-exists",
             "--topic", name, "--partitions", str(partitions), "--replication-factor", str(replicas))
    deadline = time.monotonic() + timeout
    for node in cluster.nodes:
        while node.alive:
            topics = [t for t in metadata(node.address, [name]).topics if t.name == name and t.error_code == 0]
            if topics and len(topics[0].partitions) == partitions and all(p.leader_id >= 0 for p in topics[0].partitions):
                break
            assert time.monotonic() < deadline, f"{name} never showed {partitions} led partitions on {node.address}"
            time.sleep(0.1)


def broker_groups(cluster: KraftCluster) -> set[str]:
    """Every group Kafka's own coordinators know (ListGroups to every live node)."""
    groups = set()
    for node in cluster.nodes:
        if node.alive:
            connection = NodeConnection(node.host, node.port, timeout=10.0)
            try:
                groups |= {g.group_id for g in connection.call(LIST_GROUPS, {}).groups}
            finally:
                connection.close()
    return groups


def start_gateway(zookeeper, tmp_path: Path, cluster: KraftCluster, **config) -> CoordinatorProcess:
    """A `groupkeeper run --gateway` fronting `cluster`, started, its node ports pinned
    (`node_port(gateway, n)`), serving once it has reached every broker."""
    process = CoordinatorProcess(zookeeper, tmp_path, gateway=cluster.bootstrap, **{**FAST, **config})
    process.node_offset = pin_node_ports(process, [n.node_id for n in cluster.nodes])
    process.start()
    for node in cluster.nodes:
        if node.alive:
            process.wait_for_log("broker node reachable", node=node.node_id, timeout=60)
    return process


def node_port(gateway: CoordinatorProcess, node: int) -> int:
    return gateway.port + gateway.node_offset + node


def java_program(name: str, *args: str, timeout: float = 180.0, env: dict[str, str] | None = None,
                 check: bool = True) -> subprocess.CompletedProcess:
    """Runs tests/kafka/java/`name`.java as a single-file source program against Kafka's
    jars; its stdout is what the test reads (one JSON line, by convention)."""
    command = java_command(name, *args)
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and done.returncode != 0:
        raise AssertionError(f"{name}.java exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    return done


def java_command(name: str, *args: str) -> list[str]:
    return [*kraft.tool_jvm(), str(JAVA_SOURCES / f"{name}.java"), *args]
