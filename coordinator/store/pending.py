"""Transactional offsets waiting for their transaction's outcome (TxnOffsetCommit: KIP-98,
KIP-447) in one group-partition: held in memory by its owner and in ZooKeeper under the
group-partition's fence, so that a new owner after a failover has them.

```
/groupkeeper/partitions/<n>/pending/<group>@<transactional id>@<producer id>@<epoch>
    {"since_ms": first write, "from": offset, "offsets": [[topic, partition, offset, leader epoch,
                                                           metadata, written ms], ...]}
```

"from" is where the group's partition of the brokers' `__consumer_offsets` ended when the
transaction's first offsets came (-1: not known): its end is the first marker of its
producer there after it (`topics.markers`), read when no end was recorded.

Names are escaped (`layout.escape` writes "@" as %40), so "@" separates them; one flat
folder per group-partition, so that a new owner lists it in one round trip whatever its
number of groups. One znode per (group, transactional id, producer id, epoch): a producer
has one transaction open at a time, and under transaction version 2 (KIP-890) each of its
transactions has an epoch of its own.

When the transaction commits, its offsets become the group's committed ones, each only
where no plain commit of that partition was written after it (Kafka's rule: the later
write wins, whichever it was; here written ms against the committed entry's commit ms),
through the ordinary commit path; then the znode goes. When it aborts, the znode goes.
Applying a commit again (a new owner that loaded the znode before it went) changes
nothing: the committed entries are newer than the pending ones by then.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import trio


from .. import logs
from . import layout
from .bridge import ZooKeeperBridge
from .errors import StoreError
from .fence import Fence, fenced_commit
from .multiread import GET
from .partition import OffsetEntry, PartitionStore
from .turns import Turns

SEPARATOR = "@"  # never inside an escaped name
# (offset, leader epoch, metadata, written ms)
PendingEntry = tuple[int, int, str | None, int]


@dataclass(frozen=True, order=True)
class TxnKey:
    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass
class PendingTxn:
    key: TxnKey
    since_ms: int  # wall clock, its first offsets' write: how long it has been pending
    offsets: dict[tuple[str, int], PendingEntry] = field(default_factory=dict)
    # ZooKeeper's zxid of its znode's last write: an end of its transaction is recorded after
    # it (the producer ends a transaction once its offsets were answered), and an end recorded
    # before it is an earlier transaction's, which under transaction version 1 has the same
    # producer id and epoch (store/transactions.py orders them so)
    zxid: int = 0
    # where the group's partition of the brokers' __consumer_offsets ended when its first
    # offsets came (-1: not known); `scan_from`: how far its markers were read, in memory
    marker_from: int = -1
    scan_from: int = -1


def node_name(group: str, key: TxnKey) -> str:
    return SEPARATOR.join((layout.escape(group), layout.escape(key.transactional_id), str(key.producer_id),
                           str(key.producer_epoch)))


def parse_node(name: str) -> tuple[str, TxnKey] | None:
    """(group, key) of a pending znode's name; None for a name that is not one."""
    parts = name.split(SEPARATOR)
    if len(parts) != 4:
        return None
    try:
        return layout.unescape(parts[0]), TxnKey(layout.unescape(parts[1]), int(parts[2]), int(parts[3]))
    except ValueError:
        return None


def encode(txn: PendingTxn) -> bytes:
    return layout.encode({"since_ms": txn.since_ms, "from": txn.marker_from,
                          "offsets": [[t, p, *entry] for (t, p), entry in sorted(txn.offsets.items())]})


def decode(key: TxnKey, data: bytes, zxid: int = 0) -> PendingTxn:
    record = layout.decode(data)
    start = int(record.get("from", -1))
    return PendingTxn(key, int(record["since_ms"]), {
        (t, int(p)): (int(o), int(e), md, int(ms)) for t, p, o, e, md, ms in record["offsets"]}, zxid, start, start)


def newer(entry: PendingEntry, committed: OffsetEntry | None) -> bool:
    """Whether a committed transaction's entry replaces what is committed: written after it."""
    return committed is None or committed[3] <= entry[3]


class PendingOffsets:
    """The pending transactional offsets of one group-partition (see the module's docstring).
    `wall_ms`: the wall clock, in ms."""

    def __init__(self, zk: ZooKeeperBridge, fence: Fence, store: PartitionStore,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 ended: Callable[[TxnKey, int], Awaitable[bool | None]] | None = None):
        self.zk, self.fence, self.store, self.wall_ms = zk, fence, store, wall_ms
        # whether a recorded end closes the transaction `key` whose offsets were last written
        # at a zxid (True: committed, False: aborted, None: not known to have ended), read as
        # ZooKeeper has it now; raises StoreUnavailable when it cannot say (`add`)
        self.ended = ended
        self.by_group: dict[str, dict[TxnKey, PendingTxn]] = {}
        self._turns = Turns()  # one znode's writes in turn
        self.log = logs.get("groupkeeper.transactions").bind(partition=fence.partition)

    @property
    def root(self) -> str:
        return layout.pending_path(self.fence.partition)

    def _path(self, group: str, key: TxnKey) -> str:
        return f"{self.root}/{node_name(group, key)}"

    async def load(self) -> None:
        """Read every pending transaction of the group-partition (a new owner's, after
        `PartitionStore.load`): one listing and one multiRead."""
        await self.zk.ensure_path(self.root)
        names = await self.zk.get_children(self.root)
        parsed = [(name, parse_node(name)) for name in names]
        known = [(name, p) for name, p in parsed if p is not None]
        for name, p in parsed:
            if p is None:
                self.log.warning("a znode that is not a pending transaction's, left alone", node=name)
        reads = await self.zk.read_many([(GET, f"{self.root}/{name}") for name, _ in known])
        for (name, (group, key)), read in zip(known, reads):
            if isinstance(read, BaseException) or read is None:
                continue  # gone meanwhile (a former owner's last delete)
            data, stat = read
            self.by_group.setdefault(group, {})[key] = decode(key, data, stat.mzxid)
            self.store.ledger.pending_written(group, name, len(data))

    # -- what is pending ------------------------------------------------------------------

    def of_group(self, group: str) -> Mapping[TxnKey, PendingTxn]:
        return self.by_group.get(group, {})

    def partitions(self, group: str) -> set[tuple[str, int]]:
        """The group's partitions with an offset pending (OffsetFetch's require_stable)."""
        return {tp for txn in self.by_group.get(group, {}).values() for tp in txn.offsets}

    def keys(self) -> set[TxnKey]:
        return {key for txns in self.by_group.values() for key in txns}

    def groups_of(self, key: TxnKey) -> list[str]:
        return [group for group, txns in self.by_group.items() if key in txns]

    def fenced_by(self, group: str, key: TxnKey) -> TxnKey | None:
        """A pending transaction of the same transactional id and producer id at a later
        epoch in `group`: a commit under `key` comes from a zombie (PRODUCER_FENCED)."""
        for other in self.by_group.get(group, {}):
            if (other.transactional_id == key.transactional_id and other.producer_id == key.producer_id
                    and other.producer_epoch > key.producer_epoch):
                return other
        return None

    # -- changes --------------------------------------------------------------------------

    async def add(self, group: str, key: TxnKey, offsets: Mapping[tuple[str, int], tuple[int, int, str | None]],
                  marker_from: Callable[[], Awaitable[int]] | None = None, client: str | None = None) -> None:
        """Offsets of the transaction `key` for `group`, merged into what it has pending
        (a later TxnOffsetCommit of the same transaction replaces a partition's;
        `marker_from()`, where its end will be written at the brokers, is asked for the first
        only); returns once ZooKeeper has confirmed them. Raises what
        the store raises, and OverBudget when they would take ZooKeeper's data past the data
        budget (`client`'s: named in the refusal's log line)."""
        async with self._turns((group, key)):
            before = self.by_group.get(group, {}).get(key)
            if before is not None and self.ended is not None:
                # under transaction version 1 every transaction of a producer has this key:
                # what is pending may be an earlier transaction's, whose end was recorded and
                # its answer given before this one began, but not yet applied here. Settled
                # first, so that this transaction's offsets never share its outcome.
                outcome = await self.ended(key, before.zxid)
                if outcome is not None:
                    await self._settle(group, key, before, outcome)
                    before = None
            if before is not None:
                start = before.marker_from
            else:
                start = await marker_from() if marker_from is not None else -1
            now = self.wall_ms()
            txn = PendingTxn(key, before.since_ms if before else now, dict(before.offsets) if before else {},
                             marker_from=start, scan_from=before.scan_from if before else start)
            txn.offsets.update({tp: (o, e, md, now) for tp, (o, e, md) in offsets.items()})
            path, data = self._path(group, key), encode(txn)
            ledger = self.store.ledger  # what ZooKeeper holds, against the data budget (store/budget.py)
            ledger.check_pending(group, node_name(group, key), len(data), client)
            # the write and what this owner knows of it, together: a client gone meanwhile
            # (its connection's tasks are cancelled) must not leave a znode the owner never
            # heard of, which nothing here would resolve or report
            with trio.CancelScope(shield=True):
                await self._write(path, data, before is not None)
                ledger.pending_written(group, node_name(group, key), len(data))
                stat = await self.zk.exists(path)  # this session reads its own write: its zxid
                txn.zxid = stat.mzxid if stat is not None else 0
                self.by_group.setdefault(group, {})[key] = txn

    async def _write(self, path: str, data: bytes, exists: bool) -> None:
        txn_op = self.fence.transaction(self.zk)
        if not exists:
            txn_op.create(path, data)
        else:
            txn_op.set_data(path, data)
        try:
            await fenced_commit(self.zk, self.fence, txn_op)
        except StoreError:
            if exists or await self.zk.exists(path) is None:
                raise
            txn_op = self.fence.transaction(self.zk)  # an earlier try whose answer was lost created it
            txn_op.set_data(path, data)
            await fenced_commit(self.zk, self.fence, txn_op)

    async def resolve(self, key: TxnKey, committed: bool, groups: Mapping[str, int] | None = None) -> list[str]:
        """The transaction `key` ended: on commit its offsets become the committed ones
        (each where newer), on abort they are dropped; in `groups`, each with the zxid of the
        pending offsets the end was found for (default: every group of this group-partition
        that has them, as they are). A group whose offsets were written again since is left
        alone: they are a later transaction's by then (`add` settled the earlier one).
        Returns the groups resolved."""
        if groups is None:
            groups = {group: None for group in self.groups_of(key)}
        resolved = []
        for group, zxid in groups.items():
            async with self._turns((group, key)):
                txn = self.by_group.get(group, {}).get(key)
                if txn is None or (zxid is not None and txn.zxid != zxid):
                    continue  # resolved meanwhile, or a later transaction's now
                await self._settle(group, key, txn, committed)
                resolved.append(group)
        return resolved

    async def _settle(self, group: str, key: TxnKey, txn: PendingTxn, committed: bool) -> None:
        """`txn`'s end applied (its turn held): committed where newer, or dropped; its znode gone."""
        if committed:
            durable = self.store.durable.get(group, {})
            now = self.wall_ms()
            entries: dict[tuple[str, int], OffsetEntry] = {
                (t, p): (o, e, md, now) for (t, p), (o, e, md, written) in txn.offsets.items()
                if newer((o, e, md, written), durable.get(t, {}).get(p))}
            if entries:
                await self.store.commit_offsets(group, entries)
        await self._delete(group, key)
        self.log.info("transactional offsets " + ("committed" if committed else "aborted"), group=group,
                      transactional_id=key.transactional_id, producer_id=key.producer_id,
                      producer_epoch=key.producer_epoch, partitions=len(txn.offsets))

    async def drop_group(self, group: str) -> None:
        """The group is deleted: its pending transactions go with it."""
        for key in list(self.by_group.get(group, {})):
            async with self._turns((group, key)):
                await self._delete(group, key)

    async def _delete(self, group: str, key: TxnKey) -> None:
        txn_op = self.fence.transaction(self.zk)
        txn_op.delete(self._path(group, key))
        try:
            await fenced_commit(self.zk, self.fence, txn_op)
        except StoreError:
            if await self.zk.exists(self._path(group, key)) is not None:
                raise  # else gone already: an earlier try whose answer was lost
        self.store.ledger.pending_written(group, node_name(group, key), None)
        txns = self.by_group.get(group, {})
        txns.pop(key, None)
        if not txns:
            self.by_group.pop(group, None)
