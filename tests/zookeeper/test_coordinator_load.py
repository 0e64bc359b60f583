"""A coordinator that takes over group-partitions answers COORDINATOR_LOAD_IN_PROGRESS for
their groups until each is loaded, then serves the groups and offsets it found, against a
real ZooKeeper."""

from __future__ import annotations

import trio

from coordinator.groups.group import JoinReply
from coordinator.groups.state import GroupState
from coordinator.cluster.ownership import Owned
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.partition import PartitionStore
from protocol import ErrorCode
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription

from tests.support.in_process import make_chroot, start_coordinator

SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=["orders"]))


async def test_groups_answer_load_in_progress_until_loaded_then_come_back_whole(zookeeper, monkeypatch):
    connect = zookeeper.connect_string + make_chroot(zookeeper.connect_string, "load")

    zk = ZooKeeperBridge(connect, session_timeout=6.0)
    await zk.start()
    try:
        await _two_lives(zk, monkeypatch)
    finally:
        await zk.stop()


async def _two_lives(zk: ZooKeeperBridge, monkeypatch) -> None:
    # first life: a group with one member in a stable generation, and a commit
    async with trio.open_nursery() as nursery:
        first = await start_coordinator(zk, nursery, 0)
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
        second = await start_coordinator(zk, nursery, 0)
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
