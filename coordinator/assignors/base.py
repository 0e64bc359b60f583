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


def empty(members: list[MemberSubscription]) -> dict[str, Partitions]:
    return {m.member_id: {} for m in members}


def member_order(members: list[MemberSubscription]) -> list[MemberSubscription]:
    """The clients' order: static members by instance id first (their assignment then
    survives restarts), then dynamic members by member id."""
    return sorted(members, key=lambda m: (m.instance_id is None, m.instance_id or "", m.member_id))
