"""SASL on the SASL_PLAINTEXT and SASL_SSL listeners, as Kafka's brokers do it.

Until it authenticates, a connection may send ApiVersions, SaslHandshake (which names the
mechanism) and the mechanism's tokens: inside SaslAuthenticate requests after a v1
handshake, as bare size-prefixed frames after a v0 one. Anything else closes it. PLAIN and
SCRAM-SHA-256/512 check the users' SCRAM credentials kept in ZooKeeper (`users.UserStore`),
so one `groupkeeper users add` (or Kafka's kafka-configs.sh) serves both; PLAIN sends the
password itself, so it is offered over TLS only unless the operator allows it.

A failed authentication is answered SASL_AUTHENTICATION_FAILED with the same generic
message whatever went wrong (the log says what), and the connection closes after a delay
(Kafka's connection.failed.authentication.delay.ms), unread meanwhile.
Every failure for a user from a host doubles the time that host's later checks of that
user's password must keep apart (`Pacing`), so a host guessing a password, however many
connections it opens, gets few guesses a minute, while other users' logins from the same
host (or NAT) are not held up.
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
    """How far apart the password checks for one user from one host must keep: nothing
    without a recent failure; `base` after the first, doubling with each further one up to
    `longest`; forgotten `forget` seconds after the last failure. Keyed by (host, user), so
    a client retrying with a wrong password slows only its own user's logins from its host.
    One table for all listeners, bounded (the keys failed least recently go first)."""

    def __init__(self, base: float, longest: float = 10.0, forget: float = 300.0, keys: int = 10_000):
        self.base, self.longest, self.forget, self.keys = base, longest, forget, keys
        # (host, user) -> [gap, next check at, last failure]
        self._table: OrderedDict[tuple[str, str | None], list[float]] = OrderedDict()

    def slot(self, key: tuple[str, str | None], now: float) -> float:
        """When a check for `key` asked for `now` may run (now, without a recent failure);
        the next check for it goes a gap later."""
        entry = self._table.get(key)
        if entry is None or now - entry[2] > self.forget:
            return now
        at = max(now, entry[1])
        entry[1] = at + entry[0]
        return at

    def failed(self, key: tuple[str, str | None], now: float) -> float:
        """Count a failure for `key`; the delay before its connection closes."""
        entry = self._table.pop(key, None)
        if entry is None or now - entry[2] > self.forget:
            entry = [self.base, now, now]
        else:
            entry[0] = min(entry[0] * 2, self.longest)
        entry[1], entry[2] = max(entry[1], now + entry[0]), now
        self._table[key] = entry
        while len(self._table) > self.keys:
            self._table.popitem(last=False)
        return entry[0]


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

    @staticmethod
    def checks(token: bytes) -> tuple[bool, str | None]:
        """Whether the step on `token` checks a password (PLAIN's one step does), and for whom."""
        parts = token.split(b"\0")
        return True, parts[1].decode(errors="replace") if len(parts) == 3 else None

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

    def checks(self, token: bytes) -> tuple[bool, str | None]:
        """Whether the step on `token` checks the password (the final message does), and for whom."""
        return self.steps == 1, self.server.user

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
                return  # closed, or waiting for its slot or a failure's delay (the rest kept for then)
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
        now = trio.current_time()
        checks, user = self.exchange.checks(token)
        at = self.auth.pacing.slot((connection.client.host, user), now) if checks else now
        if at <= now and not self.exchange.slow:
            started = time.perf_counter()
            try:
                answer = self._run(token)
            except AuthenticationFailed as exc:
                return self._failed(connection, header, str(exc))
            return self._answered(connection, header, answer, started)
        connection.hold()
        connection.host.start_soon(self._later, connection, at, header, token, rest)

    async def _later(self, connection, at: float, header, token: bytes, rest: list[bytes]) -> None:
        """A paced attempt, or a slow mechanism's: checked at its slot, in a thread if slow."""
        await trio.sleep_until(at)
        started = time.perf_counter()
        try:
            if self.exchange.slow:
                answer = await trio.to_thread.run_sync(self._run, token, limiter=_PLAIN_CHECKS)
            else:
                answer = self._run(token)
        except AuthenticationFailed as exc:
            if not connection.closed:
                self._failed(connection, header, str(exc))
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

    def _failed(self, connection, header: RequestHeader | None, reason: str) -> None:
        delay = self.auth.pacing.failed((connection.client.host, self.exchange.user), trio.current_time())
        metrics.AUTHENTICATIONS.labels(self.mechanism, "failed").inc()
        connection.log.warning("authentication failed", mechanism=self.mechanism, user=self.exchange.user,
                               reason=reason, delay_s=round(delay, 3))
        if header is not None:  # at once, so the client reads why; the close comes after the delay
            connection.add(encode_response(header, _authenticate_error(ErrorCode.SASL_AUTHENTICATION_FAILED, FAILED)))
            connection.flush()
        connection.hold()
        connection.host.start_soon(_close_after, connection, delay, "authentication failed")

    def _refuse(self, connection, header: RequestHeader | None, body, reason: str) -> None:
        """Answer (unless the request came bare) and close: a protocol error, not a failed password."""
        if header is not None:
            connection.add(encode_response(header, body))
            connection.flush()
        connection.close(reason)


def _go_on(connection, frames: list[bytes], now: float) -> None:
    """The frames after a SASL step, and the answers ready: to the gate while it is still
    there, as ordinary requests once through."""
    if connection.gate is not None:
        connection.gate.admit(connection, frames, now)
    elif frames:
        connection.handle(frames, now)
    else:
        connection.flush()


async def _close_after(connection, delay: float, reason: str) -> None:
    await trio.sleep(delay)
    connection.close(reason)


def _authenticate_error(code: ErrorCode, message: str) -> m.SaslAuthenticateResponse:
    return m.SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=b"")


def _raw(token: bytes) -> bytes:
    """A bare token frame (after a v0 handshake)."""
    return len(token).to_bytes(4, "big") + token

