"""Shared fixtures: a real ZooKeeper on a free loopback port, in a temporary directory."""

from __future__ import annotations

import pytest

from coordinator.store.zkserver import ZooKeeperServer, free_port


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One ZooKeeper for the session; short ticks so session-expiry tests stay quick."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), free_port(), tick_ms=200)
    server.start()
    try:
        yield server
    finally:
        server.stop()
