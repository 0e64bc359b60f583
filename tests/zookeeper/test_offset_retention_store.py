"""Offset retention against a real ZooKeeper: expired offsets leave ZooKeeper in bounded
batches written in order with the commits (never holding them up for long), a partition
committed again meanwhile keeps its offset, emptied topics and groups lose their znodes,
only the owner removes anything, and a takeover in the middle of a check loses nothing that
should stay. The owner's check (`Retention`) over a real store and group runtime, on a wall
clock the test sets."""

from __future__ import annotations

import itertools

import pytest
import trio
from kazoo.client import KazooClient

from coordinator import metrics
from coordinator.assignors import BUILT_IN
from coordinator.groups.group import GroupConfig
from coordinator.groups.manager import GroupSet
from coordinator.groups.retention import Retention
from coordinator.store import layout
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.errors import NotOwner
from coordinator.store.fence import acquire
from coordinator.store.partition import EXPIRE_BATCH_BYTES, PartitionStore
from coordinator.store.writer import OffsetWriter
from protocol import ErrorCode as E
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription

from tests.support.in_process import until

_partitions = itertools.count(700)  # a fresh group-partition per test on the shared server
RETENTION = 60_000


async def _bridge(connect: str) -> ZooKeeperBridge:
    zk = ZooKeeperBridge(connect, session_timeout=4.0)
    await zk.start()
    return zk


async def _owner(zk: ZooKeeperBridge, partition: int, nursery, instance: int = 1) -> PartitionStore:
    writer = OffsetWriter(zk)
    await nursery.start(writer.run)
    store = PartitionStore(zk, writer, (await acquire(zk, partition, instance))[0])
    await store.load()
    await nursery.start(store.run_writer)
    return store


def _multis(store: PartitionStore) -> float:
    """multi() calls made so far but the writer's (deletes, records): all that the bridge has
    timed, less those the writer sent."""
    return (metrics.REGISTRY.get_sample_value("groupkeeper_zookeeper_request_duration_seconds_count",
                                              {"op": "multi"}) or 0.0) - store.writer.multis


class Events:
    def __init__(self):
        self.emitted: list[tuple[str, str | None, dict]] = []

    def emit(self, type_: str, group: str | None, **fields) -> None:
        self.emitted.append((type_, group, fields))


@pytest.fixture
async def client(zookeeper):
    """A plain kazoo client, to look at ZooKeeper as an operator would."""
    kazoo = KazooClient(hosts=zookeeper.connect_string)
    await trio.to_thread.run_sync(kazoo.start, 10)
    yield kazoo
    await trio.to_thread.run_sync(kazoo.stop)


async def _exists(client: KazooClient, path: str) -> bool:
    return await trio.to_thread.run_sync(client.exists, path) is not None


async def _shard(client: KazooClient, path: str) -> dict:
    return layout.decode_shard((await trio.to_thread.run_sync(client.get, path))[0])


async def test_expired_offsets_leave_in_bounded_batches_while_commits_go_on(zookeeper, client):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            # 100 shards of about 3.4 KB each: several batches of EXPIRE_BATCH_BYTES
            old = {("t", p): (p, -1, "m" * 400, 1_000) for p in range(800)}
            await store.commit_offsets("gone", old)
            await store.commit_offsets("gone", {("u", 0): (1, -1, "", 1_000)})
            sizes = [len((await trio.to_thread.run_sync(client.get, layout.shard_path(partition, "gone", "t", s)))[0])
                     for s in range(100)]
            batches = -(-sum(sizes) // EXPIRE_BATCH_BYTES)
            assert batches >= 5

            committed, expiring, stopped = [], True, trio.Event()

            async def committing() -> None:  # another group commits all along
                n = 0
                while expiring:
                    n += 1
                    await store.commit_offsets("busy", {("t", 0): (n, -1, "", 2_000)})
                    committed.append(n)
                stopped.set()
            nursery.start_soon(committing)
            await until(lambda: committed)
            multis, before = store.writer.multis, len(committed)
            removed = await store.expire_offsets("gone", {"t": {p: old[("t", p)] for p in range(800)}})
            during, expiring = len(committed) - before, False
            assert removed == 800
            assert store.writer.multis - multis >= batches  # one multi() a batch at least, never one for all
            assert during >= 2  # commits were written between the batches, not after them all
            assert store.durable["gone"] == {"u": {0: (1, -1, "", 1_000)}}
            # the shards are rewritten without them, and stay until collected
            assert await _shard(client, layout.shard_path(partition, "gone", "t", 0)) == {}
            assert await store.collect("gone") == 1
            assert not await _exists(client, layout.topic_offsets_path(partition, "gone", "t"))
            assert await _shard(client, layout.shard_path(partition, "gone", "u", 0)) == {0: (1, -1, "", 1_000)}
            await stopped.wait()
            nursery.cancel_scope.cancel()
        loaded = await PartitionStore(zk, store.writer, store.fence).load()
        assert loaded.offsets["gone"] == {"u": {0: (1, -1, "", 1_000)}}
        assert loaded.offsets["busy"]["t"][0][0] == committed[-1]
    finally:
        await zk.stop()


async def test_a_partition_committed_again_after_it_was_found_expired_keeps_its_new_offset(zookeeper, client):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            first = {("t", 0): (1, -1, "", 1_000), ("t", 1): (2, -1, "", 1_000), ("t", 2): (3, -1, "", 1_000)}
            await store.commit_offsets("g", first)
            found = {"t": {p: first[("t", p)] for p in range(3)}}  # what the check found expired
            await store.commit_offsets("g", {("t", 0): (10, -1, "", 5_000)})  # committed since: stays
            # and one committed while the removal is queued, in the same batch (queued first)
            done = trio.Event()
            store.submit("g", {("t", 1): (20, -1, "", 5_001)}, lambda error: done.set())
            assert await store.expire_offsets("g", found) == 1
            await done.wait()
            assert store.durable["g"] == {"t": {0: (10, -1, "", 5_000), 1: (20, -1, "", 5_001)}}
            assert await _shard(client, layout.shard_path(partition, "g", "t", 0)) == store.durable["g"]["t"]
            # a removal and a commit of the same partition made while it is queued: whichever is
            # written first, the commit stays
            done = trio.Event()
            async with trio.open_nursery() as both:
                both.start_soon(store.expire_offsets, "g", {"t": {0: (10, -1, "", 5_000)}})
                await trio.sleep(0)
                store.submit("g", {("t", 0): (30, -1, "", 6_000)}, lambda error: done.set())
            await done.wait()
            assert store.durable["g"]["t"][0] == (30, -1, "", 6_000)
            with trio.fail_after(5):  # all of it committed again: nothing to write, answered at once
                assert await store.expire_offsets("g", found) == 0
            assert await store.collect("g") == 0  # nothing bare: the topic has offsets
            nursery.cancel_scope.cancel()
        loaded = await PartitionStore(zk, store.writer, store.fence).load()
        assert loaded.offsets["g"] == {"t": {0: (30, -1, "", 6_000), 1: (20, -1, "", 5_001)}}
    finally:
        await zk.stop()


async def test_a_group_is_deleted_in_bounded_multis_with_the_commits_held_and_landing_after(zookeeper, client):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            await store.commit_offsets("big", {("t", p): (p, -1, "", 1_000) for p in range(8 * 1200)})
            await store.write_group("big", {"generation": 3, "members": []})
            assert not await store.delete_group("big", still=lambda: False)  # the condition no longer holds
            assert await _exists(client, layout.shard_path(partition, "big", "t", 1199))
            multis, outcome = _multis(store), []
            landed = trio.Event()

            def meanwhile() -> bool:  # asked once the delete holds the commits: this one waits, then lands
                store.submit("big", {("t", 5): (99, -1, "", 2_000)}, lambda error: (outcome.append(error), landed.set()))
                return True
            assert await store.delete_group("big", still=meanwhile)
            await landed.wait()
            assert outcome == [None]
            assert _multis(store) - multis == 2  # 1,203 znodes: more than one multi() may carry
            assert store.durable["big"] == {"t": {5: (99, -1, "", 2_000)}} and "big" not in store.groups
            assert await _shard(client, layout.shard_path(partition, "big", "t", 0)) == {5: (99, -1, "", 2_000)}
            assert not await _exists(client, layout.shard_path(partition, "big", "t", 1))
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def test_only_the_owner_removes_and_a_takeover_in_the_middle_loses_nothing(zookeeper, client):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    other = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            old = await _owner(zk, partition, nursery)
            a, b, kept = (1, -1, "", 1_000), (2, -1, "", 1_000), (3, -1, "", 9_000)
            await old.commit_offsets("g", {("a", 0): a, ("b", 0): b})
            await old.commit_offsets("h", {("k", 0): kept})
            assert await old.expire_offsets("g", {"a": {0: a}}) == 1  # the check got this far
            # ... when another instance took the partition over (its owner znode gone: a session
            # ended; the epoch bumped)
            await trio.to_thread.run_sync(client.delete, layout.owner_path(partition))
            new = await _owner(other, partition, nursery, instance=2)
            with pytest.raises(NotOwner):
                await old.expire_offsets("g", {"b": {0: b}})
            with pytest.raises(NotOwner):
                await old.collect("g")
            with pytest.raises(NotOwner):
                await old.delete_group("h")
            assert await _shard(client, layout.shard_path(partition, "g", "b", 0)) == {0: b}
            assert await _exists(client, layout.topic_offsets_path(partition, "g", "a"))
            assert await _shard(client, layout.shard_path(partition, "h", "k", 0)) == {0: kept}
            # the new owner finds what was left half done, and what must stay
            assert new.durable == {"g": {"a": {}, "b": {0: b}}, "h": {"k": {0: kept}}}
            assert new.bare_groups() == {"g"} and new.has_offsets("g")
            groups = GroupSet(GroupConfig(), dict(BUILT_IN), lambda topic: 1, new.write_group)
            events = Events()
            check = Retention(new, groups, RETENTION, 3600, lambda: 1_000 + RETENTION - 1, events)
            assert await check.check() == (0, 0)  # nothing expired yet: the bare topic collected
            assert not await _exists(client, layout.topic_offsets_path(partition, "g", "a"))
            check.wall_ms = lambda: 1_000 + RETENTION
            assert await check.check() == (1, 1)
            assert not await _exists(client, layout.group_path(partition, "g"))
            assert await _shard(client, layout.shard_path(partition, "h", "k", 0)) == {0: kept}
            assert events.emitted == [("offsets_expired", "g", {"partitions": 1, "group_deleted": True})]
            nursery.cancel_scope.cancel()
    finally:
        await other.stop()
        await zk.stop()


SUB = encode_subscription(ConsumerProtocolSubscription(topics=["t"], owned_partitions=[]), 0)


async def test_the_owners_check_removes_what_expired_and_deletes_groups_left_empty(zookeeper, client):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    wall = [1_000_000]
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            groups = GroupSet(GroupConfig(initial_rebalance_delay=0.0, min_session_timeout=1.0), dict(BUILT_IN),
                              lambda topic: 2, store.write_group, wall_ms=lambda: wall[0])
            await nursery.start(groups.run)
            joined = await groups.join("active", member_id="", instance_id=None, client_id="c", client_host="h",
                                       session_timeout=60.0, rebalance_timeout=30.0, protocol_type="consumer",
                                       protocols=[("range", SUB)], require_known_member_id=False)
            synced = await groups.sync("active", joined.member_id, generation=joined.generation, instance_id=None,
                                       protocol_type=None, protocol_name=None, assignments={})
            assert synced.error == E.NONE
            left = await groups.join("left", member_id="", instance_id=None, client_id="c", client_host="h",
                                     session_timeout=60.0, rebalance_timeout=30.0, protocol_type="consumer",
                                     protocols=[("range", SUB)], require_known_member_id=False)
            old = (1, -1, "", wall[0] - RETENTION)  # committed a retention ago
            await store.commit_offsets("active", {("t", 0): old, ("t", 1): old, ("old", 0): old})
            await store.commit_offsets("simple", {("t", 0): old, ("t", 1): (2, -1, "", wall[0])})
            await store.commit_offsets("left", {("t", 0): old})
            groups.leave("left", [(left.member_id, None)])
            await until(lambda: store.groups.get("left", {}).get("members") == [])  # the empty generation stored
            assert store.groups["left"]["empty_since_ms"] == wall[0]
            expired_before = metrics.OFFSETS_EXPIRED._value.get()
            events = Events()
            check = Retention(store, groups, RETENTION, 3600, lambda: wall[0], events)

            assert await check.check() == (2, 0)
            assert store.durable["active"] == {"t": {0: old, 1: old}}  # subscribed: kept
            assert not await _exists(client, layout.topic_offsets_path(partition, "active", "old"))
            assert store.durable["simple"] == {"t": {1: (2, -1, "", wall[0])}}
            assert store.durable["left"] == {"t": {0: old}}  # empty only since now
            assert metrics.OFFSETS_EXPIRED._value.get() - expired_before == 2

            wall[0] += RETENTION
            events.emitted.clear()
            assert await check.check() == (2, 2)
            assert sorted(events.emitted) == [
                ("offsets_expired", "left", {"partitions": 1, "group_deleted": True}),
                ("offsets_expired", "simple", {"partitions": 1, "group_deleted": True})]
            for group in ("left", "simple"):
                assert not await _exists(client, layout.group_path(partition, group))
                assert group not in store.durable and group not in store.groups
            assert groups.group("left") is None  # Dead: a join makes a new group
            assert store.durable["active"] == {"t": {0: old, 1: old}}
            assert await _exists(client, layout.group_path(partition, "active"))
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()
