"""The Kafka-protocol TCP server: one trio task per connection.

Requests on a connection are handled concurrently (clients pipeline them) and answered in
the order they came: a reply waits for the replies before it, and every reply ready at
once goes out in one write. A JoinGroup that waits for its generation holds back only the
replies behind it on its own connection. A frame that cannot be decoded, a size over the
limit, or an unknown API closes that connection only, with the reason logged.
"""

from __future__ import annotations

import errno
from collections import Counter, deque
from dataclasses import dataclass

import trio

from protocol import (ErrorCode, FrameReader, ProtocolError, RequestHeader, UnsupportedVersion,
                      decode_request, encode_response)
from protocol.schemas import API_VERSIONS, APIS

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

    async def serve(self, listeners: list[trio.SocketListener], task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept on `listeners` until `shutdown()`; then let open connections finish within
        its grace."""
        async with trio.open_nursery() as connections:
            self._connections_scope = connections.cancel_scope
            async with trio.open_nursery() as accepting:
                self._accepting_scope = accepting.cancel_scope
                for listener in listeners:
                    accepting.start_soon(self._accept, listener, connections)
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
        self.connections += 1
        self.by_address[peer[0]] += 1
        metrics.CONNECTIONS.inc()
        reason = "peer went away"
        try:
            reason = await self._converse(stream, peer[0])
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionResetError):
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
            await stream.aclose()
        if reason not in _PEER_CLOSED:
            metrics.CONNECTIONS_CLOSED.labels(reason.split(":")[0]).inc()
        log.info("connection closed", reason=reason)

    async def _converse(self, stream: trio.SocketStream, client_host: str) -> str:
        reader = FrameReader(self.limits.max_request_bytes)
        replies: deque[_Reply] = deque()
        queue = _ReplyQueue(self.limits.max_queued_reply_bytes)
        in_flight = trio.Semaphore(self.limits.max_in_flight)
        started: float | None = None  # when the first byte of the request now arriving came
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write, stream, replies, queue)
            while True:
                deadline = trio.current_time() + self.limits.idle_timeout
                if started is not None:  # a request must arrive whole in time, however slowly it trickles
                    deadline = min(deadline, started + self.limits.request_read_timeout)
                with trio.move_on_at(deadline) as waited:
                    data = await stream.receive_some(65536)
                if waited.cancelled_caught:
                    nursery.cancel_scope.cancel()
                    return "idle timeout" if started is None else "request read timeout"
                if not data:
                    nursery.cancel_scope.cancel()
                    return "closed by peer"
                reader.feed(data)
                try:
                    frames = reader.frames()
                except ProtocolError as exc:
                    nursery.cancel_scope.cancel()
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
                        nursery.cancel_scope.cancel()
                        return f"undecodable request: {exc}"
                    reply = _Reply(header)
                    if request is None or not self.handlers.supports(header.api_key, header.api_version):
                        if header.api_key != API_VERSIONS.key:  # Kafka closes; only ApiVersions answers
                            nursery.cancel_scope.cancel()
                            return f"unsupported request: API {header.api_key} v{header.api_version}"
                        reply.header = RequestHeader(API_VERSIONS.key, 0, header.correlation_id,
                                                     header.client_id)
                        replies.append(reply)
                        queue.ready(reply, encode_response(reply.header, api_versions_response(
                            ErrorCode.UNSUPPORTED_VERSION)))
                        continue
                    replies.append(reply)
                    # a client that does not read its answers gets no more of them computed (and,
                    # once the frames already read are done, is not read either)
                    await queue.below_limit()
                    await in_flight.acquire()
                    nursery.start_soon(self._handle, reply, request, client_host, queue, in_flight)

    async def _handle(self, reply: _Reply, request, client_host: str, queue: _ReplyQueue, in_flight) -> None:
        started = trio.current_time()
        try:
            body = await self.handlers.handle(reply.header, request, client_host)
            frame = encode_response(reply.header, body)
            metrics.observe_request(_API_NAMES[reply.header.api_key], body, trio.current_time() - started)
        except Exception as exc:  # a bug: close this connection, keep serving the others
            raise _HandlerFailed(reply.header.api_key) from exc
        finally:
            in_flight.release()
        queue.ready(reply, frame)

    async def _write(self, stream: trio.SocketStream, replies: deque, queue: _ReplyQueue) -> None:
        """Send every reply that is ready, in order; then wait for the next one."""
        while True:
            out = []
            while replies and replies[0].frame is not None:
                out.append(replies.popleft().frame)
            if out:
                data = b"".join(out)
                await stream.send_all(data)
                queue.sent(len(data))
            else:
                await queue.wait_ready()


_PEER_CLOSED = ("closed by peer", "peer went away")
_API_NAMES = {key: api.name for key, api in APIS.items()}


class _HandlerFailed(Exception):
    def __init__(self, api_key: int):
        super().__init__(f"handler of API {api_key} failed")
        self.api_key = api_key


class _Reply:
    __slots__ = ("header", "frame")

    def __init__(self, header: RequestHeader):
        self.header = header
        self.frame: bytes | None = None


class _ReplyQueue:
    """The bytes of one connection's answers not yet sent, and the events around them: a
    reply became ready (the writer wakes), the total fell back under the limit (the reader
    goes on)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.bytes = 0
        self._ready = trio.Event()
        self._drained = trio.Event()

    def ready(self, reply: _Reply, frame: bytes) -> None:
        reply.frame = frame
        self.bytes += len(frame)
        self._ready.set()

    async def wait_ready(self) -> None:
        await self._ready.wait()
        self._ready = trio.Event()

    def sent(self, size: int) -> None:
        self.bytes -= size
        if self.bytes <= self.limit:
            self._drained.set()

    async def below_limit(self) -> None:
        while self.bytes > self.limit:
            self._drained = trio.Event()
            await self._drained.wait()
