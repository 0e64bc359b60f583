"""The states of a classic consumer group, what each does with each request, and which
transitions are allowed (Kafka's names; the seeds' names in brackets).

| State | Enters when | JoinGroup | SyncGroup | Heartbeat | OffsetCommit (member of current generation) |
| --- | --- | --- | --- | --- | --- |
| Empty | created; last member gone; loaded with no members | starts a rebalance | UNKNOWN_MEMBER_ID | UNKNOWN_MEMBER_ID | generation -1 from a non-member accepted (standalone consumers, admin tools) |
| PreparingRebalance ["prepare for rebalance"] | a member joins, leaves, changes its subscription, fails; partitions change | waits until every known member has rejoined or the rebalance timeout passes (and, for a group that was empty, the initial rebalance delay) | REBALANCE_IN_PROGRESS | REBALANCE_IN_PROGRESS (the member must rejoin) | accepted: a consumer committing in its revoke callback loses nothing |
| CompletingRebalance ["rebalancing"] | every member rejoined: new generation, leader chosen, protocol voted | a known member with unchanged protocols gets the generation's answer again; a change starts a new rebalance | waits for the assignment (computed by the coordinator, or sent by the leader), then answers | accepted (resets the session timer) | REBALANCE_IN_PROGRESS |
| Stable ["steady"] | the generation's assignment is persisted | a new member, or a changed one, starts a rebalance; an unchanged one gets the generation's answer | the member's assignment | accepted | accepted |
| Dead | deleted, or unloaded when the group-partition moves away | COORDINATOR_NOT_AVAILABLE | COORDINATOR_NOT_AVAILABLE | COORDINATOR_NOT_AVAILABLE | COORDINATOR_NOT_AVAILABLE |

Every request of an unknown member id is UNKNOWN_MEMBER_ID, of a stale generation
ILLEGAL_GENERATION, and of a static member (group.instance.id) whose member id was
replaced FENCED_INSTANCE_ID.
"""

from __future__ import annotations

import enum


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.COMPLETING_REBALANCE, GroupState.EMPTY,
                                               GroupState.DEAD}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.STABLE, GroupState.PREPARING_REBALANCE,
                                                GroupState.DEAD}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


class IllegalTransition(Exception):
    """A transition the table does not allow: a bug, never a client's doing."""
