"""What the serving layer asks of the layers around it and of itself, declared here so that
no module imports the one that implements what it uses (kazoo's `interfaces.py` is the
model): `server.Server` is the `Host` of its `connection.ClientConnection`s, and
`coordinator.api.router.Api` is the `Api` they all answer with. The connection knows the
server only as a `Host` (`forget` takes it as a `ClientConnection`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import structlog
    from protocol import ErrorCode, messages as m

    from ..security.client import Client

Handler = Callable[..., Any]  # (header, request, client) -> response, coroutine or Pending
# (handler, whether its answer may wait, whether it relays): a relaying handler takes
# (connection, frame) and answers with a Pending of the response frame, or None for no answer
Route = tuple[Handler, bool, bool]


class CloseConnection(Exception):
    """A request whose only answer is to close its connection (Kafka's, for an error on a
    produce that asked for no answer)."""


@dataclass(frozen=True)
class Limits:
    """Per-server limits; their defaults live in the configuration."""
    max_request_bytes: int  # socket.request.max.bytes
    max_connections: int
    idle_timeout: float  # seconds; connections.max.idle.ms
    max_connections_per_ip: int = 1000  # max.connections.per.ip
    request_read_timeout: float = 30.0  # seconds from a request's first byte to its last
    max_queued_reply_bytes: int = 16 << 20  # answers not yet taken by the client; reading stops above
    max_in_flight: int = 100  # requests of one connection waiting at once


class Api(Protocol):
    """What answers the requests."""

    def dispatch(self, api_key: int, api_version: int) -> Route | None:
        """How (api, version) is answered; None: not served (the connection closes)."""

    def stable_heartbeat(self, frame: bytes, now: float, client: Client) -> bytes | None:
        """The whole answer frame to the usual heartbeat in `frame`; None: decode it and dispatch."""

    def steady_consumer_heartbeat(self, frame: bytes, now: float, client: Client) -> bytes | None:
        """The whole answer frame to a steady ConsumerGroupHeartbeat in `frame`; None: decode it and dispatch."""

    def api_versions_response(self, error: ErrorCode) -> m.ApiVersionsResponse:
        """ApiVersions, with `error` (UNSUPPORTED_VERSION for a version we cannot read)."""


class Host(Protocol):
    """What a connection asks of the server that serves it."""
    api: Api
    limits: Limits
    log: structlog.stdlib.BoundLogger

    def now(self) -> float:
        """`trio.current_time()` (where the server can read it quicker)."""

    def handler(self, api_key: int, api_version: int) -> Route | None:
        """`api.dispatch`, remembered per (api, version)."""

    def start_soon(self, fn: Callable, *args: Any) -> None:
        """Run `fn(*args)` in a task of the server's, cancelled when the server stops."""

    def attach(self, peer: Any, mask: int) -> None:
        """Serve `peer` (a socket of ours that is not a client's: `readable`, `writable`,
        `close`, `fd`, `mask`, `closed`) in the poll loop, for `mask`'s events."""

    def detach(self, peer: Any) -> None:
        """`peer` is closing: no more events for it."""

    def watch(self, fd: int, mask: int) -> None:
        """Wait for `mask`'s events on `fd` from now on."""

    def forget(self, connection: Any) -> None:
        """`connection` is closing: no more events for it, and it no longer counts."""

    def released(self, size: int) -> None:
        """A closing connection dropped `size` bytes it held (answers not taken, requests
        not handled): memory to give back to the system."""


class Upstream(Protocol):
    """What relays a connection's requests elsewhere (the gateway's link to a broker),
    closed when its connection closes."""

    @property
    def busy(self) -> bool:
        """It holds too much not yet sent on: read no more requests of its connection."""

    @property
    def backed_up(self) -> bool:
        """The request streaming to it waits: what it was given is not all sent on. Its
        connection calls `go_on` once it is."""

    @property
    def closed(self) -> bool: ...

    def drained(self) -> None:
        """Its connection's client took its answers: go on with the upstream's."""

    def stream_request(self, start: bytes, size: int):
        """A request of `size` bytes of which `start` has come, to be relayed as the rest
        comes (`forward`): its answer's Pending (None: it has none), or False if it will not
        (the connection then reads it whole). Its connection calls `go_on` once it has room
        again after it was `busy`."""

    def express(self, data: bytes):
        """`data`, one whole request as it was read (its size first), relayed as it is if the
        upstream takes it so: its answer's Pending (None: it has none), or False."""

    def forward(self, part) -> None:
        """The next bytes of the request streaming, as the connection read them: a view of
        its read buffer, which it reads into again once this returns (sent on, or copied)."""

    def cork(self) -> bool:
        """Hold the requests it is given until `uncork`, to send them in one call: the
        connection's requests that one read brought. Whether it will (False: each goes as before)."""

    def uncork(self) -> None:
        """Send what it held since `cork`."""

    def close(self, reason: str) -> None: ...
