"""roundrobin: every topic-partition in (topic, partition) order to the next member, in the
clients' member order, that subscribes to its topic (the clients' RoundRobinAssignor)."""

from __future__ import annotations

from .base import Assigned, MemberSubscription, empty, member_order


class RoundRobinAssignor:
    name = "roundrobin"

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assigned:
        result = empty(members)
        ordered = member_order(members)
        subscribed = [set(m.topics) for m in ordered]
        i = 0
        for topic in sorted({t for m in ordered for t in m.topics if partitions.get(t)}):
            for p in range(partitions[topic]):
                while topic not in subscribed[i % len(ordered)]:
                    i += 1
                result[ordered[i % len(ordered)].member_id].setdefault(topic, []).append(p)
                i += 1
        return Assigned(result)
