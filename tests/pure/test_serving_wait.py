"""`serving.trioloop` and the serving loop that waits in its own epoll while trio is idle
(`serving_wait = "epoll"`): what trio has to do is read right (a task scheduled, one of the
serving loop's own batch still to step, the next deadline), one loop per run claims it, a
test's MockClock falls back to waiting through trio, and while a server is serving a
client, every kind of trio wake-up still comes on time: a deadline, a trio socket, a
thread's result, a task woken beside the serving loop, `wait_all_tasks_blocked`, a second
server of the same run. Local sockets only."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
import trio
import trio.testing

from coordinator.listeners import Listener
from coordinator.serving.interfaces import Limits
from coordinator.serving.server import Server
from coordinator.serving.trioloop import TrioLoop
from protocol import ErrorCode, messages as m


def test_what_trio_has_to_do_is_read_from_its_loop():
    seen = {}

    async def main():
        loop = TrioLoop.claim()
        assert loop is not None
        assert TrioLoop.claim() is None  # one claim per run
        await loop.settle()
        seen["idle"] = loop.timeout()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep, 30)
            seen["spawned"] = loop.timeout()  # the sleeper has not run yet
            await trio.testing.wait_all_tasks_blocked()  # now it sleeps, until its deadline
            seen["sleeping"] = loop.timeout()
            nursery.cancel_scope.cancel()
        loop.release()
        again = TrioLoop.claim()
        assert again is not None
        again.release()

    trio.run(main)
    assert seen["idle"] == -1  # nothing to do and no deadline: wait for ever
    assert seen["spawned"] is None
    assert 29 < seen["sleeping"] <= 30


def test_a_task_of_the_same_batch_still_to_step_is_something_to_run():
    """Tasks runnable at the start of a turn step as a batch: one woken with the caller and
    not yet stepped is in no queue, and must still count (else it waits for the next wake-up)."""
    seen = []

    async def main():
        loop = TrioLoop.claim()
        await loop.settle()
        event = trio.Event()
        ran = []

        async def sleeper():
            await event.wait()
            ran.append(True)

        async with trio.open_nursery() as nursery:
            for _ in range(20):  # in about half of the batches it steps after the caller
                ran.clear()
                event = trio.Event()
                nursery.start_soon(sleeper)
                await trio.testing.wait_all_tasks_blocked()
                event.set()  # the sleeper and the caller become runnable in the same turn
                await trio.lowlevel.checkpoint()
                seen.append((bool(ran), loop.timeout()))
        loop.release()

    trio.run(main)
    assert all(timeout is None for ran, timeout in seen if not ran), seen  # not stepped yet: counted
    assert any(not ran for ran, _ in seen)  # the case arose


def test_a_clock_not_the_systems_waits_through_trio():
    async def main():
        loop = TrioLoop.claim()
        if loop is not None:
            loop.release()
        return loop

    assert trio.run(main, clock=trio.testing.MockClock()) is None
    assert trio.run(main) is not None


def test_an_unknown_way_to_wait_stops_start_up():
    from coordinator import daemon
    from coordinator.config import load_config

    config = load_config(None)
    config["serving_wait"] = "spin"
    with pytest.raises(daemon.StartupError, match="serving_wait must be one of trio, epoll, not 'spin'"):
        trio.run(daemon.run, config)


class _Api:
    """Answers ApiVersions only: enough to show a connection served."""

    def dispatch(self, api_key: int, api_version: int):
        if api_key != 18:
            return None
        return (lambda header, request, client: self.api_versions_response(), False, False)

    def api_versions_response(self, error: ErrorCode = ErrorCode.NONE):
        return m.ApiVersionsResponse(error_code=error, api_keys=[m.ApiVersion(api_key=18, min_version=0,
                                                                             max_version=3)])

    def stable_heartbeat(self, frame, now, client):
        return None

    steady_consumer_heartbeat = stable_heartbeat


def _api_versions(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)  # ApiVersions v0, no client id
    return struct.pack(">i", len(body)) + body


def _answer(sock: socket.socket) -> int:
    """The next answer's correlation id."""
    head = b""
    while len(head) < 8:
        got = sock.recv(8 - len(head))
        assert got, "closed"
        head += got
    size, correlation_id = struct.unpack(">ii", head)
    left = size - 4
    while left:
        got = sock.recv(left)
        assert got, "closed"
        left -= len(got)
    return correlation_id


async def _serving(nursery) -> tuple[Server, socket.socket]:
    """A server that waits in its own epoll where it can, serving; a client of it."""
    server = Server(_Api(), Limits(max_request_bytes=1 << 20, max_connections=10, idle_timeout=60.0), wait="epoll")
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await nursery.start(server.serve, [(listeners[0], Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", port))])
    with trio.fail_after(5):
        return server, await trio.to_thread.run_sync(socket.create_connection, ("127.0.0.1", port))


async def _asked(client: socket.socket, correlation_id: int) -> None:
    with trio.fail_after(5):  # the reaper wakes the loop every second: a lost wake-up would take that long
        await trio.to_thread.run_sync(client.sendall, _api_versions(correlation_id))
        assert await trio.to_thread.run_sync(_answer, client) == correlation_id


def _send_raw(fd: int) -> None:
    with socket.socket(fileno=socket.dup(fd)) as sock:
        sock.send(b"x")


async def test_trio_wakes_on_time_while_the_server_waits_in_its_own_epoll():
    async with trio.open_nursery() as nursery:
        server, client = await _serving(nursery)
        try:
            started = time.monotonic()
            for correlation_id in (1, 2, 3):  # served, as a client sees it, with trio idle between
                await _asked(client, correlation_id)
            assert time.monotonic() - started < 0.9  # no wake-up waited for the reaper's
            assert server.waits_alone  # the serving loop waits in its own epoll here

            with trio.fail_after(5):  # a deadline of trio's ends the wait in time
                started = time.monotonic()
                await trio.sleep(0.2)
                assert 0.2 <= time.monotonic() - started < 0.6

            a, b = trio.socket.socketpair()  # a socket of trio's, made ready by a thread
            with a, b, trio.fail_after(5):
                timer = threading.Timer(0.1, _send_raw, (b.fileno(),))
                timer.start()
                started = time.monotonic()
                assert await a.recv(1) == b"x"
                assert time.monotonic() - started < 0.6
                timer.join()

            with trio.fail_after(5):  # a thread's result comes back through trio's entry queue
                started = time.monotonic()
                assert await trio.to_thread.run_sync(lambda: time.sleep(0.1) or 7) == 7
                assert time.monotonic() - started < 0.6

            with trio.fail_after(5):  # a test's wait for every task blocked still ends
                await trio.testing.wait_all_tasks_blocked(0.05)

            await _asked(client, 4)
        finally:
            client.close()
            server.shutdown(0)
    assert server.stopped.is_set()


async def test_a_second_server_in_the_run_waits_through_trio_and_both_serve():
    async with trio.open_nursery() as nursery:
        first, one = await _serving(nursery)
        second, other = await _serving(nursery)
        try:
            started = time.monotonic()
            for correlation_id in range(1, 7):  # each served while the other's loop may be the one waiting
                await _asked(one if correlation_id % 2 else other, correlation_id)
            assert time.monotonic() - started < 0.9
            assert first.waits_alone and not second.waits_alone
        finally:
            one.close()
            other.close()
            first.shutdown(0)
            second.shutdown(0)
