"""`free_port` gives servers started by tests and benchmarks ports outside the kernel's
ephemeral range, where no connection opened meanwhile can take them as its local end (a
coordinator once failed to start in CI with "Address already in use" on such a port)."""

from __future__ import annotations

import socket

from coordinator.store import zkserver
from coordinator.store.zkserver import free_port


def test_ports_are_outside_the_ephemeral_range_distinct_and_bindable():
    low, high = zkserver._ephemeral_range()
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= port <= high and port >= zkserver._LOWEST_PORT for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))


class InTurn:
    """random.SystemRandom choosing the span's ports in turn."""

    def __init__(self):
        self.next = 0

    def randrange(self, n):
        self.next += 1
        return self.next - 1


def test_a_port_something_listens_on_or_handed_out_before_is_passed_over(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        monkeypatch.setattr(zkserver, "_LOWEST_PORT", taken)
        monkeypatch.setattr(zkserver, "_ephemeral_range", lambda: (taken + 5_000, 65535))
        monkeypatch.setattr(zkserver.random, "SystemRandom", InTurn)
        monkeypatch.setattr(zkserver, "_HANDED_OUT", {taken + 1: None})
        port = free_port()  # the first after both that binds (taken + 2, unless the machine has it)
        assert taken + 2 <= port < taken + 5_000


def test_what_was_handed_out_is_bounded(monkeypatch):
    monkeypatch.setattr(zkserver, "MAX_HANDED_OUT", 10)
    monkeypatch.setattr(zkserver, "_HANDED_OUT", {})
    ports = [free_port() for _ in range(30)]
    assert list(zkserver._HANDED_OUT) == ports[-10:]


def test_without_a_range_left_the_kernel_chooses(monkeypatch):
    monkeypatch.setattr(zkserver, "_ephemeral_range", lambda: (1024, 65535))
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
