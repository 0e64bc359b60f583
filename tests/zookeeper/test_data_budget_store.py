"""The ZooKeeper data budget in the store, against a real ZooKeeper: a commit past it writes
nothing of what would make the data larger (its other partitions go), moved offsets still go
at the limit, a deleted group frees room, a record past it is not written, a new owner counts
what it loads, and what is counted is at least what ZooKeeper counts."""

from __future__ import annotations

import itertools
import os

import pytest
import trio
from kazoo.client import KazooClient

from coordinator.store import layout
from coordinator.store.budget import Budget
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.errors import OverBudget, RecordOverBudget
from coordinator.store.fence import acquire
from coordinator.store.partition import PartitionStore
from coordinator.store.writer import OffsetWriter
from coordinator.store.zkserver import data_bytes

MiB = 1 << 20
_partitions = itertools.count(300)  # fresh group-partitions on the session's ZooKeeper


async def _store(zk: ZooKeeperBridge, partition: int, nursery, budget: Budget) -> PartitionStore:
    writer = OffsetWriter(zk)
    writer.budget = budget
    await nursery.start(writer.run)
    store = PartitionStore(zk, writer, (await acquire(zk, partition, 1))[0])
    await store.load()
    await nursery.start(store.run_writer)
    return store


def _entries(topic: str, partitions, metadata: str = "", offset: int = 7) -> dict:
    return {(topic, p): (offset, -1, metadata, 1700000000000) for p in partitions}


async def test_past_the_budget_nothing_that_would_grow_the_data_is_written(zookeeper):
    partition = next(_partitions)
    zk = ZooKeeperBridge(zookeeper.connect_string, session_timeout=4.0)
    await zk.start()
    kazoo = KazooClient(hosts=zookeeper.connect_string)
    await trio.to_thread.run_sync(kazoo.start, 10)
    budget = Budget(2 * MiB, 2 * MiB, lambda: 1)
    try:
        async with trio.open_nursery() as nursery:
            store = await _store(zk, partition, nursery, budget)
            stored = []
            for n in itertools.count():  # groups of 1,000 partitions x 100 characters, until refused
                try:
                    await store.commit_offsets(f"g{n}", _entries("t", range(1000), "m" * 100), "10.0.0.9")
                except OverBudget as exc:
                    assert "data budget" in str(exc)
                    break
                stored.append(f"g{n}")
            assert 8 <= len(stored) <= 14 and budget.used <= 0.9 * 2 * MiB
            refused = f"g{len(stored)}"
            assert refused not in store.durable and not kazoo.exists(layout.group_path(partition, refused))

            # at the limit: offsets move on, metadata shortens; a new partition beside them does not go
            await store.commit_offsets("g0", _entries("t", range(1000), "m" * 100, offset=10**12))
            with pytest.raises(OverBudget):
                await store.commit_offsets("g0", {**_entries("t", range(10), "", offset=8),
                                                  **_entries("t", range(5000, 6000), "n" * 100)})
            assert store.durable["g0"]["t"][0][0] == 8 and 5000 not in store.durable["g0"]["t"]
            assert not kazoo.exists(layout.shard_path(partition, "g0", "t", 5000 // layout.SHARD_PARTITIONS))

            await store.delete_group("g1")  # frees room
            await store.commit_offsets(refused, _entries("t", range(1000), "m" * 100), "10.0.0.9")
            assert store.durable[refused]["t"][999] == (7, -1, "m" * 100, 1700000000000)

            # a group record that would go past it is not written; one that fits is
            big = {"members": [{"id": os.urandom(64).hex()} for _ in range(8000)]}
            with pytest.raises(RecordOverBudget):
                await store.write_group("large", big)
            assert not kazoo.exists(layout.group_path(partition, "large"))
            await store.write_group("small", {"members": [{"id": "m"}]})
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()
        await trio.to_thread.run_sync(kazoo.stop)


async def test_what_is_counted_is_at_least_what_zookeeper_holds_and_a_new_owner_counts_it_again(zookeeper):
    partition = next(_partitions)
    zk = ZooKeeperBridge(zookeeper.connect_string, session_timeout=4.0)
    await zk.start()
    try:
        before = data_bytes(zookeeper.connect_string)
        budget = Budget(64 * MiB, None, lambda: 1)
        async with trio.open_nursery() as nursery:
            store = await _store(zk, partition, nursery, budget)
            await store.write_group("g", {"members": [{"id": f"m{i}"} for i in range(100)]})
            await store.commit_offsets("g", _entries("t", range(2000), "x" * 100))
            await store.commit_offsets("g", _entries("u", range(3)))
            for n in range(50):  # many small groups: ZooKeeper's overhead per znode dominates
                await store.commit_offsets(f"small-{n}", _entries(f"topic-{n}", [0]))
            held = store.ledger.held
            nursery.cancel_scope.cancel()
        after = data_bytes(zookeeper.connect_string)
        # ZooKeeper's figure (paths and data) grew by less than what the budget counts (its heap)
        assert before is not None and after is not None and 0 < after - before < held
        assert budget.used == 0  # the store stopped: its share and its data left the instance's count

        again = Budget(64 * MiB, None, lambda: 1)
        async with trio.open_nursery() as nursery:
            writer = OffsetWriter(zk)
            writer.budget = again
            await nursery.start(writer.run)
            loaded = PartitionStore(zk, writer, store.fence)  # the same owner, as after a restart
            await loaded.load()
            await nursery.start(loaded.run_writer)
            assert loaded.ledger.held == held and again.used == held and again.clients == {}
            await loaded.delete_group("g")
            assert "g" not in loaded.ledger.groups and again.used == sum(loaded.ledger.groups.values()) < held / 4
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()
