"""Where the brokers write a transaction's end for a group: how the owner of pending
transactional offsets learns an outcome the gateway did not see (the producer died after
sending EndTxn, or before; the transaction coordinator aborted on its timeout; the gateway
that relayed EndTxn died before recording it).

Kafka's transaction coordinator, given AddOffsetsToTxn for a group (transaction version
1, the flow clients use through the gateway: docs/architecture.md, "Transaction version
2"), adds that group's partition of `__consumer_offsets` to the transaction: partition
`abs(hash(group)) % partitions`, Java's String.hashCode. When the transaction ends it
writes a control batch there, COMMIT or ABORT, with the producer's id and epoch (an abort
on a timeout or a fence carries the epoch it bumped to, a later one). So the outcome of a
transaction whose offsets are pending here is the first control batch of its producer id at
its epoch or a later one in that partition after the log's end when its offsets were first
taken (`log_end`): an earlier transaction's markers were all written before the next one's
AddOffsetsToTxn was accepted, which comes before its TxnOffsetCommit. Markers are read with
Fetch (read_uncommitted: up to the high watermark), only batch headers
(`protocol.record_batches`).

DescribeTransactions (KIP-664) is no substitute: it tells a transactional id's current
state, not how an earlier transaction of the same epoch ended.

The brokers skip the markers of a partition that does not exist, and `__consumer_offsets`
exists only once a client asked a broker for a group's coordinator, which through the
gateway none does: so the reader asks one broker FindCoordinator for a group when it starts
and whenever the topic is seen missing, which has Kafka create it (at most every
`ENSURE_INTERVAL`).
Brokers without it (Tansu) cannot say: the pending offsets wait for a recorded end,
reported (`ownership`).

With TLS or SASL to the brokers, groupkeeper's own principal needs Describe and Read on
`__consumer_offsets` (Read on the topic for Fetch and ListOffsets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import structlog
import trio

from protocol import DecodeError, ErrorCode
from protocol.record_batches import ABORT, COMMIT, batch_headers
from protocol.schemas import FETCH, FIND_COORDINATOR, LIST_OFFSETS

from .brokers import NodeConnections, Security
from .view import TopicView

OFFSETS_TOPIC = "__consumer_offsets"
LATEST = -1
FETCH_VERSIONS = (4, 12)  # v4: isolation level; v12: the last that names topics
LIST_OFFSETS_VERSIONS = (1, 7)
FIND_COORDINATOR_VERSIONS = (1, 4)
FETCH_BYTES = 1024 * 1024  # asked per Fetch
SCAN_BYTES = 16 * 1024 * 1024  # read at most per `find`, then left for the next
ENSURE_INTERVAL = 60.0  # seconds between two requests that have the brokers create the topic


def java_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, in 32-bit two's complement."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int) -> int:
    """The group's partition of __consumer_offsets (Kafka's Utils.abs: the least int is 0)."""
    h = java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True)
class Scan:
    outcome: str | None  # "committed", "aborted", or None: no end found yet
    next_offset: int  # where the next look starts (past every batch read)
    gone: bool = False  # the log no longer holds `from`: the end can no longer be read


class Unavailable(Exception):
    """The partition cannot be read now (no such topic yet, no leader, the broker refused)."""


class MarkerReader:
    """Reads transactions' ends from the brokers (see the module's docstring)."""

    def __init__(self, view: TopicView, security: Security | None = None, timeout: float = 5.0):
        self.view = view
        self.timeout = timeout
        self.nodes = NodeConnections(view, security)
        self.log = structlog.get_logger("groupkeeper.transactions")
        self._ensured_at = -math.inf
        self._nursery: trio.Nursery | None = None

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while not self.view.brokers:  # once the brokers are known: the topic, before any transaction
                    await trio.sleep(0.5)
                self.partition_of("")
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self.nodes.close()

    def partition_of(self, group: str) -> int | None:
        """The group's partition of __consumer_offsets; None while the topic is not known (it
        is then asked for)."""
        count = self.view.partitions.get(OFFSETS_TOPIC, 0)
        if not count:
            self._ensure_topic()
            return None
        return offsets_partition(group, count)

    def _leader(self, partition: int) -> int:
        state = self.view.states.get((OFFSETS_TOPIC, partition))
        if state is None or state.leader not in self.view.brokers:
            self.view.want(OFFSETS_TOPIC)
            raise Unavailable(f"{OFFSETS_TOPIC}-{partition} has no known leader")
        return state.leader

    async def log_end(self, group: str) -> int:
        """Where the group's partition of __consumer_offsets ends now; -1 when that cannot
        be learned within the timeout (a transaction whose offsets start there can then be
        resolved only by its recorded end)."""
        partition = self.partition_of(group)
        if partition is None:
            return -1
        try:
            with trio.fail_after(self.timeout):
                leader = self._leader(partition)
                answer = await self.nodes.call(leader, LIST_OFFSETS, LIST_OFFSETS_VERSIONS, {
                    "replica_id": -1, "isolation_level": 0, "timeout_ms": int(self.timeout * 1000),
                    "topics": [{"name": OFFSETS_TOPIC, "partitions": [
                        {"partition_index": partition, "timestamp": LATEST}]}]})
        except Exception as exc:  # noqa: BLE001 - any failure: not known, said so
            self.log.warning("cannot learn where a group's transaction markers will be written",
                             group=group, partition=partition, error=f"{type(exc).__name__}: {exc}")
            return -1
        for topic in answer.topics:
            for p in topic.partitions:
                if p.partition_index == partition and p.error_code == ErrorCode.NONE and p.offset >= 0:
                    return p.offset
                if p.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    self.view.want(OFFSETS_TOPIC)
        return -1

    async def find(self, group: str, producer_id: int, producer_epoch: int, start: int,
                   budget: int = SCAN_BYTES) -> Scan:
        """The end of the transaction (`producer_id`, `producer_epoch`) among the markers of
        the group's partition from offset `start` (see the module's docstring); reads at most
        `budget` bytes. Raises Unavailable when the partition cannot be read now."""
        partition = self.partition_of(group)
        if partition is None:
            raise Unavailable(f"{OFFSETS_TOPIC} is not known")
        position, read = start, 0
        while read < budget:
            with trio.fail_after(self.timeout):
                leader = self._leader(partition)
                try:
                    answer = await self.nodes.call(leader, FETCH, FETCH_VERSIONS, {
                        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": FETCH_BYTES,
                        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                        "topics": [{"topic": OFFSETS_TOPIC, "partitions": [
                            {"partition": partition, "fetch_offset": position, "partition_max_bytes": FETCH_BYTES}]}],
                        "forgotten_topics_data": [], "rack_id": ""})
                except (OSError, trio.BrokenResourceError, DecodeError) as exc:
                    raise Unavailable(f"{type(exc).__name__}: {exc}") from None
            data = _partition_data(answer, partition)
            if data is None:
                raise Unavailable("the broker's answer does not hold the partition")
            if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                return Scan(None, position, gone=True)
            if data.error_code != ErrorCode.NONE:
                if data.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                       ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH):
                    self.view.want(OFFSETS_TOPIC)
                raise Unavailable(f"Fetch error {ErrorCode(data.error_code).name}")
            records = data.records or b""
            read += len(records)
            advanced = False
            for batch in batch_headers(records):
                if batch.last_offset < position:
                    continue  # a batch that began before the offset asked (the broker sends it whole)
                if (batch.control_type in (COMMIT, ABORT) and batch.producer_id == producer_id
                        and batch.producer_epoch >= producer_epoch):
                    return Scan("committed" if batch.control_type == COMMIT else "aborted", batch.next_offset)
                position, advanced = batch.next_offset, True
            if not advanced or position >= data.high_watermark:
                break
        return Scan(None, position)

    def _ensure_topic(self) -> None:
        """Has a broker create __consumer_offsets (FindCoordinator for a group), at most every
        ENSURE_INTERVAL, in the background."""
        now = trio.current_time()
        if self._nursery is None or now - self._ensured_at < ENSURE_INTERVAL or not self.view.brokers:
            return
        self._ensured_at = now
        self._nursery.start_soon(self._ask_for_topic)

    async def _ask_for_topic(self) -> None:
        node = min(self.view.brokers)
        try:
            with trio.fail_after(self.timeout):
                await self.nodes.call(node, FIND_COORDINATOR, FIND_COORDINATOR_VERSIONS, {
                    "key": "groupkeeper", "key_type": 0, "coordinator_keys": ["groupkeeper"]})
        except Exception as exc:  # noqa: BLE001 - tried again after ENSURE_INTERVAL
            self.log.warning("cannot have the brokers create their offsets topic: transactions whose end is not "
                             "recorded stay pending", topic=OFFSETS_TOPIC, error=f"{type(exc).__name__}: {exc}")
            return
        self.log.info("asked the brokers for a group coordinator, so that they create their offsets topic, where "
                      "transactions' ends are written", topic=OFFSETS_TOPIC, broker=node)
        self.view.want(OFFSETS_TOPIC)


def _partition_data(answer, partition: int):
    for topic in answer.responses:
        for p in topic.partitions:
            if p.partition_index == partition:
                return p
    return None
