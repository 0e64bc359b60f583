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
