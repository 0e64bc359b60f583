"""SASL on the SASL_PLAINTEXT and SASL_SSL listeners, as Kafka's brokers do it.

Until it authenticates, a connection may send ApiVersions, SaslHandshake (which names the
mechanism) and the mechanism's tokens: inside SaslAuthenticate requests after a v1
handshake, as bare size-prefixed frames after a v0 one. Anything else closes it. PLAIN and
SCRAM-SHA-256/512 check the users' SCRAM credentials kept in ZooKeeper (`users.UserStore`),
so one `groupkeeper users add` (or Kafka's kafka-configs.sh) serves both; PLAIN sends the
password itself, so it is offered over TLS only unless the operator allows it.

A password check runs as soon as its token arrives, and a success is answered at once,
whatever failed before. A failure is answered SASL_AUTHENTICATION_FAILED with the same
generic message whatever went wrong (the log says what), and only after a delay, with the
connection closed then and unread meanwhile (Kafka's connection.failed.authentication.delay.ms,
which delays the failure's answer and close). The delay grows with each failure of a user
from a host, and that pair's failures are answered one at a time (`Pacing`): a host guessing
a password waits for its answers however many connections it opens, while nothing it does
holds up a login with the right password, nor other users' logins from the same host (or NAT).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Callable

import trio

from protocol import ErrorCode, ProtocolError, RequestHeader, UnsupportedVersion, decode_request, encode_response
from protocol import messages as m
from protocol.schemas import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE

from .. import metrics
from ..listeners import Listener
from .scram import (MECHANISMS as SCRAM_MECHANISMS, AuthenticationFailed, ScramCredential, ScramServer,
                    make_credential, verify_plain)

MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
# Kafka's words for any failure: a client learns nothing of which part was wrong
FAILED = "Authentication failed: Invalid username or password"
MAX_TOKEN = 4096  # bytes of one SASL token; SCRAM's and PLAIN's are a few hundred
# PLAIN costs a PBKDF2 of the stored iterations (1.6 ms at 4,096): checked in threads, two at once
_PLAIN_CHECKS = trio.CapacityLimiter(2)


class Pacing:
    """When a failed login is answered, and its connection closed. Keyed by (host, user):
    after the first failure `base` later; each further failure doubles that gap, up to
    `longest`; and the failures of one key are answered in turn, a gap apart, so parallel
    connections guessing one user's password get their answers no faster than one would.
    No failure waits more than `hold` for its answer, so connections a guesser opened and
    left do not linger for long (its rate is then at most its connections per `hold`, which
    max_connections_per_ip bounds). A key is forgotten `forget` seconds after its last
    failure; one table for all listeners, bounded (the keys failed least recently go first).

    Only failures are ever held: the password checks themselves run at once and successes
    are answered at once. Pacing the checks instead would let a client retrying with a wrong
    password, or a stranger who knows a user's name, hold that user's correct logins from
    the same host back by up to `longest` each."""

    def __init__(self, base: float, longest: float = 10.0, forget: float = 300.0, keys: int = 10_000,
                 hold: float = 30.0):
        self.base = base
        self.longest = max(longest, base)  # a configured base longer than 10 s is kept, not cut
        self.hold = max(hold, self.longest)
        self.forget, self.keys = forget, keys
        # (host, user) -> [gap, when its last failure is answered, last failure]
        self._table: OrderedDict[tuple[str, str | None], list[float]] = OrderedDict()

    def failed(self, key: tuple[str, str | None], now: float) -> float:
        """Count a failure for `key` at `now`: when it is to be answered."""
        entry = self._table.pop(key, None)
        if entry is None or now - entry[2] > self.forget:
            gap, after = self.base, now
        else:
            gap, after = min(entry[0] * 2, self.longest), max(now, entry[1])
        at = min(after + gap, now + self.hold)
        self._table[key] = [gap, at, now]
        while len(self._table) > self.keys:
            self._table.popitem(last=False)
        return at


class Authentication:
    """What the SASL listeners share: the enabled mechanisms, the credentials, the pacing."""

    def __init__(self, mechanisms: list[str], plain_without_tls: bool,
                 credential: Callable[[str, str], ScramCredential | None], pacing: Pacing):
        self.mechanisms = tuple(mechanisms)
        self.plain_without_tls = plain_without_tls
        self.credential = credential  # (user, mechanism) -> the stored credential, if any
        self.pacing = pacing

    def offered(self, listener: Listener) -> list[str]:
        return [name for name in self.mechanisms
                if name != "PLAIN" or listener.tls or self.plain_without_tls]

    def exchange(self, mechanism: str) -> _Plain | _Scram:
        return _Plain(self.credential) if mechanism == "PLAIN" else _Scram(ScramServer(mechanism, self._lookup(mechanism)))

    def _lookup(self, mechanism: str) -> Callable[[str], ScramCredential | None]:
        return lambda user: self.credential(user, mechanism)


class _Plain:
    """RFC 4616: one token, `authzid NUL user NUL password`, checked against the user's
    SCRAM credential (either mechanism); an unknown user's against a made-up one, so that
    the time taken does not tell which users exist."""

    slow = True  # `step` belongs in a thread
    _unknown: ScramCredential | None = None

    def __init__(self, credential: Callable[[str, str], ScramCredential | None]):
        self.credential = credential
        self.user: str | None = None
        self.done = False

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("a token after PLAIN's one")
        try:
            authzid, user, password = token.decode().split("\0")
        except (UnicodeDecodeError, ValueError):
            raise AuthenticationFailed("malformed PLAIN token") from None
        self.user = user
        if not user or not password or authzid not in ("", user):
            raise AuthenticationFailed("PLAIN token without user or password, or for another identity")
        for mechanism in reversed(SCRAM_MECHANISMS):
            stored = self.credential(user, mechanism)
            if stored is not None:
                if not verify_plain(mechanism, stored, password):
                    raise AuthenticationFailed("wrong password")
                self.done = True
                return b""
        if _Plain._unknown is None:
            _Plain._unknown = make_credential("SCRAM-SHA-512", os.urandom(16).hex())
        verify_plain("SCRAM-SHA-512", _Plain._unknown, password)
        raise AuthenticationFailed("unknown user")


class _Scram:
    slow = False  # HMACs of stored keys: microseconds

    def __init__(self, server: ScramServer):
        self.server = server
        self.steps = 0
        self.done = False

    @property
    def user(self) -> str | None:
        return self.server.user

    def step(self, token: bytes) -> bytes:
        self.steps += 1
        if self.steps == 1:
            return self.server.first(token)
        answer = self.server.final(token)
        self.done = True
        return answer


class SaslGate:
    """One connection's way through authentication; the connection drops it once through."""

    __slots__ = ("auth", "deadline", "exchange", "mechanism", "raw")
    expired = "authentication timeout"  # the close's reason when `deadline` passes first

    def __init__(self, auth: Authentication, deadline: float):
        self.auth = auth
        self.deadline = deadline  # authenticated by then, or closed
        self.mechanism: str | None = None
        self.exchange: _Plain | _Scram | None = None
        self.raw = False  # after a v0 handshake: tokens come as bare frames

    def admit(self, connection, frames: list[bytes], now: float) -> None:
        for i, frame in enumerate(frames):
            if self.raw:
                self._token(connection, None, frame, frames[i + 1:])
            else:
                key = int.from_bytes(frame[:2], "big")
                if key == API_VERSIONS.key:
                    connection.handle([frame], now)
                    if connection.backlog:  # paused (its answers not taken): the rest waits with it,
                        connection.backlog = connection.backlog + frames[i + 1:]  # in order, for the gate
                        return
                    continue
                if key not in (SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key):
                    return connection.close(f"request before authentication: API {key}")
                try:
                    header, request = decode_request(frame)
                except (UnsupportedVersion, ProtocolError) as exc:
                    return connection.close(f"undecodable request: {exc}")
                if key == SASL_HANDSHAKE.key:
                    self._handshake(connection, header, request)
                else:
                    self._token(connection, header, request.auth_bytes, frames[i + 1:])
            if connection.closed or connection.held:
                return  # closed, or waiting for a PLAIN check or a failure's delay (the rest kept for then)
            if connection.gate is not self:  # through: the rest are ordinary requests
                return _go_on(connection, frames[i + 1:], now)
        connection.flush()

    def _handshake(self, connection, header: RequestHeader, request) -> None:
        offered = self.auth.offered(connection.client.listener)
        if self.mechanism is not None:
            return self._refuse(connection, header, m.SaslHandshakeResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=offered), "a second SaslHandshake")
        if request.mechanism not in offered:
            return self._refuse(connection, header, m.SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=offered),
                f"SASL mechanism {request.mechanism!r} not enabled")
        self.mechanism = request.mechanism
        self.exchange = self.auth.exchange(request.mechanism)
        self.raw = header.api_version == 0
        connection.add(encode_response(header, m.SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=offered)))

    def _token(self, connection, header: RequestHeader | None, token: bytes, rest: list[bytes]) -> None:
        if self.exchange is None:
            return self._refuse(connection, header, _authenticate_error(ErrorCode.ILLEGAL_SASL_STATE,
                                                                        "SaslAuthenticate before SaslHandshake"),
                                "SaslAuthenticate before SaslHandshake")
        # checked now, whatever failed before: only a failure's answer waits (`_failed`)
        if self.exchange.slow:
            connection.hold()
            connection.host.start_soon(self._in_thread, connection, header, token, rest)
            return
        started = time.perf_counter()
        try:
            answer = self._run(token)
        except AuthenticationFailed as exc:
            return self._failed(connection, header, str(exc), bool(rest))
        self._answered(connection, header, answer, started)

    async def _in_thread(self, connection, header, token: bytes, rest: list[bytes]) -> None:
        """A slow mechanism's step (PLAIN's PBKDF2), checked in a thread, the connection held meanwhile."""
        started = time.perf_counter()
        try:
            answer = await trio.to_thread.run_sync(self._run, token, limiter=_PLAIN_CHECKS)
        except AuthenticationFailed as exc:
            if not connection.closed:
                self._failed(connection, header, str(exc), bool(rest))
            return
        if connection.closed:
            return
        connection.release()
        self._answered(connection, header, answer, started)
        _go_on(connection, rest, trio.current_time())

    def _run(self, token: bytes) -> bytes:
        if len(token) > MAX_TOKEN:
            raise AuthenticationFailed(f"a SASL token of {len(token)} bytes")
        return self.exchange.step(token)

    def _answered(self, connection, header: RequestHeader | None, answer: bytes, started: float) -> None:
        exchange = self.exchange
        connection.add(_raw(answer) if header is None else
                       encode_response(header, m.SaslAuthenticateResponse(error_code=ErrorCode.NONE, auth_bytes=answer,
                                                                          session_lifetime_ms=0)))
        if not exchange.done:
            return
        principal = f"User:{exchange.user}"
        connection.client.principal = principal
        connection.gate = None
        metrics.AUTHENTICATIONS.labels(self.mechanism, "succeeded").inc()
        connection.log.info("authenticated", principal=principal, mechanism=self.mechanism,
                            duration_s=round(time.perf_counter() - started, 4))

    def _failed(self, connection, header: RequestHeader | None, reason: str, more: bool) -> None:
        """Answer a failure (unless its token came bare), when `Pacing` says, and close: the
        answer waits, as Kafka's does, so a guesser learns nothing sooner. The close waits for
        the client's (`Refused`) unless it sent `more` after the failed token."""
        now = trio.current_time()
        at = self.auth.pacing.failed((connection.client.host, self.exchange.user), now)
        metrics.AUTHENTICATIONS.labels(self.mechanism, "failed").inc()
        connection.log.warning("authentication failed", mechanism=self.mechanism, user=self.exchange.user,
                               reason=reason, delay_s=round(at - now, 3))
        connection.flush()  # the answers before it (ApiVersions, the handshake) go now
        connection.hold()
        answer = (None if header is None else
                  encode_response(header, _authenticate_error(ErrorCode.SASL_AUTHENTICATION_FAILED, FAILED)))
        connection.host.start_soon(_fail_at, connection, at, answer, more)

    def _refuse(self, connection, header: RequestHeader | None, body, reason: str) -> None:
        """Answer (unless the request came bare) and close: a protocol error, not a failed
        password. As after a failed one, the close waits for the client's (`Refused`)."""
        if header is None:
            return connection.close(reason)
        connection.add(encode_response(header, body))
        connection.flush()
        connection.gate = Refused(trio.current_time() + LINGER, reason)


def _go_on(connection, frames: list[bytes], now: float) -> None:
    """The frames after a SASL step, and the answers ready: to the gate while it is still
    there, as ordinary requests once through."""
    if connection.gate is not None:
        connection.gate.admit(connection, frames, now)
    elif frames:
        connection.handle(frames, now)
    else:
        connection.flush()


async def _fail_at(connection, at: float, answer: bytes | None, more: bool) -> None:
    """At `at`: the failure's answer, if any, then the close; unless the client sent `more`,
    the close waits for the client's (`Refused`)."""
    await trio.sleep_until(at)
    if connection.closed:  # its peer went away meanwhile (a reset), or the server is stopping
        return
    if answer is not None:
        connection.add(answer)
        connection.flush()
    if answer is None or more:  # a bare token's failure has no answer: nothing to wait for
        return connection.close(FAILED_CLOSE)
    connection.gate = Refused(at + LINGER, FAILED_CLOSE)
    connection.release()


LINGER = 5.0  # seconds a refused connection waits for its client to close it
FAILED_CLOSE = "authentication failed"  # the close's reason after a failed login


class Refused:
    """A connection whose login failed or was refused (a mechanism not enabled, a step out of
    order), its answer sent: open until its client closes it (every client does, once it reads
    the answer), sends anything more, or `LINGER` passes; then closed for `expired`.

    Kafka closes at once after the answer; a client that reads the answer and the end of the
    stream in one go may then drop the answer: kafka-python 3.0 does (its transports report the
    end before handing on the bytes read with it), and its user sees "socket disconnected"
    instead of the wrong password. Waiting for the client's close costs a guesser nothing it
    could use (its answer has come), and holds its connection at most `LINGER` longer."""

    __slots__ = ("deadline", "expired")

    def __init__(self, deadline: float, expired: str):
        self.deadline = deadline
        self.expired = expired  # the close's reason

    def admit(self, connection, frames: list[bytes], now: float) -> None:
        if frames:
            connection.close(self.expired)


def _authenticate_error(code: ErrorCode, message: str) -> m.SaslAuthenticateResponse:
    return m.SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=b"")


def _raw(token: bytes) -> bytes:
    """A bare token frame (after a v0 handshake)."""
    return len(token).to_bytes(4, "big") + token

