"""Pending transactional offsets (coordinator/store/pending.py) against a real ZooKeeper:
written under the group-partition's fence, read back by a new owner, applied on commit only
where newer than a plain commit, dropped on abort, fenced off once another owner took over."""

from __future__ import annotations

import itertools

import pytest
import trio

from coordinator.store.errors import NotOwner
from coordinator.store.fence import acquire
from coordinator.store.pending import PendingOffsets, TxnKey, node_name, parse_node
from tests.zookeeper.test_zk_store import _bridge, _owner

_partitions = itertools.count(400)
TX = TxnKey("tx-1", 7, 3)


class Clock:
    def __init__(self, ms: int = 1_000_000):
        self.ms = ms

    def __call__(self) -> int:
        self.ms += 1
        return self.ms


async def _loaded(zk, partition: int, nursery, *args, **owning) -> tuple:
    """The owner of `partition` (as `_owner`, with `owning`) and its pending offsets, loaded
    (`args`: PendingOffsets' clock and `ended`)."""
    store = await _owner(zk, partition, nursery, **owning)
    pending = PendingOffsets(zk, store.fence, store, *args)
    await pending.load()
    return store, pending


def test_node_names_read_back_whatever_the_names():
    for group, txid in [("g", "t"), ("a@b/c.", "x@y"), ("", ".."), ("ü", "%40")]:
        key = TxnKey(txid, 12, 4)
        assert parse_node(node_name(group, key)) == (group, key)
    assert parse_node("not-one") is None and parse_node("a@b@c@d") is None


async def test_pending_offsets_survive_a_new_owner_and_apply_on_commit_where_newer(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    clock = Clock()
    try:
        async with trio.open_nursery() as nursery:
            store, pending = await _loaded(zk, partition, nursery, clock)
            await pending.add("g", TX, {("t", 0): (10, 1, "a"), ("t", 1): (20, 1, None)})
            await pending.add("g", TX, {("t", 1): (25, 1, None)})  # the same transaction again: merged
            await pending.add("h", TX, {("t", 0): (5, -1, None)})
            # a plain commit of t-0 after the transaction's: it wins there (Kafka: the later write)
            await store.commit_offsets("g", {("t", 0): (99, 1, "plain", clock())})
            assert pending.partitions("g") == {("t", 0), ("t", 1)}
            nursery.cancel_scope.cancel()
        # a new owner (the same instance again, a new epoch) loads them
        async with trio.open_nursery() as nursery:
            store, pending = await _loaded(zk, partition, nursery, clock, acquiring=_retake)
            assert set(pending.by_group) == {"g", "h"}
            assert {tp: e[:3] for tp, e in pending.of_group("g")[TX].offsets.items()} == \
                {("t", 0): (10, 1, "a"), ("t", 1): (25, 1, None)}
            assert sorted(await pending.resolve(TX, committed=True)) == ["g", "h"]
            assert store.durable["g"]["t"][0][:3] == (99, 1, "plain")  # the plain commit was later
            assert store.durable["g"]["t"][1][:3] == (25, 1, None)
            assert store.durable["h"]["t"][0][:3] == (5, -1, None)
            assert not pending.by_group
            nursery.cancel_scope.cancel()
        async with trio.open_nursery() as nursery:  # nothing left behind
            store, again = await _loaded(zk, partition, nursery, clock, acquiring=_retake)
            assert not again.by_group
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def test_aborted_offsets_are_dropped_and_a_later_epoch_fences_an_earlier(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store, pending = await _loaded(zk, partition, nursery)
            later = TxnKey(TX.transactional_id, TX.producer_id, TX.producer_epoch + 1)
            await pending.add("g", later, {("t", 0): (10, -1, None)})
            assert pending.fenced_by("g", TX) == later and pending.fenced_by("g", later) is None
            assert await pending.resolve(later, committed=False) == ["g"]
            assert "g" not in store.durable and not pending.by_group
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def test_a_former_owner_writes_no_pending_offsets(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    other = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store, pending = await _loaded(zk, partition, nursery)
            await zk.stop()  # its session ends: another instance takes the group-partition over
            await acquire(other, partition, 2)
            zk2 = await _bridge(zookeeper.connect_string)
            stale = PendingOffsets(zk2, store.fence, store)
            with pytest.raises(NotOwner):
                await stale.add("g", TX, {("t", 0): (1, -1, None)})
            await zk2.stop()
            nursery.cancel_scope.cancel()
    finally:
        await other.stop()


async def _retake(zk, partition, instance):
    from coordinator.cluster.handover import take
    return await take(zk, partition, instance)


async def test_the_transactions_command_lists_and_describes_what_is_pending(zookeeper):
    import json

    from click.testing import CliRunner

    from coordinator.store import layout
    from tests.support.in_process import make_chroot
    from tools.cli import main

    connect = zookeeper.connect_string + make_chroot(zookeeper.connect_string, "txcli")
    zk = await _bridge(connect)
    try:
        await zk.create(layout.config_path(), layout.encode({"group_partitions": 4}), makepath=True)
        async with trio.open_nursery() as nursery:
            _, pending = await _loaded(zk, 2, nursery)
            await pending.add("copier", TX, {("in", 0): (41, 2, None), ("in", 1): (17, 2, "m")},
                              marker_from=lambda: _const(8))
            nursery.cancel_scope.cancel()

        def run(*args: str):
            return await_cli(lambda: CliRunner().invoke(main, [*args, "--zookeeper", connect]))

        async def await_cli(call):
            return await trio.to_thread.run_sync(call)

        listed = await run("transactions", "list", "--json")
        assert listed.exit_code == 0, listed.output
        [row] = json.loads(listed.output)
        assert (row["group"], row["transactional_id"], row["producer_id"], row["producer_epoch"], row["recorded"],
                row["markers_from"]) == ("copier", "tx-1", 7, 3, "-", 8)
        assert [(o["topic"], o["partition"], o["offset"]) for o in row["offsets"]] == [("in", 0, 41), ("in", 1, 17)]
        described = await run("transactions", "describe", "--group", "copier")
        assert described.exit_code == 0 and "tx-1" in described.output and "41" in described.output
        assert "No transactional offsets pending." in (await run("transactions", "describe", "--group", "x")).output
    finally:
        await zk.stop()


async def test_where_the_markers_start_is_kept_from_the_first_offsets_and_read_by_a_new_owner(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store, pending = await _loaded(zk, partition, nursery, Clock())
            asked = []

            def at(offset):
                async def log_end():
                    asked.append(offset)
                    return offset
                return log_end
            await pending.add("g", TX, {("t", 0): (10, -1, None)}, marker_from=at(42))
            await pending.add("g", TX, {("t", 1): (11, -1, None)}, marker_from=at(99))  # the same transaction: 42 stays
            assert asked == [42]  # asked for the first offsets only
            await pending.add("h", TX, {("t", 0): (1, -1, None)})  # not known
            nursery.cancel_scope.cancel()
        async with trio.open_nursery() as nursery:
            store, pending = await _loaded(zk, partition, nursery, Clock(), acquiring=_retake)
            g, h = pending.of_group("g")[TX], pending.of_group("h")[TX]
            assert (g.marker_from, g.scan_from, h.marker_from, h.scan_from) == (42, 42, -1, -1)
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


@pytest.mark.parametrize("first_committed", [True, False], ids=["committed-then-next", "aborted-then-next"])
async def test_a_transactions_offsets_never_share_an_earlier_ones_outcome(zookeeper, first_committed):
    """Transaction version 1: every transaction of a producer has the same key. The end of
    T1 was recorded (its client answered, T2 begun) but not yet applied here when T2's
    offsets come: `add` settles T1 first, T2's offsets pend alone, and the resolution decided
    for T1's offsets (their zxid) leaves T2's alone when it runs late."""
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    ends: dict[int, bool] = {}  # zxid of the offsets -> the recorded end after them

    async def ended(key, zxid):
        return ends.get(zxid)
    try:
        async with trio.open_nursery() as nursery:
            store, pending = await _loaded(zk, partition, nursery, Clock(), ended)
            await pending.add("g", TX, {("t", 0): (10, -1, None)})
            t1 = pending.of_group("g")[TX].zxid
            ends[t1] = first_committed  # recorded by a gateway instance; the owner has not acted yet
            await pending.add("g", TX, {("t", 1): (20, -1, None)}, marker_from=lambda: _const(77))  # T2's
            t2 = pending.of_group("g")[TX]
            assert t2.zxid != t1 and set(t2.offsets) == {("t", 1)}  # T1's settled, not merged
            assert t2.marker_from == 77  # T2's own start, asked once T1's were gone
            assert (store.durable.get("g", {}).get("t", {}).get(0, (None,))[0] == 10) == first_committed
            assert await pending.resolve(TX, first_committed, {"g": t1}) == []  # T1's decision, late: nothing
            assert pending.of_group("g")[TX].offsets == t2.offsets
            assert await pending.resolve(TX, not first_committed, {"g": t2.zxid}) == ["g"]  # T2's own end
            durable = {p: e[0] for p, e in store.durable.get("g", {}).get("t", {}).items()}
            assert durable == {**({0: 10} if first_committed else {}), **({} if first_committed else {1: 20})}
            assert pending.of_group("g") == {}
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def _const(value: int) -> int:
    return value


async def test_offsets_written_are_known_even_when_their_client_is_gone_mid_write(zookeeper):
    """A TxnOffsetCommit's task is cancelled when its client's connection closes (a producer
    killed): cancelled between the znode's write and the owner's record of it, the owner must
    still know them (else nothing here resolves or reports a znode that is there)."""
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store, pending = await _loaded(zk, partition, nursery, Clock())
            written = trio.Event()
            real_exists = zk.exists

            async def exists_after_the_write(path, watch=None):  # the zxid's read, after the create
                written.set()
                await trio.sleep(0.2)
                return await real_exists(path, watch)
            zk.exists = exists_after_the_write
            async with trio.open_nursery() as client:
                client.start_soon(pending.add, "g", TX, {("t", 0): (10, -1, None)})
                await written.wait()
                client.cancel_scope.cancel()  # the client's connection closed
            zk.exists = real_exists
            assert set(pending.of_group("g")) == {TX} and pending.of_group("g")[TX].zxid > 0
            assert store.ledger.pending  # counted in the data budget too
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()
