"""OffsetDelete (API 47) served with Kafka's semantics, from kafka-python's admin client and
from `groupkeeper groups delete-offsets`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient, TopicPartition
from kafka import errors as kafka_errors

from protocol.schemas import OFFSET_COMMIT
from tests.support.clients import RawConnection, RawMember, committed
from tests.support.coordinator_process import CoordinatorProcess
from tools.cli import main


@pytest.fixture
def groupkeeper(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path)
    process.start()
    process.topic("orders", 3)
    process.topic("other", 2)
    try:
        yield process
    finally:
        assert process.stop() == 0


def commit(port: int, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Offsets committed outside any generation (as a tool or a simple consumer does)."""
    connection = RawConnection(port)
    try:
        answer = connection.call(OFFSET_COMMIT, 2, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                                   "committed_metadata": ""} for (tt, p), o in offsets.items() if tt == t]}
                       for t in sorted({t for t, _ in offsets})]})
        assert {p.error_code for t in answer.topics for p in t.partitions} == {0}
    finally:
        connection.close()


def cli(process, *args):
    return CliRunner().invoke(main, ["groups", *args, "--bootstrap-server", process.bootstrap])


def test_kafka_pythons_admin_deletes_offsets_of_an_empty_group(groupkeeper):
    commit(groupkeeper.port, "idle", {("orders", 0): 10, ("orders", 1): 11, ("other", 0): 5})
    admin = KafkaAdminClient(bootstrap_servers=groupkeeper.bootstrap)
    try:
        result = admin.delete_group_offsets("idle", [TopicPartition("orders", 0), TopicPartition("orders", 2)])
        assert result == {TopicPartition("orders", 0): kafka_errors.NoError,
                          TopicPartition("orders", 2): kafka_errors.NoError}  # no offset there: nothing to do
        assert committed([groupkeeper.port], "idle") == {("orders", 1): 11, ("other", 0): 5}
        with pytest.raises(kafka_errors.GroupIdNotFoundError):
            admin.delete_group_offsets("never-was", [TopicPartition("orders", 0)])
    finally:
        admin.close()
    line = groupkeeper.wait_for_log("offsets deleted", group="idle")
    assert line["partitions"] == 1 and line["principal"] == "User:ANONYMOUS"


def test_topics_the_members_consume_keep_their_offsets(groupkeeper):
    member = RawMember(groupkeeper.port, "busy", "orders")
    try:
        member.join_and_sync()
        commit_other = {("other", 0): 7, ("other", 1): 8}
        commit(groupkeeper.port, "standalone-check", commit_other)  # another group: untouched throughout
        assert member.commit("orders", {0: 3, 1: 4, 2: 5}) == [0, 0, 0]
        admin = KafkaAdminClient(bootstrap_servers=groupkeeper.bootstrap)
        try:
            result = admin.delete_group_offsets("busy", [TopicPartition("orders", 1), TopicPartition("other", 0)])
        finally:
            admin.close()
        assert result == {TopicPartition("orders", 1): kafka_errors.GroupSubscribedToTopicError,
                          TopicPartition("other", 0): kafka_errors.NoError}
        assert committed([groupkeeper.port], "busy") == {("orders", 0): 3, ("orders", 1): 4, ("orders", 2): 5}

        refused = cli(groupkeeper, "delete-offsets", "busy", "--topic", "orders:0")
        assert refused.exit_code == 1 and "Error: GROUP_SUBSCRIBED_TO_TOPIC" in refused.output
    finally:
        member.close()


def test_the_cli_deletes_partitions_or_whole_topics(groupkeeper):
    commit(groupkeeper.port, "old", {("orders", 0): 1, ("orders", 1): 2, ("orders", 2): 3, ("other", 1): 4})
    some = cli(groupkeeper, "delete-offsets", "old", "--topic", "orders:0,2")
    assert some.exit_code == 0, some.output
    lines = some.output.splitlines()
    assert lines[0] == "Request succeeded for deleting offsets from group old."  # Kafka 4.4's words
    assert [line.split() for line in lines[2:]] == [["TOPIC", "PARTITION", "STATUS"], ["orders", "0", "Successful"],
                                                   ["orders", "2", "Successful"]]
    assert committed([groupkeeper.port], "old") == {("orders", 1): 2, ("other", 1): 4}
    whole = cli(groupkeeper, "delete-offsets", "--group", "old", "--topic", "other")
    assert whole.exit_code == 0, whole.output
    assert committed([groupkeeper.port], "old") == {("orders", 1): 2}
    for args, message in [(("--topic", "orders"), "name the group"), (("old",), "Missing option '--topic'"),
                          (("old", "--topic", "orders:x"), "is not TOPIC or TOPIC:P,P,..."),
                          (("nobody", "--topic", "orders"), "failed because the group does not exist")]:
        result = cli(groupkeeper, "delete-offsets", *args)
        assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output, result.output
