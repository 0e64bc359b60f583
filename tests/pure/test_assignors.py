"""Assignment strategies, pure: properties every strategy keeps (hypothesis), the classic
ones against kafka-python's own assignor classes, and sticky's balance and movement."""

from __future__ import annotations

from collections import namedtuple

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from coordinator.assignors import BUILT_IN, MemberSubscription, StickyRangeAssignor
from coordinator.assignors.sticky import StickyAssignor

TOPICS = ["a", "b", "c", "d"]


@st.composite
def groups(draw, identical: bool | None = None, static: bool = True):
    """(members, partition counts): up to 12 members over up to 4 topics."""
    partitions = {t: draw(st.integers(0, 9)) for t in TOPICS[:draw(st.integers(1, 4))]}
    count = draw(st.integers(1, 12))
    same = draw(st.booleans()) if identical is None else identical
    shared = draw(st.sets(st.sampled_from(sorted(partitions)), min_size=1))
    members = []
    for i in range(count):
        topics = shared if same else draw(st.sets(st.sampled_from(sorted(partitions)), min_size=1))
        instance = f"pod-{i}" if static and draw(st.booleans()) else None
        members.append(MemberSubscription(f"member-{draw(st.uuids()).hex[:8]}-{i}", tuple(sorted(topics)), instance))
    return members, partitions


def check_complete(members, partitions, result) -> None:
    """Every partition of a subscribed topic to exactly one of its subscribers."""
    assert set(result) == {m.member_id for m in members}
    subscribed = {m.member_id: set(m.topics) for m in members}
    seen = []
    for member_id, topics in result.items():
        for topic, ps in topics.items():
            assert topic in subscribed[member_id], "a partition went to a non-subscriber"
            seen += [(topic, p) for p in ps]
    wanted = {(t, p) for m in members for t in m.topics for p in range(partitions.get(t, 0))}
    assert sorted(seen) == sorted(wanted)


def check_balanced(members, result) -> None:
    """No partition could move to a subscriber of its topic holding two fewer."""
    load = {mid: sum(len(ps) for ps in topics.values()) for mid, topics in result.items()}
    subscribers = {}
    for m in members:
        for t in m.topics:
            subscribers.setdefault(t, []).append(m.member_id)
    for member_id, topics in result.items():
        for topic, ps in topics.items():
            if ps:
                assert min(load[o] for o in subscribers[topic]) >= load[member_id] - 1


@settings(max_examples=150, deadline=None)
@given(groups(), st.sampled_from(sorted(BUILT_IN)))
def test_every_strategy_assigns_each_partition_once_and_only_to_subscribers(group, name):
    members, partitions = group
    check_complete(members, partitions, BUILT_IN[name].assign(members, partitions).partitions)


# -- the classic strategies give what the clients' own assignors give ---------------------

Member = namedtuple("Member", "member_id group_instance_id metadata")
Subscription = namedtuple("Subscription", "topics")


class Cluster:
    def __init__(self, partitions):
        self.partitions = partitions

    def partitions_for_topic(self, topic):
        return set(range(self.partitions[topic])) if self.partitions.get(topic) else None


def kafka_python(assignor, members, partitions):
    """kafka-python's answer, where it has one. Two of its bugs are stepped around:
    it groups static and dynamic members with itertools.groupby on the given order (so only
    static-first input works as meant), and its roundrobin raises KeyError when it skips a
    member that does not subscribe to a topic (it looks the member up by the wrong key)."""
    ordered = sorted(members, key=lambda m: m.instance_id is None)
    try:
        answer = assignor.assign(Cluster(partitions), [Member(m.member_id, m.instance_id, Subscription(list(m.topics)))
                                                       for m in ordered])
    except KeyError:
        assume(False)
    return {mid: {t: sorted(ps) for t, ps in a.assigned_partitions if ps} for mid, a in answer.items()}


@settings(max_examples=200, deadline=None)
@given(groups())
def test_range_is_the_clients_range(group):
    members, partitions = group
    assert BUILT_IN["range"].assign(members, partitions).partitions == kafka_python(
        RangePartitionAssignor, members, partitions)


@settings(max_examples=200, deadline=None)
@given(groups())
def test_roundrobin_is_the_clients_roundrobin(group):
    members, partitions = group
    assert BUILT_IN["roundrobin"].assign(members, partitions).partitions == kafka_python(
        RoundRobinPartitionAssignor, members, partitions)


# -- sticky -----------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(groups(), st.sampled_from(["sticky", "uniform"]))
def test_sticky_and_uniform_are_balanced(group, name):
    members, partitions = group
    result = BUILT_IN[name].assign(members, partitions).partitions
    check_balanced(members, result)
    if len({m.topics for m in members}) == 1:
        loads = [sum(len(ps) for ps in topics.values()) for topics in result.values()]
        assert max(loads) - min(loads) <= 1


@settings(max_examples=200, deadline=None)
@given(groups(identical=True, static=False), st.data(), st.sampled_from(["sticky", "uniform"]))
def test_sticky_moves_only_what_balance_requires_when_members_come_and_go(group, data, name):
    members, partitions = group
    before = BUILT_IN[name].assign(members, partitions).partitions
    leaving = data.draw(st.sets(st.sampled_from([m.member_id for m in members]), max_size=len(members) - 1))
    joining = data.draw(st.integers(0, 4))
    staying = [MemberSubscription(m.member_id, m.topics, owned=before[m.member_id])
               for m in members if m.member_id not in leaving]
    after_members = staying + [MemberSubscription(f"new-{i}", members[0].topics) for i in range(joining)]
    after = BUILT_IN[name].assign(after_members, partitions).partitions
    check_complete(after_members, partitions, after)
    total = sum(partitions.get(t, 0) for t in members[0].topics)
    floor = total // len(after_members)
    for m in staying:
        owned = {(t, p) for t, ps in m.owned.items() for p in ps}
        kept = owned & {(t, p) for t, ps in after[m.member_id].items() for p in ps}
        # a member keeps everything it had up to the smaller quota: nothing moves needlessly
        assert len(kept) >= min(len(owned), floor)
        # and gains nothing while it gives anything away
        assert len(kept) == len(owned) or sum(len(ps) for ps in after[m.member_id].values()) == len(kept)


@settings(max_examples=200, deadline=None)
@given(groups(), st.sampled_from(["sticky", "cooperative-sticky", "uniform"]))
def test_sticky_strategies_leave_a_settled_group_as_it_is(group, name):
    """Any subscriptions: once members hold what the strategy gave them, the next rebalance
    (a member's metadata changed, a static member came back) moves nothing."""
    members, partitions = group
    first = BUILT_IN[name].assign(members, partitions).partitions
    settled = [MemberSubscription(m.member_id, m.topics, m.instance_id, owned=first[m.member_id]) for m in members]
    assert BUILT_IN[name].assign(settled, partitions).partitions == first


def test_sticky_keeps_a_stable_group_where_it_is():
    members = [MemberSubscription(f"m{i}", ("a", "b")) for i in range(3)]
    first = StickyAssignor().assign(members, {"a": 4, "b": 5}).partitions
    again = [MemberSubscription(m.member_id, m.topics, owned=first[m.member_id]) for m in members]
    assert StickyAssignor().assign(again, {"a": 4, "b": 5}).partitions == first


def test_sticky_with_different_subscriptions_gives_what_only_one_can_take_to_it():
    members = [MemberSubscription("x", ("a",)), MemberSubscription("y", ("a", "b")),
               MemberSubscription("z", ("b",))]
    result = StickyAssignor().assign(members, {"a": 4, "b": 4}).partitions
    check_complete(members, {"a": 4, "b": 4}, result)
    assert sorted(sum(len(ps) for ps in t.values()) for t in result.values()) == [2, 3, 3]


@settings(max_examples=200, deadline=None)
@given(groups(static=False), st.data())
def test_cooperative_sticky_never_gives_a_partition_while_another_member_holds_it(group, data):
    members, partitions = group
    cooperative = BUILT_IN["cooperative-sticky"]
    now = _comings_and_goings(cooperative, members, partitions, data)
    holder = {(t, p): m.member_id for m in now for t, ps in m.owned.items() for p in ps}
    for member_id, topics in cooperative.assign(now, partitions).partitions.items():
        for topic, ps in topics.items():
            assert all(holder.get((topic, p), member_id) == member_id for p in ps), "given while held"


@settings(max_examples=400, deadline=None)
@given(groups(static=False), st.data())
def test_cooperative_sticky_completes_the_move_in_the_follow_up(group, data):
    """The follow-up keeps every grant and hands out what was revoked: balanced, complete,
    no third round (with different subscriptions that needs the assignor's look-ahead)."""
    members, partitions = group
    cooperative = BUILT_IN["cooperative-sticky"]
    now = _comings_and_goings(cooperative, members, partitions, data)
    first = cooperative.assign(now, partitions).partitions
    follow_up = [MemberSubscription(m.member_id, m.topics, owned=first[m.member_id]) for m in now]
    second = cooperative.assign(follow_up, partitions).partitions
    check_complete(follow_up, partitions, second)
    check_balanced(follow_up, second)
    for m in follow_up:
        assert all(set(ps) <= set(second[m.member_id].get(t, [])) for t, ps in m.owned.items())


def test_cooperative_sticky_plans_the_follow_up_before_granting():
    """A group where the follow-up's own plan would revoke again without the look-ahead."""
    partitions = {"a": 5, "b": 1, "c": 6}
    cooperative = BUILT_IN["cooperative-sticky"]
    members = [MemberSubscription("m0", ("b",)), MemberSubscription("m1", ("c",)),
               MemberSubscription("m2", ("a", "b", "c"))]
    before = cooperative.assign(members, partitions).partitions
    now = [MemberSubscription(m.member_id, m.topics, owned=before[m.member_id]) for m in members[1:]]
    now.append(MemberSubscription("new", ("a", "c")))
    first = cooperative.assign(now, partitions).partitions
    follow_up = [MemberSubscription(m.member_id, m.topics, owned=first[m.member_id]) for m in now]
    second = cooperative.assign(follow_up, partitions).partitions
    check_complete(follow_up, partitions, second)
    for m in follow_up:
        assert all(set(ps) <= set(second[m.member_id].get(t, [])) for t, ps in m.owned.items())


def _comings_and_goings(assignor, members, partitions, data) -> list[MemberSubscription]:
    """The group after some members left and some joined, each holding what it was given."""
    before = assignor.assign(members, partitions).partitions
    leaving = data.draw(st.sets(st.sampled_from([m.member_id for m in members]), max_size=len(members) - 1))
    now = [MemberSubscription(m.member_id, m.topics, owned=before[m.member_id])
           for m in members if m.member_id not in leaving]
    return now + [MemberSubscription(f"new-{i}", members[i % len(members)].topics)
                  for i in range(data.draw(st.integers(0, 3)))]


# -- consumer-protocol groups' range (KIP-848): the clients' ranges, made sticky ----------

@settings(max_examples=200, deadline=None)
@given(groups(), st.data())
def test_sticky_range_is_complete_balanced_per_topic_and_the_clients_range_from_scratch(group, data):
    members, partitions = group
    sticky = StickyRangeAssignor()
    fresh = sticky.assign(members, partitions).partitions
    assert fresh == BUILT_IN["range"].assign(members, partitions).partitions  # nothing owned: plain ranges
    # then from any previous assignment (what members owned, even overlapping or out of range)
    owned = {m.member_id: {t: sorted(data.draw(st.sets(st.integers(0, 10), max_size=4))) for t in m.topics}
             for m in members}
    again = [MemberSubscription(m.member_id, m.topics, m.instance_id, owned=owned[m.member_id]) for m in members]
    result = sticky.assign(again, partitions).partitions
    check_complete(again, partitions, result)
    for topic, count in partitions.items():
        subscribers = [m.member_id for m in members if topic in m.topics]
        if subscribers:
            sizes = [len(result[s].get(topic, [])) for s in subscribers]
            assert max(sizes) - min(sizes) <= 1 and sum(sizes) == count


@settings(max_examples=200, deadline=None)
@given(groups(identical=True, static=False), st.integers(1, 4))
def test_sticky_range_keeps_what_members_own_within_their_share_when_others_join(group, joining):
    members, partitions = group
    sticky = StickyRangeAssignor()
    before = sticky.assign(members, partitions).partitions
    staying = [MemberSubscription(m.member_id, m.topics, owned=before[m.member_id]) for m in members]
    after_members = staying + [MemberSubscription(f"zz-new-{i}", members[0].topics) for i in range(joining)]
    after = sticky.assign(after_members, partitions).partitions
    check_complete(after_members, partitions, after)
    for topic in members[0].topics:
        share = partitions.get(topic, 0) // len(after_members)
        for m in staying:
            had, has = set(before[m.member_id].get(topic, [])), set(after[m.member_id].get(topic, []))
            assert len(had & has) >= min(len(had), share)  # nothing it may keep is moved
            assert has <= had or had <= has  # it only gives up, or only gains


def test_sticky_range_co_partitions_equal_topics_as_kafka_documents():
    members = [MemberSubscription("M0", ("T1", "T2")), MemberSubscription("M1", ("T1", "T2"))]
    assert StickyRangeAssignor().assign(members, {"T1": 3, "T2": 3}).partitions == {
        "M0": {"T1": [0, 1], "T2": [0, 1]}, "M1": {"T1": [2], "T2": [2]}}
