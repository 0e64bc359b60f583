"""What the coordinator knows of the Kafka cluster beside it, whichever source keeps it.

Both sources (`zookeeper.py`: Kafka's ZooKeeper layout; `brokers.py`: the brokers' own
Metadata API) fill the same `TopicView`; the rest of the coordinator reads it (Metadata
answers, partition counts for assignments) and subscribes to its changes (groups
rebalance). A change is announced the same way from either source: a topic created, grown,
deleted, or deleted and created again under the same name (a new topic id).
"""

from __future__ import annotations

import base64
import math
import uuid
from dataclasses import dataclass

import trio

NO_TOPIC_ID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: a topic whose id is not known
_UNSET = object()


@dataclass(frozen=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionState:
    leader: int
    isr: tuple[int, ...]
    leader_epoch: int


@dataclass(frozen=True)
class TopicChange:
    topic: str
    old_partitions: int  # 0 for a topic just created (or created again)
    new_partitions: int  # 0 for a topic deleted
    recreated: bool = False  # deleted and created again: a new topic id, whatever its count


def topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a topic id: URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    """The topic id in Kafka's text form; ValueError if it is not one."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a topic id")
    return uuid.UUID(bytes=raw)


class _Watched(dict):
    """A dict of the view's whose every real change (a value set that differs, a key
    removed) adds one to the view's `changes`: the sources change the view's dicts in place."""
    __slots__ = ("_view",)

    def __init__(self, view: TopicView, items=()):
        super().__init__(items)
        self._view = view

    def __setitem__(self, key, value):
        if dict.get(self, key, _UNSET) != value:
            self._view.changes += 1
        dict.__setitem__(self, key, value)

    def __delitem__(self, key):
        dict.__delitem__(self, key)
        self._view.changes += 1

    def pop(self, key, *default):
        if key in self:
            self._view.changes += 1
        return dict.pop(self, key, *default)

    def popitem(self):
        self._view.changes += 1
        return dict.popitem(self)

    def clear(self):
        if self:
            self._view.changes += 1
        dict.clear(self)

    def update(self, *args, **kwargs):
        self._view.changes += 1
        dict.update(self, *args, **kwargs)

    def setdefault(self, key, default=None):
        if key not in self:
            self._view.changes += 1
        return dict.setdefault(self, key, default)

    def __ior__(self, other):
        self.update(other)
        return self


class _Tracked:
    """An attribute of the view whose replacement by a different value counts in `changes`
    (a dict is kept as a `_Watched`, whose changes in place count too)."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, view, owner=None):
        if view is None:
            return self
        return view.__dict__[self.name]

    def __set__(self, view, value) -> None:
        if type(value) is dict:
            value = _Watched(view, value)
        if view.__dict__.get(self.name, _UNSET) != value:
            view.__dict__["changes"] = view.__dict__.get("changes", 0) + 1
        view.__dict__[self.name] = value


class TopicView:
    """Topics (partition counts, replicas, topic ids), partition leaders and live brokers,
    as a source last learned them. Only the source writes; everything else reads.

    `changes` counts every change to what a Metadata answer is made of (the attributes
    below that are `_Tracked`, and their dicts changed in place): an answer made when it
    had a value is still right while it has it (`api.cluster`'s cache of encoded answers).
    A value written again unchanged (the brokers source's every round) is no change."""

    partitions = _Tracked()
    replicas = _Tracked()
    states = _Tracked()
    topic_ids = _Tracked()
    names_by_id = _Tracked()
    brokers = _Tracked()
    cluster_id = _Tracked()
    controller_id = _Tracked()

    def __init__(self):
        self.changes = 0
        self.partitions: dict[str, int] = {}
        self.replicas: dict[str, dict[int, list[int]]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.names_by_id: dict[uuid.UUID, str] = {}  # the same, the other way (topics that have an id)
        self.brokers: dict[int, Broker] = {}
        self.cluster_id: str | None = None  # the Kafka cluster's, where known: clients check it
        self.controller_id: int | None = None  # the cluster's controller broker, where known
        self.api_versions: dict[int, tuple[int, int]] = {}  # api key -> the brokers' range, where asked
        self.learned_at = -math.inf  # trio time the view was last known complete and current
        self._subscribers: list[trio.MemorySendChannel] = []

    def subscribe(self) -> trio.MemoryReceiveChannel:
        """A channel of TopicChange."""
        send, receive = trio.open_memory_channel(math.inf)
        self._subscribers.append(send)
        return receive

    def want(self, topic: str) -> None:
        """A member subscribes to `topic`, which is not known: learn of it soon. A source that
        is told of every change as it happens has nothing to do."""

    def age(self) -> float:
        """Seconds since the view was last known current (inf: never)."""
        return trio.current_time() - self.learned_at

    async def partition_counts(self, topics: set[str], timeout: float) -> dict[str, int] | None:
        """How many partitions each of `topics` has (0: no such topic), as the source says
        after this call began, not as the view last heard it: a topic created a moment ago
        counts. None when the source cannot say within `timeout` seconds (never read, or
        unreachable). A view without a source answers from itself while it is current."""
        if self.age() > 0:
            return None
        return {topic: self.partitions.get(topic, 0) for topic in topics}

    def _set_topic(self, name: str, replicas: dict[int, list[int]], topic_id: uuid.UUID) -> None:
        """A topic as the source now reads it: kept, and its change announced."""
        old = self.partitions.get(name)
        known_id = self.topic_ids.get(name, NO_TOPIC_ID)
        recreated = old is not None and NO_TOPIC_ID not in (known_id, topic_id) and known_id != topic_id
        if recreated:
            self._forget(name, announce=False)
            old = None
        new = len(replicas)
        for p in range(new, old or 0):  # Kafka never shrinks a topic; a rewritten znode might
            self.states.pop((name, p), None)
        self.partitions[name] = new
        self.replicas[name] = replicas
        self.topic_ids[name] = topic_id
        if topic_id != NO_TOPIC_ID:
            self.names_by_id[topic_id] = name
        if recreated:
            self._announce(TopicChange(name, 0, new, recreated=True))
        elif new > (old or 0):
            self._announce(TopicChange(name, old or 0, new))

    def _forget(self, name: str, announce: bool = True) -> None:
        """A topic that is gone."""
        old = self.partitions.pop(name, None)
        for p in range(old or 0):
            self.states.pop((name, p), None)
        self.replicas.pop(name, None)
        if (topic_id := self.topic_ids.pop(name, None)) is not None:
            self.names_by_id.pop(topic_id, None)
        if announce and old:
            self._announce(TopicChange(name, old, 0))

    def _announce(self, change: TopicChange) -> None:
        for channel in self._subscribers:
            channel.send_nowait(change)
