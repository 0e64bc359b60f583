"""Kafka's registry written and read directly, for development and tests where no broker
writes it: what `groupkeeper topics ...` and `groupkeeper brokers list` do.

Synchronous kazoo: these run in short-lived CLI processes, never on the coordinator's trio
thread.
"""

from __future__ import annotations

import uuid

from kazoo.exceptions import NodeExistsError, NoNodeError

from coordinator.store import layout
from coordinator.store.blocking import AdminError, ZooKeeperAdmin
from coordinator.topics.view import Broker
from coordinator.topics.zookeeper import parse_broker, parse_topic, topic_data


class RegistryAdmin(ZooKeeperAdmin):

    def brokers(self) -> list[Broker]:
        try:
            ids = self.client.get_children(layout.BROKER_IDS)
        except NoNodeError:
            return []
        brokers = []
        for broker_id in ids:
            try:
                data, _ = self.client.get(f"{layout.BROKER_IDS}/{broker_id}")
            except NoNodeError:
                continue
            if (broker := parse_broker(broker_id, data)) is not None:
                brokers.append(broker)
        return sorted(brokers, key=lambda b: b.id)

    def topics(self) -> list[str]:
        try:
            return sorted(self.client.get_children(layout.BROKER_TOPICS))
        except NoNodeError:
            return []

    def topic(self, topic: str) -> tuple[dict[int, list[int]], uuid.UUID]:
        """Replicas by partition, and the topic id."""
        try:
            data, _ = self.client.get(f"{layout.BROKER_TOPICS}/{topic}")
        except NoNodeError:
            raise AdminError(f"topic {topic!r} does not exist") from None
        return parse_topic(data)

    def leader(self, topic: str, partition: int) -> tuple[int, list[int]] | None:
        """(leader, ISR) where a broker has written the partition's state."""
        try:
            data, _ = self.client.get(layout.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        state = layout.decode(data)
        return state.get("leader", -1), state.get("isr", [])

    def create_topic(self, topic: str, partitions: int, replication_factor: int = 1) -> dict[int, list[int]]:
        _check_topic_name(topic)
        if partitions < 1 or replication_factor < 1:
            raise AdminError("partitions and replication factor must be at least 1")
        replicas = self._assign(range(partitions), replication_factor)
        try:
            self.client.create(f"{layout.BROKER_TOPICS}/{topic}", topic_data(replicas, uuid.uuid4()), makepath=True)
        except NodeExistsError:
            raise AdminError(f"topic {topic!r} already exists") from None
        return replicas

    def alter_partitions(self, topic: str, partitions: int) -> dict[int, list[int]]:
        path = f"{layout.BROKER_TOPICS}/{topic}"
        try:
            data, stat = self.client.get(path)
        except NoNodeError:
            raise AdminError(f"topic {topic!r} does not exist") from None
        replicas, topic_id = parse_topic(data)
        if partitions < len(replicas):
            raise AdminError(f"topic {topic!r} has {len(replicas)} partitions; the count can only "
                             f"be increased, not decreased to {partitions}")
        if partitions == len(replicas):
            raise AdminError(f"topic {topic!r} already has {partitions} partitions")
        factor = len(next(iter(replicas.values()), [0]))
        replicas.update(self._assign(range(len(replicas), partitions), factor))
        self.client.set(path, topic_data(replicas, topic_id), version=stat.version)
        return replicas

    def _assign(self, partitions: range, factor: int) -> dict[int, list[int]]:
        """Round-robin over the registered brokers, or over ids 0.. when none is."""
        ids = [b.id for b in self.brokers()] or list(range(factor))
        if factor > len(ids):
            raise AdminError(f"replication factor {factor} is larger than the {len(ids)} "
                             "registered brokers")
        return {p: [ids[(p + r) % len(ids)] for r in range(factor)] for p in partitions}


def _check_topic_name(topic: str) -> None:
    """Kafka's rule: 1-249 characters of [a-zA-Z0-9._-], and not "." or ".."."""
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if not topic or len(topic) > 249 or topic in (".", "..") or set(topic) - allowed:
        raise AdminError(f"invalid topic name {topic!r}: use 1-249 characters of a-z A-Z 0-9 . _ -")
