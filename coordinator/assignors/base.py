"""The strategy interface: a pure function of the members and the topics' partition counts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

Partitions = dict[str, list[int]]  # topic -> partitions


@dataclass(frozen=True)
class MemberSubscription:
    """One member as a strategy sees it. `owned` is what it holds now: what it reported in
    its subscription (v1+), or else what the coordinator gave it in the last generation."""

    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    owned: Partitions = field(default_factory=dict)
    user_data: bytes | None = None


@dataclass
class Assigned:
    """A strategy's answer: partitions per member, and user data to send with them."""

    partitions: dict[str, Partitions]
    user_data: dict[str, bytes] = field(default_factory=dict)


class Assignor(Protocol):
    name: str

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assigned:
        """Every partition of every subscribed topic that is in `partitions` to exactly one
        member subscribed to it; no member gets a topic it does not subscribe to."""


class StrategyFailed(Exception):
    """A strategy raised, or answered with an assignment that cannot be handed out."""


def checked_assign(assignor: Assignor, members: list[MemberSubscription], partitions: dict[str, int],
                   check: bool = True) -> Assigned:
    """`assignor.assign`, with whatever goes wrong in it as StrategyFailed; with `check`,
    a wrong answer too (the built-ins are trusted: property tests check them)."""
    try:
        assigned = assignor.assign(members, partitions)
    except Exception as exc:  # a user's strategy must not take its caller down with it
        raise StrategyFailed(f"raised {type(exc).__name__}: {exc}") from None
    wrong = problem(members, partitions, assigned) if check else None
    if wrong is not None:
        raise StrategyFailed(wrong)
    return assigned


def problem(members: list[MemberSubscription], partitions: dict[str, int], assigned: Assigned) -> str | None:
    """What is wrong with a strategy's answer, or None: each partition once, only to a
    subscriber, none left out. The coordinator checks strategies it did not ship with."""
    if not isinstance(assigned, Assigned):
        return f"returned {type(assigned).__name__}, not Assigned"
    subscribed = {m.member_id: set(m.topics) for m in members}
    if set(assigned.partitions) - set(subscribed):
        return f"assigned to members not in the group: {sorted(set(assigned.partitions) - set(subscribed))[:3]}"
    seen: set[tuple[str, int]] = set()
    for member_id, topics in assigned.partitions.items():
        for topic, ps in topics.items():
            if topic not in subscribed[member_id]:
                return f"gave {topic} to {member_id}, which does not subscribe to it"
            for p in ps:
                if not 0 <= p < partitions.get(topic, 0):
                    return f"gave {topic}-{p}, which does not exist"
                if (topic, p) in seen:
                    return f"gave {topic}-{p} to more than one member"
                seen.add((topic, p))
    wanted = sum(partitions.get(t, 0) for t in set().union(*subscribed.values()))
    if len(seen) != wanted:
        return f"left {wanted - len(seen)} subscribed partitions unassigned"
    return None


def empty(members: list[MemberSubscription]) -> dict[str, Partitions]:
    return {m.member_id: {} for m in members}


def member_order(members: list[MemberSubscription]) -> list[MemberSubscription]:
    """The clients' order: static members by instance id first (their assignment then
    survives restarts), then dynamic members by member id."""
    return sorted(members, key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id))
