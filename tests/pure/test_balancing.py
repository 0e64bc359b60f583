"""The placement of group-partitions on instances: every one owned by a live instance, counts
within one of each other, and no more movement than a balanced placement needs."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings, strategies as st

from coordinator.cluster.balancing import balance, moved

instance_ids = st.sets(st.integers(0, 40), min_size=1, max_size=12)


@st.composite
def situations(draw):
    """A partition count, the previous placement (over instances some of which died) and the
    instances live now."""
    partitions = draw(st.integers(1, 120))
    before = draw(instance_ids)
    previous = draw(st.lists(st.one_of(st.none(), st.sampled_from(sorted(before))),
                             min_size=partitions, max_size=partitions))
    live = draw(st.sets(st.sampled_from(sorted(before | {41, 42, 43})), min_size=1))
    return partitions, previous, live


def _minimum_moves(partitions: int, previous, live) -> int:
    """What any balanced placement must move: everything not held by a live instance, and
    whatever live instances hold beyond the largest quota they could get."""
    held = Counter(owner for owner in previous if owner in live)
    base, extra = divmod(partitions, len(live))
    orphans = partitions - sum(held.values())
    # the `extra` instances holding the most get base + 1
    ranked = sorted(held.values(), reverse=True) + [0] * (len(live) - len(held))
    excess = sum(max(0, h - (base + (rank < extra))) for rank, h in enumerate(ranked))
    return orphans + excess


@settings(max_examples=400, deadline=None)
@given(situations())
def test_every_partition_has_one_live_owner_and_counts_differ_by_at_most_one(situation):
    partitions, previous, live = situation
    owners = balance(partitions, live, previous)
    assert len(owners) == partitions
    assert set(owners) <= live
    counts = Counter(owners)
    loads = [counts.get(i, 0) for i in live]
    assert max(loads) - min(loads) <= 1


@settings(max_examples=400, deadline=None)
@given(situations())
def test_moves_no_more_than_any_balanced_placement_must(situation):
    partitions, previous, live = situation
    owners = balance(partitions, live, previous)
    assert moved(previous, owners) == _minimum_moves(partitions, previous, live)
    # nothing a live instance keeps within its quota moves
    for p, owner in enumerate(owners):
        if previous[p] in live and owner != previous[p]:
            assert Counter(previous)[previous[p]] > Counter(owners)[previous[p]]


@settings(max_examples=200, deadline=None)
@given(situations())
def test_a_balanced_placement_is_kept_as_it_is(situation):
    partitions, previous, live = situation
    owners = balance(partitions, live, previous)
    assert balance(partitions, live, owners) == owners
    assert balance(partitions, list(reversed(sorted(live))), previous) == owners  # order does not matter


def test_a_new_instance_takes_its_share_from_the_most_loaded():
    previous = balance(50, {1, 2}, [])
    assert Counter(previous) == {1: 25, 2: 25}
    owners = balance(50, {1, 2, 3}, previous)
    counts = Counter(owners)
    assert sorted(counts.values()) == [16, 17, 17]
    # only the new instance gains; each old one gives up what it holds beyond its quota
    assert all(owners[p] in (previous[p], 3) for p in range(50))
    assert moved(previous, owners) == counts[3]


def test_a_dead_instances_share_is_spread_over_the_survivors():
    previous = balance(50, {1, 2, 3}, [])
    owners = balance(50, {1, 3}, previous)
    assert Counter(owners) == {1: 25, 3: 25}
    assert all(owners[p] == previous[p] for p in range(50) if previous[p] != 2)
    assert moved(previous, owners) == Counter(previous)[2]


def test_no_live_instance_places_nothing():
    assert balance(4, set(), [1, 1, 2, 2]) == [None] * 4


def test_the_first_placement_alternates_in_id_order():
    assert balance(6, {7, 3}, []) == [3, 7, 3, 7, 3, 7]
