"""groupkeeper's own connections to the cluster's brokers (the gateway's links and the
`brokers` topic source): with which security, and the SASL login on them, sans I/O.

`UpstreamSecurity` is what the `gateway_security_protocol` and `gateway_ssl_*` /
`gateway_sasl_*` settings make (`configure` checks them: one line for what is wrong): a TLS
client context if the protocol speaks TLS, and, if it speaks SASL, a fresh `Login` for each
connection. A `Login` is the exchange Kafka's clients make before their first request:
SaslHandshake v1 naming the mechanism, then SaslAuthenticate v2 carrying the mechanism's
tokens (PLAIN's one; SCRAM's client-first and client-final, the server's signature
checked). It makes request frames and reads answer frames; whoever owns the socket moves
them (the gateway's poll loop, or trio streams). A refusal, or an answer that is not what
the exchange needs, raises `LoginFailed` saying what happened, for the log.

SCRAM's cost is PBKDF2 of the server's iterations; its result depends only on the password,
the salt and the count, so it is computed once per salt and kept (RFC 5802, section 5.1),
and a gateway that opens a link per client connection pays it once.
"""

from __future__ import annotations

import ssl
from collections import OrderedDict

from protocol import ErrorCode, ProtocolError, RequestHeader, decode_response, encode_request
from protocol.messages import build
from protocol.schema import Api
from protocol.schemas import SASL_AUTHENTICATE, SASL_HANDSHAKE

from .scram import MECHANISMS as SCRAM_MECHANISMS, AuthenticationFailed, ScramClient, salted_password
from .tls import TLSError, client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
CLIENT_ID = "groupkeeper"
HANDSHAKE_VERSION, AUTHENTICATE_VERSION = 1, 2
_FIRST_CORRELATION = 0x7FFF0000  # the login's requests' ids: apart from any a client or the source uses
_KEPT_SALTS = 8


class LoginFailed(PermissionError):
    """The broker refused the login, or answered it with what the exchange cannot use; the
    message says which, for the log. A PermissionError, so that a caller that cannot import
    this (the topic source, a layer beside this one) still tells it from other failures."""


class UpstreamSecurity:
    """How groupkeeper connects to the brokers: `tls` (a client context, or None for
    PLAINTEXT and SASL_PLAINTEXT) and `login()` (a new `Login` per connection, or None
    without SASL)."""

    def __init__(self, protocol: str = "PLAINTEXT", tls: ssl.SSLContext | None = None,
                 mechanism: str = "SCRAM-SHA-512", user: str = "", password: str = ""):
        self.protocol = protocol
        self.tls = tls
        self.mechanism = mechanism
        self.user = user
        self._password = password
        self._salted: OrderedDict[tuple[bytes, int], bytes] = OrderedDict()  # SCRAM: (salt, i) -> SaltedPassword

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def secured(self) -> bool:
        """Whether a connection has anything to go through before its first request."""
        return self.tls is not None or self.sasl

    def server_hostname(self, host: str) -> str:
        """The name a broker's certificate is checked against: its host as the cluster names it."""
        return host

    def login(self) -> Login | None:
        if not self.sasl:
            return None
        if self.mechanism == "PLAIN":
            return Login("PLAIN", _Plain(self.user, self._password))
        return Login(self.mechanism, ScramClient(self.mechanism, self.user, self._password, salted=self._salt))

    def _salt(self, salt: bytes, iterations: int) -> bytes:
        key = (salt, iterations)
        found = self._salted.get(key)
        if found is None:
            found = self._salted[key] = salted_password(self.mechanism, self._password, salt, iterations)
            while len(self._salted) > _KEPT_SALTS:
                self._salted.popitem(last=False)
        return found

    def __repr__(self) -> str:  # never the password
        return (f"UpstreamSecurity({self.protocol}" + (f", {self.mechanism} as {self.user!r}" if self.sasl else "")
                + ")")


class _Plain:
    """RFC 4616's one token, as Kafka's client sends it: no authorization id."""

    def __init__(self, user: str, password: str):
        self.user, self._password = user, password

    def first(self) -> bytes:
        return f"\0{self.user}\0{self._password}".encode()


class Login:
    """One connection's SASL login, sans I/O: `first()` is the SaslHandshake request (a whole
    frame, size included); `feed(answer)` takes each answer frame (without its size) and
    gives the next request frame, or None once authenticated. Raises LoginFailed."""

    def __init__(self, mechanism: str, exchange: _Plain | ScramClient, client_id: str = CLIENT_ID):
        self.mechanism = mechanism
        self.exchange = exchange
        self.client_id = client_id
        self.done = False
        self._correlation = _FIRST_CORRELATION
        self._expecting: Api | None = None
        self._steps = 0  # SaslAuthenticate answers read

    def first(self) -> bytes:
        return self._request(SASL_HANDSHAKE, HANDSHAKE_VERSION, {"mechanism": self.mechanism})

    def feed(self, frame: bytes) -> bytes | None:
        api = self._expecting
        if api is None or self.done:
            raise LoginFailed("the broker answered what was not asked during SASL")
        version = HANDSHAKE_VERSION if api is SASL_HANDSHAKE else AUTHENTICATE_VERSION
        try:
            correlation_id, answer = decode_response(api.key, version, frame)
        except ProtocolError as exc:
            raise LoginFailed(f"unreadable {api.name} answer: {exc}") from None
        if correlation_id != self._correlation:
            raise LoginFailed(f"the broker answered request {correlation_id} during SASL, not {self._correlation}")
        if api is SASL_HANDSHAKE:
            if answer.error_code != ErrorCode.NONE:
                offered = ", ".join(answer.mechanisms) or "none"
                raise LoginFailed(f"the broker does not offer {self.mechanism} ({_name(answer.error_code)}; "
                                  f"it offers: {offered})")
            return self._authenticate(self.exchange.first())
        if answer.error_code != ErrorCode.NONE:
            said = f": {answer.error_message}" if answer.error_message else ""
            raise LoginFailed(f"{self.mechanism} as {self.exchange.user!r} refused "
                              f"({_name(answer.error_code)}){said}")
        self._steps += 1
        try:
            if isinstance(self.exchange, _Plain):
                return self._through()
            if self._steps == 1:
                return self._authenticate(self.exchange.final(answer.auth_bytes))
            self.exchange.verify(answer.auth_bytes)
        except AuthenticationFailed as exc:
            raise LoginFailed(str(exc)) from None
        return self._through()

    def _through(self) -> None:
        self.done = True
        self._expecting = None
        return None

    def _authenticate(self, token: bytes) -> bytes:
        return self._request(SASL_AUTHENTICATE, AUTHENTICATE_VERSION, {"auth_bytes": token})

    def _request(self, api: Api, version: int, body: dict) -> bytes:
        self._correlation += 1
        self._expecting = api
        return encode_request(RequestHeader(api.key, version, self._correlation, self.client_id),
                              build(api.request.struct, body))


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def configure(protocol: str, cafile: str = "", certfile: str = "", keyfile: str = "", check_hostname: bool = True,
              mechanism: str = "SCRAM-SHA-512", user: str = "", password_file: str = "") -> UpstreamSecurity:
    """The security the `gateway_*` settings describe; ValueError, one line naming the setting,
    for what is wrong. The password is read from the first line of `password_file` (never
    given in the configuration or on the command line)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"gateway_security_protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    uses_tls, uses_sasl = protocol.endswith("SSL"), protocol.startswith("SASL_")
    if not uses_tls:
        for key, value in (("gateway_ssl_cafile", cafile), ("gateway_ssl_certfile", certfile),
                           ("gateway_ssl_keyfile", keyfile)):
            if value:
                raise ValueError(f"{key} is set, but gateway_security_protocol {protocol} does not speak TLS")
    if not uses_sasl:
        for key, value in (("gateway_sasl_username", user), ("gateway_sasl_password_file", password_file)):
            if value:
                raise ValueError(f"{key} is set, but gateway_security_protocol {protocol} does not speak SASL")
    tls = None
    if uses_tls:
        try:
            tls = client_context(cafile, certfile, keyfile, check_hostname)
        except TLSError as exc:
            raise ValueError(f"gateway TLS: {exc}") from None
    if not uses_sasl:
        return UpstreamSecurity(protocol, tls)
    if mechanism not in MECHANISMS:
        raise ValueError(f"gateway_sasl_mechanism must be one of {', '.join(MECHANISMS)}, not {mechanism!r}")
    if not user:
        raise ValueError(f"gateway_security_protocol {protocol} needs gateway_sasl_username")
    if "\0" in user:
        raise ValueError("gateway_sasl_username may not hold a NUL character")
    if not password_file:
        raise ValueError(f"gateway_security_protocol {protocol} needs gateway_sasl_password_file "
                         "(a file holding the password on its first line)")
    return UpstreamSecurity(protocol, tls, mechanism, user, read_password(password_file))


def read_password(path: str) -> str:
    """The password on the first line of `path` (as `groupkeeper users add --password-file`
    reads it); ValueError saying what is wrong."""
    try:
        with open(path) as file:
            password = file.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"gateway_sasl_password_file: {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not password:
        raise ValueError(f"gateway_sasl_password_file: {path} has no password on its first line")
    return password
