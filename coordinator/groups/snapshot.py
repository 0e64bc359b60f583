"""A group's generation as stored in ZooKeeper, and a group rebuilt from it on load."""

from __future__ import annotations

import base64
from typing import Any

from .group import Group, GroupConfig, Member
from .state import GroupState


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def snapshot(group: Group, assignments: dict[str, bytes] | None = None,
             counted: dict[str, int] | None = None) -> dict[str, Any]:
    """Generation, protocol, leader and members with their subscription and assignment, and
    the partition count of each subscribed topic the generation was computed for."""
    assignments = assignments if assignments is not None else {
        m.member_id: m.assignment for m in group.members.values()}
    return {
        "version": 1,
        "generation": group.generation,
        "protocol_type": group.protocol_type,
        "protocol": group.protocol_name,
        "leader": group.leader,
        "counted": counted or {},
        "members": [{
            "id": m.member_id, "instance": m.instance_id, "client_id": m.client_id,
            "host": m.client_host, "session_timeout": m.session_timeout,
            "rebalance_timeout": m.rebalance_timeout,
            "subscription": _b64(m.metadata(group.protocol_name)),
            "assignment": _b64(assignments.get(m.member_id, b"")),
        } for m in group.members.values()],
    }


def restore(group_id: str, data: dict[str, Any], now: float, config: GroupConfig) -> Group:
    """A loaded group: Stable with its members (each given a full session to reach its new
    coordinator), or Empty."""
    group = Group(group_id, config)
    group.generation = data["generation"]
    group.protocol_type = data["protocol_type"]
    group.protocol_name = data["protocol"]
    group.leader = data["leader"]
    for m in data["members"]:
        member = Member(m["id"], m["instance"], m["client_id"], m["host"], m["session_timeout"],
                        m["rebalance_timeout"], data["protocol_type"] or "",
                        [(data["protocol"], base64.b64decode(m["subscription"]))],
                        assignment=base64.b64decode(m["assignment"]), is_new=False,
                        deadline=now + m["session_timeout"])
        group.load_member(member)
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    return group


def counted(data: dict[str, Any]) -> dict[str, int]:
    """The partition counts a stored generation was computed for."""
    return dict(data.get("counted", {}))
