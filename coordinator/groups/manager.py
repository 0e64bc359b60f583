"""The trio runtime of the groups of one group-partition: it feeds requests to the pure
`Group`s and `ConsumerGroup`s, carries out what they ask for (assign, persist, wake waiting
requests), and runs the one timer of the partition: a heap of (deadline, group) for every
session, rebalance and pending-member timeout of every group, not a task per member.

A group id is a classic group or a consumer-protocol (KIP-848) group, not both: a
ConsumerGroupHeartbeat for a classic group with members is refused GROUP_ID_NOT_FOUND, and
a JoinGroup for a consumer group with members INCONSISTENT_GROUP_PROTOCOL; an empty group of
the other kind is replaced. A consumer group's heartbeat is answered once the state it
produced is stored (a new owner then goes on from it); one that changed nothing stored
is answered at once."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio

from protocol import ErrorCode, ProtocolError
from protocol.consumer import decode_assignment, decode_subscription, encode_assignment
from protocol.messages import ConsumerProtocolAssignment, TopicPartition

from .. import logs, metrics
from ..assignors import BUILT_IN, Assignor, MemberSubscription
from ..assignors.base import StrategyFailed, checked_assign
from ..store.errors import FAILURES as STORE_FAILURES, error_code as store_error_code
from ..store.turns import Turns
from ..events import DISCARD, EventSink
from .consumer_group import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerGroup, ConsumerMember, HeartbeatReply, by_topic
from .group import (AssignmentNeeded, CapacityReached, Group, GroupConfig, JoinReply, MemberAdded, MemberRemoved,
                    MembersChanged, PersistNeeded, RebalanceCompleted, RebalanceStarted, SyncReply, Wait,
                    subscribed_topics)
from .migration import downgrade, may_downgrade, may_upgrade, upgrade
from .snapshot import consumer_changes, snapshot
from .state import GroupState

E = ErrorCode
SHORT_SESSION_WARNINGS = 10_000  # groups remembered as warned of a session within the failover detection
# (group, record[, members=...]): raises on failure; a consumer group's record is None when
# unchanged, and `members` its changed members' records (None: left), see PartitionStore.write_group
Persist = Callable[..., Awaitable[None]]


@dataclass
class _Waiter:
    event: trio.Event
    reply: Any = None


@dataclass
class _Write:
    """A consumer group's record write under way: the version it stores, and how it ended."""
    version: int
    done: trio.Event
    error: ErrorCode = E.NONE


class GroupSet:
    """The groups of one group-partition, with their timer."""

    def __init__(self, config: GroupConfig, assignors: dict[str, Assignor],
                 partitions_of: Callable[[str], int], persist: Persist, strict: bool = False,
                 events: EventSink = DISCARD, lease: Callable[[], Awaitable[None]] | None = None,
                 consumer_assignors: dict[str, Assignor] | None = None, topic_counts: Mapping[str, int] | None = None,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.config = config
        self.wall_ms = wall_ms  # the wall clock, in ms: when a group became empty is kept in it (retention)
        self.consumer_assignors = consumer_assignors or {}  # the server-side assignors of consumer groups
        self.topic_counts = topic_counts if topic_counts is not None else {}  # every topic's, kept current by the source
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self._stored: dict[str, int] = {}  # consumer group -> the version of it last stored
        self._writes: dict[str, _Write] = {}  # consumer group -> its write under way
        self._unloaded = False  # the group-partition was handed over
        self._epochs: dict[str, int] = {}  # consumer group -> the group epoch last counted
        self.lease = lease  # returns once this instance may act as owner (no expiries while it may not)
        self.events = events
        self.assignors = assignors
        self.partitions_of = partitions_of  # topic -> partition count (0 when unknown)
        self.persist = persist
        self.strict = strict
        self.groups: dict[str, Group] = {}
        # each group's last generation: who owned what, and how many members it had
        self._previous: dict[str, tuple[dict[tuple[str, int], str], int]] = {}
        self._counted: dict[str, dict[str, int]] = {}  # partition counts the last server-side assignment used
        self._waiters: dict[tuple[str, str, str], list[_Waiter]] = {}  # (group, kind, member)
        self._timers: list[tuple[float, str]] = []  # (deadline, group): a heap, stale entries skipped
        self._armed: dict[str, float] = {}  # group -> the deadline its live heap entry is for
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._warned: set[str] = set()  # groups told of their short sessions (`_short_session`)
        # a classic group's writes in turn, each record taken when its turn comes: a
        # generation's and the Stable generation's again (`_store_members`) never land out of order
        self._one_write = Turns()
        self.log = logs.get("groupkeeper.groups")

    def group(self, group_id: str, create: bool = False) -> Group | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = self.groups[group_id] = Group(group_id, self.config)
        return group

    # -- the runtime ----------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            now = trio.current_time()
            for group_id in self.groups:
                self._schedule(group_id, now)
            task_status.started()
            while True:
                deadline = self._timers[0][0] if self._timers else math.inf
                with trio.move_on_at(deadline):
                    await self._wake.wait()
                self._wake = trio.Event()
                if self.lease is not None:  # after a pause: not before ownership is confirmed
                    await self.lease()
                now = trio.current_time()
                due = set()
                while self._timers and self._timers[0][0] <= now:
                    deadline, group_id = heapq.heappop(self._timers)
                    if self._armed.get(group_id) == deadline:
                        del self._armed[group_id]
                        due.add(group_id)
                for group_id in due:
                    group = self.groups.get(group_id)
                    if group is not None:
                        group.tick(now)
                        self._settle(group, now)
                    elif group_id in self.consumer_groups:
                        self._expire(self.consumer_groups[group_id], now)

    def _schedule(self, group_id: str, now: float) -> None:
        """Wake for the group's next deadline. A heartbeat moves a deadline later, which
        needs no new entry: the group ticks at the old one and is scheduled again then."""
        group = self.groups.get(group_id)
        if group is not None:
            deadline = group.next_deadline(now)
        else:
            consumer_group = self.consumer_groups.get(group_id)
            deadline = consumer_group.next_deadline() if consumer_group is not None else None
        armed = self._armed.get(group_id)
        if deadline is None or (armed is not None and armed <= deadline):
            return
        self._armed[group_id] = deadline
        if not self._timers or deadline < self._timers[0][0]:
            self._wake.set()
        heapq.heappush(self._timers, (deadline, group_id))

    def _settle(self, group: Group, now: float) -> None:
        """Carry out everything the group asked for at `now`, then re-arm its timer."""
        while group.outbox:
            effect = group.outbox.pop(0)
            if isinstance(effect, JoinReply):
                self._deliver(group.group_id, "join", effect.member_id, effect)
            elif isinstance(effect, SyncReply):
                self._deliver(group.group_id, "sync", effect.member_id, effect)
            elif isinstance(effect, AssignmentNeeded):
                self._assign(group, effect.generation)
            elif isinstance(effect, PersistNeeded):
                self._nursery.start_soon(self._persist, group, effect.generation)
            elif isinstance(effect, MembersChanged):
                self._nursery.start_soon(self._store_members, group, effect.generation)
            elif isinstance(effect, RebalanceStarted):
                if group.group_id not in self._previous:  # new here: a new group, or loaded
                    self._previous[group.group_id] = (
                        ({}, 0) if effect.generation == 0 else (_owners(group), len(group.members)))
                self.log.info("rebalance started", group=group.group_id, generation=effect.generation,
                              reason=effect.reason)
                self.events.emit("rebalance_started", group.group_id, generation=effect.generation,
                                 reason=effect.reason)
            elif isinstance(effect, RebalanceCompleted):
                if not effect.members:  # it became Empty: its offsets' retention counts from now
                    group.empty_since_ms = self.wall_ms()
                metrics.REBALANCES.labels(metrics.reason_kind(effect.reason)).inc()
                metrics.REBALANCE_SECONDS.observe(effect.duration)
                self._rebalance_completed(group, effect)
            elif isinstance(effect, MemberAdded):
                self._member_joined(group.group_id, effect.generation, effect.member_id, effect.instance_id,
                                    effect.client_id, effect.client_host)
            elif isinstance(effect, CapacityReached):
                metrics.GROUP_FULL_REFUSALS.labels(effect.limit).inc()
                if effect.first:
                    self.log.warning("group full: members turned away", group=group.group_id,
                                     generation=group.generation, member=effect.member_id, limit=effect.limit,
                                     members=effect.members, record_bytes=effect.record_bytes)
            elif isinstance(effect, MemberRemoved):
                self._member_removed(group.group_id, effect.generation, effect.member_id, effect.reason,
                                     effect.client_id, effect.client_host)
        if group.state == GroupState.DEAD:
            self.groups.pop(group.group_id, None)
            self._armed.pop(group.group_id, None)
            self._previous.pop(group.group_id, None)
            self._counted.pop(group.group_id, None)
        else:
            self._schedule(group.group_id, now)

    def _member_joined(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                       client_id: str, host: str, epoch_field: str = "generation") -> None:
        """A member in, of either kind of group: logged (a consumer group's epoch as
        `group_epoch`) and written as an event."""
        self.log.info("member joined", group=group_id, member=member_id, client_id=client_id, host=host,
                      **{epoch_field: generation})
        self.events.emit("member_joined", group_id, generation=generation, member=member_id,
                         instance_id=instance_id, client_id=client_id, host=host)

    def _member_removed(self, group_id: str, generation: int, member_id: str, reason: str, client_id: str,
                        host: str, epoch_field: str = "generation") -> None:
        """A member out, of either kind of group: counted, logged and written as an event
        (member_left for the reasons that start with "left", else member_expired)."""
        metrics.MEMBERS_REMOVED.labels(reason).inc()
        if reason == "session timeout":
            metrics.SESSION_EXPIRATIONS.inc()
        self.log.info("member removed", group=group_id, member=member_id, reason=reason, **{epoch_field: generation})
        self.events.emit("member_left" if reason.startswith("left") else "member_expired", group_id,
                         generation=generation, member=member_id, reason=reason, client_id=client_id, host=host)

    def _rebalance_completed(self, group: Group, effect: RebalanceCompleted) -> None:
        """The summary of a rebalance, as a log line and an event (it completes once its
        assignment is written, the server's or the leader's). Partitions moved: those whose
        owner in the previous generation differs now, or that no one owns any more."""
        owners = _owners(group)
        before, members_before = self._previous.get(group.group_id, ({}, 0))
        moved = sum(1 for tp, owner in before.items() if owners.get(tp) != owner)
        if group.members:
            self._previous[group.group_id] = (owners, len(group.members))
        else:
            self._previous.pop(group.group_id, None)
        summary = dict(generation=effect.generation, reason=effect.reason, members_before=members_before,
                       members_after=effect.members, duration_s=round(effect.duration, 3),
                       partitions_moved=moved, strategy=group.protocol_name)
        self.log.info("rebalance completed", group=group.group_id, **summary)
        self.events.emit("rebalance_completed", group.group_id, **summary)

    def _deliver(self, group_id: str, kind: str, member_id: str, reply) -> None:
        for waiter in self._waiters.pop((group_id, kind, member_id), []):
            waiter.reply = reply
            waiter.event.set()

    async def _wait(self, group: Group, kind: str, member_id: str, now: float):
        waiter = _Waiter(trio.Event())
        self._waiters.setdefault((group.group_id, kind, member_id), []).append(waiter)
        self._settle(group, now)
        await waiter.event.wait()
        return waiter.reply

    async def _store_members(self, group: Group, generation: int) -> None:
        """The Stable generation written again, a member having taken another's place in it
        (`MembersChanged`); nothing if the group has moved on since (its next generation is
        written anyway). Failing, the place is kept here; a new owner after a failover would
        load the old member id (logged)."""
        async with self._one_write(group.group_id):
            if (self.groups.get(group.group_id) is not group or group.state != GroupState.STABLE
                    or group.generation != generation):
                return
            try:
                await self.persist(group.group_id, snapshot(group, None, self._counted.get(group.group_id, {})))
            except STORE_FAILURES as exc:
                self.log.warning("storing a member's new id failed: kept here, and written with the next "
                                 "generation", group=group.group_id, generation=generation, error=str(exc))

    async def _persist(self, group: Group, generation: int) -> None:
        async with self._one_write(group.group_id):
            data = snapshot(group, group.pending_assignment, self._counted.get(group.group_id, {}))
            try:
                await self.persist(group.group_id, data)
                error = E.NONE
            except STORE_FAILURES as exc:
                self.log.warning("persisting the generation failed", group=group.group_id,
                                 generation=generation, error=str(exc))
                error = store_error_code(exc)
        now = trio.current_time()
        group.persisted(now, generation, error)
        self._settle(group, now)

    # -- server-side assignment -----------------------------------------------------------

    def _assign(self, group: Group, generation: int) -> None:
        subscriptions = {}  # member id -> (version, subscription or None: not a consumer's)
        for m in group.members.values():
            try:
                subscriptions[m.member_id] = decode_subscription(m.metadata(group.protocol_name))
            except ProtocolError:
                subscriptions[m.member_id] = (0, None)
        # the partition counts the generation is for, kept with it (a new owner compares them)
        topics = {t for _, sub in subscriptions.values() if sub for t in sub.topics}
        partitions = self._counted[group.group_id] = {t: n for t in topics if (n := self.partitions_of(t))}
        assignor = self.assignors.get(group.protocol_name or "")
        if assignor is None or group.protocol_type != "consumer":
            group.leader_assigns = True  # the leader's SyncGroup carries the assignment
            return
        members, versions = [], {}
        for m in group.members.values():
            version, sub = subscriptions[m.member_id]  # no subscription: no partitions
            versions[m.member_id] = min(version, 3)
            owned = {tp.topic: list(tp.partitions) for tp in sub.owned_partitions} if sub else {}
            members.append(MemberSubscription(
                m.member_id, tuple(sub.topics) if sub else (), m.instance_id,
                owned or _partitions(m.assignment), sub.user_data if sub else None))
        try:
            result = checked_assign(assignor, members, partitions, check=assignor is not BUILT_IN.get(group.protocol_name))
        except StrategyFailed as exc:
            self.log.error("strategy failed, the leader assigns", group=group.group_id, generation=generation,
                           strategy=group.protocol_name, error=str(exc))
            metrics.ASSIGNOR_FAILURES.labels(group.protocol_name).inc()
            group.leader_assigns = True
            return
        assignments = {
            member_id: encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
                TopicPartition(topic=t, partitions=ps) for t, ps in sorted(topics_.items()) if ps],
                user_data=result.user_data.get(member_id)), versions[member_id])
            for member_id, topics_ in result.partitions.items()}
        group.set_assignment(trio.current_time(), generation, assignments)

    def assignable(self, protocols: list[tuple[str, bytes]]) -> bool:
        """In strict mode, a member must offer at least one strategy known here."""
        return not self.strict or any(name in self.assignors for name, _ in protocols)

    # -- consumer-protocol groups (KIP-848) -------------------------------------------------

    async def consumer_heartbeat(self, group_id: str, *, member_id: str, epoch: int,
                                 owned: list[tuple[str, int]] | None, **request) -> HeartbeatReply:
        """A ConsumerGroupHeartbeat: `ConsumerGroup.update`, a checkpoint so that every
        heartbeat that arrived with it updates first (many joining together: one target
        computed for them all, not one each), `respond`, then the state stored if it moved."""
        group = self.consumer_groups.get(group_id)
        if group is None:
            classic = self.groups.get(group_id)
            if epoch != 0:  # not GROUP_ID_NOT_FOUND as Kafka: clients take that as fatal, this they rejoin after
                return HeartbeatReply(E.UNKNOWN_MEMBER_ID)
            if classic is not None and classic.members:
                group = self._upgrade(classic)
                if group is None:
                    return HeartbeatReply(E.GROUP_ID_NOT_FOUND)  # a classic group's, as Kafka answers
            else:
                group = ConsumerGroup(group_id, self.config.consumer, self.consumer_assignors, self.topic_counts)
        now = trio.current_time()
        leaving = group.members.get(member_id) if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH) else None
        entered = group.update(now, member_id=member_id, epoch=epoch, owned=owned, **request)
        if isinstance(entered, HeartbeatReply):
            reply = entered
        else:
            self._adopt_new(group)
            for topic in entered.subscribed:  # a topic not known yet: the source looks for it
                if topic not in self.topic_counts:
                    self.partitions_of(topic)
            await trio.lowlevel.checkpoint()
            now = trio.current_time()
            reply = group.respond(now, entered, epoch == 0, owned)
            if epoch == 0 and reply.error == E.NONE:
                self._joined(group, entered)
        if reply.error == E.GROUP_MAX_SIZE_REACHED:
            self._full(group)
        if leaving is not None and reply.error == E.NONE:
            self._removed(group, leaving, "left" if epoch == LEAVE_EPOCH else "left (static)")
            if self._downgrade(group, now):
                return reply
        self._consumer_settled(group, now)
        if group_id not in self.consumer_groups:
            return reply  # refused before the group ever lived
        error = await self._stored_now(group)
        return reply if error == E.NONE else HeartbeatReply(error)

    def _adopt_new(self, group: ConsumerGroup) -> None:
        """A consumer group that has just got its first member takes the id: an empty classic
        group of the same id is replaced (its committed offsets stay)."""
        if group.group_id not in self.consumer_groups:
            # a new group's first epoch counts as a bump, as a classic group's first generation
            # counts as a rebalance (an upgraded group's epochs count from its classic generation)
            self._epochs.setdefault(group.group_id, 0)
            self.consumer_groups[group.group_id] = group
            self.groups.pop(group.group_id, None)
            self._armed.pop(group.group_id, None)

    def _consumer_settled(self, group: ConsumerGroup, now: float) -> None:
        """What the pure group leaves for the runtime: epoch bumps counted and logged, strategy
        failures reported, the timer re-armed."""
        seen = self._epochs.get(group.group_id, group.group_epoch)
        if group.group_epoch > seen:
            metrics.CONSUMER_GROUP_EPOCH_BUMPS.inc(group.group_epoch - seen)
            self.log.info("group epoch bumped", group=group.group_id, group_epoch=group.group_epoch,
                          members=len(group.members))
        self._epochs[group.group_id] = group.group_epoch
        while group.failures:
            strategy, error = group.failures.pop(0)
            self.log.error("strategy failed, uniform assigns", group=group.group_id, group_epoch=group.group_epoch,
                           strategy=strategy, error=error)
            metrics.ASSIGNOR_FAILURES.labels(strategy).inc()
        self._schedule(group.group_id, now)

    def _full(self, group: ConsumerGroup) -> None:
        """A member turned away, or a subscription refused: counted by the limit reached."""
        size = group.config.max_size
        metrics.GROUP_FULL_REFUSALS.labels(
            "group_consumer_max_size" if size and len(group.members) >= size else "group_max_record_bytes").inc()

    def _joined(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        self._member_joined(group.group_id, group.group_epoch, member.member_id, member.instance_id,
                            member.client_id, member.client_host, epoch_field="group_epoch")

    def _removed(self, group: ConsumerGroup, member: ConsumerMember, reason: str) -> None:
        self._member_removed(group.group_id, group.group_epoch, member.member_id, reason, member.client_id,
                             member.client_host, epoch_field="group_epoch")

    def _expire(self, group: ConsumerGroup, now: float) -> None:
        for member, reason in group.expire(now):
            self._removed(group, member, reason)
        self._after_removals(group, now)

    def _after_removals(self, group: ConsumerGroup, now: float) -> None:
        """Members removed without a request waiting on the store (expired, or a LeaveGroup):
        the group goes back to classic if it may, else it is settled and stored."""
        if self._downgrade(group, now):
            return
        self._consumer_settled(group, now)
        if self._stored.get(group.group_id, -1) < group.version:
            self._nursery.start_soon(self._stored_now, group)

    async def _stored_now(self, group: ConsumerGroup) -> ErrorCode:
        """Return once the group as it is now is stored (NONE), or the error of the write that
        should have stored it. One write of a group at a time; whoever finds the stored
        version behind after it writes again, so changes made during a write share the next."""
        wanted = group.version
        while self._stored.get(group.group_id, -1) < wanted:
            running = self._writes.get(group.group_id)
            if running is not None:
                await running.done.wait()
                if running.error != E.NONE and running.version >= wanted:
                    return running.error
                continue
            write = self._writes[group.group_id] = _Write(group.version, trio.Event())
            header, members = None, {}
            try:
                linger = group.config.store_linger_s
                if linger:  # the changes of the next moments share the write
                    await trio.sleep(linger)
                write.version = group.version
                if self.consumer_groups.get(group.group_id) is not group and not self._unloaded:
                    # deleted, or back to classic, while it lingered: its record is another's now,
                    # and its members are not this group's (they join again)
                    write.error = E.UNKNOWN_MEMBER_ID
                    return write.error
                header, members = consumer_changes(group)  # only what changed is written
                await self.persist(group.group_id, header, members=members)
                self._stored[group.group_id] = max(write.version, self._stored.get(group.group_id, -1))
            except BaseException as exc:
                group.give_back(header is not None, set(members))  # the next write takes it
                if not isinstance(exc, STORE_FAILURES):
                    raise
                self.log.warning("storing the consumer group failed", group=group.group_id,
                                 group_epoch=group.group_epoch, error=str(exc))
                write.error = store_error_code(exc)
                return write.error
            finally:
                del self._writes[group.group_id]
                write.done.set()
        return E.NONE

    def fetch_check(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode:
        """Whether an OffsetFetch (v9+) naming a member may be answered: a consumer group's
        member at its epoch; anyone, for a classic group or without a member."""
        group = self.consumer_groups.get(group_id)
        if group is None or (member_id is None and epoch < 0):
            return E.NONE
        return self.member_epoch_check(group, member_id or "", epoch)

    @staticmethod
    def member_epoch_check(group: ConsumerGroup, member_id: str, epoch: int) -> ErrorCode:
        """Kafka's rule for a consumer group member's commit or fetch: its epoch, or
        FENCED_MEMBER_EPOCH (ahead) / STALE_MEMBER_EPOCH (behind). No member and a negative
        epoch: an administrator's or a standalone consumer's commit, only while the group is empty."""
        if epoch < 0 and not member_id:
            return E.NONE if not group.members else E.UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if epoch > member.epoch:
            return E.FENCED_MEMBER_EPOCH
        if epoch < member.epoch:
            return E.STALE_MEMBER_EPOCH
        return E.NONE

    def consumer_keep_alive(self, group_id: str, member_id: str, epoch: int, rebalance_timeout_ms: int,
                            may_describe, now: float) -> float | None:
        """The steady ConsumerGroupHeartbeat done in place (`ConsumerGroup.keep_alive`), when
        nothing is left to store (what the general path would wait for) and the group's timer
        is armed: a later session deadline then needs no new entry, as `_schedule` would
        find (a group loaded by a new owner is armed by its first general heartbeat). The
        heartbeat interval to answer with, the group's; None: not that case, and
        `consumer_heartbeat` answers."""
        group = self.consumer_groups.get(group_id)
        if (group is None or self._stored.get(group_id, -1) < group.version or group_id not in self._armed
                or not group.keep_alive(now, member_id, epoch, rebalance_timeout_ms, may_describe)):
            return None
        return group.config.heartbeat_interval

    def adopt_consumer(self, group: ConsumerGroup) -> None:
        """A consumer group loaded by a new owner: it is stored as it is."""
        self.consumer_groups[group.group_id] = group
        self._stored[group.group_id], self._epochs[group.group_id] = group.version, group.group_epoch

    # -- migration between the protocols (migration.py) ------------------------------------

    def _upgrade(self, classic: Group) -> ConsumerGroup | None:
        """A classic group with members, joined through ConsumerGroupHeartbeat: the consumer
        group it becomes (its waiting JoinGroup/SyncGroup requests answered
        REBALANCE_IN_PROGRESS: they join again, into it), or None if it may not."""
        policy = self.config.consumer.migration_policy
        upgraded = (upgrade(classic, self.config.consumer, self.consumer_assignors, self.topic_counts)
                    if may_upgrade(policy) else f"group_consumer_migration_policy is {policy}")
        if isinstance(upgraded, str):
            self.log.info("classic group not upgraded", group=classic.group_id, reason=upgraded)
            return None
        now = trio.current_time()
        classic.mark_dead(E.REBALANCE_IN_PROGRESS)
        self._settle(classic, now)
        self.log.info("group upgraded to the consumer protocol", group=classic.group_id,
                      group_epoch=upgraded.group_epoch, members=len(upgraded.members))
        self.events.emit("group_upgraded", classic.group_id, generation=upgraded.group_epoch,
                         members=len(upgraded.members))
        metrics.GROUP_MIGRATIONS.labels("upgrade").inc()
        self._epochs[classic.group_id] = upgraded.group_epoch
        return upgraded

    def _downgrade(self, group: ConsumerGroup, now: float) -> bool:
        """After a member left or was removed: a consumer group whose members all speak the
        classic protocol becomes a classic group again (and rebalances), if the policy lets it."""
        if not may_downgrade(self.config.consumer.migration_policy):
            return False
        classic = downgrade(group, self.config, now)
        if classic is None:
            return False
        self._drop_consumer(group.group_id)
        self.groups[group.group_id] = classic
        self.log.info("group downgraded to the classic protocol", group=group.group_id,
                      generation=classic.generation, members=len(classic.members))
        self.events.emit("group_downgraded", group.group_id, generation=classic.generation,
                         members=len(classic.members))
        metrics.GROUP_MIGRATIONS.labels("downgrade").inc()
        self._settle(classic, now)
        return True

    async def _classic_join(self, group: ConsumerGroup, *, member_id: str, instance_id: str | None,
                            client_id: str, client_host: str, session_timeout: float, rebalance_timeout: float,
                            protocol_type: str, protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                            reason: str | None = None) -> JoinReply:
        """A classic member's JoinGroup into a consumer group (one migrating): answered at
        once with its member epoch as generation and no leader; SyncGroup gives its assignment."""
        if protocol_type != "consumer" or not protocols:
            return JoinReply(member_id, E.INCONSISTENT_GROUP_PROTOCOL)
        if not self.config.min_session_timeout <= session_timeout <= self.config.max_session_timeout:
            return JoinReply(member_id, E.INVALID_SESSION_TIMEOUT)
        try:
            _, subscription = decode_subscription(protocols[0][1])
        except ProtocolError:
            return JoinReply(member_id, E.INCONSISTENT_GROUP_PROTOCOL)
        if not member_id and instance_id is None and require_known_member_id:
            return JoinReply(group.new_member_id(), E.MEMBER_ID_REQUIRED)
        now = trio.current_time()
        owned = [(tp.topic, p) for tp in subscription.owned_partitions for p in tp.partitions]
        reply = group.classic_join(now, member_id=member_id, instance_id=instance_id, client_id=client_id,
                                   client_host=client_host, session_timeout=session_timeout,
                                   rebalance_timeout=rebalance_timeout, protocols=tuple(protocols),
                                   subscribed=list(subscription.topics), owned=owned)
        if reply.error != E.NONE:
            if reply.error == E.GROUP_MAX_SIZE_REACHED:
                self._full(group)
            return JoinReply(member_id, reply.error)
        if not member_id:
            self._joined(group, group.members[reply.member_id])
        self._consumer_settled(group, now)
        error = await self._stored_now(group)
        if error != E.NONE:
            return JoinReply(reply.member_id, error)
        member = group.members.get(reply.member_id)
        if member is None:
            return JoinReply(reply.member_id, E.UNKNOWN_MEMBER_ID)
        return JoinReply(member.member_id, E.NONE, member.epoch, "consumer", member.classic.protocols[0][0])

    def _classic_sync(self, group: ConsumerGroup, member_id: str, *, generation: int, instance_id: str | None,
                      protocol_type: str | None, protocol_name: str | None, assignments) -> SyncReply:
        error, member = group.classic_sync(trio.current_time(), member_id, instance_id, generation, protocol_name)
        if error != E.NONE:
            return SyncReply(member_id, error)
        name, metadata = member.classic.protocols[0]
        version = min(decode_subscription(metadata)[0], 3)
        assignment = encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
            TopicPartition(topic=t, partitions=ps) for t, ps in by_topic(member.assigned).items()]), version)
        return SyncReply(member_id, E.NONE, "consumer", name, assignment)

    def _classic_leave(self, group: ConsumerGroup, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        now = trio.current_time()
        errors = []
        for member_id, instance_id in leaving:
            member = group.classic_member(member_id, instance_id)
            if isinstance(member, ErrorCode):
                errors.append(member)
                continue
            group.remove(member.member_id)
            self._removed(group, member, "left")
            errors.append(E.NONE)
        self._after_removals(group, now)
        return errors

    def _drop_consumer(self, group_id: str) -> None:
        self.consumer_groups.pop(group_id, None)
        self._stored.pop(group_id, None)
        self._epochs.pop(group_id, None)
        self._armed.pop(group_id, None)

    # -- requests -------------------------------------------------------------------------

    async def join(self, group_id: str, **request) -> JoinReply:
        if 0 < request["session_timeout"] <= self.config.failover_detection:
            self._short_session(group_id, request["session_timeout"], request["client_id"])
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return await self._classic_join(consumer_group, **request)
            self._drop_consumer(group_id)
        group = self.group(group_id, create=True)
        now = trio.current_time()
        reply = group.join(now, **request)
        if isinstance(reply, Wait):
            return await self._wait(group, "join", reply.member_id, now)
        self._settle(group, now)
        if (group.state == GroupState.EMPTY and not group.members and not group.pending
                and group.generation == 0):
            self.groups.pop(group_id, None)  # refused before the group ever lived
        return reply

    def _short_session(self, group_id: str, session: float, client_id: str) -> None:
        """Warned once per group (while this owner has it, up to SHORT_SESSION_WARNINGS
        groups): its members' sessions end before a failover of this instance is over."""
        if group_id in self._warned:
            return
        if len(self._warned) >= SHORT_SESSION_WARNINGS:
            self._warned.clear()
        self._warned.add(group_id)
        self.log.warning("session timeout within the failover detection: a crash of this instance will rebalance "
                         "the group (its members' sessions end before another instance serves it; see "
                         "docs/operations.md, What each failure costs)", group=group_id, client_id=client_id,
                         session_timeout_s=session, failover_detection_s=self.config.failover_detection)

    async def sync(self, group_id: str, member_id: str, **request) -> SyncReply:
        if group_id in self.consumer_groups:
            return self._classic_sync(self.consumer_groups[group_id], member_id, **request)
        group = self.group(group_id)
        if group is None:
            return SyncReply(member_id, E.UNKNOWN_MEMBER_ID)
        now = trio.current_time()
        reply = group.sync(now, member_id, **request)
        if isinstance(reply, Wait):
            return await self._wait(group, "sync", member_id, now)
        self._settle(group, now)
        return reply

    def keep_alive(self, group_id: str, member_id: str, generation: int, now: float) -> bool:
        """The usual heartbeat, a Stable dynamic member's, done in place (`Group.keep_alive`);
        False: not that case, and `heartbeat` answers."""
        group = self.groups.get(group_id)
        return group is not None and group.keep_alive(now, member_id, generation)

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str | None) -> ErrorCode:
        if group_id in self.consumer_groups:
            return self.consumer_groups[group_id].classic_heartbeat(trio.current_time(), member_id, instance_id,
                                                                    generation)
        group = self.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        now = trio.current_time()
        error = group.heartbeat(now, member_id, generation, instance_id)
        self._settle(group, now)
        return error

    def leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        if group_id in self.consumer_groups:
            return self._classic_leave(self.consumer_groups[group_id], leaving)
        group = self.group(group_id)
        if group is None:
            return [E.UNKNOWN_MEMBER_ID] * len(leaving)
        now = trio.current_time()
        errors = group.leave(now, leaving)
        self._settle(group, now)
        return errors

    def commit_check(self, group_id: str, member_id: str, generation: int, instance_id: str | None,
                     member_epochs: bool = False, transactional: bool = False) -> ErrorCode:
        """Whether a commit may be taken: a classic member's generation, or a consumer group
        member's epoch (`member_epochs`: OffsetCommit v9+, which they must use; TxnOffsetCommit
        v3+ carries it where the generation is, and is answered ILLEGAL_GENERATION for an
        epoch other than the member's, as Kafka answers a `transactional` commit)."""
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            error = self.member_epoch_check(consumer_group, member_id, generation)
            member = consumer_group.members.get(member_id)
            if transactional or (member is not None and member.classic is not None):  # classic answers
                return E.ILLEGAL_GENERATION if error in (E.STALE_MEMBER_EPOCH, E.FENCED_MEMBER_EPOCH) else error
            if error == E.NONE and member_id and not member_epochs:
                return E.UNSUPPORTED_VERSION  # a consumer-protocol member committing as a classic one
            return error
        group = self.group(group_id)
        if group is None:
            return E.NONE if generation < 0 else E.ILLEGAL_GENERATION
        now = trio.current_time()
        error = group.commit_check(now, member_id, generation, instance_id)
        self._settle(group, now)
        return error

    def topics_changed(self, topic: str, partitions: int, recreated: bool = False) -> None:
        """A subscribed topic was created, grew, was deleted (`partitions` 0) or was deleted
        and created again: rebalance the groups that subscribe, unless their assignment
        already counted `partitions` of the same topic (the change was read before its
        notification arrived; a re-created topic is another topic, whatever its count)."""
        now = trio.current_time()
        self._consumer_topics_changed(now)
        for group in list(self.groups.values()):
            if group.state not in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                continue
            if not recreated and self._counted.get(group.group_id, {}).get(topic, 0) == partitions:
                continue
            if any(topic in _topics(m.metadata(group.protocol_name)) for m in group.members.values()):
                group.request_rebalance(now, f"partitions of {topic} changed")
                self._settle(group, now)

    def adopt(self, group: Group, counted: dict[str, int]) -> None:
        """A group loaded by a new owner, with the partition counts its generation was for."""
        self.groups[group.group_id] = group
        self._counted[group.group_id] = counted

    def check_topics(self) -> None:
        """After a takeover: a loaded generation computed for other topics or partition counts
        than the registry shows now (the previous owner died before it could act on the
        change) is rebalanced."""
        now = trio.current_time()
        self._consumer_topics_changed(now)
        for group in list(self.groups.values()):
            if group.state != GroupState.STABLE:
                continue
            counted = self._counted.get(group.group_id, {})
            topics = {t for m in group.members.values() for t in _topics(m.metadata(group.protocol_name))}
            changed = sorted(t for t in topics if counted.get(t, 0) != self.partitions_of(t))
            if changed:
                group.request_rebalance(now, f"partitions of {changed[0]} changed")
                self._settle(group, now)

    def _consumer_topics_changed(self, now: float) -> None:
        """Consumer groups whose subscribed topics changed get a new group epoch (stored;
        the members learn of their new targets from their next heartbeats)."""
        if self._nursery is None:  # not serving yet: check_topics looks once it is
            return
        for group in self.consumer_groups.values():
            if group.topics_changed():
                self.log.info("subscribed topics changed", group=group.group_id, group_epoch=group.group_epoch)
                self._nursery.start_soon(self._stored_now, group)

    def unload(self) -> None:
        """The group-partition is handed over: every group is Dead here, and requests waiting
        for a generation are answered NOT_COORDINATOR (their clients find the new owner)."""
        now = trio.current_time()
        self._unloaded = True  # writes still under way fail at the store (NOT_COORDINATOR): members go on elsewhere
        self.consumer_groups.clear()
        for group in list(self.groups.values()):
            if group.state != GroupState.DEAD:
                group.mark_dead()
                self._settle(group, now)

    def drop(self, group_id: str) -> None:
        self._drop_consumer(group_id)
        group = self.groups.get(group_id)
        if group is not None:
            group.mark_dead()
            self._settle(group, trio.current_time())


def _owners(group: Group) -> dict[tuple[str, int], str]:
    """(topic, partition) -> member, as the members' current assignments say."""
    return {(topic, p): member_id for member_id, m in group.members.items()
            for topic, ps in _partitions(m.assignment).items() for p in ps}


def _partitions(assignment: bytes) -> dict[str, list[int]]:
    """What the coordinator gave a member last (eager clients report nothing they own)."""
    try:
        return {tp.topic: list(tp.partitions) for tp in decode_assignment(assignment)[1].assigned_partitions}
    except ProtocolError:
        return {}


_topics = subscribed_topics
