"""The group state machine, pure (no I/O), and its runtime's timers under trio's MockClock.

Tests named `test_seed_...` are the "interesting scenarios" of the 0.9 consumer design
(seed 001) that apply to a coordinator.
"""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from coordinator.assignors import BUILT_IN
from coordinator.groups.group import (AssignmentNeeded, CapacityReached, Group, GroupConfig, JoinReply,
                                      MemberRemoved, MembersChanged, PersistNeeded, RebalanceStarted, SyncReply,
                                      Wait)
from coordinator.groups.manager import GroupSet
from coordinator.groups.snapshot import restore, snapshot
from coordinator.groups.state import TRANSITIONS, GroupState, IllegalTransition
from protocol import ErrorCode as E
from tests.support.stored_groups import StoredGroups
from protocol.consumer import decode_assignment, encode_assignment, encode_subscription
from protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicPartition

S = GroupState
SUB = encode_subscription(ConsumerProtocolSubscription(topics=["t"]), 0)


def _group(**config) -> Group:
    ids = (f"m{i}" for i in itertools.count(1))
    return Group("g", GroupConfig(**{"initial_rebalance_delay": 1.0, **config}), new_id=lambda c: next(ids))


def _join(g: Group, now: float, member_id: str = "", *, instance: str | None = None,
          protocols=(("range", SUB),), session: float = 10.0, rebalance: float = 30.0, v4: bool = False):
    return g.join(now, member_id=member_id, instance_id=instance, client_id="c", client_host="h",
                  session_timeout=session, rebalance_timeout=rebalance, protocol_type="consumer",
                  protocols=list(protocols), require_known_member_id=v4)


def _drain(g: Group) -> list:
    out, g.outbox[:] = list(g.outbox), []
    return out


def _stable(g: Group, now: float, members: int = 1) -> list[str]:
    """Bring `members` new members to a Stable generation, at `now` + the initial delay."""
    ids = [_join(g, now).member_id for _ in range(members)]
    g.tick(now + g.config.initial_rebalance_delay)
    gen = g.generation
    g.set_assignment(now + g.config.initial_rebalance_delay, gen, {i: b"a-" + i.encode() for i in ids})
    g.persisted(now + g.config.initial_rebalance_delay, gen)
    _drain(g)
    assert g.state == S.STABLE
    return ids


def test_the_transition_table_is_enforced():
    assert S.STABLE in TRANSITIONS[S.COMPLETING_REBALANCE]
    assert S.STABLE not in TRANSITIONS[S.EMPTY]
    g = _group()
    with pytest.raises(IllegalTransition):
        g._to(S.STABLE)


def test_first_member_completes_a_generation():
    g = _group()
    wait = _join(g, 0)
    assert isinstance(wait, Wait) and g.state == S.PREPARING_REBALANCE
    g.tick(0.999)
    assert g.state == S.PREPARING_REBALANCE  # the initial rebalance delay
    g.tick(1.0)
    effects = _drain(g)
    join = next(e for e in effects if isinstance(e, JoinReply))
    assert join.error == E.NONE and join.generation == 1 and join.leader == wait.member_id
    assert join.protocol_name == "range" and join.members == ((wait.member_id, None, SUB),)
    assert AssignmentNeeded(1) in effects and g.state == S.COMPLETING_REBALANCE


def test_member_id_required_then_join_and_the_pending_member_expires():
    g = _group()
    first = _join(g, 0, v4=True)
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id in g.pending
    assert g.state == S.EMPTY
    g.tick(10.0)  # it never came back within its session timeout
    assert not g.pending
    assert _join(g, 11, first.member_id, v4=True).error == E.UNKNOWN_MEMBER_ID


def test_session_timeout_bounds_and_protocol_mismatch():
    g = _group(min_session_timeout=6, max_session_timeout=60)
    assert _join(g, 0, session=5).error == E.INVALID_SESSION_TIMEOUT
    assert _join(g, 0, session=61).error == E.INVALID_SESSION_TIMEOUT
    _stable(g, 0)
    assert _join(g, 1, protocols=[("sticky", SUB)]).error == E.INCONSISTENT_GROUP_PROTOCOL


def test_group_max_size():
    g = _group(max_size=2)
    _stable(g, 0, members=2)
    assert _join(g, 1).error == E.GROUP_MAX_SIZE_REACHED


def test_a_join_that_would_not_fit_the_record_is_refused_and_logged_once():
    g = _group(max_record_bytes=500)
    ids = _stable(g, 0, members=3)  # each member: ~150 bytes of overhead, names and metadata
    assert g.record_bytes == sum(m.record_bytes() for m in g.members.values()) <= 500
    first, second = _join(g, 1, protocols=[("range", SUB + b"x" * 200)]), _join(g, 1)
    assert first.error == second.error == E.GROUP_MAX_SIZE_REACHED
    refusals = [e for e in _drain(g) if isinstance(e, CapacityReached)]
    assert [(r.limit, r.first) for r in refusals] == [("group_max_record_bytes", True),
                                                      ("group_max_record_bytes", False)]
    assert list(g.members) == ids and g.state == S.STABLE  # nothing changed for the others
    assert g.leave(2, [(ids[0], None)]) == [E.NONE]
    assert isinstance(_join(g, 2), Wait)  # room again


def test_a_group_grown_to_its_record_limit_refuses_newcomers_at_the_door_not_after_a_rebalance():
    """Members join one at a time (ids as the coordinator makes them) and the server assigns
    200 partitions among them, range-style: once a newcomer would not fit the record, it is
    refused at its join. Before, the estimate rounded the members' mean assignment down, so
    a group a few hundred bytes under the limit let each newcomer in, rebalanced, and then
    turned it away: a needless rebalance per newcomer."""
    g = Group("g", GroupConfig(min_session_timeout=1, initial_rebalance_delay=0, max_record_bytes=65536))
    subscription = encode_subscription(ConsumerProtocolSubscription(topics=["orders"]), 0)
    now, refused = 1.0, 0

    def join(member_id: str):
        return g.join(now, member_id, None, "groupkeeper-cli", "127.0.0.1", 120, 60, "consumer",
                      [("range", subscription)], False)

    while refused < 3:
        if isinstance(join(""), JoinReply):  # refused at once: nothing changed for the others
            assert g.state == S.STABLE
            refused += 1
            continue
        assert not refused, "a newcomer admitted after another was refused"
        for member in [m for m in g.members if not g.members[m].awaiting_join]:
            join(member)
        ids = list(g.members)
        per, extra = divmod(200, len(ids))
        starts = [i * per + min(i, extra) for i in range(len(ids) + 1)]
        g.set_assignment(now, g.generation, {m: encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
            TopicPartition(topic="orders", partitions=list(range(starts[i], starts[i + 1])))]
            if starts[i + 1] > starts[i] else []), 0) for i, m in enumerate(ids)})  # past 200 members: none
        g.persisted(now, g.generation)
        shed = [e for e in _drain(g) if isinstance(e, MemberRemoved)]
        assert not shed and g.state == S.STABLE, f"{len(shed)} shed at {len(g.members)} members"
    assert g.record_bytes <= 65536 and len(g.members) > 200

def test_members_that_rejoin_too_large_are_shed_newest_first():
    g = _group(max_record_bytes=1200)
    a, b, c = _stable(g, 0, members=3)
    big = [("range", SUB + b"x" * 400)]
    for member in (a, b, c):  # each rejoins with 400 more bytes: 3 of them no longer fit
        _join(g, 2, member, protocols=big)
    out = _drain(g)
    assert JoinReply(c, E.GROUP_MAX_SIZE_REACHED) in out and MemberRemoved(c, "group too large", 1) in out
    assert list(g.members) == [a, b] and g.state == S.COMPLETING_REBALANCE and g.generation == 2
    assert g.record_bytes <= 1200


def test_an_assignment_too_large_to_store_sheds_members_until_it_fits_and_never_loops():
    g = _group(max_record_bytes=2000)
    ids = [_join(g, 0).member_id for _ in range(4)]
    g.tick(1)
    _drain(g)
    g.leader_assigns = True
    leader = g.leader
    for member in ids[1:]:
        assert isinstance(g.sync(1.1, member, 1, None, None, None, {}), Wait)
    # the leader hands everyone 600 bytes: 4 x 600 + the members' own bytes do not fit 2000
    assert isinstance(g.sync(1.2, leader, 1, None, None, None, {m: b"a" * 600 for m in ids}), Wait)
    out = _drain(g)
    shed = [r.member_id for r in out if isinstance(r, SyncReply) and r.error == E.GROUP_MAX_SIZE_REACHED]
    assert shed == ids[:0:-1][:len(shed)] and shed  # the newest first
    assert PersistNeeded(1) not in out and g.state == S.PREPARING_REBALANCE
    rounds = 0
    while g.members:  # the leader keeps sending what no member fits in: each round sheds more
        for member in list(g.members):
            _join(g, 2 + rounds, member)
        g.tick(2 + rounds)
        _drain(g)
        if g.state != S.COMPLETING_REBALANCE:
            break
        g.leader_assigns = True
        for member in [m for m in g.members if m != g.leader] + [g.leader]:  # the leader's last
            g.sync(2 + rounds, member, g.generation, None, None, None,
                   {m: b"a" * 1900 for m in g.members} if member == g.leader else {})
        _drain(g)
        rounds += 1
        assert rounds <= 4
    assert g.state == S.EMPTY and not g.members


def test_running_totals_and_timers_agree_with_the_members():
    """Random joins, rejoins, heartbeats, syncs, leaves and ticks: the counts kept so that no
    request walks the whole group equal what walking it gives, and a tick at any time removes
    exactly the members whose session has passed."""
    import random

    for seed in range(30):
        rng = random.Random(seed)
        g = _group(initial_rebalance_delay=0.0)
        now = 0.0
        for _ in range(300):
            now += rng.choice([0.0, 0.5, 3.0, 11.0])
            live = list(g.members)
            action = rng.randrange(6)
            if action == 0 or not live:
                _join(g, now, protocols=rng.choice([[("range", SUB)], [("range", SUB), ("sticky", SUB)]]),
                      session=rng.choice([6.0, 10.0]), v4=rng.random() < 0.3)
                pending = list(g.pending)
                if pending and rng.random() < 0.5:
                    _join(g, now, pending[0])
            elif action == 1:
                _join(g, now, rng.choice(live), protocols=rng.choice([[("range", SUB)], [("range", SUB + b"!")]]))
            elif action == 2:
                g.heartbeat(now, rng.choice(live), g.generation, None)
            elif action == 3:
                member = rng.choice(live)
                g.sync(now, member, g.generation, None, None, None, {})
                if g.state == S.COMPLETING_REBALANCE and g.pending_assignment is None:
                    g.set_assignment(now, g.generation, {m: b"p" for m in g.members})
                if g.pending_assignment is not None:
                    g.persisted(now, g.generation)
            elif action == 4:
                g.leave(now, [(rng.choice(live), None)])
            next_due = g.next_deadline(now)
            due = [m.deadline for m in g.members.values() if not g._kept_alive(m)] + list(g.pending.values())
            assert next_due is None or not due or next_due <= min(due)  # never late
            g.tick(now)
            _drain(g)
            members = g.members.values()
            assert g._joining == sum(m.awaiting_join for m in members)
            assert g.record_bytes == sum(m.record_bytes() for m in members)
            assert g._assigned == sum(len(m.assignment) for m in members)
            assert dict(g._offered) == dict(itertools.chain.from_iterable(
                [(name, sum(any(n == name for n, _ in m.protocols) for m in members))]
                for name in {n for m in members for n, _ in m.protocols}))
            assert all(m.deadline > now or g._kept_alive(m) for m in members)
            assert all(expiry > now for expiry in g.pending.values())


def test_generation_is_bumped_on_every_completed_rebalance():
    g = _group()
    (a,) = _stable(g, 0)
    assert g.generation == 1
    g.request_rebalance(2, "partitions changed")
    assert isinstance(_join(g, 2, a), Wait)
    assert g.state == S.COMPLETING_REBALANCE and g.generation == 2  # same members, new generation


def test_seed_heartbeats_during_rebalance():
    g = _group()
    a, b = _stable(g, 0, members=2)
    assert g.heartbeat(1, a, 1, None) == E.NONE
    _join(g, 1)  # a third member: rebalance
    assert g.state == S.PREPARING_REBALANCE
    assert g.heartbeat(1.5, a, 1, None) == E.REBALANCE_IN_PROGRESS
    assert g.heartbeat(1.5, a, 0, None) == E.ILLEGAL_GENERATION
    assert g.heartbeat(1.5, "nobody", 1, None) == E.UNKNOWN_MEMBER_ID


def test_keep_alive_is_a_stable_members_heartbeat_and_nothing_else():
    g = _group()
    a, b = _stable(g, 0, members=2)
    timers = list(g._timers)
    assert g.keep_alive(5, a, 1)
    assert g.members[a].deadline == 15 and g._timers == timers and not g.outbox  # nothing else moved
    g.tick(14)
    assert a in g.members and b not in g.members  # b's session ran out; a's was kept alive
    assert not g.keep_alive(14, a, 1)  # b's removal started a rebalance: the full path answers
    assert g.heartbeat(14, a, 1, None) == E.REBALANCE_IN_PROGRESS
    assert not g.keep_alive(14, "nobody", 1)


def test_keep_alive_honours_a_session_shortened_by_a_rejoin():
    g = _group()
    a, b = _stable(g, 0, members=2)
    _join(g, 2, b, session=6.0)  # a follower's unchanged rejoin in Stable: answered at once
    assert g.state == S.STABLE
    assert g.keep_alive(3, b, 1) and g.keep_alive(3, a, 1)
    g.tick(9)  # 3 + 6: b's shorter session is over; a's (3 + 10) is not
    assert b not in g.members and a in g.members


def test_seed_offset_commits_during_rebalance():
    g = _group()
    a, b = _stable(g, 0, members=2)
    _join(g, 1)  # rebalance starts; a still owns its partitions
    assert g.commit_check(1.2, a, 1, None) == E.NONE  # commit in the revoke callback: kept
    assert g.commit_check(1.2, a, 0, None) == E.ILLEGAL_GENERATION
    assert g.commit_check(1.2, "stranger", -1, None) == E.UNKNOWN_MEMBER_ID


def test_standalone_commits_to_an_empty_group_are_accepted():
    g = _group()
    assert g.commit_check(0, "", -1, None) == E.NONE
    assert g.commit_check(0, "", 3, None) == E.UNKNOWN_MEMBER_ID


def test_seed_slow_consumers_are_removed_at_the_rebalance_timeout():
    g = _group()
    a, b = _stable(g, 0, members=2)
    _join(g, 1, a)  # a rejoins; b is slow and never does
    for now in range(5, 31, 5):  # b keeps heartbeating, but does not rejoin
        assert g.heartbeat(now, b, 1, None) == E.REBALANCE_IN_PROGRESS
        g.tick(now)
    assert g.state == S.PREPARING_REBALANCE
    g.tick(31)
    effects = _drain(g)
    assert MemberRemoved(b, "rebalance timeout", 1) in effects
    assert g.state == S.COMPLETING_REBALANCE and list(g.members) == [a]


def test_seed_partition_changes_for_subscribed_topics():
    g = _group()
    a, = _stable(g, 0)
    g.request_rebalance(1, "partitions of t changed")
    assert g.state == S.PREPARING_REBALANCE
    assert g.heartbeat(1, a, 1, None) == E.REBALANCE_IN_PROGRESS


def test_seed_coordinator_failover_members_continue_on_the_loaded_group():
    g = _group()
    a, b = _stable(g, 0, members=2)
    loaded = restore("g", snapshot(g), now=100.0, config=g.config)
    assert loaded.state == S.STABLE and loaded.generation == g.generation
    assert loaded.heartbeat(101, a, g.generation, None) == E.NONE
    assert loaded.members[b].assignment == b"a-" + b.encode()
    loaded.tick(100 + 10)  # a member that never reaches the new coordinator expires
    assert b not in loaded.members and loaded.state == S.PREPARING_REBALANCE


def _failed_over(members: int = 3) -> tuple[Group, list[str]]:
    """A Stable group of `members` (client "c" on host "h"), loaded by a new owner at 100."""
    g = _group()
    ids = _stable(g, 0, members=members)
    return restore("g", snapshot(g), now=100.0, config=g.config), ids


def test_members_back_under_new_ids_after_a_failover_take_the_loaded_ones_places_without_a_rebalance():
    # librdkafka drops its member id when its session ends without an answer: a failover that
    # outlived the clients' sessions brings its members back under new ids. Each takes the
    # place of a loaded member of its client id and host not heard from since the load: the
    # generation, the leadership and the assignment, answered at once; no rebalance, and no
    # wait for the old ids' sessions (one detection, not two).
    loaded, old = _failed_over(3)
    generation = loaded.generation
    replies = [_join(loaded, 101 + i / 10) for i in range(3)]
    assert all(isinstance(r, JoinReply) and r.error == E.NONE and r.generation == generation for r in replies)
    assert replies[0].replaced == old[0] and replies[0].leader == replies[0].member_id  # the leader's place
    assert [r.replaced for r in replies[1:]] == ["", ""] and all(r.leader == replies[0].member_id for r in replies)
    effects = _drain(loaded)
    assert [(e.member_id, e.reason) for e in effects if isinstance(e, MemberRemoved)] == \
        [(o, "replaced after failover") for o in old]
    assert loaded.state == S.STABLE and loaded.generation == generation
    for reply, before in zip(replies, old):
        sync = loaded.sync(102, reply.member_id, generation, None, None, None, {})
        assert sync.error == E.NONE and sync.assignment == b"a-" + before.encode()
    assert not any(isinstance(e, RebalanceStarted) for e in _drain(loaded))


def test_a_newcomer_offering_more_protocols_than_the_one_stored_takes_the_place():
    # a loaded member is stored with the protocol voted for only; the client offers its list
    loaded, old = _failed_over(2)
    reply = _join(loaded, 101, protocols=(("roundrobin", SUB), ("range", SUB)))
    assert isinstance(reply, JoinReply) and reply.error == E.NONE and loaded.state == S.STABLE
    assert reply.generation == loaded.generation and reply.member_id in loaded.members


def test_a_newcomer_with_another_subscription_replaces_the_loaded_member_through_a_rebalance():
    loaded, (a, b) = _failed_over(2)
    assert loaded.heartbeat(100.5, a, loaded.generation, None) == E.NONE  # a reached the new owner
    other = encode_subscription(ConsumerProtocolSubscription(topics=["t", "u"]), 0)
    c = _join(loaded, 101, protocols=(("range", other),)).member_id  # b's client, back under a new id
    assert [(e.member_id, e.reason) for e in _drain(loaded) if isinstance(e, MemberRemoved)] == \
        [(b, "replaced after failover")]
    assert loaded.state == S.PREPARING_REBALANCE  # waiting for a, which is alive
    assert loaded.heartbeat(101.5, a, loaded.generation, None) == E.REBALANCE_IN_PROGRESS
    assert isinstance(_join(loaded, 101.6, a), Wait)
    assert loaded.state == S.COMPLETING_REBALANCE and set(loaded.members) == {a, c}


def test_a_member_heard_is_never_replaced_and_a_replaced_one_that_was_alive_joins_again():
    loaded, (a, b) = _failed_over(2)
    assert loaded.heartbeat(100.5, a, loaded.generation, None) == E.NONE
    c = _join(loaded, 101).member_id  # takes b's place (b's client came back under a new id)
    assert set(loaded.members) == {a, c} and loaded.state == S.STABLE
    # had b been alive after all: its next heartbeat is refused, and it joins as new
    assert loaded.heartbeat(101.5, b, loaded.generation, None) == E.UNKNOWN_MEMBER_ID
    d = _join(loaded, 101.6)
    assert isinstance(d, Wait) and loaded.state == S.PREPARING_REBALANCE  # nobody unheard left: a rebalance


def test_a_newcomer_of_another_client_replaces_nobody():
    loaded, old = _failed_over(2)
    other = loaded.join(101, member_id="", instance_id=None, client_id="other", client_host="h",
                        session_timeout=10.0, rebalance_timeout=30.0, protocol_type="consumer",
                        protocols=[("range", SUB)], require_known_member_id=False)
    assert not [e for e in _drain(loaded) if isinstance(e, MemberRemoved)]
    assert loaded.state == S.PREPARING_REBALANCE and set(loaded.members) == {*old, other.member_id}
    loaded.tick(110)  # the loaded members' sessions: as before, they expire unheard
    assert loaded.state == S.COMPLETING_REBALANCE and set(loaded.members) == {other.member_id}


def test_without_a_failover_a_newcomer_replaces_nobody():
    g = _group()
    a, b = _stable(g, 0, members=2)
    c = _join(g, 1).member_id
    assert not [e for e in _drain(g) if isinstance(e, MemberRemoved)]
    assert set(g.members) == {a, b, c}


def test_a_full_group_after_a_failover_lets_the_replacing_members_in():
    g = _group(max_size=2)
    _stable(g, 0, members=2)
    loaded = restore("g", snapshot(g), now=100.0, config=g.config)
    reply = _join(loaded, 101)
    assert isinstance(reply, JoinReply) and reply.error == E.NONE and len(loaded.members) == 2


def test_a_loaded_member_heard_through_a_commit_or_a_sync_is_not_replaced():
    loaded, (a, b) = _failed_over(2)
    assert loaded.commit_check(100.5, a, loaded.generation, None) == E.NONE
    assert loaded.sync(100.6, b, loaded.generation, None, None, None, {}).error == E.NONE
    _join(loaded, 101)
    assert not [e for e in _drain(loaded) if isinstance(e, MemberRemoved)]


def test_seed_coordinator_failure_during_rebalance_fails_syncs_and_rebalances():
    g = _group()
    a = _join(g, 0).member_id
    g.tick(1)
    _drain(g)
    assert isinstance(g.sync(1.1, a, 1, None, None, None, {}), Wait)
    g.set_assignment(1.1, 1, {a: b"x"})
    g.persisted(1.2, 1, E.NOT_COORDINATOR)  # the generation could not be stored
    effects = _drain(g)
    assert SyncReply(a, E.NOT_COORDINATOR) in effects and g.state == S.PREPARING_REBALANCE


def test_sync_is_answered_once_the_generation_is_persisted():
    g = _group()
    a, b = _join(g, 0).member_id, _join(g, 0).member_id
    g.tick(1)
    _drain(g)
    assert isinstance(g.sync(1.1, b, 1, None, None, None, {}), Wait)
    g.set_assignment(1.1, 1, {a: b"A", b: b"B"})
    assert PersistNeeded(1) in _drain(g)
    assert g.state == S.COMPLETING_REBALANCE  # not before it is stored
    g.persisted(1.2, 1)
    assert SyncReply(b, E.NONE, "consumer", "range", b"B") in _drain(g)
    assert g.sync(1.3, a, 1, None, None, None, {}).assignment == b"A"
    assert g.sync(1.3, a, 0, None, None, None, {}).error == E.ILLEGAL_GENERATION


def test_static_member_restart_keeps_its_assignment_without_a_rebalance():
    g = _group()
    first = _join(g, 0, instance="pod-1")
    g.tick(1)
    g.set_assignment(1, 1, {first.member_id: b"mine"})
    g.persisted(1, 1)
    _drain(g)
    again = _join(g, 5, instance="pod-1")  # restarted: no member id, same instance id
    assert again.error == E.NONE and again.member_id != first.member_id and g.generation == 1
    assert g.state == S.STABLE
    assert g.sync(5, again.member_id, 1, "pod-1", None, None, {}).assignment == b"mine"
    assert g.heartbeat(5, first.member_id, 1, "pod-1") == E.FENCED_INSTANCE_ID


def test_the_leaders_assignment_when_the_server_has_no_such_strategy():
    g = _group()
    a, b = _join(g, 0).member_id, _join(g, 0).member_id
    g.tick(1)
    assert AssignmentNeeded(1) in _drain(g)
    g.leader_assigns = True  # what the runtime does when no assignor has the voted name
    assert isinstance(g.sync(1.1, b, 1, None, None, None, {}), Wait)
    assert isinstance(g.sync(1.2, a, 1, None, "consumer", "range", {a: b"A", b: b"B"}), Wait)
    assert PersistNeeded(1) in _drain(g)
    g.persisted(1.3, 1)
    assert {r.member_id: r.assignment for r in _drain(g) if isinstance(r, SyncReply)} == {a: b"A", b: b"B"}


def test_members_that_never_sync_for_the_leader_are_removed_at_the_rebalance_timeout():
    g = _group()
    a, b = _join(g, 0, rebalance=20).member_id, _join(g, 0, rebalance=20).member_id
    g.tick(1)
    _drain(g)
    g.leader_assigns = True
    assert isinstance(g.sync(2, b, 1, None, None, None, {}), Wait)
    for now in (9, 18):  # the leader heartbeats, so its session does not end it first
        assert g.heartbeat(now, a, 1, None) == E.NONE
    g.tick(18)
    assert g.next_deadline(18) == 21  # the sync deadline: the longest rebalance timeout
    g.tick(21)  # the leader never sent its SyncGroup
    out = _drain(g)
    assert MemberRemoved(a, "sync timeout", 1) in out
    assert SyncReply(b, E.REBALANCE_IN_PROGRESS) in out
    assert g.state == S.PREPARING_REBALANCE and list(g.members) == [b]


def test_a_static_member_with_a_stale_member_id_is_fenced():
    g = _group()
    _join(g, 0, instance="pod-1")
    g.tick(1)
    current = next(iter(g.members))
    assert _join(g, 2, "someone-else", instance="pod-1").error == E.FENCED_INSTANCE_ID
    assert g.sync(2, "someone-else", 1, "pod-1", None, None, {}).error == E.FENCED_INSTANCE_ID
    assert g.commit_check(2, "someone-else", 1, "pod-1") == E.FENCED_INSTANCE_ID
    assert g.leave(2, [("someone-else", "pod-1")]) == [E.FENCED_INSTANCE_ID]
    assert list(g.members) == [current]


def test_an_instance_id_nobody_joined_with_is_an_unknown_member_even_under_a_known_member_id():
    g = _group()
    (a,) = _stable(g, 0, members=1)
    assert g.heartbeat(1, a, 1, "pod-9") == E.UNKNOWN_MEMBER_ID
    assert g.sync(1, a, 1, "pod-9", None, None, {}).error == E.UNKNOWN_MEMBER_ID
    assert g.commit_check(1, a, 1, "pod-9") == E.UNKNOWN_MEMBER_ID
    assert g.heartbeat(1, a, 1, None) == E.NONE  # the member itself is still in its generation


def test_leave_triggers_a_rebalance_and_an_empty_group():
    g = _group()
    a, b = _stable(g, 0, members=2)
    assert g.leave(1, [(b, None), ("ghost", None)]) == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert g.state == S.PREPARING_REBALANCE
    assert isinstance(_join(g, 1, a), Wait)  # the last one to rejoin completes it at once
    assert g.state == S.COMPLETING_REBALANCE and g.generation == 2
    assert g.leave(2, [(a, None)]) == [E.NONE]
    assert g.state == S.EMPTY and g.generation == 3


def test_the_vote_picks_what_most_members_prefer():
    g = _group()
    _join(g, 0, protocols=[("roundrobin", SUB), ("range", SUB)])
    _join(g, 0, protocols=[("range", SUB), ("roundrobin", SUB)])
    _join(g, 0, protocols=[("range", SUB)])
    g.tick(1)
    assert g.protocol_name == "range"


# -- the runtime's timers, under MockClock ------------------------------------------------------

async def _persist_nothing(group_id: str, data: dict) -> None:
    pass


def _set(**config) -> GroupSet:
    return GroupSet(GroupConfig(**config), dict(BUILT_IN), lambda topic: 4, _persist_nothing)


def _request(member_id: str = "", session: float = 10.0) -> dict:
    return dict(member_id=member_id, instance_id=None, client_id="c", client_host="h",
                session_timeout=session, rebalance_timeout=30.0, protocol_type="consumer",
                protocols=[("range", SUB)], require_known_member_id=False)


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def test_initial_rebalance_delay_makes_one_generation_of_a_fleet(autojump_clock):
    groups = _set(initial_rebalance_delay=3.0)
    replies = []
    async with trio.open_nursery() as nursery:
        await nursery.start(groups.run)
        start = trio.current_time()

        async def member(delay: float):
            await trio.sleep(delay)
            replies.append(await groups.join("g", **_request()))

        async with trio.open_nursery() as fleet:
            for delay in (0, 1, 2, 2.5):
                fleet.start_soon(member, delay)
        assert {r.generation for r in replies} == {1}
        assert trio.current_time() - start == pytest.approx(2.5 + 3.0)  # extended by each join
        nursery.cancel_scope.cancel()


async def test_session_expiry_removes_a_silent_member(autojump_clock):
    groups = _set(initial_rebalance_delay=0.0, min_session_timeout=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(groups.run)
        a = await groups.join("g", **_request(session=5))
        sync = await groups.sync("g", a.member_id, generation=1, instance_id=None, protocol_type=None,
                                 protocol_name=None, assignments={})
        assert sync.error == E.NONE
        topics = decode_assignment(sync.assignment)[1].assigned_partitions
        assert [(tp.topic, tp.partitions) for tp in topics] == [("t", [0, 1, 2, 3])]
        for _ in range(4):  # heartbeats keep it alive past its session timeout
            await trio.sleep(3)
            assert groups.heartbeat("g", a.member_id, 1, None) == E.NONE
        await trio.sleep(5.001)  # silence: expired by the group-partition's one timer
        assert groups.heartbeat("g", a.member_id, 1, None) == E.UNKNOWN_MEMBER_ID
        assert groups.group("g").state == S.EMPTY
        nursery.cancel_scope.cancel()


async def test_rebalance_timeout_answers_the_members_that_rejoined(autojump_clock):
    groups = _set(initial_rebalance_delay=0.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(groups.run)
        a = await groups.join("g", **_request())
        b_reply = []
        nursery.start_soon(lambda: _append(b_reply, groups.join("g", **_request())))
        await trio.sleep(1)
        # a, the old member, must rejoin; it does not (it is slow) but keeps heartbeating
        start = trio.current_time()
        while not b_reply:
            assert groups.heartbeat("g", a.member_id, 1, None) in (E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID)
            await trio.sleep(2)
        assert b_reply[0].generation == 2 and trio.current_time() - start >= 29
        assert a.member_id not in groups.group("g").members
        nursery.cancel_scope.cancel()


async def _append(out: list, awaitable) -> None:
    out.append(await awaitable)


async def test_a_pending_member_that_never_returns_expires(autojump_clock):
    groups = _set(initial_rebalance_delay=0.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(groups.run)
        asked = await groups.join("g", **{**_request(session=7), "require_known_member_id": True})
        assert asked.error == E.MEMBER_ID_REQUIRED and asked.member_id in groups.group("g").pending
        await trio.sleep(7.001)  # it never came back with its id
        assert groups.group("g").pending == {}
        late = await groups.join("g", **_request(asked.member_id))
        assert late.error == E.UNKNOWN_MEMBER_ID
        nursery.cancel_scope.cancel()


async def test_a_leader_that_never_syncs_is_removed_at_the_rebalance_timeout(autojump_clock):
    groups = GroupSet(GroupConfig(initial_rebalance_delay=1.0), {}, lambda topic: 4, _persist_nothing)
    async with trio.open_nursery() as nursery:
        await nursery.start(groups.run)
        replies = []
        async with trio.open_nursery() as joining:  # no server-side strategy: the leader assigns
            for _ in range(2):
                joining.start_soon(lambda: _append(replies, groups.join("g", **_request(session=60))))
        leader = replies[0].leader
        follower = next(r.member_id for r in replies if r.member_id != leader)
        start = trio.current_time()
        answer = await groups.sync("g", follower, generation=1, instance_id=None, protocol_type=None,
                                   protocol_name=None, assignments={})
        assert answer.error == E.REBALANCE_IN_PROGRESS
        assert trio.current_time() - start == pytest.approx(30.0)  # the rebalance timeout
        assert list(groups.group("g").members) == [follower]
        nursery.cancel_scope.cancel()


def test_a_static_leader_back_within_its_session_keeps_its_place_and_its_old_id_is_named():
    """KIP-345: a static leader restarted within its session keeps its assignment without a
    rebalance, and its reply names the member id it had before (below JoinGroup v9 the API
    names that id as leader: a follower's answer); a static follower's answer is a
    follower's. Before, a client below v9 was asked to assign, and rejoined (issue 38)."""
    g = _group()
    leader, follower = _join(g, 0, instance="pod-1"), _join(g, 0, instance="pod-2")
    g.tick(1)
    g.set_assignment(1, 1, {leader.member_id: b"L", follower.member_id: b"F"})
    g.persisted(1, 1)
    _drain(g)
    again = _join(g, 5, instance="pod-1")
    assert again.error == E.NONE and again.replaced == leader.member_id
    assert again.leader == again.member_id != leader.member_id
    assert {mid for mid, _, _ in again.members} == {again.member_id, follower.member_id}
    assert g.state == S.STABLE and g.generation == 1
    assert g.sync(5, again.member_id, 1, "pod-1", None, None, {}).assignment == b"L"
    back = _join(g, 6, instance="pod-2")
    assert not back.replaced and back.leader == again.member_id and back.members == ()
    assert g.sync(6, back.member_id, 1, "pod-2", None, None, {}).assignment == b"F"
    # no rebalance: only the generation written again with each new member id
    assert g.state == S.STABLE and g.generation == 1 and _drain(g) == [MembersChanged(1), MembersChanged(1)]


async def test_a_member_id_taken_over_in_a_stable_generation_is_stored_and_survives_a_failover(autojump_clock):
    # before, only the next generation was written: a new owner loaded the old member id, and
    # fenced the static member (FENCED_INSTANCE_ID) whose instance id it named
    stored = StoredGroups()
    groups = GroupSet(GroupConfig(initial_rebalance_delay=0.0), dict(BUILT_IN), lambda topic: 4, stored)
    static = {**_request(), "instance_id": "pod-1"}
    async with trio.open_nursery() as nursery:
        await nursery.start(groups.run)
        first = await groups.join("g", **static)
        await groups.sync("g", first.member_id, generation=1, instance_id="pod-1", protocol_type=None,
                          protocol_name=None, assignments={})
        again = await groups.join("g", **static)  # restarted within its session
        assert again.member_id != first.member_id and again.generation == 1
        await trio.sleep(0.1)  # the write
        nursery.cancel_scope.cancel()
    record = stored.records["g"]
    assert [m["id"] for m in record["members"]] == [again.member_id] and record["generation"] == 1
    loaded = restore("g", record, now=100.0, config=groups.config)
    assert loaded.heartbeat(100.5, again.member_id, 1, "pod-1") == E.NONE


@pytest.mark.parametrize("version", [5, 7, 8, 9])
async def test_joingroup_answers_a_static_leader_back_as_a_follower_below_v9(autojump_clock, version):
    from protocol import RequestHeader, decode_request, encode_request
    from protocol import messages as m
    from protocol.schemas import JOIN_GROUP
    from tests.pure.test_consumer_group_fast_path import CLIENT, World

    world = World(acls=False)

    async def join(member_id: str = ""):
        request = m.JoinGroupRequest(group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=30_000,
                                     member_id=member_id, group_instance_id="pod-1", protocol_type="consumer",
                                     protocols=[m.JoinGroupRequestProtocol(name="range", metadata=SUB)])
        header, decoded = decode_request(encode_request(RequestHeader(JOIN_GROUP.key, version, 1, "c"), request)[4:])
        return await world.api.join_group(header, decoded, CLIENT)

    async with trio.open_nursery() as nursery:
        await nursery.start(world.groups.run)
        first = await join()
        assert first.error_code == E.NONE and first.leader == first.member_id
        assert (await world.groups.sync("g", first.member_id, generation=first.generation_id, instance_id="pod-1",
                                        protocol_type=None, protocol_name=None, assignments={})).error == E.NONE
        again = await join()
        assert again.error_code == E.NONE and again.generation_id == first.generation_id
        if version >= 9:  # named leader, not told to skip (GroupApi.join_group says why)
            assert not again.skip_assignment and again.leader == again.member_id and len(again.members) == 1
        else:  # a follower's answer: the old id leads, no members
            assert again.leader == first.member_id != again.member_id and again.members == []
        assert world.groups.group("g").generation == first.generation_id
        nursery.cancel_scope.cancel()


def test_a_static_member_back_with_other_user_data_keeps_its_place_but_not_with_other_topics():
    """As Kafka: a static member restarted within its session keeps its place when its
    protocols would not change the group's vote, though its subscription's user data differs
    (a cooperative member restarted owns nothing yet; the one before named what it held, seen
    with franz-go behind the gateway). Here the assignment is the server's, so other topics
    rebalance."""
    owned = encode_subscription(ConsumerProtocolSubscription(
        topics=["t"], owned_partitions=[TopicPartition(topic="t", partitions=[0, 1])]), 1)
    fresh = encode_subscription(ConsumerProtocolSubscription(topics=["t"]), 1)
    other = encode_subscription(ConsumerProtocolSubscription(topics=["t", "u"]), 1)
    g = _group()
    first = _join(g, 0, instance="pod-1", protocols=(("cooperative-sticky", owned),))
    g.tick(1)
    g.set_assignment(1, 1, {first.member_id: b"mine"})
    g.persisted(1, 1)
    _drain(g)
    again = _join(g, 5, instance="pod-1", protocols=(("cooperative-sticky", fresh),))
    assert again.error == E.NONE and g.state == S.STABLE and g.generation == 1
    assert g.sync(5, again.member_id, 1, "pod-1", None, None, {}).assignment == b"mine"
    assert isinstance(_join(g, 6, instance="pod-1", protocols=(("cooperative-sticky", other),)), Wait)
    assert g.state == S.COMPLETING_REBALANCE and g.generation == 2  # a new generation, for the new topics
