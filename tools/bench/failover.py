"""`groupkeeper bench failover`: how long the groups of an instance go unserved when it dies
(SIGKILL) or is stopped (SIGTERM), with N groups with committed offsets over 3 instances.

A fresh local ZooKeeper and three `groupkeeper run` processes; every group gets committed
offsets (4 partitions) at its coordinator. Then:

- kill -9: one instance is killed. *Detection* runs until its registration znode vanishes
  (its ZooKeeper session expired: the session timeout after its last heartbeat);
  *takeover* from then until every one of its groups answers a JoinGroup at its new owner
  (MEMBER_ID_REQUIRED: the group is served there), probed in rounds of batched
  FindCoordinator and pipelined JoinGroup requests;
- SIGTERM: with the killed instance back and the placement even again, another instance is
  stopped; from the signal until every one of its groups answers at its new owner.

The reference, in the same run: one plain kazoo client reading everything a new owner has to
read for the killed instance's group-partitions (group znodes, offset topics and shards),
every request of a level in flight at once and nothing decoded. That is the floor for a
takeover's loading; the rest is election, fencing, decoding and the clients' round trips.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from protocol import ErrorCode
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription
from protocol.schemas import FIND_COORDINATOR, JOIN_GROUP, OFFSET_COMMIT, OFFSET_FETCH

from ..kafka_admin import NodeConnection, Unreachable
from ..topics_admin import RegistryAdmin
from coordinator.cluster.placement import partition_for
from coordinator.store import layout
from coordinator.store.zkserver import ZooKeeperServer, free_port
from .process import NotStarted, RunProcess

INSTANCES = 3
TOPIC, PARTITIONS = "bench", 4
SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=[TOPIC]), 0)


class _Instance:
    def __init__(self, n: int, zookeeper: str, work: Path, session_timeout: float):
        self.id, self.port, self.work = n, free_port(), work
        self.run = RunProcess(["--zookeeper", zookeeper, "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}", "--metrics-listen", "",
                               "--instance-id", str(n), "--data-dir", str(work / f"instance-{n}"),
                               "--zk-session-timeout", str(session_timeout)])
        self.runs = 0

    @property
    def process(self) -> subprocess.Popen | None:
        return self.run.process

    def start(self) -> None:
        self.runs += 1
        self.log = self.work / f"instance-{self.id}-{self.runs}.log"
        try:
            self.run.start(self.log)
        except NotStarted:
            raise RuntimeError(f"instance {self.id} did not start; see {self.log}") from None

    def stop(self) -> None:
        self.run.stop(60)


def _connect(port: int, timeout: float = 10.0) -> NodeConnection | None:
    try:
        return NodeConnection("127.0.0.1", port, timeout)
    except Unreachable:
        return None


def _coordinators(ports: list[int], groups: list[str]) -> dict[str, int | None]:
    """group -> port of the instance FindCoordinator names (None: not available now)."""
    for port in ports:
        connection = _connect(port, timeout=5)
        if connection is None:
            continue
        try:
            found: dict[str, int | None] = {}
            for start in range(0, len(groups), 1000):
                keys = groups[start:start + 1000]
                answer, = connection.pipeline(FIND_COORDINATOR, 4, [{"key_type": 0, "coordinator_keys": keys}])
                found.update({c.key: c.port if c.error_code == ErrorCode.NONE else None
                              for c in answer.coordinators})
            return found
        except Unreachable:
            continue
        finally:
            connection.close()
    return dict.fromkeys(groups)


def _answering(port: int, groups: list[str]) -> list[str]:
    """The groups whose JoinGroup the instance at `port` answers as their coordinator."""
    connection = _connect(port)
    if connection is None:
        return []
    try:
        answers = connection.pipeline(JOIN_GROUP, 4, [{
            "group_id": g, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]}
            for g in groups])
    except Unreachable:
        return []
    finally:
        connection.close()
    return [g for g, a in zip(groups, answers) if a.error_code == ErrorCode.MEMBER_ID_REQUIRED]


def _until_served(ports: list[int], groups: list[str], since: float) -> dict:
    """Probe in rounds until every group answers at its coordinator: when the last did, and
    percentiles of when each did (seconds after `since`)."""
    waiting, served = set(groups), []
    rounds = 0
    deadline = time.monotonic() + 300
    while waiting:
        rounds += 1
        found = _coordinators(ports, sorted(waiting))
        by_port: dict[int, list[str]] = {}
        for g, port in found.items():
            if port is not None:
                by_port.setdefault(port, []).append(g)
        for port, mine in by_port.items():
            now = time.monotonic()
            for g in _answering(port, mine):
                waiting.discard(g)
                served.append(now - since)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(waiting)} groups still unserved after 300 s")
    served.sort()
    return {"last_s": round(served[-1], 3), "p50_s": round(served[len(served) // 2], 3),
            "p99_s": round(served[min(len(served) - 1, int(len(served) * 0.99))], 3), "rounds": rounds}


def _commit_all(instances: list[_Instance], groups: list[str]) -> None:
    ports = [i.port for i in instances]
    found = _coordinators(ports, groups)
    by_port: dict[int, list[str]] = {}
    for g, port in found.items():
        by_port.setdefault(port, []).append(g)
    for port, mine in by_port.items():
        connection = NodeConnection("127.0.0.1", port, 30.0)
        answers = connection.pipeline(OFFSET_COMMIT, 7, [{
            "group_id": g, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": p, "committed_offset": 1000 + p}
                                                      for p in range(PARTITIONS)]}]} for g in mine])
        connection.close()
        failed = [g for g, a in zip(mine, answers) if a.topics[0].partitions[0].error_code != ErrorCode.NONE]
        if failed:
            raise RuntimeError(f"{len(failed)} commits refused (e.g. {failed[0]})")


def _check_offsets(ports: list[int], groups: list[str]) -> None:
    found = _coordinators(ports, groups)
    for g in groups:
        connection = NodeConnection("127.0.0.1", found[g], 30.0)
        answer, = connection.pipeline(OFFSET_FETCH, 5, [{"group_id": g, "topics": None}])
        connection.close()
        got = {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}
        if got != {p: 1000 + p for p in range(PARTITIONS)}:
            raise RuntimeError(f"group {g}: offsets {got} after the takeover")


def _owned_by(client: KazooClient, instance: int, partitions: int) -> list[int]:
    mine = []
    for n in range(partitions):
        data, _ = client.get(layout.owner_path(n))
        if layout.decode(data)["instance"] == instance:
            mine.append(n)
    return mine


def _plain_read(client: KazooClient, partitions: list[int]) -> tuple[float, int]:
    """Read what a new owner of `partitions` reads, level by level, all of a level at once."""
    started = time.perf_counter()
    reads = 0

    def wave(calls):
        nonlocal reads
        reads += len(calls)
        return [c.get() for c in [call() for call in calls]]

    groups = wave([lambda n=n: client.get_children_async(layout.groups_path(n)) for n in partitions])
    paths = [f"{layout.groups_path(n)}/{g}" for n, names in zip(partitions, groups) for g in names]
    wave([lambda p=p: client.get_async(p) for p in paths])
    topics = wave([lambda p=p: client.get_children_async(f"{p}/offsets") for p in paths])
    topic_paths = [f"{p}/offsets/{t}" for p, names in zip(paths, topics) for t in names]
    shards = wave([lambda p=p: client.get_children_async(p) for p in topic_paths])
    wave([lambda p=f"{t}/{s}": client.get_async(p) for t, names in zip(topic_paths, shards) for s in names])
    return time.perf_counter() - started, reads


def _scenario(groups_count: int, session_timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="groupkeeper-failover-") as tmp:
        work = Path(tmp)
        with ZooKeeperServer(work / "zookeeper", free_port()) as zookeeper:
            instances = [_Instance(n, zookeeper.connect_string, work, session_timeout) for n in range(INSTANCES)]
            client = KazooClient(hosts=zookeeper.connect_string)
            client.start(timeout=10)
            try:
                with RegistryAdmin(zookeeper.connect_string) as admin:  # offsets are stored only for partitions that exist
                    admin.create_topic(TOPIC, PARTITIONS)
                for instance in instances:
                    instance.start()
                ports = [i.port for i in instances]
                groups = [f"bench-group-{i}" for i in range(groups_count)]
                started = time.monotonic()
                _commit_all(instances, groups)
                committed_s = time.monotonic() - started
                partitions = layout.decode(client.get(layout.config_path())[0])["group_partitions"]
                return {"groups": groups_count, "session_timeout_s": session_timeout,
                        "commit_s": round(committed_s, 2),
                        "kill": _kill(instances, client, ports, groups, partitions),
                        "sigterm": _sigterm(instances, ports, groups, partitions)}
            finally:
                for instance in instances:
                    instance.stop()
                client.stop()
                client.close()


def _kill(instances, client, ports, groups, partitions) -> dict:
    victim = instances[1]
    theirs_partitions = _owned_by(client, victim.id, partitions)
    theirs = [g for g in groups if partition_for(g, partitions) in theirs_partitions]
    gone = threading.Event()
    client.exists(layout.instance_path(victim.id), watch=lambda _: gone.set())
    killed = time.monotonic()
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    if not gone.wait(120):
        raise RuntimeError("the killed instance's session never expired")
    detected = time.monotonic()
    served = _until_served([p for p in ports if p != victim.port], theirs, detected)
    _check_offsets([p for p in ports if p != victim.port], theirs[:100])
    reference_s, reads = _plain_read(client, theirs_partitions)
    victim.start()  # back for the graceful run, the placement even again
    return {"instance_groups": len(theirs), "group_partitions": len(theirs_partitions),
            "detection_s": round(detected - killed, 3), "takeover": served,
            "reference_plain_read_s": round(reference_s, 3), "reference_reads": reads}


def _sigterm(instances, ports, groups, partitions) -> dict:
    victim = instances[2]
    found = _coordinators(ports, groups)
    theirs = [g for g, port in found.items() if port == victim.port]
    stopped = time.monotonic()
    victim.process.send_signal(signal.SIGTERM)
    served = _until_served([p for p in ports if p != victim.port], theirs, stopped)
    victim.process.wait(60)
    return {"instance_groups": len(theirs), "handover": served}


def run(group_counts: list[int], session_timeout: float) -> dict:
    return {"instances": INSTANCES, "scenarios": [_scenario(n, session_timeout) for n in group_counts]}


def table(result: dict) -> str:
    rows = [f"{'GROUPS':>7} {'CASE':<8} {'ITS GROUPS':>10} {'DETECTION':>10} {'TAKEOVER P50':>13} "
            f"{'TAKEOVER LAST':>14} {'PLAIN READ (REF)':>17}"]
    for s in result["scenarios"]:
        k, t = s["kill"], s["sigterm"]
        rows.append(f"{s['groups']:>7,} {'kill -9':<8} {k['instance_groups']:>10,} {k['detection_s']:>9.2f}s "
                    f"{k['takeover']['p50_s']:>12.3f}s {k['takeover']['last_s']:>13.3f}s "
                    f"{k['reference_plain_read_s']:>16.3f}s")
        rows.append(f"{s['groups']:>7,} {'SIGTERM':<8} {t['instance_groups']:>10,} {'-':>10} "
                    f"{t['handover']['p50_s']:>12.3f}s {t['handover']['last_s']:>13.3f}s {'':>17}")
    rows.append(f"(session timeout {result['scenarios'][0]['session_timeout_s']:g} s; takeover counted from "
                "detection for kill -9, from the signal for SIGTERM)")
    return "\n".join(rows)
