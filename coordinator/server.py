"""The Kafka-protocol TCP server: one trio task per connection.

Requests on a connection are handled concurrently (clients pipeline them) and answered in
the order they came: a reply waits for the replies before it, and every reply ready at
once goes out in one write. Every request is handled inline as its frame arrives, in
order; only the part of a request that waits (a JoinGroup for its generation, a commit for
ZooKeeper) gets a task of its own. A JoinGroup that waits for its generation holds back
only the replies behind it on its own connection. A frame that cannot be decoded, a size over the
limit, or an unknown API closes that connection only, with the reason logged.
"""

from __future__ import annotations

import errno
import math
import socket
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from types import CoroutineType

import trio

from protocol import (ErrorCode, FrameReader, ProtocolError, RequestHeader, UnsupportedVersion,
                      decode_request, encode_response)
from protocol.schemas import API_VERSIONS

from . import logs, metrics
from .handlers import Handlers, api_versions_response


@dataclass(frozen=True)
class Limits:
    """Per-server limits; their defaults live in the configuration."""
    max_request_bytes: int  # socket.request.max.bytes
    max_connections: int
    idle_timeout: float  # seconds; connections.max.idle.ms
    max_connections_per_ip: int = 1000  # max.connections.per.ip
    request_read_timeout: float = 30.0  # seconds from a request's first byte to its last
    max_queued_reply_bytes: int = 16 << 20  # answers not yet taken by the client; reading stops above
    max_in_flight: int = 100  # requests of one connection being handled at once


READ_SIZE = 65536  # bytes asked of the kernel per read
ACCEPT_BACKOFF = (0.01, 1.0)  # seconds: first and longest pause after accept() failed for want of resources
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class Server:
    def __init__(self, handlers: Handlers, limits: Limits):
        self.handlers = handlers
        self.limits = limits
        self.connections = 0
        self.by_address: Counter[str] = Counter()
        self.log = logs.get("groupkeeper.server")
        self._accepting_scope: trio.CancelScope | None = None
        self._connections_scope: trio.CancelScope | None = None
        self.stopped = trio.Event()
        self._watched: set[_Watch] = set()  # the connections open now, for the reaper
        # api_key * 65536 + api_version -> (handler, may wait), None if not advertised; filled on first use
        self._dispatch: dict[int, tuple[Callable, bool] | None] = {}

    async def serve(self, listeners: list[trio.SocketListener], task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept on `listeners` until `shutdown()`; then let open connections finish within
        its grace."""
        async with trio.open_nursery() as connections:
            self._connections_scope = connections.cancel_scope
            async with trio.open_nursery() as accepting:
                self._accepting_scope = accepting.cancel_scope
                for listener in listeners:
                    accepting.start_soon(self._accept, listener, connections)
                accepting.start_soon(self._reap)
                task_status.started()
            for listener in listeners:
                await listener.aclose()
        self.stopped.set()

    def shutdown(self, grace: float) -> None:
        self._accepting_scope.cancel()
        self._connections_scope.deadline = trio.current_time() + grace

    async def _accept(self, listener: trio.SocketListener, connections: trio.Nursery) -> None:
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
            connections.start_soon(self._connection, stream)

    async def _reap(self) -> None:
        """Close the connections idle too long, or whose request trickles in too slowly: one
        look at every connection a few times per timeout."""
        period = min(1.0, max(0.01, min(self.limits.idle_timeout, self.limits.request_read_timeout) / 8))
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            for watch in self._watched:
                if watch.until <= now:
                    watch.scope.cancel()

    async def _connection(self, stream: trio.SocketStream) -> None:
        peer = stream.socket.getpeername()
        log = self.log.bind(peer=f"{peer[0]}:{peer[1]}")
        refused = ("max connections reached" if self.connections >= self.limits.max_connections else
                   "max connections per address reached"
                   if self.by_address[peer[0]] >= self.limits.max_connections_per_ip else None)
        if refused:
            log.warning("connection refused", reason=refused)
            metrics.CONNECTIONS_CLOSED.labels(refused).inc()
            await stream.aclose()
            return
        # the plain socket from here on: reads and writes are tried at once and wait only
        # when the kernel says so (trio's streams take a scheduling round for each)
        sock = socket.socket(fileno=stream.socket.detach())
        self.connections += 1
        self.by_address[peer[0]] += 1
        metrics.CONNECTIONS.inc()
        reason = "peer went away"
        try:
            reason = await self._converse(sock, peer[0])
        except* (trio.BrokenResourceError, ConnectionError):
            pass
        except* _HandlerFailed as failed:
            reason = "request handler failed"
            log.error("request handler failed", api_key=failed.exceptions[0].api_key,
                      exc_info=failed.exceptions[0].__cause__)
        finally:
            self.connections -= 1
            self.by_address[peer[0]] -= 1
            if not self.by_address[peer[0]]:
                del self.by_address[peer[0]]  # one entry per address connected now, not ever
            metrics.CONNECTIONS.dec()
            trio.lowlevel.notify_closing(sock)
            sock.close()
        if reason not in _PEER_CLOSED:
            metrics.CONNECTIONS_CLOSED.labels(reason.split(":")[0]).inc()
        log.info("connection closed", reason=reason)

    async def _converse(self, sock: socket.socket, client_host: str) -> str:
        reader = FrameReader(self.limits.max_request_bytes)
        wire = _Wire(sock, self.limits.max_queued_reply_bytes)
        in_flight = trio.Semaphore(self.limits.max_in_flight)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wire.drain)
            watch = _Watch(nursery.cancel_scope)
            self._watched.add(watch)
            try:
                reason = await self._read(sock, reader, wire, in_flight, nursery, watch, client_host)
            finally:
                self._watched.discard(watch)
            nursery.cancel_scope.cancel()
            return reason
        return "request read timeout" if watch.reading else "idle timeout"  # the reaper cancelled it

    async def _read(self, sock: socket.socket, reader: FrameReader, wire: _Wire, in_flight: trio.Semaphore,
                    nursery: trio.Nursery, watch: _Watch, client_host: str) -> str:
        """Read and answer requests until the connection ends; the reason it ended."""
        started: float | None = None  # when the first byte of the request now arriving came
        dispatch = self._dispatch
        drained = True  # the last read left nothing behind: wait before reading again
        while True:
            if drained:
                idle_until = trio.current_time() + self.limits.idle_timeout
                # a request must arrive whole in time, however slowly it trickles
                read_until = math.inf if started is None else started + self.limits.request_read_timeout
                watch.reading = read_until < idle_until  # which of the two a timeout is
                # no cancel scope per wait: the reaper cancels connections past `watch.until` (a
                # scope per wait, or a deadline moved per wait, swelled full GC collections at
                # 10,000 connections: docs/benchmarks.md)
                watch.until = min(idle_until, read_until)
                await trio.lowlevel.wait_readable(sock)
                watch.until = math.inf
            else:
                await trio.lowlevel.checkpoint()  # a client that never pauses must not starve the others
            try:
                data = sock.recv(READ_SIZE)
            except BlockingIOError:
                drained = True
                continue
            drained = len(data) < READ_SIZE
            if not data:
                return "closed by peer"
            reader.feed(data)
            try:
                frames = reader.frames()
            except ProtocolError as exc:
                return f"bad frame: {exc}"
            if not reader.buffered:
                started = None
            elif frames or started is None:
                started = trio.current_time()
            for frame in frames:
                try:
                    header, request = decode_request(frame)
                except UnsupportedVersion as exc:
                    header, request = exc.header, None
                except ProtocolError as exc:
                    return f"undecodable request: {exc}"
                key = header.api_key * 65536 + header.api_version
                handler = dispatch.get(key, False)
                if handler is False:
                    handler = dispatch[key] = self.handlers.dispatch(header.api_key, header.api_version)
                if request is None or handler is None:
                    if header.api_key != API_VERSIONS.key:  # Kafka closes; only ApiVersions answers
                        return f"unsupported request: API {header.api_key} v{header.api_version}"
                    wire.add(encode_response(RequestHeader(API_VERSIONS.key, 0, header.correlation_id,
                                                           header.client_id),
                                             api_versions_response(ErrorCode.UNSUPPORTED_VERSION)))
                    continue
                # a client that does not read its answers gets no more of them computed (and,
                # once the frames already read are done, is not read either)
                if wire.bytes > wire.limit:
                    wire.flush()
                    await wire.below_limit()
                answer, waits = handler
                # the handler runs inline, in request order; one that must wait answers with a
                # coroutine, run in a task of its own (its slot taken first: no await between
                # the call and the task, so a started commit is never dropped by a cancellation)
                if waits:
                    await in_flight.acquire()
                handling = time.perf_counter()
                try:
                    body = answer(header, request, client_host)
                except Exception as exc:  # a bug: close this connection, keep serving the others
                    raise _HandlerFailed(header.api_key) from exc
                if type(body) is CoroutineType:
                    reply = _Reply(header)
                    wire.replies.append(reply)
                    nursery.start_soon(self._finish, reply, body, handling, wire, in_flight)
                    continue
                if waits:
                    in_flight.release()
                wire.add(_encoded(header, body, handling))
            wire.flush()  # every answer of this read that is ready, in one send

    @staticmethod
    async def _finish(reply: _Reply, answering, started: float, wire: _Wire, in_flight: trio.Semaphore) -> None:
        try:
            try:
                body = await answering
            except Exception as exc:  # a bug: close this connection, keep serving the others
                raise _HandlerFailed(reply.header.api_key) from exc
        finally:
            in_flight.release()
        wire.ready(reply, _encoded(reply.header, body, started))
        wire.flush()


def _encoded(header: RequestHeader, body, started: float) -> bytes:
    """The answer's frame, counted and timed (from the request decoded) in the metrics."""
    try:
        frame = encode_response(header, body)
        metrics.observe_request(header.api_key, body, time.perf_counter() - started)
    except Exception as exc:  # a bug: close this connection, keep serving the others
        raise _HandlerFailed(header.api_key) from exc
    return frame


_PEER_CLOSED = ("closed by peer", "peer went away")


class _HandlerFailed(Exception):
    def __init__(self, api_key: int):
        super().__init__(f"handler of API {api_key} failed")
        self.api_key = api_key


class _Watch:
    """When a connection's wait for its next bytes runs out (inf: not waiting), and whether
    that is the request read timeout (else the idle timeout); its scope is what the reaper
    cancels."""
    __slots__ = ("reading", "scope", "until")

    def __init__(self, scope: trio.CancelScope):
        self.scope = scope
        self.until = math.inf
        self.reading = False


class _Reply:
    __slots__ = ("frame", "header")

    def __init__(self, header: RequestHeader):
        self.header = header
        self.frame: bytes | None = None


class _Wire:
    """One connection's answers on their way out. Answers are sent in the order of their
    requests, as soon as every answer before them is ready: at once, by whoever made them
    ready, with a send that does not block; what the kernel does not take, the `drain` task
    sends as the socket becomes writable. `bytes` counts answers made but not yet sent;
    above `limit` the reader stops (`below_limit`)."""

    def __init__(self, sock: socket.socket, limit: int):
        self.sock = sock
        self.limit = limit
        self.replies: deque[bytes | _Reply] = deque()  # ready answers, and places kept for answers to come
        self.out = bytearray()  # bytes the kernel has not taken yet; `drain` owns them
        self.bytes = 0
        self._blocked = trio.Event()  # set: `out` has bytes for `drain` to send
        self._drained = trio.Event()

    def add(self, frame: bytes) -> None:
        """An answer ready as it joins the line (most are)."""
        self.replies.append(frame)
        self.bytes += len(frame)

    def ready(self, reply: _Reply, frame: bytes) -> None:
        """An answer that took its place in the line earlier, now made."""
        reply.frame = frame
        self.bytes += len(frame)

    def flush(self) -> None:
        """Send every answer ready at the head of the line, without blocking."""
        replies = self.replies
        out = []
        while replies:
            head = replies[0]
            if type(head) is not bytes:
                if head.frame is None:
                    break
                head = head.frame
            out.append(head)
            replies.popleft()
        if not out:
            return
        data = b"".join(out)
        if self.out:  # `drain` is waiting for the socket: these go after its bytes
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except OSError:  # full (BlockingIOError), or the peer is gone: `drain` meets it
            sent = 0
        self._sent(sent)
        if sent < len(data):
            self.out += data[sent:]
            self._blocked.set()

    async def drain(self) -> None:
        while True:
            await self._blocked.wait()
            while self.out:
                await trio.lowlevel.wait_writable(self.sock)
                try:
                    sent = self.sock.send(self.out)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    raise trio.BrokenResourceError(str(exc)) from exc
                del self.out[:sent]
                self._sent(sent)
            self._blocked = trio.Event()
            self.flush()  # answers made ready while the socket was full

    def _sent(self, size: int) -> None:
        self.bytes -= size
        if self.bytes <= self.limit:
            self._drained.set()

    async def below_limit(self) -> None:
        while self.bytes > self.limit:
            self._drained = trio.Event()
            await self._drained.wait()
