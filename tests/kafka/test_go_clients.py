"""The Go clients through the gateway in front of Apache Kafka 4.4: franz-go (classic
cooperative-sticky, and KIP-848's consumer protocol through its ServerSideBalancer) and IBM
sarama (classic: its default range strategy, and sticky) as unmodified group members
(tests/kafka/go, run by tests/support/goclients.py). Each reads every record produced, its
commits read back equal what it read, and its group lives in groupkeeper: found there, its
offsets there, joined with the protocol and strategy asked for, and unknown to Kafka's own
coordinators."""

from __future__ import annotations

import time

import pytest

from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from protocol.schemas import FIND_COORDINATOR
from tests.support.clients import RawConnection, committed
from tests.support.goclients import go_group_member, go_group_read, go_produce
from tests.support.kafka import broker_groups, create_topic

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)

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


def coordinated_by_groupkeeper(gateway, kafka, group: str, offsets: dict) -> list[dict]:
    """`group` lives in groupkeeper: FindCoordinator at the gateway names groupkeeper's own
    node, the offsets committed there are `offsets`, and Kafka's coordinators have never heard
    of it. Returns what the gateway logged of the group."""
    connection = RawConnection(gateway.port)
    try:
        found = connection.call(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
    finally:
        connection.close()
    assert found.error_code == 0 and found.node_id >= INSTANCE_NODE_BASE and found.port == gateway.port, found
    assert committed([gateway.port], group) == offsets
    assert group not in broker_groups(kafka)
    return [e for e in gateway.events() if e.get("group") == group]


def joined_as(events: list[dict], client_id: str, strategy: str | None) -> None:
    """Its members joined with `client_id` and the classic protocol and `strategy`, or
    (strategy None) with KIP-848's consumer protocol, whose joins name the group epoch."""
    joined = [e for e in events if e.get("event") == "member joined"]
    assert joined and all(e["client_id"] == client_id for e in joined), joined
    if strategy is None:
        assert all("group_epoch" in e for e in joined), joined
        assert any(e.get("event") == "group epoch bumped" for e in events)
    else:
        assert all("generation" in e for e in joined), joined
        assert {e["strategy"] for e in events if e.get("event") == "rebalance completed"} - {None} == {strategy}


def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


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
    events = coordinated_by_groupkeeper(gateway, kafka, group, produced["offsets"])
    joined_as(events, f"goclients-{client}", expected)


@pytest.mark.parametrize("client", ["franz", "sarama"])
def test_a_static_member_comes_back_in_its_place_without_a_rebalance(gateway, kafka, produced, tmp_path, client):
    """group.instance.id (classic): the member's next incarnation takes the place of the one
    that closed (a static member does not leave) at the same generation, with its partitions
    and its commits."""
    group, total = f"go-clients-static-{client}", len(produced["values"])
    first = go_group_read(gateway.bootstrap, group, list(TOPICS), total, client, instance_id="static-1", seconds=45,
                          log=tmp_path / "first.log")
    reads_everything(first, produced)
    everything = {f"{t}-{p}" for t, p in produced["offsets"]}
    again = go_group_member(gateway.bootstrap, group, list(TOPICS), None, client, instance_id="static-1",
                            log=tmp_path / "again.log")
    try:
        again.wait_for(lambda m: m.assigned == everything, "its partitions back")
        second = again.stop()
    finally:
        again.kill()
    assert second["read"] == 0 and second["committed"] == first["committed"]
    assert second["generation"] == first["generation"] and second["member"] != first["member"]
    events = coordinated_by_groupkeeper(gateway, kafka, group, produced["offsets"])
    assert [e["event"] for e in events if e.get("event") == "rebalance completed"] == ["rebalance completed"]


def test_franz_go_kip848_static_member_is_not_released_at_kafka_either(gateway, kafka, produced, tmp_path):
    """A limit of franz-go v1.22.3, not of groupkeeper: its KIP-848 static member leaves with
    a ConsumerGroupHeartbeat of MemberEpoch -2 without its InstanceId (kgo's leave848 sets only
    the group, member id and epoch), which Kafka 4.4 refuses, INVALID_REQUEST "InstanceId can't
    be null." (GroupCoordinatorService), and groupkeeper as Kafka. So the member is never
    released, and its next incarnation is refused UNRELEASED_INSTANCE_ID until the old one's
    session times out (45 s by default). Shown here at Kafka's own coordinator and at
    groupkeeper alike."""
    total = len(produced["values"])
    for where, bootstrap in (("kafka", kafka.bootstrap), ("groupkeeper", gateway.bootstrap)):
        group = f"go-clients-static-848-{where}"
        first = go_group_read(bootstrap, group, list(TOPICS), total, "franz", "consumer", instance_id="static-1",
                              seconds=45, log=tmp_path / f"first-{where}.log")
        assert sorted(first["values"]) == produced["values"]
        log = tmp_path / f"again-{where}.log"
        again = go_group_member(bootstrap, group, list(TOPICS), None, "franz", "consumer", instance_id="static-1",
                                log=log)
        try:
            wait_until(lambda: "UNRELEASED_INSTANCE_ID" in log.read_text(), f"refused UNRELEASED_INSTANCE_ID at {where}")
            second = again.stop()
        finally:
            again.kill()
        assert second["read"] == 0 and again.assignments in ([], [[]]), again.assignments
    assert "go-clients-static-848-kafka" in broker_groups(kafka)
    assert "go-clients-static-848-groupkeeper" not in broker_groups(kafka)


@pytest.mark.parametrize("first, second", [
    pytest.param(("franz", "classic", "cooperative-sticky"), ("sarama", "classic", "cooperative-sticky"),
                 id="franz-go and sarama, cooperative-sticky"),
    pytest.param(("franz", "classic", "cooperative-sticky"), ("franz", "consumer", ""),
                 id="franz-go classic and KIP-848"),
])
def test_go_clients_share_a_group_and_read_each_record_once(gateway, kafka, tmp_path, first, second):
    """Two members of different clients (or protocols: groupkeeper migrates a classic group
    online when a KIP-848 member joins it) split the partitions; records produced once they
    have are each read once, and the commits of both are the group's."""
    index = 0 if second[0] == "sarama" else 1
    topic, partitions, records = f"go-clients-mixed-{index}", 4, 200
    group = f"go-clients-mixed-{index}"
    create_topic(kafka, topic, partitions)
    everything = {f"{topic}-{p}" for p in range(partitions)}
    members = []
    try:
        for n, (client, protocol, strategy) in enumerate((first, second)):
            members.append(go_group_member(gateway.bootstrap, group, [topic], None, client, protocol,
                                           strategy=strategy, log=tmp_path / f"member-{n}.log"))
            members[-1].wait_for(lambda m: m.assignments, "an assignment")
            wait_until(lambda: all(m.assigned for m in members) and sum(len(m.assigned) for m in members) == partitions
                       and set().union(*(m.assigned for m in members)) == everything,
                       f"the partitions split between {len(members)} members")
        counts = go_produce(gateway.bootstrap, topic, records, partitions=partitions, prefix=topic)
        wait_until(lambda: sum(m.count for m in members) >= records, f"{records} records read")
        for m in members:
            m.stop_file.touch()  # both at once: neither takes the other's partitions over
        results = [m.stop() for m in members]
    finally:
        for m in members:
            m.kill()
    read = sorted(v for r in results for v in r["values"])
    assert read == sorted(f"{topic}-{i}" for i in range(records))
    offsets = {(topic, p): n for p, n in counts.items()}
    assert {k: v for r in results for k, v in r["committed"].items()} == {f"{t}-{p}": n for (t, p), n in offsets.items()}
    events = coordinated_by_groupkeeper(gateway, kafka, group, offsets)
    if second[1] == "consumer":
        assert any(e.get("event") == "group upgraded to the consumer protocol" for e in events)
