"""The runtime of consumer-protocol groups (GroupSet) under trio's MockClock: heartbeats that
arrive together share one target computation, an answer waits for its state to be stored,
silent members expire on the timer, and classic groups migrate to the consumer protocol and
back. No I/O: the store is a function."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from coordinator import metrics
from coordinator.assignors import BUILT_IN, CONSUMER_GROUP_ASSIGNORS
from coordinator.groups.consumer_group import ConsumerGroup, ConsumerGroupConfig
from coordinator.groups.group import Group, GroupConfig
from coordinator.groups.manager import GroupSet
from coordinator.groups.migration import downgrade, upgrade
from protocol import ErrorCode as E
from protocol.consumer import decode_assignment, encode_subscription
from protocol.messages import ConsumerProtocolSubscription
from tests.support.stored_groups import StoredGroups

SUB = encode_subscription(ConsumerProtocolSubscription(topics=["t"], owned_partitions=[]), 1)


class Counting:
    """The uniform assignor, counting its calls."""
    name = "uniform"

    def __init__(self):
        self.calls = 0

    def assign(self, members, partitions):
        self.calls += 1
        return CONSUMER_GROUP_ASSIGNORS["uniform"].assign(members, partitions)


Store = StoredGroups


class Events:
    def __init__(self):
        self.emitted: list[tuple[str, str | None, dict]] = []

    def emit(self, type_: str, group: str | None, **fields) -> None:
        self.emitted.append((type_, group, fields))


def groups(store: Store, assignor=None, events=None, **consumer) -> GroupSet:
    config = GroupConfig(initial_rebalance_delay=0.0, min_session_timeout=1.0,
                         consumer=ConsumerGroupConfig(**{"session_timeout": 10.0, **consumer}))
    return GroupSet(config, dict(BUILT_IN), lambda topic: 12, store, events=events or Events(),
                    consumer_assignors={"uniform": assignor or CONSUMER_GROUP_ASSIGNORS["uniform"]},
                    topic_counts={"t": 12})


async def beat(g: GroupSet, member_id: str, epoch: int, owned=None, **extra):
    return await g.consumer_heartbeat("g", member_id=member_id, epoch=epoch, owned=owned, **extra)


async def join(g: GroupSet, member_id: str, **extra):
    return await beat(g, member_id, 0, owned=[], rebalance_timeout_ms=30_000, subscribed=["t"], **extra)


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def test_heartbeats_that_arrive_together_share_one_target(autojump_clock):
    assignor = Counting()
    g = groups(Store(), assignor)
    replies = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        async with trio.open_nursery() as fleet:
            for n in range(10):
                async def one(member_id=f"m{n}"):
                    replies[member_id] = await join(g, member_id)
                fleet.start_soon(one)
        assert assignor.calls == 1  # not one per join
        assert {r.epoch for r in replies.values()} == {10}
        assert sum(len(r.assignment) for r in replies.values()) == 12  # nobody held anything: all free
        nursery.cancel_scope.cancel()


async def test_an_answer_waits_for_its_state_to_be_stored_and_a_failed_write_is_an_error(autojump_clock):
    store = Store()
    g = groups(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        store.gate = trio.Event()
        answered = []

        async def joined():
            answered.append(await join(g, "m1"))
        nursery.start_soon(joined)
        await trio.sleep(5)
        assert answered == [] and store.written == []  # not answered while not stored
        store.gate.set()
        await trio.sleep(0.1)
        assert answered[0].error == E.NONE and store.written[-1]["members"][0]["epoch"] == answered[0].epoch
        written = len(store.written)
        steady = await beat(g, "m1", answered[0].epoch, owned=sorted(answered[0].assignment))
        assert steady.error == E.NONE and len(store.written) == written  # nothing changed: nothing written
        store.fail = True
        assert (await join(g, "m2")).error == E.COORDINATOR_NOT_AVAILABLE
        nursery.cancel_scope.cancel()


async def test_a_silent_member_expires_on_the_timer_and_the_group_is_stored(autojump_clock):
    store, events = Store(), Events()
    g = groups(store, events=events)
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        first = await join(g, "m1")
        await join(g, "m2", client_id="late", client_host="/10.0.0.2")
        for _ in range(4):  # m1 keeps heartbeating; m2 falls silent
            await trio.sleep(4)
            first = await beat(g, "m1", first.epoch, owned=sorted(first.assignment or ()))
        assert "m2" not in g.consumer_groups["g"].members
        assert [m["id"] for m in store.written[-1]["members"]] == ["m1"]
        expired = [fields for kind, _, fields in events.emitted if kind == "member_expired"]
        assert [(f["member"], f["reason"], f["client_id"], f["host"]) for f in expired] == [
            ("m2", "session timeout", "late", "/10.0.0.2")]  # who it was, as the events doc promises
        nursery.cancel_scope.cancel()


def _classic_join(member_id: str = "") -> dict:
    return dict(member_id=member_id, instance_id=None, client_id="c", client_host="h", session_timeout=6.0,
                rebalance_timeout=30.0, protocol_type="consumer", protocols=[("range", SUB)],
                require_known_member_id=False)


async def test_a_classic_group_upgrades_when_a_consumer_member_joins_and_downgrades_when_it_leaves(autojump_clock):
    g = groups(Store())
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        joined = await g.join("g", **_classic_join())
        synced = await g.sync("g", joined.member_id, generation=joined.generation, instance_id=None,
                              protocol_type="consumer", protocol_name="range", assignments={})
        assert len(decode_assignment(synced.assignment)[1].assigned_partitions[0].partitions) == 12
        old = joined.member_id
        new = await join(g, "c1")  # the upgrade: the classic member keeps all it holds for now
        assert "g" in g.consumer_groups and "g" not in g.groups
        assert new.error == E.NONE and new.assignment == frozenset()
        assert g.heartbeat("g", old, joined.generation, None) == E.REBALANCE_IN_PROGRESS
        again = await g.join("g", **{**_classic_join(old), "protocols": [("range", encode_subscription(
            ConsumerProtocolSubscription(topics=["t"], owned_partitions=[]), 1))]})  # eager: gave all up
        assert again.error == E.NONE and again.generation == new.epoch and again.leader == ""
        synced = await g.sync("g", old, generation=again.generation, instance_id=None,
                              protocol_type="consumer", protocol_name="range", assignments={})
        kept = decode_assignment(synced.assignment)[1].assigned_partitions[0].partitions
        assert synced.error == E.NONE and len(kept) == 6
        took = await beat(g, "c1", new.epoch, owned=[])
        assert len(took.assignment) == 6 and not {("t", p) for p in kept} & took.assignment
        assert g.heartbeat("g", old, again.generation, None) == E.NONE
        assert (await beat(g, "c1", -1)).error == E.NONE  # the consumer member leaves: classic again
        assert "g" in g.groups and "g" not in g.consumer_groups
        assert g.heartbeat("g", old, again.generation, None) == E.REBALANCE_IN_PROGRESS
        nursery.cancel_scope.cancel()


async def test_no_upgrade_when_the_policy_forbids_it(autojump_clock):
    g = groups(Store(), migration_policy="downgrade")
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        await g.join("g", **_classic_join())
        assert (await join(g, "c1")).error == E.GROUP_ID_NOT_FOUND
        assert "g" in g.groups
        nursery.cancel_scope.cancel()


def test_only_consumer_protocol_groups_upgrade_and_only_all_classic_groups_downgrade():
    connect = Group("g", GroupConfig(initial_rebalance_delay=0.0))
    connect.protocol_type = "connect"
    assert "not the consumer protocol" in upgrade(connect, ConsumerGroupConfig(), CONSUMER_GROUP_ASSIGNORS, {})
    consumer = ConsumerGroup("g", ConsumerGroupConfig(), CONSUMER_GROUP_ASSIGNORS, {"t": 12})
    consumer.heartbeat(0.0, member_id="c1", epoch=0, rebalance_timeout_ms=1000, subscribed=["t"], owned=[])
    consumer.classic_join(0.0, member_id="k1", instance_id=None, client_id="c", client_host="h",
                          session_timeout=6.0, rebalance_timeout=30.0, protocols=(("range", SUB),),
                          subscribed=["t"], owned=[])
    assert downgrade(consumer, GroupConfig(), 0.0) is None  # c1 still speaks the consumer protocol
    consumer.remove("c1")
    classic = downgrade(consumer, GroupConfig(), 0.0)
    assert classic is not None and list(classic.members) == ["k1"] and classic.protocol_name == "range"


async def test_a_member_turned_away_is_counted_by_the_limit_reached(autojump_clock):
    refused = metrics.GROUP_FULL_REFUSALS.labels("group_consumer_max_size")
    g = groups(Store(), max_size=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        before = refused._value.get()
        assert (await join(g, "m1")).error == E.NONE
        assert (await join(g, "m2")).error == E.GROUP_MAX_SIZE_REACHED
        assert refused._value.get() == before + 1
        nursery.cancel_scope.cancel()


async def test_a_new_groups_first_epoch_counts_as_classic_first_generation_does(autojump_clock):
    """groupkeeper_consumer_group_epoch_bumps_total counts epoch 1 of a new group, as
    groupkeeper_rebalances_total counts a classic group's first generation; a second member
    joining counts one more."""
    bumps = metrics.CONSUMER_GROUP_EPOCH_BUMPS
    g = groups(Store())
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        before = bumps._value.get()
        first = await join(g, "m1")
        assert first.error == E.NONE and first.epoch == 1
        assert bumps._value.get() == before + 1  # before the fix: + 0
        assert (await join(g, "m2")).epoch == 2
        assert bumps._value.get() == before + 2
        nursery.cancel_scope.cancel()


async def test_a_lingering_write_shares_steps_and_is_not_made_for_a_group_deleted_meanwhile(autojump_clock):
    store = Store()
    g = groups(store, store_linger=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        replies = {}

        async def one(member_id: str, delay: float) -> None:
            await trio.sleep(delay)
            replies[member_id] = await join(g, member_id)
        async with trio.open_nursery() as fleet:
            for n, delay in enumerate((0.0, 0.01, 0.03)):  # within one linger of the first
                fleet.start_soon(one, f"m{n}", delay)
        assert all(r.error == E.NONE for r in replies.values())
        assert len(store.writes) == 1 and store.writes[0] == ("g", True, 3)  # one write for the three joins

        answered = {}

        async def leave() -> None:
            answered["m0"] = await beat(g, "m0", -1)
        nursery.start_soon(leave)
        await trio.sleep(0.01)  # its removal lingers
        g.drop("g")  # deleted meanwhile (as DeleteGroups drops it)
        await trio.sleep(0.2)
        assert len(store.writes) == 1  # nothing written after the group went
        assert answered["m0"].error == E.UNKNOWN_MEMBER_ID
        nursery.cancel_scope.cancel()
