"""The ZooKeeper store against a real ZooKeeper: fencing, durability, sizes, self-fencing."""

from __future__ import annotations

import gc
import itertools
import signal
import time
from functools import partial

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from coordinator.cluster.handover import take
from coordinator.store import layout
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.errors import CommitTooLarge, NotOwner, StoreError, StoreUnavailable
from coordinator.store.fence import acquire
from coordinator.store.partition import PartitionStore
from coordinator.store.session import SessionGuard
from coordinator.store.writer import OffsetWriter
from coordinator.store.zkserver import ZooKeeperServer
from coordinator.store.zkserver import free_port

from tests.support.in_process import expire

_partitions = itertools.count(100)  # a fresh group-partition per test on the shared server


async def _bridge(connect: str, timeout: float = 4.0) -> ZooKeeperBridge:
    zk = ZooKeeperBridge(connect, session_timeout=timeout)
    await zk.start()
    return zk


async def _owner(zk: ZooKeeperBridge, partition: int, nursery, guard=None, acquiring=acquire) -> PartitionStore:
    """A store owning `partition` (as instance 1), its writer running; `acquiring=take`
    also waits out or removes a previous owner znode, as the coordinator does."""
    writer = OffsetWriter(zk)
    await nursery.start(writer.run)
    store = PartitionStore(zk, writer, (await acquiring(zk, partition, 1))[0], guard)
    await store.load()
    await nursery.start(store.run_writer)
    return store


async def test_group_metadata_and_offsets_read_back_by_a_new_owner(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            meta = {"generation": 3, "protocol": "range", "members": [{"id": "m1"}]}
            await store.write_group("orders/eu.1", meta)
            await store.commit_offsets("orders/eu.1", {("t", 0): (42, 5, "meta", 1000),
                                                       ("t", 9): (7, -1, None, 1001)})
            await store.commit_offsets("standalone", {("u.v", 3): (1, -1, "", 1002)})
            nursery.cancel_scope.cancel()
        loaded = await PartitionStore(zk, store.writer, store.fence).load()
        assert loaded.groups == {"orders/eu.1": meta}
        assert loaded.offsets == {"orders/eu.1": {"t": {0: (42, 5, "meta", 1000), 9: (7, -1, None, 1001)}},
                                  "standalone": {"u.v": {3: (1, -1, "", 1002)}}}
    finally:
        await zk.stop()


async def test_a_group_record_larger_than_a_znode_is_written_in_chunks_and_read_back(zookeeper):
    import base64
    import os

    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    client = KazooClient(hosts=zookeeper.connect_string)
    await trio.to_thread.run_sync(client.start, 10)
    record = layout.record_path(partition, "big")

    def chunks() -> list[str]:
        return sorted(client.get_children(record)) if client.exists(record) else []

    def members(n: int) -> list[dict]:  # incompressible: about 1.3 KB a member once in base64
        return [{"id": f"m{i}", "subscription": base64.b64encode(os.urandom(1000)).decode()} for i in range(n)]

    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            first = {"generation": 1, "members": members(600)}
            await store.write_group("big", first)
            assert len(chunks()) >= 2 and all(name.startswith("1-") for name in chunks())
            nursery.cancel_scope.cancel()
        again = PartitionStore(zk, store.writer, store.fence)
        assert (await again.load()).groups == {"big": first}

        # a sequence cut short (its owner died between chunks) left a chunk no record names
        await trio.to_thread.run_sync(client.create, f"{record}/7-0", b"junk")
        second = {"generation": 2, "members": members(300)}
        await again.write_group("big", second)
        assert len(chunks()) >= 2 and all(name.startswith("8-") for name in chunks())
        assert (await PartitionStore(zk, store.writer, store.fence).load()).groups == {"big": second}

        small = {"generation": 3, "members": [{"id": "m1"}]}
        await again.write_group("big", small)  # fits one znode again: the chunks go
        assert chunks() == []
        third = PartitionStore(zk, store.writer, store.fence)
        assert (await third.load()).groups == {"big": small}

        await third.write_group("big", second)
        await trio.to_thread.run_sync(client.create, f"{record}/99-0", b"junk")
        plain = {"generation": 4, "members": []}  # as written before records were compressed
        await trio.to_thread.run_sync(client.set, layout.group_path(partition, "big"), layout.encode(plain))
        fourth = PartitionStore(zk, store.writer, store.fence)
        assert (await fourth.load()).groups == {"big": plain}
        await fourth.delete_group("big")  # lists the record first
        assert not client.exists(layout.group_path(partition, "big"))
    finally:
        await trio.to_thread.run_sync(client.stop)
        await zk.stop()


async def test_what_fetch_reads_never_goes_back_behind_an_acknowledged_commit(zookeeper):
    """Multis in flight together are confirmed in the order ZooKeeper applied them: a later
    one's answer, taken first by trio's scheduler, must not be overwritten in what OffsetFetch
    reads (`durable`) by the earlier one's older offsets."""
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    behind = []
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)

            acknowledged = []

            def done(worker: int, seq: int, in_flight: trio.Semaphore, error) -> None:
                assert error is None
                acknowledged.append(seq)
                read = store.durable["g"]["t"][worker][0]  # what OffsetFetch reads, when acknowledged
                if read < seq:
                    behind.append((worker, seq, read))
                in_flight.release()

            async def committer(worker: int):  # pipelined, as a client's commits are: 3 in flight
                in_flight = trio.Semaphore(3)
                for seq in range(1, 301):
                    await in_flight.acquire()
                    store.submit("g", {("t", worker): (seq, -1, "", seq)}, partial(done, worker, seq, in_flight))
                    await trio.sleep(0)  # the writer takes what is queued: the next goes in a later multi
                for _ in range(3):
                    await in_flight.acquire()

            async def busy():  # a saturated serving thread: ZooKeeper's answers arrive together
                while True:
                    time.sleep(0.003)
                    await trio.sleep(0)

            async with trio.open_nursery() as workers:
                for worker in range(8):  # one partition each, all in the same shard
                    workers.start_soon(committer, worker)
                nursery.start_soon(busy)
            nursery.cancel_scope.cancel()
        assert len(acknowledged) == 8 * 300
        assert behind == []
    finally:
        await zk.stop()


async def test_a_store_whose_writer_stopped_refuses_commits_instead_of_queueing_them(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            await store.commit_offsets("g", {("t", 0): (1, -1, "", 1)})
            nursery.cancel_scope.cancel()  # the group-partition is dropped: its writer stops
        with trio.fail_after(5), pytest.raises(NotOwner):  # queued, it would wait for ever
            await store.commit_offsets("g", {("t", 0): (2, -1, "", 2)})
    finally:
        await zk.stop()


async def test_a_second_instance_cannot_take_an_owned_partition(zookeeper):
    partition = next(_partitions)
    a, b = await _bridge(zookeeper.connect_string), await _bridge(zookeeper.connect_string)
    try:
        await acquire(a, partition, 1)
        with pytest.raises(NotOwner):
            await acquire(b, partition, 2)
    finally:
        await a.stop()
        await b.stop()


async def test_fencing_a_zombie_owner_writes_nothing(zookeeper):
    partition = next(_partitions)
    a, b = await _bridge(zookeeper.connect_string), await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            old = await _owner(a, partition, nursery)
            a_states = a.subscribe_states()
            await old.write_group("g", {"generation": 1})
            await old.commit_offsets("g", {("t", 0): (10, -1, "", 1)})

            # A's session expires (a long pause, say); B takes the partition over.
            await trio.to_thread.run_sync(expire, zookeeper.connect_string, a)
            with trio.fail_after(20):
                while True:
                    try:
                        new = await _owner(b, partition, nursery)
                        break
                    except NotOwner:  # A's ephemeral owner znode is not gone yet
                        await trio.sleep(0.05)
            assert new.fence.epoch == old.fence.epoch + 1

            # A, reconnected with a new session, still believes it owns the partition.
            with trio.fail_after(20):
                seen = [await a_states.receive()]
                while KazooState.LOST not in seen or seen[-1] != KazooState.CONNECTED:
                    seen.append(await a_states.receive())
            with pytest.raises(NotOwner):
                await old.commit_offsets("g", {("t", 0): (999, -1, "", 2), ("t2", 1): (5, -1, "", 2)})
            with pytest.raises(NotOwner):
                await old.write_group("g", {"generation": 99})
            with pytest.raises(NotOwner):
                await old.write_group("zombie-group", {"generation": 1})
            nursery.cancel_scope.cancel()

        loaded = await PartitionStore(b, new.writer, new.fence).load()
        assert loaded.groups == {"g": {"generation": 1}}
        assert loaded.offsets == {"g": {"t": {0: (10, -1, "", 1)}}}
    finally:
        await a.stop()
        await b.stop()


@pytest.mark.parametrize("fenced_first", [False, True])
async def test_one_fenced_group_partition_fails_alone_in_a_shared_multi(zookeeper, fenced_first):
    """Commits of two group-partitions go in one multi() of the instance's writer; one of them
    has been fenced off meanwhile. The multi fails whole: the fenced one's commit fails
    (NotOwner), the other's (before the failed op: rolled back; after it: a runtime
    inconsistency) is written again on its own and acknowledged, and lands."""
    kept_partition, fenced_partition = next(_partitions), next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    client = KazooClient(hosts=zookeeper.connect_string)
    await trio.to_thread.run_sync(client.start)
    try:
        async with trio.open_nursery() as nursery:
            writer = OffsetWriter(zk)
            await nursery.start(writer.run)
            stores = []
            for partition in (kept_partition, fenced_partition):
                store = PartitionStore(zk, writer, (await acquire(zk, partition, 1))[0])
                await store.load()
                await nursery.start(store.run_writer)
                stores.append(store)
            kept, fenced = stores
            await trio.to_thread.run_sync(client.set, layout.epoch_path(fenced_partition), b"")  # the epoch moves on
            outcomes: dict[str, Exception | None] = {}
            done = trio.Event()

            def finished(name: str, error: Exception | None) -> None:
                outcomes[name] = error
                if len(outcomes) == 2:
                    done.set()
            before = writer.multis
            submits = [lambda: kept.submit("g", {("t", 0): (7, -1, "", 1)}, partial(finished, "kept")),
                       lambda: fenced.submit("h", {("t", 0): (8, -1, "", 1)}, partial(finished, "fenced"))]
            for submit in reversed(submits) if fenced_first else submits:
                submit()  # no checkpoint between: one turn, one multi
            with trio.fail_after(10):
                await done.wait()
            assert isinstance(outcomes["fenced"], NotOwner)
            assert outcomes["kept"] is None
            assert writer.multis - before == 2  # the shared multi, then the kept one's again
            assert kept.durable == {"g": {"t": {0: (7, -1, "", 1)}}}
            nursery.cancel_scope.cancel()
        loaded = await PartitionStore(zk, writer, kept.fence).load()
        assert loaded.offsets == {"g": {"t": {0: (7, -1, "", 1)}}}
        assert await trio.to_thread.run_sync(client.exists, layout.group_path(fenced_partition, "h")) is None
    finally:
        await trio.to_thread.run_sync(client.stop)
        await zk.stop()


async def test_concurrent_commits_are_flushed_together(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            async with trio.open_nursery() as commits:
                for i in range(200):
                    commits.start_soon(store.commit_offsets, f"g{i % 5}",
                                       {("t", p): (i, -1, "", i) for p in range(10)})
            assert store.writer.multis < 20  # 200 requests, a handful of multi() calls
            nursery.cancel_scope.cancel()
        loaded = await PartitionStore(zk, store.writer, store.fence).load()
        assert sum(len(p) for topics in loaded.offsets.values() for p in topics.values()) == 50
    finally:
        await zk.stop()


async def test_large_commits_stay_under_the_size_limit(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    metadata = "€" * 4096  # Kafka's longest metadata, 3 bytes a character in UTF-8
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            store.max_metadata_bytes = 300 * 4096
            entries = {("big", p): (p, -1, metadata, 1) for p in range(300)}
            await store.commit_offsets("g", entries)  # about 3.7 MB of shards in all
            assert store.writer.multis > 1
            nursery.cancel_scope.cancel()
        topic = layout.topic_offsets_path(partition, "g", "big")
        shards = await zk.get_children(topic)
        assert len(shards) == -(-300 // layout.SHARD_PARTITIONS)
        for shard in shards:
            data, _ = await zk.get(f"{topic}/{shard}")
            assert len(data) < layout.MAX_REQUEST_BYTES
        loaded = await PartitionStore(zk, store.writer, store.fence).load()
        assert loaded.offsets["g"]["big"] == {p: (p, -1, metadata, 1) for p in range(300)}
    finally:
        await zk.stop()


async def test_metadata_of_any_characters_fits_and_a_group_is_bounded_in_all(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    hostile = "\x01" * 4096  # 6 bytes a character once escaped as JSON: the largest shard there is
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            store.max_metadata_bytes = 70 * 4096
            await store.commit_offsets("g", {("t", p): (2, -1, hostile, 2) for p in range(64)})
            with pytest.raises(CommitTooLarge):  # 64 + 8 partitions' worth: over 70
                await store.commit_offsets("g", {("u", p): (3, -1, hostile, 3) for p in range(8)})
            await store.commit_offsets("g", {("t", p): (4, -1, None, 4) for p in range(8)})  # frees 8
            await store.commit_offsets("g", {("u", p): (3, -1, hostile, 3) for p in range(8)})
            nursery.cancel_scope.cancel()
        loaded = await PartitionStore(zk, store.writer, store.fence).load()
        assert loaded.offsets["g"]["t"] == {p: (2, -1, hostile, 2) if p >= 8 else (4, -1, None, 4) for p in range(64)}
        assert loaded.offsets["g"]["u"] == {p: (3, -1, hostile, 3) for p in range(8)}
    finally:
        await zk.stop()


async def test_no_acknowledged_commit_is_lost_when_zookeeper_crashes(tmp_path):
    """ZooKeeper killed and started again under committers. The restart usually fits in the
    session, and writes resume on the same ownership. When it does not (kazoo's first
    attempt to reconnect can hang for the whole session timeout if it meets ZooKeeper still
    starting: seen in clean-clone CI runs), the guard fences after 2/3 of the session and
    the group-partition is taken again once the session is usable, as the coordinator does.
    Either way, every acknowledged commit is read back."""
    server = ZooKeeperServer(tmp_path, free_port(), tick_ms=1000)
    await trio.to_thread.run_sync(server.start)
    zk = await _bridge(server.connect_string, timeout=20.0)
    acked: dict[tuple[str, int], int] = {}
    refused = 0
    try:
        async with trio.open_nursery() as nursery:
            guard = SessionGuard(zk)  # as in production: a dropped connection refuses new writes at once
            await nursery.start(guard.run)
            owners = [await _owner(zk, 0, nursery, guard)]  # the current one last
            retaking = trio.Lock()

            async def take_again(fenced: PartitionStore) -> None:
                async with retaking:
                    if owners[-1] is fenced:  # not yet taken again by another committer
                        await guard.wait_current()
                        owners.append(await _owner(zk, 0, nursery, guard, acquiring=take))

            restarted = trio.Event()
            resumed: set[int] = set()

            async def committer(worker: int):  # until a commit goes through after the restart
                nonlocal refused
                seq = 0
                while worker not in resumed:
                    seq += 1
                    entries = {(f"t{worker}", p): (seq, -1, "", seq) for p in range(5)}
                    store = owners[-1]
                    try:
                        await store.commit_offsets("g", entries)
                    except StoreUnavailable:
                        refused += 1
                        await trio.sleep(0.01)  # a client's retry backoff
                        continue
                    except NotOwner:
                        refused += 1
                        await take_again(store)
                        continue
                    for key in entries:
                        acked[key] = seq
                    if restarted.is_set():
                        resumed.add(worker)

            async with trio.open_nursery() as workers:
                for worker in range(4):
                    workers.start_soon(committer, worker)
                with trio.fail_after(30):
                    while len(acked) < 20 or min(acked.values()) < 50:
                        await trio.sleep(0.01)
                await trio.to_thread.run_sync(server.kill)
                with trio.fail_after(30):  # the crash is seen: commits are refused
                    while not refused:
                        await trio.sleep(0.01)
                before = dict(acked)
                await trio.to_thread.run_sync(server.start)
                restarted.set()
                workers.cancel_scope.deadline = trio.current_time() + 60  # writes resume without a restart of ours
            nursery.cancel_scope.cancel()
        assert resumed == {0, 1, 2, 3}, "commits did not resume after ZooKeeper came back"
        assert refused > 0 and all(acked[key] > seq for key, seq in before.items())

        fresh = KazooClient(hosts=server.connect_string)
        await trio.to_thread.run_sync(fresh.start, 10)
        try:
            for (topic, p), seq in acked.items():
                path = layout.shard_path(0, "g", topic, layout.shard_of(p))
                data, _ = await trio.to_thread.run_sync(fresh.get, path)
                assert layout.decode(data)[str(p)][0] >= seq
        finally:
            await trio.to_thread.run_sync(fresh.stop)
    finally:
        await zk.stop()
        await trio.to_thread.run_sync(server.stop)


async def test_a_suspended_session_stops_writes_then_fences(tmp_path):
    server = ZooKeeperServer(tmp_path, free_port(), tick_ms=200)
    await trio.to_thread.run_sync(server.start)
    zk = await _bridge(server.connect_string, timeout=3.0)
    fenced = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            guard = SessionGuard(zk, on_fenced=fenced.set)
            await nursery.start(guard.run)
            store = await _owner(zk, 0, nursery, guard)
            await store.commit_offsets("g", {("t", 0): (1, -1, "", 1)})
            await trio.to_thread.run_sync(server.kill)
            with trio.fail_after(10):
                while guard.writable:
                    await trio.sleep(0.01)
            with pytest.raises(StoreUnavailable):
                await store.commit_offsets("g", {("t", 0): (2, -1, "", 2)})
            with trio.fail_after(10):  # fenced before kazoo could ever report LOST
                await fenced.wait()
            with pytest.raises(NotOwner):
                await store.commit_offsets("g", {("t", 0): (3, -1, "", 3)})
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()
        await trio.to_thread.run_sync(server.stop)


async def test_a_commit_zookeeper_refuses_fails_alone_and_its_batch_neighbours_are_stored(zookeeper):
    """ZooKeeper refuses one group's write (its shard znode was created behind the owner's
    back: NodeExists); commits of other groups flushed in the same multi() are written again
    without it and acknowledged, and nothing of the refused one lands, even in a shard a
    later write rebuilds."""
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    outcomes: dict[str, str] = {}
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            await zk.create(layout.shard_path(partition, "poison", "t", 0), b"{}", makepath=True)

            async def commit(group: str, offset: int) -> None:
                try:
                    await store.commit_offsets(group, {("t", 0): (offset, -1, "", 1)})
                    outcomes[group] = "ok"
                except StoreError as exc:
                    outcomes[group] = type(exc).__name__

            async with trio.open_nursery() as commits:  # all queued together: one batch
                for i in range(20):
                    commits.start_soon(commit, f"g{i}", i)
                commits.start_soon(commit, "poison", 99)
            assert outcomes.pop("poison") == "StoreError"
            assert set(outcomes.values()) == {"ok"} and len(outcomes) == 20
            assert store.writer.multis >= 20  # the refused batch was written again, one commit each
            await store.commit_offsets("g0", {("t", 1): (5, -1, "", 2)})  # rebuilds g0's shard
            nursery.cancel_scope.cancel()
        loaded = await PartitionStore(zk, store.writer, store.fence).load()
        assert loaded.offsets.pop("poison") == {"t": {}}  # as it was created behind the owner's back
        assert {g: o["t"][0][0] for g, o in loaded.offsets.items()} == {f"g{i}": i for i in range(20)}
        assert loaded.offsets["g0"]["t"][1][0] == 5
    finally:
        await zk.stop()


async def test_empty_group_ids_and_topic_names_are_stored_as_kafka_accepts_them(zookeeper):
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            await store.commit_offsets("", {("", 0): (7, -1, "", 1), ("t", 1): (8, -1, "", 1)})
            await store.write_group("", {"generation": 0})
            nursery.cancel_scope.cancel()
        loaded = await PartitionStore(zk, store.writer, store.fence).load()
        assert loaded.offsets == {"": {"": {0: (7, -1, "", 1)}, "t": {1: (8, -1, "", 1)}}}
        assert loaded.groups == {"": {"generation": 0}}
    finally:
        await zk.stop()


async def test_a_write_of_unknown_outcome_is_read_back_before_offsets_are_answered(tmp_path):
    """ZooKeeper paused with a commit's multi() in its socket: the client gives the write up
    (COORDINATOR_NOT_AVAILABLE upstream), ZooKeeper resumes and applies it all the same. What
    the store answers afterwards is what ZooKeeper holds, not what it had confirmed before."""
    server = ZooKeeperServer(tmp_path, free_port(), tick_ms=500)  # sessions of up to 10 s
    await trio.to_thread.run_sync(server.start)
    zk = await _bridge(server.connect_string, timeout=6.0)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, 0, nursery)
            await store.commit_offsets("g", {("t", 0): (1, -1, "", 1)})
            server.process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(StoreUnavailable):  # kazoo gives up after 2/3 of the session
                    await store.commit_offsets("g", {("t", 0): (2, -1, "", 2)})
            finally:
                server.process.send_signal(signal.SIGCONT)
            assert store.durable["g"]["t"][0][0] == 1  # what was confirmed
            with trio.fail_after(20):
                while True:
                    try:
                        await store.settle("g")
                        break
                    except StoreUnavailable:  # not reconnected yet
                        await trio.sleep(0.1)
            data, _ = await zk.get(layout.shard_path(0, "g", "t", 0))
            landed = layout.decode(data)["0"][0]
            assert store.durable["g"]["t"][0][0] == landed == 2  # it had landed: now answered
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()
        await trio.to_thread.run_sync(server.stop)


async def test_a_commit_leaves_no_garbage_for_the_cyclic_collector(zookeeper):
    """What a commit allocates is freed by reference counting as soon as it is done: cyclic
    garbage per commit fed the collector, whose pauses took p99 from 9 to 87 ms under load."""
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            store = await _owner(zk, partition, nursery)
            await store.commit_offsets("g", {("t", 0): (0, -1, "", 0)})  # the shard exists

            async def commits(count: int) -> None:
                done = trio.Semaphore(0)
                for seq in range(count):
                    store.submit("g", {("t", p): (seq, -1, "", seq) for p in range(10)},
                                 lambda error: done.release())
                    if seq % 10 == 9:
                        await trio.sleep(0)  # batches of several commits, several multis
                for _ in range(count):
                    await done.acquire()

            await commits(50)  # warm: whatever is created once
            gc.collect()
            gc.disable()
            try:
                await commits(500)
                garbage = gc.collect()
            finally:
                gc.enable()
            assert garbage < 50, f"{garbage} objects in reference cycles after 500 commits"
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def test_commits_queued_behind_a_batch_that_cannot_be_written_are_answered_too(zookeeper):
    """Three commits, each too large to share a multi() with another, are queued; then the
    connection is suspended before the writer takes them. Each batch fails as it is taken
    (StoreUnavailable), and the store stays ready for the writer until its queue is empty:
    none is left waiting."""
    partition = next(_partitions)
    zk = await _bridge(zookeeper.connect_string)
    try:
        async with trio.open_nursery() as nursery:
            guard = SessionGuard(zk)
            store = await _owner(zk, partition, nursery, guard)
            outcomes: list[Exception | None] = []
            for seq in range(3):  # no checkpoint between: all queued before the writer's turn
                store.submit("g", {("t", p): (seq, -1, "", seq) for p in range(1500)}, outcomes.append)
            guard.writable = False  # as SUSPENDED sets it
            with trio.fail_after(10):
                while len(outcomes) < 3:
                    await trio.sleep(0.01)
            assert [type(error) for error in outcomes] == [StoreUnavailable] * 3
            assert store.writer.multis == 0
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()
