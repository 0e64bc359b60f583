"""The Kafka cluster the modules of tests/kafka share (see __init__.py), and a gateway in
front of it per module."""

from __future__ import annotations

import pytest

from tests.support.kafka import KraftCluster, start_gateway, wait_for_brokers


@pytest.fixture(scope="package")
def kafka(tmp_path_factory):
    """Three combined nodes, started once for the package's tests and stopped after them."""
    cluster = KraftCluster(tmp_path_factory.mktemp("kafka"), nodes=3, heap_mb=384)
    with cluster:
        wait_for_brokers(cluster)
        yield cluster


@pytest.fixture(scope="module")
def gateway(zookeeper, tmp_path_factory, kafka):
    """A groupkeeper gateway fronting `kafka`, for one module's tests."""
    process = start_gateway(zookeeper, tmp_path_factory.mktemp("gateway"), kafka)
    try:
        yield process
    finally:
        assert process.stop() == 0
