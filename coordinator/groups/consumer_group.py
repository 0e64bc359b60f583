"""One consumer-protocol group (KIP-848): pure logic, no I/O, the clock passed in as `now`.

A member speaks one request, ConsumerGroupHeartbeat, and sends only what changed. The
group keeps three epochs:

- the **group epoch**, bumped whenever what the assignment depends on changes (a member
  joins or leaves, a subscription or the chosen assignor changes, a subscribed topic's
  partition count changes, a topic matching a member's regular expression appears or goes);
- the **assignment epoch**, the group epoch the current *target assignment* was computed
  for (the server-side assignor, sticky: each member's current target is its `owned`);
- each **member epoch**: the target epoch the member has reconciled to.

A member moves towards its target a step at a time, and never holds a partition another
member still holds (the state of each member, as Kafka's CurrentAssignmentBuilder):

| Member state | Means | Its next heartbeat |
| --- | --- | --- |
| stable | it holds its target at the assignment epoch | a newer target: the next step |
| unrevoked_partitions | it must give partitions up first; its epoch stays, it is told to keep only target ∩ held | once it reports (owned partitions) none of them: the next step |
| unreleased_partitions | at the new epoch, it holds what it may; partitions of its target are still held by others | the next step, which hands over what others released |

The next step from `held` towards `target`: what it holds outside the target is to be
revoked (unrevoked_partitions, epoch unchanged, assignment held ∩ target); otherwise it
gets every target partition nobody else holds, at the assignment epoch (stable, or
unreleased_partitions while some are held by others).

A member whose session times out (no heartbeat for `session_timeout`) is removed, and so is
one that does not give its partitions up within its rebalance timeout; both bump the group
epoch. Leaving (epoch -1) removes at once; a static member's leave (-2) keeps its place
and target until its session times out, for a member of the same instance id to take over.

A member subscribes by topic names, by a regular expression, or both. The expression has
RE2's syntax and semantics, as Kafka's (google-re2, not Python's `re`: no backtracking, so no
catastrophic patterns), matched against whole topic names; internal topics (`__` names)
never match.

Errors, as Kafka answers them: an unknown member id (epoch not 0) UNKNOWN_MEMBER_ID; an
epoch ahead of the member's, or behind it other than the previous one with nothing more
than its assignment owned, FENCED_MEMBER_EPOCH; an instance id another live member holds
UNRELEASED_INSTANCE_ID; an assignor the coordinator lacks UNSUPPORTED_ASSIGNOR; a join
beyond `max_size` GROUP_MAX_SIZE_REACHED; a join without its subscription or rebalance
timeout, or an epoch below -2, INVALID_REQUEST; an expression RE2 refuses
INVALID_REGULAR_EXPRESSION.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import re2

from protocol import ErrorCode

from ..assignors import CONSUMER_GROUP_ASSIGNORS
from ..assignors.base import Assignor, MemberSubscription, StrategyFailed, checked_assign

E = ErrorCode
TopicPartition = tuple[str, int]
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"  # no members
    ASSIGNING = "Assigning"  # the target assignment is older than the group epoch
    RECONCILING = "Reconciling"  # some member has not reached the target yet
    STABLE = "Stable"  # every member holds its target at the assignment epoch


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout: float = 45.0  # group.consumer.session.timeout.ms
    heartbeat_interval: float = 5.0  # group.consumer.heartbeat.interval.ms
    max_size: int = 0  # group.consumer.max.size; 0: no limit
    max_record_bytes: int = 8 * 1024 * 1024  # of what members make the stored record keep (`member_bytes`)
    # a member's own record is one znode, written in one multi() of at most 256 KiB: the most its
    # JSON and path can take (`member_record_bound`) stays under this
    max_member_record_bytes: int = 192 * 1024
    default_assignor: str = "uniform"  # the first of group.consumer.assignors
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy: see migration.py
    # the runtime's: seconds a write of the group waits before it takes the changes to store,
    # so that the steps of members heartbeating meanwhile share it (group_consumer_store_linger_ms)
    store_linger: float = 0.0

    @property
    def store_linger_s(self) -> float:
        """The linger, at most a tenth of the heartbeat interval: a step's answer is never held
        long against the member's next heartbeat."""
        return min(self.store_linger, self.heartbeat_interval / 10)


@dataclass(frozen=True)
class ClassicProtocol:
    """How a member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat) in a
    consumer group joined: its own session timeout, and its protocols (name, subscription)
    in its order, for its SyncGroup answers and for a group going back to classic."""
    session_timeout: float
    protocols: tuple[tuple[str, bytes], ...]


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: float
    subscribed: tuple[str, ...] = ()
    regex: str | None = None
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: frozenset[TopicPartition] = frozenset()  # what it may use now
    revoking: frozenset[TopicPartition] = frozenset()  # what it must give up
    sent: frozenset[TopicPartition] | None = None  # the assignment last sent to it
    session_deadline: float = 0.0
    revocation_deadline: float | None = None  # while it has partitions to give up
    classic: ClassicProtocol | None = None  # a classic-protocol member (a group migrating), else None
    # with ACLs: whether its client may describe a topic, which its expression's matches are
    # filtered by (Kafka 4, KAFKA-18813); set by each heartbeat, never stored (None: all may be)
    may_describe: Callable[[str], bool] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class HeartbeatReply:
    error: ErrorCode
    member_id: str | None = None
    epoch: int = 0
    heartbeat_interval: float = 0.0
    assignment: frozenset[TopicPartition] | None = None  # only when it changed, or on a (re)join


@dataclass
class ConsumerGroup:
    group_id: str
    config: ConsumerGroupConfig
    assignors: dict[str, Assignor]
    partitions: Mapping[str, int]  # every topic's partition count, as the topic source knows them now
    new_member_id: Callable[[], str] = field(default=lambda: str(uuid.uuid4()))
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""  # the one the target was computed with
    counted: dict[str, int] = field(default_factory=dict)  # the subscribed topics' counts the target used
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    holders: dict[TopicPartition, str] = field(default_factory=dict)  # who holds (or is revoking) each
    version: int = 0  # bumped by every change worth storing: the runtime writes when it moved
    # what changed since the runtime last took it to store (`take_changes`): the group's own
    # part (epochs, assignor, counts, who the members are, the target), and members' parts
    # (a member here and gone from `members` has left); a group never stored has everything
    header_changed: bool = True
    members_changed: set[str] = field(default_factory=set)
    record_bytes: int = 0  # the members' `member_bytes`, summed as they come, change and go
    failures: list[tuple[str, str]] = field(default_factory=list)  # (strategy, what went wrong), for the runtime

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.state is not MemberState.STABLE or m.epoch != self.assignment_epoch
               for m in self.members.values() if m.epoch != STATIC_LEAVE_EPOCH):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    # -- the heartbeat ---------------------------------------------------------------------

    def heartbeat(self, now: float, *, member_id: str, epoch: int, owned: list[TopicPartition] | None = None,
                  **request) -> HeartbeatReply:
        """A heartbeat answered at once: `update`, then `respond`."""
        entered = self.update(now, member_id=member_id, epoch=epoch, owned=owned, **request)
        if isinstance(entered, HeartbeatReply):
            return entered
        return self.respond(now, entered, epoch == 0, owned)

    def keep_alive(self, now: float, member_id: str, epoch: int, rebalance_timeout_ms: int,
                   may_describe: Callable[[str], bool] | None) -> bool:
        """The steady heartbeat (every field null but the rebalance timeout), done in place:
        if the member is known at `epoch`, speaks this protocol, holds its target at the
        group's epoch, was sent what it holds, and nothing it sends changes anything (its
        rebalance timeout -1 or the one kept, the same ACL decider), its session deadline
        moves on, as `update` would move it; then `respond` would answer exactly its member
        id, epoch and interval with no assignment, and the group's `version` has not moved.
        False, having changed nothing: not that case (the general path answers)."""
        member = self.members.get(member_id)
        if (member is None or epoch <= 0 or member.epoch != epoch or member.classic is not None
                or member.state is not MemberState.STABLE or epoch != self.assignment_epoch
                or self.assignment_epoch != self.group_epoch
                # `respond` makes them one object: the identity first spares comparing the sets
                or (member.sent is not member.assigned and member.sent != member.assigned)
                or may_describe is not member.may_describe  # `update` would look at its expression again
                or (rebalance_timeout_ms != -1 and member.rebalance_timeout != rebalance_timeout_ms / 1000)):
            return False
        partitions = self.partitions
        for topic in member.subscribed:  # (a loop, not any(): no generator made per heartbeat)
            if topic not in partitions:  # not known yet: the general path has the topic source look for it
                return False
        member.session_deadline = now + self.config.session_timeout
        return True

    def update(self, now: float, *, member_id: str, epoch: int, instance_id: str | None = None,
               rack_id: str | None = None, rebalance_timeout_ms: int = -1,
               subscribed: list[str] | None = None, regex: str | None = None, assignor: str | None = None,
               owned: list[TopicPartition] | None = None, client_id: str = "",
               client_host: str = "", may_describe: Callable[[str], bool] | None = None
               ) -> ConsumerMember | HeartbeatReply:
        """The first half of a heartbeat: the member joins, leaves, or is checked and its
        subscription kept (which may bump the group epoch); the answer when that is all
        (a leave, an error), else the member, for `respond`. The runtime lets every heartbeat
        that arrived together do this half before any responds, so they share one target."""
        if epoch < STATIC_LEAVE_EPOCH:
            return HeartbeatReply(E.INVALID_REQUEST)
        if epoch == LEAVE_EPOCH or epoch == STATIC_LEAVE_EPOCH:
            return self._leave(now, member_id, epoch)
        if assignor is not None and assignor not in self.assignors:
            return HeartbeatReply(E.UNSUPPORTED_ASSIGNOR)
        if regex and _compiled(regex) is None:
            return HeartbeatReply(E.INVALID_REGULAR_EXPRESSION)
        if epoch == 0:
            joined = self._join(now, member_id, instance_id, rack_id, rebalance_timeout_ms, subscribed, regex,
                                owned, client_id, client_host)
            if isinstance(joined, HeartbeatReply):
                return joined
            member = joined
        else:
            member = self.members.get(member_id)
            if member is None or member.epoch == STATIC_LEAVE_EPOCH or member.classic is not None:
                return HeartbeatReply(E.UNKNOWN_MEMBER_ID)
            if not self._epoch_ok(member, epoch, owned):
                return HeartbeatReply(E.FENCED_MEMBER_EPOCH)
        names = member.subscribed if subscribed is None else tuple(sorted(set(subscribed)))
        pattern = member.regex if regex is None else regex or None  # "": no expression any more
        if epoch != 0 and (names, pattern, rack_id or member.rack_id) != (member.subscribed, member.regex,
                                                                          member.rack_id):
            size = _size(member.member_id, member.instance_id, rack_id or member.rack_id, member.client_id,
                         member.client_host, pattern, names, member.classic)
            bound = _size(member.member_id, member.instance_id, rack_id or member.rack_id, member.client_id,
                          member.client_host, pattern, names, member.classic, worst=True)
            if not self._fits(size - member_bytes(member), bound):
                return HeartbeatReply(E.GROUP_MAX_SIZE_REACHED)
            self.record_bytes += size - member_bytes(member)
        changed = (names, pattern) != (member.subscribed, member.regex)
        member.subscribed, member.regex = names, pattern
        if may_describe is not member.may_describe:  # the ACLs it is judged by changed (the same
            # decider comes back while they stay): what its expression resolves to may differ now
            if pattern and epoch != 0 and not changed:
                changed = self.topics_of(member) != self._topics_with(member, may_describe)
            member.may_describe = may_describe
        if assignor is not None and assignor != member.assignor:
            member.assignor, changed = assignor, True
        if rebalance_timeout_ms != -1 and member.rebalance_timeout != rebalance_timeout_ms / 1000:
            member.rebalance_timeout = rebalance_timeout_ms / 1000
            self._member_changed(member)
        if rack_id is not None and rack_id != member.rack_id:
            member.rack_id = rack_id
            self._member_changed(member)
        if changed and epoch != 0:
            self.group_epoch += 1
            self._member_changed(member, header=True)
        member.session_deadline = now + self.config.session_timeout
        return member

    def respond(self, now: float, member: ConsumerMember, joined: bool,
                owned: list[TopicPartition] | None) -> HeartbeatReply:
        """The second half: the target brought up to the group epoch if it is behind, the
        member's next reconciliation step, and its answer (the assignment only when it
        changed, or on a join, or when what the member reports differs)."""
        if self.members.get(member.member_id) is not member:  # removed meanwhile (timed out, replaced)
            return HeartbeatReply(E.UNKNOWN_MEMBER_ID)
        if self.assignment_epoch < self.group_epoch:
            self._assign()
        reported = None if owned is None else frozenset(owned)
        self._reconcile(now, member, reported)
        assignment = None
        if joined or member.sent != member.assigned or (reported is not None and reported != member.assigned):
            assignment = member.sent = member.assigned
        return HeartbeatReply(E.NONE, member.member_id, member.epoch, self.config.heartbeat_interval, assignment)

    def _join(self, now: float, member_id: str, instance_id: str | None, rack_id: str | None,
              rebalance_timeout_ms: int, subscribed: list[str] | None, regex: str | None, owned, client_id: str,
              client_host: str) -> ConsumerMember | HeartbeatReply:
        if (subscribed is None and not regex) or rebalance_timeout_ms < 0 or (owned is not None and owned):
            return HeartbeatReply(E.INVALID_REQUEST)
        replaced = None
        if instance_id is not None:
            replaced = next((m for m in self.members.values() if m.instance_id == instance_id), None)
            if replaced is not None and replaced.epoch != STATIC_LEAVE_EPOCH and replaced.member_id != member_id:
                return HeartbeatReply(E.UNRELEASED_INSTANCE_ID)
        existing = self.members.get(member_id) if member_id else None
        if replaced is None and existing is None and self.config.max_size and len(self.members) >= self.config.max_size:
            return HeartbeatReply(E.GROUP_MAX_SIZE_REACHED)
        member = ConsumerMember(member_id or self.new_member_id(), instance_id, rack_id, client_id, client_host,
                                rebalance_timeout_ms / 1000, tuple(sorted(set(subscribed or ()))), regex or None)
        leaving = replaced if replaced is not None and replaced.member_id != member.member_id else existing
        if not self._fits(member_bytes(member) - (member_bytes(leaving) if leaving is not None else 0),
                          member_record_bound(member)):
            return HeartbeatReply(E.GROUP_MAX_SIZE_REACHED)
        if replaced is not None and replaced.member_id != member.member_id:
            self._take_place(replaced, member)
            if (member.subscribed, member.regex) != (replaced.subscribed, replaced.regex):
                self.group_epoch += 1
        else:
            if existing is not None:  # a rejoin (after it was fenced, say): it starts afresh
                self._release(existing)
                self._drop(existing.member_id)
            self.group_epoch += 1
            self.add(member)
        self._changed()  # who the members are (and, but for a static member's return, the epoch)
        return member

    def _take_place(self, old: ConsumerMember, new: ConsumerMember) -> None:
        """A static member's new incarnation takes the old one's place: its epoch, target and
        partitions carry over, nothing is reassigned (one that left with -2: the epoch it had)."""
        self._release(old)
        self._drop(old.member_id)
        self.target[new.member_id] = self.target.pop(old.member_id, frozenset())
        self._changed()  # who the members are, and whose the target is
        new.epoch = old.previous_epoch if old.epoch == STATIC_LEAVE_EPOCH else old.epoch
        new.previous_epoch = old.previous_epoch
        new.state, new.assigned, new.revoking = old.state, old.assigned, old.revoking
        new.revocation_deadline = old.revocation_deadline
        self.add(new)
        self.hold(new)

    def _epoch_ok(self, member: ConsumerMember, epoch: int, owned) -> bool:
        if epoch == member.epoch:
            return True
        # the answer that gave it its epoch was lost: it may go on from the previous one,
        # if it holds no more than it was told to keep
        return (epoch == member.previous_epoch and epoch < member.epoch
                and (owned is None or set(owned) <= member.assigned))

    def _leave(self, now: float, member_id: str, epoch: int) -> HeartbeatReply:
        member = self.members.get(member_id)
        if member is None:
            return HeartbeatReply(E.UNKNOWN_MEMBER_ID)
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # its place, target and partitions kept for one session timeout, for its instance to come back
            member.previous_epoch, member.epoch = member.epoch, STATIC_LEAVE_EPOCH
            member.session_deadline = now + self.config.session_timeout
            self._member_changed(member)
            return HeartbeatReply(E.NONE, member_id, STATIC_LEAVE_EPOCH)
        self.remove(member_id)
        return HeartbeatReply(E.NONE, member_id, LEAVE_EPOCH)

    # -- members that speak the classic protocol (a group migrating) ------------------------

    def classic_join(self, now: float, *, member_id: str, instance_id: str | None, client_id: str,
                     client_host: str, session_timeout: float, rebalance_timeout: float,
                     protocols: tuple[tuple[str, bytes], ...], subscribed: list[str],
                     owned: list[TopicPartition]) -> HeartbeatReply:
        """A JoinGroup: the member's subscription kept as a heartbeat's would be, and its next
        reconciliation step from what it reports owning (a cooperative client its partitions;
        an eager one nothing: it gave everything up before joining). Its generation is its
        member epoch; SyncGroup then hands it `assigned`."""
        member = self.members.get(member_id)
        if instance_id is not None:
            static = next((m for m in self.members.values() if m.instance_id == instance_id), None)
            if static is not None and static.member_id != member_id:
                if member_id:  # a known id that is not the instance's current one
                    return HeartbeatReply(E.FENCED_INSTANCE_ID)
                member = ConsumerMember(self.new_member_id(), instance_id, static.rack_id, client_id, client_host,
                                        rebalance_timeout, static.subscribed, static.regex)
                self._take_place(static, member)
        new = member is None
        epoch_before = self.group_epoch
        names, classic = tuple(sorted(set(subscribed))), ClassicProtocol(session_timeout, tuple(protocols))
        if new:
            if self.config.max_size and len(self.members) >= self.config.max_size:
                return HeartbeatReply(E.GROUP_MAX_SIZE_REACHED)
            member = ConsumerMember(member_id or self.new_member_id(), instance_id, None, client_id, client_host,
                                    rebalance_timeout)
        wanted = _size(member.member_id, instance_id, member.rack_id, client_id, client_host, member.regex, names,
                       classic)
        bound = _size(member.member_id, instance_id, member.rack_id, client_id, client_host, member.regex, names,
                      classic, worst=True)
        if not self._fits(wanted - (0 if new else member_bytes(member)), bound):
            return HeartbeatReply(E.GROUP_MAX_SIZE_REACHED)
        if new:
            self.add(member)
            self.group_epoch += 1
        self.record_bytes -= member_bytes(member)
        if names != member.subscribed:
            member.subscribed = names
            if not new:
                self.group_epoch += 1
        member.client_id, member.client_host, member.rebalance_timeout = client_id, client_host, rebalance_timeout
        member.classic = classic
        self.record_bytes += member_bytes(member)
        member.session_deadline = now + session_timeout
        self._member_changed(member, header=new or self.group_epoch != epoch_before)
        return self.respond(now, member, True, owned)

    def classic_member(self, member_id: str, instance_id: str | None) -> ConsumerMember | ErrorCode:
        """The classic-protocol member a SyncGroup, Heartbeat or LeaveGroup names, or the error."""
        member = self.members.get(member_id)
        if instance_id is not None:
            static = next((m for m in self.members.values() if m.instance_id == instance_id), None)
            if static is None:
                return E.UNKNOWN_MEMBER_ID
            if static.member_id != member_id:
                return E.FENCED_INSTANCE_ID
        if member is None or member.classic is None:
            return E.UNKNOWN_MEMBER_ID
        return member

    def classic_sync(self, now: float, member_id: str, instance_id: str | None, generation: int,
                     protocol_name: str | None) -> tuple[ErrorCode, ConsumerMember | None]:
        """A SyncGroup: the member's assignment at its epoch, unless it must join again first."""
        member = self.classic_member(member_id, instance_id)
        if isinstance(member, ErrorCode):
            return member, None
        if generation != member.epoch:
            return E.ILLEGAL_GENERATION, None
        if protocol_name is not None and protocol_name != member.classic.protocols[0][0]:
            return E.INCONSISTENT_GROUP_PROTOCOL, None
        if self.group_epoch > member.epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            return E.REBALANCE_IN_PROGRESS, None
        member.session_deadline = now + member.classic.session_timeout
        return E.NONE, member

    def classic_heartbeat(self, now: float, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        """A Heartbeat: REBALANCE_IN_PROGRESS whenever the member has a step to take (a newer
        epoch, partitions to give up, or partitions of its target now free), which only a
        JoinGroup can take for it."""
        member = self.classic_member(member_id, instance_id)
        if isinstance(member, ErrorCode):
            return member
        if generation != member.epoch:
            return E.ILLEGAL_GENERATION
        member.session_deadline = now + member.classic.session_timeout
        target = self.target.get(member.member_id, frozenset())
        if (member.epoch < self.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS
                    and any(tp not in self.holders for tp in target - member.assigned))):
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # -- assignment and reconciliation ------------------------------------------------------

    def _assign(self) -> None:
        """The target assignment for the group epoch: the chosen assignor (the members' most
        named, else the default), each member's current target as its `owned` (sticky)."""
        named = [m.assignor for m in self.members.values() if m.assignor]
        name = max(sorted(set(named)), key=named.count) if named else self.config.default_assignor
        topics = {m.member_id: self.topics_of(m) for m in self.members.values()}
        subscriptions = [MemberSubscription(m.member_id, tuple(sorted(topics[m.member_id])), m.instance_id,
                                            owned=by_topic(self.target.get(m.member_id, frozenset())))
                         for m in sorted(self.members.values(), key=lambda m: m.member_id)]
        counts = self._counts(set().union(*topics.values()))
        assignor = self.assignors[name]
        try:  # a strategy not shipped here is distrusted: its failure or wrong answer, and uniform's instead
            assigned = checked_assign(assignor, subscriptions, counts,
                                      check=assignor is not CONSUMER_GROUP_ASSIGNORS.get(name)).partitions
        except StrategyFailed as exc:
            self.failures.append((name, str(exc)))
            name = "uniform"
            assigned = CONSUMER_GROUP_ASSIGNORS[name].assign(subscriptions, counts).partitions
        self.target = {mid: frozenset((t, p) for t, ps in assigned.get(mid, {}).items() for p in ps)
                       for mid in self.members}
        self.assignment_epoch, self.assignor, self.counted = self.group_epoch, name, counts
        self._changed()

    def _counts(self, topics) -> dict[str, int]:
        return {t: n for t in topics if (n := self.partitions.get(t, 0))}

    def _reconcile(self, now: float, member: ConsumerMember, owned: frozenset[TopicPartition] | None) -> None:
        target = self.target.get(member.member_id, frozenset())
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.revoking:
                return  # still holding what it must give up
            self._release_partitions(member, member.revoking)
            member.revoking = frozenset()
            member.revocation_deadline = None
        elif member.state is MemberState.STABLE and member.epoch == self.assignment_epoch:
            return
        self._member_changed(member)
        revoke = member.assigned - target
        if revoke and owned is not None and not owned & revoke:  # it reports holding none of them: gone already
            member.assigned = member.assigned & target
            self._release_partitions(member, revoke)
            revoke = frozenset()
        if revoke:
            member.state, member.revoking = MemberState.UNREVOKED_PARTITIONS, revoke
            member.assigned = member.assigned & target
            member.revocation_deadline = now + member.rebalance_timeout
            self.hold(member)
            return
        free = {tp for tp in target - member.assigned if self.holders.get(tp, member.member_id) == member.member_id}
        member.assigned = member.assigned | free
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        member.state = MemberState.STABLE if member.assigned == target else MemberState.UNRELEASED_PARTITIONS
        self.hold(member)

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        self.record_bytes += member_bytes(member)
        self.members_changed.add(member.member_id)

    def _drop(self, member_id: str) -> ConsumerMember:
        member = self.members.pop(member_id)
        self.record_bytes -= member_bytes(member)
        self.members_changed.add(member_id)
        return member

    def _changed(self) -> None:
        """A change of the group's own part (see `header_changed`)."""
        self.header_changed = True
        self.version += 1

    def _member_changed(self, member: ConsumerMember, header: bool = False) -> None:
        self.members_changed.add(member.member_id)
        self.header_changed |= header
        self.version += 1

    def take_changes(self) -> tuple[bool, set[str]]:
        """What changed since the last call (the group's own part, members' ids), now taken
        to be stored; `give_back` returns it when storing it failed."""
        taken = self.header_changed, self.members_changed
        self.header_changed, self.members_changed = False, set()
        return taken

    def give_back(self, header: bool, members: set[str]) -> None:
        self.header_changed |= header
        self.members_changed |= members

    def _fits(self, more: int, bound: int) -> bool:
        """Whether the record may grow by `more` bytes (a join, or a bigger subscription), for
        a member whose own record may then take `bound` bytes (`member_record_bound`)."""
        if bound > self.config.max_member_record_bytes:
            return False
        return not self.config.max_record_bytes or self.record_bytes + more <= self.config.max_record_bytes

    def hold(self, member: ConsumerMember) -> None:
        """Note the member as holder of what it may use and what it is giving up."""
        for tp in member.assigned | member.revoking:
            self.holders[tp] = member.member_id

    def _release_partitions(self, member: ConsumerMember, released) -> None:
        for tp in released:
            if self.holders.get(tp) == member.member_id:
                del self.holders[tp]

    def _release(self, member: ConsumerMember) -> None:
        self._release_partitions(member, member.assigned | member.revoking)

    # -- time and topics --------------------------------------------------------------------

    def remove(self, member_id: str) -> None:
        """Take a member out (left, timed out, fenced): its partitions free, the group epoch bumped."""
        member = self._drop(member_id)
        self._release(member)
        self.target.pop(member_id, None)
        self.group_epoch += 1
        self._changed()

    def expire(self, now: float) -> list[tuple[ConsumerMember, str]]:
        """Remove the members whose session ran out, or that did not give partitions up within
        their rebalance timeout; (member, why) of each."""
        gone = []
        for member in list(self.members.values()):
            if member.session_deadline <= now:
                gone.append((member, "session timeout"))
            elif member.revocation_deadline is not None and member.revocation_deadline <= now:
                gone.append((member, "revocation timeout"))
        for member, _ in gone:
            self.remove(member.member_id)
        return gone

    def next_deadline(self) -> float | None:
        deadlines = [d for m in self.members.values() for d in (m.session_deadline, m.revocation_deadline)
                     if d is not None]
        return min(deadlines, default=None)

    def topics_of(self, member: ConsumerMember) -> set[str]:
        """The topics a member subscribes to: its names, and the existing topics its expression matches."""
        topics = set(member.subscribed)
        if member.regex:
            pattern = _compiled(member.regex)
            may = member.may_describe
            topics |= {t for t in self.partitions if not t.startswith("__") and pattern.fullmatch(t)
                       and (may is None or may(t))}
        return topics

    def _topics_with(self, member: ConsumerMember, may_describe: Callable[[str], bool] | None) -> set[str]:
        was, member.may_describe = member.may_describe, may_describe
        try:
            return self.topics_of(member)
        finally:
            member.may_describe = was

    def topics_changed(self) -> bool:
        """The topic source changed: if what the members subscribe to now differs from what
        the target was computed for (a count, or a topic an expression matches appearing or
        going), the group epoch is bumped; whether it was."""
        if self.assignment_epoch < self.group_epoch or not self.members:
            return False  # a new target is due anyway (and an empty group has none)
        now = self._counts(set().union(*(self.topics_of(m) for m in self.members.values())))
        if now == self.counted:
            return False
        self.group_epoch += 1
        self._changed()
        return True


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a client's bad expression is its answer, not lines on our stderr
_RE2_OPTIONS.max_mem = 1 << 20  # bytes a compiled expression may take: a hostile one is refused


@lru_cache(maxsize=1024)
def _compiled(regex: str):
    """The expression compiled by RE2 (None if RE2 refuses it); bounded cache, as clients
    repeat theirs on every join."""
    try:
        return re2.compile(regex, _RE2_OPTIONS)
    except re2.error:
        return None


MEMBER_RECORD_OVERHEAD = 128  # bytes a member takes in the stored record besides what it names


def member_bytes(m: ConsumerMember) -> int:
    """What a member makes its group's stored record keep, of what it chose: ids, host,
    subscription, and a classic member's protocols (its partitions are the topics')."""
    return _size(m.member_id, m.instance_id, m.rack_id, m.client_id, m.client_host, m.regex, m.subscribed, m.classic)


def member_record_bound(m: ConsumerMember) -> int:
    """The most a member's own stored record and its znode's path can take: its strings at 6
    bytes a character (JSON's escape of a control character), its member id 3 more (escaped
    into the path), its protocols' metadata in base64."""
    return _size(m.member_id, m.instance_id, m.rack_id, m.client_id, m.client_host, m.regex, m.subscribed, m.classic,
                 worst=True)


def _size(member_id, instance_id, rack_id, client_id, client_host, regex, subscribed, classic,
          worst: bool = False) -> int:
    text = (len(member_id) + len(instance_id or "") + len(rack_id or "") + len(client_id) + len(client_host)
            + len(regex or "") + sum(len(t) + 4 for t in subscribed)
            + (sum(len(name) for name, _ in classic.protocols) if classic else 0))
    encoded = sum(-(-len(metadata) // 3) * 4 for _, metadata in classic.protocols) if classic else 0
    if worst:
        return 4 * MEMBER_RECORD_OVERHEAD + 6 * text + 3 * len(member_id) + encoded
    return MEMBER_RECORD_OVERHEAD + text + encoded


def by_topic(tps) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, p in sorted(tps):
        out.setdefault(topic, []).append(p)
    return out
