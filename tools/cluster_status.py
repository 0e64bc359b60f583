"""The cluster as ZooKeeper records it, for `groupkeeper cluster`: the live instances, the
group-partitions each holds and the groups stored under them. Synchronous kazoo: it runs in
a short-lived CLI process, never on a coordinator's trio thread."""

from __future__ import annotations

from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from coordinator.store import layout


@dataclass
class InstanceStatus:
    id: int
    host: str
    port: int
    group_partitions: list[int] = field(default_factory=list)
    groups: int = 0


@dataclass
class ClusterStatus:
    group_partitions: int
    instances: list[InstanceStatus]
    unowned: list[int]  # group-partitions no live instance holds (a handover or failover under way)

    def as_json(self) -> dict:
        return {"group_partitions": self.group_partitions, "unowned": self.unowned, "instances": [
            {"id": i.id, "host": i.host, "port": i.port, "group_partitions": i.group_partitions, "groups": i.groups}
            for i in self.instances]}


def read_status(client: KazooClient) -> ClusterStatus:
    try:
        partitions = layout.decode(client.get(layout.config_path())[0])["group_partitions"]
    except NoNodeError:
        partitions = 0  # no instance has ever run against this ZooKeeper (chroot)
    instances: dict[int, InstanceStatus] = {}
    try:
        names = client.get_children(layout.INSTANCES)
    except NoNodeError:
        names = []
    for name in sorted(names, key=lambda n: (len(n), n)):
        try:
            record = layout.decode(client.get(layout.instance_path(int(name)))[0])
            instances[int(name)] = InstanceStatus(int(name), record["host"], record["port"])
        except (NoNodeError, ValueError, KeyError):
            continue
    unowned = []
    for n in range(partitions):
        try:
            owner = instances.get(layout.decode(client.get(layout.owner_path(n))[0])["instance"])
        except (NoNodeError, ValueError, KeyError):
            owner = None
        if owner is None:
            unowned.append(n)
            continue
        owner.group_partitions.append(n)
        try:
            owner.groups += len(client.get_children(layout.groups_path(n)))
        except NoNodeError:
            pass
    return ClusterStatus(partitions, list(instances.values()), unowned)


def ranges(numbers: list[int]) -> str:
    """`[0, 1, 2, 5, 7, 8]` as "0-2,5,7-8"."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans) or "-"
