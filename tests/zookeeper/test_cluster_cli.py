"""`groupkeeper cluster` and the coordinator named by `groups describe --json`, against two
real `groupkeeper run` processes sharing a ZooKeeper."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tools.cli import main
from tools.cluster_status import ranges
from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from coordinator.store.zkserver import free_port
from protocol import ErrorCode
from protocol.schemas import OFFSET_COMMIT

from tests.support.clients import RawConnection, find_coordinator
from tests.support.coordinator_process import cluster

GROUPS = [f"stored-{i}" for i in range(30)]


@pytest.fixture(scope="module")
def two(zookeeper, tmp_path_factory):
    instances = cluster(zookeeper, tmp_path_factory.mktemp("cluster-cli"), 2)
    for process in instances:
        process.start()
    instances[0].topic("t", 1)  # offsets are stored only for partitions that exist
    for group in GROUPS:  # groups that exist in ZooKeeper: committed offsets only
        connection = RawConnection(find_coordinator([p.port for p in instances], group))
        answer = connection.call(OFFSET_COMMIT, 7, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})
        connection.close()
        assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
    try:
        yield instances
    finally:
        for process in instances:
            assert process.stop() == 0


def test_cluster_lists_live_instances_with_their_group_partitions_and_groups(two):
    result = CliRunner().invoke(main, ["cluster", "--json", "--zookeeper", two[0].zookeeper])
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["group_partitions"] == 50 and status["unowned"] == []
    assert [(i["id"], i["host"], i["port"]) for i in status["instances"]] == [
        (0, "127.0.0.1", two[0].port), (1, "127.0.0.1", two[1].port)]
    held = [set(i["group_partitions"]) for i in status["instances"]]
    assert len(held[0]) == len(held[1]) == 25 and not held[0] & held[1]
    assert sum(i["groups"] for i in status["instances"]) == len(GROUPS)

    text = CliRunner().invoke(main, ["cluster", "--zookeeper", two[0].zookeeper])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["ID", "HOST", "PORT", "GROUP-PARTITIONS", "GROUPS", "OWNED"]
    first = status["instances"][0]
    assert lines[1].split() == ["0", "127.0.0.1", str(two[0].port), "25", str(first["groups"]),
                                ranges(first["group_partitions"])]
    assert lines[-1] == "2 live instance(s); 50 of 50 group-partitions owned"


def test_describe_names_the_instance_that_coordinates_the_group(two):
    by_port = {p.port: i for i, p in enumerate(two)}
    seen = set()
    for group in GROUPS[:10]:
        result = CliRunner().invoke(main, ["groups", "describe", group, "--json",
                                           "--bootstrap-server", two[0].bootstrap])
        assert result.exit_code == 0, result.output
        coordinator = json.loads(result.stdout)["coordinator"]
        owner = find_coordinator([p.port for p in two], group)
        assert coordinator == {"id": INSTANCE_NODE_BASE + by_port[owner], "host": "127.0.0.1", "port": owner}
        seen.add(owner)
    assert seen == {two[0].port, two[1].port}  # groups on both instances, asked through one


def test_cluster_against_an_unreachable_zookeeper_is_one_line():
    result = CliRunner().invoke(main, ["cluster", "--zookeeper", f"127.0.0.1:{free_port()}"])
    assert result.exit_code == 1
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("Error: cannot reach ZooKeeper")


def test_ranges_are_compact():
    assert ranges([7, 0, 1, 2, 5, 8]) == "0-2,5,7-8"
    assert ranges([]) == "-"
