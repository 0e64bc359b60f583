"""Offset retention, as Kafka's (KIP-211, `offsets.retention.minutes`): which committed
offsets have expired (pure), and the owner's periodic check that removes them.

Kafka's rule, group by group (its `OffsetExpirationCondition`s and `isSubscribedToTopic`):

| Group | Its offsets expire | Counted from |
| --- | --- | --- |
| classic, Empty, with a protocol type | all | when it became Empty (`Group.empty_since_ms`, stored with its record; unknown: each offset's commit) |
| classic, Stable, protocol type `consumer` | those of topics no member subscribes to (the members' subscriptions) | each offset's commit |
| classic, other states or other protocol types (connect, ...) with members | none | |
| consumer protocol (KIP-848), with members or not | those of topics no member subscribes to (names, and the topics their expressions match) | each offset's commit |
| known only by its offsets (simple consumers, admin tools: no record) | all | each offset's commit |

An offset that carries its own expiry (Kafka's `expireTimestamp`, from OffsetCommit v2-v4's
retention time: a fifth element of its entry) expires then instead. Pending commits are
never expired: a removal is dropped when the partition was committed again since it was
decided (`PartitionStore.expire_offsets`). A group that is empty (classic Empty, a consumer
group without members, or no group at all) and has no offsets left is deleted, record and
znodes, as Kafka makes it Dead.

The check runs on the owner of each group-partition only (`Retention`, started by
`cluster.ownership` with the partition's store and groups), every
`offsets_retention_check_interval_ms` of the injected clock, once its lease confirms it still
owns the partition. Times are wall-clock milliseconds (commits are stamped so, and a new owner
on another machine must count from the same instants).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable

import trio

from protocol import ProtocolError
from protocol.consumer import decode_subscription

from .. import logs, metrics
from ..events import DISCARD, EventSink
from ..store.errors import NotOwner, StoreError, StoreUnavailable
from .consumer_group import ConsumerGroup
from .group import Group
from .state import GroupState

if TYPE_CHECKING:
    from ..store.partition import PartitionStore
    from .manager import GroupSet

Entry = tuple  # (offset, leader_epoch, metadata, commit_ms[, expire_ms]), as the store keeps it


@dataclass(frozen=True)
class Rule:
    """How a group's offsets expire: each `retention_ms` after `since_ms` when it is set (an
    Empty classic group: when it became empty), else after its own commit; offsets of the
    `kept` topics (those subscribed to) never."""
    since_ms: int | None = None
    kept: frozenset[str] = frozenset()


BY_COMMIT = Rule()  # every offset from its own commit: simple consumers, groups known by their offsets


def is_expired(entry: Entry, since_ms: int | None, now_ms: int, retention_ms: int) -> bool:
    """Kafka's `OffsetExpirationConditionImpl.isOffsetExpired`."""
    if len(entry) > 4 and entry[4] is not None and entry[4] >= 0:  # its own expiry (OffsetCommit v2-v4)
        return now_ms >= entry[4]
    return now_ms - (entry[3] if since_ms is None else since_ms) >= retention_ms


def expired(offsets: Mapping[str, Mapping[int, Entry]], rule: Rule | None, now_ms: int,
            retention_ms: int) -> dict[str, dict[int, Entry]]:
    """The offsets of a group (topic -> partition -> entry) that have expired under `rule`
    (None: none do), as topic -> partition -> the entry found expired."""
    if rule is None:
        return {}
    found = {}
    for topic, partitions in offsets.items():
        if topic in rule.kept:
            continue
        gone = {p: e for p, e in partitions.items() if is_expired(e, rule.since_ms, now_ms, retention_ms)}
        if gone:
            found[topic] = gone
    return found


def classic_rule(group: Group) -> Rule | None:
    """A classic group's rule (Kafka's `ClassicGroup.offsetExpirationCondition`)."""
    if group.protocol_type is None:  # never had a member: a simple consumer's
        return BY_COMMIT
    if group.state == GroupState.EMPTY:
        return Rule(since_ms=group.empty_since_ms)
    if group.state == GroupState.STABLE and group.protocol_type == "consumer":
        topics = subscribed(group)
        return None if topics is None else Rule(kept=topics)
    return None  # rebalancing, or not a consumer's group (connect, ...): kept while it has members


def subscribed(group: Group) -> frozenset[str] | None:
    """The topics a classic consumer group's members subscribe to, from their metadata for
    the chosen protocol; None if one cannot be read (Kafka then knows no subscription and
    expires nothing)."""
    topics: set[str] = set()
    for member in group.members.values():
        try:
            topics.update(decode_subscription(member.metadata(group.protocol_name))[1].topics)
        except ProtocolError:
            return None
    return frozenset(topics)


def consumer_subscribed(group: ConsumerGroup) -> frozenset[str]:
    """The topics a consumer-protocol group's members subscribe to (names and what their
    expressions resolve to)."""
    return frozenset(t for m in group.members.values() for t in group.topics_of(m))


def consumer_rule(group: ConsumerGroup) -> Rule:
    """A consumer-protocol group's rule (Kafka's `ConsumerGroup.offsetExpirationCondition`):
    from each offset's commit, members or not, for the topics no member subscribes to."""
    return Rule(kept=consumer_subscribed(group))


def rule_of(groups: GroupSet, group_id: str) -> Rule | None:
    consumer = groups.consumer_groups.get(group_id)
    if consumer is not None:
        return consumer_rule(consumer)
    classic = groups.groups.get(group_id)
    return BY_COMMIT if classic is None else classic_rule(classic)


def deletable(groups: GroupSet, group_id: str) -> bool:
    """Whether the group may go once its offsets have: it is empty (Kafka's `isEmpty`)."""
    consumer = groups.consumer_groups.get(group_id)
    if consumer is not None:
        return not consumer.members
    classic = groups.groups.get(group_id)
    return classic is None or classic.state == GroupState.EMPTY


class Retention:
    """The offset retention of one group-partition: every `interval` seconds its expired
    offsets are removed from ZooKeeper (in bounded batches, in order with its commits: see
    `PartitionStore.expire_offsets`), topics left without offsets lose their znodes, and
    empty groups without offsets are deleted. Counted, logged and written as
    `offsets_expired` events."""

    def __init__(self, store: PartitionStore, groups: GroupSet, retention_ms: int, interval: float,
                 wall_ms: Callable[[], int], events: EventSink = DISCARD,
                 lease: Callable[[], Awaitable[None]] | None = None,
                 pending: Callable[[str], bool] = lambda group_id: False):
        self.store = store
        self.pending = pending  # whether a group has a transaction's offsets pending: it is kept, whole
        self.groups = groups
        self.retention_ms = retention_ms
        self.interval = interval
        self.wall_ms = wall_ms
        self.events = events
        self.lease = lease  # returns once this instance may act as owner
        self.log = logs.get("groupkeeper.retention").bind(partition=store.partition)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Check every `interval` until cancelled or the partition is no longer ours."""
        task_status.started()
        while True:
            await trio.sleep(self.interval)
            if self.lease is not None:  # after a pause: not before ownership is confirmed
                await self.lease()
            try:
                await self.check()
            except NotOwner:
                return  # handed over or fenced: the next owner checks
            except (StoreUnavailable, StoreError) as exc:
                self.log.warning("expiring offsets failed; tried again at the next check", error=str(exc))

    async def check(self) -> tuple[int, int]:
        """One pass over the partition's groups: (offsets removed, groups deleted)."""
        store, groups = self.store, self.groups
        now_ms = self.wall_ms()
        candidates = set(store.durable) | store.bare_groups() | set(groups.groups) | set(groups.consumer_groups)
        removed_total = deleted_total = 0
        for group_id in sorted(candidates):
            if self.pending(group_id):  # a transaction's offsets pending: the group kept whole until it ends
                continue
            gone = expired(store.durable.get(group_id, {}), rule_of(groups, group_id), now_ms, self.retention_ms)
            removed = await store.expire_offsets(group_id, gone) if gone else 0
            deleted = False
            if not store.has_offsets(group_id) and deletable(groups, group_id):
                # checked again once nothing of the partition is in flight: a member may have
                # joined, or a commit landed, since
                deleted = await store.delete_group(
                    group_id, still=lambda: not store.has_offsets(group_id) and deletable(groups, group_id))
                if deleted and deletable(groups, group_id):
                    groups.drop(group_id)
            else:
                await store.collect(group_id)
            if removed or deleted:
                metrics.OFFSETS_EXPIRED.inc(removed)
                self.log.info("offsets expired", group=group_id, partitions=removed, group_deleted=deleted)
                self.events.emit("offsets_expired", group_id, partitions=removed, group_deleted=deleted)
            removed_total += removed
            deleted_total += deleted
            await trio.lowlevel.checkpoint()  # the partition's requests are served between groups
        return removed_total, deleted_total
