"""Kafka's ACLs in a real ZooKeeper: changed by `AclAdmin` as Kafka's tools change them,
followed by a running `AclStore`, each test in a chroot of its own."""

from __future__ import annotations

import json
import threading
from contextlib import asynccontextmanager

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from coordinator.security.acls import store as acl_store
from coordinator.security.acls.store import AclAdmin, AclStore
from coordinator.security.acls.authorizer import (Acl, Operation, PatternType, Permission, Resource, ResourceType,
                                                  encode_acls)
from coordinator.store.bridge import ZooKeeperBridge
from tools.topics_admin import AdminError
from tests.support.in_process import expire, make_chroot, until

O, T = Operation, ResourceType
ALICE = "User:alice"


def _connect(zookeeper) -> str:
    return zookeeper.connect_string + make_chroot(zookeeper.connect_string, "acls")


@asynccontextmanager
async def watching(connect: str, **options):
    """A running AclStore on a session of its own."""
    zk = ZooKeeperBridge(connect, session_timeout=4.0)
    await zk.start()
    try:
        async with trio.open_nursery() as nursery:
            store = AclStore(zk, **options)
            await nursery.start(store.run)
            yield store
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def admin_call(connect: str, action, digest=None):
    """`action(admin)` on an AclAdmin of its own, in a thread (it is synchronous)."""
    def call():
        with AclAdmin(connect, digest=digest) as admin:
            return action(admin)
    return await trio.to_thread.run_sync(call)


def _client(connect: str, digest: tuple[str, str] | None = None) -> KazooClient:
    client = KazooClient(hosts=connect, auth_data=None if digest is None else [("digest", ":".join(digest))])
    client.start(timeout=10)
    return client


async def test_an_added_acl_allows_and_its_removal_denies_again(zookeeper):
    connect = _connect(zookeeper)
    read = Acl(ALICE, "*", O.READ, Permission.ALLOW)
    group = Resource(T.GROUP, "payments")
    async with watching(connect, super_users=frozenset({"User:admin"})) as store:
        def alice_reads() -> bool:
            return store.authorizer.allows(ALICE, "10.0.0.1", O.READ, T.GROUP, "payments")
        assert not alice_reads() and store.acls == {}
        assert await admin_call(connect, lambda a: a.add(group, {read})) == {read}
        await until(alice_reads, timeout=5)
        assert store.authorizer.allows(ALICE, "10.0.0.1", O.DESCRIBE, T.GROUP, "payments")  # implied
        assert not store.authorizer.allows("User:bob", "10.0.0.1", O.READ, T.GROUP, "payments")
        assert await admin_call(connect, lambda a: a.remove(group, {read})) == set()
        await until(lambda: not alice_reads(), timeout=5)
        assert store.acls == {}
        assert store.authorizer.allows("User:admin", "h", O.DELETE, T.GROUP, "payments")
    client = _client(connect)
    try:
        assert client.exists("/kafka-acl/Group/payments") is None  # an empty resource's znode goes
    finally:
        client.stop()
        client.close()


async def test_prefixed_acls_apply_to_the_names_they_start(zookeeper):
    connect = _connect(zookeeper)
    async with watching(connect) as store:
        await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, "events.", PatternType.PREFIXED),
                                                  {Acl(ALICE, "*", O.WRITE, Permission.ALLOW)}))
        await until(lambda: store.authorizer.allows(ALICE, "h", O.WRITE, T.TOPIC, "events.clicks"), timeout=5)
        assert not store.authorizer.allows(ALICE, "h", O.WRITE, T.TOPIC, "event")
        assert not store.authorizer.allows(ALICE, "h", O.WRITE, T.GROUP, "events.clicks")
        await admin_call(connect, lambda a: a.remove(Resource(T.TOPIC, "events.", PatternType.PREFIXED)))
        await until(lambda: not store.authorizer.allows(ALICE, "h", O.WRITE, T.TOPIC, "events.clicks"), timeout=5)


async def test_znodes_written_by_kafka_are_read_and_followed(zookeeper):
    """Kafka's own example data, spaces and all, under paths Kafka's brokers create."""
    connect = _connect(zookeeper)
    client = _client(connect)
    try:
        client.create("/kafka-acl/Group/ledger", b'{"version": 1, "acls": [ { "host":"host1", '
                      b'"permissionType": "Allow","operation": "Read","principal": "User:alice"}]}', makepath=True)
        async with watching(connect) as store:
            assert store.acls == {Resource(T.GROUP, "ledger"): frozenset({Acl(ALICE, "host1", O.READ,
                                                                               Permission.ALLOW)})}
            assert store.authorizer.allows(ALICE, "host1", O.READ, T.GROUP, "ledger")
            assert not store.authorizer.allows(ALICE, "host2", O.READ, T.GROUP, "ledger")
            # a prefixed resource appears where no znode of its type existed yet
            await trio.to_thread.run_sync(lambda: client.create(
                "/kafka-acl-extended/prefixed/Topic/led", encode_acls({Acl("User:*", "*", O.ALL, Permission.DENY)}),
                makepath=True))
            await until(lambda: Resource(T.TOPIC, "led", PatternType.PREFIXED) in store.acls, timeout=5)
            await trio.to_thread.run_sync(lambda: client.set("/kafka-acl/Group/ledger", encode_acls(
                {Acl(ALICE, "*", O.READ, Permission.ALLOW)})))
            await until(lambda: store.authorizer.allows(ALICE, "host2", O.READ, T.GROUP, "ledger"), timeout=5)
    finally:
        client.stop()
        client.close()


async def test_each_change_writes_kafkas_change_notification(zookeeper):
    connect = _connect(zookeeper)
    acl = Acl(ALICE, "*", O.READ, Permission.ALLOW)
    await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, "orders"), {acl}))
    await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, "orders"), {acl}))  # no change: no notification
    await admin_call(connect, lambda a: a.add(Resource(T.GROUP, "app-", PatternType.PREFIXED), {acl}))
    await admin_call(connect, lambda a: a.remove(Resource(T.TOPIC, "orders")))
    client = _client(connect)
    try:
        literal = sorted(client.get_children("/kafka-acl-changes"))
        assert [name[:len("acl_changes_")] for name in literal] == ["acl_changes_"] * 2
        assert [client.get(f"/kafka-acl-changes/{n}")[0] for n in literal] == [b"TOPIC:orders"] * 2
        (extended,) = client.get_children("/kafka-acl-extended-changes")
        assert json.loads(client.get(f"/kafka-acl-extended-changes/{extended}")[0]) == {
            "version": 1, "resourceType": "GROUP", "name": "app-", "patternType": "PREFIXED"}
    finally:
        client.stop()
        client.close()


async def test_concurrent_adds_from_two_admins_all_survive(zookeeper):
    connect = _connect(zookeeper)
    group = Resource(T.GROUP, "contended")
    principals = [[f"User:{who}-{i}" for i in range(15)] for who in ("a", "b")]
    start = threading.Barrier(2)

    def adds(names: list[str]) -> None:
        with AclAdmin(connect) as admin:
            start.wait(timeout=10)
            for name in names:
                admin.add(group, {Acl(name, "*", O.READ, Permission.ALLOW)})
    async with trio.open_nursery() as nursery:
        for names in principals:
            nursery.start_soon(trio.to_thread.run_sync, adds, names)
    listed = await admin_call(connect, lambda a: a.list())
    assert {acl.principal for acl in listed[group]} == set(principals[0] + principals[1])


async def test_entries_it_cannot_read_are_not_rewritten_away(zookeeper):
    connect = _connect(zookeeper)
    client = _client(connect)
    newer = {"principal": "User:x", "permissionType": "Allow", "operation": "SomethingNewer", "host": "*"}
    try:
        client.create("/kafka-acl/Topic/t", json.dumps({"version": 1, "acls": [newer]}).encode(), makepath=True)
        with pytest.raises(AdminError, match="cannot read"):
            await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, "t"), {Acl(ALICE, "*", O.READ,
                                                                                   Permission.ALLOW)}))
        assert json.loads(client.get("/kafka-acl/Topic/t")[0])["acls"] == [newer]
        async with watching(connect, allow_everyone_if_no_acl_found=True) as store:
            assert not store.authorizer.allows(ALICE, "h", O.READ, T.TOPIC, "t")  # fails closed
            assert store.authorizer.allows(ALICE, "h", O.READ, T.TOPIC, "other")
        await admin_call(connect, lambda a: a.remove(Resource(T.TOPIC, "t")))  # removing all needs no reading
        assert client.exists("/kafka-acl/Topic/t") is None
    finally:
        client.stop()
        client.close()


async def test_an_oversized_znode_is_not_read_and_denies(zookeeper, monkeypatch):
    connect = _connect(zookeeper)
    monkeypatch.setattr(acl_store, "MAX_NODE_BYTES", 200)
    big = {Acl(f"User:{i:03}", "*", O.READ, Permission.ALLOW) for i in range(10)} | {
        Acl(ALICE, "*", O.READ, Permission.ALLOW)}
    await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, "big"), big))
    async with watching(connect) as store:
        assert store.acls == {Resource(T.TOPIC, "big"): frozenset()}
        assert not store.authorizer.allows(ALICE, "h", O.READ, T.TOPIC, "big")


async def test_a_new_session_reads_everything_again_and_keeps_following(zookeeper):
    connect = _connect(zookeeper)
    acl = Acl(ALICE, "*", O.READ, Permission.ALLOW)
    async with watching(connect) as store:
        await trio.to_thread.run_sync(expire, connect, store.zk)
        await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, "after"), {acl}))
        await until(lambda: store.authorizer.allows(ALICE, "h", O.READ, T.TOPIC, "after"), timeout=15)
        await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, "later"), {acl}))  # watches re-armed
        await until(lambda: store.authorizer.allows(ALICE, "h", O.READ, T.TOPIC, "later"), timeout=5)


async def test_with_a_digest_only_that_user_can_change_them(zookeeper):
    connect = _connect(zookeeper)
    digest = ("acl-admin", "s3cret")
    acl = Acl(ALICE, "*", O.READ, Permission.ALLOW)
    await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, "guarded"), {acl}), digest=digest)
    stranger = _client(connect)
    try:
        with pytest.raises(NoAuthError):
            stranger.set("/kafka-acl/Topic/guarded", b"{}")
        with pytest.raises(NoAuthError):
            stranger.create("/kafka-acl/Topic/mine", b"{}")
        with pytest.raises(NoAuthError):
            await admin_call(connect, lambda a: a.remove(Resource(T.TOPIC, "guarded")))
        async with watching(connect) as store:  # readable by all
            assert store.authorizer.allows(ALICE, "h", O.READ, T.TOPIC, "guarded")
        assert await admin_call(connect, lambda a: a.remove(Resource(T.TOPIC, "guarded")), digest=digest) == set()
    finally:
        stranger.stop()
        stranger.close()


async def test_names_zookeeper_or_kafka_refuse_are_refused(zookeeper):
    connect = _connect(zookeeper)
    for name in ("a/b", "", ".", "..", "a\x00b", "tab\t", "\ud800", "emoji-\U0001f600", "\ue000"):
        with pytest.raises(AdminError, match="invalid resource name"):
            await admin_call(connect, lambda a: a.add(Resource(T.TOPIC, name), {Acl(ALICE, "*", O.READ,
                                                                                   Permission.ALLOW)}))


async def test_transactional_id_acls_are_stored_in_kafkas_layout_and_watched(zookeeper):
    connect = _connect(zookeeper)
    tx = T.TRANSACTIONAL_ID
    write = Acl(ALICE, "*", O.WRITE, Permission.ALLOW)
    client = _client(connect)
    try:
        async with watching(connect) as store:
            def alice_writes(name: str) -> bool:
                return store.authorizer.allows(ALICE, "h", O.WRITE, tx, name)
            assert await admin_call(connect, lambda a: a.add(Resource(tx, "orders-tx"), {write})) == {write}
            await until(lambda: alice_writes("orders-tx"), timeout=5)
            assert store.authorizer.allows(ALICE, "h", O.DESCRIBE, tx, "orders-tx")  # implied
            data, _ = await trio.to_thread.run_sync(client.get, "/kafka-acl/TransactionalId/orders-tx")
            assert json.loads(data)["acls"] == [{"principal": ALICE, "permissionType": "Allow", "operation": "Write",
                                                 "host": "*"}]
            # a prefixed one written by Kafka's tools, where no znode of its type existed yet
            await trio.to_thread.run_sync(lambda: client.create(
                "/kafka-acl-extended/prefixed/TransactionalId/etl-", encode_acls({write}), makepath=True))
            await until(lambda: alice_writes("etl-1"), timeout=5)
            assert Resource(tx, "etl-", PatternType.PREFIXED) in store.acls
            listed = await admin_call(connect, lambda a: a.list(lambda r: r.type is tx))
            assert set(listed) == {Resource(tx, "orders-tx"), Resource(tx, "etl-", PatternType.PREFIXED)}
            # changed and deleted behind its back: both followed
            await trio.to_thread.run_sync(lambda: client.set(
                "/kafka-acl/TransactionalId/orders-tx", encode_acls({Acl(ALICE, "*", O.DESCRIBE, Permission.ALLOW)})))
            await until(lambda: not alice_writes("orders-tx"), timeout=5)
            await trio.to_thread.run_sync(client.delete, "/kafka-acl-extended/prefixed/TransactionalId/etl-")
            await until(lambda: not alice_writes("etl-1"), timeout=5)
            assert await admin_call(connect, lambda a: a.remove(Resource(tx, "orders-tx"))) == set()
            await until(lambda: store.acls == {}, timeout=5)
        assert client.exists("/kafka-acl/TransactionalId/orders-tx") is None
        changes = [client.get(f"/kafka-acl-changes/{c}")[0] for c in client.get_children("/kafka-acl-changes")]
        assert b"TRANSACTIONAL_ID:orders-tx" in changes
    finally:
        client.stop()
        client.close()
