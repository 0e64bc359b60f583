"""roundrobin: every topic-partition in (topic, partition) order to the next member, in
member-id order, that subscribes to its topic (the clients' RoundRobinAssignor)."""

from __future__ import annotations

from .base import Assignment, MemberSubscription, empty


class RoundRobinAssignor:
    name = "roundrobin"

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assignment:
        result = empty(members)
        ordered = sorted(members, key=lambda m: m.member_id)
        if not ordered:
            return result
        subscribed = {m.member_id: set(m.topics) for m in ordered}
        topics = sorted({t for m in ordered for t in m.topics if partitions.get(t)})
        i = 0
        for topic in topics:
            for p in range(partitions[topic]):
                while topic not in subscribed[ordered[i % len(ordered)].member_id]:
                    i += 1
                result[ordered[i % len(ordered)].member_id].setdefault(topic, []).append(p)
                i += 1
        return result
