"""Which group-partitions this instance owns, and the groups and offsets of each.

Groups map to a fixed number of group-partitions (a CRC-32 of the group id); the count is
written once to /groupkeeper/config when the cluster is created. At start-up the instance
takes every partition no one else holds, loads it (answering COORDINATOR_LOAD_IN_PROGRESS
for its groups meanwhile) and serves it; on shutdown it gives them up. Spreading
partitions over several instances and taking over a dead one's is the job of the
several-instances work; until then an instance serves what it could take.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import trio
from kazoo.exceptions import NodeExistsError

from protocol import ErrorCode

from . import logs, metrics
from .events import DISCARD, EventSink
from .assignors import Assignor
from .groups.group import GroupConfig
from .groups.manager import GroupSet
from .groups.state import GroupState
from .groups.snapshot import restore
from .store import layout
from .store.bridge import ZooKeeperBridge
from .store.fence import NotOwner, StoreError, StoreUnavailable, acquire, release
from .store.partition import PartitionStore
from .store.registry import TopicRegistry
from .store.session import SessionGuard

DEFAULT_GROUP_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions


def partition_for(group_id: str, partitions: int) -> int:
    return zlib.crc32(group_id.encode()) % partitions


@dataclass
class Owned:
    store: PartitionStore
    groups: GroupSet
    loaded: trio.Event = field(default_factory=trio.Event)


class Coordinator:
    def __init__(self, zk: ZooKeeperBridge, guard: SessionGuard, registry: TopicRegistry,
                 instance_id: int, group_config: GroupConfig, assignors: dict[str, Assignor],
                 strict: bool = False, events: EventSink = DISCARD):
        self.zk = zk
        self.events = events
        self.guard = guard
        self.registry = registry
        self.instance_id = instance_id
        self.group_config = group_config
        self.assignors = assignors
        self.strict = strict
        self.group_partitions = DEFAULT_GROUP_PARTITIONS
        self.owned: dict[int, Owned] = {}
        self.log = logs.get("groupkeeper.ownership").bind(instance=instance_id)

    def route(self, group_id: str) -> Owned | ErrorCode:
        """The partition serving `group_id`, or the error to answer with."""
        owned = self.owned.get(partition_for(group_id, self.group_partitions))
        if owned is None or self.guard.fenced:
            return ErrorCode.NOT_COORDINATOR
        if not owned.loaded.is_set():
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return owned

    def all_groups(self) -> list[tuple[str, str, str, int]]:
        """(group id, protocol type, state, members) of every group served here, including
        groups that only have committed offsets (Empty, as Kafka lists them)."""
        listed = []
        for owned in self.owned.values():
            if not owned.loaded.is_set():
                continue
            live = owned.groups.groups
            listed += [(gid, g.protocol_type or "", g.state.value, len(g.members)) for gid, g in live.items()]
            listed += [(gid, "", GroupState.EMPTY.value, 0) for gid in owned.store.durable if gid not in live]
        return listed

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.group_partitions = await self._cluster_config()
        changes = self.registry.subscribe()
        async with trio.open_nursery() as nursery:
            for n in range(self.group_partitions):
                try:
                    fence = await acquire(self.zk, n, {"instance": self.instance_id})
                except NotOwner:
                    continue
                store = PartitionStore(self.zk, fence, self.guard)
                groups = GroupSet(self.group_config, self.assignors, self._partitions_of,
                                  store.write_group, self.strict, self.events)
                self.owned[n] = Owned(store, groups)
                self.events.emit("ownership_gained", None, partition=n, epoch=fence.epoch)
            self.log.info("group-partitions taken", count=len(self.owned), of=self.group_partitions)
            task_status.started()
            for n, owned in self.owned.items():
                nursery.start_soon(self._serve_partition, n, owned)
            nursery.start_soon(self._report_loaded)
            async for change in changes:
                for owned in self.owned.values():
                    owned.groups.topics_changed(change.topic, change.new_partitions)

    async def _serve_partition(self, n: int, owned: Owned) -> None:
        started = trio.current_time()
        loaded = await owned.store.load()
        now = trio.current_time()
        for group_id, data in loaded.groups.items():
            owned.groups.groups[group_id] = restore(group_id, data, now, self.group_config)
        metrics.GROUP_LOAD_SECONDS.observe(trio.current_time() - started)
        async with trio.open_nursery() as nursery:
            await nursery.start(owned.store.run_writer)
            await nursery.start(owned.groups.run)
            owned.loaded.set()

    async def all_loaded(self) -> None:
        """Return once every group-partition taken at start-up is loaded and served."""
        for owned in list(self.owned.values()):
            await owned.loaded.wait()

    async def _report_loaded(self) -> None:
        started = trio.current_time()
        await self.all_loaded()
        self.log.info("group-partitions loaded", count=len(self.owned), groups=len(self.all_groups()),
                      duration_s=round(trio.current_time() - started, 3))

    def fenced(self) -> None:
        """The session guard's verdict: this instance owns nothing any more (it keeps
        answering NOT_COORDINATOR until it is restarted)."""
        for n, owned in self.owned.items():
            self.events.emit("ownership_lost", None, partition=n, epoch=owned.store.fence.epoch,
                             reason="session lost")

    async def release_all(self) -> None:
        for n, owned in self.owned.items():
            if not self.guard.fenced:  # else the loss was recorded when it happened
                self.events.emit("ownership_lost", None, partition=n, epoch=owned.store.fence.epoch,
                                 reason="released")
            try:
                await release(self.zk, owned.store.fence)
            except (NotOwner, StoreUnavailable, StoreError) as exc:  # log, release the others
                self.log.warning("could not release a group-partition", partition=owned.store.partition,
                                 error=str(exc))

    def _partitions_of(self, topic: str) -> int:
        return self.registry.partitions.get(topic, 0)

    async def _cluster_config(self) -> int:
        try:
            await self.zk.create(layout.config_path(), layout.encode(
                {"group_partitions": DEFAULT_GROUP_PARTITIONS}), makepath=True)
        except NodeExistsError:
            pass
        data, _ = await self.zk.get(layout.config_path())
        return layout.decode(data)["group_partitions"]
