"""Passwords that groupkeeper checks itself (the metrics endpoint's basic auth), kept as
hashes: scrypt from the standard library, salted, in one self-describing string
`scrypt$N$r$p$<salt>$<hash>` (base64), so that the configuration never holds a password.
`groupkeeper hash-password` makes one; `Credentials` checks a user's password against them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import trio

N, R, P = 2**14, 8, 1  # 30 ms and 16 MiB per check on this machine
_MAX_N = 2**20  # a hash asking for more is refused: 1 GiB per check is no configuration
_SALT_BYTES, _HASH_BYTES = 16, 32


def hash_password(password: str) -> str:
    salt = os.urandom(_SALT_BYTES)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, dklen=_HASH_BYTES)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(digest)}"


def check_hash(stored: str) -> None:
    """ValueError saying what is wrong with a stored hash, if anything."""
    _parse(stored)


def verify_password(password: str, stored: str) -> bool:
    """Whether `password` is the one `stored` was made from (compared in constant time)."""
    n, r, p, salt, digest = _parse(stored)
    computed = hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, dklen=len(digest),
                              maxmem=256 * n * r + 1024 * 1024)
    return hmac.compare_digest(computed, digest)


def _parse(stored: str) -> tuple[int, int, int, bytes, bytes]:
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != "scrypt":
        raise ValueError("not a password hash from `groupkeeper hash-password` (scrypt$N$r$p$salt$hash)")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = base64.b64decode(parts[4], validate=True), base64.b64decode(parts[5], validate=True)
    except ValueError:
        raise ValueError("a password hash with a malformed number or base64 part") from None
    if not (1 < n <= _MAX_N and n & (n - 1) == 0 and 0 < r <= 32 and 0 < p <= 16 and salt and len(digest) >= 16):
        raise ValueError(f"password hash parameters out of range (N a power of 2 up to {_MAX_N}, r <= 32, p <= 16)")
    return n, r, p, salt, digest


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Credentials:
    """Users' passwords checked against their hashes. A check takes tens of milliseconds of
    CPU, so it runs in a thread, one at a time, and a pair that passed is remembered (by its
    SHA-256, a few at most) so that a client coming back does not pay it again."""

    REMEMBERED = 16

    def __init__(self, users: dict[str, str]):
        self.users = users  # name -> hash
        self.passed: dict[bytes, None] = {}
        self.limiter = trio.CapacityLimiter(1)

    async def allows(self, user: str, password: str) -> bool:
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        if key in self.passed:
            return True
        stored = self.users.get(user)
        if stored is None:
            return False
        if not await trio.to_thread.run_sync(verify_password, password, stored, limiter=self.limiter):
            return False
        if len(self.passed) >= self.REMEMBERED:
            self.passed.pop(next(iter(self.passed)))
        self.passed[key] = None
        return True
