"""The KIP-848 consumer group, pure: epochs, reconciliation (revoke first, never a partition
two members hold), fencing, leaving, static members, timeouts. Time is a number passed in."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.assignors import CONSUMER_GROUP_ASSIGNORS
from coordinator.groups.consumer_group import (ConsumerGroup, ConsumerGroupConfig, ConsumerGroupState, MemberState,
                                               member_bytes)
from protocol import ErrorCode as E

ALL = {("orders", p) for p in range(6)}


def group(max_size: int = 0, partitions: int = 6) -> ConsumerGroup:
    ids = (f"m{n}" for n in itertools.count(1))
    return ConsumerGroup("g", ConsumerGroupConfig(max_size=max_size), CONSUMER_GROUP_ASSIGNORS, {"orders": partitions},
                         new_member_id=lambda: next(ids))


def join(g: ConsumerGroup, now: float = 0.0, member_id: str = "", **extra):
    return g.heartbeat(now, member_id=member_id, epoch=0, rebalance_timeout_ms=30_000, subscribed=["orders"],
                       owned=[], **extra)


def beat(g: ConsumerGroup, member_id: str, now: float = 1.0, owned=None, epoch: int | None = None):
    """A heartbeat that reports what the member holds (by default: what it was last given)."""
    member = g.members[member_id]
    held = member.sent if owned is None else owned
    return g.heartbeat(now, member_id=member_id, epoch=member.epoch if epoch is None else epoch,
                       owned=sorted(held or ()))


def held_once(g: ConsumerGroup) -> None:
    """No partition usable by two members, nor usable by one while another gives it up; and
    the running count of what members make the record keep is right."""
    assert g.record_bytes == sum(member_bytes(m) for m in g.members.values())
    seen: dict = {}
    for m in g.members.values():
        for tp in m.assigned | m.revoking:
            assert tp not in seen, f"{tp} held by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id


def test_the_first_member_gets_every_partition_at_the_first_epoch():
    g = group()
    reply = join(g)
    assert (reply.error, reply.member_id, reply.epoch) == (E.NONE, "m1", 1)
    assert reply.assignment == ALL and reply.heartbeat_interval == 5.0
    assert g.state is ConsumerGroupState.STABLE and (g.group_epoch, g.assignment_epoch) == (1, 1)
    assert beat(g, "m1").assignment is None  # nothing changed: nothing sent


def test_a_joining_member_waits_for_what_the_other_gives_up():
    g = group()
    join(g)
    second = join(g, 1.0)
    assert second.epoch == 2 and second.assignment == frozenset()  # all still held by m1
    assert g.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    assert g.state is ConsumerGroupState.RECONCILING
    first = beat(g, "m1", owned=ALL)  # m1 learns of the new target: revoke first, epoch unchanged
    kept = first.assignment
    assert first.epoch == 1 and len(kept) == 3 and g.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    held_once(g)
    assert beat(g, "m2").assignment is None  # nothing released yet
    done = beat(g, "m1", owned=kept)  # revoked: now at the new epoch
    assert (done.epoch, done.assignment) == (2, None) and g.members["m1"].state is MemberState.STABLE
    took = beat(g, "m2")
    assert took.assignment == ALL - kept and g.members["m2"].state is MemberState.STABLE
    held_once(g)
    assert g.state is ConsumerGroupState.STABLE


def test_an_epoch_not_the_members_is_fenced_but_a_lost_answer_is_forgiven():
    g = group()
    join(g)
    join(g, 1.0)
    kept = beat(g, "m1", owned=ALL).assignment
    beat(g, "m1", owned=kept)  # m1 now at epoch 2, previous 1
    assert g.heartbeat(2.0, member_id="m1", epoch=3).error == E.FENCED_MEMBER_EPOCH
    assert g.heartbeat(2.0, member_id="m1", epoch=-5).error == E.INVALID_REQUEST
    # the answer that moved it to epoch 2 was lost: epoch 1 again, holding no more than kept
    again = g.heartbeat(2.0, member_id="m1", epoch=1, owned=sorted(kept))
    assert again.error == E.NONE and again.epoch == 2
    assert g.heartbeat(2.0, member_id="m1", epoch=1, owned=sorted(ALL)).error == E.FENCED_MEMBER_EPOCH
    assert g.heartbeat(2.0, member_id="nobody", epoch=4).error == E.UNKNOWN_MEMBER_ID


def test_a_member_that_leaves_frees_its_partitions_for_the_others():
    g = group()
    join(g)
    join(g, 1.0)
    beat(g, "m1", owned=ALL)
    beat(g, "m1")
    beat(g, "m2")
    epoch = g.group_epoch
    assert g.heartbeat(3.0, member_id="m2", epoch=-1).epoch == -1
    assert "m2" not in g.members and g.group_epoch == epoch + 1
    assert beat(g, "m1", 4.0).assignment == ALL and g.state is ConsumerGroupState.STABLE


def test_silent_members_time_out_and_one_that_keeps_its_partitions_is_fenced():
    g = group()
    join(g)
    assert g.next_deadline() == 45.0
    assert g.expire(44.9) == [] and [(m.member_id, why) for m, why in g.expire(45.0)] == [("m1", "session timeout")]
    assert g.state is ConsumerGroupState.EMPTY
    join(g, 50.0)  # m2
    join(g, 51.0)  # m3
    beat(g, "m2", 52.0, owned=ALL)  # m2 told to revoke: 30 s to do it
    assert g.members["m2"].state is MemberState.UNREVOKED_PARTITIONS
    beat(g, "m2", 70.0, owned=ALL)  # still holding them
    beat(g, "m3", 70.0)
    assert [(m.member_id, why) for m, why in g.expire(82.0)] == [("m2", "revocation timeout")]
    assert beat(g, "m3", 83.0).assignment == ALL


def test_a_static_member_comes_back_to_its_place_without_a_rebalance():
    g = group()
    join(g, instance_id="i1")
    join(g, 1.0, instance_id="i2")
    beat(g, "m1", owned=ALL)
    beat(g, "m1")
    beat(g, "m2")
    had, epoch = g.members["m1"].assigned, g.group_epoch
    assert join(g, 2.0, instance_id="i1").error == E.UNRELEASED_INSTANCE_ID  # m1 is alive
    assert g.heartbeat(2.0, member_id="m1", epoch=g.members["m1"].epoch, instance_id="i1").error == E.NONE
    assert g.heartbeat(3.0, member_id="m1", epoch=-2).epoch == -2
    back = join(g, 4.0, instance_id="i1")  # m3, same instance
    assert back.error == E.NONE and back.assignment == had and g.group_epoch == epoch
    assert "m1" not in g.members and g.state is ConsumerGroupState.STABLE
    held_once(g)


def test_requests_that_cannot_be_served_say_why():
    g = group(max_size=1)
    assert g.heartbeat(0.0, member_id="", epoch=0, subscribed=["orders"]).error == E.INVALID_REQUEST
    assert g.heartbeat(0.0, member_id="", epoch=0, rebalance_timeout_ms=1000).error == E.INVALID_REQUEST
    assert join(g, assignor="magic").error == E.UNSUPPORTED_ASSIGNOR
    join(g)
    assert join(g).error == E.GROUP_MAX_SIZE_REACHED


def test_new_partitions_bump_the_group_epoch_and_are_assigned():
    g = group(partitions=2)
    join(g)
    g.partitions["orders"] = 4
    assert g.topics_changed()
    reply = beat(g, "m1", 5.0)
    assert reply.epoch == 2 and reply.assignment == {("orders", p) for p in range(4)}
    g.partitions["other"] = 3  # not subscribed: nothing changes
    assert not g.topics_changed() and g.group_epoch == 2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(["join", "leave", "beat", "lag"]), st.integers(0, 5)),
                      max_size=40))
def test_whatever_happens_no_partition_is_held_twice_and_cooperating_members_converge(steps):
    g = group()
    now = 0.0
    for action, pick in steps:
        now += 0.1
        ids = sorted(g.members)
        if action == "join" or not ids:
            join(g, now)
        elif action == "leave":
            g.heartbeat(now, member_id=ids[pick % len(ids)], epoch=-1)
        elif action == "beat":
            beat(g, ids[pick % len(ids)], now)
        else:  # lagging: still reports what it held before being told to give it up
            member = g.members[ids[pick % len(ids)]]
            beat(g, member.member_id, now, owned=member.assigned | member.revoking)
        held_once(g)
    for _ in range(2 * len(g.members) + 2):  # then everyone heartbeats, doing as told
        now += 0.1
        for member_id in sorted(g.members):
            beat(g, member_id, now)
            held_once(g)
    if g.members:
        assert g.state is ConsumerGroupState.STABLE
        assert set().union(*(m.assigned for m in g.members.values())) == ALL


def test_a_regular_expression_subscribes_to_the_topics_it_matches_whole_and_to_later_ones():
    g = group()
    g.partitions = {"orders": 2, "orders-eu": 1, "xorders": 1, "__consumer_offsets": 50}
    reply = g.heartbeat(0.0, member_id="", epoch=0, rebalance_timeout_ms=30_000, regex="orders.*", owned=[])
    assert reply.assignment == {("orders", 0), ("orders", 1), ("orders-eu", 0)}  # whole names: not xorders
    epoch = g.group_epoch
    g.partitions["orders-us"] = 1  # a topic created later that matches
    assert g.topics_changed() and g.group_epoch == epoch + 1
    assert ("orders-us", 0) in beat(g, "m1").assignment
    g.partitions["payments"] = 3  # one that does not
    assert not g.topics_changed() and g.group_epoch == epoch + 1


def test_an_expression_resolves_to_the_topics_its_client_may_describe():
    """With ACLs (KAFKA-18813): the matches a member's client may not describe are left out;
    the same decider on the next heartbeat changes nothing, a new one (the ACLs changed) that
    lets it see more bumps the epoch and assigns them."""
    g = group()
    g.partitions = {"orders": 2, "orders-secret": 1}
    hidden = lambda topic: topic != "orders-secret"  # noqa: E731
    reply = g.heartbeat(0.0, member_id="", epoch=0, rebalance_timeout_ms=30_000, regex="orders.*", owned=[],
                        may_describe=hidden)
    assert reply.assignment == {("orders", 0), ("orders", 1)}
    epoch = g.group_epoch
    g.partitions["orders-later"] = 1  # a match it may describe; the secret one stays out
    assert g.topics_changed() and g.group_epoch == epoch + 1
    member = g.members["m1"]
    again = g.heartbeat(1.0, member_id="m1", epoch=member.epoch, owned=sorted(member.sent), may_describe=hidden)
    assert again.error == E.NONE and ("orders-secret", 0) not in member.assigned | (again.assignment or set())
    epoch = g.group_epoch
    g.heartbeat(2.0, member_id="m1", epoch=member.epoch, owned=sorted(member.sent), may_describe=hidden)
    assert g.group_epoch == epoch  # the same decider: nothing recomputed, nothing moved
    everything = lambda topic: True  # noqa: E731 - the ACLs changed: it may describe it now
    seen = g.heartbeat(3.0, member_id="m1", epoch=member.epoch, owned=sorted(member.sent), may_describe=everything)
    assert g.group_epoch == epoch + 1
    assert ("orders-secret", 0) in seen.assignment and ("orders-secret", 0) in member.assigned


def test_an_expression_re2_refuses_is_invalid_and_changes_nothing():
    g = group()
    join(g)
    for bad in ("orders(", "(?<=x)orders", "(a+)+\\1"):  # unbalanced; lookbehind and backreference: not RE2
        assert g.heartbeat(1.0, member_id="m1", epoch=1, regex=bad).error == E.INVALID_REGULAR_EXPRESSION
    assert g.members["m1"].regex is None and g.group_epoch == 1


def test_the_range_assignor_keeps_ranges_and_what_members_hold():
    g = group()
    join(g, assignor="range")
    join(g, 1.0, assignor="range")
    kept = beat(g, "m1", owned=ALL).assignment
    assert kept == {("orders", p) for p in (0, 1, 2)}  # m1 keeps the first half it held
    beat(g, "m1", owned=kept)
    assert beat(g, "m2").assignment == {("orders", p) for p in (3, 4, 5)}


def test_what_members_make_the_record_keep_is_bounded():
    g = ConsumerGroup("g", ConsumerGroupConfig(max_record_bytes=2000), CONSUMER_GROUP_ASSIGNORS, {"orders": 6})
    joined = [join(g, client_id="c" * 400, member_id=f"m{n}") for n in range(5)]
    assert [r.error for r in joined] == [E.NONE] * 3 + [E.GROUP_MAX_SIZE_REACHED] * 2  # 3 x ~560 bytes fit
    held_once(g)
    grow = g.heartbeat(1.0, member_id="m0", epoch=g.members["m0"].epoch, subscribed=["orders", "x" * 600])
    assert grow.error == E.GROUP_MAX_SIZE_REACHED and g.members["m0"].subscribed == ("orders",)
    g.heartbeat(1.0, member_id="m1", epoch=-1)  # one leaves: room for another
    assert join(g, 2.0, client_id="c" * 400, member_id="m9").error == E.NONE
    held_once(g)
