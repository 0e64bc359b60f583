"""groupkeeper's data in ZooKeeper protected from other ZooKeeper users (issue 16, item 4):
with `zookeeper_digest_file`, what an instance creates, and what was there before, can be
read by anyone and written by that digest user only; Kafka's /brokers stays open."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from protocol import ErrorCode
from tests.support.clients import RawMember
from tests.support.coordinator_process import CoordinatorProcess


def _tree(client: KazooClient, path: str):
    yield path
    for name in client.get_children(path):
        yield from _tree(client, f"{path}/{name}")


def test_a_digest_protects_what_was_there_and_what_comes(zookeeper, tmp_path):
    before = CoordinatorProcess(zookeeper, tmp_path)
    before.start()
    before.topic("events", 2)
    member = RawMember(before.port, "ledger", "events")
    try:
        member.join_and_sync()
        assert member.commit("events", {0: 41, 1: 42}) == [ErrorCode.NONE, ErrorCode.NONE]
    finally:
        member.close()
    assert before.stop() == 0
    secret = tmp_path / "zookeeper.digest"
    secret.write_text("groupkeeper:s3cret\n")
    protected = CoordinatorProcess(zookeeper, tmp_path, chroot=before.chroot, zookeeper_digest_file=str(secret))
    protected.start()
    stranger = KazooClient(hosts=before.zookeeper)
    stranger.start(timeout=10)
    try:
        assert protected.wait_for_log("zookeeper data protected")["nodes"] > 10
        member = RawMember(protected.port, "ledger", "events")
        try:
            member.join_and_sync()  # a new generation written, under the ACL
            assert member.commit("events", {0: 43}) == [ErrorCode.NONE]
        finally:
            member.close()
        nodes = list(_tree(stranger, "/groupkeeper"))
        for path in nodes:  # readable by anyone, writable by nobody but the digest user
            acls, _ = stranger.get_acls(path)
            assert [a.id.scheme for a in acls if a.perms & Permissions.WRITE] == ["digest"], path
            stranger.get(path)
        with pytest.raises(NoAuthError):
            stranger.set("/groupkeeper/config", b"{}")
        with pytest.raises(NoAuthError):
            stranger.create("/groupkeeper/junk", b"")
        with pytest.raises(NoAuthError):
            stranger.delete(max(nodes, key=len))
        stranger.create("/brokers/topics/stranger", b'{"version":1,"partitions":{"0":[1]}}')  # Kafka's: open
    finally:
        stranger.stop()
        stranger.close()
        assert protected.stop() == 0

    without = CoordinatorProcess(zookeeper, tmp_path, chroot=before.chroot)
    with pytest.raises(AssertionError, match="protected: set zookeeper_digest_file"):
        without.start()
    wrong = tmp_path / "wrong.digest"
    wrong.write_text("groupkeeper:guess\n")
    guessing = CoordinatorProcess(zookeeper, tmp_path, chroot=before.chroot, zookeeper_digest_file=str(wrong))
    with pytest.raises(AssertionError, match="protected for another user or password"):
        guessing.start()
