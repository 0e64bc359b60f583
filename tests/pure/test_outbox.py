"""`Outbox`: what a socket has not taken yet, sent in order without joining or copying."""

from __future__ import annotations

import socket

from hypothesis import given, settings, strategies as st

from coordinator.serving.outbox import Outbox


def send_all(box: Outbox, sender: socket.socket, receiver: socket.socket) -> bytes:
    """What `receiver` gets while `box` is sent to the end through `sender`."""
    got = bytearray()
    while box:
        try:
            box.send(sender)
        except BlockingIOError:
            pass
        got += drain(receiver)
    return bytes(got + drain(receiver))


def drain(sock: socket.socket) -> bytes:
    got = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return bytes(got)
        got += chunk


@settings(max_examples=50, deadline=None)
@given(buffers=st.lists(st.binary(min_size=0, max_size=20_000), max_size=40))
def test_every_byte_goes_out_once_in_order_through_a_small_socket(buffers):
    sender, receiver = socket.socketpair()
    with sender, receiver:
        sender.setblocking(False)
        receiver.setblocking(False)
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        box, got = Outbox(), bytearray()
        for data in buffers:
            box.add(data)
        assert box.size == sum(map(len, buffers)) and bool(box) == (box.size > 0)
        got += send_all(box, sender, receiver)
        assert bytes(got) == b"".join(buffers) and box.size == 0


def test_take_moves_another_outbox_after_its_own():
    first, second = Outbox(), Outbox()
    first.add(b"ab")
    second.add(b"cd")
    second.add(memoryview(b"ef"))
    first.take(second)
    assert first.size == 6 and second.size == 0 and not second
    sender, receiver = socket.socketpair()
    with sender, receiver:
        while first:
            first.send(sender)
        assert receiver.recv(16) == b"abcdef"


class Sealing:
    """A TLS socket's write contract, as `TLSSocket` keeps it: at most `per_call` bytes of
    plaintext a call; once the kernel has room for `room` bytes only, the cipher it did not
    take is held and 0 returned, then BlockingIOError until the room is given back."""

    def __init__(self, room: int, per_call: int = 65536):
        self.room, self.per_call = room, per_call
        self.got = bytearray()
        self.calls = 0
        self.holding = False

    def send(self, data) -> int:
        self.calls += 1
        if self.holding:
            raise BlockingIOError
        take = min(len(data), self.per_call)
        if take > self.room:
            self.holding = True
            return 0
        self.room -= take
        self.got += bytes(data[:take])
        return take


def test_a_tls_socket_is_given_buffer_after_buffer_while_it_takes_them():
    box = Outbox()
    parts = [bytes([i]) * n for i, n in enumerate((100_000, 10, 300_000, 5))]
    for part in parts:
        box.add(part)
    tls = Sealing(room=10 << 20)
    assert box.send(tls) == sum(map(len, parts))  # one turn: every buffer, 64 KiB a call
    assert bytes(tls.got) == b"".join(parts) and not box
    assert tls.calls == 2 + 1 + 5 + 1


def test_a_tls_socket_that_holds_cipher_stops_the_turn_and_keeps_the_order():
    box = Outbox()
    box.add(b"a" * 200_000)
    box.add(b"b" * 10)
    tls = Sealing(room=150_000)
    assert box.send(tls) == 131_072  # two calls taken whole, the third held: the rest waits
    assert box.size == 200_010 - 131_072
    try:
        box.send(tls)  # nothing taken at all: the caller waits for the socket
    except BlockingIOError:
        pass
    else:
        raise AssertionError("a socket that took nothing must raise BlockingIOError")
    tls.holding, tls.room = False, 1 << 20
    assert box.send(tls) == 200_010 - 131_072
    assert bytes(tls.got) == b"a" * 200_000 + b"b" * 10 and not box


def test_a_tls_turn_ends_after_tls_turn_bytes():
    from coordinator.serving.outbox import TLS_TURN

    box = Outbox()
    box.add(b"x" * (3 * TLS_TURN))
    tls = Sealing(room=10 * TLS_TURN)
    assert box.send(tls) == TLS_TURN  # the other connections' turn comes before the rest
    assert box.size == 2 * TLS_TURN
