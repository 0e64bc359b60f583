"""Which instance each group-partition belongs on, agreed through one znode.

Groups map to a fixed number of group-partitions (a CRC-32 of the group id, modulo the count
written once to /groupkeeper/config). The placement record, `/groupkeeper/placement`, names
the live instances it was computed for and the owner of every group-partition. Every
instance watches it and the live set; whichever instance first sees the two disagree
computes the new placement (`balancing.balance`, from the previous one) and writes it with
a conditional set on the record's version. ZooKeeper lets exactly one such write through per
version; the others re-read, find it agrees with what they see, and write nothing. Because
`balance` is deterministic, racing instances with the same view would write the same record
anyway. No leader to elect, and none to lose.

The placement is the target, not the fact: an instance serves a group-partition only once
it holds its owner znode (`handover`); the placement tells it which to take and which to
give up, and tells FindCoordinator where each group is going.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import trio
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from .. import logs
from ..store import layout
from ..store.bridge import Refresher, ZooKeeperBridge
from .balancing import balance, moved
from .membership import Membership

DEFAULT_GROUP_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions


def partition_for(group_id: str, partitions: int) -> int:
    return zlib.crc32(group_id.encode()) % partitions


async def group_partitions(zk: ZooKeeperBridge) -> int:
    """The cluster's group-partition count, fixed by the first instance ever started."""
    try:
        await zk.create(layout.config_path(), layout.encode({"group_partitions": DEFAULT_GROUP_PARTITIONS}),
                        makepath=True)
    except NodeExistsError:
        pass
    data, _ = await zk.get(layout.config_path())
    return layout.decode(data)["group_partitions"]


@dataclass(frozen=True)
class Record:
    instances: tuple[int, ...]  # the live instances it was computed for
    owners: tuple[int | None, ...]  # by group-partition


class Placement:
    def __init__(self, zk: ZooKeeperBridge, membership: Membership, partitions: int):
        self.zk = zk
        self.membership = membership
        self.partitions = partitions
        self.record = Record((), (None,) * partitions)
        self.updated = trio.Event()  # set (and replaced) whenever `record` changes
        self.leaving = False  # shutting down: place nothing on this instance
        self._refresher = Refresher(zk, self.sync)
        self.log = logs.get("groupkeeper.placement").bind(instance=membership.me.id)

    def owner(self, partition: int) -> int | None:
        return self.record.owners[partition]

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self._refresher.run)
            task_status.started()
            while True:  # the live set changed: the placement may have to follow
                await self.membership.updated.wait()
                self._refresher.poke()

    async def _live(self) -> set[int]:
        """The registered instances, read after the placement: ZooKeeper orders one session's
        reads, so this is at least as new as the placement just read. (The membership's
        watched view may lag it, and an instance acting on a lagging view would write a
        placement with an instance that has just left, or without one that has just come.)"""
        live = {int(name) for name in await self.zk.get_children(layout.INSTANCES) if name.isdigit()}
        if self.leaving:
            live.discard(self.membership.me.id)
        return live

    async def sync(self) -> None:
        """Read the placement (re-arming its watch); rewrite it if it was computed for other
        instances than are live now."""
        path = layout.placement_path()
        while True:
            try:
                data, stat = await self.zk.get(path, watch=self._refresher.watch)
                current = _decode(data, self.partitions)
            except NoNodeError:
                if await self.zk.exists(path, watch=self._refresher.watch) is not None:
                    continue
                current, stat = None, None
            live = await self._live()
            if current is not None and set(current.instances) == live:
                self._publish(current)
                return
            previous = current.owners if current is not None else ()
            record = Record(tuple(sorted(live)), tuple(balance(self.partitions, live, previous)))
            try:
                if stat is None:
                    await self.zk.create(path, _encode(record), makepath=True)
                else:
                    await self.zk.set(path, _encode(record), version=stat.version)
            except (BadVersionError, NodeExistsError):
                continue  # another instance wrote first: read what it wrote
            self.log.info("placement written", live=sorted(live), moved=moved(previous, record.owners))
            self._publish(record)
            return

    def _publish(self, record: Record) -> None:
        if record != self.record:
            self.record = record
            self.updated.set()
            self.updated = trio.Event()


def _encode(record: Record) -> bytes:
    return layout.encode({"version": 1, "instances": list(record.instances), "owners": list(record.owners)})


def _decode(data: bytes, partitions: int) -> Record | None:
    """A record of another partition count or unreadable counts as none (it is rewritten)."""
    try:
        value = layout.decode(data)
        owners = tuple(value["owners"])
        if len(owners) != partitions:
            return None
        return Record(tuple(value["instances"]), owners)
    except (ValueError, KeyError, TypeError):
        return None
