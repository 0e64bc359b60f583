"""Prometheus metrics (served by `serving.metrics_http`).

The metrics live in one registry of their own (not prometheus-client's global one), are
named `groupkeeper_*` and carry no per-member labels; only `groupkeeper_group_members` has
per-group series, for a configured number of the largest groups, so a coordinator with
thousands of groups exports a bounded number of series. Gauges that describe the groups
are read from the coordinator when scraped, never kept up to date on the request path.
docs/metrics.md describes each metric.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Generator, Iterable
from itertools import accumulate
from operator import attrgetter
from time import perf_counter
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from protocol import ErrorCode
from protocol.schema import Array, Struct
from protocol.schemas import APIS


# `_created` samples would reach Prometheus's text format as extra gauges, one per series
disable_created_metrics()


class Registry(CollectorRegistry):
    """A registry that keeps its collectors in order (`collectors`), so that /metrics may be
    made a collector at a time with the serving loop run between them
    (`serving.metrics_http.exposition`); `collect()` is prometheus-client's own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.collectors: list = []

    def register(self, collector) -> None:
        super().register(collector)
        self.collectors.append(collector)

    def unregister(self, collector) -> None:
        super().unregister(collector)
        self.collectors.remove(collector)


REGISTRY = Registry(auto_describe=True)

# -- work per scrape in steps ----------------------------------------------------------------
#
# What a scrape reads of the groups (their lag, their status by Burrow's rules) grows with
# them: at 10,000 groups of 6 partitions it held the serving loop 0.27-0.39 s in one piece
# (docs/benchmarks.md, "A scrape as the groups grow"). A collector may therefore also offer
# `collect_in_steps()`: a generator of its metric families with STEP between them wherever
# the loop may run (`serving.metrics_http.exposition` awaits a checkpoint there). What it
# reads across steps must stand the loop changing it meanwhile: a snapshot of a dict's items,
# never the live dict, and each group read whole within one step.

STEP = object()  # yielded by a stepped computation: the serving loop may run here
STEP_SECONDS = 0.001  # work between two steps
ROWS_PER_PACE = 256  # rows of plain data (a collector's own loops) between two looks at the clock


class Pace:
    """When a stepped computation has worked `seconds` since it last stepped (or began):
    `due()` is then True once, and the next `due()` begins the next stretch."""
    __slots__ = ("seconds", "until")

    def __init__(self, seconds: float = STEP_SECONDS):
        self.seconds = seconds
        self.until: float | None = None

    def due(self) -> bool:
        now = perf_counter()
        if self.until is None:
            self.until = now + self.seconds
            return False
        if now < self.until:
            return False
        self.until = None
        return True


Stepped = Generator[object, None, Any]  # STEP now and then, then its result (`return`)


def stepped(made) -> Stepped:
    """What a collector's source gave: its STEPs passed on and its result returned, if it is a
    stepped computation (a generator); a plain value as it is."""
    if isinstance(made, Generator):
        return (yield from made)
    return made


def run_through(steps: Stepped):
    """A stepped computation's result, without stepping (tests, a CLI)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


RANK_CHUNK = 1_000  # items ranked in one step (`smallest_in_steps`)
ROWS_FREED = 8_192  # rows a collector made freed in one step (CPython frees each as it goes)


def smallest_in_steps(n: int, items: list, key) -> Stepped:
    """`heapq.nsmallest(n, items, key=key)`, a chunk of RANK_CHUNK items a step: over every
    group in one call it took 2-6 ms at 10,000 groups."""
    best: list = []
    for start in range(0, len(items), RANK_CHUNK):
        best = heapq.nsmallest(n, best + items[start:start + RANK_CHUNK], key=key)
        yield STEP
    return best


class SteppedCollector:
    """A collector whose `collect_in_steps()` makes its families: `collect()` (what
    prometheus-client calls) is the same families, made without stepping."""

    def collect_in_steps(self):
        raise NotImplementedError

    def collect(self):
        return [made for made in self.collect_in_steps() if made is not STEP]

    def describe(self):
        return []


# Request latencies run from a heartbeat's fraction of a millisecond to a JoinGroup that
# waits for a whole rebalance (up to its rebalance timeout, minutes).
_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

CONNECTIONS = Gauge("groupkeeper_connections", "Open client connections.", registry=REGISTRY)
CONNECTIONS_CLOSED = Counter("groupkeeper_connections_closed_total",
                             "Client connections closed by the server for a bad frame or a limit.",
                             ["reason"], registry=REGISTRY)
CONNECTION_CHURN = Counter(
    "groupkeeper_connection_churn_total",
    "Client connections closed (by either side) within a burst: less than 10 s after the last close "
    "from the same address for the same reason (a client reconnecting in a loop). A burst costs one log line "
    "(and one a minute while it lasts), these none.", ["reason"], registry=REGISTRY)
ACCEPT_FAILURES = Counter("groupkeeper_accept_failures_total",
                          "accept() calls that failed for want of resources (file descriptors, memory), by errno; "
                          "the server backs off and goes on.", ["reason"], registry=REGISTRY)
AUTHENTICATIONS = Counter("groupkeeper_authentications_total",
                          "SASL authentications of Kafka clients, by mechanism and outcome (succeeded, failed).",
                          ["mechanism", "outcome"], registry=REGISTRY)
AUTHORIZATION_DENIALS = Counter("groupkeeper_authorization_denials_total",
                                "Requests (or parts of one) refused by the ACLs, by resource type and operation.",
                                ["resource_type", "operation"], registry=REGISTRY)
REBALANCES = Counter("groupkeeper_rebalances_total", "Rebalances completed, by what started them.",
                     ["reason"], registry=REGISTRY)
REBALANCE_SECONDS = Histogram(
    "groupkeeper_rebalance_duration_seconds", "From the start of a rebalance to its generation being formed.",
    buckets=_SECONDS, registry=REGISTRY)
SESSION_EXPIRATIONS = Counter("groupkeeper_session_expirations_total",
                              "Members removed because their session timed out.", registry=REGISTRY)
CONSUMER_GROUP_EPOCH_BUMPS = Counter(
    "groupkeeper_consumer_group_epoch_bumps_total",
    "Group epochs of consumer-protocol (KIP-848) groups bumped: their rebalances (a member "
    "joined, left or changed its subscription, or subscribed topics changed).", registry=REGISTRY)
GROUP_MIGRATIONS = Counter(
    "groupkeeper_group_migrations_total",
    "Groups converted between the protocols online: upgrade (classic to consumer) or downgrade.",
    ["direction"], registry=REGISTRY)
MEMBERS_REMOVED = Counter("groupkeeper_members_removed_total",
                          "Members removed from their group, by reason.", ["reason"], registry=REGISTRY)
GROUP_FULL_REFUSALS = Counter(
    "groupkeeper_group_full_refusals_total",
    "Members turned away with GROUP_MAX_SIZE_REACHED, by the limit their group was at "
    "(group_max_size, group_max_record_bytes).", ["limit"], registry=REGISTRY)
OFFSET_COMMITS = Counter("groupkeeper_offset_commits_total",
                         "OffsetCommit requests that were written (some partitions may have failed).",
                         registry=REGISTRY)
TXN_OFFSET_COMMITS = Counter("groupkeeper_txn_offset_commits_total",
                             "TxnOffsetCommit requests whose offsets were written, pending their transaction's "
                             "outcome.", registry=REGISTRY)
TXN_OUTCOMES = Counter("groupkeeper_transactions_resolved_total",
                       "Transactions whose pending offsets were resolved here, by outcome (committed, aborted).",
                       ["outcome"], registry=REGISTRY)
TXN_UNRESOLVED = Counter("groupkeeper_transactions_unresolved_total",
                         "Pending transactions found ended without a known outcome (a later epoch of their "
                         "producer began, no commit or abort recorded): kept pending, never guessed.",
                         registry=REGISTRY)
TXN_MARKER_READS = Counter("groupkeeper_transaction_marker_reads_total",
                           "Looks at the brokers' __consumer_offsets for the end of a pending transaction that was "
                           "not recorded, by result (found, not_yet, gone: the log no longer holds it, unavailable).",
                           ["result"], registry=REGISTRY)
TXN_PENDING = Gauge("groupkeeper_transactions_pending",
                    "Transactions with offsets pending their outcome in the groups this instance owns (one per "
                    "group and transaction).", registry=REGISTRY)
TXN_PENDING_OLDEST = Gauge("groupkeeper_transaction_pending_oldest_seconds",
                           "How long the oldest pending transaction of the groups this instance owns has been "
                           "pending (0: none).", registry=REGISTRY)
OFFSET_COMMIT_PARTITIONS = Counter("groupkeeper_offset_commit_partitions_total",
                                   "Partition offsets committed.", registry=REGISTRY)
OFFSET_COMMIT_WRITES = Counter("groupkeeper_offset_commit_writes_total",
                               "ZooKeeper multi() calls that made committed offsets durable; each carries the "
                               "commits of one group-partition batched together.", registry=REGISTRY)
OFFSET_COMMIT_SECONDS = Histogram("groupkeeper_offset_commit_duration_seconds",
                                  "An OffsetCommit's write: from its offsets handed to the store to their being durable in "
                                  "ZooKeeper (batched with other commits of the group-partition).",
                                  buckets=_LATENCY, registry=REGISTRY)
OFFSETS_EXPIRED = Counter("groupkeeper_offsets_expired_total",
                          "Committed partition offsets removed by retention (offsets_retention_minutes).",
                          registry=REGISTRY)
ZOOKEEPER_SECONDS = Histogram("groupkeeper_zookeeper_request_duration_seconds",
                              "ZooKeeper requests, by operation, as awaited by the coordinator.", ["op"],
                              buckets=_LATENCY, registry=REGISTRY)
ZOOKEEPER_WRITTEN = Counter("groupkeeper_zookeeper_written_bytes_total",
                            "Bytes of znode data the coordinator's multi() writes carried (creates and sets).",
                            registry=REGISTRY)
ZOOKEEPER_DATA = Gauge("groupkeeper_zookeeper_data_bytes",
                       "Bytes of data ZooKeeper holds, by its own estimate (mntr zk_approximate_data_size).",
                       registry=REGISTRY)
ZOOKEEPER_HEAP = Gauge("groupkeeper_zookeeper_heap_bytes",
                       "Heap of the embedded ZooKeeper (embedded_zookeeper_heap_mb); absent with an external one.",
                       registry=REGISTRY)
ZOOKEEPER_CONNECTED = Gauge("groupkeeper_zookeeper_connected",
                            "1 while the ZooKeeper session is connected, else 0.", registry=REGISTRY)
ZOOKEEPER_BUDGET = Gauge("groupkeeper_zookeeper_budget_bytes",
                         "This instance's share of the ZooKeeper data budget (zookeeper_data_budget_bytes x the "
                         "group-partitions it owns / all of them).", registry=REGISTRY)
ZOOKEEPER_BUDGET_USED = Gauge("groupkeeper_zookeeper_budget_used_bytes",
                              "ZooKeeper heap the groups of this instance's group-partitions hold, estimated, and "
                              "commits accepted but not yet written reserve.", registry=REGISTRY)
ZOOKEEPER_BUDGET_REFUSALS = Counter(
    "groupkeeper_zookeeper_budget_refusals_total",
    "Writes refused for the ZooKeeper data budget, by the limit: total (offsets past their part of the "
    "instance's share), client (past the client's share), records (a group record past the share).",
    ["limit"], registry=REGISTRY)
GROUP_LOAD_SECONDS = Histogram("groupkeeper_group_load_duration_seconds",
                               "Loading one group-partition (its groups and offsets) after taking it.",
                               buckets=_SECONDS, registry=REGISTRY)
PARTITIONS_GAINED = Counter(
    "groupkeeper_group_partitions_gained_total",
    "Group-partitions this instance took, by how: new (never owned), handover (released by a live "
    "owner), failover (its owner's session ended), recovered (this instance's own, after its session "
    "was lost).", ["reason"], registry=REGISTRY)
PARTITIONS_LOST = Counter(
    "groupkeeper_group_partitions_lost_total",
    "Group-partitions this instance gave up, by why: handover (placed on another instance), shutdown, "
    "session lost.", ["reason"], registry=REGISTRY)
TAKEOVER_SECONDS = Histogram(
    "groupkeeper_group_partition_takeover_seconds",
    "A group-partition taken over: from its previous owner stopping to serve it (handover) or its "
    "owner's session being seen to end (failover) to its being served here.", ["reason"],
    buckets=_LATENCY, registry=REGISTRY)
EVENTS_WRITTEN = Counter("groupkeeper_events_written_total", "Events appended to the event log.",
                         registry=REGISTRY)
EVENTS_DROPPED = Counter("groupkeeper_events_dropped_total",
                         "Events lost: the log could not be written (disk full, unwritable) or its queue was full.",
                         ["reason"], registry=REGISTRY)
TOPIC_METADATA_FAILURES = Counter(
    "groupkeeper_topic_metadata_failures_total",
    "Metadata requests to the cluster's brokers that failed (the topic source `brokers`), by what "
    "went wrong; the next broker is tried.", ["reason"], registry=REGISTRY)
LAG_LIST_OFFSETS = Counter(
    "groupkeeper_lag_list_offsets_requests_total",
    "ListOffsets requests made to partition leaders for the log ends consumer lag needs, by outcome "
    "(ok, failed); ends seen in relayed Fetch answers need none.", ["outcome"], registry=REGISTRY)
TOPIC_METADATA_AGE = Gauge(
    "groupkeeper_topic_metadata_age_seconds",
    "Seconds since what this instance knows of topics, partitions and leaders was last known "
    "current (0 while ZooKeeper watches keep it; +Inf before it was ever learned).", registry=REGISTRY)
ASSIGNOR_FAILURES = Counter(
    "groupkeeper_assignor_failures_total",
    "Server-side assignments abandoned because a configured strategy raised or answered wrongly "
    "(the group's leader assigned instead), by strategy.", ["strategy"], registry=REGISTRY)


class RequestCollector:
    """Requests answered, by API and error code, and their durations: counted in plain
    integers on the request path (the one thread that answers requests also serves the
    scrapes, so no lock is needed) and turned into Prometheus families per scrape. A
    prometheus-client metric takes a lock per update, which cost a heartbeat more than
    its own handling."""

    def __init__(self):
        self._apis: dict[int, _Answered] = {}  # api key -> its answers

    def observe(self, api_key: int, response, seconds: float) -> None:
        """Count a handled request under the error code its response carries (the top-level
        one, else the first of its groups, topics or partitions that is not NONE) and time it."""
        answered = self._apis.get(api_key) or self._answered(api_key)
        answered.count(answered.error_of(response), seconds)

    def observe_none(self, api_key: int, seconds: float) -> None:
        """Count a request answered NONE without a response object (the hot path) and time it."""
        (self._apis.get(api_key) or self._answered(api_key)).count(0, seconds)

    def _answered(self, api_key: int) -> _Answered:
        api = APIS[api_key]
        answered = self._apis[api_key] = _Answered(api.name, api.response.struct)
        return answered

    def collect(self):
        requests = CounterMetricFamily(
            "groupkeeper_requests", "Requests answered, by API and the error code answered (NONE, or the first error).",
            labels=["api", "error"])
        durations = HistogramMetricFamily("groupkeeper_request_duration_seconds",
                                          "From a request decoded to its response encoded, by API.", labels=["api"])
        heartbeats = 0
        for answered in sorted(self._apis.values(), key=lambda a: a.api):
            for code, n in sorted(answered.errors.items()):
                requests.add_metric([answered.api, ErrorCode(code).name if code in ErrorCode._value2member_map_
                                     else str(code)], n)
            if answered.api == "Heartbeat":
                heartbeats = sum(answered.errors.values())
            cumulative = list(accumulate(answered.buckets))
            durations.add_metric([answered.api], [(floatToGoString(bound), n) for bound, n in zip(_LATENCY, cumulative)]
                                 + [("+Inf", cumulative[-1])], answered.seconds)
        yield requests
        yield CounterMetricFamily("groupkeeper_heartbeats", "Heartbeats answered (any error code).", value=heartbeats)
        yield durations

    def describe(self):
        return []


class _Answered:
    """One API's answers: how many per error code, per latency bucket (the last: over all
    bounds), their summed seconds, and how its response's error code is found."""
    __slots__ = ("api", "buckets", "error_of", "errors", "seconds")

    def __init__(self, api: str, struct: Struct):
        self.api = api
        self.errors: dict[int, int] = {}
        self.buckets = [0] * (len(_LATENCY) + 1)
        self.seconds = 0.0
        self.error_of = _error_finder(struct) or (lambda _: 0)

    def count(self, code: int, seconds: float) -> None:
        errors = self.errors
        errors[code] = errors.get(code, 0) + 1
        self.buckets[bisect_left(_LATENCY, seconds)] += 1
        self.seconds += seconds


REQUEST_STATS = RequestCollector()
REGISTRY.register(REQUEST_STATS)
observe_request = REQUEST_STATS.observe
observe_none = REQUEST_STATS.observe_none

GATEWAY_NODE_PORTS = Gauge("groupkeeper_gateway_node_ports",
                           "Broker nodes reachable through this gateway instance (each on a port per listener).",
                           registry=REGISTRY)
GATEWAY_UPSTREAM_FAILURES = Counter(
    "groupkeeper_gateway_upstream_failures_total",
    "Connections to brokers that could not be made (unreachable), that the broker ended (closed), whose TLS "
    "handshake failed (tls), whose SASL login was refused (authentication), or not made for the limit per broker "
    "(limit), by node (any: a listener's own port); each closes its client's connection.", ["node", "reason"],
    registry=REGISTRY)

BROKER_ANSWERS_MALFORMED = Counter(
    "groupkeeper_broker_answers_malformed_total",
    "Brokers' answers read as Kafka's clients read them, by API and kind: bytes past the schema (past_schema: "
    "ignored, dropped where the answer is rewritten), unreadable where nothing had to be rewritten (relayed: "
    "passed on as they came), unreadable where broker addresses had to be rewritten (closed: the client's "
    "connection closed). Logged once per broker, API and kind.", ["api", "kind"], registry=REGISTRY)


class GatewayCollector:
    """Requests and bytes relayed by the gateway, by API and node: plain integers on the
    data path (as `RequestCollector`), families per scrape."""

    def __init__(self):
        self.requests: Tally[tuple[int, str]] = Tally()  # (api key, node) -> requests relayed
        self.sent: Tally[str] = Tally()  # node -> request bytes relayed to it
        self.received: Tally[str] = Tally()  # node -> answer bytes received from it
        self.spliced: Tally[str] = Tally()  # node -> of those, bytes moved to clients by the kernel (splice)
        self.streamed: Tally[str] = Tally()  # node -> of the request bytes, those relayed as they came

    def relayed(self, api_key: int, node: int | None, size: int) -> None:
        label = "any" if node is None else str(node)
        self.requests[(api_key, label)] += 1
        self.sent[label] += size

    def answered(self, node: int | None, size: int) -> None:
        self.received["any" if node is None else str(node)] += size

    def piped(self, node: int | None, size: int) -> None:
        label = "any" if node is None else str(node)
        self.received[label] += size
        self.spliced[label] += size

    def passed(self, node: int | None, size: int) -> None:
        self.streamed["any" if node is None else str(node)] += size

    def collect(self):
        requests = CounterMetricFamily("groupkeeper_gateway_requests",
                                       "Requests relayed to the brokers, by API and node (any: sent on a "
                                       "listener's own port, to whichever broker).", labels=["api", "node"])
        for (key, node), count in sorted(self.requests.items()):
            api = APIS.get(key)
            requests.add_metric([api.name if api is not None else str(key), node], count)
        moved = CounterMetricFamily("groupkeeper_gateway_bytes",
                                    "Bytes relayed, by direction (to_broker, from_broker) and node.",
                                    labels=["direction", "node"])
        for direction, tally in (("to_broker", self.sent), ("from_broker", self.received)):
            for node, count in sorted(tally.items()):
                moved.add_metric([direction, node], count)
        spliced = CounterMetricFamily("groupkeeper_gateway_spliced_bytes",
                                      "Of the bytes from brokers, those moved to clients by the kernel (splice: "
                                      "record sets of Fetch answers, never copied through the gateway), by node.",
                                      labels=["node"])
        for node, count in sorted(self.spliced.items()):
            spliced.add_metric([node], count)
        streamed = CounterMetricFamily("groupkeeper_gateway_streamed_bytes",
                                       "Of the bytes to brokers, those relayed as they arrived (the rest of "
                                       "large Produce requests, never held whole), by node.", labels=["node"])
        for node, count in sorted(self.streamed.items()):
            streamed.add_metric([node], count)
        return [requests, moved, spliced, streamed]

    def describe(self):
        return []


GATEWAY_STATS = GatewayCollector()
REGISTRY.register(GATEWAY_STATS)
gateway_relayed = GATEWAY_STATS.relayed
gateway_received = GATEWAY_STATS.answered
gateway_spliced = GATEWAY_STATS.piped  # counted as received too
gateway_streamed = GATEWAY_STATS.passed  # counted as sent already (`gateway_relayed`, the request's size)


def _error_finder(struct: Struct) -> Callable[[Any], int] | None:
    """A function returning the first non-zero `error_code` of a message of `struct`, looking
    at its own field first, then into its arrays of structs; None if it has none at all."""
    direct = any(f.name == "error_code" for f in struct.fields)
    nested = [(f.name, finder) for f in struct.fields
              if isinstance(f.type, Array) and isinstance(f.type.item, Struct)
              and (finder := _error_finder(f.type.item)) is not None]
    if not direct and not nested:
        return None
    if not nested:
        return attrgetter("error_code")

    def first(message) -> int:
        if direct and message.error_code:
            return message.error_code
        for name, finder in nested:
            for item in getattr(message, name) or ():
                if code := finder(item):
                    return code
        return 0
    return first


def reason_kind(reason: str) -> str:
    """A rebalance reason as a label value: the kind, without client-given text or topic names,
    so the label stays bounded."""
    if reason.startswith("partitions of "):
        return "partitions changed"
    return reason.split(":", 1)[0]


class GroupsCollector(SteppedCollector):
    """Gauges read from the coordinator per scrape: groups by type and state, members (per group for
    the `per_group` largest groups, the rest in one series without a group label), owned and
    total group-partitions, live instances. The groups are listed in one step (what lists them
    reads the coordinator's own dicts), then ranked in steps."""

    def __init__(self, groups: Callable[[], Iterable[tuple[str, str, int, str]]], owned: Callable[[], int],
                 total: Callable[[], int], live: Callable[[], int], per_group: int):
        self.groups = groups  # (group id, state, members, type)
        self.owned = owned
        self.total = total
        self.live = live
        self.per_group = per_group

    def collect_in_steps(self):
        listed = list(self.groups())
        yield STEP
        by_state = GaugeMetricFamily("groupkeeper_groups", "Groups this instance coordinates, by type and state.",
                                     labels=["type", "state"])
        for (kind, state), count in sorted(Tally((kind, state) for _, state, _, kind in listed).items()):
            by_state.add_metric([kind, state], count)
        yield by_state
        members = GaugeMetricFamily(
            "groupkeeper_group_members",
            "Members of the groups this instance coordinates: the largest groups by name, the rest "
            "summed in the series without a group label.", labels=["group"])
        largest = yield from smallest_in_steps(self.per_group, listed, key=lambda g: (-g[2], g[0]))
        for group_id, _, count, _ in largest:
            members.add_metric([group_id], count)
        members.add_metric([""], sum(g[2] for g in listed) - sum(g[2] for g in largest))
        yield members
        yield GaugeMetricFamily("groupkeeper_owned_group_partitions",
                                "Group-partitions this instance owns.", value=self.owned())
        yield GaugeMetricFamily("groupkeeper_group_partitions",
                                "Group-partitions in the cluster (owned by some instance or not).",
                                value=self.total())
        yield GaugeMetricFamily("groupkeeper_live_instances",
                                "Coordinator instances registered in ZooKeeper, as this instance sees them.",
                                value=self.live())


class LagCollector(SteppedCollector):
    """Consumer lag of the groups this instance coordinates, per scrape (kafka_exporter's
    kafka_consumergroup_lag, but from the coordinator itself): per group and topic, the
    `per_group` groups with the most lag by name and the rest summed in the series without a
    group label; per partition, the `per_partition` largest only (0: none); and how many
    committed partitions have no known log end yet. Made in steps (`collect_in_steps`): its
    sources may be stepped computations (`cluster.lag.lag_in_steps`,
    `CommitWindows.statuses_in_steps`), and its own work over their rows steps too."""

    def __init__(self, lag: Callable[[], Any], per_group: int,
                 per_partition: int, statuses: Callable[[], Any] | None = None,
                 severity: dict[str, int] | None = None):
        self.lag = lag  # ((group, topic, partition, lag), partitions whose end is unknown)
        self.per_group = per_group
        self.per_partition = per_partition
        self.statuses = statuses  # group -> its status by Burrow's rules (cluster.lag)
        self.severity = severity or {}  # status -> rank, least severe first (cluster.lag.SEVERITY)

    def collect_in_steps(self):
        made = self.lag()
        rows, unknown = yield from stepped(made)
        pace = Pace()
        by_group: dict[str, int] = {}  # each group's lag: what both families rank groups by
        for i, (group, _, _, n) in enumerate(rows, 1):
            by_group[group] = by_group.get(group, 0) + n
            if not i % ROWS_PER_PACE and pace.due():
                yield STEP
        yield from self._lag(rows, unknown, by_group, pace)
        if self.statuses is not None:
            statuses = yield from stepped(self.statuses())
            yield STEP
            yield from self._statuses(statuses, by_group)
        if isinstance(made, Generator):  # rows made for this scrape, freed a chunk a step:
            while rows:  # 180,000 at once took 18 ms
                del rows[-ROWS_FREED:]
                yield STEP

    def _statuses(self, statuses: dict[str, str], lag: dict[str, int]):
        """One series per group for the `per_group` worst (by status, then lag, then name),
        and how many groups are in each status."""
        order = self.severity
        family = GaugeMetricFamily(
            "groupkeeper_consumergroup_status",
            "1 for a group's status by Burrow's rules (OK, WARN, STOP, STALL, REWIND; Burrow's group "
            "status shows the last three as ERR): the metrics_group_series worst groups.",
            labels=["group", "status"])
        worst = yield from smallest_in_steps(self.per_group, list(statuses),
                                             key=lambda g: (-order.get(statuses[g], 0), -lag.get(g, 0), g))
        for group in worst:
            family.add_metric([group, statuses[group]], 1)
        yield family
        counts = GaugeMetricFamily("groupkeeper_consumergroups_by_status",
                                   "Groups this instance coordinates with committed offsets, by status.",
                                   labels=["status"])
        tally = Tally(statuses.values())
        for status in order:
            counts.add_metric([status], tally.get(status, 0))
        yield counts

    def _lag(self, rows, unknown, by_group: dict[str, int], pace: Pace):
        named = set((yield from smallest_in_steps(self.per_group, list(by_group), key=lambda g: (-by_group[g], g))))
        # summed from the rows themselves, not from a dict of every (group, topic) first:
        # freeing that dict's keys took 5 ms in one piece at 30,000 groups
        summed: dict[tuple[str, str], int] = {}
        for i, (group, topic, _, lag) in enumerate(rows, 1):
            key = (group if group in named else "", topic)
            summed[key] = summed.get(key, 0) + lag
            if not i % ROWS_PER_PACE and pace.due():
                yield STEP
        family = GaugeMetricFamily(
            "groupkeeper_consumergroup_lag",
            "Records between a group's committed offsets and the ends of their partitions' logs, "
            "summed per topic; the groups beyond metrics_group_series summed without a group label.",
            labels=["group", "topic"])
        for (group, topic), lag in sorted(summed.items()):
            family.add_metric([group, topic], lag)
        yield family
        partitions = GaugeMetricFamily(
            "groupkeeper_consumergroup_partition_lag",
            "Records between a group's committed offset and its partition's log end: the "
            "metrics_lag_partition_series largest (none by default).", labels=["group", "topic", "partition"])
        for group, topic, partition, lag in heapq.nsmallest(
                self.per_partition, rows, key=lambda r: (-r[3], r[0], r[1], r[2])) if self.per_partition > 0 else ():
            partitions.add_metric([group, topic, str(partition)], lag)
        yield partitions
        yield GaugeMetricFamily("groupkeeper_consumergroup_lag_unknown_partitions",
                                "Committed partitions whose log end is not known yet (no lag for them).",
                                value=unknown)


class MetadataCacheCollector:
    """The cache of encoded Metadata answers (`api.cluster.MetadataCache`), read per scrape:
    answers from it and made afresh, and the bytes it holds (none of it when it is off)."""

    def __init__(self, cache: Callable[[], Any]):
        self.cache = cache

    def collect(self):
        cache = self.cache()
        answers = CounterMetricFamily("groupkeeper_metadata_cache_answers",
                                      "Metadata answers from the cache (hit) and made afresh (miss).",
                                      labels=["outcome"])
        answers.add_metric(["hit"], 0 if cache is None else cache.hits)
        answers.add_metric(["miss"], 0 if cache is None else cache.misses)
        yield answers
        yield GaugeMetricFamily("groupkeeper_metadata_cache_bytes", "Bytes of encoded Metadata answers kept.",
                                value=0 if cache is None else cache.bytes)

    def describe(self):
        return []
