"""The Go clients through the gateway in front of Apache Kafka 4.4: franz-go (classic
cooperative-sticky, and KIP-848's consumer protocol through its ServerSideBalancer) and IBM
sarama (classic: its default range strategy, and sticky) as unmodified group members
(tests/kafka/go, run by tests/support/goclients.py). Each reads every record produced, its
commits read back equal what it read, and its group lives in groupkeeper: found there, its
offsets there, joined with the protocol and strategy asked for, and unknown to Kafka's own
coordinators."""

from __future__ import annotations

import json
import threading
import time

import pytest

from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from protocol.schemas import FIND_COORDINATOR
from tests.support.clients import RawConnection, committed
from tests.support.goclients import go_group_member, go_group_read, go_produce
from tests.support.kafka import broker_groups, create_topic

TOPICS = {"go-clients-a": 3, "go-clients-b": 2}  # name: partitions
RECORDS = 250  # a topic


@pytest.fixture(scope="module")
def produced(kafka, gateway) -> dict:
    """RECORDS values on each topic, produced through the gateway by franz-go, record i to
    partition i % partitions: {"values": [...], "offsets": {(topic, partition): end offset}}."""
    values, offsets = [], {}
    for topic, partitions in TOPICS.items():
        create_topic(kafka, topic, partitions)
        counts = go_produce(gateway.bootstrap, topic, RECORDS, partitions=partitions, prefix=topic)
        assert counts == {p: len(range(p, RECORDS, partitions)) for p in range(partitions)}
        values += [f"{topic}-{i}" for i in range(RECORDS)]
        offsets.update({(topic, p): n for p, n in counts.items()})
    return {"values": sorted(values), "offsets": offsets}


def coordinated_by_groupkeeper(gateway, kafka, group: str, offsets: dict, client_id: str,
                               strategy: str | None = None) -> None:
    """`group` lives in groupkeeper: FindCoordinator at the gateway names groupkeeper's own
    node, the offsets committed there are `offsets`, its members joined with the classic
    protocol and `strategy`, or (strategy None) with KIP-848's consumer protocol, and Kafka's
    coordinators have never heard of it."""
    connection = RawConnection(gateway.port)
    try:
        found = connection.call(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    finally:
        connection.close()
    assert found.error_code == 0 and found.node_id >= INSTANCE_NODE_BASE and found.port == gateway.port, found
    assert committed([gateway.port], group) == offsets
    events = [e for e in gateway.events() if e.get("group") == group]
    joined = [e for e in events if e.get("event") == "member joined"]
    assert joined and all(e["client_id"] == client_id for e in joined), joined
    if strategy is None:  # a consumer-protocol member's join names the group epoch
        assert all("group_epoch" in e for e in joined), joined
        assert any(e.get("event") == "group epoch bumped" for e in events)
    else:
        assert all("generation" in e for e in joined), joined
        assert {e["strategy"] for e in events if e.get("event") == "rebalance completed"} - {None} == {strategy}
    assert group not in broker_groups(kafka)


def reads_everything(result: dict, produced: dict) -> None:
    everything = sorted(f"{t}-{p}" for t, p in produced["offsets"])
    assert sorted(result["values"]) == produced["values"], f"read {result['read']} of {len(produced['values'])}"
    assert result["assignments"] and result["assignments"][-1] == everything, result["assignments"]
    assert result["committed"] == {f"{t}-{p}": n for (t, p), n in produced["offsets"].items()}


@pytest.mark.parametrize("client, protocol, strategy, expected, kafka_version", [
    pytest.param("franz", "classic", "", "cooperative-sticky", "", id="franz-go classic cooperative-sticky"),
    pytest.param("franz", "consumer", "", None, "", id="franz-go KIP-848"),
    pytest.param("sarama", "classic", "", "range", "", id="sarama classic range"),
    pytest.param("sarama", "classic", "sticky", "sticky", "4.0.0", id="sarama 4.0 classic sticky"),
])
def test_a_go_client_reads_every_record_in_a_group_groupkeeper_coordinates(gateway, kafka, produced, tmp_path, client,
                                                                          protocol, strategy, expected,
                                                                          kafka_version):
    group = f"go-clients-{client}-{protocol}-{strategy or 'default'}"
    total = len(produced["values"])
    result = go_group_read(gateway.bootstrap, group, list(TOPICS), total, client, protocol, strategy=strategy,
                           kafka_version=kafka_version, seconds=45, log=tmp_path / f"{group}.log")
    reads_everything(result, produced)
    coordinated_by_groupkeeper(gateway, kafka, group, produced["offsets"], f"goclients-{client}", expected)
