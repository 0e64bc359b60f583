"""Operators' acts leave a trace: who, from where, what, in the log and the event log."""

from __future__ import annotations

import time

from protocol.schemas import DELETE_GROUPS, OFFSET_COMMIT
from tests.support.clients import RawConnection
from tests.support.coordinator_process import CoordinatorProcess, read_events


def test_a_deleted_group_is_logged_and_an_event_with_who_and_from_where(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path)
    process.start()
    try:
        process.topic("t", 1)  # offsets are stored only for partitions that exist
        client = RawConnection(process.port)
        committed = client.call(OFFSET_COMMIT, 2, {
            "group_id": "doomed", "generation_id_or_member_epoch": -1, "member_id": "", "retention_time_ms": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                     "committed_metadata": ""}]}]})
        assert committed.topics[0].partitions[0].error_code == 0
        deleted = client.call(DELETE_GROUPS, 1, {"groups_names": ["doomed", "never-was"]})
        assert [r.error_code for r in deleted.results] == [0, 69]  # GROUP_ID_NOT_FOUND: nothing to audit
        client.close()
        line = process.wait_for_log("group deleted", group="doomed")
        assert (line["principal"], line["host"], line["client_id"]) == ("User:ANONYMOUS", "127.0.0.1", "raw")
        deadline = time.monotonic() + 30
        while not (found := [e for e in read_events(tmp_path / "events") if e["type"] == "group_deleted"]):
            assert time.monotonic() < deadline, "no group_deleted event"
            time.sleep(0.1)
        assert [(e["group"], e["principal"], e["host"], e["client_id"]) for e in found] == [
            ("doomed", "User:ANONYMOUS", "127.0.0.1", "raw")]
        assert not [e for e in process.events() if e.get("event") == "group deleted" and e.get("group") != "doomed"]
    finally:
        assert process.stop() == 0


def test_acl_and_user_changes_are_told_with_who_from_where_and_what(zookeeper, tmp_path):
    """`groupkeeper acls` and `groupkeeper users` write ZooKeeper themselves; each change
    leaves a record that every instance logs and puts in its event log, once; changes from
    before an instance started are not repeated; a password never appears."""
    import getpass
    import socket

    process = CoordinatorProcess(zookeeper, tmp_path)
    process.cli("acls", "add", "--allow-principal", "User:early", "--operation", "Read", "--group", "old")
    process.start()
    try:
        process.cli("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "billing")
        secret = tmp_path / "pw"
        secret.write_text("very-secret-password\n")
        process.cli("users", "add", "alice", "--mechanism", "SCRAM-SHA-256", "--password-file", str(secret))
        process.cli("acls", "remove", "--group", "billing", "--force")
        deadline = time.monotonic() + 30
        while len(changes := [e for e in process.events() if e.get("event") == "operator change"]) < 3:
            assert time.monotonic() < deadline, changes
            time.sleep(0.1)
        assert [(e["by"], e["host"], e["kind"]) for e in changes] == [
            (getpass.getuser(), socket.gethostname(), kind) for kind in ("acls", "users", "acls")]
        added, user, removed = (e["what"] for e in changes)
        assert added == {"resource": "Group:literal:billing", "removed": [],
                         "added": ["(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"]}
        assert user == {"user": "alice", "added": "SCRAM-SHA-256"}
        assert removed["resource"] == "Group:literal:billing" and removed["removed"] == ["all"]
        assert not any("early" in str(e) or "old" == e.get("what", {}).get("resource", "")[-3:] for e in changes)
        assert "very-secret-password" not in process.log_path.read_text()
        while len([e for e in read_events(tmp_path / "events") if e["type"] == "operator_change"]) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ids = [e["id"] for e in read_events(tmp_path / "events") if e["type"] == "operator_change"]
        assert ids == sorted(ids) and len(set(ids)) == 3
    finally:
        assert process.stop() == 0


def test_offsets_set_outside_a_generation_say_who_and_keep_kafkas_retention_time(zookeeper, tmp_path):
    """A reset (OffsetCommit as no member, generation -1): the event names who and from
    where, a log line says so once a minute per group and client; OffsetCommit v2-v4's
    retention_time_ms is kept as the offset's own expiry, as Kafka keeps it."""
    process = CoordinatorProcess(zookeeper, tmp_path)
    process.start()
    try:
        process.topic("t", 1)  # offsets are stored only for partitions that exist
        client = RawConnection(process.port)
        for offset in (5, 6, 7):
            answer = client.call(OFFSET_COMMIT, 2, {
                "group_id": "reset-me", "generation_id_or_member_epoch": -1, "member_id": "",
                "retention_time_ms": 60_000,
                "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                         "committed_metadata": ""}]}]})
            assert answer.topics[0].partitions[0].error_code == 0
        client.close()
        line = process.wait_for_log("offsets set outside a generation", group="reset-me")
        assert (line["principal"], line["host"], line["client_id"], line["partitions"]) == (
            "User:ANONYMOUS", "127.0.0.1", "raw", 1)
        assert len([e for e in process.events() if e.get("event") == "offsets set outside a generation"]) == 1
        deadline = time.monotonic() + 30
        while len(found := [e for e in read_events(tmp_path / "events") if e["type"] == "offsets_committed"]) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert {(e["principal"], e["host"], e["client_id"]) for e in found} == {("User:ANONYMOUS", "127.0.0.1", "raw")}
    finally:
        assert process.stop() == 0
    # the expiry is stored with the offset (the fifth element of its entry)
    from kazoo.client import KazooClient
    from coordinator.store import layout
    zk = KazooClient(hosts=process.zookeeper)
    zk.start(timeout=10)
    try:
        stored = []
        for partition in zk.get_children(layout.ROOT + "/partitions"):
            path = f"{layout.ROOT}/partitions/{partition}"
            for found_path in _walk(zk, path):
                if "reset-me" in found_path and found_path.rsplit("/", 1)[1].isdigit():
                    stored.append(layout.decode_shard(zk.get(found_path)[0]))
        entries = [e for shard in stored for e in shard.values()]
        assert entries and all(len(e) == 5 and e[4] - e[3] == 60_000 for e in entries), entries
    finally:
        zk.stop()
        zk.close()


def _walk(zk, path: str):
    for child in zk.get_children(path):
        full = f"{path}/{child}"
        yield full
        yield from _walk(zk, full)
