"""The Kafka-protocol TCP server: one trio task per connection.

Requests on a connection are handled concurrently (clients pipeline them) and answered in
the order they came: a reply waits for the replies before it, and every reply ready at
once goes out in one write. A JoinGroup that waits for its generation holds back only the
replies behind it on its own connection. A frame that cannot be decoded, a size over the
limit, or an unknown API closes that connection only, with the reason logged.
"""

from __future__ import annotations

from collections import deque
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
    max_in_flight: int = 100  # requests of one connection being handled at once


class Server:
    def __init__(self, handlers: Handlers, limits: Limits):
        self.handlers = handlers
        self.limits = limits
        self.connections = 0
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
        while True:
            stream = await listener.accept()
            connections.start_soon(self._connection, stream)

    async def _connection(self, stream: trio.SocketStream) -> None:
        peer = stream.socket.getpeername()
        log = self.log.bind(peer=f"{peer[0]}:{peer[1]}")
        if self.connections >= self.limits.max_connections:
            log.warning("connection refused", reason="max connections reached")
            metrics.CONNECTIONS_CLOSED.labels("max connections reached").inc()
            await stream.aclose()
            return
        self.connections += 1
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
            metrics.CONNECTIONS.dec()
            await stream.aclose()
        if reason not in _PEER_CLOSED:
            metrics.CONNECTIONS_CLOSED.labels(reason.split(":")[0]).inc()
        log.info("connection closed", reason=reason)

    async def _converse(self, stream: trio.SocketStream, client_host: str) -> str:
        reader = FrameReader(self.limits.max_request_bytes)
        replies: deque[_Reply] = deque()
        ready = trio.Event()
        in_flight = trio.Semaphore(self.limits.max_in_flight)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._write, stream, replies, lambda: ready)

            def wake():
                nonlocal ready
                ready.set()
                ready = trio.Event()

            while True:
                with trio.move_on_after(self.limits.idle_timeout) as idle:
                    data = await stream.receive_some(65536)
                if idle.cancelled_caught:
                    nursery.cancel_scope.cancel()
                    return "idle timeout"
                if not data:
                    nursery.cancel_scope.cancel()
                    return "closed by peer"
                reader.feed(data)
                try:
                    frames = reader.frames()
                except ProtocolError as exc:
                    nursery.cancel_scope.cancel()
                    return f"bad frame: {exc}"
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
                        reply.frame = encode_response(reply.header, api_versions_response(
                            ErrorCode.UNSUPPORTED_VERSION))
                        replies.append(reply)
                        wake()
                        continue
                    replies.append(reply)
                    await in_flight.acquire()
                    nursery.start_soon(self._handle, reply, request, client_host, wake, in_flight)

    async def _handle(self, reply: _Reply, request, client_host: str, wake, in_flight) -> None:
        started = trio.current_time()
        try:
            body = await self.handlers.handle(reply.header, request, client_host)
            reply.frame = encode_response(reply.header, body)
            metrics.observe_request(_API_NAMES[reply.header.api_key], body, trio.current_time() - started)
        except Exception as exc:  # a bug: close this connection, keep serving the others
            raise _HandlerFailed(reply.header.api_key) from exc
        finally:
            in_flight.release()
        wake()

    async def _write(self, stream: trio.SocketStream, replies: deque, ready) -> None:
        """Send every reply that is ready, in order; then wait for the next one."""
        while True:
            out = []
            while replies and replies[0].frame is not None:
                out.append(replies.popleft().frame)
            if out:
                await stream.send_all(b"".join(out))
            else:
                await ready().wait()


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
