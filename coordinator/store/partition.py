"""What the owner of one group-partition keeps in ZooKeeper: group metadata and offsets.

Group metadata is written once per generation, compressed: in one fenced multi() when it fits
one znode; otherwise as chunks under the group's record/ znode, each in a fenced multi() of
its own, under names no znode there has, then one fenced multi() points the group znode at
them and deletes the chunks it pointed at before. A reader sees the old record or the new,
never a mix; chunks of a sequence cut short are deleted by a later one.

Offset commits go through a group commit: commits that arrive while this group-partition's
batch is in flight wait and are written together in its next batch, each shard
(SHARD_PARTITIONS partitions of one topic of one group) once with its merged content. The
instance's `OffsetWriter` puts the batches of all its group-partitions in as few multi()
calls as it can, each cut to MAX_REQUEST_BYTES without splitting one commit request
across two of them (a single request larger than that is split by shard; its partitions
are then not all-or-nothing). A commit is acknowledged only after the multi() that
carries it succeeded.

The owner holds the shards in memory, so writes are whole-znode overwrites, never
read-modify-write round trips: `durable` is exactly what ZooKeeper confirmed (what
OffsetFetch may answer), `_latest` adds what is in flight (what the next write builds on,
so a later multi() never drops an earlier one's values). One session applies multi()
calls in the order they were sent, and they are sent in the order they were built; a
group-partition has one batch in flight at most, so one written again (its multi() was
rolled back for another's part) still lands before the next.

Retention removes offsets on the same path (`expire_offsets`): a removal is queued as a
commit is, and leaves a partition out of its shard's rewrite only if the partition still
holds the entry found expired when the write is built. Znodes are deleted only by
`delete_group` and `collect` (topics retention emptied), which hold this group-partition's
commits (queued, not refused) and wait for its batch in flight, so that no write builds on a
znode while it goes; commits queued meanwhile land after, on fresh znodes.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import trio
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.serialization import SetData

from .. import logs
from . import layout
from .bridge import ZooKeeperBridge
from .budget import Ledger, refusal
from .turns import Turns
from .multiread import CHILDREN, GET
from .errors import CommitTooLarge, NotOwner, RolledBack, StoreError, StoreUnavailable
from .fence import Fence, check, fenced_commit
from .session import SessionGuard
from .writer import OffsetWriter, Part

# (offset, leader_epoch, metadata, commit_timestamp_ms): one partition's committed offset
OffsetEntry = tuple[int, int, str | None, int]
ShardKey = tuple[str, str, int]  # (group, topic, shard)

EXPIRE_BATCH_BYTES = 64 * 1024  # of shards rewritten by one batch of expired offsets: one multi() always
DELETES_PER_MULTI = 1000  # znodes one multi() deletes, at most (and MAX_REQUEST_BYTES of them)
RECHECK_RETRY = 0.5  # seconds between tries at reading back what a delete left


@dataclass(eq=False, slots=True)
class _Commit:
    group: str
    entries: dict[tuple[str, int], OffsetEntry]
    on_done: Callable[[Exception | None], None]
    alone: bool = False  # its batch was refused: written in a multi() of its own, so it fails alone
    # retention's: partitions to remove, each only if its entry is still this one when the write is built
    removals: dict[tuple[str, int], OffsetEntry] | None = None
    removed: int = 0  # how many of them its last build removed


@dataclass(eq=False, slots=True)
class _Batch:
    """Commits written together: in one multi(), or several when a single commit is too
    large for one; acknowledged when the last is confirmed, failed at the first that fails.
    It holds what its multis create and write, not the multis: no reference cycle, so it is
    freed as soon as it is done rather than by the cyclic collector."""
    commits: list[_Commit]
    created: list[list[str]] = field(default_factory=list)  # by multi: the znodes it creates
    # by multi: (group, topic, {partition: entry} written, [partitions removed])
    applied: list[list] = field(default_factory=list)


_UNANSWERED = object()


@dataclass(eq=False, slots=True)
class _Multi:
    batch: _Batch
    index: int  # in its batch
    outcome: object = _UNANSWERED  # its result list, or the exception kazoo met


@dataclass
class Loaded:
    groups: dict[str, dict]
    offsets: dict[str, dict[str, dict[int, OffsetEntry]]]
    # consumer groups' member records: group -> member -> record
    members: dict[str, dict[str, dict]] = field(default_factory=dict)


class PartitionStore:
    def __init__(self, zk: ZooKeeperBridge, writer: OffsetWriter, fence: Fence, guard: SessionGuard | None = None,
                 max_metadata_bytes: int = 1024 * 1024):
        self.zk = zk
        self.writer = writer
        self.fence = fence
        self.guard = guard
        self.partition = fence.partition
        self.max_metadata_bytes = max_metadata_bytes  # of one group's offsets, stored and in flight
        self.groups: dict[str, dict] = {}
        # group -> topic -> partition -> entry, as ZooKeeper has confirmed it
        self.durable: dict[str, dict[str, dict[int, OffsetEntry]]] = {}
        # the same with every write in flight applied: what the next shard writes build on
        self._latest: dict[str, dict[str, dict[int, OffsetEntry]]] = {}
        # what this group-partition's groups hold in ZooKeeper, against the instance's data budget
        self.ledger = Ledger(self.partition, writer.budget)
        # each shard's last written size (the ledger counts every change of it)
        self._shard_bytes: dict[ShardKey, int] = self.ledger.shards
        self._nodes: set[str] = set()  # znodes under this partition known to exist, but chunks
        self._chunks: dict[str, set[str]] = {}  # group -> its record's chunk znodes known to exist
        self._listed: set[str] = set()  # groups whose record/ children are all in _chunks
        # consumer groups' member records known to exist: group -> member -> its data's size
        self._members: dict[str, dict[str, int]] = {}
        self._members_unsure: set[str] = set()  # groups whose member records must be read back first
        # one record write of a group at a time: a chunked one takes several multi() calls,
        # and a later generation's must land after it, not between
        self._one_write = Turns()
        self._queue: list[_Commit] = []
        self._stopped = False  # its writer's part has stopped: nothing more is written
        self._paths: dict[ShardKey, tuple[str, str]] = {}  # each shard's znode path, and as sent (chroot prefixed)
        self._checks = fence.transaction(zk).operations  # the fence's two checks, the same in every multi()
        self._fence_cost = sum(len(op.path) + layout.OP_OVERHEAD for op in self._checks)  # in bytes of a multi()
        self._chroot = len(self._checks[0].path) - len(fence.path)  # kazoo sends every path under it
        self._sent: deque[_Multi] = deque()  # multis of the batch in flight, until their outcome is applied
        self._uncertain: dict[str, set[ShardKey]] = {}  # by group: shards a write of unknown outcome touched
        self._closed = False  # handing over: no new writes
        self._holds = 0  # znodes being deleted: commits wait (queued, not sent) until it is 0
        self._quieted: trio.Event | None = None  # set when no batch is in flight, for `_quiet`
        # group -> topics whose offsets are all gone (expired) but whose znodes remain (`collect`);
        # a group with an empty set has znodes and neither offsets nor record
        self._bare: dict[str, set[str]] = {}
        self._writing = 0  # writes accepted and not yet confirmed or failed
        self._idle = trio.Event()
        self._idle.set()
        # told of each group's offsets once ZooKeeper has confirmed them: (group, topic, entries)
        self.on_durable: Callable[[str, str, dict[int, OffsetEntry]], None] | None = None
        self.log = logs.get("groupkeeper.store").bind(partition=self.partition)

    # -- loading --------------------------------------------------------------------------

    async def load(self) -> Loaded:
        """Read every group and committed offset of this partition (a new owner's first act):
        one multiRead round trip per level of the tree (groups, their offsets' topics, the
        topics' shards, the shards), whatever the number of groups."""
        base = layout.groups_path(self.partition)
        await self.zk.ensure_path(base)
        self._nodes.add(base)
        groups = [layout.unescape(node) for node in await self.zk.get_children(base)]
        paths = [layout.group_path(self.partition, g) for g in groups]
        answers = await self.zk.read_many([read for path in paths for read in (
            (GET, path), (CHILDREN, path + "/offsets"), (CHILDREN, path + "/members"))])
        topics: list[tuple[str, str, str]] = []  # (group, topic, path)
        chunked: dict[str, list[str]] = {}  # group -> paths of the chunks of its record
        member_nodes: list[tuple[str, str, str]] = []  # (group, member, path)
        for group, path, meta, offsets, members in zip(groups, paths, answers[::3], answers[1::3], answers[2::3]):
            if _absent(meta):
                continue
            if not _absent(members):
                self._nodes.add(path + "/members")
                member_nodes += [(group, layout.unescape(m), f"{path}/members/{m}") for m in members]
            data, _ = meta
            self._nodes.add(path)
            record = layout.decode_group(data) if data else None
            if isinstance(record, list):
                chunked[group] = [f"{path}/record/{name}" for name in record]
            elif record is not None:
                self.groups[group] = record
                self.ledger.record(group, len(data))
            if _absent(offsets):
                continue
            self._nodes.add(path + "/offsets")
            topics += [(group, layout.unescape(t), f"{path}/offsets/{t}") for t in offsets]
        answers = await self.zk.read_many([(CHILDREN, path) for _, _, path in topics])
        shards: list[tuple[str, str, int, str]] = []  # (group, topic, shard, path)
        for (group, topic, path), names in zip(topics, answers):
            if _absent(names):
                continue
            self._nodes.add(path)
            shards += [(group, topic, int(name), f"{path}/{name}") for name in names]
        chunks = [(group, path) for group, paths in chunked.items() for path in paths]
        answers = await self.zk.read_many([(GET, path) for *_, path in shards] + [(GET, p) for _, p in chunks]
                                          + [(GET, path) for *_, path in member_nodes])
        self._assemble(chunked, answers[len(shards):len(shards) + len(chunks)])
        members: dict[str, dict[str, dict]] = {}
        for (group, member, path), read in zip(member_nodes, answers[len(shards) + len(chunks):]):
            if _absent(read):
                continue
            data, _ = read
            self._nodes.add(path)
            self._members.setdefault(group, {})[member] = len(data)
            members.setdefault(group, {})[member] = layout.decode(data)
        for group, sizes in self._members.items():
            self.ledger.members_record(group, self.ledger.members_cost(group, sizes))
        for (group, topic, shard, path), read in zip(shards, answers):
            if _absent(read):
                continue
            data, _ = read
            self._nodes.add(path)
            self._shard_bytes[(group, topic, shard)] = len(data)
            self.durable.setdefault(group, {}).setdefault(topic, {}).update(layout.decode_shard(data))
        # what retention left behind when the previous owner went mid-way: topics without
        # offsets (their shards emptied), groups with neither offsets nor record
        for group, topic, path in topics:
            if path in self._nodes and not self.durable.get(group, {}).get(topic):
                self._bare.setdefault(group, set()).add(topic)
        for group, path in zip(groups, paths):
            if (path in self._nodes and group not in self.groups and group not in chunked
                    and not any(self.durable.get(group, {}).values())):
                self._bare.setdefault(group, set())
        self._resync_latest()
        return Loaded(self.groups, self.durable, members)

    def _assemble(self, chunked: dict[str, list[str]], reads: list) -> None:
        """Groups whose record is in chunks, from the chunks' reads (in `chunked` order)."""
        reads = iter(reads)
        for group, paths in chunked.items():
            parts = [next(reads) for _ in paths]
            if any(_absent(part) for part in parts):  # only a hand in ZooKeeper does this
                self.log.error("a chunk of the group's record is missing: the group starts empty",
                               group=group)
                continue
            self._nodes.add(layout.record_path(self.partition, group))
            self._chunks[group] = set(paths)
            self.groups[group] = layout.decode_record(b"".join(data for data, _ in parts))
            self.ledger.record(group, sum(len(data) for data, _ in parts), len(parts))

    # -- handing over ----------------------------------------------------------------------

    async def close(self) -> None:
        """Refuse new writes (NotOwner) and return once every accepted write has been confirmed
        or has failed: what a handover waits for before the next owner may load."""
        self._closed = True
        await self._idle.wait()

    def _begin(self) -> None:
        self._check_writable()
        self._writing += 1
        self._idle = trio.Event() if self._writing == 1 else self._idle

    def _end(self) -> None:
        self._writing -= 1
        if not self._writing:
            self._idle.set()

    # -- group metadata -------------------------------------------------------------------

    async def write_group(self, group: str, metadata: dict | None,
                          members: dict[str, dict | None] | None = None) -> None:
        """Persist a group's record (see the module's docstring). With `members`, a consumer-
        protocol group's: `metadata` its own record (None: unchanged since the last write) and
        the records of the members that changed (None: the member left), in one fenced multi()
        when they fit one (the common case: a member's reconciliation step, or a join with the
        group's record). Otherwise, in turn: new members' records, the group's record (which
        names the members), the others' records, the records of those that left; a reader
        then finds every member the group's record names, some perhaps at the state before.
        A classic group's record (`members` None) replaces any member records (the group
        went back to the classic protocol)."""
        self._begin()
        try:
            data = None if metadata is None else await _compress(metadata)
            encoded = {} if members is None else {
                member: None if record is None else layout.encode(record) for member, record in members.items()}
            async with self._one_write(group):
                if group in self._members_unsure:
                    await self._list_members(group)
                if members is None:
                    encoded = dict.fromkeys(self._members.get(group, ()))
                await self._write_records(group, data, encoded)
            if metadata is not None:
                self.groups[group] = metadata
        finally:
            self._end()

    async def _write_records(self, group: str, data: bytes | None, members: dict[str, bytes | None]) -> None:
        path = layout.group_path(self.partition, group)
        known = self._members.get(group, {})
        after = {**known, **{m: len(d) for m, d in members.items() if d is not None}}
        for member, record in members.items():
            if record is None:
                after.pop(member, None)
        members_cost = self.ledger.members_cost(group, after)
        chunks = inline = None
        if data is not None:
            inline = len(data) + 2 * len(path) <= layout.RECORD_CHUNK_BYTES
            chunks = 0 if inline else -(-len(data) // (layout.RECORD_CHUNK_BYTES - 4 * len(path)))
        # RecordOverBudget: nothing written
        self.ledger.check_record(group, None if data is None else len(data), chunks or 0, members_cost)
        new = [(m, d) for m, d in members.items() if d is not None and m not in known]
        changed = [(m, d) for m, d in members.items() if d is not None and m in known]
        gone = [m for m, d in members.items() if d is None and m in known]
        try:
            if (data is None or inline) and self._fits_one(group, data, new + changed, gone):
                await self._write_inline(group, data, new + changed, gone)
            else:
                for upserts, _ in self._cut(group, new, []):
                    await self._write_inline(group, None, upserts, [])
                if data is not None:
                    await (self._write_inline(group, data, [], []) if inline else self._write_chunked(group, data))
                for upserts, deletes in self._cut(group, changed, gone):
                    await self._write_inline(group, None, upserts, deletes)
        except Exception:
            if members:
                self._members_unsure.add(group)  # which member records landed: read back before the next write
            raise
        finally:
            if members:
                self.ledger.members_record(group, self.ledger.members_cost(group, self._members.get(group, {})))
        if data is not None:
            self.ledger.record(group, len(data), chunks)

    def _op_cost(self, path: str, data: bytes | None = None) -> int:
        return len(path) + self._chroot + layout.OP_OVERHEAD + (len(data) if data else 0)

    def _fits_one(self, group: str, data: bytes | None, upserts: list, deletes: list) -> bool:
        path = layout.group_path(self.partition, group)
        size = self._fence_cost + self._op_cost(path, data) + self._op_cost(layout.members_path(self.partition, group))
        if data is not None:  # the chunks it replaces, in the same multi()
            size += sum(self._op_cost(chunk) for chunk in self._chunks.get(group, ()))
        size += sum(self._op_cost(layout.member_path(self.partition, group, m), d) for m, d in upserts)
        size += sum(self._op_cost(layout.member_path(self.partition, group, m)) for m in deletes)
        return size <= layout.MAX_REQUEST_BYTES

    def _cut(self, group: str, upserts: list, deletes: list) -> Iterator[tuple[list, list]]:
        """Member records to write and delete, cut into multis of at most MAX_REQUEST_BYTES
        and DELETES_PER_MULTI znodes (a member's record alone always fits: see
        `ConsumerGroupConfig.max_member_record_bytes`)."""
        budget = layout.MAX_REQUEST_BYTES - self._fence_cost - 2 * self._op_cost(layout.group_path(self.partition, group))
        part: tuple[list, list] = ([], [])
        size = 0
        for member, record in [(m, d) for m, d in upserts] + [(m, None) for m in deletes]:
            cost = self._op_cost(layout.member_path(self.partition, group, member), record)
            if (part[0] or part[1]) and (size + cost > budget or len(part[0]) + len(part[1]) >= DELETES_PER_MULTI):
                yield part
                part, size = ([], []), 0
            if record is None:
                part[1].append(member)
            else:
                part[0].append((member, record))
            size += cost
        if part[0] or part[1]:
            yield part

    async def _write_inline(self, group: str, data: bytes | None, upserts: list[tuple[str, bytes]] = (),
                            deletes: list[str] = ()) -> None:
        """One fenced multi(): the group's record in its znode (None: not written), replacing
        the chunks it was in, as many as fit; members' records written and deleted."""
        path = layout.group_path(self.partition, group)
        txn, created = self.fence.transaction(self.zk), []
        stale = []
        if data is not None:
            # the record was in chunks until now: they go in the same multi(), as many as fit
            stale = sorted(self._chunks.get(group, ()))[:_max_deletes(path, len(data) + 2 * len(path))]
            for chunk in stale:
                txn.delete(chunk)
            if path in self._nodes:
                txn.set_data(path, data)
            else:
                txn.create(path, data)  # its parent, the groups node, exists since load()
                created.append(path)
        elif upserts and path not in self._nodes:  # never so: a consumer group's first write has its record
            txn.create(path, b"")
            created.append(path)
        parent = layout.members_path(self.partition, group)
        if upserts and parent not in self._nodes:
            txn.create(parent, b"")
            created.append(parent)
        for member, record in upserts:
            node = layout.member_path(self.partition, group, member)
            if node in self._nodes:
                txn.set_data(node, record)
            else:
                txn.create(node, record)
                created.append(node)
        for member in deletes:
            txn.delete(layout.member_path(self.partition, group, member))
        self._nodes.update(created)  # at once: an offsets batch built meanwhile must not create them
        try:
            await fenced_commit(self.zk, self.fence, txn)
        except Exception:
            self._nodes.difference_update(created)
            raise
        self._chunks.get(group, set()).difference_update(stale)
        if upserts or deletes:
            known = self._members.setdefault(group, {})
            for member, record in upserts:
                known[member] = len(record)
            for member in deletes:
                known.pop(member, None)
                self._nodes.discard(layout.member_path(self.partition, group, member))
            if not known:
                del self._members[group]

    async def _list_members(self, group: str) -> None:
        """Read back which member records of the group exist, and their sizes, after a write
        whose outcome is not known (and what of the group's own znodes exists)."""
        path, parent = layout.group_path(self.partition, group), layout.members_path(self.partition, group)
        try:
            found, listed = await self.zk.read_many([(GET, path), (CHILDREN, parent)])
            names = [] if _absent(listed) else listed
            reads = await self.zk.read_many([(GET, f"{parent}/{name}") for name in names])
            present = {name: read for name, read in zip(names, reads) if not _absent(read)}
        except KazooException as exc:
            raise StoreUnavailable(f"listing the members of group {group!r}: {type(exc).__name__}") from None
        (self._nodes.discard if _absent(found) else self._nodes.add)(path)
        (self._nodes.discard if _absent(listed) else self._nodes.add)(parent)
        for member in self._members.pop(group, {}):
            self._nodes.discard(layout.member_path(self.partition, group, member))
        if present:
            self._members[group] = {layout.unescape(name): len(read[0]) for name, read in present.items()}
            self._nodes.update(f"{parent}/{name}" for name in present)
        self._members_unsure.discard(group)

    async def _write_chunked(self, group: str, data: bytes) -> None:
        path, record = layout.group_path(self.partition, group), layout.record_path(self.partition, group)
        await self._list_record(group)
        before = sorted(self._chunks.get(group, ()))
        seq = 1 + max((int(p.rsplit("/", 1)[1].split("-")[0]) for p in before), default=0)
        size = layout.RECORD_CHUNK_BYTES - 4 * len(path)  # room for the paths of a long group id
        names = [f"{seq}-{i}" for i in range(-(-len(data) // size))]
        try:
            for i, name in enumerate(names):
                txn, created = self.fence.transaction(self.zk), []
                for node in (path, record):
                    if node not in self._nodes:
                        txn.create(node, b"")
                        created.append(node)
                txn.create(f"{record}/{name}", data[i * size:(i + 1) * size])
                self._nodes.update(created)  # at once, as in _write_inline
                try:
                    await fenced_commit(self.zk, self.fence, txn)
                except Exception:
                    self._nodes.difference_update(created)
                    raise
                self._chunks.setdefault(group, set()).add(f"{record}/{name}")
            txn = self.fence.transaction(self.zk)
            txn.set_data(path, layout.encode_chunk_names(names))
            stale = before[:_max_deletes(record)]
            for chunk in stale:
                txn.delete(chunk)
            await fenced_commit(self.zk, self.fence, txn)
        except Exception:
            self._listed.discard(group)  # which chunks landed is not known for sure: list them next time
            raise
        self._chunks[group].difference_update(stale)

    async def _list_record(self, group: str) -> None:
        """Learn every chunk znode of the group, those of sequences cut short included (a
        loaded group knows only the chunks its record names)."""
        if group in self._listed:
            return
        record = layout.record_path(self.partition, group)
        try:
            names = await self.zk.get_children(record)
        except NoNodeError:
            names = None
        except KazooException as exc:
            raise StoreUnavailable(f"listing the record of group {group!r}: {type(exc).__name__}") from None
        self._nodes.discard(record)
        self._chunks.pop(group, None)
        if names is not None:
            self._nodes.add(record)
            self._chunks[group] = {f"{record}/{name}" for name in names}
        self._listed.add(group)

    async def delete_group(self, group: str, still: Callable[[], bool] | None = None) -> bool:
        """Remove a group, its record's chunks and its offsets, children first. A group with
        very many offset shards takes several multi() calls; the group's own znode goes last.
        Meanwhile this group-partition's commits wait (queued, not refused), and the batch in
        flight is waited for first: nothing of the group is written while its znodes go, and
        commits that came meanwhile land after, on fresh znodes. With `still`, the group goes
        only if it holds then (retention: still empty, still without offsets). Whether it went."""
        self._begin()
        try:
            async with self._one_write(group):
                await self._list_record(group)
                with self._holding():
                    await self._quiet()
                    if still is not None and not still():
                        return False
                    await self._delete_group(group)
                return True
        finally:
            self._end()

    async def _delete_group(self, group: str) -> None:
        prefix = layout.group_path(self.partition, group)
        chunks = self._chunks.get(group, set())
        paths = sorted([p for p in self._nodes if p == prefix or p.startswith(prefix + "/")] + list(chunks),
                       key=lambda p: p.count("/"), reverse=True)
        try:
            await self._delete_nodes(paths, chunks)
        except (StoreUnavailable, StoreError):
            # what of it is left was read back (`_delete_nodes`); the offsets a deleted shard
            # held are read back before OffsetFetch answers for the group again
            self._listed.discard(group)
            self._uncertain.setdefault(group, set()).update(key for key in self._shard_bytes if key[0] == group)
            raise
        self._chunks.pop(group, None)
        self._members.pop(group, None)
        self._members_unsure.discard(group)
        self._bare.pop(group, None)
        self.groups.pop(group, None)
        self.durable.pop(group, None)
        self._latest.pop(group, None)
        self._uncertain.pop(group, None)
        self._listed.discard(group)
        for key in [key for key in self._paths if key[0] == group]:
            del self._paths[key]
            self._shard_bytes.pop(key, None)
        self.ledger.forget(group)  # what it held (shards loaded, never written here, included)

    async def _delete_nodes(self, paths: list[str], chunks: set[str] | None = None) -> None:
        """Delete `paths` (each after its children) in fenced multi() calls of at most
        DELETES_PER_MULTI znodes and MAX_REQUEST_BYTES, forgetting them as each is confirmed
        (`chunks`: record chunks among them, known there rather than in `_nodes`). When
        ZooKeeper refuses one or does not answer, which of them are left is read back before
        this returns (raising): the caller holds the commits, which build on `_nodes`."""
        budget = layout.MAX_REQUEST_BYTES - self._fence_cost
        chroot = len(self._checks[0].path) - len(self.fence.path)  # kazoo sends every path under it
        multis, chunk, size = [], [], 0
        for path in paths:
            cost = len(path) + chroot + layout.OP_OVERHEAD
            if chunk and (size + cost > budget or len(chunk) >= DELETES_PER_MULTI):
                multis.append(chunk)
                chunk, size = [], 0
            chunk.append(path)
            size += cost
        if chunk:
            multis.append(chunk)
        for chunk in multis:
            txn = self.fence.transaction(self.zk)
            for path in chunk:
                txn.delete(path)
            try:
                await fenced_commit(self.zk, self.fence, txn)
            except NotOwner:
                raise  # the next owner loads what is there
            except (StoreUnavailable, StoreError):
                await self._recheck(paths, chunks)
                raise
            self._nodes.difference_update(chunk)
            if chunks is not None:
                chunks.difference_update(chunk)

    async def _recheck(self, paths: list[str], chunks: set[str] | None) -> None:
        """Which of `paths` exist, read back from ZooKeeper (again while it does not answer,
        until it does or this store stops: commits are held meanwhile, and could not be
        written anyway)."""
        while not self._stopped:
            try:
                reads = await self.zk.read_many([(GET, path) for path in paths])
                present = [not _absent(read) for read in reads]
            except KazooException:
                await trio.sleep(RECHECK_RETRY)
                continue
            for path, there in zip(paths, present):
                known = chunks if chunks is not None and "/record/" in path else self._nodes
                (known.add if there else known.discard)(path)
            return

    # -- retention ------------------------------------------------------------------------

    def has_offsets(self, group: str) -> bool:
        """Whether `group` has offsets, stored or being written."""
        return any(self._latest.get(group, {}).values())

    def bare_groups(self) -> set[str]:
        """Groups with znodes that `collect` or `delete_group` should remove: topics without
        offsets, or nothing but the group's znode."""
        return set(self._bare)

    async def expire_offsets(self, group: str, expired: dict[str, dict[int, OffsetEntry]]) -> int:
        """Remove these offsets of `group` (topic -> partition -> the entry found expired),
        each only if it is still that entry when its write is built: a partition committed
        again since keeps its new offset. They are written as commits are (fenced, in order
        with them, shards rewritten whole without them), in batches of at most
        EXPIRE_BATCH_BYTES of shards (one multi() each), one batch at a time, so commits never
        wait behind more than one. Shards left empty stay until `collect`. How many went."""
        batches: list[dict[tuple[str, int], OffsetEntry]] = []
        batch: dict[tuple[str, int], OffsetEntry] = {}
        size, shards = 0, set()
        for topic, partitions in sorted(expired.items()):
            for p, entry in sorted(partitions.items()):
                key = (group, topic, p // layout.SHARD_PARTITIONS)
                if key not in shards:
                    cost = self._shard_bytes.get(key, 0) + 3 * (len(self._path(key)[0]) + layout.OP_OVERHEAD)
                    if batch and size + cost > EXPIRE_BATCH_BYTES:
                        batches.append(batch)
                        batch, size, shards = {}, 0, set()
                    shards.add(key)
                    size += cost
                batch[(topic, p)] = entry
        if batch:
            batches.append(batch)
        removed = 0
        for removals in batches:
            done, outcome = trio.Event(), []

            def finished(error: Exception | None) -> None:
                outcome.append(error)
                done.set()
            self._begin()
            commit = _Commit(group, {}, finished, removals=removals)
            self._queue.append(commit)
            self._offer()
            await done.wait()
            if outcome[0] is not None:
                raise outcome[0]
            removed += commit.removed
        return removed

    async def collect(self, group: str) -> int:
        """Delete the znodes of `group`'s topics that retention left without offsets (unless
        committed to again meanwhile), holding this group-partition's commits while they go,
        as `delete_group` does. How many topics went."""
        topics = self._bare.get(group)
        if not topics:
            return 0
        self._begin()
        gone = 0
        try:
            async with self._one_write(group):
                with self._holding():
                    await self._quiet()
                    for topic in sorted(topics):
                        path = layout.topic_offsets_path(self.partition, group, topic)
                        if self._latest.get(group, {}).get(topic) or path not in self._nodes:
                            topics.discard(topic)  # committed to again, or gone already
                            continue
                        try:  # read while the commits are held: no shard can appear meanwhile
                            names = await self.zk.get_children(path)
                        except NoNodeError:
                            names = None
                        except KazooException as exc:
                            raise StoreUnavailable(f"listing the offsets of {group!r} on {topic!r}: "
                                                   f"{type(exc).__name__}") from None
                        self._forget(group, topic)
                        if names is None:
                            self._nodes.discard(path)
                        else:
                            await self._delete_nodes([f"{path}/{name}" for name in names] + [path])
                            for name in filter(str.isdigit, names):  # shards (anything else was not ours)
                                self._shard_bytes.pop((group, topic, int(name)), None)
                                self._paths.pop((group, topic, int(name)), None)
                            gone += 1
                        topics.discard(topic)
            return gone
        finally:
            if not topics and self._bare.get(group) is topics:
                del self._bare[group]  # the group itself goes with delete_group, when it may
            self._end()

    def _forget(self, group: str, topic: str) -> None:
        """A topic of `group` without offsets (loaded so, or read back so) is no longer listed."""
        for view in (self.durable, self._latest):
            topics = view.get(group)
            if topics is not None and not topics.get(topic, True):
                del topics[topic]
                if not topics:
                    del view[group]

    @contextmanager
    def _holding(self) -> Iterator[None]:
        """While znodes are deleted: this group-partition's commits queue and wait, and go on
        (in order) once it is over."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1
            self._offer()

    async def _quiet(self) -> None:
        """Return once no batch of this store is in flight (while holding, none is sent)."""
        while self._sent and not self._stopped:
            if self._quieted is None:
                self._quieted = trio.Event()
            await self._quieted.wait()

    def _wake_quiet(self) -> None:
        if not self._sent and self._quieted is not None:
            self._quieted.set()
            self._quieted = None

    # -- offsets --------------------------------------------------------------------------

    async def commit_offsets(self, group: str, entries: dict[tuple[str, int], OffsetEntry],
                             client: str | None = None) -> None:
        """Durably store `entries` ((topic, partition) -> entry); returns once ZooKeeper has
        confirmed them. Raises NotOwner, StoreUnavailable or StoreError otherwise; OverBudget
        once the others are stored when the data budget refused some (`submit`)."""
        done, outcome = trio.Event(), []

        def finished(error: Exception | None) -> None:
            outcome.append(error)
            done.set()
        refused = self.submit(group, entries, finished, client)
        await done.wait()
        if outcome[0] is not None:
            raise outcome[0]
        if refused:
            raise refusal(group, self.ledger.budget, len(refused))

    def submit(self, group: str, entries: dict[tuple[str, int], OffsetEntry],
               on_done: Callable[[Exception | None], None], client: str | None = None) -> list[tuple[str, int]]:
        """Queue `entries` for the next write, at once: commits are written in the order they
        were submitted, so a client's pipelined commits land in the order it sent them.
        `on_done(error)` is called once, in trio's thread, when the commit is durable (None)
        or has failed (NotOwner, StoreUnavailable or StoreError); nothing waits in a task for
        it. Raises those errors when the commit cannot be queued.

        What the commit adds to ZooKeeper's data is charged to `client` (a principal, or an
        address; None: no one). When it would take the data past the budget (budget.py), the
        partitions that add to it are not written, and returned; the others are queued. When
        that is all of them, OverBudget is raised and nothing is queued."""
        self._check_metadata(group, entries)
        self._check_writable()  # before the budget: a store handed over refuses as not the owner
        refused, reserved = self.ledger.admit(group, entries, self._latest.get(group), client)
        if refused:
            if len(refused) == len(entries):
                raise refusal(group, self.ledger.budget, len(refused))
            left_out = set(refused)
            entries = {key: entry for key, entry in entries.items() if key not in left_out}
        self._begin()
        if reserved is not None:  # what it reserved is held until it is done, then charged or given back
            on_done = partial(_reserved_done, self.ledger, reserved, on_done)
        self._queue.append(_Commit(group, entries, on_done))
        self._offer()
        return refused

    def _offer(self) -> None:
        """Tell the writer when there is a batch to write: commits queued, none in flight,
        no znodes being deleted."""
        if self._queue and not self._sent and not self._stopped and not self._holds:
            self.writer.ready(self)

    async def run_writer(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """While this runs, the instance's writer writes this group-partition's commits; when
        it stops (the partition is gone), what ZooKeeper did not answer fails. Meanwhile
        what its groups hold counts in the instance's data budget, and its share of it."""
        self.ledger.join()
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self.ledger.leave()  # what it holds moves with the group-partition (its failures below are its own)
            self._closed = self._stopped = True  # a commit that comes later is refused, not queued for no one
            self.writer.withdraw(self)
            if self._sent:  # the batch in flight
                self._fail(self._sent[0].batch, StoreUnavailable("the group-partition stopped before ZooKeeper answered"))
            queued, self._queue = self._queue, []
            self._finish(queued, StoreUnavailable("the group-partition stopped before the write"))
            self._wake_quiet()

    def take(self, budget: int, first: bool) -> list[Part] | None:
        """The writes of the next batch, for the writer's next multi(): normally one part,
        several only for a single commit too large for one multi(). None when the batch's
        first commit does not fit in `budget` bytes and the multi() is not empty (`first`
        False): it goes in the next. [] when nothing is to be written after all, or not now
        (znodes are being deleted: offered again after)."""
        if self._holds:
            return []
        commits = self._take_batch(budget, first)
        if not commits:
            return None
        del self._queue[:len(commits)]
        try:
            self._check_session()  # not _check_writable: accepted commits are written even when closed
            built = self._build(commits)
        except (NotOwner, StoreUnavailable, StoreError) as exc:
            self._resync_latest()
            self._finish(commits, exc)
            self._offer()
            return []
        if not built:  # only removals, of partitions all committed again since: done
            self._finish(commits, None)
            self._offer()
            return []
        batch = _Batch(commits)
        parts: list[Part] = []
        for index, (txn, created, applied, size) in enumerate(built):
            batch.created.append(created)
            batch.applied.append(applied)
            multi = _Multi(batch, index)
            self._sent.append(multi)
            parts.append((txn.operations, size, partial(self._answered, multi)))
        return parts

    def _answered(self, multi: _Multi, outcome) -> None:
        """A multi()'s outcome, in trio's thread. Outcomes are applied in the order the
        multis were sent, whatever order they are delivered in: an earlier multi's older
        offsets must never overwrite a later one's in `durable`."""
        multi.outcome = outcome
        sent = self._sent
        while sent and sent[0].outcome is not _UNANSWERED:
            self._apply(sent.popleft())
        if self._quieted is not None:
            self._wake_quiet()

    def _apply(self, multi: _Multi) -> None:
        batch = multi.batch
        try:
            check(self.fence, multi.outcome)
        except (NotOwner, StoreUnavailable, StoreError) as exc:
            for created in batch.created[multi.index:]:
                self._nodes.difference_update(created)
            return self._fail(batch, exc)
        durable = self.durable
        for group, topic, updates, gone in batch.applied[multi.index]:
            partitions = durable.setdefault(group, {}).setdefault(topic, {})
            partitions.update(updates)
            if gone:
                self._removed(group, topic, partitions, gone)
            if self.on_durable is not None and updates:
                self.on_durable(group, topic, updates)
        if multi.index == len(batch.applied) - 1:
            self._finish(batch.commits, None)
            self._offer()

    def _removed(self, group: str, topic: str, partitions: dict[int, OffsetEntry], gone: list[int]) -> None:
        """Expired offsets confirmed removed: a topic left without any has its znodes removed
        by `collect`, and a group without any is no longer listed by its offsets."""
        for p in gone:
            partitions.pop(p, None)
        if not partitions:
            topics = self.durable[group]
            del topics[topic]
            if not topics:
                del self.durable[group]
            self._bare.setdefault(group, set()).add(topic)

    def _fail(self, batch: _Batch, error: Exception) -> None:
        """A batch that failed: nothing of it is acknowledged; what later writes build on
        forgets it; shards it touched are read back before OffsetFetch answers when the
        outcome is unknown; a refusal is narrowed down to the commit that caused it; a batch
        rolled back for another's part is written again, first."""
        self._sent.clear()  # the rest of its multis: their outcomes are not used
        self._resync_latest()
        if isinstance(error, StoreUnavailable):  # they may have landed all the same
            for applied in batch.applied:
                for group, topic, updates, gone in applied:
                    self._uncertain.setdefault(group, set()).update(
                        (group, topic, p // layout.SHARD_PARTITIONS) for p in (*updates, *gone))
        if isinstance(error, RolledBack):
            self._queue[:0] = batch.commits
        elif isinstance(error, StoreError) and len(batch.commits) > 1:
            self._retry_alone(batch.commits)  # one of them was refused: find which, keep the others
        else:
            self._finish(batch.commits, error)
        self._offer()

    def _finish(self, commits: list[_Commit], error: Exception | None) -> None:
        for commit in commits:
            self._end()
            try:
                commit.on_done(error)
            except Exception:  # a bug in one commit's completion: the others still complete
                self.log.exception("completing a commit failed", group=commit.group)

    async def settle(self, group: str) -> None:
        """Read back the shards of `group` that a write of unknown outcome touched (ZooKeeper
        did not confirm it: it may or may not have landed), so that what OffsetFetch answers is
        what ZooKeeper holds. Raises StoreUnavailable while ZooKeeper cannot answer."""
        keys = self._uncertain.get(group)
        if not keys:
            return
        keys = sorted(keys)
        try:
            reads = await self.zk.read_many([(GET, layout.shard_path(self.partition, *key)) for key in keys])
            contents = [{} if _absent(read) else layout.decode_shard(read[0]) for read in reads]
        except KazooException as exc:
            raise StoreUnavailable(f"reading back group {group!r}: {type(exc).__name__}") from None
        for (_, topic, shard), content in zip(keys, contents):
            first = shard * layout.SHARD_PARTITIONS
            partitions = self.durable.setdefault(group, {}).setdefault(topic, {})
            for p in range(first, first + layout.SHARD_PARTITIONS):
                partitions.pop(p, None)
            partitions.update(content)
            if not partitions:  # a removal of unknown outcome that landed
                self._removed(group, topic, partitions, [])
            self._uncertain[group].discard((group, topic, shard))
        if not self._uncertain[group]:
            del self._uncertain[group]
        self._resync_latest()

    def _resync_latest(self) -> None:
        """What later writes build on, after a load or a failed multi(): what ZooKeeper
        confirmed plus what is still in flight, never the values that failed (a later write of
        the same shard would otherwise land them after all)."""
        latest = {g: {t: dict(ps) for t, ps in topics.items()} for g, topics in self.durable.items()}
        for multi in self._sent:  # in flight: sent, not yet answered
            for group, topic, updates, gone in multi.batch.applied[multi.index]:
                partitions = latest.setdefault(group, {}).setdefault(topic, {})
                partitions.update(updates)
                for p in gone:
                    partitions.pop(p, None)
        self._latest = latest

    def _retry_alone(self, batch: list[_Commit]) -> None:
        """ZooKeeper refused a batch for what one of its commits holds: each is written again
        in a batch of its own, first, so only the culprit fails."""
        for commit in batch:
            commit.alone = True
        self._queue[:0] = batch

    def _take_batch(self, budget: int, first: bool) -> list[_Commit]:
        """As many queued commits as fit in `budget` bytes of a multi(), oldest first; at
        least one if `first` (the multi() is empty), else perhaps none; a commit to be
        written alone makes a batch of its own.

        The size of a shard's write is bounded by its last written size plus a bound for
        every entry the batch puts in it, plus room for its path and two parents."""
        queue = self._queue
        size = self._fence_cost
        touched: set[ShardKey] = set()
        for i, commit in enumerate(queue):
            if commit.alone and i:
                return queue[:i]
            size += self._cost(commit, touched)
            if size > budget and (i or not first):
                return queue[:i]
            if commit.alone:
                return queue[:1]
        return queue[:]

    def _cost(self, commit: _Commit, touched: set[ShardKey]) -> int:
        """What `commit` adds to a batch's multi(), at most, beside the shards in `touched`."""
        cost = 0
        for (topic, p), entry in commit.entries.items():
            key = (commit.group, topic, p // layout.SHARD_PARTITIONS)
            if key not in touched:
                touched.add(key)
                cost += self._shard_bytes.get(key, 0) + 3 * (len(self._path(key)[0]) + layout.OP_OVERHEAD)
            cost += 64 + 6 * len(entry[2] or "")
        if commit.removals:  # shards rewritten without them: no larger than they were
            for topic, p in commit.removals:
                key = (commit.group, topic, p // layout.SHARD_PARTITIONS)
                if key not in touched:
                    touched.add(key)
                    cost += self._shard_bytes.get(key, 0) + 3 * (len(self._path(key)[0]) + layout.OP_OVERHEAD)
        return cost

    def _path(self, key: ShardKey) -> tuple[str, str]:
        """A shard's znode path, and the path kazoo sends for it (under the connect string's
        chroot), worked out once: kazoo normalises every path of every op it is given."""
        paths = self._paths.get(key)
        if paths is None:
            path = layout.shard_path(self.partition, *key)
            probe = self.zk.client.transaction()
            probe.check(path, 0)
            paths = self._paths[key] = (path, probe.operations[0].path)
        return paths

    def _transaction(self):
        """A multi() beginning with the fence's checks (`Fence.transaction`, built once)."""
        txn = self.zk.client.transaction()
        txn.operations += self._checks
        return txn

    def _check_metadata(self, group: str, entries: dict[tuple[str, int], OffsetEntry]) -> None:
        """Refuse a commit that would take the group's metadata over its bound. Only commits
        that carry metadata pay for counting it (most carry none)."""
        if not any(entry[2] for entry in entries.values()):
            return
        topics = self._latest.get(group, {})
        total = sum(len(entry[2] or "") for (topic, p), entry in entries.items())
        total += sum(len(entry[2] or "") for topic, partitions in topics.items()
                     for p, entry in partitions.items() if (topic, p) not in entries)
        if total > self.max_metadata_bytes:
            raise CommitTooLarge(f"group {group!r}: {total} characters of offset metadata, over the "
                                 f"{self.max_metadata_bytes} allowed (group_max_offset_metadata_bytes)")

    def _shard(self, view: dict, key: ShardKey) -> dict[int, OffsetEntry]:
        group, topic, shard = key
        partitions = view.get(group, {}).get(topic, {})
        first = shard * layout.SHARD_PARTITIONS
        return {p: partitions[p] for p in range(first, first + layout.SHARD_PARTITIONS)
                if p in partitions}

    def _build(self, batch: list[_Commit]) -> list:
        """The multi() transactions for a batch, built from everything written or in flight
        (`_latest`), each with what it creates, writes and its size: normally one; several
        only when a single commit is too large for one. Every shard is encoded before any
        state changes."""
        merged: dict[ShardKey, dict[int, OffsetEntry]] = defaultdict(dict)
        removals: dict[ShardKey, dict[int, tuple[OffsetEntry, _Commit]]] | None = None
        for commit in batch:
            for (topic, p), entry in commit.entries.items():
                merged[(commit.group, topic, p // layout.SHARD_PARTITIONS)][p] = entry
            if commit.removals:
                commit.removed = 0
                removals = removals if removals is not None else defaultdict(dict)
                for (topic, p), entry in commit.removals.items():
                    key = (commit.group, topic, p // layout.SHARD_PARTITIONS)
                    merged[key]  # noqa: B018 (the shard in its place among the others)
                    removals[key][p] = (entry, commit)
        planned = []
        for key, updates in merged.items():
            content = self._shard(self._latest, key)
            content.update(updates)
            gone: list[int] = []
            if removals is not None and key in removals:
                if not updates and self._path(key)[0] not in self._nodes:
                    continue  # no such shard: nothing to remove
                # a partition committed again since it was found expired (in this batch or
                # before it) holds another entry now: it stays
                for p, (entry, commit) in removals[key].items():
                    if content.get(p) == entry:
                        del content[p]
                        gone.append(p)
                        commit.removed += 1
                if not updates and not gone:
                    continue  # nothing to write
            planned.append((key, updates, gone, layout.encode_shard(content)))
        fence = self._fence_cost
        multis, txn, created, applied, size = [], self._transaction(), [], [], fence
        for key, updates, gone, data in planned:
            group, topic, _ = key
            path, sent_as = self._path(key)
            cost = len(path) * 3 + len(data) + 3 * layout.OP_OVERHEAD
            if applied and size + cost > layout.MAX_REQUEST_BYTES:
                multis.append((txn, created, applied, size))
                txn, created, applied, size = self._transaction(), [], [], fence
            if path in self._nodes:
                txn.operations.append(SetData(sent_as, data, -1))
            else:
                self._create_parents(txn, path, created)
                txn.create(path, data)
                created.append(path)
                self._nodes.add(path)
            latest = self._latest.setdefault(group, {}).setdefault(topic, {})
            latest.update(updates)
            for p in gone:
                del latest[p]
            self._shard_bytes[key] = len(data)
            applied.append((group, topic, updates, gone))
            size += cost
        if applied:
            multis.append((txn, created, applied, size))
        return multis

    # -- helpers --------------------------------------------------------------------------

    def _create_parents(self, txn, path: str, created: list[str]) -> None:
        """Add creates for the missing parents of `path` below the partition's groups node."""
        base = layout.groups_path(self.partition)
        missing = []
        parent = path.rsplit("/", 1)[0]
        while parent != base and parent not in self._nodes:
            missing.append(parent)
            parent = parent.rsplit("/", 1)[0]
        for node in reversed(missing):
            txn.create(node, b"")
            created.append(node)
            self._nodes.add(node)

    def _check_writable(self) -> None:
        if self._closed:
            raise NotOwner(f"group-partition {self.partition} is being handed over")
        self._check_session()

    def _check_session(self) -> None:
        if self.guard is not None and not self.guard.writable:
            if self.guard.fenced:
                raise NotOwner(f"group-partition {self.partition}: the ZooKeeper session is fenced")
            raise StoreUnavailable("the ZooKeeper connection is suspended")


def _reserved_done(ledger: Ledger, reservation, on_done: Callable[[Exception | None], None],
                   error: Exception | None) -> None:
    """A commit that reserved room in the data budget is done: the ledger hears first."""
    ledger.done(reservation, error)
    on_done(error)


def _max_deletes(prefix: str, used: int = 0) -> int:
    """How many deletes of znodes under `prefix` one multi() may carry besides `used` bytes."""
    return max(layout.MAX_REQUEST_BYTES - used, 0) // (layout.OP_OVERHEAD + len(prefix) + 64)


async def _compress(metadata: dict) -> bytes:
    """The stored form of a group record; a large group's is built off the event loop (a
    10,000-member record takes tens of milliseconds)."""
    if len(metadata.get("members", ())) < 1000:
        return layout.encode_record(metadata)
    return await trio.to_thread.run_sync(layout.encode_record, metadata)


def _absent(read) -> bool:
    """A read of a multiRead: False for an answer, True for a znode that is not there; any
    other failure is raised (the load is retried)."""
    if isinstance(read, NoNodeError):
        return True
    if isinstance(read, Exception):
        raise read
    return False
