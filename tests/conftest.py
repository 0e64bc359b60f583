"""Shared fixtures: a real ZooKeeper on a free loopback port, in a temporary directory."""

from __future__ import annotations

import os

import pytest

# The client x broker matrix and the tests marked `conformance` run in `make conformance`
# (GROUPKEEPER_CONFORMANCE=1), not in `make test`, which keeps within its 20 minutes.
CONFORMANCE = bool(os.environ.get("GROUPKEEPER_CONFORMANCE"))
collect_ignore = [] if CONFORMANCE else ["conformance"]


def pytest_collection_modifyitems(config, items):
    if CONFORMANCE:
        return
    kept = [item for item in items if item.get_closest_marker("conformance") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept

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


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the session's analysis tests (started only if one asks)."""
    from tools.analyze.job import session

    spark = session("local[2]", "groupkeeper-tests")
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    try:
        yield spark
    finally:
        spark.stop()
