"""`TransactionOutcomes` against a real ZooKeeper: what one instance records, every other
reads, is told of (in trio), can read afresh; records never move backwards; the janitor
deletes old ones; a new session reads everything again; ZooKeeper away costs a record,
counted, never an exception."""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager

import pytest
import trio

from coordinator.store import layout
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.transactions import (ABORTED, BEGUN, COMMITTED, UNRECORDED, Outcome, TransactionOutcomes,
                                            decode)
from tests.support.in_process import expire, make_chroot, until

TX = "copy/orders.tx"  # escaped into one znode name


@pytest.fixture
def hosts(zookeeper) -> str:
    return zookeeper.connect_string + make_chroot(zookeeper.connect_string, "transactions")


@asynccontextmanager
async def instance(hosts: str, **kwargs):
    zk = ZooKeeperBridge(hosts, session_timeout=4.0)
    await zk.start()
    try:
        async with trio.open_nursery() as nursery:
            outcomes = TransactionOutcomes(zk, **kwargs)
            await nursery.start(outcomes.run)
            yield outcomes
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def stored(outcomes: TransactionOutcomes, transactional_id: str = TX) -> Outcome | None:
    data, _ = await outcomes.zk.get(layout.transaction_path(transactional_id))
    return decode(transactional_id, data)


async def test_what_one_instance_records_every_other_learns_in_trio(hosts):
    async with instance(hosts) as gateway, instance(hosts) as owner:
        told = []

        def callback(outcome):
            trio.lowlevel.current_task()  # raises off trio's thread
            told.append((outcome, threading.current_thread() is threading.main_thread()))
        owner.watch(TX, callback)
        assert owner.latest(TX) is None and await owner.read(TX) is None

        assert await gateway.record_begun(TX, 4000, 0, at_ms=1000)
        await until(lambda: owner.latest(TX) is not None)
        assert owner.latest(TX) == Outcome(TX, 4000, 0, BEGUN, 1000)

        assert await gateway.record_end(TX, 4000, 0, committed=True, at_ms=2000)
        await until(lambda: owner.latest(TX).state == COMMITTED)
        assert owner.latest(TX) == Outcome(TX, 4000, 0, COMMITTED, 2000)
        assert [(o.state, main) for o, main in told] == [(BEGUN, True), (COMMITTED, True)]

        owner.unwatch(TX, callback)
        assert await gateway.record_end(TX, 4000, 0, committed=False, at_ms=3000)
        fresh = await owner.read(TX)  # a takeover's read: what ZooKeeper holds now
        assert fresh == Outcome(TX, 4000, 0, ABORTED, 3000, previous=Outcome(TX, 4000, 0, COMMITTED, 2000))
        assert len(told) == 2
        assert await stored(owner) == fresh


async def test_records_never_move_backwards(hosts):
    async with instance(hosts) as a, instance(hosts) as b:
        assert await a.record_begun(TX, 4000, 3, at_ms=5000)
        assert await b.record_begun(TX, 4000, 2, at_ms=6000)  # a slower instance's older epoch: left out
        assert await b.record_end(TX, 4000, 2, committed=True, at_ms=4900)  # a late end: kept as previous
        assert await stored(a) == Outcome(TX, 4000, 3, BEGUN, 5000, previous=Outcome(TX, 4000, 2, COMMITTED, 4900))
        assert await a.record_begun(TX, 7, 0, at_ms=7000)  # a new producer id, seen later: replaces it
        assert await stored(a) == Outcome(TX, 7, 0, BEGUN, 7000, previous=Outcome(TX, 4000, 2, COMMITTED, 4900))


async def test_concurrent_writers_all_land(hosts):
    async with instance(hosts) as a, instance(hosts) as b:
        async with trio.open_nursery() as nursery:
            for epoch in range(20):
                nursery.start_soon((a if epoch % 2 else b).record_begun, TX, 1, epoch, 1000 + epoch)
        assert (await stored(a)).producer_epoch == 19


async def test_the_janitor_deletes_records_past_the_retention(hosts):
    now = [1_000_000.0]  # seconds
    async with instance(hosts, retention_ms=60_000, clock=lambda: now[0], janitor_interval=3600) as a, instance(hosts) as b:
        assert await a.record_end("old", 1, 0, committed=True, at_ms=900_000_000)
        assert await a.record_begun("young", 2, 0)  # at the clock's now
        await until(lambda: a.latest("old") is not None and a.latest("young") is not None)
        await until(lambda: b.latest("old") is not None)
        assert await a.expire() == 1
        assert await a.zk.exists(layout.transaction_path("old")) is None
        assert await a.zk.exists(layout.transaction_path("young")) is not None
        await until(lambda: b.latest("old") is None)  # followed by the others
        assert b.latest("young") is not None
        now[0] += 61
        await until(lambda: a.latest("old") is None)
        assert await a.expire() == 1
        await until(lambda: b.latest("young") is None)


async def test_a_new_session_reads_everything_again(zookeeper, hosts):
    async with instance(hosts) as gateway, instance(hosts) as owner:
        told = []
        owner.watch(TX, told.append)
        assert await gateway.record_begun(TX, 1, 0, at_ms=1000)
        await until(lambda: owner.latest(TX) is not None)
        session = owner.zk.session_id
        await trio.to_thread.run_sync(expire, zookeeper.connect_string, owner.zk)
        await until(lambda: owner.zk.session_id != session)
        assert await gateway.record_end(TX, 1, 0, committed=True, at_ms=2000)
        await until(lambda: owner.latest(TX).state == COMMITTED)
        assert await gateway.record_end(TX, 1, 0, committed=False, at_ms=3000)  # the new session's watch fires
        await until(lambda: owner.latest(TX).state == ABORTED)
        assert [o.state for o in told][-2:] == [COMMITTED, ABORTED]


async def test_zookeeper_away_costs_the_record_counted_never_an_exception(hosts):
    zk = ZooKeeperBridge(hosts, session_timeout=4.0)
    await zk.start()
    outcomes = TransactionOutcomes(zk)
    await zk.stop()
    await until(lambda: zk.state != "CONNECTED")
    before = UNRECORDED.labels("zookeeper")._value.get()
    assert not await outcomes.record_end(TX, 1, 0, committed=True, timeout=0.3)
    assert UNRECORDED.labels("zookeeper")._value.get() == before + 1
    assert not await outcomes.record_begun("x" * 1025, 1, 0)
    assert UNRECORDED.labels("too_long")._value.get() >= 1
