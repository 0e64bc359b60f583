"""What every instance knows of each transactional id's transactions: `TransactionOutcomes`.

The instance that relays a producer's transactional requests (the gateway, in front of the
brokers' transaction coordinator) may not be the one that owns the groups the transaction
commits offsets to. So the gateway records what it sees the transaction coordinator answer,
one znode per transactional id (`layout.transaction_path`), and every instance follows those
records through watches, so that a group's owner learns the outcome of the transactions whose
offsets it holds pending, whichever instance relayed them.

A record (JSON) is the transactional id's latest known state:

    {"producer_id": 4000, "producer_epoch": 3, "state": "committed", "at_ms": 1780000000000,
     "previous": {"producer_id": 4000, "producer_epoch": 3, "state": "committed", "at_ms": ...}}

- "begun": InitProducerId answered NONE with this producer id and epoch. Every transaction
  of this transactional id under an older epoch, or another producer id, has ended (the
  transaction coordinator completes or aborts it before it answers); its outcome is unknown
  unless an end was recorded for it (here, or in `previous`).
- "committed" / "aborted": EndTxn answered NONE for a request of this producer id and epoch.
- "previous" (optional): the last end recorded before this state, one deep, without its own
  "previous"; so that an end followed at once by the next state (a commit, then a restarted
  producer's InitProducerId) is not lost to a reader whose watch coalesced the two.
- "at_ms": the gateway's wall clock when it saw the answer.

Writes never move a record backwards (`after`, `merged`): under one producer id, a higher
epoch wins, and at the same epoch an end replaces "begun" and a later end replaces an earlier
one (transaction version 1 runs many transactions under one epoch), while "begun" never
replaces an end of its own epoch. Producer ids are not ordered (a new one comes when an epoch
is exhausted, or a transactional id expired and started again, from whichever block the
coordinator had), so between two producer ids the answer seen later (`at_ms`) wins: the
transaction coordinator answers one transactional id's requests in order, and once it
answered InitProducerId with a new producer id, nothing of the old one is answered NONE
again. An end that arrives after a later state (a slow writer) is kept as that record's
"previous" when it is newer than what is there.

Bounded: one znode per transactional id, deleted by a janitor every instance runs (cheap: it
looks at its cached records, deleting with the version it read) once its `at_ms` is older
than `transactions_outcome_retention_ms` (7 days by default, as Kafka's
transactional.id.expiration.ms). Writes are retried for a while (`WRITE_TIMEOUT`) through a
ZooKeeper outage, then logged and counted (`groupkeeper_transaction_outcomes_unrecorded_total`);
they never fail what the client is answered.

Watches coalesce: a reader sees the record as it is when it reads it, so two changes close
together may reach a callback as one (the end then in "previous").

Order against pending offsets (store/pending.py): under transaction version 1 a producer runs
every transaction under one epoch, so "committed" at (producer id, epoch) does not say which
of them. ZooKeeper's zxids do: a read `Outcome` carries the zxid of the record's last write
(`zxid`), and an end moved to "previous" the zxid of the record it was read from (the write
that made it the state, or a later one), kept in the record. The gateway answers EndTxn only
once its end is recorded (gateway/transactions.py), so a producer's next transaction writes
its pending offsets after its previous end: an end recorded after a transaction's pending
offsets (a greater zxid) is that transaction's, one recorded before is an earlier one's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import trio
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from prometheus_client import Counter

from .. import logs, metrics
from . import layout
from .bridge import Refresher, ZooKeeperBridge

BEGUN, COMMITTED, ABORTED = "begun", "committed", "aborted"
STATES = (BEGUN, COMMITTED, ABORTED)
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms
WRITE_TIMEOUT = 15.0  # seconds a record is retried for (through an outage), then counted unrecorded
RETRY_DELAY = (0.05, 1.0)  # first and longest pause between attempts, doubling
READ_CONCURRENCY = 64  # records read at once after a reconnection
MAX_RECORD_BYTES = 4096  # a record larger than this is not ours: ignored
MAX_ID_CHARS = 1024  # transactional ids longer than this are not recorded (their znode name unbounded)
JANITOR_INTERVAL = (1.0, 600.0)  # seconds between janitor rounds: retention / 10, within these

UNRECORDED = Counter(
    "groupkeeper_transaction_outcomes_unrecorded_total",
    "Transaction states (begun, committed, aborted) the gateway saw and could not record in ZooKeeper, by "
    "reason: zookeeper (not written within 15 s), queue_full (the gateway's queue of records to write was "
    "full), too_long (a transactional id over 1024 characters). A group's owner may then not learn the "
    "outcome from the record.", ["reason"], registry=metrics.REGISTRY)
EXPIRED = Counter("groupkeeper_transaction_outcomes_expired_total",
                  "Transactional ids' records deleted by the janitor (transactions_outcome_retention_ms).",
                  registry=metrics.REGISTRY)


@dataclass(frozen=True)
class Outcome:
    """A transactional id's latest known state (module docstring). `previous`: the last end
    recorded before it, if known (never with a `previous` of its own)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str  # BEGUN, COMMITTED or ABORTED
    at_ms: int
    previous: Outcome | None = None
    # of the record's write (module docstring: order); 0 when not read from ZooKeeper; not
    # part of the state (equal states are the same state, whichever write carried them)
    zxid: int = field(default=0, compare=False)

    @property
    def ended(self) -> bool:
        """Whether this is a transaction's end (committed or aborted)."""
        return self.state != BEGUN

    @property
    def committed(self) -> bool:
        return self.state == COMMITTED

    def same(self, other: Outcome | None) -> bool:
        """The same state seen (`previous` aside)."""
        return other is not None and (self.producer_id, self.producer_epoch, self.state, self.at_ms) == (
            other.producer_id, other.producer_epoch, other.state, other.at_ms)


# -- the rules, without I/O --------------------------------------------------------------------

def after(new: Outcome, old: Outcome) -> bool:
    """Whether `new` is a later state of the transactional id than `old` (module docstring)."""
    if new.producer_id == old.producer_id:
        if new.producer_epoch != old.producer_epoch:
            return new.producer_epoch > old.producer_epoch
        if not new.ended:  # "begun" says nothing new about its own epoch
            return False
        return not old.ended or new.at_ms >= old.at_ms
    return new.at_ms >= old.at_ms


def merged(new: Outcome, old: Outcome | None) -> Outcome | None:
    """What the record becomes when `new` is seen and it holds `old`; None: left as it is."""
    new = replace(new, previous=None)
    if old is None:
        return new
    if new.same(old) or new.same(old.previous):
        return None  # seen already (a write retried after its outcome was lost)
    if after(new, old):
        previous = old if old.ended else old.previous
        return replace(new, previous=None if previous is None else replace(previous, previous=None))
    if new.ended and (old.previous is None or after(new, old.previous)):
        return replace(old, previous=new)  # a late end: older than the record, newer than its previous
    return None


def encode(outcome: Outcome) -> bytes:
    value: dict[str, Any] = _fields(outcome)
    if outcome.previous is not None:
        value["previous"] = _fields(outcome.previous)
    return layout.encode(value)


def _fields(outcome: Outcome) -> dict[str, Any]:
    fields = {"producer_id": outcome.producer_id, "producer_epoch": outcome.producer_epoch, "state": outcome.state,
              "at_ms": outcome.at_ms}
    if outcome.zxid:  # a previous end's: the record's write it was read from
        fields["zxid"] = outcome.zxid
    return fields


def decode(transactional_id: str, data: bytes) -> Outcome | None:
    """A record as `encode` wrote it; None for data that is not one."""
    try:
        value = layout.decode(data)
        outcome = _outcome(transactional_id, value)
        previous = value.get("previous")
        return outcome if previous is None else replace(outcome, previous=_outcome(transactional_id, previous))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def _outcome(transactional_id: str, value: dict) -> Outcome:
    outcome = Outcome(transactional_id, value["producer_id"], value["producer_epoch"], value["state"],
                      value["at_ms"], zxid=value.get("zxid", 0))
    if (outcome.state not in STATES or not all(type(v) is int for v in (
            outcome.producer_id, outcome.producer_epoch, outcome.at_ms))):
        raise ValueError("not a transaction record")
    return outcome


def expired(outcome: Outcome, now_ms: int, retention_ms: int) -> bool:
    return outcome.at_ms < now_ms - retention_ms


# -- ZooKeeper ---------------------------------------------------------------------------------

class TransactionOutcomes:
    """Every transactional id's record, cached and kept current by watches (the children of
    `layout.TRANSACTIONS` and each record), read again after every reconnection (all of them
    after a new session, whose watches are gone); what the gateway sees, written.

    For a group's owner: `latest` (the cached record), `read` (a fresh read, for a takeover),
    `watch`/`unwatch` (a callback, in trio, whenever a record changes as read; not for a
    record deleted). For the gateway: `record_begun`, `record_end`."""

    def __init__(self, zk: ZooKeeperBridge, retention_ms: int = DEFAULT_RETENTION_MS,
                 clock: Callable[[], float] = time.time, janitor_interval: float | None = None):
        """`janitor_interval`: seconds between the janitor's rounds (None: a tenth of the
        retention, within JANITOR_INTERVAL)."""
        self.zk = zk
        self.retention_ms = retention_ms
        self.janitor_interval = (min(max(retention_ms / 10_000, JANITOR_INTERVAL[0]), JANITOR_INTERVAL[1])
                                 if janitor_interval is None else janitor_interval)
        self.clock = clock  # wall-clock seconds: the janitor's, and `at_ms` when a caller gives none
        self.records: dict[str, Outcome] = {}  # by transactional id
        self._versions: dict[str, int] = {}  # znode version of each record as read (the janitor deletes with it)
        self._current: set[str] = set()  # znode names watched since last read: unchanged
        self._session: int | None = None
        self._watchers: dict[str, list[Callable[[Outcome], None]]] = {}
        self._refresher = Refresher(zk, self._refresh)
        self._token: trio.lowlevel.TrioToken | None = None
        self.log = logs.get("groupkeeper.transactions")

    # -- for the owner side -------------------------------------------------------------------

    def latest(self, transactional_id: str) -> Outcome | None:
        """The record as last read (None: none known)."""
        return self.records.get(transactional_id)

    async def read(self, transactional_id: str, synced: bool = False) -> Outcome | None:
        """The record as ZooKeeper has it now (watched, the cache updated); `synced`: with
        every write acknowledged anywhere before the call (ZooKeeper's sync first: another
        instance recorded it). Raises kazoo's exceptions (ConnectionLoss...) when ZooKeeper
        cannot say."""
        name = layout.escape(transactional_id)
        if synced:
            await self.zk.sync(f"{layout.TRANSACTIONS}/{name}")
        return await self._read(name, transactional_id)

    def watch(self, transactional_id: str, callback: Callable[[Outcome], None]) -> None:
        """Call `callback(outcome)` (in trio) whenever the record of `transactional_id` is read
        changed, from now on."""
        self._watchers.setdefault(transactional_id, []).append(callback)

    def unwatch(self, transactional_id: str, callback: Callable[[Outcome], None]) -> None:
        callbacks = self._watchers.get(transactional_id, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            self._watchers.pop(transactional_id, None)

    # -- for the gateway --------------------------------------------------------------------

    async def record_begun(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           at_ms: int | None = None, timeout: float = WRITE_TIMEOUT) -> bool:
        """InitProducerId was answered NONE with this producer id and epoch. Whether it is
        recorded (or was already, or something later is); never raises for ZooKeeper."""
        return await self._record(Outcome(transactional_id, producer_id, producer_epoch, BEGUN,
                                          self._now_ms() if at_ms is None else at_ms), timeout)

    async def record_end(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool,
                         at_ms: int | None = None, timeout: float = WRITE_TIMEOUT) -> bool:
        """EndTxn was answered NONE for a request of this producer id and epoch (the request's:
        what the transaction's offsets were committed under); as `record_begun`."""
        return await self._record(Outcome(transactional_id, producer_id, producer_epoch,
                                          COMMITTED if committed else ABORTED,
                                          self._now_ms() if at_ms is None else at_ms), timeout)

    async def _record(self, new: Outcome, timeout: float) -> bool:
        if len(new.transactional_id) > MAX_ID_CHARS:
            UNRECORDED.labels("too_long").inc()
            return False
        failure = "not connected"
        delay = RETRY_DELAY[0]
        with trio.move_on_after(timeout):
            while True:
                if self.zk.state == KazooState.CONNECTED:
                    try:
                        await self._write(new)
                        return True
                    except KazooException as exc:  # ConnectionLoss, SessionExpired...: again, while time is left
                        failure = f"{type(exc).__name__}: {exc}"
                await trio.sleep(delay)
                delay = min(delay * 2, RETRY_DELAY[1])
        UNRECORDED.labels("zookeeper").inc()
        self.log.warning("a transaction's state could not be recorded in ZooKeeper: a group's owner may not learn "
                         "it from the record", transactional_id=new.transactional_id[:200],
                         producer_id=new.producer_id, producer_epoch=new.producer_epoch, state=new.state,
                         error=failure, timeout_s=timeout)
        return False

    async def _write(self, new: Outcome) -> None:
        """Compare-and-set until no other writer came between."""
        path = layout.transaction_path(new.transactional_id)
        while True:
            try:
                data, stat = await self.zk.get(path)
            except NoNodeError:
                try:
                    await self.zk.create(path, encode(merged(new, None)), makepath=True)
                    return
                except NodeExistsError:
                    continue
            old = decode(new.transactional_id, data)
            if old is not None:  # its state's write is this one, or earlier: what "previous" keeps of it
                old = replace(old, zxid=stat.mzxid)
            value = merged(new, old)
            if value is None:
                return
            try:
                await self.zk.set(path, encode(value), version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue

    # -- following the records --------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Read every record, then `started()`; follow them, and run the janitor, for ever."""
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            await nursery.start(self._refresher.run)
            nursery.start_soon(self._janitor)
            task_status.started()

    def _watch(self, event) -> None:
        """On a kazoo thread: hand the fired path to trio (one function for every watch, so
        that kazoo keeps one watcher per znode however often it is read)."""
        try:
            self._token.run_sync_soon(self._fired, event.path)
        except trio.RunFinishedError:
            pass

    def _fired(self, path: str | None) -> None:
        if path is not None and path.startswith(layout.TRANSACTIONS + "/"):
            self._current.discard(path[len(layout.TRANSACTIONS) + 1:])
        self._refresher.poke()

    async def _refresh(self) -> None:
        if self.zk.session_id != self._session:  # a new session has no watches: read everything
            self._session = self.zk.session_id
            self._current.clear()
        names = set(await self.zk.watched_children(layout.TRANSACTIONS, self._watch) or [])
        for name in self._current - names:
            self._current.discard(name)
        for transactional_id in [t for t in self.records if layout.escape(t) not in names]:
            self._forget(transactional_id)
        limiter = trio.CapacityLimiter(READ_CONCURRENCY)

        async def read(name: str) -> None:
            async with limiter:
                await self._read(name, layout.unescape(name))
        async with trio.open_nursery() as nursery:
            for name in names - self._current:
                nursery.start_soon(read, name)

    async def _read(self, name: str, transactional_id: str) -> Outcome | None:
        if self._token is None:  # read before `run`: its watch still comes to trio
            self._token = trio.lowlevel.current_trio_token()
        self._current.add(name)  # before the read: a watch firing from now on reads again
        try:
            data, stat = await self.zk.get(f"{layout.TRANSACTIONS}/{name}", watch=self._watch)
        except NoNodeError:
            self._current.discard(name)
            self._forget(transactional_id)
            return None
        except BaseException:  # read again next time
            self._current.discard(name)
            raise
        outcome = decode(transactional_id, data) if len(data) <= MAX_RECORD_BYTES else None
        if outcome is None:
            self.log.warning("a transaction record that does not read: ignored", path=f"{layout.TRANSACTIONS}/{name}")
            self._forget(transactional_id)
            return None
        self._versions[transactional_id] = stat.version
        outcome = replace(outcome, zxid=stat.mzxid)
        changed = outcome != self.records.get(transactional_id)  # its zxid kept whether or not
        self.records[transactional_id] = outcome
        if changed:
            for callback in list(self._watchers.get(transactional_id, ())):
                try:
                    callback(outcome)
                except Exception:  # the owner's bug: logged, the others still told
                    self.log.exception("a transaction outcome's callback failed",
                                       transactional_id=transactional_id[:200])
        return outcome

    def _forget(self, transactional_id: str) -> None:
        self.records.pop(transactional_id, None)
        self._versions.pop(transactional_id, None)

    # -- the janitor ------------------------------------------------------------------------

    async def _janitor(self) -> None:
        while True:
            await trio.sleep(self.janitor_interval * random.uniform(0.5, 1.0))  # instances' rounds spread
            await self.expire()

    async def expire(self) -> int:
        """Delete the records older than the retention (as cached, with the version read: one
        written since stays); how many this instance deleted."""
        now_ms = self._now_ms()
        deleted = 0
        for transactional_id, outcome in list(self.records.items()):
            if not expired(outcome, now_ms, self.retention_ms):
                continue
            try:
                await self.zk.delete(layout.transaction_path(transactional_id),
                                     version=self._versions.get(transactional_id, -1))
                deleted += 1
            except (NoNodeError, BadVersionError):
                pass  # another instance's janitor, or a write since
            except KazooException:
                break  # ZooKeeper away: the next round
        if deleted:
            EXPIRED.inc(deleted)
            self.log.info("transaction records expired", deleted=deleted, retention_ms=self.retention_ms)
        return deleted

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)
