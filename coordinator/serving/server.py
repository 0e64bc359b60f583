"""The Kafka-protocol TCP server: every connection served from one poll loop.

Each accepted socket is registered once in an epoll set of the server's own; one task waits
for that set to have sockets ready and serves them all in a row (`connection.ClientConnection`
reads, handles and answers). A trio task per connection waiting on its socket costs a
scheduling round and an epoll re-registration per request, which at 10,000 connections
was most of the server's CPU (docs/benchmarks.md, "The request path under load").
Timeouts are kept by a reaper that looks at every connection a few times per timeout, not
by a cancel scope per wait.
"""

from __future__ import annotations

import ctypes
import errno
import math
import select
import socket
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from .. import logs, metrics
from ..listeners import Listener
from ..security.client import Client
from ..security.sasl import Authentication, SaslGate
from ..security.tls import TlsGate, TLSSocket
from .connection import CHURN, ClientConnection
from .interfaces import Api, Limits, Route
from .trioloop import TrioLoop


@dataclass(frozen=True)
class Security:
    """What the TLS and SASL listeners need: none of it for PLAINTEXT."""
    tls: dict[str, ssl.SSLContext] = field(default_factory=dict)  # by protocol: SSL asks for client certificates
    authentication: Authentication | None = None


ACCEPT_BACKOFF = (0.01, 1.0)  # seconds: first and longest pause after accept() failed for want of resources
WAITS = ("trio", "epoll")  # the poll loop's ways to wait: through trio, or in its own epoll while trio is idle
POLL_EVENTS = 256  # sockets served per turn of the poll loop, before the other tasks run
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_HANG_UP = select.EPOLLHUP | select.EPOLLERR
# Bytes that closing connections dropped after which freed memory is given back to the
# system (by the reaper, at most once a turn). glibc keeps freed blocks in its heap for
# reuse, and raises its threshold for mmap() to the largest block freed, so once one answer
# of megabytes has come and gone, the next ones are carved from the heap and stay there when
# freed: a client that pipelined OffsetFetch answers of 4.8 MB against a 1 MiB
# max_queued_reply_bytes and closed left the coordinator 12-17 MB larger than before it came;
# with malloc_trim, 10 MB smaller (tests/zookeeper/test_e2e_unread_answers.py). A trim of a heap of
# hundreds of MB takes 1-5 ms, so not for every connection that goes.
TRIM_AFTER = 4 << 20


def _malloc_trim():
    """glibc's malloc_trim, None without glibc (musl, macOS): nothing is trimmed there."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()


class Server:
    """The `interfaces.Host` of its connections."""

    def __init__(self, api: Api, limits: Limits, security: Security = Security(), wait: str = "trio"):
        self.api = api
        self.wait = wait  # one of WAITS: how the poll loop waits for its sockets
        self.limits = limits
        self.security = security
        self.by_address: Counter[str] = Counter()
        self.log = logs.get("groupkeeper.server")
        self.stopped = trio.Event()
        # api_key * 65536 + api_version -> how it is answered, None if not served; filled on first use
        self._handlers: dict[int, Route | None] = {}
        self._tasks: trio.Nursery | None = None  # where the requests that wait run
        self._connections: dict[int, ClientConnection] = {}  # by file descriptor
        self._sockets: dict[int, object] = {}  # what the poll loop serves, by descriptor: those and our peers
        self._ports: dict[int, list[tuple[trio.CancelScope, trio.SocketListener]]] = {}  # by node: its ports
        self._epoll = select.epoll()
        self._accepting_scope: trio.CancelScope | None = None
        self._deadline = math.inf  # when connections still open at shutdown are closed
        self._all_closed = trio.Event()
        self._released = 0  # bytes closing connections dropped since memory was last trimmed
        self.waits_alone = False  # whether the poll loop waits in its own epoll while trio is idle (`trioloop`)
        self.now: Callable[[], float] = trio.current_time  # the same, quicker while the poll loop waits alone

    async def serve(self, listeners: list[tuple[trio.SocketListener, Listener]],
                    task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept on `listeners` (each socket with the Kafka listener it is) until `shutdown()`;
        then serve the open connections until they close or its grace ends."""
        try:
            async with trio.open_nursery() as nursery:
                self._tasks = nursery
                nursery.start_soon(self._poll)
                nursery.start_soon(self._reap)
                async with trio.open_nursery() as accepting:
                    self._accepting_scope = accepting.cancel_scope
                    for listener, kind in listeners:
                        accepting.start_soon(self._accept, listener, kind)
                    task_status.started()
                for listener, _ in listeners:
                    await listener.aclose()
                for node in list(self._ports):
                    self.close_node(node, close_connections=False)
                with trio.move_on_at(self._deadline):
                    if self._connections:
                        await self._all_closed.wait()
                nursery.cancel_scope.cancel()
        finally:  # grace over, or cancelled: what is still open is closed
            for connection in list(self._connections.values()):
                connection.close("server stopping")
            self._epoll.close()
        self.stopped.set()

    def handler(self, api_key: int, api_version: int) -> Route | None:
        key = api_key * 65536 + api_version
        try:
            return self._handlers[key]
        except KeyError:
            found = self._handlers[key] = self.api.dispatch(api_key, api_version)
            return found

    def start_soon(self, fn, *args) -> None:
        self._tasks.start_soon(fn, *args)

    def attach(self, peer, mask: int) -> None:
        self._sockets[peer.fd] = peer
        self._epoll.register(peer.fd, mask)

    def detach(self, peer) -> None:
        self._epoll.unregister(peer.fd)
        del self._sockets[peer.fd]

    def open_node(self, node: int, listeners: list[tuple[trio.SocketListener, Listener]]) -> None:
        """Accept on `listeners`, ports that stand for broker `node` (the gateway's), until
        `close_node` or shutdown; a connection on them is a client of that node."""
        if self._accepting_scope is None or self._accepting_scope.cancel_called:
            return
        ports = self._ports.setdefault(node, [])
        for listener, kind in listeners:
            scope = trio.CancelScope()
            ports.append((scope, listener))
            self._tasks.start_soon(self._accept_until, scope, listener, kind, node)

    def close_node(self, node: int, close_connections: bool = True) -> None:
        """Stop accepting on `node`'s ports and close them; and its clients' connections, so
        that they look the cluster up again."""
        for scope, listener in self._ports.pop(node, []):
            scope.cancel()
            listener.socket.close()
        if close_connections:
            for connection in [c for c in self._connections.values() if c.client.node == node]:
                connection.close("broker node left the cluster")

    async def _accept_until(self, scope: trio.CancelScope, listener: trio.SocketListener, kind: Listener,
                            node: int) -> None:
        with scope:
            await self._accept(listener, kind, node)

    def shutdown(self, grace: float) -> None:
        self._deadline = trio.current_time() + grace
        self._accepting_scope.cancel()

    async def _accept(self, listener: trio.SocketListener, kind: Listener, node: int | None = None) -> None:
        """Accept for ever. Out of file descriptors (or memory), accept() fails: the
        connection waits in the backlog while this backs off, logs once per episode and
        keeps serving the connections it has, rather than ending the instance."""
        pause = 0.0
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                if not pause:
                    self.log.error("cannot accept connections", error=exc.strerror or str(exc))
                metrics.ACCEPT_FAILURES.labels(errno.errorcode.get(exc.errno, str(exc.errno))).inc()
                pause = min(max(pause * 2, ACCEPT_BACKOFF[0]), ACCEPT_BACKOFF[1])
                await trio.sleep(pause)
                continue
            if pause:
                self.log.info("accepting connections again")
                pause = 0.0
            self._open(socket.socket(fileno=stream.socket.detach()), kind, node)  # non-blocking, as trio made it

    def _open(self, sock: socket.socket, listener: Listener, node: int | None = None) -> None:
        try:
            peer = sock.getpeername()
        except OSError:  # gone already
            sock.close()
            return
        refused = ("max connections reached" if len(self._connections) >= self.limits.max_connections else
                   "max connections per address reached"
                   if self.by_address[peer[0]] >= self.limits.max_connections_per_ip else None)
        if refused:
            if CHURN.closed(peer[0], refused) is not None:  # once per burst of refusals from that address
                self.log.warning("connection refused", reason=refused, peer=f"{peer[0]}:{peer[1]}")
            metrics.CONNECTIONS_CLOSED.labels(refused).inc()
            sock.close()
            return
        # a TLS or SASL connection must be through its gate within the request read timeout
        deadline = trio.current_time() + self.limits.request_read_timeout
        gate = (SaslGate(self.security.authentication, deadline) if listener.sasl else
                TlsGate(deadline) if listener.tls else None)
        connection = ClientConnection(self, TLSSocket(sock, self.security.tls[listener.protocol]) if listener.tls else sock, peer,
                                      Client(peer[0], listener, node=node), gate)
        self._connections[connection.fd] = connection
        self._sockets[connection.fd] = connection
        self.by_address[peer[0]] += 1
        metrics.CONNECTIONS.inc()
        self._epoll.register(connection.fd, select.EPOLLIN)
        connection.arm(trio.current_time())

    def watch(self, fd: int, mask: int) -> None:
        """Wait for `mask`'s events on `fd` from now on."""
        self._epoll.modify(fd, mask)

    def forget(self, connection: ClientConnection) -> None:
        """`connection` is closing: no more events for it, and it no longer counts."""
        self._epoll.unregister(connection.fd)
        del self._connections[connection.fd]
        del self._sockets[connection.fd]
        host = connection.client.host
        self.by_address[host] -= 1
        if not self.by_address[host]:
            del self.by_address[host]  # one entry per address connected now, not ever
        metrics.CONNECTIONS.dec()
        if not self._connections and self._deadline < math.inf:
            self._all_closed.set()

    def released(self, size: int) -> None:
        self._released += size

    async def _poll(self) -> None:
        """Serve the sockets that are ready, a turn at a time, for ever: through trio's
        `wait_readable`, or with `wait` "epoll" in the server's own epoll while trio has
        nothing to run (`trioloop`)."""
        epoll = self._epoll
        loop = TrioLoop.claim() if self.wait == "epoll" else None
        if loop is None:
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                self._serve(epoll.poll(0, POLL_EVENTS))
        try:
            await loop.settle()
            epoll.register(loop.fd, select.EPOLLIN)
            trio_fd, self.waits_alone, self.now = loop.fd, True, loop.now
            while True:
                timeout = loop.timeout()
                if timeout is None:  # trio has work: it runs first, then the sockets ready meanwhile
                    await trio.lowlevel.checkpoint()
                    timeout = 0
                elif loop.watched:  # a test waits for all tasks blocked: wait through trio
                    epoll.unregister(trio_fd)  # (an epoll set may not hold one that holds it)
                    try:
                        await trio.lowlevel.wait_readable(epoll.fileno())
                    finally:  # out of trio's set (which keeps what it waited for) before trio's is in ours
                        trio.lowlevel.notify_closing(epoll.fileno())
                        epoll.register(trio_fd, select.EPOLLIN)
                    timeout = 0
                if self._serve(epoll.poll(timeout, POLL_EVENTS), trio_fd):
                    await trio.lowlevel.checkpoint()  # trio's sockets, a thread's callback or a signal
        finally:
            self.now = trio.current_time
            loop.release()

    def _serve(self, ready: list[tuple[int, int]], trio_fd: int = -1) -> bool:
        """Serve the sockets `ready` (epoll's events); whether trio's epoll was among them."""
        connections, trio_ready = self._sockets, False
        for fd, events in ready:
            connection = connections.get(fd)
            if connection is None:  # closed earlier in this turn, or trio's epoll
                trio_ready = trio_ready or fd == trio_fd
                continue
            try:
                if events & select.EPOLLOUT:
                    connection.writable()
                if events & ~select.EPOLLOUT and not connection.closed:
                    if connection.mask & select.EPOLLIN:
                        connection.readable()
                    elif events & _HANG_UP:  # paused and nothing to send: only this tells it is gone
                        connection.close("peer went away")
            except Exception as exc:  # a bug: close this connection, keep serving the others
                connection.log.error("connection failed", exc_info=exc)
                connection.close("connection failed")
        return trio_ready

    async def _reap(self) -> None:
        """Close the connections idle too long, or whose request trickles in too slowly: one
        look at every connection a few times per timeout."""
        period = min(1.0, max(0.01, min(self.limits.idle_timeout, self.limits.request_read_timeout) / 8))
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            for connection in [c for c in self._connections.values() if c.until <= now]:
                connection.close(connection.gate.expired if connection.gate is not None else
                                 "request read timeout" if connection.reading_timeout else "idle timeout")
            if self._released >= TRIM_AFTER:  # clients went with megabytes of answers: give them back
                self._released = 0
                if _TRIM is not None:
                    _TRIM(0)


