"""Offset commits within and over their bounds, against a real ZooKeeper and a `groupkeeper
run` process: Kafka's 4,096 characters of metadata are accepted whatever the characters; a
commit of more partitions than `offset_commit_max_partitions`, or one that would take its
group's metadata over `group_max_offset_metadata_bytes`, is refused whole with
INVALID_COMMIT_OFFSET_SIZE, stores nothing, and other groups' commits go on; the ZooKeeper
data size is exported."""

from __future__ import annotations

import re
import time

from protocol import ErrorCode as E
from protocol.schemas import OFFSET_COMMIT, OFFSET_FETCH
from tests.support.clients import RawConnection
from tests.support.coordinator_process import CoordinatorProcess

METADATA = 4096  # Kafka's offset.metadata.max.bytes, in characters


def commit(connection: RawConnection, group: str, topic: str, partitions: range, metadata: str = "") -> set[int]:
    answer = connection.call(OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": 100 + p, "committed_metadata": metadata} for p in partitions]}]})
    return {p.error_code for t in answer.topics for p in t.partitions}


def fetched(connection: RawConnection, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    answer = connection.call(OFFSET_FETCH, 5, {"group_id": group, "topics": None})
    assert answer.error_code == E.NONE
    return {(t.name, p.partition_index): (p.committed_offset, p.metadata) for t in answer.topics for p in t.partitions}


def test_metadata_of_any_characters_and_the_commit_bounds(zookeeper, tmp_path):
    coordinator = CoordinatorProcess(zookeeper, tmp_path, offset_commit_max_partitions=100,
                                     group_max_offset_metadata_bytes=300_000)
    coordinator.start()
    coordinator.topic("t", 101)  # offsets are stored only for partitions that exist
    coordinator.topic("u", 20)
    connection = RawConnection(coordinator.port)
    try:
        control = "\x01" * METADATA  # 6 bytes each in JSON: the worst case for a shard
        assert commit(connection, "control", "t", range(64), control) == {E.NONE}
        assert fetched(connection, "control") == {("t", p): (100 + p, control) for p in range(64)}

        assert commit(connection, "wide", "t", range(101)) == {E.INVALID_COMMIT_OFFSET_SIZE}
        assert commit(connection, "wide", "t", range(100)) == {E.NONE}  # at the bound: accepted

        assert commit(connection, "heavy", "t", range(80), "m" * METADATA) == {E.INVALID_COMMIT_OFFSET_SIZE}
        assert fetched(connection, "heavy") == {}  # nothing of it stored
        assert commit(connection, "heavy", "t", range(60), "m" * METADATA) == {E.NONE}  # 245,760 characters
        assert commit(connection, "heavy", "u", range(20), "m" * METADATA) == {E.INVALID_COMMIT_OFFSET_SIZE}
        assert commit(connection, "heavy", "t", range(60), "") == {E.NONE}  # replacing it frees it
        assert commit(connection, "heavy", "u", range(20), "m" * METADATA) == {E.NONE}
        assert commit(connection, "bystander", "t", range(3)) == {E.NONE}
        assert len(fetched(connection, "bystander")) == 3

        def held() -> float:
            found = re.search(r"^groupkeeper_zookeeper_data_bytes (\S+)$", coordinator.scrape()[1], re.M)
            return float(found.group(1)) if found else 0.0
        deadline = time.monotonic() + 20  # read every 5 s
        while held() <= 64 * METADATA:  # the control group's metadata alone
            assert time.monotonic() < deadline, f"groupkeeper_zookeeper_data_bytes stays at {held()}"
            time.sleep(0.2)
    finally:
        connection.close()
        coordinator.stop()
