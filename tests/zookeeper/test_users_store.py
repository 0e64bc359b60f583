"""SCRAM users in Kafka's ZooKeeper layout: written by `UserAdmin` as Kafka's tools write
them (other configuration kept, a change notification for the brokers, protected by a
digest when asked), and followed by the coordinator's `UserStore` through watches."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import pytest
import trio
from kafka.net.sasl.scram import ScramClient
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from coordinator.security.scram import ScramServer, make_credential, verify_plain
from coordinator.security.users import MAX_NODE_BYTES, UserAdmin, UserStore, desanitize, parse_user_config, sanitize
from coordinator.store.blocking import AdminError
from coordinator.store.bridge import ZooKeeperBridge
from tests.support.in_process import expire, make_chroot, until

SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
DIGEST = ("groupkeeper", "s3cret")


@pytest.fixture
def hosts(zookeeper) -> str:
    """A connect string with a fresh chroot: each test has /config to itself."""
    return zookeeper.connect_string + make_chroot(zookeeper.connect_string, "users")


@asynccontextmanager
async def running_store(hosts: str, digest: tuple[str, str] | None = None, session_timeout: float = 10.0):
    zk = ZooKeeperBridge(hosts, session_timeout=session_timeout, digest=digest)
    await zk.start()
    try:
        async with trio.open_nursery() as nursery:
            store = UserStore(zk)
            await nursery.start(store.run)
            yield store
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def admin(hosts: str, action, digest: tuple[str, str] | None = None):
    """`action(admin)` with a UserAdmin of its own, off trio's thread (synchronous kazoo)."""
    def run():
        with UserAdmin(hosts, digest=digest) as users:
            return action(users)
    return await trio.to_thread.run_sync(run)


@asynccontextmanager
async def raw_client(hosts: str, digest: tuple[str, str] | None = None):
    client = KazooClient(hosts=hosts, auth_data=None if digest is None else [("digest", ":".join(digest))])
    await trio.to_thread.run_sync(lambda: client.start(timeout=10))
    try:
        yield client
    finally:
        await trio.to_thread.run_sync(client.stop)
        client.close()


def _accepts(store: UserStore, user: str, mechanism: str, password: str) -> bool:
    credential = store.credential(user, mechanism)
    return credential is not None and verify_plain(mechanism, credential, password)


async def test_users_added_changed_and_deleted_reach_a_running_store(hosts):
    async with running_store(hosts) as store:
        assert store.credential("alice", SHA256) is None  # /config/users does not exist yet
        await admin(hosts, lambda users: users.add("alice", SHA256, "first", 4096))
        await until(lambda: _accepts(store, "alice", SHA256, "first"))
        assert store.credential("alice", SHA512) is None

        await admin(hosts, lambda users: users.add("alice", SHA256, "second", 8192))
        await until(lambda: _accepts(store, "alice", SHA256, "second"))
        assert store.credential("alice", SHA256).iterations == 8192
        await admin(hosts, lambda users: users.add("alice", SHA512, "third", 4096))
        await until(lambda: _accepts(store, "alice", SHA512, "third"))
        assert _accepts(store, "alice", SHA256, "second")  # the other mechanism's is kept
        assert await admin(hosts, lambda users: users.list()) == {"alice": [SHA256, SHA512]}

        await admin(hosts, lambda users: users.delete("alice", SHA256))
        await until(lambda: store.credential("alice", SHA256) is None)
        assert _accepts(store, "alice", SHA512, "third")
        await admin(hosts, lambda users: users.delete("alice"))
        await until(lambda: store.credential("alice", SHA512) is None)
        assert await admin(hosts, lambda users: users.list()) == {}
        async with raw_client(hosts) as client:
            assert await trio.to_thread.run_sync(client.get_children, "/config/users") == []  # nothing left in it

        with pytest.raises(AdminError, match="user 'alice' does not exist"):
            await admin(hosts, lambda users: users.delete("alice"))


async def test_names_are_sanitized_as_kafka_does(hosts):
    name = "CN=Alice Smith, O=*~+"
    assert sanitize(name) == "CN%3DAlice%20Smith%2C%20O%3D%2A%7E%2B"
    assert desanitize(sanitize(name)) == name and desanitize("a+b") == "a b"  # Java's URLDecoder
    assert sanitize("\u00e9t\u00e9") == "%C3%A9t%C3%A9" and sanitize("a-b_c.d") == "a-b_c.d"
    with pytest.raises(ValueError):
        desanitize("%zz")
    async with running_store(hosts) as store:
        await admin(hosts, lambda users: users.add(name, SHA512, "pw", 4096))
        await until(lambda: _accepts(store, name, SHA512, "pw"))
        async with raw_client(hosts) as client:
            assert await trio.to_thread.run_sync(client.get_children, "/config/users") == [sanitize(name)]
        assert await admin(hosts, lambda users: users.list()) == {name: [SHA512]}


async def test_other_configuration_is_kept_and_brokers_are_notified(hosts):
    async with raw_client(hosts) as client:
        quota = {"producer_byte_rate": "1024", "consumer_byte_rate": "2048"}
        await trio.to_thread.run_sync(lambda: client.create(
            "/config/users/bob", json.dumps({"version": 1, "config": quota}).encode(), makepath=True))
        await trio.to_thread.run_sync(lambda: client.create(
            "/config/users/bob/clients/app", b'{"version":1,"config":{"request_percentage":"50"}}', makepath=True))
        await admin(hosts, lambda users: users.add("bob", SHA256, "pw", 4096))

        async def config() -> dict:
            data, _ = await trio.to_thread.run_sync(client.get, "/config/users/bob")
            node = json.loads(data)
            assert node["version"] == 1
            return node["config"]
        assert set(await config()) == {"producer_byte_rate", "consumer_byte_rate", SHA256}
        assert {k: v for k, v in (await config()).items() if k != SHA256} == quota
        await admin(hosts, lambda users: users.delete("bob"))
        assert await config() == quota  # the node stays, with the quotas and the client's
        assert await trio.to_thread.run_sync(client.exists, "/config/users/bob/clients/app")

        await admin(hosts, lambda users: users.add("carol", SHA512, "pw", 4096))
        await admin(hosts, lambda users: users.delete("carol", SHA512))
        changes = sorted(await trio.to_thread.run_sync(client.get_children, "/config/changes"))
        assert changes == [f"config_change_{i:010d}" for i in range(4)]  # ZooKeeper's sequence numbers
        notified = []
        for change in changes:
            data, _ = await trio.to_thread.run_sync(client.get, f"/config/changes/{change}")
            notified.append(json.loads(data))
        assert notified == [{"version": 2, "entity_path": path}
                            for path in ("users/bob", "users/bob", "users/carol", "users/carol")]

        await trio.to_thread.run_sync(lambda: client.create("/config/users/junk", b"not json"))
        with pytest.raises(AdminError, match="does not hold Kafka's user configuration"):
            await admin(hosts, lambda users: users.add("junk", SHA256, "pw", 4096))
        assert (await trio.to_thread.run_sync(client.get, "/config/users/junk"))[0] == b"not json"  # left alone
    with pytest.raises(AdminError, match="user 'bob' has no SCRAM-SHA-512 credential"):
        await admin(hosts, lambda users: users.delete("bob", SHA512))


async def test_a_user_written_as_kafka_configs_writes_it_authenticates(hosts):
    # kafka-configs.sh --zookeeper ... --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    # writes Kafka's compact JSON; its salts are random base-36 text
    credential = make_credential(SHA256, "alice-secret", 8192, salt=b"1xq8k3mb5a2ksvj0ehwbggzq0c")
    kafka_written = ('{"version":1,"config":{"SCRAM-SHA-256":"' + credential.to_kafka() +
                     '","producer_byte_rate":"1048576"}}')
    async with raw_client(hosts) as client:
        await trio.to_thread.run_sync(lambda: client.create(
            "/config/users/alice", kafka_written.encode(), makepath=True))
        await trio.to_thread.run_sync(lambda: client.create("/config/users/garbage", b"\xff{not json"))
        oversize = json.dumps({"version": 1, "config": {SHA256: credential.to_kafka(),
                                                         "padding": "x" * MAX_NODE_BYTES}})
        await trio.to_thread.run_sync(lambda: client.create("/config/users/huge", oversize.encode()))
    async with running_store(hosts) as store:
        assert store.credential("alice", SHA256) == credential
        assert store.credential("garbage", SHA256) is None and store.credential("huge", SHA256) is None
        client = ScramClient("alice", "alice-secret", SHA256)
        scram = ScramServer(SHA256, lambda user: store.credential(user, SHA256))
        client.process_server_first_message(scram.first(client.first_message()))
        client.process_server_final_message(scram.final(client.final_message()))
        assert scram.done and scram.user == "alice"


def test_unreadable_user_configuration_is_skipped_never_raised():
    good = make_credential(SHA512, "pw").to_kafka()
    short_keys = "salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096"  # not SHA-512's sizes
    for data in (b"", b"\xff", b"null", b"[]", b'{"config":[]}', b'{"config":{"SCRAM-SHA-512":7}}',
                 b"[" * 100_000, json.dumps({"config": {SHA512: short_keys}}).encode(),
                 json.dumps({"config": {SHA256: "salt=AAAA"}}).encode()):
        assert parse_user_config(data) == {}, data
    both = json.dumps({"config": {SHA512: good, SHA256: "nonsense", "SCRAM-SHA-1": good}}).encode()
    assert list(parse_user_config(both)) == [SHA512]


async def test_a_digest_keeps_credentials_from_everyone_else(hosts):
    await admin(hosts, lambda users: users.add("dave", SHA512, "pw", 4096), digest=DIGEST)
    async with raw_client(hosts) as stranger:
        with pytest.raises(NoAuthError):
            await trio.to_thread.run_sync(stranger.get, "/config/users/dave")
        with pytest.raises(NoAuthError):  # not even its ACL
            await trio.to_thread.run_sync(stranger.get_acls, "/config/users/dave")
        with pytest.raises(NoAuthError):  # nor can anyone else add a user
            await trio.to_thread.run_sync(lambda: stranger.create("/config/users/eve", b"{}"))
        assert await trio.to_thread.run_sync(stranger.get_children, "/config/users") == ["dave"]
        assert (await trio.to_thread.run_sync(stranger.get_children, "/config/changes"))  # brokers read these
    async with raw_client(hosts, DIGEST) as owner:
        acls, _ = await trio.to_thread.run_sync(owner.get_acls, "/config/users/dave")
        assert [(a.id.scheme, a.id.id.split(":")[0]) for a in acls] == [("digest", "groupkeeper")]
    with pytest.raises(AdminError, match="refused access to /config/users/dave"):
        await admin(hosts, lambda users: users.add("dave", SHA256, "pw", 4096))
    with pytest.raises(AdminError, match="refused access"):
        await admin(hosts, lambda users: users.add("dave", SHA256, "pw", 4096), digest=("groupkeeper", "guess"))
    async with running_store(hosts, digest=DIGEST) as store:
        assert _accepts(store, "dave", SHA512, "pw")
    async with running_store(hosts) as store:  # without the digest: the user cannot be read
        assert store.credential("dave", SHA512) is None


async def test_a_node_written_before_protection_is_protected_when_changed(hosts):
    await admin(hosts, lambda users: users.add("frank", SHA256, "pw", 4096))
    await admin(hosts, lambda users: users.add("frank", SHA512, "pw", 4096), digest=DIGEST)
    async with raw_client(hosts) as stranger:
        with pytest.raises(NoAuthError):
            await trio.to_thread.run_sync(stranger.get, "/config/users/frank")
    assert await admin(hosts, lambda users: users.list(), digest=DIGEST) == {"frank": [SHA256, SHA512]}


async def test_changes_while_the_session_is_lost_are_read_after_it_comes_back(hosts):
    await admin(hosts, lambda users: users.add("grace", SHA256, "before", 4096))
    zk = ZooKeeperBridge(hosts, session_timeout=4.0)
    states = zk.subscribe_states()
    await zk.start()
    try:
        async with trio.open_nursery() as nursery:
            store = UserStore(zk)
            await nursery.start(store.run)
            assert _accepts(store, "grace", SHA256, "before")
            await trio.to_thread.run_sync(expire, hosts, zk)
            await admin(hosts, lambda users: users.add("grace", SHA256, "during", 4096))
            await admin(hosts, lambda users: users.add("heidi", SHA256, "during", 4096))
            with trio.fail_after(20):
                seen = [await states.receive()]
                while "LOST" not in seen or seen[-1] != "CONNECTED":
                    seen.append(await states.receive())
            await until(lambda: _accepts(store, "grace", SHA256, "during") and
                         _accepts(store, "heidi", SHA256, "during"))
            await admin(hosts, lambda users: users.add("grace", SHA256, "after", 4096))  # watched again
            await until(lambda: _accepts(store, "grace", SHA256, "after"))
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()
