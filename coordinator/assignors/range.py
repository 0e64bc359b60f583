"""range: per topic, consecutive partition ranges over its subscribers in the clients'
member order, the first `partitions % subscribers` taking one more (the clients'
RangeAssignor)."""

from __future__ import annotations

from .base import Assigned, MemberSubscription, empty, member_order


class RangeAssignor:
    name = "range"

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assigned:
        result = empty(members)
        by_topic: dict[str, list[str]] = {}
        for m in member_order(members):
            for topic in m.topics:
                by_topic.setdefault(topic, []).append(m.member_id)
        for topic, subscribers in by_topic.items():
            per, extra = divmod(partitions.get(topic, 0), len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                length = per + (1 if i < extra else 0)
                if length:
                    result[member_id][topic] = list(range(start, start + length))
                start += length
        return Assigned(result)
