"""TLS server contexts from PEM files, with the standard library's `ssl`."""

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
    holds), as it does with a socket."""

    __slots__ = ("_held", "_held_plain", "_in", "_out", "_tls", "sock")

    MAX_RECORDS = 4 * 16384  # plaintext encrypted per send: four TLS records

    def __init__(self, sock, context: ssl.SSLContext):
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=True)
        self._held = b""  # ciphertext the kernel has not taken
        self._held_plain = 0  # how much of the caller's plaintext it carries

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
        self._flush_control()
        if closed:  # what came before it, then (at the next read) the end
            if chunks:
                self.sock.shutdown(socket.SHUT_RD)
            return b"".join(chunks)
        if not chunks:
            raise BlockingIOError
        return b"".join(chunks)

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

    def __init__(self, deadline: float):
        self.deadline = deadline  # handshake and first request by then, or closed

    def admit(self, connection, frames: list[bytes], now: float) -> None:
        cert = connection.sock.peer_certificate()
        if cert:
            connection.client.principal = principal_of(cert)
        connection.gate = None
        connection.handle(frames, now)
