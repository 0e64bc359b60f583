"""Several coordinator instances in one process, each with its own ZooKeeper session, against
a real ZooKeeper: balanced ownership, orderly handover, failover, a lost session taken back
without a restart, graceful shutdown."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from contextlib import asynccontextmanager

import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from coordinator.cluster.membership import Instance, Membership
from coordinator.cluster.ownership import Coordinator, Owned
from coordinator.cluster.placement import partition_for
from coordinator.groups.group import GroupConfig, JoinReply
from coordinator.groups.state import GroupState
from coordinator.store import layout
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.registry import TopicRegistry
from coordinator.store.session import SessionGuard
from protocol import ErrorCode
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription

_chroots = itertools.count()
CONFIG = GroupConfig(min_session_timeout=1.0, initial_rebalance_delay=0.0)
SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=["orders"]))


def _chroot(connect: str) -> str:
    path = f"/cluster-{next(_chroots)}-{int(time.time() * 1000)}"
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    client.ensure_path(path)
    client.stop()
    client.close()
    return connect + path


@asynccontextmanager
async def running(connect: str, instance_id: int):
    """One instance: its own session, guard, registry, membership and coordinator."""
    zk = ZooKeeperBridge(connect, session_timeout=4.0)
    await zk.start()
    try:
        async with trio.open_nursery() as nursery:
            guard = SessionGuard(zk)
            await nursery.start(guard.run)
            registry = TopicRegistry(zk)
            await nursery.start(registry.run)
            membership = Membership(zk, Instance(instance_id, "127.0.0.1", 9000 + instance_id))
            await membership.register()
            coordinator = Coordinator(zk, guard, registry, membership, CONFIG, {})
            guard.on_fenced, guard.on_recovered = coordinator.fenced, coordinator.recovered
            await nursery.start(coordinator.run)
            yield coordinator
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def until(condition, timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)


def serving(c: Coordinator) -> set[int]:
    return {n for n, owned in c.owned.items() if owned.loaded.is_set() and not owned.releasing}


async def owners_in_zookeeper(zk: ZooKeeperBridge, partitions: int) -> dict[int, int | None]:
    owners = {}
    for n in range(partitions):
        try:
            data, _ = await zk.get(layout.owner_path(n))
            owners[n] = layout.decode(data)["instance"]
        except NoNodeError:
            owners[n] = None
    return owners


def group_on(partitions: set[int], total: int = 50) -> str:
    return next(g for i in itertools.count() if partition_for(g := f"group-{i}", total) in partitions)


async def join_and_commit(c: Coordinator, group: str) -> str:
    route = c.route(group)
    assert isinstance(route, Owned), route
    joined = await route.groups.join(
        group, member_id="", instance_id=None, client_id="c1", client_host="10.0.0.1", session_timeout=30.0,
        rebalance_timeout=30.0, protocol_type="consumer", protocols=[("custom", SUBSCRIPTION)],
        require_known_member_id=False)
    assert isinstance(joined, JoinReply) and joined.error == ErrorCode.NONE
    synced = await route.groups.sync(group, joined.member_id, generation=joined.generation, instance_id=None,
                                     protocol_type="consumer", protocol_name="custom",
                                     assignments={joined.member_id: b"assigned by the leader"})
    assert synced.error == ErrorCode.NONE
    await route.store.commit_offsets(group, {("orders", 1): (77, -1, "", 1)})
    return joined.member_id


async def test_a_second_instance_takes_half_and_every_partition_has_one_owner(zookeeper):
    connect = _chroot(zookeeper.connect_string)
    async with running(connect, 1) as a:
        await until(lambda: len(serving(a)) == 50)
        async with running(connect, 2) as b:
            await until(lambda: len(serving(a)) == 25 and len(serving(b)) == 25)
            assert not serving(a) & serving(b)
            owners = await owners_in_zookeeper(a.zk, 50)
            assert Counter(owners.values()) == {1: 25, 2: 25}
            assert {n for n, i in owners.items() if i == 2} == serving(b)
            # both answer FindCoordinator alike, naming the instance that serves the group
            for g in (f"g{i}" for i in range(40)):
                found = a.coordinator_of(g)
                assert found == b.coordinator_of(g)
                owner = b if partition_for(g, 50) in serving(b) else a
                assert found == owner.membership.me
                other = a if owner is b else b
                assert other.route(g) == ErrorCode.NOT_COORDINATOR
                assert isinstance(owner.route(g), Owned)


async def test_an_orderly_handover_keeps_the_group_and_its_offsets(zookeeper):
    connect = _chroot(zookeeper.connect_string)
    async with running(connect, 1) as a:
        await until(lambda: len(serving(a)) == 50)
        # a group on a partition the second instance will take (odd partitions of a 1+2 placement)
        async with running(connect, 2) as b:
            await until(lambda: len(serving(b)) == 25)
            moving = serving(b)
        await until(lambda: len(serving(a)) == 50)  # b shut down: all back on a
        group = group_on(moving)
        member = await join_and_commit(a, group)
        async with running(connect, 2) as b:
            await until(lambda: isinstance(b.route(group), Owned))
            assert a.route(group) == ErrorCode.NOT_COORDINATOR
            route = b.route(group)
            loaded = route.groups.group(group)
            assert loaded.state == GroupState.STABLE and list(loaded.members) == [member]
            assert loaded.members[member].assignment == b"assigned by the leader"
            assert route.store.durable[group]["orders"][1][0] == 77
            assert route.groups.heartbeat(group, member, loaded.generation, None) == ErrorCode.NONE
            data, _ = await b.zk.get(layout.epoch_path(partition_for(group, 50)))
            assert layout.decode(data)["instance"] == 2


async def test_graceful_shutdown_hands_everything_over_at_once(zookeeper):
    connect = _chroot(zookeeper.connect_string)
    async with running(connect, 1) as a:
        async with running(connect, 2) as b:
            await until(lambda: len(serving(a)) == 25 and len(serving(b)) == 25)
            started = trio.current_time()
            await b.hand_over(10)
            assert not b.owned
            # well before b's session (4 s) could have expired
            await until(lambda: len(serving(a)) == 50, timeout=2.0)
            assert trio.current_time() - started < 2.0
            assert b.coordinator_of("anything") == a.membership.me


def _expire(connect: str, zk: ZooKeeperBridge) -> None:
    """Expire `zk`'s session as kazoo's own test harness does: join it, then close it."""
    other = KazooClient(hosts=connect, client_id=zk.client.client_id)
    other.start(timeout=10)
    other.stop()
    other.close()


async def test_a_lost_session_drops_everything_then_takes_a_fair_share_back(zookeeper):
    connect = _chroot(zookeeper.connect_string)
    async with running(connect, 1) as a, running(connect, 2) as b:
        await until(lambda: len(serving(a)) == 25 and len(serving(b)) == 25)
        group = group_on(serving(a))
        member = await join_and_commit(a, group)
        await trio.to_thread.run_sync(_expire, connect, a.zk)
        # a learns its session is gone and owns nothing at once; b takes a's share over
        await until(lambda: a.route(group) == ErrorCode.NOT_COORDINATOR or not a.owned)
        await until(lambda: isinstance(b.route(group), Owned))
        assert b.route(group).store.durable[group]["orders"][1][0] == 77
        assert member in b.route(group).groups.group(group).members
        # ... and, reconnected with a new session, registers again and takes half back
        await until(lambda: len(serving(a)) == 25 and len(serving(b)) == 25)
        assert not serving(a) & serving(b)
        owners = await owners_in_zookeeper(b.zk, 50)
        assert Counter(owners.values()) == {1: 25, 2: 25}
