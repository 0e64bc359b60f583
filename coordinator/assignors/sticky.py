"""sticky: balanced first, then as little movement as balance allows.

Balanced means what Kafka's sticky assignor means by it: no partition could move from its
member to another subscriber of its topic that holds at least two fewer partitions. With
identical subscriptions that is "loads differ by at most one".

Two paths, as in Kafka's own implementation:
- identical subscriptions: each member's quota is known up front (`base` or `base + 1`);
  the members that own the most keep the larger quotas, everyone keeps what it owns up to
  its quota, and only the excess and the unowned partitions move. No assignment that is
  balanced keeps more, so this is also the least movement.
- different subscriptions: owned partitions stay where they may, the rest go to the least
  loaded subscriber (partitions with the fewest candidates first), then single moves from a
  loaded member to a subscriber with at least two fewer repair the balance; every move
  lowers the sum of squared loads, so it ends.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from .base import Assigned, MemberSubscription, Partitions, member_order

TopicPartition = tuple[str, int]


class StickyAssignor:
    name = "sticky"

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assigned:
        return Assigned(to_partitions(members, plan(members, partitions)))


def plan(members: list[MemberSubscription], partitions: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """Member id -> its (topic, partition)s: balanced, then sticky."""
    ordered = member_order(members)
    subscribed = {m.member_id: frozenset(t for t in m.topics if partitions.get(t)) for m in ordered}
    kept, taken = _still_owned(ordered, subscribed, partitions)
    if len(set(subscribed.values())) <= 1:
        return _identical(ordered, subscribed, partitions, kept, taken)
    return _general(ordered, subscribed, partitions, kept, taken)


def to_partitions(members: list[MemberSubscription], planned: dict[str, list[TopicPartition]]) -> dict[str, Partitions]:
    result: dict[str, Partitions] = {m.member_id: {} for m in members}
    for member_id, tps in planned.items():
        topics = result[member_id]
        for topic, p in sorted(tps):
            topics.setdefault(topic, []).append(p)
    return result


def _still_owned(ordered, subscribed, partitions):
    """What each member owns and may keep: its topic is subscribed, the partition exists,
    and no member earlier in order claimed it too (stale reports can overlap)."""
    taken: set[TopicPartition] = set()
    kept: dict[str, list[TopicPartition]] = {}
    for m in ordered:
        mine = []
        for topic, ps in sorted(m.owned.items()):
            if topic not in subscribed[m.member_id]:
                continue
            for p in sorted(set(ps)):
                if 0 <= p < partitions[topic] and (topic, p) not in taken:
                    taken.add((topic, p))
                    mine.append((topic, p))
        kept[m.member_id] = mine
    return kept, taken


def _identical(ordered, subscribed, partitions, kept, taken):
    if not ordered:
        return {}
    topics = sorted(subscribed[ordered[0].member_id])
    total = sum(partitions[t] for t in topics)
    base, extra = divmod(total, len(ordered))
    # the members that own the most keep the `extra` larger quotas: the least movement
    by_owned = sorted(ordered, key=lambda m: -len(kept[m.member_id]))
    quota = {m.member_id: base + (1 if i < extra else 0) for i, m in enumerate(by_owned)}
    result: dict[str, list[TopicPartition]] = {}
    for m in ordered:
        mine = kept[m.member_id]
        result[m.member_id] = mine[:quota[m.member_id]]
        taken.difference_update(mine[quota[m.member_id]:])
    free = [(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken]
    i = 0
    for m in ordered:
        need = quota[m.member_id] - len(result[m.member_id])
        result[m.member_id] += free[i:i + need]
        i += need
    return result


def _general(ordered, subscribed, partitions, kept, taken):
    result = {m.member_id: list(kept[m.member_id]) for m in ordered}
    rank = {m.member_id: i for i, m in enumerate(ordered)}
    subscribers: dict[str, list[str]] = {}
    for m in ordered:
        for topic in subscribed[m.member_id]:
            subscribers.setdefault(topic, []).append(m.member_id)
    # unowned partitions, topics with the fewest subscribers first, each partition to the
    # least loaded subscriber; among equals the one with the fewest topics, which has the
    # fewest other chances (so the balancing below rarely has to move owned partitions)
    width = {m.member_id: len(subscribed[m.member_id]) for m in ordered}
    for topic in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        heap = [(len(result[mid]), width[mid], rank[mid], mid) for mid in subscribers[topic]]
        heapq.heapify(heap)
        for p in range(partitions[topic]):
            if (topic, p) in taken:
                continue
            _, w, r, mid = heapq.heappop(heap)
            result[mid].append((topic, p))
            heapq.heappush(heap, (len(result[mid]), w, r, mid))
    _rebalance(subscribers, result, rank)
    return result


def _rebalance(subscribers, result, rank) -> None:
    """Move single partitions from a member to a subscriber of its topic holding at least
    two fewer, until none can move: Kafka's definition of balanced.

    Each topic keeps a heap of its subscribers by (load, rank); a member whose load changes
    is pushed again and its old entries are dropped when they surface, so finding a topic's
    least loaded subscriber costs a peek, not a scan of the group."""
    load = {mid: len(tps) for mid, tps in result.items()}
    topics_of: dict[str, list[str]] = {mid: [] for mid in result}
    heaps = {}
    for topic, mids in subscribers.items():
        heaps[topic] = [(load[mid], rank[mid], mid) for mid in mids]
        heapq.heapify(heaps[topic])
        for mid in mids:
            topics_of[mid].append(topic)

    def least(topic: str) -> tuple[int, str]:
        heap = heaps[topic]
        while heap[0][0] != load[heap[0][2]]:
            heapq.heappop(heap)
        return heap[0][0], heap[0][2]

    def change(mid: str, by: int) -> None:
        load[mid] += by
        for topic in topics_of[mid]:
            heapq.heappush(heaps[topic], (load[mid], rank[mid], mid))

    moved = True
    while moved:
        moved = False
        for donor in sorted(result, key=lambda mid: (-load[mid], rank[mid])):
            for tp in list(reversed(result[donor])):  # newest first: owned ones stay longest
                target_load, target = least(tp[0])
                if target_load + 1 < load[donor]:
                    result[donor].remove(tp)
                    result[target].append(tp)
                    change(donor, -1)
                    change(target, +1)
                    moved = True


class CooperativeStickyAssignor:
    """cooperative-sticky (KIP-429): sticky's plan, except that a partition still held by
    another member of the group is not given to its new owner in this generation. Its
    holder sees it missing, revokes it and rejoins; in that follow-up rebalance it is free
    and goes where the plan wants it. Members never hold a partition at the same time.

    The follow-up plans again from what members then hold, and with different
    subscriptions that plan can differ from this one and revoke again (about 1 rebalance
    in 150 in random groups). So before answering, the assignor plans the follow-up
    itself; if that would revoke a grant, it grants from the follow-up's plan instead, and
    checks again (a few times at most): the follow-up then only hands out what was
    withheld."""

    name = "cooperative-sticky"
    LOOKAHEAD = 8

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assigned:
        holder: dict[TopicPartition, str] = {}
        for m in member_order(members):
            for topic, ps in m.owned.items():
                for p in ps:
                    holder.setdefault((topic, p), m.member_id)
        planned = plan(members, partitions)
        for _ in range(self.LOOKAHEAD):
            granted = {mid: [tp for tp in tps if holder.get(tp, mid) == mid] for mid, tps in planned.items()}
            if granted == planned:
                break  # nothing withheld: no follow-up
            holding = to_partitions(members, granted)
            follow_up = plan([replace(m, owned=holding[m.member_id]) for m in members], partitions)
            if all(set(tps) <= set(follow_up[mid]) for mid, tps in granted.items()):
                break  # the follow-up keeps every grant
            planned = follow_up
        return Assigned(to_partitions(members, granted))


class UniformAssignor(StickyAssignor):
    """uniform: the semantics of Kafka's server-side uniform assignor (KIP-848) for classic
    groups: balanced across heterogeneous subscriptions, then the least movement. That is
    exactly sticky's plan; the name is what consumers configured for it announce."""

    name = "uniform"
