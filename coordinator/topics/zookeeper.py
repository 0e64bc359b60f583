"""The topic source beside ZooKeeper-mode Kafka (3.9 and older): Kafka's registry in ZooKeeper.

`/brokers/topics/<topic>` holds `{"version":3,"partitions":{"0":[1,2],...},"topic_id":...}`
(replica lists by partition; the topic id since Kafka 2.8, absent before),
`/brokers/topics/<topic>/partitions/<p>/state` the leader and ISR where brokers write them,
`/brokers/ids/<id>` each live broker's host and port. `ZooKeeperTopics` keeps its view of
all three current through watches, and announces a change as soon as ZooKeeper fires the
watch.
"""

from __future__ import annotations

import json
import math
import uuid

import trio
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, KazooState
from kazoo.security import OPEN_ACL_UNSAFE

from ..store import layout
from ..store.bridge import ZooKeeperBridge
from ..store.multiread import GET
from .view import NO_TOPIC_ID, Broker, PartitionState, TopicView, parse_topic_id, topic_id_text


LEGAL_TOPIC_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def legal_topic_name(name: str) -> bool:
    """Whether Kafka would create a topic of this name (its `Topic.validate`)."""
    return 0 < len(name) <= 249 and name not in (".", "..") and set(name) <= LEGAL_TOPIC_CHARACTERS


def parse_state(data: bytes) -> PartitionState | None:
    """Kafka's `{"leader":1,"leader_epoch":0,"isr":[1,2],...}`; unreadable counts as absent."""
    try:
        state = json.loads(data.decode())
        return PartitionState(int(state["leader"]), tuple(int(r) for r in state.get("isr", [])),
                              int(state.get("leader_epoch", -1)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def topic_data(replicas: dict[int, list[int]], topic_id: uuid.UUID) -> bytes:
    """A topic's znode as Kafka 2.8 and later write it."""
    return json.dumps({"version": 3, "topic_id": topic_id_text(topic_id),
                       "partitions": {str(p): r for p, r in sorted(replicas.items())},
                       "adding_replicas": {}, "removing_replicas": {}}, separators=(",", ":")).encode()


def parse_topic(data: bytes) -> tuple[dict[int, list[int]], uuid.UUID]:
    """Replica lists by partition, and the topic id (NO_TOPIC_ID before Kafka 2.8 wrote
    one); an unreadable znode counts as no partitions."""
    try:
        topic = json.loads(data.decode())
        replicas = {int(p): list(r) for p, r in topic["partitions"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}, NO_TOPIC_ID
    try:
        return replicas, parse_topic_id(topic["topic_id"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return replicas, NO_TOPIC_ID


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


class ZooKeeperTopics(TopicView):
    """The view kept current by ZooKeeper watches."""

    def __init__(self, zk: ZooKeeperBridge):
        super().__init__()
        self.zk = zk
        self._events, self._events_out = trio.open_memory_channel(math.inf)
        self._token: trio.lowlevel.TrioToken | None = None
        self._stale = False  # a read failed or the session was lost: read all again on reconnection
        self._connected = False  # the session is up: watches fire

    def _watch(self, event) -> None:
        """On a kazoo thread: only hand the event to trio."""
        try:
            self._token.run_sync_soon(self._events.send_nowait, event)
        except trio.RunFinishedError:
            pass

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._token = trio.lowlevel.current_trio_token()
        states = self.zk.subscribe_states()
        await self.zk.ensure_path(layout.BROKER_TOPICS, acl=OPEN_ACL_UNSAFE)  # Kafka's: its brokers write there
        await self._refresh_brokers(reread=False)
        await self._refresh_topics(reread=False)
        await self._read_cluster(layout.KAFKA_CLUSTER_ID)
        await self._read_cluster(layout.KAFKA_CONTROLLER)
        self._connected = True
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
                    self.learned_at = trio.current_time()

    def age(self) -> float:
        """0 while the session is up and every watch set: each change is read as it happens."""
        if self._connected and not self._stale:
            return 0.0
        return super().age()

    async def partition_counts(self, topics: set[str], timeout: float) -> dict[str, int] | None:
        """Read from Kafka's registry now, in one request, not from the view: a topic a
        broker registered a moment ago may not have reached the view through its watch yet.
        A name Kafka would not take cannot be registered, and is not asked for."""
        names = sorted(t for t in topics if legal_topic_name(t))
        counts = dict.fromkeys(topics, 0)
        if not names:
            return counts
        with trio.move_on_after(timeout):
            try:
                answers = await self.zk.read_many([(GET, f"{layout.BROKER_TOPICS}/{name}") for name in names])
            except KazooException:
                return None
            for name, answer in zip(names, answers):
                if isinstance(answer, NoNodeError):
                    continue
                if isinstance(answer, Exception):
                    return None
                counts[name] = len(parse_topic(answer[0])[0])
            return counts
        return None

    async def _changed(self, event) -> None:
        path = event.path
        if path == layout.BROKER_TOPICS:
            await self._refresh_topics(reread=False)
        elif path == layout.BROKER_IDS:
            await self._refresh_brokers(reread=False)
        elif path in (layout.KAFKA_CLUSTER_ID, layout.KAFKA_CONTROLLER):
            await self._read_cluster(path)
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
            if state != KazooState.CONNECTED:
                if self.age() == 0.0:
                    self.learned_at = trio.current_time()  # current until now
                self._connected = False
                self._stale = self._stale or state == KazooState.LOST
                continue
            self._connected = True
            if self._stale:
                try:
                    await self._refresh_brokers(reread=True)
                    await self._refresh_topics(reread=True)
                    await self._read_cluster(layout.KAFKA_CLUSTER_ID)
                    await self._read_cluster(layout.KAFKA_CONTROLLER)
                    self._stale = False
                except* KazooException:
                    pass

    async def _refresh_topics(self, reread: bool) -> None:
        names = set(await self.zk.get_children(layout.BROKER_TOPICS, watch=self._watch))
        for gone in set(self.partitions) - names:
            self._forget(gone)
        for name in names if reread else names - set(self.partitions):
            await self._read_topic(name, reread)

    async def _read_topic(self, name: str, reread: bool) -> None:
        try:
            data, _ = await self.zk.get(f"{layout.BROKER_TOPICS}/{name}", watch=self._watch)
        except NoNodeError:
            self._forget(name)
            return
        replicas, topic_id = parse_topic(data)
        old, known_id = self.partitions.get(name, 0), self.topic_ids.get(name)
        self._set_topic(name, replicas, topic_id)  # before the leaders: groups need the count, not who leads
        first = 0 if reread or known_id != topic_id else old  # a new topic's leaders, or the new partitions'
        async with trio.open_nursery() as nursery:  # one round trip for all, not one each
            for p in range(first, self.partitions[name]):
                nursery.start_soon(self._read_state, name, p)

    async def _read_state(self, name: str, partition: int) -> None:
        """The partition's leader where a broker wrote one."""
        data = await self.zk.watched_data(layout.partition_state_path(name, partition), self._watch)
        state = None if data is None else parse_state(data)
        if state is None:
            self.states.pop((name, partition), None)
        else:
            self.states[(name, partition)] = state

    async def _read_cluster(self, path: str) -> None:
        """The cluster id or the controller: the controller moves, and both may be written
        by the first broker after us."""
        data, value = await self.zk.watched_data(path, self._watch), None
        if data is not None:
            try:
                read = json.loads(data.decode())
                value = str(read["id"]) if path == layout.KAFKA_CLUSTER_ID else int(read["brokerid"])
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
        if path == layout.KAFKA_CLUSTER_ID:
            self.cluster_id = value
        else:
            self.controller_id = value

    async def _refresh_brokers(self, reread: bool) -> None:
        children = await self.zk.watched_children(layout.BROKER_IDS, self._watch)
        if children is None:  # no broker has registered yet: watched for the first
            self.brokers.clear()
            return
        ids = set(children)
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
