"""The group-partitions this instance owns: taking them as the placement says, serving them,
handing them over, and dropping them all when the ZooKeeper session is lost.

Every group-partition placed on this instance gets a slot, one task from the moment it is
placed here until it is gone again:

1. take: wait until the previous owner releases it (handover) or its session ends
   (failover), then acquire it (a new fencing epoch); meanwhile its groups answer
   COORDINATOR_LOAD_IN_PROGRESS, since they are coming here;
2. load its groups and offsets (still COORDINATOR_LOAD_IN_PROGRESS), check what changed while
   it moved (`GroupSet.check_topics`), then serve;
3. when the placement moves it away, or at shutdown: answer NOT_COORDINATOR for it at once,
   let the writes in flight finish or fail, answer waiting JoinGroup/SyncGroup requests
   NOT_COORDINATOR, and release it, recording when it stopped serving.

A fenced session (SUSPENDED too long, or LOST) drops every slot at once, without releasing
(the ZooKeeper session may be gone, and nothing may be acknowledged any more); once
reconnected the instance registers again if it must and takes its share afresh.

Requests are answered as owner only while the session guard's lease is current, so an
instance that was paused answers nothing as owner before it has heard from ZooKeeper again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio
from kazoo.exceptions import KazooException

from protocol import ErrorCode

from .. import logs, metrics
from ..assignors import CONSUMER_GROUP_ASSIGNORS, Assignor
from ..events import DISCARD, EventSink
from ..groups.group import GroupConfig
from ..groups.manager import GroupSet
from ..groups.retention import Retention
from ..groups.snapshot import assemble_consumer, counted, is_consumer_group, restore, restore_consumer
from ..groups.state import GroupState
from ..store.bridge import ZooKeeperBridge
from ..store.errors import NotOwner, StoreError, StoreUnavailable
from ..store.fence import Fence, Previous, release
from ..store.partition import PartitionStore
from ..store.pending import PendingOffsets, TxnKey
from ..store.writer import OffsetWriter
from ..topics.view import TopicView
from ..store.session import SessionGuard
from .handover import take
from .membership import Instance, Membership
from .pending_check import PendingCheck
from .placement import Placement, group_partitions, partition_for

E = ErrorCode
CLASSIC, CONSUMER = "classic", "consumer"  # KIP-848's group types
HANDOVER_DRAIN = 5.0  # seconds a handover waits for writes in flight before it releases anyway
RETRY = 0.5  # seconds between attempts at a ZooKeeper step that failed (disconnected)


@dataclass
class Owned:
    store: PartitionStore
    groups: GroupSet
    loaded: trio.Event = field(default_factory=trio.Event)
    releasing: bool = False  # handing over: answered NOT_COORDINATOR
    pending: PendingOffsets | None = None  # transactional offsets pending their outcome


class _Slot:
    """One group-partition placed on this instance, from its taking to its release."""

    def __init__(self, partition: int):
        self.partition = partition
        self.unwanted = trio.Event()  # placed elsewhere, or shutting down
        self.scope = trio.CancelScope()
        self.owned: Owned | None = None
        self.fence: Fence | None = None


class Coordinator:
    def __init__(self, zk: ZooKeeperBridge, guard: SessionGuard, topics: TopicView,
                 membership: Membership, group_config: GroupConfig, assignors: dict[str, Assignor],
                 strict: bool = False, events: EventSink = DISCARD,
                 consumer_assignors: dict[str, Assignor] | None = None,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self.zk = zk
        self.wall_ms = wall_ms  # the wall clock (ms) of offset retention: commits are stamped with it
        self.guard = guard
        self.topics = topics
        self.membership = membership
        self.instance_id = membership.me.id
        self.group_config = group_config
        self.assignors = assignors
        self.consumer_assignors = consumer_assignors if consumer_assignors is not None else dict(CONSUMER_GROUP_ASSIGNORS)
        self.strict = strict
        self.events = events
        self.writer = OffsetWriter(zk)  # every owned group-partition's offset writes
        # told of every commit ZooKeeper confirms (group, topic, entries): `lag.CommitWindows`
        self.on_durable: Callable[[str, str, dict], None] | None = None
        # where transactions' outcomes are learned (`store.transactions.TransactionOutcomes`,
        # through the gateway, which sees every EndTxn); None: pending offsets wait unresolved
        self.transactions = None
        self._watched: set[str] = set()  # transactional ids watched for their outcome
        self._unresolved: set[TxnKey] = set()  # reported ended without an outcome (once each)
        # where ends that were not recorded are read from the brokers (`topics.markers`, with
        # the gateway); looked for every `pending_check_interval` seconds (`pending_check`)
        self.markers = None
        self.pending_check_interval = 5.0
        self.pending_check: PendingCheck | None = None
        self.group_partitions = 0  # known once running
        self.placement: Placement | None = None
        self.owned: dict[int, Owned] = {}
        self.changed = trio.Event()  # set (and replaced) whenever ownership changes
        self._slots: dict[int, _Slot] = {}
        self._stopping = False
        self._nursery: trio.Nursery | None = None
        self.log = logs.get("groupkeeper.ownership").bind(instance=self.instance_id)

    # -- answering --------------------------------------------------------------------------

    def route(self, group_id: str, empty_ok: bool = True, now: float | None = None) -> Owned | ErrorCode:
        """The group-partition serving `group_id` here, or the error to answer with. Kafka
        accepts an empty group id in the offset and admin APIs, not in membership ones
        (`empty_ok=False`); an id over the configured length is refused before anything is
        kept of it."""
        if self._invalid(group_id) or not (group_id or empty_ok):
            return E.INVALID_GROUP_ID
        if self.guard.fenced or not self.group_partitions:
            return E.NOT_COORDINATOR
        n = partition_for(group_id, self.group_partitions)
        owned = self.owned.get(n)
        if owned is None or owned.releasing:
            slot = self._slots.get(n)
            if owned is None and slot is not None and not slot.unwanted.is_set():
                return E.COORDINATOR_LOAD_IN_PROGRESS  # placed here, being taken
            return E.NOT_COORDINATOR
        if not self.guard.current(now):
            return E.COORDINATOR_NOT_AVAILABLE
        if not owned.loaded.is_set():
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return owned

    def coordinator_of(self, group_id: str) -> Instance | ErrorCode:
        """Where `group_id` is served: the live instance the placement puts it on."""
        if self._invalid(group_id):
            return E.INVALID_GROUP_ID
        if self.guard.fenced or self.placement is None:
            return E.COORDINATOR_NOT_AVAILABLE
        owner = self.placement.owner(partition_for(group_id, self.group_partitions))
        return self.membership.live.get(owner, E.COORDINATOR_NOT_AVAILABLE)

    def _invalid(self, group_id: str) -> bool:
        return len(group_id) > self.group_config.max_group_id_length

    def all_groups(self) -> list[tuple[str, str, str, int, str]]:
        """(group id, protocol type, state, members, group type) of every group served here,
        including groups that only have committed offsets (Empty classic groups, as Kafka
        lists them)."""
        if not self.guard.current():
            return []
        listed = []
        for owned in self.owned.values():
            if not owned.loaded.is_set() or owned.releasing:
                continue
            live, consumer = owned.groups.groups, owned.groups.consumer_groups
            listed += [(gid, g.protocol_type or "", g.state.value, len(g.members), CLASSIC)
                       for gid, g in live.items()]
            listed += [(gid, "consumer", g.state.value, len(g.members), CONSUMER) for gid, g in consumer.items()]
            listed += [(gid, "", GroupState.EMPTY.value, 0, CLASSIC) for gid in owned.store.durable
                       if gid not in live and gid not in consumer]
        return listed

    def placed_here(self) -> list[int]:
        if self.placement is None:
            return []
        return [n for n, owner in enumerate(self.placement.record.owners) if owner == self.instance_id]

    async def all_loaded(self) -> None:
        """Return once the placement includes this instance and every group-partition it
        places here is loaded and served."""
        while True:
            changed = self.changed
            placed = self.placed_here()
            if (self.placement is not None and self.instance_id in self.placement.record.instances
                    and all(n in self.owned and self.owned[n].loaded.is_set() for n in placed)):
                return
            await changed.wait()

    # -- running ----------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.group_partitions = await group_partitions(self.zk)
        self.placement = Placement(self.zk, self.membership, self.group_partitions)
        changes = self.topics.subscribe()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.writer.run)
            await nursery.start(self.membership.run)
            await nursery.start(self.placement.run)
            self._reconcile()  # before started(): from now on, what is placed here is being taken
            nursery.start_soon(self._follow_placement)
            nursery.start_soon(self._report_loaded)
            if self.markers is not None:
                self.pending_check = PendingCheck(self, self.markers, self.pending_check_interval, self.wall_ms)
                await nursery.start(self.pending_check.run)
            task_status.started()
            async for change in changes:
                for owned in self.owned.values():
                    owned.groups.topics_changed(change.topic, change.new_partitions, change.recreated)

    async def _follow_placement(self) -> None:
        while True:
            updated = self.placement.updated
            self._reconcile()
            self._touch()
            await updated.wait()

    def _touch(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def _reconcile(self) -> None:
        """Start a slot for every group-partition placed here; tell the others to go."""
        if self._nursery is None or self._nursery.cancel_scope.cancel_called:
            return
        wanted = set() if self.guard.fenced or self._stopping else set(self.placed_here())
        for n, slot in self._slots.items():
            if n not in wanted:
                slot.unwanted.set()
        for n in sorted(wanted - set(self._slots)):
            slot = self._slots[n] = _Slot(n)
            self._nursery.start_soon(self._keep, slot)

    async def _report_loaded(self) -> None:
        started = trio.current_time()
        await self.all_loaded()
        self.log.info("group-partitions loaded", count=len(self.owned), groups=len(self.all_groups()),
                      duration_s=round(trio.current_time() - started, 3))

    # -- one group-partition --------------------------------------------------------------

    async def _keep(self, slot: _Slot) -> None:
        n = slot.partition
        placed_at = trio.current_time()
        try:
            with slot.scope:
                taken = await self._take(slot)
                if taken is None:
                    return  # placed elsewhere before it could be taken
                slot.fence, previous = taken
                reason = _gained_reason(previous, self.instance_id)
                store = PartitionStore(self.zk, self.writer, slot.fence, self.guard,
                                       self.group_config.max_offset_metadata_bytes)
                store.on_durable = self.on_durable
                owned = slot.owned = Owned(store, GroupSet(
                    self.group_config, self.assignors, self._partitions_of, store.write_group, self.strict,
                    self.events, lease=self.guard.wait_current, consumer_assignors=self.consumer_assignors,
                    topic_counts=self.topics.partitions, wall_ms=self.wall_ms),
                    pending=PendingOffsets(self.zk, slot.fence, store, self.wall_ms, self._ended))
                self.owned[n] = owned
                self._touch()
                self.events.emit("ownership_gained", None, partition=n, epoch=slot.fence.epoch, reason=reason)
                metrics.PARTITIONS_GAINED.labels(reason).inc()
                async with trio.open_nursery() as inner:
                    inner.start_soon(self._serve, n, owned, reason, _downtime(previous, placed_at))
                    await slot.unwanted.wait()
                    stopped_ms = int(time.time() * 1000)
                    owned.releasing = True
                    with trio.move_on_after(HANDOVER_DRAIN):
                        await owned.store.close()
                    owned.groups.unload()
                    inner.cancel_scope.cancel()
                del self.owned[n]
                self._touch()
                await self._release(slot, stopped_ms)
        finally:
            if self._slots.get(n) is slot:  # else fenced() has dropped it already
                del self._slots[n]
                self.owned.pop(n, None)
                self._touch()
                self._reconcile()  # placed here again meanwhile

    async def _take(self, slot: _Slot) -> tuple[Fence, Previous] | None:
        """Acquire the slot's group-partition, or None once it is no longer wanted."""
        taken = None
        async with trio.open_nursery() as nursery:
            async def taking() -> None:
                nonlocal taken
                while True:
                    try:
                        taken = await take(self.zk, slot.partition, self.instance_id)
                        break
                    except (KazooException, StoreUnavailable, StoreError) as exc:
                        self.log.warning("taking a group-partition failed; retrying", partition=slot.partition,
                                         error=str(exc) or type(exc).__name__)
                        await trio.sleep(RETRY)
                nursery.cancel_scope.cancel()

            async def abandoning() -> None:
                await slot.unwanted.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(taking)
            nursery.start_soon(abandoning)
        if taken is not None and slot.unwanted.is_set():  # taken just as it went elsewhere
            slot.fence = taken[0]
            await self._release(slot, int(time.time() * 1000), announce=False)
            return None
        return taken

    async def _serve(self, n: int, owned: Owned, reason: str, downtime: Callable[[], float] | None) -> None:
        started = trio.current_time()
        while True:  # a disconnection while loading: load again once reconnected
            try:
                loaded = await owned.store.load()
                await owned.pending.load()
                break
            except KazooException as exc:
                self.log.warning("loading a group-partition failed; retrying", partition=n,
                                 error=str(exc) or type(exc).__name__)
                await trio.sleep(RETRY)
        now = trio.current_time()
        for group_id, data in loaded.groups.items():
            if is_consumer_group(data):
                data = assemble_consumer(data, loaded.members.get(group_id, {}))
                if data.get("incomplete"):  # only a hand in ZooKeeper does this
                    self.log.error("members the group's record names have no record: the group goes on without "
                                   "them", group=group_id, members=data["incomplete"][:10])
                owned.groups.adopt_consumer(restore_consumer(group_id, data, now, self.group_config.consumer,
                                                             self.consumer_assignors, self.topics.partitions))
            else:
                owned.groups.adopt(restore(group_id, data, now, self.group_config), counted(data))
        metrics.GROUP_LOAD_SECONDS.observe(trio.current_time() - started)
        async with trio.open_nursery() as nursery:
            await nursery.start(owned.store.run_writer)
            await nursery.start(owned.groups.run)
            config = self.group_config
            await nursery.start(Retention(owned.store, owned.groups, config.offsets_retention_ms,
                                          config.offsets_retention_check_interval, self.wall_ms, self.events,
                                          lease=self.guard.wait_current,
                                          pending=lambda group_id: bool(owned.pending.of_group(group_id))).run)
            owned.groups.check_topics()
            owned.loaded.set()
            self._touch()
            # what the previous owner left pending: its outcome may be known already
            for transactional_id in sorted({key.transactional_id for key in owned.pending.keys()}):
                nursery.start_soon(self._watch, transactional_id, True)
            if downtime is not None:
                metrics.TAKEOVER_SECONDS.labels(reason).observe(max(0.0, downtime()))
            self.log.info("group-partition gained", partition=n, reason=reason, epoch=owned.store.fence.epoch,
                          groups=len(loaded.groups), offsets_groups=len(loaded.offsets),
                          load_s=round(trio.current_time() - started, 3))

    async def _release(self, slot: _Slot, stopped_ms: int, announce: bool = True) -> None:
        """Release the slot's owner znode; again while ZooKeeper cannot confirm (the next owner
        waits for it, and nobody else would ever release it while this session lives), until
        it is released, turns out gone, or the session is fenced (then the session's end
        releases it)."""
        reason = "shutdown" if self._stopping else "handover"
        while True:
            try:
                await release(self.zk, slot.fence, self.instance_id, stopped_ms)
                break
            except NotOwner:
                break  # gone already: released by a try whose answer was lost, or the session ended
            except (StoreUnavailable, KazooException) as exc:
                if self.guard.fenced:
                    break
                self.log.warning("releasing a group-partition failed; retrying", partition=slot.partition,
                                 error=str(exc) or type(exc).__name__)
                await trio.sleep(RETRY)
            except StoreError as exc:
                self.log.error("could not release a group-partition", partition=slot.partition, error=str(exc))
                break
        if not announce:
            return
        self.events.emit("ownership_lost", None, partition=slot.partition, epoch=slot.fence.epoch, reason=reason)
        metrics.PARTITIONS_LOST.labels(reason).inc()
        self.log.info("group-partition handed over", partition=slot.partition, reason=reason)

    # -- transactions' outcomes ----------------------------------------------------------

    def on_pending(self, owned: Owned, group_id: str, key: TxnKey) -> None:
        """Offsets of the transaction `key` are pending here (TxnOffsetCommit): its outcome
        is watched for."""
        if self.transactions is not None and self._nursery is not None:
            self._nursery.start_soon(self._watch, key.transactional_id)

    async def _watch(self, transactional_id: str, fresh: bool = False) -> None:
        if self.transactions is None:
            return
        if transactional_id not in self._watched:
            self._watched.add(transactional_id)
            self.transactions.watch(transactional_id, self._outcome)
        outcome = self.transactions.latest(transactional_id)
        if fresh:  # a takeover: the record as it is now, not as this instance last saw it
            try:
                outcome = await self.transactions.read(transactional_id)
            except KazooException:
                pass  # the watch brings it once ZooKeeper answers
        if outcome is not None:
            self._outcome(outcome)

    def _outcome(self, outcome) -> None:
        """A transactional id's record changed (store/transactions.py): the pending
        transactions it decides are resolved, in a task each."""
        if self._nursery is None:
            return
        for owned in list(self.owned.values()):
            if owned.pending is None or not owned.loaded.is_set() or owned.releasing:
                continue
            verdicts: dict[tuple[TxnKey, str], dict[str, int]] = {}  # -> group -> the zxid decided on
            for group, txns in owned.pending.by_group.items():
                for key, txn in txns.items():
                    if key.transactional_id == outcome.transactional_id:
                        verdict = decide(key, txn.zxid, outcome)
                        if verdict is not None:
                            verdicts.setdefault((key, verdict), {})[group] = txn.zxid
            for (key, verdict), groups in verdicts.items():
                if verdict in ("committed", "aborted"):
                    self._nursery.start_soon(self.resolve_pending, owned, key, verdict == "committed", groups)
                elif self.pending_check is not None:  # its end is read from the brokers
                    self.pending_check.due(key)
                else:
                    self.unresolved(key, next(iter(groups)), "no end of it was recorded",
                                    later_epoch=outcome.producer_epoch, later_producer_id=outcome.producer_id)

    async def _ended(self, key: TxnKey, zxid: int) -> bool | None:
        """`PendingOffsets.ended`: whether an end recorded after `zxid` closes the transaction
        `key` (True: committed, False: aborted), as ZooKeeper has the record now (synced:
        another instance may have recorded it a moment ago, and its client been answered)."""
        if self.transactions is None:
            return None
        try:
            outcome = await self.transactions.read(key.transactional_id, synced=True)
        except KazooException as exc:
            raise StoreUnavailable(f"the record of transactional id {key.transactional_id!r} cannot be read: "
                                   f"{type(exc).__name__}") from None
        verdict = decide(key, zxid, outcome) if outcome is not None else None
        return {"committed": True, "aborted": False}.get(verdict)

    def pending_transactions(self) -> tuple[int, float]:
        """(how many transactions have offsets pending in the groups owned here, counted per
        group; how long the oldest has pended, seconds)."""
        count, oldest = 0, None
        for owned in list(self.owned.values()):
            if owned.pending is None:
                continue
            for txns in owned.pending.by_group.values():
                count += len(txns)
                for txn in txns.values():
                    oldest = txn.since_ms if oldest is None else min(oldest, txn.since_ms)
        return count, 0.0 if oldest is None else max(0.0, (self.wall_ms() - oldest) / 1000)

    def unresolved(self, key: TxnKey, group: str, why: str, **context) -> None:
        """The transaction `key` ended (a later one of its transactional id began) and its
        outcome cannot be learned: reported once; its offsets stay pending, never guessed."""
        if key in self._unresolved:
            return
        self._unresolved.add(key)
        metrics.TXN_UNRESOLVED.inc()
        self.log.warning("a transaction ended without a known outcome: its offsets stay pending", why=why,
                         group=group, transactional_id=key.transactional_id, producer_id=key.producer_id,
                         producer_epoch=key.producer_epoch, **context)

    async def resolve_pending(self, owned: Owned, key: TxnKey, committed: bool, groups: dict[str, int]) -> None:
        """The transaction `key` ended so: its offsets pending in `groups` of `owned` (each with
        the zxid of the offsets its end was found for) resolved."""
        try:
            groups = await owned.pending.resolve(key, committed, groups)
        except (KazooException, StoreUnavailable, StoreError, NotOwner) as exc:
            self.log.warning("resolving a transaction's offsets failed; tried again at the next change or load",
                             transactional_id=key.transactional_id, error=str(exc) or type(exc).__name__)
            return
        if groups:
            metrics.TXN_OUTCOMES.labels("committed" if committed else "aborted").inc()
        self._unresolved.discard(key)
        if self.transactions is not None and not any(
                o.pending is not None and any(k.transactional_id == key.transactional_id for k in o.pending.keys())
                for o in self.owned.values()):
            self._watched.discard(key.transactional_id)
            self.transactions.unwatch(key.transactional_id, self._outcome)

    def _partitions_of(self, topic: str) -> int:
        count = self.topics.partitions.get(topic, 0)
        if not count:  # subscribed to, not known: the groups rebalance when it is learned of
            self.topics.want(topic)
        return count

    # -- the session ------------------------------------------------------------------------

    def fenced(self) -> None:
        """The session guard's verdict: this instance owns nothing any more. Every slot is
        dropped at once; nothing is released (the session that holds the owner znodes may be
        gone, and if it is not, a leftover is removed when the partition is taken again)."""
        for n, slot in self._slots.items():
            if slot.owned is not None:
                slot.owned.releasing = True
                slot.owned.groups.unload()
                self.events.emit("ownership_lost", None, partition=n, epoch=slot.fence.epoch,
                                 reason="session lost")
                metrics.PARTITIONS_LOST.labels("session lost").inc()
            slot.scope.cancel()
        if self._slots:
            self.log.warning("ownership dropped: the ZooKeeper session is lost or suspended too long",
                             partitions=len(self.owned))
        self._slots.clear()
        self.owned.clear()
        self._touch()

    def recovered(self) -> None:
        """Connected again after a fence: take this instance's share afresh."""
        self.log.info("ZooKeeper session usable again; taking group-partitions afresh")
        self._reconcile()

    async def hand_over(self, timeout: float) -> None:
        """Graceful shutdown: leave the live set and the placement at once, so the others
        take over now rather than after the session timeout, and release every
        group-partition in order; FindCoordinator answered here meanwhile names the new
        owners.

        All within `timeout`. Leaving the live set and the placement waits on ZooKeeper,
        which, unreachable, answers only once reconnected: after half of it the group-partitions
        are let go all the same (NOT_COORDINATOR here), and the others learn of the leaving
        from this instance's session ending."""
        self._stopping = True
        self.placement.leaving = True
        deadline = trio.current_time() + timeout
        with trio.move_on_at(deadline - timeout / 2):
            await self.membership.deregister()
            try:
                await self.placement.sync()
            except KazooException:
                pass  # the others rewrite it when they see this instance gone
        self._reconcile()
        with trio.move_on_at(deadline):
            while self._slots:
                await self.changed.wait()


def decide(key: TxnKey, zxid: int, outcome) -> str | None:
    """What a transactional id's record (`outcome`: store/transactions.py) says of the
    pending transaction `key` whose offsets were last written at `zxid`: "committed" or
    "aborted" when an end of its producer id and epoch was recorded after them (the state, or
    the end kept as "previous"), which is its end (an end recorded before them is an earlier
    transaction's: under transaction version 1 they share the epoch); "unknown" when, after
    them, a later transaction of that id began (another producer id, or a later epoch) with no
    end of this one recorded: its end was never seen, and is never guessed; None while it may
    still be open."""
    def ends_it(state) -> bool:
        return (state is not None and state.state in ("committed", "aborted") and state.zxid > zxid
                and (state.producer_id, state.producer_epoch) == (key.producer_id, key.producer_epoch))
    for state in (outcome, outcome.previous):
        if ends_it(state):
            return state.state
    if outcome.zxid > zxid and (outcome.producer_id != key.producer_id or outcome.producer_epoch > key.producer_epoch):
        return "unknown"
    return None


def _gained_reason(previous: Previous, me: int) -> str:
    if previous.instance is None:
        return "new"
    if previous.released_ms is not None:
        return "handover"
    return "recovered" if previous.instance == me else "failover"


def _downtime(previous: Previous, placed_at: float) -> Callable[[], float] | None:
    """How long the group-partition has not been served: since the previous owner stopped
    serving it (recorded with its release, wall clock) for a handover; for a failover, since
    it was placed here, its owner's session having just been seen to end."""
    if previous.instance is None:
        return None
    if previous.released_ms is not None:
        return lambda: time.time() - previous.released_ms / 1000
    return lambda: trio.current_time() - placed_at
