"""Bytes moved from one socket to another by the kernel: Linux `splice` through a pipe.

A relay that reads a Fetch answer's record sets into Python only to write them out again
pays two copies and a buffer per megabyte. With `splice(2)` the bytes go from the broker's
socket into a pipe and from the pipe into the client's socket without entering user space
(HAProxy's `option splice-response`; the standard library has `os.splice` since 3.10, so
no code of ours touches the system call itself). What the gateway must read (an answer's
size and correlation id, the Fetch walk's partition heads and tagged fields) is still
read; only bytes that would be skipped unread are spliced.

- `Pipe`: a pipe of `PIPE_BYTES` (as much of it as the system grants) owned by one broker
  link, and what it holds (`held`). At most `MAX_PIPES` are open in the process at once
  (two descriptors each): a link that finds none left copies, as before.
- `Piped`: `size` bytes waiting in a pipe, an entry of a client connection's `Outbox`
  between the buffers before and after it, so that the order of what goes out is kept in
  one place; sent with `splice` from the pipe to the socket.

Plain sockets only: a TLS connection's bytes must pass through OpenSSL in user space.
"""

from __future__ import annotations

import fcntl
import os

SUPPORTED = hasattr(os, "splice") and hasattr(fcntl, "F_SETPIPE_SZ")  # Linux, Python 3.10+
PIPE_BYTES = 1 << 20  # asked of the kernel per pipe (Linux's pipe-max-size by default)
MAX_PIPES = 512  # pipes open at once, in the process: 1,024 descriptors
_FLAGS = (os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK) if SUPPORTED else 0

_open = 0  # pipes open now


class Pipe:
    __slots__ = ("capacity", "held", "orphan", "r", "w")

    def __init__(self, r: int, w: int, capacity: int):
        self.r, self.w = r, w
        self.capacity = capacity  # bytes it holds at most, as the kernel granted
        self.held = 0  # bytes in it now
        self.orphan = False  # its link has closed: closed once its client has taken what it holds

    @classmethod
    def open(cls) -> Pipe | None:
        """A new pipe, or None: splice not available, `MAX_PIPES` open, or no descriptors."""
        global _open
        if not SUPPORTED or _open >= MAX_PIPES:
            return None
        try:
            r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:  # a user's pipes past pipe-user-pages-soft may not grow: the default size then
            capacity = fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            capacity = fcntl.fcntl(w, fcntl.F_GETPIPE_SZ)
        _open += 1
        return cls(r, w, capacity)

    @property
    def room(self) -> int:
        return self.capacity - self.held

    def fill(self, fd: int, size: int) -> Piped:
        """Move up to `size` bytes (at most `room`) from socket `fd` into the pipe: what
        came, as the `Piped` that sends it on (of size 0: the socket has ended).
        BlockingIOError if nothing was there; other OSErrors pass."""
        n = os.splice(fd, self.w, min(size, self.room), flags=_FLAGS)
        self.held += n
        return Piped(self, n)

    def release(self) -> None:
        """Its link is done with it: closed now if it is empty, else once its client's
        connection has taken what it holds (`Piped.send`) or closes (`Outbox.clear`)."""
        if self.held:
            self.orphan = True
        else:
            self.close()

    def close(self) -> None:
        global _open
        if self.r < 0:
            return
        os.close(self.r)
        os.close(self.w)
        self.r = self.w = -1
        self.held = 0
        _open -= 1


def open_pipes() -> int:
    """Pipes open now (for tests and the bench)."""
    return _open


class Piped:
    """`size` bytes waiting in `pipe` for a client's socket (an `Outbox` entry)."""
    __slots__ = ("pipe", "size")

    def __init__(self, pipe: Pipe, size: int):
        self.pipe = pipe
        self.size = size

    def __len__(self) -> int:
        return self.size

    def send(self, sock) -> int:
        """Splice what the socket takes now from the pipe; the bytes it took.
        BlockingIOError and other OSErrors pass, with nothing taken."""
        pipe = self.pipe
        n = os.splice(pipe.r, sock.fileno(), self.size, flags=_FLAGS)
        self.size -= n
        pipe.held -= n
        if pipe.orphan and not pipe.held:
            pipe.close()
        return n
