"""TLS contexts from PEM files, with the standard library's `ssl`: the listeners' (server)
and groupkeeper's own connections to the brokers' (client); and `TLSSocket`, TLS for the
poll loop's non-blocking sockets, on either side."""

from __future__ import annotations

import os
import socket
import ssl


class TLSError(Exception):
    """A certificate or key that cannot be used, phrased for the operator."""


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context presenting `cert` (PEM, with its chain) and `key`: TLS 1.2 and later,
    Python's default ciphers."""
    for path in (cert, key):
        if not os.path.isfile(path):
            raise TLSError(f"{path}: no such file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise TLSError(f"cannot use certificate {cert} with key {key}: {exc}") from None
    return context


CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def listener_context(cert: str, key: str, ca: str, client_auth: str) -> ssl.SSLContext:
    """The Kafka listeners' server context: `server_context`, asking for client certificates
    signed by `ca` as Kafka's `ssl.client.auth` says (none, requested, required)."""
    context = server_context(cert, key)
    context.options |= ssl.OP_NO_RENEGOTIATION
    if client_auth != "none":
        if not ca:
            raise TLSError(f"ssl_client_auth = {client_auth!r} needs ssl_cafile, the CA that signs client certificates")
        try:
            context.load_verify_locations(cafile=ca)
        except (ssl.SSLError, OSError) as exc:
            raise TLSError(f"cannot use CA file {ca}: {exc}") from None
        context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def client_context(cafile: str = "", certfile: str = "", keyfile: str = "",
                   check_hostname: bool = True) -> ssl.SSLContext:
    """A client context for connecting to brokers: TLS 1.2 and later, the server's certificate
    verified against `cafile` (PEM; "" = the system's CA certificates) and, if
    `check_hostname`, its name against the host connected to; `certfile` and `keyfile` (PEM,
    both or neither) the client certificate presented to a broker that asks (mutual TLS)."""
    if bool(certfile) != bool(keyfile):
        raise TLSError("a client certificate needs both its certificate file and its key file")
    for path in (cafile, certfile, keyfile):
        if path and not os.path.isfile(path):
            raise TLSError(f"{path}: no such file")
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile or None)
    except (ssl.SSLError, OSError) as exc:
        raise TLSError(f"cannot use CA file {cafile}: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION
    context.check_hostname = check_hostname  # the chain is verified either way (CERT_REQUIRED)
    if certfile:
        try:
            context.load_cert_chain(certfile, keyfile)
        except (ssl.SSLError, OSError) as exc:
            raise TLSError(f"cannot use certificate {certfile} with key {keyfile}: {exc}") from None
    return context


# X.500 attribute names as ssl reports them, and as RFC 2253 (Java's X500Principal) writes them
_SHORT_NAMES = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
                "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
                "domainComponent": "DC", "userId": "UID"}


def principal_of(cert: dict) -> str:
    """An mTLS client's principal, as Kafka's default SSL principal builder makes it: `User:`
    and its certificate's subject in RFC 2253 form, last RDN first (`User:CN=alice,O=Example,C=GB`);
    attributes without an RFC 2253 keyword keep the name Python's ssl gives them."""
    rdns = []
    for rdn in reversed(cert.get("subject", ())):
        rdns.append("+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}" for name, value in rdn))
    return "User:" + ",".join(rdns)


def _escape(value: str) -> str:
    escaped = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped


class TLSSocket:
    """A non-blocking socket's TLS, sans-I/O (`ssl.SSLObject` between two memory BIOs), with a
    plain socket's `recv`/`send`/`close`, so that the poll-loop server serves it as it serves
    any connection.

    `recv` feeds the socket's bytes in and returns the plaintext they complete (the handshake
    runs inside it; BlockingIOError while none is complete). `send` keeps OpenSSL's write
    contract: ciphertext the kernel does not take stays here, and counts as sent only once it
    has gone, so the caller offers the same plaintext again (from the start of what it still
    holds), as it does with a socket.

    On the server's side the client speaks first, and the handshake runs inside `recv`. On
    the client's side (`client`) it must be driven: `handshake()` once the TCP connection is
    up (it sends the ClientHello), then whenever the socket is readable (or writable, while
    `wants_write`), until it returns True; only then `send` and `recv`."""

    __slots__ = ("_held", "_held_plain", "_in", "_out", "_tls", "sock")

    MAX_RECORDS = 4 * 16384  # plaintext encrypted per send: four TLS records
    HANDSHAKE_READ = 65536  # bytes asked of the kernel per handshake step

    def __init__(self, sock, context: ssl.SSLContext, server_side: bool = True, server_hostname: str | None = None):
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=server_side, server_hostname=server_hostname)
        self._held = b""  # ciphertext the kernel has not taken
        self._held_plain = 0  # how much of the caller's plaintext it carries

    @classmethod
    def client(cls, sock, context: ssl.SSLContext, server_hostname: str | None) -> TLSSocket:
        """The client's side of TLS on the connected non-blocking `sock`; the server's
        certificate is checked against `server_hostname` if the context checks names."""
        return cls(sock, context, server_side=False, server_hostname=server_hostname)

    @property
    def wants_write(self) -> bool:
        """Whether it holds ciphertext the kernel has not taken (wait for the socket to be writable)."""
        return bool(self._held)

    def handshake(self) -> bool:
        """One step of a client's handshake, without blocking: what the socket has read in,
        what TLS answers sent out. True once the handshake is complete. Raises ssl.SSLError
        (a certificate refused, either way, or not TLS at all), or ConnectionError if the
        peer closed the connection; the alert that TLS writes on failure is sent first."""
        try:
            data = self.sock.recv(self.HANDSHAKE_READ)
        except BlockingIOError:
            data = None
        if data == b"":
            raise ConnectionResetError("closed by the peer during the TLS handshake")
        if data:
            self._in.write(data)
        try:
            self._tls.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        except ssl.SSLError:
            self._send_alert()
            raise
        self._flush_control()
        if self._held and not self._held_plain:  # control bytes left over from an earlier step
            try:
                sent = self.sock.send(self._held)
            except BlockingIOError:
                sent = 0
            self._held = self._held[sent:]
        return done

    def fileno(self) -> int:
        return self.sock.fileno()

    @property
    def handshaken(self) -> bool:
        return self._tls.version() is not None

    def peer_certificate(self) -> dict | None:
        return self._tls.getpeercert() or None

    def recv(self, size: int) -> bytes:
        data = self.sock.recv(size)
        if not data:
            return data
        self._in.write(data)
        chunks = []
        try:
            if not self.handshaken:
                self._tls.do_handshake()
            while chunk := self._tls.read(size):
                chunks.append(chunk)
            closed = True  # an empty read: the client's close_notify
        except ssl.SSLWantReadError:
            closed = False
        except ssl.SSLZeroReturnError:
            closed = True
        except ssl.SSLError:
            self._send_alert()
            raise
        self._flush_control()
        if closed:  # what came before it, then (at the next read) the end
            if chunks:
                self.sock.shutdown(socket.SHUT_RD)
            return b"".join(chunks)
        if not chunks:
            raise BlockingIOError
        return b"".join(chunks)

    def _send_alert(self) -> None:
        """The alert TLS wrote as it failed (a certificate refused, either way), sent before
        the caller closes, best effort: the peer learns why rather than seeing a bare close."""
        try:
            self.sock.send(self._held + self._out.read())
        except OSError:
            pass

    def _flush_control(self) -> None:
        """Send what TLS itself wrote (handshake messages, session tickets) at once. Control
        bytes are a few kB on a socket that has no answers waiting: the kernel takes them; if it
        cannot, they wait for the next answer's send."""
        if self._out.pending:
            control = self._out.read()
            if self._held:
                self._held += control
                return
            try:
                sent = self.sock.send(control)
            except BlockingIOError:
                sent = 0
            self._held = control[sent:]

    def send(self, data) -> int:
        if self._held:
            sent = self.sock.send(self._held)  # BlockingIOError: still nothing taken
            self._held = self._held[sent:]
            if self._held:
                return 0
            done, self._held_plain = self._held_plain, 0
            if done:
                return done
        plain = memoryview(data)[:self.MAX_RECORDS]
        self._tls.write(plain)
        cipher = self._out.read()
        try:
            sent = self.sock.send(cipher)
        except BlockingIOError:
            sent = 0
        if sent < len(cipher):
            self._held, self._held_plain = cipher[sent:], len(plain)
            return 0
        return len(plain)

    def close(self) -> None:
        self.sock.close()


class TlsGate:
    """An SSL listener's connection before its first request: once the handshake is through,
    its principal is its client certificate's subject (ANONYMOUS without one)."""

    __slots__ = ("deadline",)
    expired = "authentication timeout"  # the close's reason when `deadline` passes first

    def __init__(self, deadline: float):
        self.deadline = deadline  # handshake and first request by then, or closed

    def admit(self, connection, frames: list[bytes], now: float) -> None:
        cert = connection.sock.peer_certificate()
        if cert:
            connection.client.principal = principal_of(cert)
        connection.gate = None
        connection.handle(frames, now)
