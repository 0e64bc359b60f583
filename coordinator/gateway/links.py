"""A client connection's own connection to a broker: `BrokerLink`.

Each client connection that relays gets one link, to the broker its port stands for (or,
on a listener's own port, to any broker), made on its first relayed request and closed with
it. Requests pass as bytes, in the order the client sent them; a broker answers a
connection's requests in order, so each answer is paired with the oldest request still
waiting (its correlation id checked), and handed to that request's `Pending`, rewritten
first if it names brokers. The link is served by the server's poll loop like a client
connection (non-blocking socket, `readable`/`writable`), so relaying costs no task.

Bounded both ways: while the link holds more than `max_queued_reply_bytes` that the broker
has not taken (of a Produce streaming, `HELD_STREAMING`: `backed_up`), the client connection
is not read (`busy`); while the client has more than
that of answers it has not taken, the broker is not read (`drained` reads it again). A
broker that cannot be reached or closes the link closes the client connection too, so that
the client looks the cluster up again; but not a link of a listener's own port that ends
with nothing asked of it (no request waiting, nothing unsent, its extras likewise): that
client's connection is groupkeeper's (its bootstrap, its group coordinator), not the
broker's, so it stays open and its next relayed request goes to another broker.

Record sets are spliced: where an answer streaming past has enough record bytes ahead that
nothing reads (the Fetch walk skips them), the link moves them from the broker's socket to
its client's by the kernel, through a pipe of its own (`serving.splice`), between plain
sockets; the client's `Outbox` keeps their place among its other bytes. The other way, a
large Produce streams (`stream_request`, `forward`): its first bytes, then its rest as its
client's connection reads it, each part sent on as it comes (copied: a broker reading
spliced bytes works harder than the copy costs, see `serving.connection.STREAM_CHUNK`),
from the connection's read buffer; what the socket does not take is kept, and once that is
more than `HELD_STREAMING` the client is read no more until the socket took it all
(`backed_up`), so that a broker slower than its producer leaves the bytes in the kernel.

Secured (`gateway_security_protocol`, `BrokerSecurity`): once connected, the link does TLS
(`TLSSocket`'s client side, driven by the poll loop) and SASL (`security.upstream.Login`:
SaslHandshake, then SaslAuthenticate with PLAIN or SCRAM) with the gateway's own
credentials before it relays anything; the client's requests wait in `queued` meanwhile
(and count towards `busy`). It fails closed: a TLS handshake or a login that fails, or does
not finish within `request_read_timeout_ms`, closes the link and the client's connection
with it, is counted (`reason` "tls" or "authentication") and is logged once per outage of
that broker.
"""

from __future__ import annotations

import errno
import socket
import ssl
import struct
from collections import deque
from collections.abc import Callable
from select import EPOLLIN, EPOLLOUT
from typing import TYPE_CHECKING, Protocol

import trio

from protocol import DecodeError, ProtocolError
from protocol.fetch_stream import FetchWalk, OnPartition, read_whole
from protocol.framing import WholeFrames
from protocol.schemas import FETCH

from .. import logs, metrics
from ..security.tls import TLSSocket
from ..security.upstream import Login, LoginFailed, UpstreamSecurity
from ..serving.outbox import Outbox
from ..serving.splice import Pipe

if TYPE_CHECKING:
    from ..serving.connection import ClientConnection
    from ..serving.pending import Pending

READ_SIZE = 256 * 1024  # bytes asked of the kernel per read: answers to fetches are large
# once a link splices (its answers' record sets moved by the kernel), reads are smaller, so
# that what follows a partition's head stays in the kernel to be spliced, not copied
SPLICING_READ_SIZE = 32 * 1024
SPLICE_MIN = 16 * 1024  # record bytes ahead worth a splice rather than a read
HELD_STREAMING = 256 * 1024  # bytes of a streaming request held here before its client waits (`backed_up`)
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # an answer's size and correlation id
# what a request waits for: its Pending, its correlation id, what rewrites its answer whole,
# and how it is read instead while it streams (a Fetch answer that may name brokers or whose
# high watermarks are read: `FetchReading`)
Waiting = tuple["Pending", int, "Callable[[bytes], bytes] | None", "FetchReading | None"]
# A link's stages: READY (0, relaying) is the only falsy one, so the data path tests one value
READY, CONNECTING, TLS, SASL = 0, 1, 2, 3
_FAILED = {"tls": "TLS with the broker failed", "authentication": "login to the broker failed"}


class Reports(Protocol):
    """Whom a link tells of its broker (`nodes.Gateway`): outages logged once, and counted."""

    def unreachable(self, link: BrokerLink, error: str) -> None: ...

    def reachable(self, link: BrokerLink) -> None: ...

    def received(self, link: BrokerLink, size: int) -> None: ...

    def spliced(self, link: BrokerLink, size: int) -> None: ...  # received, and moved by the kernel

    def malformed(self, broker: tuple[str, int], api_key: int, kind: str, error: str = "") -> None: ...

    def closed(self, link: BrokerLink, reason: str) -> None: ...

    def stream(self, link: BrokerLink, start, size: int): ...  # BrokerLink.stream_request's

    def streamed(self, link: BrokerLink, size: int) -> None: ...  # request bytes relayed as they came


class FetchReading:
    """How a relayed Fetch answer is read on its way (its high watermarks, its tagged fields
    that may name brokers): walked as it streams (called with the answer's size: a
    `FetchWalk`), or, one that came whole in one read, decoded at once (`whole`)."""
    __slots__ = ("fix", "on_partition", "version")

    def __init__(self, version: int, on_partition: OnPartition | None, fix: Callable[[bytes], bytes] | None):
        self.version, self.on_partition, self.fix = version, on_partition, fix

    def __call__(self, size: int) -> FetchWalk:
        return FetchWalk(self.version, size, on_partition=self.on_partition, fix=self.fix)

    def whole(self, frame: bytes) -> bool:
        """Whether `frame` (size prefix included) was read whole and may go on as it came
        (False: it names brokers, or does not read: walk it)."""
        return read_whole(self.version, frame, self.on_partition)


class BrokerSecurity:
    """The security of the gateway's links (`security.upstream.UpstreamSecurity`: PLAINTEXT
    by default), and what they report of it: a TLS handshake or a login refused is counted
    each time and logged once per outage of a broker, until a link to it gets through again."""

    def __init__(self, upstream: UpstreamSecurity | None = None):
        self.upstream = upstream if upstream is not None else UpstreamSecurity()
        self.tls = self.upstream.tls
        self.secured = self.upstream.secured
        self.log = logs.get("groupkeeper.gateway")
        self._failing: dict[tuple[str, int], str] = {}  # broker -> what failed ("tls", "authentication")

    def login(self) -> Login | None:
        return self.upstream.login()

    def refused(self, link: BrokerLink, kind: str, reason: str) -> None:
        metrics.GATEWAY_UPSTREAM_FAILURES.labels("any" if link.node is None else str(link.node), kind).inc()
        if self._failing.get(link.address) == kind:
            return
        self._failing[link.address] = kind
        broker = f"{link.address[0]}:{link.address[1]}"
        if kind == "authentication":
            self.log.error("broker refused the gateway's login: client connections to it are closed",
                           broker=broker, mechanism=self.upstream.mechanism, user=self.upstream.user, reason=reason)
        else:
            self.log.error("TLS with the broker failed: client connections to it are closed",
                           broker=broker, reason=reason)

    def through(self, link: BrokerLink) -> None:
        if self._failing.pop(link.address, None) is not None:
            self.log.info("the gateway's connections to the broker get through again",
                          broker=f"{link.address[0]}:{link.address[1]}")


_PLAINTEXT = BrokerSecurity()


class BrokerLink:
    __slots__ = ("address", "closed", "connection", "corked", "extras", "fd", "gateway", "gathering", "head", "heard",
                 "log", "login", "mask", "node", "out", "paused", "pipe", "queued", "reader", "security", "sock",
                 "splicing", "stage", "streaming", "timer", "waiting")

    def __init__(self, gateway: Reports, connection: ClientConnection, node: int | None,
                 address: tuple[str, int], sockaddr: tuple, family: int, security: BrokerSecurity = _PLAINTEXT):
        self.gateway = gateway
        self.connection = connection
        self.node = node  # None: a link for a listener's own port, to whichever broker
        self.address = address  # (host, port) as the cluster names it
        self.security = security
        self.log = connection.log.bind(broker=f"{address[0]}:{address[1]}")
        self.reader = WholeFrames(connection.host.limits.max_request_bytes)  # the login's answers
        self.head = bytearray()  # the next answer's size and correlation id, while incomplete
        self.heard = False  # whether the broker has sent anything since TLS
        self.streaming: tuple[Pending, int] | None = None  # an answer passed on as it arrives, and its bytes to come
        self.gathering: tuple | None = None  # an answer gathered whole: its Pending, rewrite, parts, length
        self.out = Outbox()  # requests the kernel has not taken yet
        self.queued = Outbox()  # the client's requests while the link is not READY yet
        self.waiting: deque[Waiting] = deque()
        self.login: Login | None = None  # the SASL exchange, while in it
        self.timer: trio.CancelScope | None = None  # the deadline for TLS and SASL, while they run
        self.closed = False
        self.corked = False  # requests wait in `out` for `uncork`: one send for several (`cork`)
        self.paused = False  # not read: its client has too many answers not taken (or its pipe is full)
        self.pipe: Pipe | None = None  # where it splices record sets, once it has (plain sockets only)
        self.splicing = 0  # bytes of the answer streaming now that are to be spliced, not read
        # the client connection's links to other brokers, kept by this one (its upstream) and
        # closed with it: where its share groups' requests are routed, by group
        self.extras: list[BrokerLink] = []
        self.sock: socket.socket | TLSSocket = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fd = self.sock.fileno()
        self.stage = CONNECTING
        self.mask = EPOLLOUT  # a non-blocking connect ends with the socket writable
        connection.host.attach(self, self.mask)
        error = self.sock.connect_ex(sockaddr)
        if error not in (0, errno.EINPROGRESS):
            self.gateway.unreachable(self, errno.errorcode.get(error, str(error)))
            return self.close(f"cannot connect: {errno.errorcode.get(error, error)}")
        if security.secured:  # connected, through TLS and SASL by then, or closed
            self.timer = trio.CancelScope()
            connection.host.start_soon(self._expire, trio.current_time() + connection.host.limits.request_read_timeout)

    @property
    def busy(self) -> bool:
        size = self.out.size + self.queued.size
        if self.extras:
            size += sum(x.out.size + x.queued.size for x in self.extras)
        return size > self.connection.host.limits.max_queued_reply_bytes

    def send(self, frame: bytes, waiting: Waiting | None) -> None:
        """Relay one request frame (without its size); `waiting` None: it has no answer, or
        the caller adds it (`expect`) once the frame has gone."""
        if waiting is not None:
            self.waiting.append(waiting)
        size = _SIZE.pack(len(frame))  # size and frame as two buffers: a Produce's records are not copied
        if self.corked:  # sent with the others of its read (`uncork`)
            self.out.add(size)
            self.out.add(frame)
            return
        if self.stage or self.out or type(self.sock) is not socket.socket:
            box = self.queued if self.stage else self.out  # not through yet: after the link's own requests
            box.add(size)
            box.add(frame)
            if box is self.out and box.size == 4 + len(frame):  # nothing else waits for the socket: now
                self._flush()
                if self.out and not self.closed:
                    self._watch()
            return
        self.send_now(size, frame)  # the common case: nothing waits, a plain socket

    def cork(self) -> bool:
        """Hold the requests `send` is given until `uncork`, then send them in one call: its
        client's requests that one read brought (`ClientConnection.handle`). Whether it did
        (not before the link is through, nor with requests waiting for the socket or TLS)."""
        if self.stage or self.out or self.closed or type(self.sock) is not socket.socket:
            return False
        self.corked = True
        return True

    def uncork(self) -> None:
        """Send the requests held since `cork`; what the socket does not take waits for it."""
        self.corked = False
        if self.out and not self.closed:  # its client may have paused for what it held
            self._send_held()

    def express(self, data: bytes):
        """`data`, one whole request read as it came (its size first), relayed as it is in one
        call if it is the gateway's to (`Gateway.express`) and nothing waits to go before it:
        its answer's Pending (None: it has none), or False (then it is relayed as any)."""
        if self.stage or self.out or self.extras or self.closed or type(self.sock) is not socket.socket:
            return False
        return self.gateway.express(self, data)

    def send_now(self, *parts, copy: bool = False) -> None:
        """Send `parts` (a request, its size first; or a part of one streaming) in one call,
        with nothing queued before them on this plain socket (`express` checked); what the
        socket does not take waits, a copy of it with `copy` (a buffer that is used again)."""
        if self.corked:  # sent with the others of its read (`uncork`)
            for part in parts:
                self.out.add(bytes(part) if copy else part)
            return
        try:
            sent = self.sock.sendmsg(parts) if len(parts) > 1 else self.sock.send(parts[0])
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            return self._ended(f"broker went away: {exc.strerror or exc}")
        for part in parts:
            if sent < len(part):
                rest = memoryview(part)[sent:]
                self.out.add(bytes(rest) if copy else rest)
            sent = max(sent - len(part), 0)
        if self.out:
            self._watch()

    def expect(self, waiting: Waiting) -> None:
        """The answer to the request `send` has just relayed with no `Waiting`: nothing of
        this link is read before the serving loop has the socket again, so it may be set up
        after the request went out (off the path a request's latency is measured on)."""
        if self.closed:  # the send found the broker gone: the request is lost, and so is its client
            return self.connection.close("broker link: it closed as a request was relayed")
        self.waiting.append(waiting)

    def stream_request(self, start, size: int):
        """A request of `size` bytes of which `start` has come, relayed as the rest comes
        (`forward`): its answer's Pending (None: it has none), or False where it is not
        (the gateway's `stream` decides; a link not yet through or with TLS never does)."""
        if self.stage or self.closed or type(self.sock) is not socket.socket:
            return False
        return self.gateway.stream(self, start, size)

    def send_start(self, size: int, start, waiting: Waiting | None) -> None:
        """`send` for a request of `size` bytes of which `start` is all that came: its rest
        follows with `forward`, before anything else is sent here."""
        if waiting is not None:
            self.waiting.append(waiting)
        self.out.add(_SIZE.pack(size))
        self.out.add(start)
        if not self.mask & EPOLLOUT:  # not waiting for room in the socket: now
            self._flush()
        if self.out and not self.closed:
            self._watch()

    @property
    def backed_up(self) -> bool:
        """Whether the request streaming should wait for the socket: the kernel did not take
        the last `HELD_STREAMING` bytes given it. The client's bytes then wait in the kernel,
        as a relay's do, not here (megabytes held here cost the copies and page faults the
        produce figures showed: docs/benchmarks.md, "A Produce's rest read into one buffer")."""
        return self.out.size > HELD_STREAMING

    def forward(self, part) -> None:
        """The next bytes of the request streaming (`send_start`), as its client sent them:
        a view of its connection's read buffer, sent now or copied (it is read into again)."""
        self.gateway.streamed(self, len(part))
        if self.out:  # after what waits for room in the socket
            self.out.add(bytes(part))
            self._watch()
        else:  # nothing waits before it: from the buffer as it is
            self.send_now(part, copy=True)

    def _flush(self) -> None:
        try:
            self.out.send(self.sock)
        except BlockingIOError:
            pass
        except ssl.SSLError as exc:
            self._refused("tls", str(exc.reason or exc))
        except OSError as exc:
            self._ended(f"broker went away: {exc.strerror or exc}")

    def writable(self) -> None:
        if self.stage == CONNECTING:
            error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                self.gateway.unreachable(self, errno.errorcode.get(error, str(error)))
                return self.close(f"cannot connect: {errno.errorcode.get(error, error)}")
            self.gateway.reachable(self)
            return self._connected()
        if self.stage == TLS:
            return self._handshake()
        self._send_held()

    def _send_held(self) -> None:
        """Send what waits in `out` as far as the socket takes it, then wait for room for the
        rest, or let the client go on if it waited for room here (`writable`, `uncork`)."""
        if self.out:
            self._flush()
            if self.closed:
                return
        self._watch()
        if not self.out and not self.stage and (self.connection.backlog or self.connection.pass_paused):
            self.connection.go_on()  # its client waited for room here

    def readable(self) -> None:
        if self.stage == TLS:
            return self._handshake()
        if self.splicing:
            return self._splice()
        try:
            data = self.sock.recv(READ_SIZE if self.pipe is None else SPLICING_READ_SIZE)
        except BlockingIOError:
            return
        except ssl.SSLError as exc:  # an alert: a broker that refuses our certificate says so here (TLS 1.3)
            return self._refused("tls", str(exc.reason or exc))
        except OSError as exc:
            return self._ended(f"broker went away: {exc.strerror or exc}")
        if not data:
            return self._ended("closed by the broker")
        self.heard = True
        if self.stage == SASL:
            try:
                frames = self.reader.feed(data)
            except ProtocolError as exc:
                return self._refused("authentication", f"bad frame from the broker during SASL: {exc}")
            if self._logging_in(frames) and not self.closed:  # no request of the client's went yet
                self.close("the broker answered what was not asked")
            return
        try:
            self._answers(data)
        except ProtocolError as exc:
            return self.close(f"bad frame from the broker: {exc}")
        finally:  # counted once what could go out has gone
            self.gateway.received(self, len(data))
        if self.closed:
            return
        if self.connection.bytes > self.connection.host.limits.max_queued_reply_bytes:
            self.paused = True
            self._watch()
        elif self.streaming is not None:
            self._may_splice()

    def _answers(self, data: bytes) -> None:
        """The broker's answers in `data`, each to the oldest request waiting (its correlation
        id checked). An answer that names no broker and is the next its client is owed is
        passed on as it arrives, part by part (cut through: a 5 MB Fetch answer is not held
        whole before its first byte goes out, which cost fetch throughput a third); one that
        must be rewritten, or waits behind other answers, is gathered whole (one copy) first.
        Answers that end in `data` with more after them go to the client together, in one
        send (`ClientConnection.cork`)."""
        connection = self.connection
        try:
            self._each_answer(data, connection)
        finally:
            if connection.corked:
                connection.uncork()

    def _each_answer(self, data: bytes, connection: ClientConnection) -> None:
        n, pos = len(data), 0
        view = memoryview(data)
        while pos < n and not self.closed:
            if self.streaming is not None:  # an answer going out as it arrives
                pending, left, walk = self.streaming
                take = min(left, n - pos)
                if take < n - pos and not connection.corked:  # more after its end: sent with it
                    connection.cork()
                part = data if take == n else view[pos:pos + take]
                pos += take
                self.streaming = (pending, left - take, walk) if left > take else None
                if walk is None:
                    self.connection.pass_on(pending.place, part, left == take)
                else:
                    self._walked(pending, walk, part)
                continue
            if self.gathering is not None:  # an answer gathered whole
                pending, rewrite, parts, need, walks = self.gathering
                have = sum(map(len, parts))
                take = min(need - have, n - pos)
                if take < n - pos and not connection.corked:
                    connection.cork()
                whole = not parts and take == need
                part = (data if take == n else data[pos:pos + take]) if whole else view[pos:pos + take]
                pos += take
                if whole or have + take == need:
                    self.gathering = None
                    frame = part if whole else b"".join([*parts, part])
                    if walks is not None:  # a Fetch: its high watermarks read, whole
                        try:
                            walks(need - 4).feed(frame)
                        except DecodeError as exc:
                            if rewrite is not None:  # it may name brokers: not passed on unread
                                raise
                            self.gateway.malformed(self.address, FETCH.key, "relayed", str(exc))
                    pending.resolve(_Answer(frame if rewrite is None else rewrite(frame[4:])))
                else:
                    parts.append(part)
                continue
            # the next answer: its size and correlation id first (in `head` while incomplete)
            if self.head or n - pos < 8:
                take = min(8 - len(self.head), n - pos)
                self.head += view[pos:pos + take]
                pos += take
                if len(self.head) < 8:
                    return
                head, self.head = bytes(self.head), bytearray()
                size, correlation_id = _HEAD.unpack(head)
                started = [head]  # the answer's bytes so far: not in `data` any more
            else:
                size, correlation_id = _HEAD.unpack_from(data, pos)
                started = []
            if not 4 <= size <= self.reader.max_frame:
                raise ProtocolError(f"an answer of {size} bytes")
            if not self.waiting:
                return self.close("the broker answered what was not asked")
            pending, expected, rewrite, walks = self.waiting.popleft()
            if correlation_id != expected:
                return self.close("the broker answered out of order")
            if pos == 0 and n == 4 + size and connection.at_head(pending.place):
                # the data path's common case (a Produce's answer, a Fetch's): one answer,
                # whole, and the next its client is owed: out at once, with no Pending to resolve
                if walks is None:
                    return self.connection.pass_on(pending.place, data if rewrite is None else rewrite(data[4:]), True)
                # decoded at once, not walked (the generated decoder, 15-28 us against the walk's
                # 39-41 for 1-256 KiB, docs/benchmarks.md): nothing in it to rewrite
                if walks.whole(data):
                    return self.connection.pass_on(pending.place, data, True)
            if 4 + size - (8 if started else 0) < n - pos and not connection.corked:
                connection.cork()
            # streamed: an answer left as it is (walked as it passes, if it is a Fetch whose
            # high watermarks are read), or one to rewrite that is walked and is not here
            # whole (one that is, is rewritten whole: its size may change then)
            if (rewrite is None or (walks is not None and (started or 4 + size > n - pos))) \
                    and self.connection.at_head(pending.place):
                walk = None if walks is None else walks(size)
                left = 4 + size - sum(map(len, started))
                self.streaming = (pending, left, walk) if left else None
                for part in started:
                    if walk is None:
                        self.connection.pass_on(pending.place, part, not left)
                    else:
                        self._walked(pending, walk, part)
            else:
                self.gathering = (pending, rewrite, started, 4 + size, walks)

    def _walked(self, pending: Pending, walk: FetchWalk, part) -> None:
        """Pass on what `walk` lets go of `part` now; at the answer's end, its held tail fixed.
        An answer the walk cannot follow is passed on as it came from there, if nothing in it
        is to be rewritten (its high watermarks were all the walk was for)."""
        try:
            go = walk.feed(part)
        except DecodeError as exc:
            if walk.fixes:  # it may name brokers: not passed on unread
                raise
            self.gateway.malformed(self.address, FETCH.key, "relayed", str(exc))
            last = self.streaming is None
            if not last:
                self.streaming = (self.streaming[0], self.streaming[1], None)
            self.connection.pass_on(pending.place, walk.unsent() + bytes(part), last)
            return
        if walk.done:
            tail = walk.tail()
            if go:
                self.connection.pass_on(pending.place, part if go == len(part) else part[:go], not tail)
            if tail:
                self.connection.pass_on(pending.place, tail, True)
        elif go:
            self.connection.pass_on(pending.place, part if go == len(part) else part[:go], False)

    def _may_splice(self) -> None:
        """Splice what is ahead of the answer streaming now if it is records the walk skips
        (or an answer passed on unwalked), enough of them, and both sockets are plain."""
        pending, left, walk = self.streaming
        size = left if walk is None else min(walk.skipping, left)
        if size < SPLICE_MIN:
            return
        if self.pipe is None:
            if type(self.sock) is not socket.socket or type(self.connection.sock) is not socket.socket:
                return  # TLS: its bytes pass through OpenSSL
            self.pipe = Pipe.open()
            if self.pipe is None:  # none left (splice.MAX_PIPES) or no descriptors: copied
                return
        self.splicing = size
        self._splice()

    def _splice(self) -> None:
        """Move the next `splicing` bytes from the broker to the client's line through the
        pipe, as they come, as far as the pipe and the client's limit allow (`drained`
        reads on once its client has taken what was spliced)."""
        pipe, connection = self.pipe, self.connection
        limit = connection.host.limits.max_queued_reply_bytes
        while self.splicing:
            if not pipe.room:
                self.paused = True
                return self._watch()
            try:
                piped = pipe.fill(self.fd, self.splicing)
            except BlockingIOError:
                return
            except OSError as exc:
                return self._ended(f"broker went away: {exc.strerror or exc}")
            n = piped.size
            if not n:
                return self._ended("closed by the broker")
            self.gateway.spliced(self, n)
            self.splicing -= n
            pending, left, walk = self.streaming
            left -= n
            self.streaming = (pending, left, walk) if left else None
            tail = b""
            if walk is not None:
                try:
                    walk.skipped(n)
                except DecodeError as exc:  # where the records end, the answer does not follow
                    if walk.fixes:  # it may name brokers: not passed on unread (the pipe goes too)
                        return self.close(f"bad frame from the broker: {exc}")
                    self.gateway.malformed(self.address, FETCH.key, "relayed", str(exc))
                    self.streaming = (pending, left, None) if left else None
                else:
                    tail = walk.tail() if walk.done else b""
            connection.pass_on(pending.place, piped, not left and not tail)
            if tail:
                connection.pass_on(pending.place, tail, True)
            if self.closed or connection.closed:
                return
            if connection.bytes > limit:
                self.paused = True
                return self._watch()

    def drained(self) -> None:
        """Its client took its answers: read the broker again (and the others it keeps)."""
        if self.paused and not self.closed:
            self.paused = False
            self._watch()
        for extra in self.extras:
            extra.drained()

    def _watch(self) -> None:
        if self.stage == CONNECTING:
            mask = EPOLLOUT
        elif self.stage == TLS:
            mask = EPOLLIN | (EPOLLOUT if self.sock.wants_write else 0)
        else:
            mask = (0 if self.paused else EPOLLIN) | (EPOLLOUT if self.out and not self.corked else 0)
        if mask != self.mask and not self.closed:
            self.connection.host.watch(self.fd, mask)
            self.mask = mask

    # -- getting through: TLS, then SASL -------------------------------------------------

    def _connected(self) -> None:
        if self.security.tls is not None:
            self.stage = TLS
            self.sock = TLSSocket.client(self.sock, self.security.tls,
                                         self.security.upstream.server_hostname(self.address[0]))
            return self._handshake()
        self._log_in()

    def _handshake(self) -> None:
        try:
            done = self.sock.handshake()
        except ssl.SSLError as exc:
            return self._refused("tls", f"handshake: {exc.reason or exc}"
                                 + (f" ({exc.verify_message})" if getattr(exc, "verify_message", None) else ""))
        except OSError as exc:
            return self._refused("tls", f"handshake: {exc.strerror or exc}")
        if done:
            return self._log_in()
        self._watch()

    def _log_in(self) -> None:
        self.login = self.security.login()
        if self.login is None:
            return self._through()
        self.stage = SASL
        self.out.add(self.login.first())
        self.writable()

    def _logging_in(self, frames: list[bytes]) -> list[bytes]:
        """Hand the login its answers; the frames after it is through (none, from a broker
        that answers only what it is asked)."""
        for i, frame in enumerate(frames):
            try:
                request = self.login.feed(frame[4:])
            except LoginFailed as exc:
                self._refused("authentication", str(exc))
                return []
            if request is None:
                self._through()
                return frames[i + 1:]
            self.out.add(request)
            self.writable()
            if self.closed:
                return []
        return []

    def _through(self) -> None:
        """TLS and SASL are through (or were not asked for): relay the client's requests."""
        self.stage = READY
        self.login = None
        if self.timer is not None:
            self.timer.cancel()
            self.security.through(self)
        self.out.take(self.queued)
        self.writable()

    async def _expire(self, deadline: float) -> None:
        with self.timer:
            await trio.sleep_until(deadline)
            if self.closed or not self.stage:
                return
            if self.stage == CONNECTING:
                self.gateway.unreachable(self, "ETIMEDOUT")
                return self.close("cannot connect: ETIMEDOUT")
            self._refused("tls" if self.stage == TLS else "authentication",
                          "not through in time (TLS and SASL must be within request_read_timeout_ms)")

    def _ended(self, reason: str) -> None:
        """The broker reset or closed the link. During SASL, the login failed; over TLS before
        the broker said anything, TLS did: with TLS 1.3 a broker that refuses our certificate
        does so after the handshake has ended on our side, and its alert is lost when it
        resets the connection. Otherwise an ordinary end, which the client's connection shares."""
        if self.stage == SASL:
            return self._refused("authentication", f"{reason} during SASL")
        if self.security.tls is not None and not self.heard:
            return self._refused("tls", f"{reason} before its first answer")
        # a listener's own port: its client did not come for this broker, which owes it nothing
        self.close(reason, client=self.node is not None or not self.idle)

    @property
    def idle(self) -> bool:
        """Nothing asked of it: no answer owed or under way, nothing unsent (its extras' too)."""
        return (not self.waiting and self.streaming is None and self.gathering is None and not self.head
                and not self.out and not self.queued and all(x.idle for x in self.extras))

    def _refused(self, kind: str, reason: str) -> None:
        """TLS or SASL with the broker failed (`kind`): fail closed, the client's connection too."""
        if self.closed:
            return
        self.security.refused(self, kind, reason)
        self.close(f"{_FAILED[kind]}: {reason}")

    def close(self, reason: str, client: bool = True) -> None:
        """Close the link, its extras and (unless `client` is False) its client's connection."""
        if self.closed:
            return
        self.closed = True
        self.splicing = 0
        if self.timer is not None:
            self.timer.cancel()
        self.connection.host.detach(self)
        self.sock.close()
        self.waiting.clear()
        self.queued = Outbox()
        self.gateway.closed(self, reason)
        for extra in self.extras:
            extra.close(reason if extra.connection.closed else
                        "its client's connection closed" if client else "its upstream link ended", client)
        self.extras = []
        if client:
            self.connection.close(f"broker link: {reason}")
        if self.pipe is not None:  # what it holds is its client's, unless that has gone
            if self.connection.closed:
                self.pipe.close()
            else:
                self.pipe.release()


class _Answer:
    """A `Pending`'s answer that is a frame already."""
    __slots__ = ("frame",)

    def __init__(self, frame: bytes):
        self.frame = frame

    def __call__(self) -> bytes:
        return self.frame
