"""The /metrics endpoint: Prometheus scrapes the registry of `coordinator.metrics` here,
over HTTP or HTTPS, and only for the configured basic-auth users if there are any."""

from __future__ import annotations

import base64
import ssl

import trio
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .. import logs
from ..metrics import REGISTRY, STEP
from ..security.passwords import Credentials

MAX_HEAD_BYTES = 8192
REQUEST_SECONDS = 10  # for a scraper's TLS handshake, then for its request


class _Family:
    """One collected metric family, in the shape `generate_latest` takes a registry in."""
    __slots__ = ("metric",)

    def __init__(self, metric):
        self.metric = metric

    def collect(self):
        return (self.metric,)


async def exposition(registry=REGISTRY) -> bytes:
    """`generate_latest(registry)`'s text, made with the other tasks (the serving loop's)
    run between its steps. In one piece it held the serving loop 2.6-3.8 ms a scrape (50 KB,
    66 families, in `bench gateway --beside`), and the records that arrived meanwhile were
    the gateway's slowest: once a second, at the scrapes (docs/benchmarks.md). Each collector
    of a registry that lists them (`metrics.Registry`) is collected in a step of its own (it
    reads what the serving loop changes: never left halfway through), or, one that offers
    `collect_in_steps` (what grows with the groups: `metrics.LagCollector`), in as many as it
    says (`metrics.STEP`); any other registry in one step; each family is then formatted in
    a step of its own."""
    collectors = getattr(registry, "collectors", None)
    if collectors is None:
        families = list(registry.collect())
    else:
        families = []
        for collector in list(collectors):
            in_steps = getattr(collector, "collect_in_steps", None)
            if in_steps is None:
                families.extend(collector.collect())
            else:
                for made in in_steps():
                    if made is STEP:
                        await trio.lowlevel.checkpoint()
                    else:
                        families.append(made)
            await trio.lowlevel.checkpoint()
    parts = []
    for family in families:
        await trio.lowlevel.checkpoint()
        parts.append(generate_latest(_Family(family)))
    return b"".join(parts)


async def serve_metrics(listeners: list[trio.SocketListener], tls: ssl.SSLContext | None = None,
                        users: dict[str, str] | None = None, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """A minimal HTTP/1.1 server on `listeners`: GET /metrics, one request per connection;
    over TLS with `tls`, and only for the basic-auth `users` (name -> password hash) if given."""
    task_status.started()
    log = logs.get("groupkeeper.metrics")
    checker = None if not users else Credentials(users)

    async def scrape(stream: trio.abc.Stream) -> None:
        try:
            if tls is not None:
                stream = trio.SSLStream(stream, tls, server_side=True)
                with trio.move_on_after(REQUEST_SECONDS) as waited:
                    await stream.do_handshake()
                if waited.cancelled_caught:
                    await trio.aclose_forcefully(stream)
                    return
            async with stream:
                await stream.send_all(await _answer(stream, checker))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("scraper went away")  # TLS refused (plain HTTP, a bad handshake) lands here too

    await trio.serve_listeners(scrape, listeners)


async def _authorized(checker: Credentials, authorization: str | None) -> bool:
    """Whether an Authorization header's Basic credentials are a user's."""
    if authorization is None or not authorization.lower().startswith("basic "):
        return False
    try:
        user, _, password = base64.b64decode(authorization[6:].strip(), validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return False
    return await checker.allows(user, password)


async def _answer(stream: trio.abc.Stream, checker: Credentials | None) -> bytes:
    head = b""
    with trio.move_on_after(REQUEST_SECONDS):
        while b"\r\n\r\n" not in head and len(head) < MAX_HEAD_BYTES:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
    lines = head.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    path = rest.split(" ", 1)[0].split("?", 1)[0]
    fields = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    extra = ""
    if b"\r\n\r\n" not in head:
        status, body, kind = "400 Bad Request", b"bad request\n", "text/plain"
    elif checker is not None and not await _authorized(checker, fields.get("authorization")):
        status, body, kind = "401 Unauthorized", b"unauthorized\n", "text/plain"
        extra = 'WWW-Authenticate: Basic realm="groupkeeper metrics", charset="UTF-8"\r\n'
    elif method not in ("GET", "HEAD"):
        status, body, kind = "405 Method Not Allowed", b"only GET\n", "text/plain"
    elif path != "/metrics":
        status, body, kind = "404 Not Found", b"see /metrics\n", "text/plain"
    else:
        status, body, kind = "200 OK", await exposition(REGISTRY), CONTENT_TYPE_LATEST
    return (f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n{extra}"
            "Connection: close\r\n\r\n").encode() + (body if method != "HEAD" else b"")
