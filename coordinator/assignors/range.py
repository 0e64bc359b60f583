"""range: per topic, consecutive partition ranges over the subscribed members in member-id
order, the first `partitions % members` members taking one more (the clients' RangeAssignor)."""

from __future__ import annotations

from .base import Assignment, MemberSubscription, empty


class RangeAssignor:
    name = "range"

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assignment:
        result = empty(members)
        by_topic: dict[str, list[str]] = {}
        for m in members:
            for topic in m.topics:
                by_topic.setdefault(topic, []).append(m.member_id)
        for topic, subscribers in by_topic.items():
            count = partitions.get(topic, 0)
            if not count:
                continue
            subscribers.sort()
            per, extra = divmod(count, len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                length = per + (1 if i < extra else 0)
                if length:
                    result[member_id][topic] = list(range(start, start + length))
                start += length
        return result
