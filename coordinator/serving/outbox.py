"""`Outbox`: bytes waiting for a socket to take them, kept as the buffers they came in.

A bytearray that is appended to at its end and cut at its front copies what it holds as it
grows (the gateway's profile: 38 % of a relayed Produce's time on one `+=`). Here nothing is
joined or copied: buffers wait in order, a partly sent one as a view of its rest, and a
plain socket takes several at once (`sendmsg`). A TLS socket takes one at a time, since its
write contract holds what the kernel has not taken itself, and is given more, call after
call, for as long as it takes some (`_send_each`).

An entry may also be a `splice.Piped`: bytes of a relayed answer waiting in a pipe (moved
there from the broker's socket by the kernel), spliced to the socket in their turn.
"""

from __future__ import annotations

import socket
from collections import deque
from itertools import islice

from .splice import Piped

BATCH = 64  # buffers handed to one sendmsg (IOV_MAX is 1024)
TLS_TURN = 1 << 20  # plaintext a TLS socket is given in one send: the others' turn comes after


class Outbox:
    __slots__ = ("_buffers", "piped", "size")

    def __init__(self):
        self._buffers: deque = deque()
        self.size = 0  # bytes waiting
        self.piped = 0  # of its entries, those waiting in a pipe (`Piped`)

    def __bool__(self) -> bool:
        return self.size > 0

    def add(self, data) -> None:
        """Queue `data` (bytes, or a view of bytes that will not change) after the rest."""
        if data:
            self._buffers.append(data)
            self.size += len(data)
            if type(data) is Piped:
                self.piped += 1

    def take(self, other: Outbox) -> None:
        """Queue everything `other` holds after the rest, and empty it."""
        self._buffers.extend(other._buffers)
        self.size += other.size
        self.piped += other.piped
        other._buffers.clear()
        other.size = other.piped = 0

    def clear(self) -> None:
        """Drop everything waiting (its socket is gone); a pipe whose link has gone with
        it is closed."""
        if self.piped:
            for entry in self._buffers:
                if type(entry) is Piped and entry.pipe.orphan:
                    entry.pipe.close()
        self._buffers.clear()
        self.size = self.piped = 0

    def send(self, sock) -> int:
        """Send what the socket takes now; the bytes it took. BlockingIOError and other
        OSErrors (and ssl.SSLError) pass to the caller, with nothing taken."""
        if self.piped:
            return self._send_piped(sock)
        buffers = self._buffers
        if type(sock) is not socket.socket:
            return self._send_each(sock)
        sent = sock.sendmsg(list(islice(buffers, BATCH))) if len(buffers) > 1 else sock.send(buffers[0])
        self.size -= sent
        self._took(sent)
        return sent

    def _send_each(self, sock) -> int:
        """`send` to a TLS socket: a buffer at a time (its write contract), again for as long
        as it takes what it is given, up to `TLS_TURN` bytes. It encrypts at most a few
        records a call, so one call a turn of the serving loop left a large answer to one
        turn per 64 KiB (each an epoll wake-up for a socket that could take more)."""
        buffers = self._buffers
        total = 0
        while buffers and total < TLS_TURN:
            try:
                sent = sock.send(buffers[0])
            except BlockingIOError:
                if total:
                    break
                raise
            if not sent:  # it holds cipher the kernel did not take: wait for the socket
                break
            self.size -= sent
            total += sent
            self._took(sent)
        return total

    def _took(self, left: int) -> None:
        """The socket took `left` bytes of the buffers at the front (no pipe among them)."""
        buffers = self._buffers
        while left:
            head = buffers[0]
            if left >= len(head):
                buffers.popleft()
                left -= len(head)
            else:
                buffers[0] = memoryview(head)[left:]
                left = 0

    def _send_piped(self, sock) -> int:
        """`send` with pipes among the entries: the buffers up to the next pipe in one
        sendmsg, a pipe's bytes by splice, in order, for as long as the socket takes all it
        is given (a plain socket: pipes are spliced to plain sockets only)."""
        buffers = self._buffers
        total = 0
        while buffers:
            head = buffers[0]
            try:
                if type(head) is Piped:
                    sent = head.send(sock)
                    whole = not head.size
                    if whole:
                        buffers.popleft()
                        self.piped -= 1
                else:
                    batch = []
                    for entry in islice(buffers, BATCH):
                        if type(entry) is Piped:
                            break
                        batch.append(entry)
                    sent = sock.sendmsg(batch) if len(batch) > 1 else sock.send(head)
                    whole = sent == sum(map(len, batch))
                    self._took(sent)
            except BlockingIOError:
                if total:
                    break
                raise
            self.size -= sent
            total += sent
            if not whole or not sent:
                break
        return total
