"""Offset retention's rules (Kafka's, KIP-211), pure, with the group runtime (GroupSet)
under trio's MockClock: which offsets of each kind of group expire, and when. No I/O: the
store is a function and the offsets a dict; the wall clock is the mock clock's."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from coordinator.assignors import BUILT_IN, CONSUMER_GROUP_ASSIGNORS
from coordinator.groups.consumer_group import ConsumerGroupConfig
from coordinator.groups.group import GroupConfig
from coordinator.groups.manager import GroupSet
from coordinator.groups.retention import BY_COMMIT, Rule, deletable, expired, rule_of
from coordinator.groups.snapshot import restore
from coordinator.groups.state import GroupState as S
from protocol import ErrorCode as E
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription
from tests.support.stored_groups import StoredGroups

MINUTE = 60_000  # ms
RETENTION = 10 * MINUTE
EPOCH = 1_700_000_000_000  # the wall clock at the mock clock's 0
SUB = encode_subscription(ConsumerProtocolSubscription(topics=["t"], owned_partitions=[]), 1)


def wall() -> int:
    return EPOCH + round(trio.current_time() * 1000)


def at(commit_ms: int, offset: int = 5) -> tuple:
    return (offset, -1, "", commit_ms)


Store = StoredGroups  # the runtime's `persist`


def groups(store: Store, topic_counts=None) -> GroupSet:
    config = GroupConfig(initial_rebalance_delay=0.0, min_session_timeout=1.0,
                         consumer=ConsumerGroupConfig(session_timeout=10.0))
    return GroupSet(config, dict(BUILT_IN), lambda topic: 4, store, wall_ms=wall,
                    consumer_assignors={"uniform": CONSUMER_GROUP_ASSIGNORS["uniform"]},
                    topic_counts=topic_counts if topic_counts is not None else {"t": 4, "old": 4})


def request(protocol_type: str = "consumer", protocols=(("range", SUB),)) -> dict:
    return dict(member_id="", instance_id=None, client_id="c", client_host="h", session_timeout=10.0,
                rebalance_timeout=30.0, protocol_type=protocol_type, protocols=list(protocols),
                require_known_member_id=False)


async def member_of(g: GroupSet, group_id: str, nursery: trio.Nursery, **overrides) -> str:
    """A member joined and synced, heartbeating every 3 s from then on (in `nursery`): the
    group Stable with it."""
    joined = await g.join(group_id, **{**request(), **overrides})
    assert joined.error == E.NONE
    synced = await g.sync(group_id, joined.member_id, generation=joined.generation, instance_id=None,
                          protocol_type=None, protocol_name=None, assignments={})
    assert synced.error == E.NONE

    async def heartbeats() -> None:
        while g.heartbeat(group_id, joined.member_id, joined.generation, None) in (E.NONE, E.REBALANCE_IN_PROGRESS):
            await trio.sleep(3)
    nursery.start_soon(heartbeats)
    return joined.member_id


async def consumer_member_of(g: GroupSet, group_id: str, nursery: trio.Nursery, **subscription):
    """A consumer-protocol member joined, heartbeating every 3 s from then on (in `nursery`,
    until it leaves): its first answer."""
    reply = await g.consumer_heartbeat(group_id, member_id="", epoch=0, owned=[], rebalance_timeout_ms=30_000,
                                       **{"subscribed": [], **subscription})
    assert reply.error == E.NONE

    async def heartbeats(member_id: str, epoch: int, owned) -> None:
        while member_id in g.consumer_groups[group_id].members:
            await trio.sleep(3)
            beat = await g.consumer_heartbeat(group_id, member_id=member_id, epoch=epoch, owned=owned)
            if beat.assignment is not None:
                owned = sorted(beat.assignment)
            epoch = beat.epoch if beat.error == E.NONE else epoch
    nursery.start_soon(heartbeats, reply.member_id, reply.epoch, sorted(reply.assignment or ()))
    return reply


def gone(offsets: dict, g: GroupSet, group_id: str) -> dict[str, list[int]]:
    """What of `offsets` has expired now, by topic."""
    return {t: sorted(ps) for t, ps in expired(offsets, rule_of(g, group_id), wall(), RETENTION).items()}


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


def test_an_offset_expires_when_retention_has_passed_since_its_base_and_no_sooner():
    offsets = {"t": {0: at(1_000), 1: at(2_000)}, "kept": {0: at(0)}}
    rule = Rule(kept=frozenset({"kept"}))
    assert expired(offsets, rule, 1_000 + RETENTION - 1, RETENTION) == {}
    assert expired(offsets, rule, 1_000 + RETENTION, RETENTION) == {"t": {0: at(1_000)}}  # Kafka: >=
    assert expired(offsets, rule, 2_000 + RETENTION, RETENTION) == {"t": {0: at(1_000), 1: at(2_000)}}
    # counted from when the group became empty, whatever the commits' age
    assert expired(offsets, Rule(since_ms=50_000), 50_000 + RETENTION - 1, RETENTION) == {}
    assert set(expired(offsets, Rule(since_ms=50_000), 50_000 + RETENTION, RETENTION)) == {"t", "kept"}
    assert expired(offsets, None, 10**15, RETENTION) == {}  # no rule: nothing ever expires


def test_an_offset_with_its_own_expiry_follows_it():
    """Kafka's expireTimestamp (OffsetCommit v2-v4's retention time): the offset expires then,
    sooner or later than the retention would have it."""
    offsets = {"t": {0: (*at(1_000), 5_000), 1: (*at(1_000), 1_000 + 2 * RETENTION), 2: (*at(1_000), None)}}
    assert expired(offsets, BY_COMMIT, 4_999, RETENTION) == {}
    assert list(expired(offsets, BY_COMMIT, 5_000, RETENTION)["t"]) == [0]
    assert list(expired(offsets, BY_COMMIT, 1_000 + RETENTION, RETENTION)["t"]) == [0, 2]
    assert list(expired(offsets, BY_COMMIT, 1_000 + 2 * RETENTION, RETENTION)["t"]) == [0, 1, 2]


async def test_a_classic_consumer_group_loses_unsubscribed_topics_while_stable_and_all_once_empty_long_enough(
        autojump_clock):
    store = Store()
    g = groups(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        member = await member_of(g, "g", nursery)
        committed = wall()
        offsets = {"t": {0: at(committed)}, "old": {0: at(committed), 1: at(committed + MINUTE)}}
        assert rule_of(g, "g") == Rule(kept=frozenset({"t"}))
        await trio.sleep(RETENTION / 1000 - 0.001)
        assert gone(offsets, g, "g") == {}
        await trio.sleep(0.001)
        assert gone(offsets, g, "g") == {"old": [0]}  # not subscribed: from its commit
        await trio.sleep(MINUTE / 1000)
        assert gone(offsets, g, "g") == {"old": [0, 1]}  # "t" is subscribed: kept however old

        g.group("g").request_rebalance(trio.current_time(), "partitions of t changed")
        assert rule_of(g, "g") is None  # rebalancing: Kafka expires nothing
        assert gone(offsets, g, "g") == {}
        g.leave("g", [(member, None)])
        assert g.group("g").state == S.EMPTY
        emptied = wall()
        assert rule_of(g, "g") == Rule(since_ms=emptied)
        # every offset now counts from the group's emptying, "t"'s too, old as it is
        assert gone(offsets, g, "g") == {}
        await trio.sleep(RETENTION / 1000 - 0.001)
        assert gone(offsets, g, "g") == {}
        await trio.sleep(0.001)
        assert gone(offsets, g, "g") == {"old": [0, 1], "t": [0]}
        assert deletable(g, "g")
        nursery.cancel_scope.cancel()


async def test_when_a_group_became_empty_is_stored_and_a_new_owner_counts_from_it(autojump_clock):
    store = Store()
    g = groups(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        member = await member_of(g, "g", nursery)
        assert "empty_since_ms" not in store.records["g"]  # stable: no such time
        await trio.sleep(3600)
        g.leave("g", [(member, None)])
        emptied = wall()
        await trio.sleep(0.01)  # the empty generation is written
        assert store.records["g"]["members"] == [] and store.records["g"]["empty_since_ms"] == emptied
        await trio.sleep(RETENTION / 2000)
        # another instance loads the record: it counts from the same instant, not from its load
        loaded = restore("g", store.records["g"], trio.current_time(), g.config)
        assert loaded.state == S.EMPTY and loaded.empty_since_ms == emptied
        later = groups(Store())
        later.adopt(loaded, {})
        offsets = {"t": {0: at(emptied - 3600_000)}}
        assert rule_of(later, "g") == Rule(since_ms=emptied)
        assert gone(offsets, later, "g") == {}
        await trio.sleep((emptied + RETENTION - wall()) / 1000)
        assert gone(offsets, later, "g") == {"t": [0]}
        # a record written before the time was kept: each offset from its own commit, as Kafka
        older = {k: v for k, v in store.records["g"].items() if k != "empty_since_ms"}
        later.adopt(restore("g", older, trio.current_time(), g.config), {})
        assert rule_of(later, "g") == Rule(since_ms=None)
        assert gone({"t": {0: at(wall() - RETENTION + 1)}}, later, "g") == {}
        nursery.cancel_scope.cancel()


async def test_a_group_of_another_protocol_type_keeps_its_offsets_while_it_has_members(autojump_clock):
    store = Store()
    g = groups(store)
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        member = await member_of(g, "connect", nursery, protocol_type="connect", protocols=[("default", b"\x00\x01")])
        offsets = {"connect-offsets": {0: at(wall())}}
        await trio.sleep(10 * RETENTION / 1000)
        assert rule_of(g, "connect") is None and gone(offsets, g, "connect") == {}
        g.leave("connect", [(member, None)])
        assert gone(offsets, g, "connect") == {}  # empty from now on: retention counts from here
        await trio.sleep(RETENTION / 1000)
        assert gone(offsets, g, "connect") == {"connect-offsets": [0]}
        nursery.cancel_scope.cancel()


async def test_a_classic_group_whose_subscriptions_cannot_be_read_expires_nothing_while_stable(autojump_clock):
    g = groups(Store())
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        await member_of(g, "odd", nursery, protocols=[("range", b"\xff\xff\xff")])
        offsets = {"t": {0: at(wall())}}
        await trio.sleep(2 * RETENTION / 1000)
        assert rule_of(g, "odd") is None and gone(offsets, g, "odd") == {}
        nursery.cancel_scope.cancel()


async def test_a_consumer_protocol_group_expires_unsubscribed_topics_from_their_commits_members_or_not(
        autojump_clock):
    """Kafka's ConsumerGroup: the base is always the commit, also once it has no members
    (unlike a classic group, whose emptying restarts the count)."""
    g = groups(Store(), topic_counts={"t": 4, "t2": 4, "u": 4, "old": 4})
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        named = await consumer_member_of(g, "cg", nursery, subscribed=["u"])
        matched = await consumer_member_of(g, "cg", nursery, regex="t.*")
        assert rule_of(g, "cg") == Rule(kept=frozenset({"u", "t", "t2"}))  # names, and what the expression matches
        committed = wall()
        offsets = {"t": {0: at(committed)}, "u": {0: at(committed)}, "old": {0: at(committed)}}
        await trio.sleep(RETENTION / 1000)
        assert gone(offsets, g, "cg") == {"old": [0]}
        for reply in (named, matched):
            assert (await g.consumer_heartbeat("cg", member_id=reply.member_id, epoch=-1, owned=None)).error == E.NONE
        assert not g.consumer_groups["cg"].members and deletable(g, "cg")
        assert gone(offsets, g, "cg") == {"old": [0], "t": [0], "u": [0]}  # from the commits, not from now
        nursery.cancel_scope.cancel()


async def test_offsets_without_a_group_expire_from_their_commits_and_such_a_group_may_go(autojump_clock):
    g = groups(Store())
    offsets = {"t": {0: at(wall()), 1: at(wall() + MINUTE)}}
    assert rule_of(g, "simple") == BY_COMMIT and deletable(g, "simple")
    await trio.sleep(RETENTION / 1000)
    assert gone(offsets, g, "simple") == {"t": [0]}
    await trio.sleep(MINUTE / 1000)
    assert gone(offsets, g, "simple") == {"t": [0, 1]}


async def test_a_group_with_members_may_not_go(autojump_clock):
    g = groups(Store())
    async with trio.open_nursery() as nursery:
        await nursery.start(g.run)
        await member_of(g, "g", nursery)
        assert not deletable(g, "g")
        joined = await g.consumer_heartbeat("cg", member_id="", epoch=0, owned=[], rebalance_timeout_ms=30_000,
                                            subscribed=["t"])
        assert joined.error == E.NONE and not deletable(g, "cg")
        nursery.cancel_scope.cancel()
