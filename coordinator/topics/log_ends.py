"""Where each partition's log ends, as last seen: what consumer lag is measured against.

`LogEnds` keeps, per (topic, partition), the last end offset seen and when. It is fed two
ways:

- passively, through the gateway: every Fetch answer it relays carries each partition's
  high watermark, read as the answer passes (`protocol.fetch_stream.FetchWalk`), at no cost
  of requests: the partitions consumers read are always current;
- actively, by `LogEndPoller`: ListOffsets ("latest") to the partitions' leaders, for the
  partitions that groups here have committed offsets for and whose end was not seen within
  `interval` (a stopped consumer fetches nothing: its lag is exactly what must still be
  measured), at most `per_second` requests a second, each for up to `PER_REQUEST`
  partitions of one leader.

The high watermark is what Kafka's own lag (kafka-consumer-groups.sh, kafka_exporter) is
measured against for read_uncommitted consumers; ListOffsets "latest" answers the same.

Bounded: at most `max_partitions` entries (a new partition past it is not kept, and
counted); entries of partitions no one asked about again are dropped after `forget_after`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable

import structlog
import trio

from protocol import ErrorCode
from protocol.schemas import LIST_OFFSETS

from .. import metrics
from .brokers import NodeConnections, Security
from .view import TopicView

Key = tuple[str, int]
PER_REQUEST = 1000  # partitions asked of a leader in one ListOffsets
LATEST = -1  # ListOffsets' timestamp for the log's end
LIST_OFFSETS_VERSIONS = (1, 7)  # v1: one offset a partition; what every broker of 2026 speaks


class LogEnds:
    def __init__(self, max_partitions: int = 1_000_000):
        self.max_partitions = max_partitions
        self.ends: dict[Key, tuple[int, float]] = {}  # (topic, partition) -> (end offset, trio time seen)
        self.refused = 0  # partitions not kept: the table was full

    def seen(self, topic: str, partition: int, offset: int, now: float) -> None:
        if offset < 0:  # an error's -1: nothing learned
            return
        key = (topic, partition)
        if key not in self.ends and len(self.ends) >= self.max_partitions:
            self.refused += 1
            return
        self.ends[key] = (offset, now)

    def get(self, topic: str, partition: int) -> tuple[int, float] | None:
        return self.ends.get((topic, partition))

    def stale(self, keys: Iterable[Key], older_than: float, now: float) -> list[Key]:
        """Of `keys`, those whose end is unknown or was seen more than `older_than` ago."""
        out = []
        for key in keys:
            entry = self.ends.get(key)
            if entry is None or now - entry[1] >= older_than:
                out.append(key)
        return out

    def forget_unseen(self, before: float) -> int:
        """Drop entries last seen before `before` (partitions nobody reads or commits any
        more, deleted topics); how many."""
        old = [key for key, (_, at) in self.ends.items() if at < before]
        for key in old:
            del self.ends[key]
        return len(old)


class LogEndPoller:
    """Asks the leaders for the ends that passive reading leaves stale (see the module)."""

    def __init__(self, ends: LogEnds, view: TopicView, wanted: Callable[[], Iterable[Key]], interval: float,
                 per_second: float, security: Security | None = None, timeout: float = 10.0):
        self.ends = ends
        self.view = view
        self.wanted = wanted  # the partitions groups here have committed offsets for
        self.interval = interval
        self.per_second = per_second
        self.security = security
        self.timeout = timeout
        self.log = structlog.get_logger("groupkeeper.lag")
        self._nodes = NodeConnections(view, security)
        self._failing: set[int] = set()  # leaders whose last request failed (logged once)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while True:
                await self.round()
                self.ends.forget_unseen(trio.current_time() - 10 * self.interval)
                await trio.sleep(self.interval / 2)
        finally:
            self._nodes.close()

    async def wanted_now(self) -> set[Key]:
        """What `wanted` gives; a stepped computation (`cluster.lag.committed_partitions_in_steps`:
        it reads every group's offsets, 10 ms at 10,000 groups of 6 partitions) is driven with
        the loop run at each of its steps."""
        steps = metrics.stepped(self.wanted())
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return set(done.value)
            await trio.lowlevel.checkpoint()

    def requests(self, now: float, wanted: set[Key] | None = None) -> list[tuple[int, list[Key]]]:
        """(leader, partitions) to ask of `wanted` (what `wanted()` gives, read in one piece if
        not given), the stale partitions grouped by leader in requests of up to PER_REQUEST;
        partitions without a known leader wait for one."""
        if wanted is None:
            wanted = metrics.run_through(metrics.stepped(self.wanted()))
        by_leader: dict[int, list[Key]] = defaultdict(list)
        for key in self.ends.stale(set(wanted), self.interval, now):
            state = self.view.states.get(key)
            if state is not None and state.leader in self.view.brokers:
                by_leader[state.leader].append(key)
        out = []
        for leader, keys in sorted(by_leader.items()):
            keys.sort()
            out += [(leader, keys[i:i + PER_REQUEST]) for i in range(0, len(keys), PER_REQUEST)]
        return out

    async def round(self) -> None:
        pace = 1 / self.per_second if self.per_second > 0 and not math.isinf(self.per_second) else 0
        wanted = await self.wanted_now()
        for leader, keys in self.requests(trio.current_time(), wanted):
            try:
                with trio.fail_after(self.timeout):
                    await self._ask(leader, keys)
            except Exception as exc:  # noqa: BLE001 - any failure of one leader: the others go on
                metrics.LAG_LIST_OFFSETS.labels("failed").inc()
                if leader not in self._failing:
                    self._failing.add(leader)
                    self.log.warning("cannot ask a leader where its partitions end: their lag waits",
                                     broker=leader, error=f"{type(exc).__name__}: {exc}")
            else:
                metrics.LAG_LIST_OFFSETS.labels("ok").inc()
                self._failing.discard(leader)
            if pace:
                await trio.sleep(pace)

    async def _ask(self, leader: int, keys: list[Key]) -> None:
        topics: dict[str, list[int]] = defaultdict(list)
        for topic, partition in keys:
            topics[topic].append(partition)
        answer = await self._nodes.call(leader, LIST_OFFSETS, LIST_OFFSETS_VERSIONS, {
            "replica_id": -1, "isolation_level": 0, "timeout_ms": int(self.timeout * 1000),
            "topics": [{"name": t, "partitions": [{"partition_index": p, "timestamp": LATEST} for p in ps]}
                       for t, ps in sorted(topics.items())]})
        now = trio.current_time()
        for topic in answer.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE:
                    self.ends.seen(topic.name, p.partition_index, p.offset, now)
