"""A group as stored in ZooKeeper, and the group rebuilt from it on load: a classic group's
generation, or a consumer-protocol group's epochs, target and members (`"type": "consumer"`)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ..assignors.base import Assignor
from .consumer_group import ClassicProtocol, ConsumerGroup, ConsumerGroupConfig, ConsumerMember, MemberState, by_topic
from .group import Group, GroupConfig, Member
from .state import GroupState


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def snapshot(group: Group, assignments: dict[str, bytes] | None = None,
             counted: dict[str, int] | None = None) -> dict[str, Any]:
    """Generation, protocol, leader and members with their subscription and assignment, and
    the partition count of each subscribed topic the generation was computed for; an Empty
    group's also when it became empty (`empty_since_ms`, wall clock)."""
    assignments = assignments if assignments is not None else {
        m.member_id: m.assignment for m in group.members.values()}
    record = {
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
    if group.state == GroupState.EMPTY and group.empty_since_ms is not None:
        record["empty_since_ms"] = group.empty_since_ms  # offset retention counts from it, here or at a new owner
    return record


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
    if not group.members:
        group.empty_since_ms = data.get("empty_since_ms")  # absent from older records: None
    return group


def counted(data: dict[str, Any]) -> dict[str, int]:
    """The partition counts a stored generation was computed for."""
    return dict(data.get("counted", {}))


def is_consumer_group(data: dict[str, Any]) -> bool:
    return data.get("type") == "consumer"


def consumer_header(group: ConsumerGroup) -> dict[str, Any]:
    """A consumer group's own record (version 2): its epochs, assignor and counts, who its
    members are and the target. Each member's own state is a record of its own
    (`consumer_member`), so that a member's reconciliation step writes only that member."""
    return {
        "version": 2,
        "type": "consumer",
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor": group.assignor,
        "counted": group.counted,
        "members": list(group.members),
        "targets": {member_id: by_topic(group.target.get(member_id, ())) for member_id in group.members},
    }


def consumer_member(m: ConsumerMember) -> dict[str, Any]:
    """A member's record: who it is, what it subscribes to, its epoch, state and partitions."""
    return {
        "id": m.member_id, "instance": m.instance_id, "rack": m.rack_id, "client_id": m.client_id,
        "host": m.client_host, "rebalance_timeout": m.rebalance_timeout, "subscribed": list(m.subscribed),
        "regex": m.regex, "assignor": m.assignor, "epoch": m.epoch, "previous_epoch": m.previous_epoch,
        "state": m.state.value, "assigned": by_topic(m.assigned), "revoking": by_topic(m.revoking),
        "classic": None if m.classic is None else {
            "session_timeout": m.classic.session_timeout,
            "protocols": [[name, _b64(metadata)] for name, metadata in m.classic.protocols]},
    }


def consumer_changes(group: ConsumerGroup) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any] | None]]:
    """What to write for what changed since the last write (taken from the group: give it
    back with `group.give_back` if the write fails): the group's record, None if unchanged;
    the changed members' records, None for one that left."""
    header, changed = group.take_changes()
    members = {member_id: consumer_member(group.members[member_id]) if member_id in group.members else None
               for member_id in changed}
    return (consumer_header(group) if header else None), members


def assemble_consumer(header: dict[str, Any], members: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """A consumer group's record with its members' records in it (each with its target), as
    `restore_consumer` takes it; a version 1 record holds them already. Members the record
    names without a record of their own (only a hand in ZooKeeper does that) are left out,
    named under "incomplete"; member records it does not name, under "orphans"."""
    if header.get("version", 1) < 2:
        return header
    targets = header["targets"]
    assembled = {**header, "members": [{**members[member_id], "target": targets.get(member_id, {})}
                                       for member_id in header["members"] if member_id in members]}
    missing = [member_id for member_id in header["members"] if member_id not in members]
    if missing:
        assembled["incomplete"] = missing
    named = set(header["members"])
    orphans = [member_id for member_id in members if member_id not in named]
    if orphans:  # written before a record that did not come (a write cut short): deleted by the next
        assembled["orphans"] = orphans
    return assembled


def restore_consumer(group_id: str, data: dict[str, Any], now: float, config: ConsumerGroupConfig,
                     assignors: dict[str, Assignor], partitions: Mapping[str, int]) -> ConsumerGroup:
    """A loaded consumer group (`assemble_consumer`'s record), each member given a full
    session (and rebalance timeout, if it is giving partitions up) to reach its new
    coordinator. Loaded from a version 1 record, everything counts as changed: the group's
    next write stores it as version 2 records."""
    group = ConsumerGroup(group_id, config, assignors, partitions, group_epoch=data["group_epoch"],
                          assignment_epoch=data["assignment_epoch"], assignor=data["assignor"],
                          counted=dict(data["counted"]))
    for m in data["members"]:
        revoking = _partitions(m["revoking"])
        classic = m.get("classic")
        if classic is not None:
            classic = ClassicProtocol(classic["session_timeout"], tuple(
                (name, base64.b64decode(metadata)) for name, metadata in classic["protocols"]))
        member = ConsumerMember(
            m["id"], m["instance"], m["rack"], m["client_id"], m["host"], m["rebalance_timeout"],
            tuple(m["subscribed"]), m["regex"], m["assignor"], m["epoch"], m["previous_epoch"],
            MemberState(m["state"]), _partitions(m["assigned"]), revoking,
            session_deadline=now + (config.session_timeout if classic is None else classic.session_timeout),
            revocation_deadline=now + m["rebalance_timeout"] if revoking else None, classic=classic)
        group.add(member)
        group.target[member.member_id] = _partitions(m["target"])
        group.hold(member)
    if data.get("version", 1) >= 2 and not data.get("incomplete"):
        group.take_changes()  # stored as it is
    group.members_changed.update(data.get("orphans", ()))  # not members: their records go
    return group


def _partitions(by_topic_: dict[str, list[int]]) -> frozenset[tuple[str, int]]:
    return frozenset((t, p) for t, ps in by_topic_.items() for p in ps)
