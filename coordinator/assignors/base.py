"""The strategy interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

Assignment = dict[str, dict[str, list[int]]]  # member id -> topic -> partitions


@dataclass(frozen=True)
class MemberSubscription:
    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    owned: dict[str, list[int]] = field(default_factory=dict)
    user_data: bytes | None = None


class Assignor(Protocol):
    name: str

    def assign(self, members: list[MemberSubscription], partitions: dict[str, int]) -> Assignment:
        """Every partition of every subscribed topic (present in `partitions`) to exactly one
        member subscribed to it."""


def empty(members: list[MemberSubscription]) -> Assignment:
    return {m.member_id: {} for m in members}
