"""Shared fixtures: a real ZooKeeper on a free loopback port, in a temporary directory."""

from __future__ import annotations

import socket

import pytest

from coordinator.store.zkserver import ZooKeeperServer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One ZooKeeper for the session; short ticks so session-expiry tests stay quick."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), free_port(), tick_ms=200)
    server.start()
    try:
        yield server
    finally:
        server.stop()
