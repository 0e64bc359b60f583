"""Strategies from configuration and entry points: the clear refusals at start-up, a
configured strategy computing real clients' assignments, and a broken one leaving the
assignment to the group's leader instead of taking the group down."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kafka import KafkaAdminClient
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from coordinator.assignors import BUILT_IN, MemberSubscription
from coordinator.assignors.base import Assigned, problem
from coordinator.assignors.registry import AssignorError, load_assignors
from tests.support.clients import kp_assigned, kp_consumer, poll_until
from tests.support.coordinator_process import CoordinatorProcess


class EverythingToTheFirst:
    """A user's strategy: all partitions to the first member in id order."""

    def assign(self, members, partitions):
        first = min(m.member_id for m in members)
        return Assigned({m.member_id: ({t: list(range(partitions[t])) for t in m.topics if t in partitions}
                                       if m.member_id == first else {}) for m in members})


class Raises:
    def assign(self, members, partitions):
        raise ValueError("no partitions today")


class BeyondTheEnd:
    """A wrong answer: a partition that does not exist."""

    def assign(self, members, partitions):
        return Assigned({m.member_id: {t: list(range(partitions[t] + 1)) for t in m.topics if t in partitions}
                         for m in members})


def test_built_ins_and_a_configured_strategy():
    assignors = load_assignors({"everything": "tests.zookeeper.test_assignor_registry:EverythingToTheFirst"})
    assert set(BUILT_IN) <= set(assignors)
    assert isinstance(assignors["everything"], EverythingToTheFirst)


def test_a_strategy_from_an_installed_entry_point(tmp_path, monkeypatch):
    dist = tmp_path / "fake_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[groupkeeper.assignors]\nfirst = tests.zookeeper.test_assignor_registry:EverythingToTheFirst\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(load_assignors({})["first"], EverythingToTheFirst)


@pytest.mark.parametrize("target, message", [
    ("no_such_module:X", "assignor 'bad': cannot import no_such_module"),
    ("tests.zookeeper.test_assignor_registry:Missing", "assignor 'bad': tests.zookeeper.test_assignor_registry has no Missing"),
    ("tests.zookeeper.test_assignor_registry", "assignor 'bad': 'tests.zookeeper.test_assignor_registry' is not \"module:Class\""),
    ("tests.zookeeper.test_assignor_registry:load_assignors", "has no assign(members, partitions)"),
])
def test_an_unloadable_strategy_names_itself(target, message):
    with pytest.raises(AssignorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_assignors({"bad": target})


def test_run_refuses_to_start_with_an_unloadable_strategy(tmp_path):
    config = tmp_path / "groupkeeper.toml"
    config.write_text(textwrap.dedent("""
        [assignors]
        mine = "nowhere:Mine"
    """))
    done = subprocess.run([sys.executable, "-m", "tools", "run", "--config", str(config),
                           "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["Error: assignor 'mine': cannot import nowhere: No module named 'nowhere'"]


# -- what the coordinator checks of a strategy it did not ship with ----------------------

MEMBERS = [MemberSubscription("m1", ("a",)), MemberSubscription("m2", ("a", "b"))]


@pytest.mark.parametrize("answer, message", [
    ({"m1": {"a": [0, 1]}, "m2": {"b": [0]}}, None),
    ({"m1": {"a": [0, 1], "b": [0]}, "m2": {}}, "gave b to m1, which does not subscribe to it"),
    ({"m1": {"a": [0, 1]}, "m2": {"a": [1], "b": [0]}}, "gave a-1 to more than one member"),
    ({"m1": {"a": [0, 1, 2]}, "m2": {"b": [0]}}, "gave a-2, which does not exist"),
    ({"m1": {"a": [0]}, "m2": {"b": [0]}}, "left 1 subscribed partitions unassigned"),
    ({"m1": {"a": [0, 1]}, "m2": {"b": [0]}, "m3": {}}, "assigned to members not in the group: ['m3']"),
])
def test_a_plugged_in_answer_is_checked(answer, message):
    assert problem(MEMBERS, {"a": 2, "b": 1}, Assigned(answer)) == message


def test_an_answer_of_the_wrong_type_is_named():
    assert problem(MEMBERS, {"a": 2, "b": 1}, {"m1": {}}) == "returned dict, not Assigned"


def _client_strategy(name: str):
    """The client side of a strategy the server computes: kafka-python needs a class with the
    name to announce it; if its leader ever assigned, each member would get partition 0 only."""

    def assign(cls, cluster, members):
        return {m.member_id: ConsumerProtocolAssignment(0, [(t, [0]) for t in sorted(m.metadata.topics)], b"")
                for m in members}
    return type(name, (RangePartitionAssignor,), {"name": name, "assign": classmethod(assign)})


def test_configured_strategies_at_work_and_a_failing_one_leaves_it_to_the_leader(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, assignors={
        "everything": "tests.zookeeper.test_assignor_registry:EverythingToTheFirst",
        "raises": "tests.zookeeper.test_assignor_registry:Raises",
        "beyond": "tests.zookeeper.test_assignor_registry:BeyondTheEnd"})
    process.start()
    consumers = []
    try:
        process.topic("t", 4)
        everything = _client_strategy("everything")
        first = kp_consumer(process.bootstrap, "plugged", "t", partition_assignment_strategy=[everything])
        second = kp_consumer(process.bootstrap, "plugged", "t", partition_assignment_strategy=[everything])
        consumers += [first, second]
        admin = KafkaAdminClient(bootstrap_servers=process.bootstrap)
        consumers.append(admin)

        def everything_to_one() -> bool:
            group = admin.describe_groups(["plugged"])["plugged"]
            return (group["group_state"] == "Stable" and len(group["members"]) == 2
                    and sorted([len(kp_assigned(first)), len(kp_assigned(second))]) == [0, 4])
        poll_until(everything_to_one, first, second)

        for strategy, error in [("raises", "raised ValueError: no partitions today"),
                                ("beyond", "gave t-4, which does not exist")]:
            alone = kp_consumer(process.bootstrap, strategy, "t", partition_assignment_strategy=[_client_strategy(strategy)])
            consumers.append(alone)
            poll_until(lambda: kp_assigned(alone) == {("t", 0)}, alone)  # the leader's assignment
            logged = process.wait_for_log("strategy failed, the leader assigns", group=strategy)
            assert logged["error"] == error and logged["strategy"] == strategy
        _, body = process.scrape()
        assert 'groupkeeper_assignor_failures_total{strategy="raises"} 1.0' in body
        assert 'groupkeeper_assignor_failures_total{strategy="beyond"} 1.0' in body
    finally:
        for c in consumers:
            c.close()
        assert process.stop() == 0
