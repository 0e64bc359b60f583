"""A consumer group's per-member records in a real ZooKeeper (issue 30): a member's step is
one multi() of that member's record whatever the group's size; the group's record and its
members' records read back by a new owner; writes too large for one multi() cut in turn;
what a write of unknown outcome left read back; a classic record or a deletion takes the
member records with it."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from kazoo.client import KazooClient

from coordinator import metrics
from coordinator.groups.snapshot import assemble_consumer
from coordinator.store import layout
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.fence import acquire
from coordinator.store.partition import PartitionStore
from coordinator.store.writer import OffsetWriter

_partitions = itertools.count(300)


def multi_count() -> float:
    return metrics.REGISTRY.get_sample_value("groupkeeper_zookeeper_request_duration_seconds_count", {"op": "multi"})


def written() -> float:
    return metrics.REGISTRY.get_sample_value("groupkeeper_zookeeper_written_bytes_total")


def header(members: list[str], epoch: int = 1) -> dict:
    return {"version": 2, "type": "consumer", "group_epoch": epoch, "assignment_epoch": epoch, "assignor": "uniform",
            "counted": {"t": 6}, "members": members, "targets": {m: {"t": [0]} for m in members}}


def member(member_id: str, epoch: int = 1, pad: int = 0) -> dict:
    return {"id": member_id, "epoch": epoch, "client_id": "c" * pad}


async def owner(zk: ZooKeeperBridge, partition: int, nursery) -> PartitionStore:
    writer = OffsetWriter(zk)
    await nursery.start(writer.run)
    store = PartitionStore(zk, writer, (await acquire(zk, partition, 1))[0])
    await store.load()
    await nursery.start(store.run_writer)
    return store


async def reloaded(store: PartitionStore):
    loaded = await PartitionStore(store.zk, store.writer, store.fence).load()
    return loaded


@asynccontextmanager
async def owning(zookeeper) -> AsyncIterator[tuple[int, PartitionStore, KazooClient]]:
    """A fresh group-partition, a store owning it (its writer running), and a plain kazoo
    client to look at (and tamper with) ZooKeeper beside it."""
    zk = ZooKeeperBridge(zookeeper.connect_string, session_timeout=4.0)
    await zk.start()
    client = KazooClient(hosts=zookeeper.connect_string)
    await trio.to_thread.run_sync(client.start, 10)
    partition = next(_partitions)
    try:
        async with trio.open_nursery() as nursery:
            yield partition, await owner(zk, partition, nursery), client
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(client.stop)
        await zk.stop()


async def test_a_members_step_is_one_small_multi_whatever_the_group_size_and_a_new_owner_reads_it_all(zookeeper):
    zk = ZooKeeperBridge(zookeeper.connect_string, session_timeout=4.0)
    await zk.start()
    try:
        async with trio.open_nursery() as nursery:
            steps = {}
            for size in (3, 300):
                partition = next(_partitions)
                store = await owner(zk, partition, nursery)
                ids = [f"member-{i:04}" for i in range(size)]
                before = multi_count()
                await store.write_group("g", header(ids), {m: member(m) for m in ids})
                assert multi_count() - before == 1  # the group's record and every member's: one multi()
                count, sent = multi_count(), written()
                await store.write_group("g", None, {"member-0001": member("member-0001", epoch=2)})
                steps[size] = (multi_count() - count, written() - sent)
                loaded = await reloaded(store)
                assert set(loaded.members["g"]) == set(ids) and loaded.members["g"]["member-0001"]["epoch"] == 2
                data = assemble_consumer(loaded.groups["g"], loaded.members["g"])
                assert [m["id"] for m in data["members"]] == ids and "incomplete" not in data
                # a member leaves and one joins, with the group's record: one multi()
                count = multi_count()
                await store.write_group("g", header(ids[1:] + ["new"], 2), {ids[0]: None, "new": member("new", 2)})
                assert multi_count() - count == 1
                loaded = await reloaded(store)
                assert set(loaded.members["g"]) == set(ids[1:] + ["new"]) and loaded.groups["g"]["group_epoch"] == 2
            assert steps[3] == steps[300] and steps[3][0] == 1, steps  # one multi(), the same bytes: one member's
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def test_records_too_large_for_one_multi_are_written_in_turn_and_deleted_with_the_group(zookeeper):
    async with owning(zookeeper) as (partition, store, client):
        ids = [f"m{i}" for i in range(400)]
        big = {m: member(m, pad=2000) for m in ids}  # 800 KB of member records: several multis
        count = multi_count()
        await store.write_group("g", header(ids), big)
        assert multi_count() - count >= 4
        loaded = await reloaded(store)
        assert loaded.members["g"] == big and loaded.groups["g"] == header(ids)
        held = store.ledger.groups["g"]
        assert held > 800_000  # what they hold counts against the data budget

        # a classic record takes its place (the group went back to the classic protocol)
        classic = {"generation": 5, "protocol": "range", "members": []}
        await store.write_group("g", classic)
        members_path = layout.members_path(partition, "g")
        assert await trio.to_thread.run_sync(client.get_children, members_path) == []
        assert store.ledger.groups["g"] < 2_000
        loaded = await reloaded(store)
        assert loaded.groups["g"] == classic and "g" not in loaded.members

        await store.write_group("g", header(ids[:2]), {m: big[m] for m in ids[:2]})
        await store.delete_group("g")
        assert not await trio.to_thread.run_sync(client.exists, layout.group_path(partition, "g"))
        assert "g" not in store.ledger.groups


async def test_after_a_write_of_unknown_outcome_the_member_records_are_read_back_first(zookeeper):
    async with owning(zookeeper) as (partition, store, client):
        await store.write_group("g", header(["a", "b"]), {"a": member("a"), "b": member("b")})
        # as writes that did not answer might leave them: the records gone (their parent left
        # empty), then a record there that the store never saw confirmed
        for name in ("a", "b"):
            await trio.to_thread.run_sync(client.delete, layout.member_path(partition, "g", name))
        store._members_unsure.add("g")
        await store.write_group("g", header(["a"], 2), {"a": member("a", 2), "b": None})
        assert {m: r["epoch"] for m, r in (await reloaded(store)).members["g"].items()} == {"a": 2}
        await trio.to_thread.run_sync(client.create, layout.member_path(partition, "g", "c"),
                                      layout.encode(member("c")))
        store._members_unsure.add("g")
        await store.write_group("g", header(["a", "c"], 3), {"a": member("a", 3), "c": member("c", 3)})
        loaded = await reloaded(store)
        assert {m: r["epoch"] for m, r in loaded.members["g"].items()} == {"a": 3, "c": 3}
        assert store._members["g"] == {m: len(layout.encode(r)) for m, r in loaded.members["g"].items()}
