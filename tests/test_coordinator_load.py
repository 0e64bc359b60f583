"""A coordinator that takes over group-partitions answers COORDINATOR_LOAD_IN_PROGRESS for
their groups until each is loaded, then serves the groups and offsets it found, against a
real ZooKeeper."""

from __future__ import annotations

import itertools
import time

import trio
from kazoo.client import KazooClient

from coordinator.groups.group import GroupConfig, JoinReply
from coordinator.groups.state import GroupState
from coordinator.cluster.membership import Instance, Membership
from coordinator.cluster.ownership import Coordinator, Owned
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.partition import PartitionStore
from coordinator.store.registry import TopicRegistry
from coordinator.store.session import SessionGuard
from protocol import ErrorCode
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription

_chroots = itertools.count()
CONFIG = GroupConfig(min_session_timeout=1.0, initial_rebalance_delay=0.0)
SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=["orders"]))


def _chroot(connect: str) -> str:
    path = f"/load-{next(_chroots)}-{int(time.time() * 1000)}"
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    client.ensure_path(path)
    client.stop()
    client.close()
    return connect + path


async def _coordinator(zk: ZooKeeperBridge, nursery: trio.Nursery) -> Coordinator:
    guard = SessionGuard(zk)
    await nursery.start(guard.run)
    registry = TopicRegistry(zk)
    await nursery.start(registry.run)
    membership = Membership(zk, Instance(0, "127.0.0.1", 9094))
    await membership.register()
    coordinator = Coordinator(zk, guard, registry, membership, CONFIG, {})
    guard.on_fenced, guard.on_recovered = coordinator.fenced, coordinator.recovered
    await nursery.start(coordinator.run)
    return coordinator


async def test_groups_answer_load_in_progress_until_loaded_then_come_back_whole(zookeeper, monkeypatch):
    connect = _chroot(zookeeper.connect_string)

    zk = ZooKeeperBridge(connect, session_timeout=6.0)
    await zk.start()
    try:
        await _two_lives(zk, monkeypatch)
    finally:
        await zk.stop()


async def _two_lives(zk: ZooKeeperBridge, monkeypatch) -> None:
    # first life: a group with one member in a stable generation, and a commit
    async with trio.open_nursery() as nursery:
        first = await _coordinator(zk, nursery)
        route = first.route("billing")
        with trio.fail_after(10):
            while not isinstance(route, Owned):
                assert route == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                await trio.sleep(0.01)
                route = first.route("billing")
        joined = await route.groups.join(
            "billing", member_id="", instance_id=None, client_id="c1", client_host="10.0.0.1",
            session_timeout=30.0, rebalance_timeout=30.0, protocol_type="consumer",
            protocols=[("custom", SUBSCRIPTION)], require_known_member_id=False)
        assert isinstance(joined, JoinReply) and joined.error == ErrorCode.NONE and joined.generation == 1
        synced = await route.groups.sync("billing", joined.member_id, generation=1, instance_id=None,
                                         protocol_type="consumer", protocol_name="custom",
                                         assignments={joined.member_id: b"the leader's assignment"})
        assert synced.error == ErrorCode.NONE and synced.assignment == b"the leader's assignment"
        await route.store.commit_offsets("billing", {("orders", 3): (1234, -1, "m", 1)})
        await first.hand_over(10)
        nursery.cancel_scope.cancel()

    # second life: loading is held back; until it ends, the group is "loading", not unknown
    gate = trio.Event()
    load = PartitionStore.load

    async def held_load(self):
        await gate.wait()
        return await load(self)

    monkeypatch.setattr(PartitionStore, "load", held_load)
    async with trio.open_nursery() as nursery:
        second = await _coordinator(zk, nursery)
        assert second.route("billing") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert second.all_groups() == []
        gate.set()
        with trio.fail_after(10):
            while not isinstance(route := second.route("billing"), Owned):
                assert route == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                await trio.sleep(0.01)
        group = route.groups.group("billing")
        assert group.state == GroupState.STABLE and group.generation == 1
        assert list(group.members) == [joined.member_id]
        assert group.members[joined.member_id].assignment == b"the leader's assignment"
        assert route.store.durable["billing"]["orders"][3][0] == 1234
        # the member carries on in its generation without a rebalance
        assert route.groups.heartbeat("billing", joined.member_id, 1, None) == ErrorCode.NONE
        await second.hand_over(10)
        nursery.cancel_scope.cancel()
