"""`groupkeeper assign`: run a strategy on a described group, offline, and say how
balanced the result is and what it moves, before an operator rolls a change out.

Input: {"topics": {"t": 12}, "members": [{"id": "m1", "topics": ["t"], "owned": {"t": [0, 1]},
"instance": "pod-1"}]} ("owned" and "instance" optional). Output: {"assignment": {...},
"stats": {...}}.
"""

from __future__ import annotations

from typing import Any

from coordinator.assignors.base import Assignor, MemberSubscription, checked_assign


class InputError(ValueError):
    """The input does not describe a group; the message says where."""


def parse(document: Any) -> tuple[list[MemberSubscription], dict[str, int]]:
    if not isinstance(document, dict) or not isinstance(document.get("topics"), dict) \
            or not isinstance(document.get("members"), list):
        raise InputError('expected {"topics": {name: partitions}, "members": [...]}')
    topics = document["topics"]
    for name, count in topics.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InputError(f"topics.{name}: a partition count must be a non-negative integer")
    members, seen = [], set()
    for i, entry in enumerate(document["members"]):
        where = f"members[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
            raise InputError(f"{where}: needs an \"id\" string")
        if entry["id"] in seen:
            raise InputError(f"{where}: member id {entry['id']!r} appears twice")
        seen.add(entry["id"])
        subscribed = entry.get("topics")
        if not isinstance(subscribed, list) or not all(isinstance(t, str) for t in subscribed):
            raise InputError(f"{where}: \"topics\" must be a list of topic names")
        owned = entry.get("owned", {})
        if not isinstance(owned, dict) or not all(
                isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in ps)
                for ps in owned.values()):
            raise InputError(f"{where}: \"owned\" must map topics to lists of partitions")
        instance = entry.get("instance")
        if instance is not None and not isinstance(instance, str):
            raise InputError(f"{where}: \"instance\" must be a string")
        members.append(MemberSubscription(entry["id"], tuple(subscribed), instance, owned))
    return members, topics


def what_if(assignor: Assignor, members: list[MemberSubscription], topics: dict[str, int]) -> dict[str, Any]:
    assignment = checked_assign(assignor, members, topics).partitions  # StrategyFailed: say what
    before = {(t, p): m.member_id for m in members for t, ps in m.owned.items() for p in ps}
    after = {(t, p): mid for mid, ts in assignment.items() for t, ps in ts.items() for p in ps}
    loads = [sum(len(ps) for ps in ts.values()) for ts in assignment.values()]
    subscribed = {t for m in members for t in m.topics if topics.get(t)}
    return {
        "assignment": {mid: {t: ps for t, ps in sorted(ts.items())} for mid, ts in assignment.items()},
        "stats": {
            "members": len(members),
            "partitions": sum(topics[t] for t in subscribed),
            "min_load": min(loads, default=0),
            "max_load": max(loads, default=0),
            "moved": sum(1 for tp, owner in after.items() if tp in before and before[tp] != owner),
            "newly_assigned": sum(1 for tp in after if tp not in before),
            "unassigned": sum(topics[t] for t in subscribed) - len(after),
        },
    }
