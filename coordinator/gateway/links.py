"""A client connection's own connection to a broker: `BrokerLink`.

Each client connection that relays gets one link, to the broker its port stands for (or,
on a listener's own port, to any broker), made on its first relayed request and closed with
it. Requests pass as bytes, in the order the client sent them; a broker answers a
connection's requests in order, so each answer is paired with the oldest request still
waiting (its correlation id checked), and handed to that request's `Pending`, rewritten
first if it names brokers. The link is served by the server's poll loop like a client
connection (non-blocking socket, `readable`/`writable`), so relaying costs no task.

Bounded both ways: while the link holds more than `max_queued_reply_bytes` that the broker
has not taken, the client connection is not read (`busy`); while the client has more than
that of answers it has not taken, the broker is not read (`drained` reads it again). A
broker that cannot be reached or closes the link closes the client connection too, so that
the client looks the cluster up again.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections import deque
from collections.abc import Callable
from select import EPOLLIN, EPOLLOUT
from typing import TYPE_CHECKING, Protocol

from protocol import FrameReader, ProtocolError

if TYPE_CHECKING:
    from ..serving.connection import ClientConnection
    from ..serving.pending import Pending

READ_SIZE = 256 * 1024  # bytes asked of the kernel per read: answers to fetches are large
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
# what a request waits for: its Pending, its correlation id, and what rewrites its answer
Waiting = tuple["Pending", int, "Callable[[bytes], bytes] | None"]


class Reports(Protocol):
    """Whom a link tells of its broker (`nodes.Gateway`): outages logged once, and counted."""

    def unreachable(self, link: BrokerLink, error: str) -> None: ...

    def reachable(self, link: BrokerLink) -> None: ...

    def received(self, link: BrokerLink, size: int) -> None: ...

    def closed(self, link: BrokerLink, reason: str) -> None: ...


class BrokerLink:
    __slots__ = ("address", "closed", "connecting", "connection", "fd", "gateway", "log", "mask", "node", "out",
                 "paused", "reader", "sock", "waiting")

    def __init__(self, gateway: Reports, connection: ClientConnection, node: int | None,
                 address: tuple[str, int], sockaddr: tuple, family: int):
        self.gateway = gateway
        self.connection = connection
        self.node = node  # None: a link for a listener's own port, to whichever broker
        self.address = address  # (host, port) as the cluster names it
        self.log = connection.log.bind(broker=f"{address[0]}:{address[1]}")
        self.reader = FrameReader(connection.host.limits.max_request_bytes)
        self.out = bytearray()  # requests the kernel has not taken yet
        self.waiting: deque[Waiting] = deque()
        self.closed = False
        self.paused = False  # not read: its client has too many answers not taken
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fd = self.sock.fileno()
        self.connecting = True
        self.mask = EPOLLOUT  # a non-blocking connect ends with the socket writable
        connection.host.attach(self, self.mask)
        error = self.sock.connect_ex(sockaddr)
        if error not in (0, errno.EINPROGRESS):
            self.gateway.unreachable(self, errno.errorcode.get(error, str(error)))
            self.close(f"cannot connect: {errno.errorcode.get(error, error)}")

    @property
    def busy(self) -> bool:
        return len(self.out) > self.connection.host.limits.max_queued_reply_bytes

    def send(self, frame: bytes, waiting: Waiting | None) -> None:
        """Relay one request frame (without its size); `waiting` None: it has no answer."""
        if waiting is not None:
            self.waiting.append(waiting)
        data = _SIZE.pack(len(frame)) + frame
        if self.out or self.connecting:
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            return self.close(f"broker went away: {exc.strerror or exc}")
        if sent < len(data):
            self.out += memoryview(data)[sent:]
            self._watch()

    def writable(self) -> None:
        if self.connecting:
            error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self.gateway.unreachable(self, errno.errorcode.get(error, str(error)))
                return self.close(f"cannot connect: {errno.errorcode.get(error, error)}")
            self.connecting = False
            self.gateway.reachable(self)
        if self.out:
            try:
                sent = self.sock.send(self.out)
            except BlockingIOError:
                return
            except OSError as exc:
                return self.close(f"broker went away: {exc.strerror or exc}")
            del self.out[:sent]
        self._watch()
        if not self.out and self.connection.backlog:  # its client waited for room here
            self.connection.go_on()

    def readable(self) -> None:
        try:
            data = self.sock.recv(READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            return self.close(f"broker went away: {exc.strerror or exc}")
        if not data:
            return self.close("closed by the broker")
        self.gateway.received(self, len(data))
        self.reader.feed(data)
        try:
            frames = self.reader.frames()
        except ProtocolError as exc:
            return self.close(f"bad frame from the broker: {exc}")
        for frame in frames:
            if not self.waiting:
                return self.close("the broker answered what was not asked")
            pending, correlation_id, rewrite = self.waiting.popleft()
            if len(frame) < 4 or _CORRELATION.unpack_from(frame)[0] != correlation_id:
                return self.close("the broker answered out of order")
            try:
                answer = _SIZE.pack(len(frame)) + frame if rewrite is None else rewrite(frame)
            except ProtocolError as exc:  # an answer we must rewrite and cannot read
                return self.close(f"unreadable answer from the broker: {exc}")
            pending.resolve(_Answer(answer))
            if self.closed:
                return
        if self.connection.bytes > self.connection.host.limits.max_queued_reply_bytes:
            self.paused = True
            self._watch()

    def drained(self) -> None:
        """Its client took its answers: read the broker again."""
        if self.paused and not self.closed:
            self.paused = False
            self._watch()

    def _watch(self) -> None:
        mask = (0 if self.paused or self.connecting else EPOLLIN) | (EPOLLOUT if self.out or self.connecting else 0)
        if mask != self.mask and not self.closed:
            self.connection.host.watch(self.fd, mask)
            self.mask = mask

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.connection.host.detach(self)
        self.sock.close()
        self.waiting.clear()
        self.gateway.closed(self, reason)
        self.connection.close(f"broker link: {reason}")


class _Answer:
    """A `Pending`'s answer that is a frame already."""
    __slots__ = ("frame",)

    def __init__(self, frame: bytes):
        self.frame = frame

    def __call__(self) -> bytes:
        return self.frame
