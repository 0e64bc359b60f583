"""SASL/SCRAM (RFC 5802, RFC 7677) on the server's side, with Kafka's credentials: salted,
never the password, in the form Kafka keeps them in ZooKeeper
(`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`), so that one store serves
groupkeeper and Kafka's brokers alike. SASL/PLAIN passwords are checked against the same
credentials (`verify_plain`).

And on the client's side (`ScramClient`): the gateway's own login to the brokers, with the
same primitives (`salted_password`, `_keys`).

Pure: no I/O. What Kafka's server does is followed where RFC 5802 leaves a choice: no
channel binding, an authorization id only if it is the user's own name, extensions ignored
except `tokenauth` (delegation tokens, which groupkeeper does not have), no SASLprep. The
client does as Kafka's Java client: no channel binding (gs2 header "n,,"), no authorization
id, no extensions, at least 4,096 iterations from the server.

Why not `scramp` (weighed for issue 29; 1.5.0 read): it SASLpreps user names and passwords,
as RFC 5802 asks and Kafka does not, so a password that SASLprep changes (compatibility
characters, some spaces) would salt differently from the credentials Kafka's own tools
write into the shared ZooKeeper store and from what Kafka clients compute; its client takes
any iteration count a server names, where the gateway's runs PBKDF2 in the poll loop's
thread and must refuse a hostile broker's billions (MAX_CLIENT_ITERATIONS) and keep each
salt's result; and the unknown-user replies that must not tell a guesser which users exist
would be ours around it anyway. What is left to share is the RFC's arithmetic, a few lines
on `hashlib.pbkdf2_hmac` and `hmac`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's minimum for both mechanisms; its admin API allows up to
MAX_ITERATIONS = 16384  # this many, and so does `make_credential`
MAX_MESSAGE_BYTES = 4096  # a message longer than this is refused unread (the client's by the server, and back)
# The most iterations the client computes when a server asks: PBKDF2 runs in the poll loop's
# thread (once per salt: the results are kept), 16 times Kafka's upper limit at most
MAX_CLIENT_ITERATIONS = 16 * MAX_ITERATIONS
SALT_BYTES = 32

_FAKE_KEY = os.urandom(32)  # salts for unknown users: stable for a user within the process
_SASLNAME = re.compile(r"(?:[^=,\x00]|=2C|=3D)+")
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # printable ASCII but ","
_EXTENSION = re.compile(r"[A-Za-z]+=[^,]*")


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def to_kafka(self) -> str:
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        """ValueError saying what is wrong with `text`."""
        values: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or key not in ("salt", "stored_key", "server_key", "iterations"):
                raise ValueError(f"a SCRAM credential has salt, stored_key, server_key and iterations, not {key!r}")
            if key in values:
                raise ValueError(f"a SCRAM credential with {key} twice")
            values[key] = value
        missing = {"salt", "stored_key", "server_key", "iterations"} - set(values)
        if missing:
            raise ValueError(f"a SCRAM credential without {', '.join(sorted(missing))}")
        decoded = {}
        for key in ("salt", "stored_key", "server_key"):
            try:
                decoded[key] = base64.b64decode(values[key], validate=True)
            except ValueError:
                raise ValueError(f"a SCRAM credential whose {key} is not base64") from None
            if not decoded[key]:
                raise ValueError(f"a SCRAM credential with an empty {key}")
        if not re.fullmatch(r"[0-9]{1,10}", values["iterations"]) or not 0 < int(values["iterations"]) < 2**31:
            raise ValueError(f"a SCRAM credential whose iterations is not a positive number: {values['iterations']!r}")
        return cls(decoded["salt"], decoded["stored_key"], decoded["server_key"], int(values["iterations"]))


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """The credential a password gives (RFC 5802, section 3), with a random salt unless given."""
    digest = _digest(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {iterations}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    _, stored_key, server_key = _keys(digest, salted_password(mechanism, password, salt, iterations))
    return ScramCredential(salt, stored_key, server_key, iterations)


def verify_plain(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether a SASL/PLAIN password is the one `credential` was made from. Costs the
    credential's iterations of PBKDF2 (milliseconds): not for the event loop's thread."""
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    return hmac.compare_digest(_keys(_digest(mechanism), salted)[1], credential.stored_key)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's SaltedPassword, Hi(password, salt, i): PBKDF2 of `iterations` rounds, the
    whole cost of SCRAM (milliseconds at 4,096)."""
    return hashlib.pbkdf2_hmac(_digest(mechanism), password.encode(), salt, iterations)


def _keys(digest: str, salted: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a SaltedPassword (RFC 5802, section 3)."""
    client_key = _hmac(digest, salted, b"Client Key")
    return client_key, hashlib.new(digest, client_key).digest(), _hmac(digest, salted, b"Server Key")


class AuthenticationFailed(Exception):
    """The exchange failed; the message is for the log, the client gets a generic one."""


class _Exchange:
    """What both sides of an exchange share: its steps taken in order, each message bounded
    and UTF-8; `_fail` (each side's own) ends it with AuthenticationFailed."""
    _STEP = "message"  # what a step is called in the failures

    def _advance(self, expected: str, then: str) -> None:
        if self._state != expected:
            self._state = "over"
            self._fail(f"{expected} {self._STEP} out of order")
        self._state = then

    def _text(self, message: bytes, name: str) -> str:
        if len(message) > MAX_MESSAGE_BYTES:
            self._fail(f"{name} of {len(message)} bytes (at most {MAX_MESSAGE_BYTES})")
        try:
            return message.decode()
        except UnicodeDecodeError:
            self._fail(f"{name} is not UTF-8")

    def _fail(self, reason: str):
        raise NotImplementedError


class ScramServer(_Exchange):
    """The server's side of one exchange: `first(client-first)` answers server-first,
    `final(client-final)` answers server-final once the proof is right. Any failure ends the
    exchange with AuthenticationFailed; so does any further call.

    An unknown user is answered like a known one, with a salt made up from the name (the
    same every time within the process) and the minimum iterations, and fails where a wrong
    password does, with the same message: a client cannot tell which users exist."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None],
                 nonce: str | None = None):
        """`lookup`: the user's credential for this mechanism, None if there is none.
        `nonce`: the server's part of the nonce (tests); random by default."""
        self.mechanism = mechanism
        self.digest = _digest(mechanism)
        self.lookup = lookup
        self.server_nonce = secrets.token_urlsafe(24) if nonce is None else nonce
        self.user: str | None = None  # named by client-first; authenticated once `done`
        self.done = False
        self._state = "first"  # then "final", then "over"
        self._known = False
        self._credential: ScramCredential | None = None
        self._gs2_header = self._nonce = self._client_first_bare = self._server_first = ""

    def first(self, client_first: bytes) -> bytes:
        self._advance("first", "final")
        text = self._text(client_first, "client-first")
        cbind, authzid, bare = (text.split(",", 2) + ["", ""])[:3]
        if cbind.startswith("p="):
            self._fail("channel binding is not supported")
        if cbind not in ("n", "y") or not (authzid == "" or authzid.startswith("a=")):
            self._fail("malformed client-first (gs2 header)")
        self._gs2_header, self._client_first_bare = f"{cbind},{authzid},", bare
        attributes = bare.split(",")
        if len(attributes) < 2 or not attributes[0].startswith("n=") or not attributes[1].startswith("r="):
            self._fail("malformed client-first (expected n=<user>,r=<nonce>)")
        user, nonce = _unescape(attributes[0][2:]), attributes[1][2:]
        if user is None or not _NONCE.fullmatch(nonce):
            self._fail("malformed client-first (user name or nonce)")
        self.user = user
        for extension in attributes[2:]:
            if not _EXTENSION.fullmatch(extension):
                self._fail("malformed client-first (extension)")
            key, _, value = extension.partition("=")
            if key == "tokenauth" and value.lower() == "true":
                self._fail("delegation tokens are not supported")
        if authzid and _unescape(authzid[2:]) != user:
            self._fail("the authorization id is not the user name")
        credential = self.lookup(user)
        self._known = credential is not None and credential.iterations >= MIN_ITERATIONS
        self._credential = credential if self._known else self._fake(user)
        self._nonce = nonce + self.server_nonce
        self._server_first = f"r={self._nonce},s={_b64(self._credential.salt)},i={self._credential.iterations}"
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        self._advance("final", "over")
        text = self._text(client_final, "client-final")
        without_proof, sep, proof_text = text.rpartition(",p=")
        attributes = without_proof.split(",")
        if not sep or len(attributes) < 2 or not all(_EXTENSION.fullmatch(a) for a in attributes[2:]):
            self._fail("malformed client-final")
        if attributes[0] != "c=" + _b64(self._gs2_header.encode()):
            self._fail("the channel binding is not the gs2 header's")
        if attributes[1] != "r=" + self._nonce:
            self._fail("the nonce is not the one of this exchange")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            proof = b""
        credential = self._credential
        if len(proof) != len(credential.stored_key):
            self._fail("malformed client-final (proof)")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_key = bytes(a ^ b for a, b in zip(proof, _hmac(self.digest, credential.stored_key, auth_message)))
        right = hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), credential.stored_key)
        if not (right and self._known):
            self._fail("wrong password or unknown user")
        self.done = True
        return b"v=" + _b64(_hmac(self.digest, credential.server_key, auth_message)).encode()

    def _fail(self, reason: str):
        self._state = "over"
        self._credential = None
        who = "" if self.user is None else f" of {self.user!r}"
        raise AuthenticationFailed(f"{self.mechanism} authentication{who} failed: {reason}")

    def _fake(self, user: str) -> ScramCredential:
        size = hashlib.new(self.digest).digest_size
        salt = hmac.new(_FAKE_KEY, f"{self.mechanism}\0{user}".encode(), "sha256").digest()[:SALT_BYTES]
        return ScramCredential(salt, os.urandom(size), os.urandom(size), MIN_ITERATIONS)


class ScramClient(_Exchange):
    """The client's side of one exchange (RFC 5802, section 5): `first()` is client-first,
    `final(server-first)` client-final, `verify(server-final)` checks the server's signature
    (a server that does not hold our credential cannot make it) and ends the exchange.
    Any failure raises AuthenticationFailed, saying what the server did wrong or refused.

    `salted`: where SaltedPassword comes from for (salt, iterations); by default computed
    (PBKDF2, milliseconds), and a caller that logs in often keeps the results (RFC 5802,
    section 5.1, allows a client to cache it: it depends on the password, salt and count only)."""

    _STEP = "step"

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None,
                 salted: Callable[[bytes, int], bytes] | None = None):
        """`nonce`: the client's nonce (tests); random by default."""
        self.mechanism = mechanism
        self.digest = _digest(mechanism)
        self.user = user
        self.salted = salted or (lambda salt, iterations: salted_password(mechanism, password, salt, iterations))
        self.nonce = secrets.token_urlsafe(24) if nonce is None else nonce
        if not _NONCE.fullmatch(self.nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without ','")
        self.done = False
        self._state = "first"  # then "final", "verify", "over"
        self._client_first_bare = f"n={_escape(user)},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        self._advance("first", "final")
        return ("n,," + self._client_first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        self._advance("final", "verify")
        text = self._text(server_first, "server-first")
        if text.startswith("e="):
            self._fail(f"the server refused: {text[2:]}")
        if text.startswith("m="):
            self._fail("the server asks for a mandatory extension")
        attributes = text.split(",")
        if (len(attributes) < 3 or not attributes[0].startswith("r=") or not attributes[1].startswith("s=")
                or not attributes[2].startswith("i=")):
            self._fail("malformed server-first (expected r=<nonce>,s=<salt>,i=<iterations>)")
        nonce = attributes[0][2:]
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce) or not _NONCE.fullmatch(nonce):
            self._fail("the server's nonce does not extend ours")
        try:
            salt = base64.b64decode(attributes[1][2:], validate=True)
        except ValueError:
            salt = b""
        if not salt:
            self._fail("malformed server-first (salt)")
        iterations_text = attributes[2][2:]
        if not re.fullmatch(r"[0-9]{1,10}", iterations_text):
            self._fail("malformed server-first (iterations)")
        iterations = int(iterations_text)
        if not MIN_ITERATIONS <= iterations <= MAX_CLIENT_ITERATIONS:
            self._fail(f"the server asks for {iterations} iterations (at least {MIN_ITERATIONS}, "
                       f"at most {MAX_CLIENT_ITERATIONS})")
        client_key, stored_key, server_key = _keys(self.digest, self.salted(salt, iterations))
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, _hmac(self.digest, stored_key, auth_message)))
        self._server_signature = _hmac(self.digest, server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        self._advance("verify", "over")
        text = self._text(server_final, "server-final")
        if text.startswith("e="):
            self._fail(f"the server refused: {text[2:]}")
        if not text.startswith("v="):
            self._fail("malformed server-final")
        try:
            signature = base64.b64decode(text[2:].split(",", 1)[0], validate=True)
        except ValueError:
            signature = b""
        if not hmac.compare_digest(signature, self._server_signature):
            self._fail("the server's signature is wrong: it does not hold this user's credential")
        self.done = True

    def _fail(self, reason: str):
        self._state = "over"
        raise AuthenticationFailed(f"{self.mechanism} authentication of {self.user!r} failed: {reason}")


def _escape(user: str) -> str:
    """A user name as RFC 5802 writes it: "=" as =3D, "," as =2C."""
    return user.replace("=", "=3D").replace(",", "=2C")


def _unescape(saslname: str) -> str | None:
    """A user name as RFC 5802 escapes it ("," as =2C, "=" as =3D); None if malformed."""
    if not _SASLNAME.fullmatch(saslname):
        return None
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _digest(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (known: {', '.join(MECHANISMS)})") from None


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
