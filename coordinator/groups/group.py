"""One classic consumer group: pure logic, no I/O, the clock passed in as `now` (seconds).

Requests come in as method calls and are answered at once (a reply object) or later: a
JoinGroup or SyncGroup that must wait returns `Wait` and its reply appears in `outbox` when
the group decides, together with the effects the runtime carries out (compute an
assignment, persist a generation, log and count). The runtime sleeps until
`next_deadline()` and then calls `tick(now)`; every timeout lives there.
"""

from __future__ import annotations

import heapq
import math
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from protocol import ErrorCode, ProtocolError
from protocol.consumer import decode_subscription

from .consumer_group import ConsumerGroupConfig
from .state import TRANSITIONS, GroupState, IllegalTransition

E = ErrorCode
NEW_MEMBER_JOIN_TIMEOUT = 300.0  # seconds, as Kafka's GroupCoordinator.NewMemberJoinTimeoutMs
MEMBER_RECORD_OVERHEAD = 128  # bytes a member takes in the stored record besides its names and data
_STABLE = GroupState.STABLE  # looked up on every heartbeat: a global is cheaper than the enum's attribute


@dataclass(frozen=True)
class GroupConfig:
    min_session_timeout: float = 6.0  # group.min.session.timeout.ms
    max_session_timeout: float = 1800.0  # group.max.session.timeout.ms
    initial_rebalance_delay: float = 3.0  # group.initial.rebalance.delay.ms
    max_size: int = 0  # group.max.size; 0: no limit
    max_group_id_length: int = 1024  # characters; longer ids are refused (INVALID_GROUP_ID)
    max_record_bytes: int = 8 * 1024 * 1024  # a generation's members, as `record_bytes` counts them
    max_commit_partitions: int = 10_000  # partitions in one OffsetCommit; more: INVALID_COMMIT_OFFSET_SIZE
    max_offset_metadata_bytes: int = 1024 * 1024  # of a group's committed offsets' metadata, in all
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)  # KIP-848 groups'
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes (groups/retention.py)
    offsets_retention_check_interval: float = 600.0  # seconds: offsets.retention.check.interval.ms
    # Seconds from a crash of the owning instance until its groups are served elsewhere: its
    # ZooKeeper session timeout and FAILOVER_MARGIN (0: not known). A classic member whose
    # session is no longer ends its membership on its side first (a rebalance at failover).
    failover_detection: float = 0.0


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout: float
    rebalance_timeout: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    is_new: bool = True
    deadline: float = 0.0  # session expiry
    timer: float | None = None  # the deadline of its entry in the group's timer heap, if any
    stored: int = 0  # what it adds to the group's record_bytes
    # loaded by a new owner and not heard from since: its client may have given up its
    # membership during the failover and be back under a new member id (`Group._add`)
    unheard: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def record_bytes(self, assignment: bytes | None = None) -> int:
        """Its share of the stored generation: names, the largest of its protocols' metadata
        (the one voted for is not known before the join completes) and its assignment."""
        names = len(self.member_id) + len(self.instance_id or "") + len(self.client_id) + len(self.client_host)
        largest = max((len(m) for _, m in self.protocols), default=0)
        return (MEMBER_RECORD_OVERHEAD + names + largest
                + len(self.assignment if assignment is None else assignment))


# -- what the group tells the runtime ---------------------------------------------------------

@dataclass(frozen=True)
class JoinReply:
    member_id: str
    error: ErrorCode = E.NONE
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # the leader's view
    # a static leader back within its session (KIP-345), or a leader's place taken after a
    # failover (`Group._take_place`): the member id it had before. Below
    # JoinGroup v9 the answer names that id as the leader, with no members: a follower's
    # answer, so the client does not assign and rejoin (v9+: see GroupApi.join_group)
    replaced: str = ""


@dataclass(frozen=True)
class SyncReply:
    member_id: str
    error: ErrorCode = E.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class Wait:
    """The request waits: its reply for `member_id` will appear in the outbox."""
    member_id: str


@dataclass(frozen=True)
class AssignmentNeeded:
    """A generation is complete: compute its assignment, or wait for the leader's."""
    generation: int


@dataclass(frozen=True)
class PersistNeeded:
    """Write `Group.snapshot()` for this generation, then call `persisted()`."""
    generation: int


@dataclass(frozen=True)
class MembersChanged:
    """A member took another's place in the Stable generation (a static member back under
    its instance id, a newcomer after a failover): write the generation again with its new
    member id, or a new owner after a failover would load the old one (and fence a static
    member whose instance id it names)."""
    generation: int


@dataclass(frozen=True)
class RebalanceStarted:
    reason: str
    generation: int  # the generation being left behind


@dataclass(frozen=True)
class RebalanceCompleted:
    generation: int
    members: int
    duration: float
    reason: str  # what started it


@dataclass(frozen=True)
class MemberAdded:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    generation: int  # the one in force when it joined


@dataclass(frozen=True)
class CapacityReached:
    """A member was turned away (GROUP_MAX_SIZE_REACHED): the group is at `limit`
    ("group_max_size" or "group_max_record_bytes"). `first` is set on the first refusal since
    the group last shrank, so that a flood of joins is logged once and counted each time."""
    limit: str
    member_id: str
    members: int
    record_bytes: int
    first: bool


@dataclass(frozen=True)
class MemberRemoved:
    member_id: str
    # "left", "session timeout", "rebalance timeout", "sync timeout", "replaced after failover"
    reason: str
    generation: int  # the one it was removed from
    client_id: str = field(default="", compare=False)
    client_host: str = field(default="", compare=False)


Effect = (JoinReply | SyncReply | AssignmentNeeded | PersistNeeded | MembersChanged | RebalanceStarted
          | RebalanceCompleted | MemberAdded | MemberRemoved | CapacityReached)


def new_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"


@dataclass
class Group:
    group_id: str
    config: GroupConfig = field(default_factory=GroupConfig)
    new_id: Callable[[str], str] = new_member_id
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    static: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending: dict[str, float] = field(default_factory=dict)  # MEMBER_ID_REQUIRED ids -> expiry
    outbox: list[Effect] = field(default_factory=list)
    leader_assigns: bool = False  # the runtime could not assign: take the leader's SyncGroup
    # Wall-clock ms when it last became Empty (Kafka's currentStateTimestamp, from which an
    # Empty group's offsets expire): stamped by the runtime, stored with the empty
    # generation, so it survives a takeover; None: not known (a record written before it was
    # kept), then each offset expires from its own commit, as Kafka does.
    empty_since_ms: int | None = None
    record_bytes: int = 0  # what the members take in the stored generation (Member.record_bytes)
    # Running totals, so that no request walks every member: members waiting in a join, and
    # how many members offer each protocol.
    _joining: int = 0
    _offered: Counter = field(default_factory=Counter)
    _assigned: int = 0  # bytes of the members' assignments
    _proposed: int = 0  # bytes a member of the last assignment computed got, on average
    _fits: int = 0  # members left when an assignment last had to shed some: no more are let in
    # Timer heaps of (deadline, member id) and (expiry, pending id). A member has at most one
    # live entry (the one its `timer` names); a heartbeat that only moves its deadline later
    # pushes nothing, and an entry that comes due early is pushed again for the new deadline.
    _timers: list[tuple[float, str]] = field(default_factory=list)
    _pending_timers: list[tuple[float, str]] = field(default_factory=list)
    _at_capacity: bool = False  # a member was turned away since the group last shrank
    # loaded members not heard from since the load, by (client id, client host), oldest first
    _unheard: dict[tuple[str, str], dict[str, None]] = field(default_factory=dict)
    _pending_assignment: dict[str, bytes] | None = None
    _rebalance_started: float = 0.0
    _rebalance_reason: str = ""
    _rebalance_deadline: float = 0.0
    _initial_deadline: float = 0.0
    _sync_deadline: float = 0.0

    # -- transitions ----------------------------------------------------------------------

    def _to(self, state: GroupState) -> None:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"group {self.group_id}: {self.state.value} -> {state.value}")
        self.state = state

    def _prepare_rebalance(self, now: float, reason: str) -> None:
        if self.state == GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    self._arm(m, m.deadline)
                    self.outbox.append(SyncReply(m.member_id, E.REBALANCE_IN_PROGRESS))
            self._pending_assignment = None
        was_empty = self.state == GroupState.EMPTY
        self._to(GroupState.PREPARING_REBALANCE)
        self._rebalance_started, self._rebalance_reason = now, reason
        timeout = max((m.rebalance_timeout for m in self.members.values()), default=0.0)
        self._rebalance_deadline = now + timeout
        self._initial_deadline = (min(now + self.config.initial_rebalance_delay, self._rebalance_deadline)
                                  if was_empty else now)
        self.outbox.append(RebalanceStarted(reason, self.generation))

    def _maybe_complete_join(self, now: float) -> None:
        if self.state != GroupState.PREPARING_REBALANCE:
            return
        everyone = self._joining == len(self.members) and not self.pending and now >= self._initial_deadline
        if everyone or now >= self._rebalance_deadline:
            self._complete_join(now)

    def _complete_join(self, now: float) -> None:
        for m in [m for m in self.members.values() if not m.awaiting_join]:
            self._remove(m, "rebalance timeout")
        while self.record_bytes > self.config.max_record_bytes:  # rejoined with larger metadata
            self._shed(next(reversed(self.members.values())))
        self.generation += 1
        if not self.members:
            self._to(GroupState.EMPTY)
            self.protocol_name, self.leader, self._fits = None, None, 0
            self.outbox.append(PersistNeeded(self.generation))
            self.outbox.append(RebalanceCompleted(self.generation, 0, now - self._rebalance_started,
                                                  self._rebalance_reason))
            return
        self.protocol_name = self._vote()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self._to(GroupState.COMPLETING_REBALANCE)
        self.leader_assigns = False
        self._sync_deadline = now + max(m.rebalance_timeout for m in self.members.values())
        self._joining = 0
        for m in self.members.values():
            m.awaiting_join, m.is_new = False, False
            self._arm(m, now + m.session_timeout)
            self.outbox.append(self._join_reply(m))
        self.outbox.append(AssignmentNeeded(self.generation))

    def _join_reply(self, m: Member) -> JoinReply:
        members = ()
        if m.member_id == self.leader:
            members = tuple((o.member_id, o.instance_id, o.metadata(self.protocol_name))
                            for o in self.members.values())
        return JoinReply(m.member_id, E.NONE, self.generation, self.protocol_type, self.protocol_name,
                         self.leader or "", members)

    def _vote(self) -> str:
        """Kafka's vote: among protocols every member supports, each member votes for the
        first of its own list; most votes wins, ties by the first member's preference."""
        members = list(self.members.values())
        candidates = [name for name, _ in members[0].protocols if self._offered[name] == len(members)]
        votes = {name: 0 for name in candidates}
        for m in members:
            votes[next(name for name, _ in m.protocols if name in votes)] += 1
        return max(candidates, key=lambda name: votes[name])

    def _supports(self, member_id: str, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member offering `protocols` has one in common with every other member."""
        if not protocols or not protocol_type:
            return False
        me = self.members.get(member_id)
        others = len(self.members) - (me is not None)
        if not others:
            return True
        if protocol_type != self.protocol_type:
            return False
        mine = {name for name, _ in me.protocols} if me is not None else set()
        return any(self._offered[name] - (name in mine) == others for name in {n for n, _ in protocols})

    # -- membership bookkeeping -----------------------------------------------------------

    def _count(self, m: Member, sign: int) -> None:
        """Add `m` to (1) or take it out of (-1) the running totals; every change to what
        they count happens between the two."""
        if sign > 0:
            m.stored = m.record_bytes()
        self.record_bytes += sign * m.stored
        self._assigned += sign * len(m.assignment)
        self._joining += sign * m.awaiting_join
        for name in {name for name, _ in m.protocols}:
            self._offered[name] += sign
            if not self._offered[name]:
                del self._offered[name]

    def _update(self, m: Member, **changes) -> None:
        self._count(m, -1)
        for key, value in changes.items():
            setattr(m, key, value)
        self._count(m, 1)

    def load_member(self, m: Member) -> None:
        """A member of a generation read from the store (by a new owner: unheard until its
        client speaks to this one)."""
        self.members[m.member_id] = m
        if m.instance_id is not None:
            self.static[m.instance_id] = m.member_id
        self._count(m, 1)
        self._arm(m, m.deadline)
        m.unheard = True
        self._unheard.setdefault((m.client_id, m.client_host), {})[m.member_id] = None

    def _heard(self, m: Member) -> None:
        """Its client spoke to this coordinator (or it is gone): no newcomer replaces it."""
        m.unheard = False
        key = (m.client_id, m.client_host)
        ids = self._unheard.get(key)
        if ids is not None:
            ids.pop(m.member_id, None)
            if not ids:
                del self._unheard[key]

    def _replaceable(self, client_id: str, client_host: str) -> Member | None:
        """A loaded member, never heard from since the load, of the same client id and host as
        a newcomer: after a failover that outlived the clients' sessions, dynamic members of
        librdkafka (which drops its member id when its session ends without an answer) come
        back under new ids, and the group must not wait out the old ids' sessions (one
        detection, not two). One newcomer replaces one such member, the oldest first: in its
        place without a rebalance where the group is Stable and the subscription the same
        (`_take_place`), else the member is removed and the newcomer joins the rebalance. If
        the one replaced was in fact alive and slow, its next request is UNKNOWN_MEMBER_ID
        and it joins again (its commits are refused meanwhile, as a zombie's are)."""
        ids = self._unheard.get((client_id, client_host))
        return self.members[next(iter(ids))] if ids else None

    def _arm(self, m: Member, deadline: float) -> None:
        """Set the member's session deadline; the timer heap gets an entry only when the
        member has none due before it."""
        m.deadline = deadline
        if m.timer is None or deadline < m.timer:
            m.timer = deadline
            heapq.heappush(self._timers, (deadline, m.member_id))
            if len(self._timers) > 2 * len(self.members) + 64:  # entries of members gone
                self._timers = [(m.timer, m.member_id) for m in self.members.values() if m.timer is not None]
                heapq.heapify(self._timers)

    def _pend(self, member_id: str, expiry: float) -> None:
        """A MEMBER_ID_REQUIRED id, kept until `expiry` for its member's second JoinGroup."""
        self.pending[member_id] = expiry
        heapq.heappush(self._pending_timers, (expiry, member_id))
        if len(self._pending_timers) > 2 * len(self.pending) + 64:  # entries of ids gone
            self._pending_timers = [(e, i) for i, e in self.pending.items()]
            heapq.heapify(self._pending_timers)

    def _remove(self, m: Member, reason: str, error: ErrorCode = E.UNKNOWN_MEMBER_ID) -> None:
        if m.unheard:
            self._heard(m)
        self._count(m, -1)
        del self.members[m.member_id]
        self._at_capacity = False
        if m.instance_id is not None and self.static.get(m.instance_id) == m.member_id:
            del self.static[m.instance_id]
        if m.awaiting_join:
            self.outbox.append(JoinReply(m.member_id, error))
        if m.awaiting_sync:
            self.outbox.append(SyncReply(m.member_id, error))
        self.outbox.append(MemberRemoved(m.member_id, reason, self.generation, m.client_id, m.client_host))

    def _refuse(self, limit: str, member_id: str) -> JoinReply:
        """A join turned away because the group is full: GROUP_MAX_SIZE_REACHED."""
        self.outbox.append(CapacityReached(limit, member_id, len(self.members), self.record_bytes,
                                           not self._at_capacity))
        self._at_capacity = True
        return JoinReply(member_id, E.GROUP_MAX_SIZE_REACHED)

    def _shed(self, m: Member) -> None:
        """Turn a member away because the generation would not fit in its record: its waiting
        request gets GROUP_MAX_SIZE_REACHED, as Kafka's clients expect of a full group."""
        self.outbox.append(CapacityReached("group_max_record_bytes", m.member_id, len(self.members),
                                           self.record_bytes, not self._at_capacity))
        self._remove(m, "group too large", E.GROUP_MAX_SIZE_REACHED)
        self._at_capacity = True

    def _after_removal(self, now: float, reason: str) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now, reason)
        self._maybe_complete_join(now)

    # -- requests -------------------------------------------------------------------------

    def join(self, now: float, member_id: str, instance_id: str | None, client_id: str,
             client_host: str, session_timeout: float, rebalance_timeout: float,
             protocol_type: str, protocols: list[tuple[str, bytes]],
             require_known_member_id: bool, reason: str | None = None) -> JoinReply | Wait:
        """JoinGroup: a reply now, or Wait when the member must wait for the generation."""
        if self.state == GroupState.DEAD:
            return JoinReply(member_id, E.COORDINATOR_NOT_AVAILABLE)
        if not self.config.min_session_timeout <= session_timeout <= self.config.max_session_timeout:
            return JoinReply(member_id, E.INVALID_SESSION_TIMEOUT)
        if not self._supports(member_id, protocol_type, protocols):
            return JoinReply(member_id, E.INCONSISTENT_GROUP_PROTOCOL)
        fields = dict(client_id=client_id, client_host=client_host, session_timeout=session_timeout,
                      rebalance_timeout=rebalance_timeout, protocol_type=protocol_type,
                      protocols=list(protocols))
        why = f"member joined{': ' + reason if reason else ''}"  # "rejoined" for known members
        if not member_id:
            if instance_id is not None:
                return self._join_static(now, instance_id, fields, why)
            if self._full() and self._replaceable(client_id, client_host) is None:
                return self._refuse("group_max_size", member_id)
            new_id = self.new_id(client_id)
            if require_known_member_id:
                self._pend(new_id, now + session_timeout)
                return JoinReply(new_id, E.MEMBER_ID_REQUIRED)
            return self._add(now, new_id, None, fields, why)
        if member_id in self.pending:
            del self.pending[member_id]
            return self._add(now, member_id, instance_id, fields, why)
        if instance_id is not None and instance_id in self.static and self.static[instance_id] != member_id:
            return JoinReply(member_id, E.FENCED_INSTANCE_ID)
        member = self.members.get(member_id)
        if member is None:
            return JoinReply(member_id, E.UNKNOWN_MEMBER_ID)
        return self._rejoin(now, member, fields, why)

    def _full(self) -> bool:
        return bool(self.config.max_size) and len(self.members) + len(self.pending) >= self.config.max_size

    def _add(self, now: float, member_id: str, instance_id: str | None, fields: dict,
             why: str) -> JoinReply | Wait:
        replaced = self._replaceable(fields["client_id"], fields["client_host"]) if self._unheard else None
        if replaced is not None and instance_id is None:
            if self.state == GroupState.STABLE and self._same_topics(replaced, fields["protocols"]):
                return self._take_place(now, replaced, member_id, fields)
            self._remove(replaced, "replaced after failover")
        if self.config.max_size and len(self.members) >= self.config.max_size:
            return self._refuse("group_max_size", member_id)
        # a new member waiting in its first rebalance has longer than a session (Kafka's
        # new-member join timeout): it cannot heartbeat before it has a generation
        member = Member(member_id, instance_id, awaiting_join=True, **fields)
        if (self._expected_bytes(member) > self.config.max_record_bytes
                or (self._fits and len(self.members) >= self._fits)):
            return self._refuse("group_max_record_bytes", member_id)
        self.members[member_id] = member
        self._count(member, 1)
        self._arm(member, now + NEW_MEMBER_JOIN_TIMEOUT)
        if instance_id is not None:
            self.static[instance_id] = member_id
        self.outbox.append(MemberAdded(member_id, instance_id, fields["client_id"], fields["client_host"],
                                       self.generation))
        if not self.protocol_type:
            self.protocol_type = fields["protocol_type"]
        if self.state == GroupState.PREPARING_REBALANCE:
            if now < self._initial_deadline:  # a fleet starting together: one rebalance
                self._initial_deadline = min(now + self.config.initial_rebalance_delay,
                                             self._rebalance_deadline)
            self._rebalance_deadline = max(self._rebalance_deadline, now + member.rebalance_timeout)
        else:
            self._prepare_rebalance(now, why)
        self._maybe_complete_join(now)
        return Wait(member_id)

    def _same_topics(self, old: Member, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a newcomer offering `protocols` can take `old`'s place in the generation:
        it offers the group's protocol, subscribing to the same topics (a loaded member knows
        only the protocol voted for, not all it offered)."""
        mine = next((m for name, m in protocols if name == self.protocol_name), None)
        if mine is None:
            return False
        theirs = old.metadata(self.protocol_name)
        return subscribed_topics(mine) == subscribed_topics(theirs) if self.protocol_type == "consumer" else mine == theirs

    def _take_place(self, now: float, old: Member, new_id: str, fields: dict) -> JoinReply:
        """A newcomer replacing an unheard loaded member of a Stable group (`_replaceable`),
        with the same subscription: it takes that member's place, generation and assignment,
        as a static member back under its instance id does, and nobody else rebalances. Its
        JoinGroup is answered at once, its SyncGroup with the assignment kept."""
        old_id = old.member_id
        self._heard(old)
        del self.members[old_id]
        self._update(old, member_id=new_id, awaiting_join=False, awaiting_sync=False, timer=None, is_new=False,
                     **fields)
        self.members[new_id] = old
        if self.leader == old_id:
            self.leader = new_id
        self._arm(old, now + old.session_timeout)
        self.outbox.append(MemberRemoved(old_id, "replaced after failover", self.generation, old.client_id,
                                         old.client_host))
        self.outbox.append(MemberAdded(new_id, None, old.client_id, old.client_host, self.generation))
        self.outbox.append(MembersChanged(self.generation))
        reply = self._join_reply(old)
        return replace(reply, replaced=old_id) if new_id == self.leader else reply

    def _expected_bytes(self, newcomer: Member) -> int:
        """The record with `newcomer` in it, every member's assignment counted as large as the
        larger of the members' mean (rounded up: rounded down, a group just under its limit let
        each newcomer in and turned it away after the rebalance) and the last computed
        assignment's mean: a group formed of new members has no assignment stored yet, and
        must not admit members that its first assignment would then have to turn away."""
        usual = max(-(-self._assigned // len(self.members)) if self.members else 0, self._proposed)
        return self.record_bytes - self._assigned + newcomer.record_bytes() + (len(self.members) + 1) * usual

    def _join_static(self, now: float, instance_id: str, fields: dict, why: str) -> JoinReply | Wait:
        """A static member (re)joining without a member id: a restart within its session."""
        old_id = self.static.get(instance_id)
        new_id = self.new_id(fields["client_id"])
        if old_id is None:
            if self._full():
                return self._refuse("group_max_size", "")
            return self._add(now, new_id, instance_id, fields, why)
        member = self.members.pop(old_id)
        if member.unheard:
            self._heard(member)
        if member.awaiting_join:
            self.outbox.append(JoinReply(old_id, E.FENCED_INSTANCE_ID))
        if member.awaiting_sync:
            self.outbox.append(SyncReply(old_id, E.FENCED_INSTANCE_ID))
        unchanged = _same_subscription(member.protocols, fields["protocols"], self.protocol_type)
        self._update(member, member_id=new_id, awaiting_join=False, awaiting_sync=False, timer=None, **fields)
        self.members[new_id] = member
        self.static[instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        self._arm(member, now + member.session_timeout)
        if self.state == GroupState.STABLE and unchanged:  # same identity, same assignment: no rebalance
            self.outbox.append(MembersChanged(self.generation))
            reply = self._join_reply(member)
            if new_id == self.leader:  # as Kafka answers: had it assign again, it would rejoin
                reply = replace(reply, replaced=old_id)
            return reply
        return self._rejoin(now, member, fields, why)

    def _rejoin(self, now: float, member: Member, fields: dict, why: str) -> JoinReply | Wait:
        if member.unheard:
            self._heard(member)
        changed = member.protocols != fields["protocols"]
        self._update(member, **fields)
        self._arm(member, now + member.session_timeout)
        if self.state == GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_reply(member)  # it missed the answer: the same again
        if self.state == GroupState.STABLE and not changed and member.member_id != self.leader:
            return self._join_reply(member)
        self._update(member, awaiting_join=True)
        if self.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(now, why.replace("joined", "rejoined", 1) if changed else "leader rejoined")
        self._maybe_complete_join(now)
        return Wait(member.member_id)

    def _member(self, member_id: str, instance_id: str | None) -> tuple[Member | None, ErrorCode]:
        """The member a SyncGroup, Heartbeat or OffsetCommit comes from, as Kafka's brokers check:
        a static member by its instance id (another member id under it is fenced), a dynamic
        one by its member id."""
        if instance_id is not None:
            known = self.static.get(instance_id)
            if known is None:
                return None, E.UNKNOWN_MEMBER_ID
            if known != member_id:
                return None, E.FENCED_INSTANCE_ID
        member = self.members.get(member_id)
        if member is None:
            return None, E.UNKNOWN_MEMBER_ID
        if member.unheard:
            self._heard(member)
        return member, E.NONE

    def sync(self, now: float, member_id: str, generation: int, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None,
             assignments: dict[str, bytes]) -> SyncReply | Wait:
        """SyncGroup: the member's assignment now, or Wait until the generation's is persisted."""
        if self.state == GroupState.DEAD:
            return SyncReply(member_id, E.COORDINATOR_NOT_AVAILABLE)
        member, error = self._member(member_id, instance_id)
        if member is None:
            return SyncReply(member_id, error)
        if generation != self.generation:
            return SyncReply(member_id, E.ILLEGAL_GENERATION)
        if ((protocol_type is not None and protocol_type != self.protocol_type)
                or (protocol_name is not None and protocol_name != self.protocol_name)):
            return SyncReply(member_id, E.INCONSISTENT_GROUP_PROTOCOL)
        if self.state == GroupState.PREPARING_REBALANCE:
            return SyncReply(member_id, E.REBALANCE_IN_PROGRESS)
        self._arm(member, now + member.session_timeout)
        if self.state == GroupState.STABLE:
            return SyncReply(member_id, E.NONE, self.protocol_type, self.protocol_name, member.assignment)
        member.awaiting_sync = True
        if self.leader_assigns and member_id == self.leader and self._pending_assignment is None:
            self.set_assignment(now, generation, assignments)
        return Wait(member_id)

    def keep_alive(self, now: float, member_id: str, generation: int) -> bool:
        """The heartbeat of a dynamic member of the Stable generation, done in place: its
        session deadline moves later and nothing else changes (its timer entry is due no
        later, so nothing needs scheduling). False: not that case; `heartbeat` answers."""
        m = self.members.get(member_id)
        if m is None or generation != self.generation or self.state is not _STABLE or m.timer is None:
            return False
        deadline = now + m.session_timeout
        if deadline < m.timer or m.unheard:
            return False
        m.deadline = deadline
        return True

    def heartbeat(self, now: float, member_id: str, generation: int, instance_id: str | None) -> ErrorCode:
        if self.state == GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        member, error = self._member(member_id, instance_id)
        if member is None:
            return error
        if generation != self.generation:
            return E.ILLEGAL_GENERATION
        self._arm(member, now + member.session_timeout)
        if self.state == GroupState.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def leave(self, now: float, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """LeaveGroup: one error per (member id, instance id) leaving, in order."""
        errors = []
        removed = False
        for member_id, instance_id in leaving:
            if instance_id is not None:
                known = self.static.get(instance_id)
                if known is None:
                    errors.append(E.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    errors.append(E.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in self.pending:
                del self.pending[member_id]
                errors.append(E.NONE)
                continue
            member = self.members.get(member_id)
            if member is None or self.state == GroupState.DEAD:
                errors.append(E.UNKNOWN_MEMBER_ID)
                continue
            self._remove(member, "left")
            removed = True
            errors.append(E.NONE)
        if removed:
            self._after_removal(now, "member left")
        else:
            self._maybe_complete_join(now)
        return errors

    def commit_check(self, now: float, member_id: str, generation: int, instance_id: str | None) -> ErrorCode:
        """Whether an OffsetCommit may be stored (Kafka's rules for classic groups)."""
        if self.state == GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and self.state == GroupState.EMPTY:
            return E.NONE  # a standalone consumer or an admin tool
        member, error = self._member(member_id, instance_id)
        if member is None:
            return error
        if generation != self.generation:
            return E.ILLEGAL_GENERATION
        if self.state == GroupState.COMPLETING_REBALANCE:  # its assignment is not known yet
            return E.REBALANCE_IN_PROGRESS
        self._arm(member, now + member.session_timeout)
        return E.NONE

    # -- assignment and persistence -------------------------------------------------------

    @property
    def pending_assignment(self) -> dict[str, bytes] | None:
        """The generation's assignment while it is being persisted."""
        return self._pending_assignment

    def set_assignment(self, now: float, generation: int, assignments: dict[str, bytes]) -> None:
        """The generation's assignment (computed by the coordinator, or the leader's). One too
        large to store sheds the newest members until the rest would fit, and the others
        rebalance without them: every round turns at least one member away, so it ends."""
        if self.state != GroupState.COMPLETING_REBALANCE or generation != self.generation:
            return
        pending = {m: assignments.get(m, b"") for m in self.members}
        self._proposed = sum(map(len, pending.values())) // len(pending)
        total = self.record_bytes + sum(len(a) - len(self.members[m].assignment) for m, a in pending.items())
        if total > self.config.max_record_bytes:
            for m in reversed(list(self.members.values())):
                if total <= self.config.max_record_bytes:
                    break
                total -= m.stored - len(m.assignment) + len(pending[m.member_id])
                self._shed(m)
            self._fits = len(self.members)  # the estimate let too many in: it is not trusted above this
            self._prepare_rebalance(now, "group too large to store")
            self._maybe_complete_join(now)
            return
        self._pending_assignment = pending
        self.outbox.append(PersistNeeded(generation))

    def persisted(self, now: float, generation: int, error: ErrorCode = E.NONE) -> None:
        """The runtime wrote `snapshot()` for `generation` (or could not: `error`)."""
        if (self.state != GroupState.COMPLETING_REBALANCE or generation != self.generation
                or self._pending_assignment is None):
            return
        if error != E.NONE:
            for m in self.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    self._arm(m, m.deadline)
                    self.outbox.append(SyncReply(m.member_id, error))
            self._pending_assignment = None
            self._prepare_rebalance(now, "persisting the generation failed")
            return
        for member_id, assignment in self._pending_assignment.items():
            self._update(self.members[member_id], assignment=assignment)
        self._pending_assignment = None
        self._to(GroupState.STABLE)
        for m in self.members.values():
            if m.awaiting_sync:
                m.awaiting_sync = False
                self._arm(m, m.deadline)
                self.outbox.append(SyncReply(m.member_id, E.NONE, self.protocol_type, self.protocol_name,
                                             m.assignment))
        self.outbox.append(RebalanceCompleted(self.generation, len(self.members),
                                              now - self._rebalance_started, self._rebalance_reason))

    def request_rebalance(self, now: float, reason: str) -> None:
        """From outside the group: its subscribed topics changed."""
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now, reason)

    def mark_dead(self, error: ErrorCode = E.NOT_COORDINATOR) -> None:
        """Gone from here (handed over; or, answering REBALANCE_IN_PROGRESS, become a consumer
        group): the requests waiting for a generation are answered `error`."""
        for m in self.members.values():
            if m.awaiting_join:
                self.outbox.append(JoinReply(m.member_id, error))
            if m.awaiting_sync:
                self.outbox.append(SyncReply(m.member_id, error))
        self._to(GroupState.DEAD)

    # -- time -----------------------------------------------------------------------------

    def _kept_alive(self, m: Member) -> bool:
        """A known member waiting in a rebalance (for its join or sync answer) is not expired
        by its session timer; the rebalance and sync deadlines bound it instead (its timer is
        armed again when it stops waiting)."""
        return (m.awaiting_join or m.awaiting_sync) and not m.is_new

    def next_deadline(self, now: float) -> float | None:
        """When `tick` next has something to do (every deadline up to `now` is handled). It
        may come early (an entry for a deadline since moved on); never late."""
        first = self._timers[0][0] if self._timers else math.inf  # on every heartbeat: no lists
        if self._pending_timers and self._pending_timers[0][0] < first:
            first = self._pending_timers[0][0]
        if self.state == GroupState.PREPARING_REBALANCE:
            first = min(first, self._rebalance_deadline)
            if self._initial_deadline > now:
                first = min(first, self._initial_deadline)
        elif self.state == GroupState.COMPLETING_REBALANCE and self.leader_assigns:
            first = min(first, self._sync_deadline)
        return None if first == math.inf else first

    def tick(self, now: float) -> None:
        while self._pending_timers and self._pending_timers[0][0] <= now:
            expiry, member_id = heapq.heappop(self._pending_timers)
            if self.pending.get(member_id) == expiry:
                del self.pending[member_id]
        expired = []
        while self._timers and self._timers[0][0] <= now:
            deadline, member_id = heapq.heappop(self._timers)
            m = self.members.get(member_id)
            if m is None or m.timer != deadline:
                continue  # gone, or an entry superseded by an earlier one
            m.timer = None
            if self._kept_alive(m):
                continue
            if now >= m.deadline:
                expired.append(m)
            else:
                self._arm(m, m.deadline)
        for m in expired:
            self._remove(m, "session timeout")
        if (self.state == GroupState.COMPLETING_REBALANCE and self.leader_assigns
                and now >= self._sync_deadline and self._pending_assignment is None):
            for m in [m for m in self.members.values() if not m.awaiting_sync]:
                self._remove(m, "sync timeout")
                expired.append(m)
        if expired:
            self._after_removal(now, "member expired")
        else:
            self._maybe_complete_join(now)


def subscribed_topics(metadata: bytes) -> tuple[str, ...]:
    """The topics a consumer-protocol subscription names (none when it cannot be read)."""
    try:
        return tuple(decode_subscription(metadata)[1].topics)
    except ProtocolError:
        return ()


def _same_subscription(old: list[tuple[str, bytes]], new: list[tuple[str, bytes]], protocol_type: str | None) -> bool:
    """Whether a static member back under its instance id keeps its place without a
    rebalance. Kafka keeps it when its protocols would not change the group's vote; the
    assignment here is the server's, so the topics it subscribes to must stay too. Its user
    data may change: a cooperative member restarted owns nothing yet, where the one before
    named what it held."""
    if [name for name, _ in old] != [name for name, _ in new]:
        return False
    if protocol_type != "consumer":
        return old == new
    return all(subscribed_topics(a) == subscribed_topics(b) for (_, a), (_, b) in zip(old, new))
