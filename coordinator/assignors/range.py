"""range: per topic, consecutive partition ranges over its subscribers in the clients'
member order, the first `partitions % subscribers` taking one more (the clients'
RangeAssignor)."""

from __future__ import annotations

from .base import Assigned, MemberSubscription, empty, member_order


class RangeAssignor:
    name = "range"

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assigned:
        result = empty(members)
        for topic, subscribers in _subscribers(members).items():
            per, extra = divmod(partitions.get(topic, 0), len(subscribers))
            start = 0
            for i, m in enumerate(subscribers):
                length = per + (1 if i < extra else 0)
                if length:
                    result[m.member_id][topic] = list(range(start, start + length))
                start += length
        return Assigned(result)


def _subscribers(members: list[MemberSubscription]) -> dict[str, list[MemberSubscription]]:
    """Each topic's subscribers, in the clients' member order."""
    by_topic: dict[str, list[MemberSubscription]] = {}
    for m in member_order(members):
        for topic in m.topics:
            by_topic.setdefault(topic, []).append(m)
    return by_topic


class StickyRangeAssignor:
    """range for consumer-protocol groups (KIP-848's server-side range): the same ranges
    when nothing is owned (so equal subscriptions to equally sized topics stay co-partitioned),
    but sticky: per topic, each member first keeps what it owns up to its share (the
    `partitions % subscribers` shares of one more going to members that already own that
    many), and only the rest is handed out in consecutive runs, in member order."""

    name = "range"

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assigned:
        result = empty(members)
        for topic, subscribers in _subscribers(members).items():
            count = partitions.get(topic, 0)
            per, extra = divmod(count, len(subscribers))
            kept: dict[str, list[int]] = {}
            taken: set[int] = set()
            for m in subscribers:  # what each owns, within its share
                owned = sorted(p for p in m.owned.get(topic, ()) if p < count and p not in taken)
                keep = owned[:per]
                if len(owned) > per and extra:
                    keep, extra = owned[:per + 1], extra - 1
                kept[m.member_id] = keep
                taken.update(keep)
            free = iter(p for p in range(count) if p not in taken)
            for m in subscribers:  # the rest, in consecutive runs, to whoever is short
                mine = kept[m.member_id]
                want = len(mine)
                if want <= per:
                    want = per + (1 if extra else 0)
                    extra -= want - per
                mine += [next(free) for _ in range(want - len(mine))]
                if mine:
                    result[m.member_id][topic] = sorted(mine)
        return Assigned(result)
