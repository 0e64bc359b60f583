"""groupkeeper beside a cluster without ZooKeeper: `run --brokers` pointed at stand-in
brokers (a cluster whose topics are known only through Metadata, as KRaft Kafka's and
Redpanda's are). What clients read of the cluster through groupkeeper (its brokers, id,
controller, leaders and topic ids, current within the refresh interval), and groups
following the cluster's topics: created, grown, subscribed to before they exist, deleted,
deleted and created again.

The members are our raw client, and unmodified kafka-python and confluent-kafka consumers
that cannot reach the brokers themselves (the stand-in's Metadata names an address nobody
listens on; groupkeeper reaches it through its bootstrap address). Consumers that do reach
the cluster's brokers are not shown to work, because they do not: they send FindCoordinator
to whichever broker they like, and librdkafka drops groupkeeper's node once a broker's
Metadata has no such node (docs/architecture.md, "Beside which cluster").
"""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families

from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from coordinator.store.zkserver import free_port
from protocol.schemas import API_VERSIONS, FETCH, LIST_OFFSETS, METADATA, OFFSET_FOR_LEADER_EPOCH, PRODUCE
from tests.support.clients import CK, RawConnection, RawMember, kp_assigned, kp_commit, kp_consumer, poll_until
from tests.support.coordinator_process import CoordinatorProcess
from tests.support.standin_broker import Log, StandInBroker
from tests.zookeeper.test_groups_cli import described

ORDERS = uuid.UUID(int=0xA1)


@pytest.fixture
def standin():
    # a Kafka 4.0 broker's ranges for two of the APIs clients send only to leaders
    broker = StandInBroker({}, {"orders": (4, ORDERS)}, advertises={FETCH.key: (4, 17), PRODUCE.key: (3, 12)}).start()
    try:
        yield broker
    finally:
        broker.stop()


def _groupkeeper(zookeeper, tmp_path, *brokers: int) -> CoordinatorProcess:
    process = CoordinatorProcess(zookeeper, tmp_path, brokers=",".join(f"127.0.0.1:{port}" for port in brokers),
                                 metadata_max_age_ms=200)
    process.start()
    return process


def _metadata(process: CoordinatorProcess, topics=None):
    connection = RawConnection(process.port)
    try:
        return connection.call(METADATA, 12, {"topics": topics, "allow_auto_topic_creation": False})
    finally:
        connection.close()


def _until(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)
    return found


def test_clients_read_the_clusters_brokers_leaders_and_topic_ids_through_groupkeeper(zookeeper, tmp_path, standin):
    groupkeeper = _groupkeeper(zookeeper, tmp_path, standin.port)
    try:
        body = _metadata(groupkeeper)
        assert sorted((b.node_id, b.port) for b in body.brokers) == [
            (1, standin.port), (INSTANCE_NODE_BASE, groupkeeper.port)]
        assert body.cluster_id == "standin-cluster" and body.controller_id == 1  # the cluster's, not ours
        (orders,) = body.topics
        assert (orders.name, orders.topic_id, orders.error_code) == ("orders", ORDERS, 0)
        assert [(p.partition_index, p.leader_id, p.replica_nodes) for p in orders.partitions] == [
            (p, 1, [1]) for p in range(4)]
        status, text = groupkeeper.scrape()
        (age,) = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                  if s.name == "groupkeeper_topic_metadata_age_seconds"]
        assert status == 200 and 0 <= age < 5

        # the leader-only APIs as the cluster's brokers serve them, within what groupkeeper reads
        connection = RawConnection(groupkeeper.port)
        try:
            ranges = {k.api_key: (k.min_version, k.max_version) for k in connection.call(API_VERSIONS, 3, {
                "client_software_name": "t", "client_software_version": "1"}).api_keys}
        finally:
            connection.close()
        assert {k: ranges.get(k) for k in (FETCH.key, PRODUCE.key, LIST_OFFSETS.key, OFFSET_FOR_LEADER_EPOCH.key)} == {
            FETCH.key: (4, 17), PRODUCE.key: (3, 12), LIST_OFFSETS.key: (1, 7), OFFSET_FOR_LEADER_EPOCH.key: None}

        standin.topics["orders"] = (6, ORDERS)
        standin.topics["clicks"] = (2, uuid.UUID(int=0xC1))
        _until(lambda: {t.name: len(t.partitions) for t in _metadata(groupkeeper).topics} == {"orders": 6, "clicks": 2})
    finally:
        assert groupkeeper.stop() == 0


def test_groups_rebalance_as_the_clusters_topics_change(zookeeper, tmp_path, standin):
    groupkeeper = _groupkeeper(zookeeper, tmp_path, standin.port)
    member = RawMember(groupkeeper.port, "follows", "orders", "later")
    try:
        assert member.join_and_sync() == {"orders": [0, 1, 2, 3]}
        standin.topics["orders"] = (6, ORDERS)  # grown
        assert member.rejoin_when_asked() == {"orders": list(range(6))}
        standin.topics["later"] = (2, uuid.UUID(int=0xB2))  # subscribed to before it existed
        assert member.rejoin_when_asked() == {"orders": list(range(6)), "later": [0, 1]}
        standin.topics["later"] = (2, uuid.UUID(int=0xB3))  # deleted and created again: another topic
        assert member.rejoin_when_asked() == {"orders": list(range(6)), "later": [0, 1]}
        del standin.topics["later"]  # deleted
        assert member.rejoin_when_asked() == {"orders": list(range(6))}
        events = [e for e in groupkeeper.events() if e.get("event") == "rebalance started"]
        assert len(events) >= 4
    finally:
        member.close()
        assert groupkeeper.stop() == 0


def test_a_broker_restarted_on_another_port_among_the_bootstrap_addresses(zookeeper, tmp_path):
    first_port, second_port = free_port(), free_port()
    table = {"orders": (4, ORDERS)}
    first = StandInBroker({}, table, port=first_port).start()
    groupkeeper = _groupkeeper(zookeeper, tmp_path, first_port, second_port)
    second = None
    try:
        assert [t.name for t in _metadata(groupkeeper).topics] == ["orders"]
        first.stop()
        table["clicks"] = (1, uuid.UUID(int=0xC1))
        second = StandInBroker({}, table, port=second_port).start()
        body = _until(lambda: next((b for b in [_metadata(groupkeeper)] if len(b.topics) == 2), None), timeout=20)
        assert sorted((n.node_id, n.port) for n in body.brokers) == [
            (1, second_port), (INSTANCE_NODE_BASE, groupkeeper.port)]
        failures = [s for f in text_string_to_metric_families(groupkeeper.scrape()[1]) for s in f.samples
                    if s.name == "groupkeeper_topic_metadata_failures_total"]
        assert sum(s.value for s in failures) >= 1  # the first broker gone was noticed, and counted
    finally:
        first.stop()
        if second is not None:
            second.stop()
        assert groupkeeper.stop() == 0


def test_lag_comes_from_the_leaders_the_brokers_named(zookeeper, tmp_path):
    broker = StandInBroker({("lagged", 0): Log(0, 100), ("lagged", 1): Log(10, 50)},
                           {"lagged": (2, uuid.UUID(int=0xD1))}).start()
    groupkeeper = _groupkeeper(zookeeper, tmp_path, broker.port)
    member = RawMember(groupkeeper.port, "laggards", "lagged")
    try:
        assert member.join_and_sync() == {"lagged": [0, 1]}
        assert member.commit("lagged", {0: 40, 1: 45}) == [0, 0]
        rows = described(groupkeeper.bootstrap, "laggards")["offsets"]
        assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in rows] == [
            (0, 40, 100, 60), (1, 45, 50, 5)]
    finally:
        member.close()
        broker.stop()
        assert groupkeeper.stop() == 0


def _wait_for_metric(process: CoordinatorProcess, value: float, name: str, timeout: float = 30.0, **labels) -> None:
    deadline = time.monotonic() + timeout
    while (got := process.metric(name, **labels)) != value:
        assert time.monotonic() < deadline, f"{name} {labels}: {got}, not {value}"
        time.sleep(0.1)


def test_lag_on_metrics_is_asked_of_the_leaders_and_kept_current(zookeeper, tmp_path):
    """Without the gateway, the log ends lag needs are asked of the leaders (ListOffsets),
    for the partitions groups have committed offsets for, again once older than
    lag_refresh_interval_ms; per partition series when asked for."""
    broker = StandInBroker({("lagged", 0): Log(0, 100), ("lagged", 1): Log(10, 50), ("other", 0): Log(0, 9)},
                           {"lagged": (2, uuid.UUID(int=0xD1)), "other": (1, uuid.UUID(int=0xD2))}).start()
    groupkeeper = CoordinatorProcess(zookeeper, tmp_path, brokers=f"127.0.0.1:{broker.port}", metadata_max_age_ms=200,
                                     lag_refresh_interval_ms=1000, metrics_lag_partition_series=10)
    groupkeeper.start()
    member = RawMember(groupkeeper.port, "laggards", "lagged")
    try:
        assert member.join_and_sync() == {"lagged": [0, 1]}
        assert member.commit("lagged", {0: 40, 1: 45}) == [0, 0]
        _wait_for_metric(groupkeeper, 65, "groupkeeper_consumergroup_lag", group="laggards", topic="lagged")
        assert groupkeeper.metric("groupkeeper_consumergroup_partition_lag", group="laggards", topic="lagged",
                       partition="0") == 60
        broker.logs[("lagged", 1)] = Log(10, 80)  # records arrive; nobody reads them
        _wait_for_metric(groupkeeper, 95, "groupkeeper_consumergroup_lag", group="laggards", topic="lagged")
        assert groupkeeper.metric("groupkeeper_lag_list_offsets_requests_total", outcome="ok") >= 2
        # only partitions with committed offsets are asked about
        assert groupkeeper.metric("groupkeeper_consumergroup_lag", topic="other") is None
        # commits that stopped while lag remains: Burrow's STOP, once the silence outlasts the window
        time.sleep(1.1)
        assert member.commit("lagged", {0: 41, 1: 45}) == [0, 0]
        _wait_for_metric(groupkeeper, 1, "groupkeeper_consumergroup_status", group="laggards", status="STOP")
        assert groupkeeper.metric("groupkeeper_consumergroups_by_status", status="STOP") == 1
        # and in `groups describe --state`, from the coordinator's own judgement
        assert described(groupkeeper.bootstrap, "laggards", "--state")["status"] == "STOP"
    finally:
        member.close()
        broker.stop()
        assert groupkeeper.stop() == 0


def test_unmodified_consumers_follow_the_clusters_topics(zookeeper, tmp_path):
    """kafka-python and confluent-kafka members, bootstrapping from groupkeeper: joined,
    assigned, then rebalanced as the cluster's topics grow, appear, are created again, and
    grow once more after the broker came back on another of the bootstrap addresses. The
    broker's Metadata names an address the consumers cannot connect to (groupkeeper reaches
    it through its bootstrap addresses), so they talk to groupkeeper alone: a consumer that
    reaches the brokers does not keep to groupkeeper (see the module's text)."""
    unreachable, first_port, second_port = free_port(), free_port(), free_port()
    table = {"orders": (4, ORDERS)}
    broker = StandInBroker({}, table, port=first_port, advertised_port=unreachable).start()
    groupkeeper = _groupkeeper(zookeeper, tmp_path, first_port, second_port)
    # librdkafka joins with the subscribed topics its own metadata knows, and looks again every
    # topic.metadata.refresh.interval.ms (5 min by default): a second here
    ck = CK(groupkeeper.bootstrap, "unmodified", "orders", "later", **{"topic.metadata.refresh.interval.ms": 1000})
    kp = None
    try:
        poll_until(lambda: ck.assigned == {("orders", p) for p in range(4)}, ck)
        kp = kp_consumer(groupkeeper.bootstrap, "unmodified", "orders")
        both = lambda: kp_assigned(kp) | ck.assigned  # noqa: E731
        poll_until(lambda: kp_assigned(kp) and ck.assigned and both() == {("orders", p) for p in range(4)}
                   and not kp_assigned(kp) & ck.assigned, kp, ck)
        broker.topics["orders"] = (6, ORDERS)  # grown
        poll_until(lambda: both() == {("orders", p) for p in range(6)} and not kp_assigned(kp) & ck.assigned,
                   kp, ck)
        broker.topics["later"] = (2, uuid.UUID(int=0xB2))  # created after a member subscribed to it
        poll_until(lambda: {("later", 0), ("later", 1)} <= ck.assigned, kp, ck)
        assigns = sum(1 for kind, _ in ck.history if kind == "assign")
        broker.topics["later"] = (2, uuid.UUID(int=0xB3))  # deleted and created again: another topic
        poll_until(lambda: sum(1 for kind, _ in ck.history if kind == "assign") > assigns
                   and {("later", 0), ("later", 1)} <= ck.assigned, kp, ck)
        kp_commit(kp, {TopicPartition(t, p): OffsetAndMetadata(7, "", -1) for t, p in kp_assigned(kp)})
        assert all(kp.committed(TopicPartition(t, p)) == 7 for t, p in kp_assigned(kp))

        broker.stop()
        broker = StandInBroker({}, table, port=second_port, advertised_port=unreachable).start()
        table["orders"] = (8, ORDERS)
        poll_until(lambda: {("orders", p) for p in range(8)} <= both() and not kp_assigned(kp) & ck.assigned,
                   kp, ck)
    finally:
        if kp is not None:
            kp.close()
        ck.consumer.close()
        broker.stop()
        assert groupkeeper.stop() == 0
