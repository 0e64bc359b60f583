"""A coordinator crash costs the consumers one detection, not two (issue 38), with Apache
Kafka 4.4 behind two gateways: the Java client, librdkafka and kafka-python in a classic
group, the Java client and librdkafka in a KIP-848 group (tests/support/failover.py has the
scenario; tests/tansu/test_failover_clients.py runs it with Tansu and aiokafka)."""

from __future__ import annotations

import pytest

from tests.support import failover
from tests.support.kafka import create_topic

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)


def test_a_killed_coordinator_costs_the_consumers_one_detection(zookeeper, tmp_path, kafka):
    outcome = failover.run(zookeeper, tmp_path, kafka.bootstrap, [n.node_id for n in kafka.nodes],
                           lambda name, n: create_topic(kafka, name, n),
                           classic=[failover.java_member("classic"), failover.python_member("librdkafka", "classic"),
                                    failover.python_member("kafka-python", "classic")],
                           consumer=[failover.java_member("consumer"),
                                     failover.python_member("librdkafka", "consumer")],
                           start_timeout=120.0)
    failover.check(outcome)
