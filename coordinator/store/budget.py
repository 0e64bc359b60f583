"""What the groups may make ZooKeeper hold: the data budget, and who made the data grow.

ZooKeeper keeps every znode in its heap. Clients within every per-request and per-group limit
could still fill it: 10,000 partitions of 104 characters of metadata committed to 129 groups
took the embedded ZooKeeper (512 MiB) to OutOfMemoryError in 50 s, and with it every group.
So the bytes the groups hold are counted, and a write that would take them past the budget is
refused before anything of it is written.

**What is counted.** ZooKeeper's heap, not its `mntr` data size (paths and data only): per
znode its path, its data and ZNODE_BYTES of ZooKeeper's own objects (measured: 50,000 znodes
of 40 bytes under 63-character paths took 469 bytes of heap each, for 103 of data); the path
counts twice, once more for its name among its parent's children. A shard's size is what was
last written (`ShardSizes`, the store's `_shard_bytes`, so every path that writes or drops a
shard is counted, retention's included); its topic's, offsets' and group's znodes count with
the first shard under them; a group's record with its chunks, and a consumer group's member
records with their parent. What a commit would add is reckoned before it is written from its
entries (`growth`): ENTRY_BYTES an offset (the most its
numbers take as JSON) and its metadata as JSON. Replacing an offset by another with as much
metadata adds nothing; a new partition, longer metadata, a new shard do. Transactional offsets
pending their outcome (store/pending.py) count too, each transaction's znode as written, and
are refused past the offsets' part of the budget, as commits are (charged to no client: the
transaction's offsets become a commit, or go, within its timeout).

**Several instances.** Each instance owns some of the group-partitions, and a group-partition's
data moves with it. An instance may hold `budget x owned / group-partitions`: the shares of
all instances add up to the budget whatever they see of each other, with no shared counter to
keep (and no write to ZooKeeper per commit), and a handover moves data and share together.
ZooKeeper's own figure (`mntr`, daemon.py) was not used to refuse: it is read every 5 s (the
client above wrote 19 MB in 5 s, and every instance would let as much in before the next
reading), it cannot say whose data it is, and it counts what is not the groups'. The price:
an instance whose groups hold more than their share refuses while another has room.

**Who.** A group's growth is charged to the client (principal, or address when anonymous) that
made it, from the commit's acceptance; a failed commit's charge is given back, and when a group
shrinks or goes, its charges shrink with it (never above what it holds). A client may hold
`budget_per_client x owned / group-partitions`. Data loaded from ZooKeeper (a group-partition
taken over) and group records count in the total only: a record is written for the group, not
for one client.

**Headroom.** Offsets may fill OFFSETS_SHARE of the budget, group records all of it: with the
offsets at their limit, groups still rebalance (a generation's record varies by some bytes).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import orjson

from .. import logs, metrics
from . import layout
from .errors import OverBudget, RecordOverBudget

ShardKey = tuple[str, str, int]  # (group, topic, shard)
Reservation = tuple[str, "str | None", int]  # (group, client, bytes) of a commit accepted, not yet done

ZNODE_BYTES = 352  # ZooKeeper's heap for a znode beyond its path and data (DataNode, stat, map entries)
ENTRY_BYTES = 64  # an offset's JSON in its shard without its metadata, at most (62: partition, offset, epoch, time)
# ZooKeeper keeps its last 500 transactions in its heap (ZKDatabase's committed log, for
# followers; 3.8 takes no fewer, whatever zookeeper.commitLogCount says), whatever the data:
# of multis of MAX_REQUEST_BYTES, 500 took 187 MB (374 KB each, the request and its
# transaction both held).
COMMITTED_LOG_BYTES = 192 << 20  # 500 x 1.5 x MAX_REQUEST_BYTES (187.5 MiB), rounded up
OFFSETS_SHARE = 0.9  # of the budget, for offsets; the rest only for group records
WARN_AT, REARM_AT = 0.75, 0.65  # of the budget used: warned once past the first, again after below the second
REFUSALS_LOGGED_EVERY = 10.0  # seconds: refusals are logged once, then at most this often (with a count)


def derived_budget(heap_bytes: int) -> int:
    """The budget for a ZooKeeper of `heap_bytes`: half its heap less the committed log, at
    least an eighth of it. The embedded one (512 MiB) died at about 78 % of its heap live (the
    committed log, the data, ZooKeeper's objects); at the budget about 55 % is, and half the
    heap is left to the collector and to the requests in flight (512 MiB: 64 MiB of budget)."""
    return max(heap_bytes // 8, heap_bytes // 2 - COMMITTED_LOG_BYTES)


def node_cost(path_length: int, data_length: int) -> int:
    return ZNODE_BYTES + 2 * path_length + data_length


def entry_cost(entry: tuple) -> int:
    metadata = entry[2]
    return ENTRY_BYTES + (len(orjson.dumps(metadata)) if metadata else 0)


def record_cost(path_length: int, data_length: int, chunks: int) -> int:
    """A group's record: in its group znode, or in `chunks` chunks under its record znode."""
    nodes = 1 + (chunks + 1 if chunks else 0)
    return nodes * node_cost(path_length + 16, 0) + data_length


class Budget:
    """This instance's share of the data budget, shared by the stores of the group-partitions it
    owns (each a `Ledger`, counted from its `join` to its `leave`). `total` None: no budget."""

    def __init__(self, total: int | None = None, per_client: int | None = None,
                 partitions: Callable[[], int] = lambda: 1, clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.per_client = total if per_client is None or total is None else min(per_client, total)
        self.partitions = partitions  # the cluster's group-partitions
        self.clock = clock
        self.owned = 0
        self.used = 0  # what the owned group-partitions hold, and the commits accepted and not done
        self.clients: dict[str, int] = {}  # what each client's commits made them hold (and will)
        self._limit = self._client_limit = self._warn = self._rearm = math.inf
        self._warned = False
        self._refusals: dict[str, list] = {}  # limit -> [when last logged, refused since]
        self.log = logs.get("groupkeeper.store")

    def limit(self) -> int:
        """This instance's share: the budget times the part of the group-partitions it owns."""
        return 0 if self._limit == math.inf else int(self._limit)

    def client_limit(self) -> int:
        return 0 if self._client_limit == math.inf else int(self._client_limit)

    def _share(self) -> None:
        if self.total is None:
            return
        share = self.owned / max(self.partitions(), self.owned, 1)
        self._limit, self._client_limit = self.total * share, self.per_client * share
        # nothing owned, nothing to warn of
        self._warn, self._rearm = (self._limit * WARN_AT, self._limit * REARM_AT) if self.owned else (math.inf, 0)
        self.add(0)

    def join(self, ledger: Ledger) -> None:
        self.owned += 1
        self.used += ledger.held
        for client, held in ledger.clients.items():
            self.charge(client, held)
        self._share()

    def leave(self, ledger: Ledger) -> None:
        self.owned -= 1
        self.used -= ledger.held
        for client, held in ledger.clients.items():
            self.charge(client, -held)
        self._share()

    def add(self, delta: int) -> None:
        self.used += delta
        if self.used >= self._warn:
            if not self._warned:
                self._warned = True
                self.log.warning("zookeeper data budget nearly used", used_bytes=self.used, budget_bytes=self.limit(),
                                 offsets_refused_past_bytes=int(self._limit * OFFSETS_SHARE),
                                 hint="delete groups no longer used, or raise zookeeper_data_budget_bytes with "
                                      "ZooKeeper's heap (docs/operations.md)")
        elif self.used < self._rearm:
            self._warned = False

    def charge(self, client: str, delta: int) -> None:
        _count(self.clients, client, delta)

    def refuses(self, client: str | None, growth: int) -> str | None:
        """Which limit a commit making the data `growth` bytes larger would go past: `total`
        (the offsets' part of this instance's share), `client` (the client's share), or None."""
        if self.used + growth > self._limit * OFFSETS_SHARE:
            return "total"
        if client is not None and self.clients.get(client, 0) + growth > self._client_limit:
            return "client"
        return None

    def refuses_record(self, growth: int) -> bool:
        return self.used + growth > self._limit

    def refused(self, limit: str, group: str, client: str | None, growth: int) -> None:
        """Count a refusal, and log it: the first at once, then one line every
        REFUSALS_LOGGED_EVERY with how many there were (a client at its limit retries)."""
        metrics.ZOOKEEPER_BUDGET_REFUSALS.labels(limit).inc()
        now = self.clock()
        last = self._refusals.setdefault(limit, [-math.inf, 0])
        last[1] += 1
        if now - last[0] < REFUSALS_LOGGED_EVERY:
            return
        self.log.warning("zookeeper data budget: writes refused", limit=limit, group=group, client=client,
                         growth_bytes=growth, used_bytes=self.used, budget_bytes=self.limit(),
                         client_bytes=self.clients.get(client, 0) if client is not None else None,
                         client_budget_bytes=self.client_limit() if client is not None else None,
                         refused=last[1])
        last[:] = [now, 0]


class ShardSizes(dict):
    """The store's `_shard_bytes` (each shard's last written size), telling its ledger of every
    shard that appears, changes size or goes. Only `[]=`, `pop` and `del` change it."""

    def __init__(self, ledger: Ledger):
        super().__init__()
        self.ledger = ledger

    def __setitem__(self, key: ShardKey, size: int) -> None:
        old = self.get(key)
        dict.__setitem__(self, key, size)
        if old is None:
            self.ledger.shard_added(key, size)
        elif size != old:
            self.ledger.grew(key[0], size - old)

    def pop(self, key: ShardKey, *default):
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        size = dict.pop(self, key)
        self.ledger.shard_removed(key, size)
        return size

    def __delitem__(self, key: ShardKey) -> None:
        self.pop(key)


class Ledger:
    """What one group-partition's groups hold in ZooKeeper (`held`: with the commits accepted and
    not yet done), by group, and what each client's commits made them hold; told to the
    instance's `Budget` while the store serves (`join` to `leave`)."""

    def __init__(self, partition: int, budget: Budget):
        self.partition, self.budget = partition, budget
        self.shards = ShardSizes(self)
        self.groups: dict[str, int] = {}  # group -> bytes held
        self.records: dict[str, int] = {}  # group -> its record's bytes
        self.member_records: dict[str, int] = {}  # consumer group -> its member records' bytes
        self.pending: dict[tuple[str, str], int] = {}  # (group, znode name) -> a pending transaction's bytes
        self.charges: dict[str, dict[str, int]] = {}  # group -> client -> bytes of its growth charged
        self.held = 0
        self.clients: dict[str, int] = {}  # client -> bytes charged, and reserved by its commits in flight
        self._keys: dict[str, set[ShardKey]] = {}  # group -> its shards
        self._topics: dict[tuple[str, str], int] = {}  # (group, topic) -> its shards
        self._joined = False

    def join(self) -> None:
        if not self._joined:
            self._joined = True
            self.budget.join(self)

    def leave(self) -> None:
        if self._joined:
            self._joined = False
            self.budget.leave(self)

    # -- what is held ----------------------------------------------------------------------

    def _held(self, delta: int) -> None:
        self.held += delta
        if self._joined:
            self.budget.add(delta)

    def _charge(self, client: str, delta: int) -> None:
        _count(self.clients, client, delta)
        if self._joined:
            self.budget.charge(client, delta)

    def grew(self, group: str, delta: int) -> None:
        _count(self.groups, group, delta)
        self._held(delta)
        if delta < 0:
            self._clamp(group)

    def _parents(self, group: str, topic: str) -> int:
        """The znodes a group's offsets of `topic` live under: the topic's, and the group's own
        and its offsets znode for the group's first topic."""
        cost = node_cost(len(layout.topic_offsets_path(self.partition, group, topic)), 0)
        if not self._keys.get(group):
            cost += node_cost(len(layout.offsets_path(self.partition, group)), 0)
            cost += node_cost(len(layout.group_path(self.partition, group)), 0)
        return cost

    def shard_added(self, key: ShardKey, size: int) -> None:
        group, topic, shard = key
        cost = node_cost(len(layout.shard_path(self.partition, group, topic, shard)), size)
        if not self._topics.get((group, topic)):
            cost += self._parents(group, topic)
        self._keys.setdefault(group, set()).add(key)
        self._topics[(group, topic)] = self._topics.get((group, topic), 0) + 1
        self.grew(group, cost)

    def shard_removed(self, key: ShardKey, size: int) -> None:
        group, topic, shard = key
        cost = node_cost(len(layout.shard_path(self.partition, group, topic, shard)), size)
        left = self._topics[(group, topic)] - 1
        keys = self._keys[group]
        keys.discard(key)
        if left:
            self._topics[(group, topic)] = left
        else:
            del self._topics[(group, topic)]
            cost += self._parents(group, topic)  # as reckoned when the first came
        if not keys:
            del self._keys[group]
        self.grew(group, -cost)

    def record(self, group: str, data_length: int, chunks: int = 0) -> None:
        """A group's record as written (or loaded): its data's size, in `chunks` chunks or none."""
        cost = record_cost(len(layout.group_path(self.partition, group)), data_length, chunks)
        self.grew(group, cost - self.records.get(group, 0))
        self.records[group] = cost

    def members_cost(self, group: str, sizes: dict[str, int]) -> int:
        """What a consumer group's member records of these data sizes hold (by member), their
        parent included."""
        if not sizes:
            return 0
        parent = len(layout.members_path(self.partition, group))
        return node_cost(parent, 0) + sum(node_cost(parent + 1 + len(layout.escape(m)), size)
                                          for m, size in sizes.items())

    def members_record(self, group: str, cost: int) -> None:
        """A consumer group's member records as written (or loaded): what they cost in all."""
        self.grew(group, cost - self.member_records.get(group, 0))
        if cost:
            self.member_records[group] = cost
        else:
            self.member_records.pop(group, None)

    def check_record(self, group: str, data_length: int | None, chunks: int, members_cost: int | None = None) -> None:
        """Raise RecordOverBudget if the group's record, written so (None: as it is), and its
        member records costing `members_cost` (None: as they are) would take this instance
        past its budget (records no larger than the group's last ones always go)."""
        growth = 0 if data_length is None else record_cost(
            len(layout.group_path(self.partition, group)), data_length, chunks) - self.records.get(group, 0)
        if members_cost is not None:
            growth += members_cost - self.member_records.get(group, 0)
        if growth > 0 and self.budget.refuses_record(growth):
            self.budget.refused("records", group, None, growth)
            raise RecordOverBudget(f"group {group!r}: its record would take ZooKeeper's data past this instance's "
                                   f"share of zookeeper_data_budget_bytes ({self.budget.limit()} bytes)")

    def pending_written(self, group: str, name: str, size: int | None) -> None:
        """A pending transaction's znode (store/pending.py) as written or loaded: its data's
        `size`; None: gone."""
        cost = 0 if size is None else node_cost(len(layout.pending_path(self.partition)) + 1 + len(name), size)
        self.grew(group, cost - self.pending.get((group, name), 0))
        if cost:
            self.pending[(group, name)] = cost
        else:
            self.pending.pop((group, name), None)

    def check_pending(self, group: str, name: str, size: int, client: str | None) -> None:
        """Raise OverBudget if a pending transaction's znode of `size` bytes of data would take
        the data past the offsets' part of this instance's share (counted in the total, as a
        group's record: charged to no client)."""
        cost = node_cost(len(layout.pending_path(self.partition)) + 1 + len(name), size)
        growth = cost - self.pending.get((group, name), 0)
        if growth > 0 and (limit := self.budget.refuses(None, growth)) is not None:
            self.budget.refused(limit, group, client, growth)
            raise OverBudget(f"group {group!r}: transactional offsets would take ZooKeeper's data past this "
                             f"instance's share of the data budget ({self.budget.limit()} bytes)")

    def forget(self, group: str) -> None:
        """A group gone from ZooKeeper: whatever of it is still counted goes, its charges too."""
        for key in list(self._keys.get(group, ())):
            self.shards.pop(key, None)
        for key in [key for key in self.pending if key[0] == group]:
            self.grew(group, -self.pending.pop(key))
        cost = self.records.pop(group, 0) + self.member_records.pop(group, 0)
        if cost:
            self.grew(group, -cost)
        left = self.groups.pop(group, 0)
        if left:  # only a bug leaves some: held stays the sum of the groups'
            self._held(-left)
        for client, charged in self.charges.pop(group, {}).items():
            self._charge(client, -charged)

    def _clamp(self, group: str) -> None:
        """A group charged more than it holds (it shrank, or the estimate of a commit was more
        than it wrote): the charges go down to what it holds, the largest first."""
        charges = self.charges.get(group)
        if not charges:
            return
        excess = sum(charges.values()) - self.groups.get(group, 0)
        for client in sorted(charges, key=charges.__getitem__, reverse=True):
            if excess <= 0:
                break
            taken = min(excess, charges[client])
            excess -= taken
            self._charge(client, -taken)
            if charges[client] == taken:
                del charges[client]
            else:
                charges[client] -= taken
        if not charges:
            del self.charges[group]

    # -- commits ---------------------------------------------------------------------------

    def growth(self, group: str, entries: dict, topics: dict | None) -> tuple[int, list]:
        """How many bytes `entries` would add to `group` (it holds `topics`: topic ->
        partition -> entry, what later writes build on), and the partitions that add them."""
        growth, growing = 0, []
        new_shards: set[ShardKey] = set()
        new_topics: set[str] = set()
        topics = topics or {}
        for (topic, p), entry in entries.items():
            partitions = topics.get(topic)
            old = partitions.get(p) if partitions else None
            if old is not None:
                if not entry[2] and not old[2]:
                    continue  # the common commit: another offset, no metadata
                added = entry_cost(entry) - entry_cost(old)
            else:
                added = entry_cost(entry)
                key = (group, topic, p // layout.SHARD_PARTITIONS)
                if key not in self.shards and key not in new_shards:  # its znodes, as `shard_added` counts them
                    new_shards.add(key)
                    added += node_cost(len(layout.shard_path(self.partition, *key)), 2)
                    if not self._topics.get((group, topic)) and topic not in new_topics:
                        if not new_topics:
                            added += self._parents(group, topic)
                        else:
                            added += node_cost(len(layout.topic_offsets_path(self.partition, group, topic)), 0)
                        new_topics.add(topic)
            growth += added
            if added > 0:
                growing.append((topic, p))
        return growth, growing

    def admit(self, group: str, entries: dict, topics: dict | None,
              client: str | None) -> tuple[list, Reservation | None]:
        """Whether a commit may be written: the partitions refused ([] normally: the commit goes
        as it is), and what it reserves until `done` is told how it went. When it would take the
        data past a limit, every partition that adds to it is refused; the others (offsets
        moved on, metadata no longer) are not."""
        growth, growing = self.growth(group, entries, topics)
        if growth <= 0:
            return [], None
        limit = self.budget.refuses(client, growth)
        if limit is not None:
            self.budget.refused(limit, group, client, growth)
            return growing, None
        self._held(growth)
        if client is not None:
            self._charge(client, growth)
        return [], (group, client, growth)

    def done(self, reservation: Reservation, error: Exception | None) -> None:
        """A commit that reserved is durable (its growth is held now, counted from its shards'
        sizes, and charged to its client) or has failed (given back)."""
        group, client, growth = reservation
        self._held(-growth)
        if client is None:
            return
        if error is not None:
            self._charge(client, -growth)
            return
        charges = self.charges.setdefault(group, {})
        charges[client] = charges.get(client, 0) + growth
        self._clamp(group)


def _count(counts: dict[str, int], key: str, delta: int) -> None:
    """Add `delta` to `counts[key]`, the key gone once nothing is left."""
    held = counts.get(key, 0) + delta
    if held > 0:
        counts[key] = held
    else:
        counts.pop(key, None)


def refusal(group: str, budget: Budget, partitions: int) -> OverBudget:
    return OverBudget(f"group {group!r}: {partitions} partitions would take ZooKeeper's data past this instance's "
                      f"share of the data budget ({budget.limit()} bytes, {budget.client_limit()} a client)")
