"""Share groups (KIP-932) through the gateway, with Kafka 4.4, whose brokers serve them
(share.version 2 is finalized at format time by default: the cluster needs no setting).

The share consumer (tests/kafka/java/ShareConsumer.java, Java's KafkaShareConsumer) finds its
group's coordinator at groupkeeper (FindCoordinator key type 0, as for any group); its
ShareGroupHeartbeat is relayed to the broker that coordinates the group, its ShareFetch and
ShareAcknowledge to the leaders' node ports. Kafka's own kafka-share-groups.sh describes the
group through the gateway (ShareGroupDescribe, DescribeShareGroupOffsets, relayed by group),
and kafka-configs.sh sets its share.auto.offset.reset (IncrementalAlterConfigs, relayed).
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol.schemas import SHARE_GROUP_DESCRIBE
from tests.support.kafka import broker_groups, create_topic, java_command, java_program, kraft, run_tool
from tools.kafka_admin import NodeConnection

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)

TOPIC = "share-groups-orders"
GROUP = "share-groups-readers"
PARTITIONS = 4
RECORDS = 400


def gateway_call(gateway, api, version: int, body: dict):
    """One request to the gateway's listener, answered (relayed where it is the brokers')."""
    connection = NodeConnection("127.0.0.1", gateway.port, timeout=15.0)
    try:
        return connection.pipeline(api, version, [body])[0]
    finally:
        connection.close()


def share_members(gateway, group: str) -> dict[str, list[int]]:
    """The group's members and how many partitions each is assigned, as its coordinator at
    the brokers says through the gateway (ShareGroupDescribe v1, relayed by group)."""
    described = gateway_call(gateway, SHARE_GROUP_DESCRIBE, 1,
                             {"group_ids": [group], "include_authorized_operations": False}).groups[0]
    if described.error_code:
        return {}
    return {member.client_id: sorted(p for t in member.assignment.topic_partitions for p in t.partitions)
            for member in described.members}


def relayed(gateway, api: str) -> float:
    """Requests of `api` the gateway relayed to the brokers, over every node."""
    status, body = gateway.scrape()
    assert status == 200
    return sum(sample.value for family in text_string_to_metric_families(body) for sample in family.samples
               if sample.name == "groupkeeper_gateway_requests_total" and sample.labels.get("api") == api)


def kafka_configs(*args: str) -> subprocess.CompletedProcess:
    """kafka-configs.sh (org.apache.kafka.tools.ConfigCommand), which deploy/kafka/kraft.py's
    TOOLS does not name."""
    done = subprocess.run([*kraft.tool_jvm(), "org.apache.kafka.tools.ConfigCommand", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def share_groups_tool(gateway, *args: str) -> str:
    return run_tool("kafka-share-groups", "--bootstrap-server", gateway.bootstrap, *args, timeout=120).stdout


class Reader:
    """A ShareConsumer.java process and the JSON lines it has written so far (a thread reads
    its stdout as it comes)."""

    def __init__(self, *args: str):
        self.process = subprocess.Popen(java_command("ShareConsumer", *args), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[dict] = queue.Queue()
        self.read = 0  # records read so far, by its progress lines
        self.result: dict | None = None  # its last line, once it closed
        self.errors: list[str] = []  # its stderr, read as it comes (a full pipe would stop it)
        threading.Thread(target=self._follow, daemon=True).start()
        threading.Thread(target=lambda: self.errors.extend(self.process.stderr), daemon=True).start()

    @property
    def stderr(self) -> str:
        return "".join(self.errors)

    def _follow(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def progress(self) -> None:
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return
            if "polled" in line:
                self.read = line["read"]
            else:
                self.result = line

    def finish(self, timeout: float) -> dict:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        deadline = time.monotonic() + 5
        while self.result is None and time.monotonic() < deadline:
            self.progress()
            time.sleep(0.05)
        assert self.process.returncode == 0 and self.result is not None, \
            f"ShareConsumer.java exited {self.process.returncode}:\n{self.stderr[-5000:]}"
        return self.result

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def share_read(kafka, gateway, tmp_path_factory):
    """Two share consumers of GROUP (one acknowledging explicitly, one implicitly) through the
    gateway, the partitions split between them before RECORDS records are produced through it; once they
    have read RECORDS between them, the group described with its members (kafka-share-groups
    --describe --members), then both stopped. What they read and said, and the tool's output."""
    timings, mark = {}, time.monotonic()

    def took(phase: str) -> None:
        nonlocal mark
        timings[phase] = round(time.monotonic() - mark, 1)
        mark = time.monotonic()

    create_topic(kafka, TOPIC, PARTITIONS)
    # a share group starts reading where its partitions end unless told otherwise (KIP-932's
    # share.auto.offset.reset, a group config): from the start here, so that no record
    # produced before a partition's first fetch is skipped
    kafka_configs("--bootstrap-server", gateway.bootstrap, "--alter", "--entity-type", "groups",
                  "--entity-name", GROUP, "--add-config", "share.auto.offset.reset=earliest")
    took("topic and group config")
    stop = tmp_path_factory.mktemp("share") / "stop"
    common = ("--topics", TOPIC, "--stop-file", str(stop), "--seconds", "100", f"bootstrap.servers={gateway.bootstrap}",
              f"group.id={GROUP}")
    readers = {"share-explicit": Reader(*common, "--explicit", "client.id=share-explicit"),
               "share-implicit": Reader(*common, "client.id=share-implicit")}
    try:
        deadline = time.monotonic() + 60
        # both members, each with partitions of its own: the group's coordinator says so through
        # the gateway (the first holds every partition until its next heartbeat after the second
        # joined, up to group.share.heartbeat.interval.ms, 5 s: records fetched meanwhile could all
        # go to it)
        while True:
            members = share_members(gateway, GROUP)
            assigned = sorted(p for ps in members.values() for p in ps)
            if set(members) == set(readers) and all(members.values()) and assigned == list(range(PARTITIONS)):
                break
            for name, reader in readers.items():
                assert reader.process.poll() is None, f"{name} exited early: {reader.stderr[-3000:]}"
            assert time.monotonic() < deadline, f"the share group's partitions were never split in two: {members}"
            time.sleep(0.5)
        assignments = members
        took("both members assigned")
        produced = json.loads(java_program(
            "Produce", "--topic", TOPIC, "--records", str(RECORDS), "--prefix", "share",
            f"bootstrap.servers={gateway.bootstrap}",
            # every partition gets records: each member has some to read
            "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner").stdout.splitlines()[-1])
        assert produced["failed"] == 0 and len(produced["acked"]) == RECORDS
        took("produced")
        deadline = time.monotonic() + 60
        while True:
            for reader in readers.values():
                reader.progress()
            if sum(r.read for r in readers.values()) >= RECORDS:
                break
            assert time.monotonic() < deadline, \
                f"read {[(n, r.read) for n, r in readers.items()]} of {RECORDS} within 60 s"
            time.sleep(0.1)
        took("all read")
        described = share_groups_tool(gateway, "--describe", "--group", GROUP, "--members")
        took("described")
        stop.touch()
        results = {name: reader.finish(60) for name, reader in readers.items()}
        took("closed")
    finally:
        stop.touch()
        for reader in readers.values():
            reader.kill()
    return {"produced": produced["acked"], "results": results, "assignments": assignments,
            "members": described, "timings": timings}


def test_two_share_consumers_read_every_record_once_between_them_and_acknowledge_it(gateway, share_read):
    results = share_read["results"]
    print("phases (s):", share_read["timings"], "read:", {n: r["read"] for n, r in results.items()})
    everything = [v for r in results.values() for v in r["values"]]
    assert sorted(everything) == sorted(share_read["produced"])  # every record, once
    for name, result in results.items():
        assert result["read"] > 0, f"{name} read nothing: {share_read['assignments']}"
        assert result["redelivered"] == 0 and result["errors"] == [] and result["ack_failed"] == 0, result
        assert result["acknowledged"] == result["read"], (name, result["acknowledged"], result["read"])
    # the records came from the leaders through their node ports
    assert relayed(gateway, "ShareFetch") > 0 and relayed(gateway, "ShareGroupHeartbeat") > 0


def test_kafka_share_groups_describes_the_group_through_the_gateway(gateway, share_read):
    """--members while both read; --state and --offsets (the default view) once they left:
    the group Empty, every partition's records acknowledged (lag 0)."""
    members = share_read["members"]
    for client in ("share-explicit", "share-implicit"):
        assert client in members, members
    state = share_groups_tool(gateway, "--describe", "--group", GROUP, "--state")
    row = next(line.split() for line in state.splitlines() if line.startswith(GROUP))
    assert row[-2:] == ["Empty", "0"], state
    deadline = time.monotonic() + 30
    while (lags := share_lags(gateway)) != {p: "0" for p in range(PARTITIONS)}:  # DescribeShareGroupOffsets v1
        assert time.monotonic() < deadline, lags
        time.sleep(1)


def share_lags(gateway) -> dict[int, str]:
    offsets = share_groups_tool(gateway, "--describe", "--group", GROUP, "--offsets")
    return {int(r[2]): r[4] for r in (line.split() for line in offsets.splitlines()) if r[:2] == [GROUP, TOPIC]}


def test_share_group_offsets_are_reset_and_deleted_through_the_gateway(gateway, share_read):
    """kafka-share-groups --reset-offsets (AlterShareGroupOffsets) and --delete-offsets
    (DeleteShareGroupOffsets) of the group, Empty, routed by group to its coordinator."""
    reset = share_groups_tool(gateway, "--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-earliest",
                              "--execute")
    assert len([line for line in reset.splitlines() if line.startswith(GROUP)]) == PARTITIONS, reset
    lags = share_lags(gateway)  # every record to be read again
    assert sorted(lags) == list(range(PARTITIONS)) and sum(int(lag) for lag in lags.values()) == RECORDS, lags
    deleted = share_groups_tool(gateway, "--delete-offsets", "--group", GROUP, "--topic", TOPIC)
    assert any(line.split() == [TOPIC, "Successful"] for line in deleted.splitlines()), deleted
    assert share_lags(gateway) == {}


def test_share_groups_are_listed_and_deleted_through_the_gateway(kafka, gateway, share_read):
    """kafka-share-groups --list (ListGroups v5, share groups only, to every node: a broker's
    node port asks its broker for the share groups it coordinates) and --delete (listed
    first; then DeleteGroups to the coordinator groupkeeper named, which hands a share group's
    on to the broker that coordinates it). Last: the group is gone afterwards."""
    listed = share_groups_tool(gateway, "--list")
    assert GROUP in listed.split(), listed
    assert GROUP in share_groups_tool(gateway, "--list", "--state", "Empty").split()
    assert GROUP not in share_groups_tool(gateway, "--list", "--state", "Stable").split()
    deleted = share_groups_tool(gateway, "--delete", "--group", GROUP)
    assert "was successful" in deleted, deleted
    assert GROUP not in share_groups_tool(gateway, "--list").split()
    assert GROUP not in broker_groups(kafka)
