"""Online migration between the two group protocols (KIP-848's, as Kafka's
`group.consumer.migration.policy`): pure, the clock passed in.

**Upgrade.** A classic group whose members use the consumer protocol's embedded format
becomes a consumer group when a member joins it with ConsumerGroupHeartbeat: each classic
member is kept as a member that speaks the classic protocol, at the generation as its
member epoch, with its current assignment as both what it holds and its target, so that
nothing moves until the newcomer's join bumps the group epoch and the server-side assignor
runs. Classic members then reconcile through JoinGroup/SyncGroup/Heartbeat (their heartbeat
answers REBALANCE_IN_PROGRESS whenever they have a step to take).

**Downgrade.** When the last member speaking the consumer protocol leaves (or is removed)
and every remaining member speaks the classic one, the group becomes a classic group again:
the members, with their protocols and what they hold, at their member epoch as generation;
it then rebalances at once, the classic way, so that the members agree on a leader's
assignment.

Committed offsets are keyed by group id alone, so they stay where they are either way.
"""

from __future__ import annotations

from collections.abc import Mapping

from protocol import ProtocolError
from protocol.consumer import decode_assignment, decode_subscription, encode_assignment
from protocol.messages import ConsumerProtocolAssignment, TopicPartition

from ..assignors.base import Assignor
from .consumer_group import ClassicProtocol, ConsumerGroup, ConsumerGroupConfig, ConsumerMember, by_topic
from .group import Group, GroupConfig, Member
from .snapshot import restore
from .state import GroupState

POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


def may_upgrade(policy: str) -> bool:
    return policy in ("upgrade", "bidirectional")


def may_downgrade(policy: str) -> bool:
    return policy in ("downgrade", "bidirectional")


def upgrade(group: Group, config: ConsumerGroupConfig, assignors: dict[str, Assignor],
            partitions: Mapping[str, int]) -> ConsumerGroup | str:
    """The classic group as a consumer group, or why it cannot become one."""
    if group.protocol_type != "consumer":
        return f"its protocol type is {group.protocol_type!r}, not the consumer protocol"
    if config.max_size and len(group.members) > config.max_size:
        return f"it has {len(group.members)} members, more than group_consumer_max_size"
    consumer = ConsumerGroup(group.group_id, config, assignors, partitions, group_epoch=group.generation,
                             assignment_epoch=group.generation, assignor=config.default_assignor)
    for m in group.members.values():
        chosen = m.metadata(group.protocol_name)
        try:
            version, subscription = decode_subscription(chosen)
            assigned = _decoded(m.assignment)
        except ProtocolError:
            return f"member {m.member_id}'s subscription or assignment cannot be read"
        assigned -= consumer.holders.keys()  # never two holders (a stale assignment mid-rebalance)
        protocols = ((group.protocol_name, chosen),) + tuple(p for p in m.protocols if p[0] != group.protocol_name)
        member = ConsumerMember(m.member_id, m.instance_id, subscription.rack_id if version >= 3 else None,
                                m.client_id, m.client_host, m.rebalance_timeout,
                                tuple(sorted(set(subscription.topics))), epoch=group.generation,
                                previous_epoch=group.generation, assigned=frozenset(assigned),
                                session_deadline=m.deadline, classic=ClassicProtocol(m.session_timeout, protocols))
        consumer.add(member)
        consumer.target[m.member_id] = member.assigned
        consumer.hold(member)
    consumer.counted = {t: n for t in set().union(*(m.subscribed for m in consumer.members.values()))
                        if (n := partitions.get(t, 0))}
    return consumer


def downgrade(group: ConsumerGroup, config: GroupConfig, now: float) -> Group | None:
    """The consumer group as a classic group, rebalancing, if every member speaks the classic
    protocol and they share one; else None."""
    members = list(group.members.values())
    if not members or any(m.classic is None for m in members):
        return None
    shared = set.intersection(*({name for name, _ in m.classic.protocols} for m in members))
    protocol = next((name for name, _ in members[0].classic.protocols if name in shared), None)
    if protocol is None:
        return None
    # the members' own epoch as generation (not the group epoch their leaving colleague bumped):
    # their heartbeats are then told REBALANCE_IN_PROGRESS, not ILLEGAL_GENERATION, and they rejoin as they are
    data = {"generation": max(m.epoch for m in members), "protocol_type": "consumer", "protocol": protocol,
            "leader": members[0].member_id, "members": []}
    restored = restore(group.group_id, data, now, config)
    for m in members:
        metadata = dict(m.classic.protocols)[protocol]
        version = min(decode_subscription(metadata)[0], 3)
        assignment = encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
            TopicPartition(topic=t, partitions=ps) for t, ps in by_topic(m.assigned).items()]), version)
        restored.load_member(_classic_member(m, protocol, metadata, assignment, now))
    restored.state = GroupState.STABLE
    restored.request_rebalance(now, "the group went back to the classic protocol")
    return restored


def _classic_member(m: ConsumerMember, protocol: str, metadata: bytes, assignment: bytes, now: float) -> Member:
    return Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.classic.session_timeout,
                  m.rebalance_timeout, "consumer", [(protocol, metadata)], assignment=assignment, is_new=False,
                  deadline=now + m.classic.session_timeout)


def _decoded(assignment: bytes) -> set[tuple[str, int]]:
    if not assignment:
        return set()
    return {(tp.topic, p) for tp in decode_assignment(assignment)[1].assigned_partitions for p in tp.partitions}
