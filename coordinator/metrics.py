"""Prometheus metrics and the `/metrics` endpoint that serves them.

The metrics live in one registry of their own (not prometheus-client's global one), are
named `groupkeeper_*` and carry no per-member or per-group labels, so a coordinator with
thousands of groups exports a bounded number of series. Gauges that describe the groups
are read from the coordinator when scraped, never kept up to date on the request path.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from . import logs

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter("groupkeeper_requests_total", "Requests handled, by API.", ["api"], registry=REGISTRY)
CONNECTIONS = Gauge("groupkeeper_connections", "Open client connections.", registry=REGISTRY)
CONNECTIONS_CLOSED = Counter("groupkeeper_connections_closed_total",
                             "Client connections closed by the server for a bad frame or a limit.",
                             ["reason"], registry=REGISTRY)
REBALANCES = Counter("groupkeeper_rebalances_total", "Rebalances completed.", registry=REGISTRY)
REBALANCE_SECONDS = Histogram(
    "groupkeeper_rebalance_duration_seconds", "From the start of a rebalance to its generation being stable.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600), registry=REGISTRY)
ASSIGNOR_FAILURES = Counter(
    "groupkeeper_assignor_failures_total",
    "Server-side assignments abandoned because a configured strategy raised or answered wrongly "
    "(the group's leader assigned instead), by strategy.", ["strategy"], registry=REGISTRY)
MEMBERS_REMOVED = Counter("groupkeeper_members_removed_total",
                          "Members removed from their group, by reason.", ["reason"], registry=REGISTRY)


class GroupsCollector:
    """Groups by state and owned group-partitions, read from the coordinator per scrape."""

    def __init__(self, states: Callable[[], Iterable[str]], owned: Callable[[], int]):
        self.states = states
        self.owned = owned

    def collect(self):
        groups = GaugeMetricFamily("groupkeeper_groups", "Groups this instance coordinates, by state.",
                                   labels=["state"])
        for state, count in sorted(Tally(self.states()).items()):
            groups.add_metric([state], count)
        yield groups
        yield GaugeMetricFamily("groupkeeper_owned_group_partitions",
                                "Group-partitions this instance owns.", value=self.owned())

    def describe(self):
        return []


MAX_HEAD_BYTES = 8192


async def serve_metrics(host: str, port: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """A minimal HTTP/1.1 server: GET /metrics, one request per connection."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    task_status.started(listeners[0].socket.getsockname()[1])
    log = logs.get("groupkeeper.metrics")

    async def scrape(stream: trio.SocketStream) -> None:
        try:
            async with stream:
                await stream.send_all(await _answer(stream))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("scraper went away")

    await trio.serve_listeners(scrape, listeners)


async def _answer(stream: trio.SocketStream) -> bytes:
    head = b""
    with trio.move_on_after(10):
        while b"\r\n\r\n" not in head and len(head) < MAX_HEAD_BYTES:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
    method, _, rest = head.partition(b"\r\n")[0].decode("latin-1").partition(" ")
    path = rest.split(" ", 1)[0].split("?", 1)[0]
    if b"\r\n\r\n" not in head:
        status, body, kind = "400 Bad Request", b"bad request\n", "text/plain"
    elif method not in ("GET", "HEAD"):
        status, body, kind = "405 Method Not Allowed", b"only GET\n", "text/plain"
    elif path != "/metrics":
        status, body, kind = "404 Not Found", b"see /metrics\n", "text/plain"
    else:
        status, body, kind = "200 OK", generate_latest(REGISTRY), CONTENT_TYPE_LATEST
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + (body if method != "HEAD" else b"")
