"""`serving.splice`: bytes moved from a socket into a pipe and from the pipe to a socket by
the kernel, as entries of an `Outbox` among ordinary buffers: every byte out once, in
order, through a socket that takes little at a time; a pipe whose link has gone closed
once its bytes are out, or when its client's outbox is dropped. Local sockets and pipes
only."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given, settings, strategies as st

from coordinator.serving import splice
from coordinator.serving.outbox import Outbox
from coordinator.serving.splice import Pipe, Piped
from tests.pure.test_outbox import drain, send_all

pytestmark = pytest.mark.skipif(not splice.SUPPORTED, reason="splice(2) is Linux's")


def pair(sndbuf: int | None = None) -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    if sndbuf:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    return a, b


@settings(max_examples=40, deadline=None)
@given(entries=st.lists(st.tuples(st.booleans(), st.binary(min_size=1, max_size=30_000)), max_size=20))
def test_pipes_and_buffers_go_out_once_in_order_through_a_small_socket(entries):
    before = splice.open_pipes()
    pipe = Pipe.open()
    assert pipe is not None and pipe.capacity >= 4096
    source_in, source = pair()  # the broker's side: what is spliced comes from `source`
    sender, receiver = pair(sndbuf=4096)
    box, got, expected = Outbox(), bytearray(), bytearray()
    try:
        for piped, data in entries:
            expected += data
            if not piped:
                box.add(data)
                continue
            source_in.sendall(data)
            left = len(data)
            while left:  # into the pipe as the socket gives them: perhaps in pieces
                if not pipe.room:  # full: the client takes some first
                    while box.piped:
                        try:
                            box.send(sender)
                        except BlockingIOError:
                            pass
                        got += drain(receiver)
                part = pipe.fill(source.fileno(), left)
                left -= len(part)
                box.add(part)
        assert box.size == len(expected)
        got += send_all(box, sender, receiver)
        assert bytes(got) == bytes(expected) and box.size == 0 and box.piped == 0 and pipe.held == 0
    finally:
        pipe.close()
        for sock in (source_in, source, sender, receiver):
            sock.close()
    assert splice.open_pipes() == before


def test_an_empty_socket_is_a_blocking_error_and_an_ended_one_gives_nothing():
    pipe = Pipe.open()
    a, b = pair()
    try:
        with pytest.raises(BlockingIOError):
            pipe.fill(b.fileno(), 100)
        a.close()
        assert len(pipe.fill(b.fileno(), 100)) == 0  # the peer has closed
    finally:
        pipe.close()
        b.close()


def test_a_released_pipe_closes_when_its_bytes_are_out_or_its_outbox_is_dropped():
    before = splice.open_pipes()
    source_in, source = pair()
    sender, receiver = pair()
    try:
        for ending in ("sent", "dropped"):
            pipe = Pipe.open()
            box = Outbox()
            source_in.sendall(b"x" * 1000)
            box.add(b"head")
            box.add(pipe.fill(source.fileno(), 1000))
            pipe.release()  # its link has closed: the bytes in it are still its client's
            assert pipe.orphan and splice.open_pipes() == before + 1
            if ending == "sent":
                while box:
                    box.send(sender)
                assert drain(receiver) == b"head" + b"x" * 1000
            else:
                box.clear()  # the client's connection closed
            assert pipe.r == -1 and splice.open_pipes() == before
        empty = Pipe.open()
        empty.release()  # nothing in it: closed at once
        assert empty.r == -1 and splice.open_pipes() == before
    finally:
        for sock in (source_in, source, sender, receiver):
            sock.close()


def test_no_more_pipes_than_the_limit(monkeypatch):
    monkeypatch.setattr(splice, "MAX_PIPES", splice.open_pipes() + 2)
    pipes = [Pipe.open(), Pipe.open()]
    try:
        assert all(pipes) and Pipe.open() is None  # the third: the link copies instead
    finally:
        for pipe in pipes:
            pipe.close()


def test_take_carries_the_pipes_count():
    pipe = Pipe.open()
    source_in, source = pair()
    try:
        source_in.sendall(b"abc")
        first, second = Outbox(), Outbox()
        second.add(pipe.fill(source.fileno(), 3))
        first.take(second)
        assert first.piped == 1 and second.piped == 0 and isinstance(first._buffers[0], Piped)
    finally:
        pipe.close()
        source_in.close()
        source.close()
