"""Kafka's broker and topic registry in ZooKeeper, in Kafka's own layout.

`/brokers/topics/<topic>` holds `{"version":1,"partitions":{"0":[1,2],...}}` (replica
lists by partition), `/brokers/topics/<topic>/partitions/<p>/state` the leader and ISR
where brokers write them, `/brokers/ids/<id>` each live broker's host and port.
`TopicRegistry` keeps an up-to-date view of all three through watches (Metadata answers
from it) and tells subscribers about created topics and partition-count increases as soon
as ZooKeeper fires the watch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import trio
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, KazooState

from . import layout
from .bridge import ZooKeeperBridge


@dataclass(frozen=True)
class Broker:
    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class TopicChange:
    topic: str
    old_partitions: int  # 0 for a topic just created
    new_partitions: int


@dataclass(frozen=True)
class PartitionState:
    leader: int
    isr: tuple[int, ...]
    leader_epoch: int


def parse_state(data: bytes) -> PartitionState | None:
    """Kafka's `{"leader":1,"leader_epoch":0,"isr":[1,2],...}`; unreadable counts as absent."""
    try:
        state = json.loads(data.decode())
        return PartitionState(int(state["leader"]), tuple(int(r) for r in state.get("isr", [])),
                              int(state.get("leader_epoch", -1)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def topic_data(replicas: dict[int, list[int]]) -> bytes:
    return json.dumps({"version": 1, "partitions": {str(p): r for p, r in sorted(replicas.items())}},
                      separators=(",", ":")).encode()


def parse_topic(data: bytes) -> dict[int, list[int]]:
    """Replica lists by partition; an unreadable znode counts as no partitions."""
    try:
        partitions = json.loads(data.decode())["partitions"]
        return {int(p): list(r) for p, r in partitions.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def parse_broker(broker_id: str, data: bytes) -> Broker | None:
    try:
        info = json.loads(data.decode())
        host, port = info.get("host"), info.get("port")
        if not host or port in (None, -1):  # newer brokers list endpoints only
            endpoint = info["endpoints"][0]  # "PLAINTEXT://host:port"
            host, port = endpoint.split("://", 1)[1].rsplit(":", 1)
        return Broker(int(broker_id), host.strip("[]"), int(port), info.get("rack"))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


class TopicRegistry:
    """Topics (partition counts and replicas), partition leaders and live brokers, kept
    current by ZooKeeper watches."""

    def __init__(self, zk: ZooKeeperBridge):
        self.zk = zk
        self.partitions: dict[str, int] = {}
        self.replicas: dict[str, dict[int, list[int]]] = {}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.brokers: dict[int, Broker] = {}
        self._subscribers: list[trio.MemorySendChannel] = []
        self._events, self._events_out = trio.open_memory_channel(math.inf)
        self._token: trio.lowlevel.TrioToken | None = None
        self._stale = False  # a read failed or the session was lost: read all again on reconnection

    def subscribe(self) -> trio.MemoryReceiveChannel:
        """A channel of TopicChange: created topics and partition-count increases."""
        send, receive = trio.open_memory_channel(math.inf)
        self._subscribers.append(send)
        return receive

    def _watch(self, event) -> None:
        """On a kazoo thread: only hand the event to trio."""
        try:
            self._token.run_sync_soon(self._events.send_nowait, event)
        except trio.RunFinishedError:
            pass

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        states = self.zk.subscribe_states()
        await self.zk.ensure_path(layout.BROKER_TOPICS)
        await self._refresh_brokers(reread=False)
        await self._refresh_topics(reread=False)
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_session, states)
            while True:
                event = await self._events_out.receive()
                if event.path is None:  # a session event: _follow_session re-reads on reconnect
                    continue
                try:
                    await self._changed(event)
                except* KazooException:  # disconnected mid-read: all is read again once reconnected
                    self._stale = True

    async def _changed(self, event) -> None:
        path = event.path
        if path == layout.BROKER_TOPICS:
            await self._refresh_topics(reread=False)
        elif path == layout.BROKER_IDS:
            await self._refresh_brokers(reread=False)
        elif path.startswith(layout.BROKER_IDS + "/"):
            await self._read_broker(path.rsplit("/", 1)[1])
        elif path.startswith(layout.BROKER_TOPICS + "/"):
            name, *rest = path[len(layout.BROKER_TOPICS) + 1:].split("/")
            if rest:  # partitions/<p>/state, watched while the topic exists
                if len(rest) == 3 and rest[1].isdigit() and int(rest[1]) < self.partitions.get(name, 0):
                    await self._read_state(name, int(rest[1]))
            elif event.type == EventType.DELETED:
                self._forget(name)
            else:
                await self._read_topic(name, reread=False)

    async def _follow_session(self, states: trio.MemoryReceiveChannel) -> None:
        """Read everything again, re-arming the watches, after a new session (it has none) or
        a read cut short by a disconnection; again after the next reconnection if this one
        is cut short too."""
        async for state in states:
            if state == KazooState.LOST:
                self._stale = True
            elif state == KazooState.CONNECTED and self._stale:
                self._stale = False
                try:
                    await self._refresh_brokers(reread=True)
                    await self._refresh_topics(reread=True)
                except* KazooException:
                    self._stale = True

    async def _refresh_topics(self, reread: bool) -> None:
        names = set(await self.zk.get_children(layout.BROKER_TOPICS, watch=self._watch))
        for gone in set(self.partitions) - names:
            self._forget(gone)
        for name in names if reread else names - set(self.partitions):
            await self._read_topic(name, reread)

    def _forget(self, name: str) -> None:
        for p in range(self.partitions.pop(name, 0)):
            self.states.pop((name, p), None)
        self.replicas.pop(name, None)

    async def _read_topic(self, name: str, reread: bool) -> None:
        try:
            data, _ = await self.zk.get(f"{layout.BROKER_TOPICS}/{name}", watch=self._watch)
        except NoNodeError:
            self._forget(name)
            return
        replicas = parse_topic(data)
        old, new = self.partitions.get(name, 0), len(replicas)
        for p in range(new, old):  # Kafka never shrinks a topic; a rewritten znode might
            self.states.pop((name, p), None)
        self.partitions[name] = new
        self.replicas[name] = replicas
        if new > old:  # before the leaders: groups need the count, not who leads
            change = TopicChange(name, old, new)
            for channel in self._subscribers:
                channel.send_nowait(change)
        async with trio.open_nursery() as nursery:  # one round trip for all, not one each
            for p in range(0 if reread else old, new):
                nursery.start_soon(self._read_state, name, p)

    async def _read_state(self, name: str, partition: int) -> None:
        """The partition's leader where a broker wrote one; watched either way, so that a
        state written later (or changed, or deleted) is read when it happens."""
        path = layout.partition_state_path(name, partition)
        while True:
            try:
                data, _ = await self.zk.get(path, watch=self._watch)
                break
            except NoNodeError:
                self.states.pop((name, partition), None)
                if await self.zk.exists(path, watch=self._watch) is None:
                    return
        state = parse_state(data)
        if state is None:
            self.states.pop((name, partition), None)
        else:
            self.states[(name, partition)] = state

    async def _refresh_brokers(self, reread: bool) -> None:
        while True:
            try:
                ids = set(await self.zk.get_children(layout.BROKER_IDS, watch=self._watch))
                break
            except NoNodeError:  # no broker has registered yet: watch for the first
                self.brokers.clear()
                if await self.zk.exists(layout.BROKER_IDS, watch=self._watch) is None:
                    return
        for gone in {str(b) for b in self.brokers} - ids:
            self.brokers.pop(int(gone), None)
        for broker_id in ids if reread else ids - {str(b) for b in self.brokers}:
            await self._read_broker(broker_id)

    async def _read_broker(self, broker_id: str) -> None:
        try:
            data, _ = await self.zk.get(f"{layout.BROKER_IDS}/{broker_id}", watch=self._watch)
        except NoNodeError:
            data = None
        broker = None if data is None else parse_broker(broker_id, data)
        if broker is not None:
            self.brokers[broker.id] = broker
        elif broker_id.isdigit():
            self.brokers.pop(int(broker_id), None)
