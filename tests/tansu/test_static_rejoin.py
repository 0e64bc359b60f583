"""Static members (KIP-345) restarted within their session through the gateway, as issue 38
asks: a group of two static members of one client (kafka-python, librdkafka, aiokafka,
franz-go), the leader restarted and then the follower, by a clean close or by kill -9, each
back under its instance id: the group keeps its generation (no rebalance completed after the
first), each member gets its own partitions back, and every record produced meanwhile is read.

The leader is the one groupkeeper stored as such (the group's record in ZooKeeper). Below
JoinGroup v9 (kafka-python 3.0.12 sends v7, librdkafka 2.16 and aiokafka 0.14 v5) a static
leader's return is answered with its old member id as leader and no members, as Kafka
answers: a client that took itself for the leader would assign and rejoin, and its rejoin
would rebalance the group (kafka-python did: issue 38; with that answer taken out, the
kafka-python cases fail here). franz-go sends v9 and is named leader (docs/architecture.md,
"static leader"). One Tansu and one gateway serve the whole module."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from coordinator.cluster.placement import partition_for
from coordinator.store import layout
from tests.support.clients import held_by_groupkeeper, produce_values
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.members import CLIENTS, MORE_CLIENTS, Member
from tests.support.tansu import Tansu
from tools.kafka_admin import NodeConnection
from protocol.schemas import LIST_GROUPS

# four clients in turn, each restarting members (about a minute): `make conformance`, beside
# the matrix, keeps `make test` within its 20 minutes
pytestmark = pytest.mark.conformance

PARTITIONS = 4
SESSION_MS = 30_000  # far longer than a restart: the member is back within its session
CLIENT_UNDER_TEST = {"kafka-python": CLIENTS["kafka-python (classic)"],
                     "librdkafka": CLIENTS["librdkafka (classic)"],
                     "aiokafka": MORE_CLIENTS["aiokafka (classic)"],
                     # JoinGroup v9: the static leader back is named leader (without skip_assignment:
                     # docs/architecture.md says why) and syncs; the stored assignment answers it
                     "franz-go": CLIENTS["franz-go (classic)"]}


class Front:
    def __init__(self, tansu: Tansu, gateway: CoordinatorProcess, directory):
        self.tansu, self.gateway, self.directory = tansu, gateway, directory

    def broker_groups(self) -> set[str]:
        connection = NodeConnection("127.0.0.1", self.tansu.port, timeout=10)
        try:
            return {g.group_id for g in connection.call(LIST_GROUPS, {}).groups}
        finally:
            connection.close()

    def rebalances(self, group: str) -> int:
        """Generations groupkeeper has completed for `group` so far (its log)."""
        return sum(1 for e in self.gateway.events()
                   if e.get("group") == group and e.get("event") == "rebalance completed")

    def stored(self, group: str) -> dict:
        """The group's record as groupkeeper stored it in ZooKeeper (generation, leader, members)."""
        client = KazooClient(hosts=self.gateway.zookeeper)
        client.start(timeout=10)
        try:
            partitions = layout.decode(client.get(layout.config_path())[0])["group_partitions"]
            data, _ = client.get(layout.group_path(partition_for(group, partitions), group))
        finally:
            client.stop()
            client.close()
        record = layout.decode_group(data)
        assert isinstance(record, dict), "a two-member group's record is never in chunks"
        return record


@pytest.fixture(scope="module")
def front(zookeeper, tmp_path_factory):
    directory = tmp_path_factory.mktemp("static-rejoin")
    with Tansu(directory) as tansu:
        gateway = CoordinatorProcess(zookeeper, directory, gateway=tansu.bootstrap, metadata_max_age_ms=500)
        gateway.node_offset = pin_node_ports(gateway, [tansu.node_id])
        gateway.start()
        try:
            gateway.wait_for_log("broker node reachable", node=tansu.node_id)
            yield Front(tansu, gateway, directory)
        finally:
            assert gateway.stop() == 0


def on(values: list[str], partitions: set[str], topic: str) -> set[str]:
    """The values of `values` (produce_values' "PREFIX-i", record i to partition i % PARTITIONS)
    that went to `partitions` ("topic-p")."""
    return {v for v in values if f"{topic}-{int(v.rsplit('-', 1)[1]) % PARTITIONS}" in partitions}


def assigned(member: Member) -> list[list[str]]:
    """The assignments a member reported from its first non-empty one on (clients report the
    nothing they own before their first join: kafka-python and aiokafka call their listener's
    revoke then)."""
    reports = member.assignments
    first = next((i for i, a in enumerate(reports) if a), len(reports))
    return reports[first:]


@pytest.mark.parametrize("how", ["close", "kill"])
@pytest.mark.parametrize("program", list(CLIENT_UNDER_TEST))
def test_static_leader_and_follower_restart_without_rebalance(front, program, how):
    client, group = CLIENT_UNDER_TEST[program], f"static-{program}-{how}"
    topic = group
    front.tansu.create_topic(topic, PARTITIONS)
    everything = [f"{topic}-{p}" for p in range(PARTITIONS)]

    def start(instance: str) -> Member:
        return Member(client, front.gateway.bootstrap, group, front.directory, topics=(topic,), instance_id=instance,
                      session_timeout_ms=SESSION_MS, seconds=150)

    members = {"one": start("one")}
    running = list(members.values())
    try:
        members["one"].wait_for(lambda m: m.assigned == set(everything), what="every partition, alone")
        members["two"] = start("two")
        running.append(members["two"])
        for member in members.values():
            member.wait_for(lambda m: len(m.assigned) == PARTITIONS // 2, what="half the partitions")
        assert members["one"].assigned.isdisjoint(members["two"].assigned)
        held = {instance: m.assigned for instance, m in members.items()}
        generations = front.rebalances(group)
        record = front.stored(group)
        assert generations >= 2 and record["generation"] >= 2  # groupkeeper's group, formed twice over
        leader = next(m["instance"] for m in record["members"] if m["id"] == record["leader"])
        follower = next(i for i in members if i != leader)

        produced: list[str] = []
        read: dict[str, set[str]] = {i: set() for i in members}  # by stopped incarnations, per instance
        produced += produce_values(front.gateway.bootstrap, topic, 40, f"{topic}-a", PARTITIONS)
        for instance in (leader, follower):
            member = members[instance]
            # it has read what was produced so far on its partitions: a clean close commits it
            wanted = on(produced, held[instance], topic) - read[instance]
            member.wait_for(lambda m: m.count >= len(wanted), what=f"the {len(wanted)} records of its partitions")
            reported = {i: len(m.assignments) for i, m in members.items()}
            if how == "close":
                read[instance] |= set(member.stop()["values"])
            else:
                member.kill()  # SIGKILL: nothing committed, no goodbye
            produced += produce_values(front.gateway.bootstrap, topic, 20, f"{topic}-{instance}-away", PARTITIONS)
            members[instance] = again = start(instance)
            running.append(again)
            again.wait_for(lambda m: bool(m.assigned), what="its partitions back")
            assert assigned(again) == [sorted(held[instance])], \
                f"{instance} ({'leader' if instance == leader else 'follower'}) came back with {again.assignments}"
            other = follower if instance == leader else leader
            assert members[other].assignments[reported[other]:] == [], f"{other}'s assignment changed"
            produced += produce_values(front.gateway.bootstrap, topic, 20, f"{topic}-{instance}-back", PARTITIONS)

        for instance, member in members.items():
            wanted = on(produced, held[instance], topic) - read[instance]
            member.wait_for(lambda m: m.count >= len(wanted), what=f"the {len(wanted)} records left on its partitions")
        for instance, member in members.items():
            result = member.stop()
            read[instance] |= set(result["values"])
            assert assigned(member) == [sorted(held[instance])], f"{instance}'s assignment changed"
        assert set(produced) == read[leader] | read[follower]
        for instance in members:
            assert read[instance] <= on(produced, held[instance], topic)  # each read its own partitions only

        assert front.rebalances(group) == generations, "a static member's return rebalanced the group"
        assert front.stored(group)["generation"] == record["generation"]
        held_by_groupkeeper(front.gateway.port, front.broker_groups(), group)
    finally:
        for member in running:
            member.kill()
