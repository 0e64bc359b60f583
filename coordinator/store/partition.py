"""What the owner of one group-partition keeps in ZooKeeper: group metadata and offsets.

Group metadata is written in one fenced multi() per generation. Offset commits go through a
group commit: commits that arrive while a multi() is in flight wait and are flushed
together in the next one, each shard (SHARD_PARTITIONS partitions of one topic of one
group) written once with its merged content. A commit is acknowledged only after the
multi() that carries it succeeded, and every multi() is cut to MAX_REQUEST_BYTES without
splitting one commit request across two of them (a single request larger than that is
split by shard; its partitions are then not all-or-nothing).

The owner's in-memory copy (`durable`) holds exactly what ZooKeeper confirmed, so shard
writes are whole-znode overwrites built from it, never read-modify-write round trips.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import trio
from kazoo.exceptions import NoNodeError

from . import layout
from .bridge import ZooKeeperBridge
from .fence import Fence, NotOwner, StoreError, StoreUnavailable, fenced_commit
from .session import SessionGuard

# (offset, leader_epoch, metadata, commit_timestamp_ms): one partition's committed offset
OffsetEntry = tuple[int, int, str | None, int]
ShardKey = tuple[str, str, int]  # (group, topic, shard)


class GroupTooLarge(StoreError):
    """Group metadata that does not fit in one znode under MAX_REQUEST_BYTES."""


@dataclass
class _Commit:
    group: str
    entries: dict[tuple[str, int], OffsetEntry]
    done: trio.Event = field(default_factory=trio.Event)
    error: Exception | None = None


@dataclass
class Loaded:
    groups: dict[str, dict]
    offsets: dict[str, dict[str, dict[int, OffsetEntry]]]


class PartitionStore:
    def __init__(self, zk: ZooKeeperBridge, fence: Fence, guard: SessionGuard | None = None):
        self.zk = zk
        self.fence = fence
        self.guard = guard
        self.partition = fence.partition
        self.groups: dict[str, dict] = {}
        # group -> topic -> partition -> entry, as ZooKeeper has confirmed it
        self.durable: dict[str, dict[str, dict[int, OffsetEntry]]] = {}
        self._nodes: set[str] = set()  # znodes under this partition known to exist
        self._queue: list[_Commit] = []
        self._queued = trio.Event()
        self.multis = 0  # multi() calls made for offsets, for the benchmark and metrics

    # -- loading --------------------------------------------------------------------------

    async def load(self) -> Loaded:
        """Read every group and committed offset of this partition (a new owner's first act)."""
        base = layout.groups_path(self.partition)
        await self.zk.ensure_path(base)
        self._nodes.add(base)
        async with trio.open_nursery() as nursery:
            for node in await self.zk.get_children(base):
                nursery.start_soon(self._load_group, layout.unescape(node))
        return Loaded(self.groups, self.durable)

    async def _load_group(self, group: str) -> None:
        path = layout.group_path(self.partition, group)
        data, _ = await self.zk.get(path)
        self._nodes.add(path)
        if data:
            self.groups[group] = layout.decode(data)
        offsets = layout.offsets_path(self.partition, group)
        try:
            topics = await self.zk.get_children(offsets)
        except NoNodeError:
            return
        self._nodes.add(offsets)
        for topic_node in topics:
            topic = layout.unescape(topic_node)
            topic_path = layout.topic_offsets_path(self.partition, group, topic)
            self._nodes.add(topic_path)
            for shard in await self.zk.get_children(topic_path):
                path = f"{topic_path}/{shard}"
                data, _ = await self.zk.get(path)
                self._nodes.add(path)
                partitions = self.durable.setdefault(group, {}).setdefault(topic, {})
                for p, entry in layout.decode(data).items():
                    partitions[int(p)] = tuple(entry)

    # -- group metadata -------------------------------------------------------------------

    async def write_group(self, group: str, metadata: dict) -> None:
        """Persist a group's metadata for a new generation: one fenced multi()."""
        self._check_writable()
        data = layout.encode(metadata)
        path = layout.group_path(self.partition, group)
        if len(data) + len(path) + layout.OP_OVERHEAD > layout.MAX_REQUEST_BYTES:
            raise GroupTooLarge(f"group {group!r}: metadata of {len(data)} bytes is over the "
                                f"{layout.MAX_REQUEST_BYTES}-byte limit")
        txn = self._fenced()
        if path in self._nodes:
            txn.set_data(path, data)
        else:
            txn.create(path, data)  # its parent, the groups node, exists since load()
        await fenced_commit(self.zk, self.fence, txn)
        self._nodes.add(path)
        self.groups[group] = metadata

    async def delete_group(self, group: str) -> None:
        """Remove a group and its offsets, children first. A group with very many offset
        shards takes several multi() calls; the group's own znode goes last."""
        self._check_writable()
        prefix = layout.group_path(self.partition, group)
        paths = sorted((p for p in self._nodes if p == prefix or p.startswith(prefix + "/")),
                       key=lambda p: p.count("/"), reverse=True)
        max_ops = layout.MAX_REQUEST_BYTES // (layout.OP_OVERHEAD + len(prefix) + 64)
        for start in range(0, len(paths), max_ops):
            txn = self._fenced()
            chunk = paths[start:start + max_ops]
            for path in chunk:
                txn.delete(path)
            await fenced_commit(self.zk, self.fence, txn)
            self._nodes.difference_update(chunk)
        self.groups.pop(group, None)
        self.durable.pop(group, None)

    # -- offsets --------------------------------------------------------------------------

    async def commit_offsets(self, group: str, entries: dict[tuple[str, int], OffsetEntry]) -> None:
        """Durably store `entries` ((topic, partition) -> entry); returns once ZooKeeper has
        confirmed them. Raises NotOwner, StoreUnavailable or StoreError otherwise."""
        self._check_writable()
        commit = _Commit(group, entries)
        self._queue.append(commit)
        self._queued.set()
        await commit.done.wait()
        if commit.error is not None:
            raise commit.error

    async def run_writer(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The group-commit loop: one multi() in flight, the next batch gathering meanwhile."""
        task_status.started()
        while True:
            await self._queued.wait()
            batch, self._queue = self._take_batch()
            if not self._queue:
                self._queued = trio.Event()
            await self._flush(batch)

    def _take_batch(self) -> tuple[list[_Commit], list[_Commit]]:
        """As many queued commits as fit in one multi(), oldest first; at least one."""
        size = 0
        touched: set[ShardKey] = set()
        for i, commit in enumerate(self._queue):
            cost = 0
            for key in {(commit.group, topic, layout.shard_of(p)) for topic, p in commit.entries}:
                cost += self._shard_bound(key, commit) if key not in touched else sum(
                    _entry_bound(e) for (t, p), e in commit.entries.items()
                    if (commit.group, t, layout.shard_of(p)) == key)
            if i and size + cost > layout.MAX_REQUEST_BYTES:
                return self._queue[:i], self._queue[i:]
            size += cost
            touched |= {(commit.group, topic, layout.shard_of(p)) for topic, p in commit.entries}
        return self._queue, []

    def _shard_bound(self, key: ShardKey, commit: _Commit) -> int:
        """An upper bound of the bytes one shard's write takes, with `commit` applied."""
        group, topic, shard = key
        content = {p: e for p, e in self.durable.get(group, {}).get(topic, {}).items()
                   if layout.shard_of(p) == shard}
        content.update({p: e for (t, p), e in commit.entries.items()
                        if t == topic and layout.shard_of(p) == shard})
        path = layout.shard_path(self.partition, group, topic, shard)
        return sum(map(_entry_bound, content.values())) + 3 * (len(path) + layout.OP_OVERHEAD)

    async def _flush(self, batch: list[_Commit]) -> None:
        try:
            self._check_writable()
            for txn, created, applied in self._multis(batch):
                await fenced_commit(self.zk, self.fence, txn)
                self.multis += 1
                self._nodes.update(created)
                for group, topic, updates in applied:
                    self.durable.setdefault(group, {}).setdefault(topic, {}).update(updates)
        except (NotOwner, StoreUnavailable, StoreError) as exc:
            for commit in batch:
                commit.error = exc
        for commit in batch:
            commit.done.set()

    def _multis(self, batch: list[_Commit]):
        """The multi() transactions for a batch: normally one; several only when a single
        commit request is too large for one."""
        merged: dict[ShardKey, dict[int, OffsetEntry]] = defaultdict(dict)
        for commit in batch:
            for (topic, p), entry in commit.entries.items():
                merged[(commit.group, topic, layout.shard_of(p))][p] = entry
        txn, created, applied, size = self._fenced(), [], [], 0
        for (group, topic, shard), updates in merged.items():
            content = {p: e for p, e in self.durable.get(group, {}).get(topic, {}).items()
                       if layout.shard_of(p) == shard}
            content.update(updates)
            path = layout.shard_path(self.partition, group, topic, shard)
            data = layout.encode({str(p): list(e) for p, e in sorted(content.items())})
            cost = len(path) * 3 + len(data) + 3 * layout.OP_OVERHEAD
            if applied and size + cost > layout.MAX_REQUEST_BYTES:
                yield txn, created, applied
                txn, created, applied, size = self._fenced(), [], [], 0
            if path in self._nodes:
                txn.set_data(path, data)
            else:
                self._create_parents(txn, path, created)
                txn.create(path, data)
                created.append(path)
            applied.append((group, topic, updates))
            size += cost
        if applied:
            yield txn, created, applied

    # -- helpers --------------------------------------------------------------------------

    def _fenced(self):
        txn = self.zk.client.transaction()
        txn.check(self.fence.path, self.fence.epoch)
        return txn

    def _create_parents(self, txn, path: str, created: list[str]) -> None:
        """Add creates for the missing parents of `path` below the partition's groups node."""
        base = layout.groups_path(self.partition)
        missing = []
        parent = path.rsplit("/", 1)[0]
        while parent != base and parent not in self._nodes and parent not in created:
            missing.append(parent)
            parent = parent.rsplit("/", 1)[0]
        for node in reversed(missing):
            txn.create(node, b"")
            created.append(node)

    def _check_writable(self) -> None:
        if self.guard is not None and not self.guard.writable:
            if self.guard.fenced:
                raise NotOwner(f"group-partition {self.partition}: the ZooKeeper session is fenced")
            raise StoreUnavailable("the ZooKeeper connection is suspended")


def _entry_bound(entry: OffsetEntry) -> int:
    """Bytes an entry takes in a shard at most: JSON escapes a character in 6 bytes or fewer."""
    return 64 + 6 * len(entry[2] or "")

