"""One client connection: its bytes in, its requests handled in order, its answers out in
the same order.

Every request is handled inline as its frame arrives, in order; only the part of a request
that waits gets a task of its own (a JoinGroup for its generation), or a callback (a commit,
when ZooKeeper confirms it), and its answer keeps its place in the line: a reply waits for the replies before it, and
every reply ready at once goes out in one send. A connection that has too many waiting
requests, or too many answers its client has not taken, is paused: the frames it has read
wait, and it is not read again until it can go on. Past that limit no answer is made for it,
those of waiting requests included: a task waits to start, or to make a `Deferred` answer,
until its client has read (see `_room`). A frame that cannot be decoded, a size
over the limit, or an unknown API closes that connection only, with the reason logged:
once per burst (`Churn`), so that a client reconnecting in a loop costs a line, not a line
a connection. A large request its upstream takes as it comes (a Produce through the
gateway) is not held whole: its rest is read a chunk at a time and handed on as it comes
(`_stream`, `_pass`).
"""

from __future__ import annotations

import math
import socket
import ssl
import struct
import threading
import time
from collections import deque
from functools import partial
from select import EPOLLIN, EPOLLOUT
from types import CoroutineType
from typing import TYPE_CHECKING

import trio

from protocol import (ErrorCode, FrameReader, ProtocolError, RequestHeader, UnsupportedVersion,
                      decode_request, encode_response)
from protocol.schemas import API_VERSIONS, CONSUMER_GROUP_HEARTBEAT, HEARTBEAT

from .. import metrics
from .interfaces import CloseConnection
from .outbox import Outbox
from .pending import Answer, Deferred, Pending
from .splice import Piped

if TYPE_CHECKING:
    from ..security.client import Client
    from ..security.sasl import Refused, SaslGate
    from ..security.tls import TLSSocket, TlsGate
    from .interfaces import Host, Upstream

READ_SIZE = 65536  # bytes asked of the kernel per read
STREAM_START = 256  # bytes of a large request that must have come before it may stream (its header)
# bytes of a streaming request read per call and handed on. Copied, not spliced: a broker
# reading what was spliced into its socket spent more CPU per MB than through HAProxy (Tansu
# 7 %, Kafka 13 %), more than the copy costs here (docs/benchmarks.md, "A Produce's rest
# copied, not spliced")
STREAM_CHUNK = 256 * 1024
# What a streaming request's rest is read into: one buffer per serving thread, reused for every
# read, whose bytes the upstream sends on at once or copies (`Upstream.forward`). A fresh
# bytes object per read cost the gateway a page fault every 4 KiB it passed (glibc gave the
# freed megabytes back to the system and took them again: 57,000 faults in a phase of 1 GB,
# HAProxy none; docs/benchmarks.md, "A Produce's rest read into one buffer").
_STREAM_BUFFERS = threading.local()
_HEARTBEAT = HEARTBEAT.key.to_bytes(2, "big")  # how a heartbeat's frame begins
_CONSUMER_HEARTBEAT = CONSUMER_GROUP_HEARTBEAT.key.to_bytes(2, "big")  # and a ConsumerGroupHeartbeat's
_KEY_VERSION = struct.Struct(">hh")  # how every request's frame begins: api key, api version
_SIZE = struct.Struct(">i")  # a frame's size, before it
_PEER_CLOSED = ("closed by peer", "peer went away")
CHURN_SECONDS = 10.0  # a close this soon after the last one of its address and reason continues a burst
CHURN_RELOG_SECONDS = 60.0  # a burst that goes on is logged again this often, with what it folded
MAX_CHURN_KEYS = 10_000  # (address, reason) pairs remembered; past it the ones whose bursts ended go


def _stream_buffer() -> memoryview:
    """This serving thread's buffer for a streaming request's rest (`_STREAM_BUFFERS`)."""
    view = getattr(_STREAM_BUFFERS, "view", None)
    if view is None:
        view = _STREAM_BUFFERS.view = memoryview(bytearray(STREAM_CHUNK))
    return view


class Churn:
    """Connections closed, by client address and reason (the whole text: a client in a loop
    fails the same way each time, while different failures keep a line each): whether a
    close starts a burst, which is logged, or continues one (within `CHURN_SECONDS` of the
    last), which is counted (`groupkeeper_connection_churn_total`, by the reason's kind,
    before any ':') and folded into the next line: a burst's first close is one line, and
    one a minute while it lasts says how many were folded since. Sans I/O (`clock` given)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._seen: dict[tuple[str, str], list] = {}  # key -> [last close, last line, closes folded since]

    def closed(self, host: str, reason: str) -> int | None:
        """None: fold this close into its burst; otherwise log it, saying how many closes of
        its address and reason were folded since the last line (0: none)."""
        key, now = (host, reason), self.clock()
        entry = self._seen.get(key)
        if entry is None or now - entry[0] >= CHURN_SECONDS:  # a new burst
            if entry is None and len(self._seen) >= MAX_CHURN_KEYS:  # the ended bursts go; if too few, the oldest
                live = [(k, v) for k, v in self._seen.items() if now - v[0] < CHURN_SECONDS]
                self._seen = dict(live[-(MAX_CHURN_KEYS // 2):])
            self._seen[key] = [now, now, 0]
            return entry[2] if entry is not None else 0
        metrics.CONNECTION_CHURN.labels(reason.split(":", 1)[0]).inc()
        entry[0] = now
        if now - entry[1] >= CHURN_RELOG_SECONDS:
            folded, entry[1], entry[2] = entry[2], now, 0
            return folded
        entry[2] += 1
        return None


CHURN = Churn()  # the process's one: a client is the same client on every listener


class ClientConnection:
    """A Kafka client's connection to this server, as the server sees it."""
    __slots__ = ("backlog", "bytes", "client", "closed", "corked", "declined", "fd", "gate", "held", "host", "in_flight",
                 "log", "mask", "out", "pass_paused", "passing", "reader", "reading_timeout", "replies", "room",
                 "sock", "started", "until", "upstream", "waiting")

    def __init__(self, host: Host, sock: socket.socket | TLSSocket, peer: tuple[str, int], client: Client,
                 gate: SaslGate | TlsGate | Refused | None):
        self.host = host
        self.sock = sock
        self.fd = sock.fileno()
        self.client = client  # its address, listener and principal
        self.gate = gate  # until it is through (TLS handshake, SASL), requests go to it
        self.held = False  # not read while its gate waits (a PLAIN check in a thread, a failure's delay)
        self.log = host.log.bind(peer=f"{peer[0]}:{peer[1]}")
        self.reader = FrameReader(host.limits.max_request_bytes)
        self.replies: deque[bytes | _Reply] = deque()  # ready answers, and places kept for answers to come
        self.out = Outbox()  # answers the kernel has not taken yet: sent as the socket becomes writable
        self.bytes = 0  # answers made and not yet sent
        self.backlog: list[bytes] = []  # frames read while paused, handled when it goes on
        self.in_flight = 0  # requests waiting in tasks of their own
        self.waiting: set[trio.CancelScope] = set()  # those tasks, cancelled when the connection closes
        self.room: trio.Event | None = None  # set when its client took answers: for tasks waiting in `_room`
        self.mask = EPOLLIN  # what the server's poll set waits for on this socket
        self.started: float | None = None  # when the first byte of the request now arriving came
        self.until = math.inf  # when the wait for the next bytes runs out; inf: not waiting (paused)
        self.reading_timeout = False  # whether `until` is the request read timeout (else the idle one)
        self.upstream: Upstream | None = None  # where its relayed requests go (the gateway's), closed with it
        self.passing = 0  # bytes still to come of the request streaming to its upstream (`_stream`)
        self.pass_paused = False  # not read until its upstream has taken what it holds of that request
        self.declined = False  # the large request now arriving is not its upstream's to stream: read whole
        self.corked = False  # answers wait in `out` for `uncork`: one send for several (`cork`)
        self.closed = False

    def arm(self, now: float) -> None:
        """Time the wait for the next bytes: the idle timeout, or the request read timeout if a
        request has begun to arrive (it must arrive whole in time, however slowly it trickles)."""
        limits = self.host.limits
        idle_until = now + limits.idle_timeout
        read_until = math.inf if self.started is None else self.started + limits.request_read_timeout
        self.reading_timeout = read_until < idle_until
        self.until = read_until if self.reading_timeout else idle_until
        if self.gate is not None and self.gate.deadline < self.until:
            self.until = self.gate.deadline

    def readable(self) -> None:
        if self.passing:
            return self._pass()
        reader = self.reader
        into = reader.into() if type(self.sock) is socket.socket else None
        try:
            if into is None:
                data = self.sock.recv(READ_SIZE)
            else:  # a large request (a Produce's records): read in place, into its own buffer
                n = self.sock.recv_into(into)
        except BlockingIOError:
            return
        except ssl.SSLError as exc:  # not TLS (plaintext to a TLS listener), or a certificate refused
            return self.close(f"TLS error: {exc.reason or exc}")
        except OSError:
            return self.close("peer went away")
        if into is None:
            if not data:
                return self.close("closed by peer")
            if self.upstream is not None and not reader.buffered and self._express(data):
                return
            reader.feed(data)
        elif n:
            reader.filled(n)
        else:
            return self.close("closed by peer")
        now = self.host.now()  # once per read: its requests are handled now
        try:
            frames = reader.frames()
        except ProtocolError as exc:
            return self.close(f"bad frame: {exc}")
        if not reader.buffered:
            self.started = None
        elif frames or self.started is None:
            self.started = now
        if frames:
            if self.gate is None:
                self.handle(frames, now)
            else:
                self.gate.admit(self, frames, now)
        if self.upstream is not None and type(self.sock) is socket.socket:
            begun = reader.begun()
            if frames or begun is None:  # a large request begun in this read is a new one
                self.declined = False
            if not self.declined and begun is not None and self._stream(*begun):
                return
        if not self.backlog and not self.held and not self.closed:
            self.arm(now)

    def _express(self, data: bytes) -> bool:
        """Whether `data`, read with nothing before it, is one whole request that its upstream
        relays as it came (`Upstream.express`: the gateway's Produce and Fetch) and did: the relay's
        common case, without the reader, the handlers' table or a copy."""
        n = len(data)
        if n < 12 or _SIZE.unpack_from(data)[0] != n - 4 or self.backlog or self.held or self.gate is not None:
            return False
        limits = self.host.limits
        if self.bytes > limits.max_queued_reply_bytes or self.in_flight >= limits.max_in_flight:
            return False
        try:
            answer = self.upstream.express(data)
        except Exception as exc:  # a bug: close this connection, keep serving the others
            self.fail(_KEY_VERSION.unpack_from(data, 4)[0], exc)
            return True
        if answer is False:
            return False
        if not self.closed:
            self._awaiting(answer, 0.0)
            self.arm(self.host.now())
        return True

    def _stream(self, size: int, have: int) -> bool:
        """Relay the large request now arriving (`size` bytes, `have` of them come) as its bytes
        come, if its upstream takes it so (`Upstream.stream_request`: a Produce's, through the
        gateway without ACLs): its first bytes now, the rest as it comes (`_pass`), never held
        here whole. Whether it did; if not, it is read whole as before."""
        if have < STREAM_START or self.closed or self.backlog or self.held or self.gate is not None:
            return False
        limits, upstream = self.host.limits, self.upstream
        if (self.bytes > limits.max_queued_reply_bytes or self.in_flight >= limits.max_in_flight
                or upstream.busy or upstream.closed):
            return False
        handling = time.perf_counter()
        try:
            answer = upstream.stream_request(self.reader.head(), size)
        except Exception as exc:  # a bug: close this connection, keep serving the others
            self.fail(-1, exc)
            return True
        if answer is False:  # not asked again for this request (its head is not copied at each read)
            self.declined = True
            return False
        self.reader.drop()
        self.passing = size - have
        self._awaiting(answer, handling)
        if not self.closed:
            self._pass()
        return True

    def _pass(self) -> None:
        """The streaming request's next bytes, read from the socket (`STREAM_CHUNK` at most a
        call) and handed to the upstream, for as long as they come and it has room for them;
        then the next request."""
        upstream, recv_into, buffer = self.upstream, self.sock.recv_into, _stream_buffer()
        while self.passing:
            if upstream.closed:
                return self.close("its upstream went away")
            if upstream.backed_up:  # read again once the upstream's socket took it (`go_on`)
                self.pass_paused = True
                self.until = math.inf
                self._watch()
                return
            try:
                n = recv_into(buffer, min(self.passing, STREAM_CHUNK))
            except BlockingIOError:
                return
            except OSError:
                return self.close("peer went away")
            if not n:
                return self.close("closed by peer")
            self.passing -= n
            upstream.forward(buffer[:n])  # sent, or copied, before the next read
            if self.closed:
                return
        self.started = None
        self.arm(trio.current_time())

    def handle(self, frames: list[bytes], now: float) -> None:
        """Handle `frames` in order, up to the first that must wait for the connection to go on.
        Several read together that its upstream relays go to it in one send (`Upstream.cork`),
        as a relay sends on what one read brought."""
        upstream = self.upstream
        if upstream is None or len(frames) == 1 or not upstream.cork():
            return self._handle(frames, now)
        try:
            self._handle(frames, now)
        finally:
            upstream.uncork()

    def _handle(self, frames: list[bytes], now: float) -> None:
        host = self.host
        api, limits = host.api, host.limits
        stable_heartbeat, handler_of = api.stable_heartbeat, host.handler
        for i, frame in enumerate(frames):
            kind = frame[:2]
            # the two heartbeats' fast paths (a classic one, a steady consumer-protocol one)
            if ((kind == _HEARTBEAT or kind == _CONSUMER_HEARTBEAT) and self.bytes <= limits.max_queued_reply_bytes
                    and type(frame) is bytes):  # not a large frame read in place (a bytearray): decoded as any
                key = HEARTBEAT.key if kind == _HEARTBEAT else CONSUMER_GROUP_HEARTBEAT.key
                handling = time.perf_counter()
                try:
                    answer = (stable_heartbeat if kind == _HEARTBEAT else api.steady_consumer_heartbeat)(
                        frame, now, self.client)
                except Exception as exc:  # a bug: close this connection, keep serving the others
                    return self.fail(key, exc)
                if answer is not None:
                    self.replies.append(answer)
                    self.bytes += len(answer)
                    metrics.observe_none(key, time.perf_counter() - handling)
                    continue
            try:
                handler = handler_of(*_KEY_VERSION.unpack_from(frame))
            except struct.error:
                return self.close("undecodable request: shorter than a request header")
            if handler is not None and handler[2]:  # relayed: the frame passes as bytes
                if not self._relay(handler[0], frame):
                    return self._pause(frames[i:]) if not self.closed else None
                continue
            # a client that does not take its answers gets no more of them made, nor is read
            if self.bytes > limits.max_queued_reply_bytes:
                self.flush()
                if self.bytes > limits.max_queued_reply_bytes:
                    return self._pause(frames[i:])
            try:
                header, request = decode_request(frame)
            except UnsupportedVersion as exc:
                header, request = exc.header, None
            except ProtocolError as exc:
                return self.close(f"undecodable request: {exc}")
            if request is None or handler is None:
                if header.api_key != API_VERSIONS.key:  # Kafka closes; only ApiVersions answers
                    return self.close(f"unsupported request: API {header.api_key} v{header.api_version}")
                self.add(encode_response(RequestHeader(API_VERSIONS.key, 0, header.correlation_id,
                                                        header.client_id),
                                          api.api_versions_response(ErrorCode.UNSUPPORTED_VERSION)))
                continue
            answer, waits, _ = handler
            if waits and self.in_flight >= limits.max_in_flight:  # nor one with too many requests waiting
                return self._pause(frames[i:])
            handling = time.perf_counter()
            try:
                body = answer(header, request, self.client)
            except CloseConnection as exc:
                return self.close(str(exc))
            except Exception as exc:  # a bug: close this connection, keep serving the others
                return self.fail(header.api_key, exc)
            if type(body) is Pending:  # completed by a callback: its place in the line is kept
                reply = _Reply(header)
                self.replies.append(reply)
                self.in_flight += 1
                body.on_resolved(partial(self._resolved, reply, handling))
                continue
            if type(body) is CoroutineType:
                # its task started now, with no await before it: what the handler began is
                # never dropped for want of a task
                reply = _Reply(header)
                self.replies.append(reply)
                self.in_flight += 1
                host.start_soon(self._finish, reply, body, handling)
                continue
            try:
                self.add(_encoded(header, body, handling))
            except Exception as exc:
                return self.fail(header.api_key, exc)
        self.flush()  # every answer of this read that is ready, in one send

    def _relay(self, relay, frame: bytes) -> bool:
        """Hand `frame` to `relay(self, frame)`, which answers with a `Pending` whose answer is
        the whole response frame, or None for a request that has no answer (a Produce with
        acks=0); False if the connection must wait first (its limits, as for any request
        that waits) or closed."""
        limits = self.host.limits
        if self.bytes > limits.max_queued_reply_bytes:
            self.flush()
        if (self.bytes > limits.max_queued_reply_bytes or self.in_flight >= limits.max_in_flight
                or (self.upstream is not None and self.upstream.busy)):
            return False
        handling = time.perf_counter()
        try:
            answer = relay(self, frame)
        except CloseConnection as exc:
            self.close(str(exc))
            return False
        except Exception as exc:  # a bug: close this connection, keep serving the others
            self.fail(_KEY_VERSION.unpack_from(frame)[0], exc)
            return False
        if self.closed:  # its upstream went away as the request was relayed
            return False
        self._awaiting(answer, handling)
        return True

    def _awaiting(self, answer: Pending | None, handling: float) -> None:
        """A relayed request's answer to come (None: it has none) gets its place in the line."""
        if answer is not None:
            reply = _Reply(None)
            self.replies.append(reply)
            self.in_flight += 1
            answer.place = reply  # where `at_head` and `pass_on` find it, to send it as it arrives
            answer.on_resolved(partial(self._resolved, reply, handling))

    def at_head(self, place: _Reply) -> bool:
        """Whether the relayed answer to come at `place` is the next to go out: all before it
        have gone (to the socket, or to the bytes waiting for it), so it may go as it arrives."""
        return bool(self.replies) and self.replies[0] is place

    def pass_on(self, place: _Reply, part, last: bool) -> None:
        """Send `part` of the relayed answer at `place`, the head of the line (`at_head`), as
        it arrives from the broker: a large Fetch answer is not held whole first (`part` may
        be bytes, or a `Piped`: bytes the broker link spliced into its pipe). `last`: its
        end, after which the answers behind it go on. (Its Pending is then never resolved.)"""
        if self.closed:
            return
        self.bytes += len(part)
        self._send(part)
        if last and not self.closed:
            self.replies.popleft()
            self.in_flight -= 1
            self.flush()
            if self.room is not None:
                self._wake()
            if self.backlog and not self.closed:
                self._go_on()

    async def _finish(self, reply: _Reply, answering: CoroutineType, started: float) -> None:
        if self.closed:
            answering.close()
            return
        limit = self.host.limits.max_queued_reply_bytes
        with trio.CancelScope() as scope:
            self.waiting.add(scope)
            try:
                # the coroutine runs only where an answer may be made: a request's answer
                # ready at once (a Stable group's SyncGroup) is made in its first step
                if self.bytes > limit and not await self._room(reply):
                    return
                body = await answering
                if type(body) is Deferred:  # made now, if there is room for it
                    if self.bytes > limit and not await self._room(reply):
                        return
                    body = body.answer()
                frame = _encoded(reply.header, body, started)
            except Exception as exc:  # a bug: close this connection, keep serving the others
                return self.fail(reply.header.api_key, exc)
            finally:
                self.waiting.discard(scope)
                self.in_flight -= 1
                answering.close()  # never started if it closed first: no warning that it was not awaited
        if not self.closed:
            self._ready(reply, frame)

    async def _room(self, reply: _Reply) -> bool:
        """Wait until the answer at `reply` may be made; False if the connection closed first.
        It may while the answers the client has not taken are within the limit; or at the head
        of the line, while those before it are (they are all in `out` by then): counting the
        answers made behind it, which cannot go before it, would wait for ever."""
        limit = self.host.limits.max_queued_reply_bytes
        while not self.closed and self.bytes > limit and (self.replies[0] is not reply or self.out.size > limit):
            if self.room is None:
                self.room = trio.Event()
            await self.room.wait()
        return not self.closed

    def _wake(self) -> None:
        """Its client took answers, or the line moved: tasks waiting in `_room` look again."""
        room, self.room = self.room, None
        room.set()

    def _resolved(self, reply: _Reply, started: float, answer: Answer) -> None:
        self.in_flight -= 1
        if self.closed:
            return
        try:  # a relayed request's answer is its frame already
            frame = answer() if reply.header is None else _encoded(reply.header, answer(), started)
        except CloseConnection as exc:  # an answer that must not go out (an EndTxn whose end was not recorded)
            return self.close(str(exc))
        except Exception as exc:  # a bug: close this connection, keep serving the others
            return self.fail(-1 if reply.header is None else reply.header.api_key, exc)
        self._ready(reply, frame)

    def _ready(self, reply: _Reply, frame: bytes) -> None:
        """A waiting request's answer is made: out with those before it, and go on if paused."""
        reply.frame = frame
        self.bytes += len(frame)
        self.flush()
        if self.room is not None:
            self._wake()
        if self.backlog:
            self._go_on()

    def add(self, frame: bytes) -> None:
        self.replies.append(frame)
        self.bytes += len(frame)

    def hold(self) -> None:
        """Stop reading until `release`, with no timeout running: its gate is waiting."""
        self.held = True
        self.until = math.inf
        self._watch()

    def release(self) -> None:
        self.held = False
        self._watch()
        self.arm(trio.current_time())

    def _pause(self, frames: list[bytes]) -> None:
        self.backlog = frames
        self.until = math.inf
        self._watch()

    def _go_on(self) -> None:
        frames, self.backlog = self.backlog, []
        now = trio.current_time()
        if self.gate is not None:  # not logged in yet: what waited goes through the gate again
            self.gate.admit(self, frames, now)
        else:
            self.handle(frames, now)
        if not self.closed and not self.backlog:
            self._watch()
            self.arm(now)

    def go_on(self) -> None:
        """Handle the frames it paused at, if it can now (its upstream took its requests), or
        read on the request streaming to it."""
        if self.pass_paused and not self.closed:
            self.pass_paused = False
            self.started = now = trio.current_time()  # the client was not slow: its upstream was
            self._watch()
            self.arm(now)
        elif self.backlog and not self.closed:
            self._go_on()

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
        if not out or self.closed:
            return
        self._send(out[0] if len(out) == 1 else b"".join(out))  # a large relayed answer is not copied

    def cork(self) -> bool:
        """Hold what is sent to this client until `uncork`, then send it in one call: the
        several answers one read of a broker's socket brought (`BrokerLink._answers`) go out as
        a relay sends them, not in a `send` each. Whether it did (not with bytes already
        waiting for the socket, which `writable` sends; not over TLS, which sends a buffer a call)."""
        if self.out or self.closed or type(self.sock) is not socket.socket:
            return False
        self.corked = True
        return True

    def uncork(self) -> None:
        """Send what was held since `cork`, in one call; what the kernel does not take waits."""
        self.corked = False
        if self.closed or not self.out:
            return
        self._send_out()
        if self.closed:
            return
        if self.room is not None:
            self._wake()
        if not self.out and self.backlog:  # it paused while corked, for answers that have gone now
            self._go_on()

    def _send_out(self) -> None:
        """Send what waits in `out` as far as the socket takes it now; the rest waits for it."""
        try:
            sent = self.out.send(self.sock)
        except BlockingIOError:
            sent = 0
        except OSError:
            return self.close("peer went away")
        self.bytes -= sent
        if self.out:
            self._watch()

    def _send(self, data) -> None:
        """Send `data` after what already waits for the socket, without blocking; what the
        kernel does not take waits for it (as does all of it while `corked`)."""
        if self.out or self.corked:
            self.out.add(data)
            return
        if type(data) is Piped or type(self.sock) is not socket.socket:
            # relayed bytes in a pipe (the broker link's), spliced; or TLS, which encrypts a
            # few records a call: as many calls as the socket takes now (`Outbox.send`)
            self.out.add(data)
            return self._send_out()
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            return self.close("peer went away")
        self.bytes -= sent
        if sent < len(data):
            self.out.add(memoryview(data)[sent:])
            self._watch()

    def writable(self) -> None:
        try:
            sent = self.out.send(self.sock)
        except BlockingIOError:
            return
        except OSError:
            return self.close("peer went away")
        self.bytes -= sent
        if self.room is not None:
            self._wake()
        if self.out:
            return
        self._watch()
        if self.upstream is not None:
            self.upstream.drained()
        self.flush()  # answers made ready while the socket was full
        if self.backlog and not self.closed:
            self._go_on()

    def _watch(self) -> None:
        """Wait for what this connection can use: bytes to read unless paused, room to send if
        it has bytes the kernel did not take."""
        mask = ((0 if self.backlog or self.held or self.pass_paused else EPOLLIN)
                | (EPOLLOUT if self.out and not self.corked else 0))
        if mask != self.mask and not self.closed:
            self.host.watch(self.fd, mask)
            self.mask = mask

    def fail(self, api_key: int, exc: Exception) -> None:
        self.log.error("request handler failed", api_key=api_key, exc_info=exc)
        self.close("request handler failed")

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.host.forget(self)
        for scope in self.waiting:
            scope.cancel()
        self.sock.close()
        # what it holds goes now, not with the last reference to it (a commit's callback keeps
        # one until ZooKeeper answers; a cycle through its link lasts until a full collection)
        held = self.bytes + self.reader.buffered + sum(map(len, self.backlog))
        self.replies.clear()
        self.out.clear()
        self.backlog = []
        self.bytes = 0
        if self.reader.buffered:  # a request begun, up to max_request_bytes
            self.reader = FrameReader(self.host.limits.max_request_bytes)
        if held:
            self.host.released(held)
        if self.upstream is not None:
            self.upstream.close("client went away")
        folded = CHURN.closed(self.client.host, reason)
        if reason in _PEER_CLOSED:  # the ordinary end of a connection: not worth an operator's line
            self.log.debug("connection closed", reason=reason)
            return
        metrics.CONNECTIONS_CLOSED.labels(reason.split(":")[0]).inc()
        if folded is None:  # within a burst of closes for this reason from this address: counted, not logged
            self.log.debug("connection closed", reason=reason)
        elif folded:
            self.log.info("connection closed", reason=reason, folded=folded)
        else:
            self.log.info("connection closed", reason=reason)


def _encoded(header: RequestHeader, body, started: float) -> bytes:
    """The answer's frame, counted and timed (from the request decoded) in the metrics."""
    frame = encode_response(header, body)
    metrics.observe_request(header.api_key, body, time.perf_counter() - started)
    return frame


class _Reply:
    __slots__ = ("frame", "header")

    def __init__(self, header: RequestHeader):
        self.header = header
        self.frame: bytes | None = None
