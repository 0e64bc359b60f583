"""Kafka's broker and topic registry in ZooKeeper, in Kafka's own layout.

`/brokers/topics/<topic>` holds `{"version":1,"partitions":{"0":[1,2],...}}` (replica
lists by partition), `/brokers/topics/<topic>/partitions/<p>/state` the leader and ISR
where brokers write them, `/brokers/ids/<id>` each live broker's host and port.
`TopicRegistry` keeps an up-to-date view through watches and tells subscribers about
created topics and partition-count increases as soon as ZooKeeper fires the watch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import trio
from kazoo.exceptions import NoNodeError
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
    """Partition counts of every topic, kept current by ZooKeeper watches."""

    def __init__(self, zk: ZooKeeperBridge):
        self.zk = zk
        self.partitions: dict[str, int] = {}
        self._subscribers: list[trio.MemorySendChannel] = []
        self._events, self._events_out = trio.open_memory_channel(math.inf)
        self._token: trio.lowlevel.TrioToken | None = None

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
        await self._refresh_topics(reread=False)
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_session, states)
            while True:
                event = await self._events_out.receive()
                if event.path is None:  # a session event: _follow_session re-reads on reconnect
                    continue
                if event.path == layout.BROKER_TOPICS:
                    await self._refresh_topics(reread=False)
                elif event.type == EventType.DELETED:
                    self.partitions.pop(event.path.rsplit("/", 1)[1], None)
                else:
                    await self._read_topic(event.path.rsplit("/", 1)[1])

    async def _follow_session(self, states: trio.MemoryReceiveChannel) -> None:
        """A new session (after LOST) has no watches: read everything again, re-arming them."""
        lost = False
        async for state in states:
            if state == KazooState.LOST:
                lost = True
            elif state == KazooState.CONNECTED and lost:
                lost = False
                await self._refresh_topics(reread=True)

    async def _refresh_topics(self, reread: bool) -> None:
        names = set(await self.zk.get_children(layout.BROKER_TOPICS, watch=self._watch))
        for gone in set(self.partitions) - names:
            del self.partitions[gone]
        for name in names if reread else names - set(self.partitions):
            await self._read_topic(name)

    async def _read_topic(self, name: str) -> None:
        try:
            data, _ = await self.zk.get(f"{layout.BROKER_TOPICS}/{name}", watch=self._watch)
        except NoNodeError:
            self.partitions.pop(name, None)
            return
        old, new = self.partitions.get(name, 0), len(parse_topic(data))
        self.partitions[name] = new
        if new > old:
            change = TopicChange(name, old, new)
            for channel in self._subscribers:
                channel.send_nowait(change)
