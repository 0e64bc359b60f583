"""A coordinator crash costs the consumers one detection, not two (issue 38), with Tansu
behind two gateways: librdkafka, kafka-python and, where installed, aiokafka in a classic
group, librdkafka in a KIP-848 group (tests/support/failover.py has the scenario; the same
with Kafka 4.4 and the Java client is tests/kafka/test_failover_clients.py)."""

from __future__ import annotations

import importlib.util

from tests.support import failover
from tests.support.tansu import tansu  # noqa: F401 - a fixture

CLASSIC = ["librdkafka", "kafka-python"] + (["aiokafka"] if importlib.util.find_spec("aiokafka") else [])


def test_a_killed_coordinator_costs_the_consumers_one_detection(zookeeper, tmp_path, tansu):  # noqa: F811
    outcome = failover.run(zookeeper, tmp_path, tansu.bootstrap, [tansu.node_id], tansu.create_topic,
                           classic=[failover.python_member(c, "classic") for c in CLASSIC],
                           consumer=[failover.python_member("librdkafka", "consumer")])
    failover.check(outcome)
