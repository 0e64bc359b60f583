"""`groupkeeper groups ...` for consumer-protocol groups (KIP-848) against a real `groupkeeper
run`, with librdkafka consumers speaking `group.protocol=consumer`: types listed and
filtered (ListGroups v5), ConsumerGroupDescribe's epochs, current and target assignments,
and a classic group beside them shown as before."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from confluent_kafka import TopicPartition as CKPartition

from tools import kafka_admin as admin
from tools.cli import main
from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from coordinator.store.zkserver import free_port
from protocol.schemas import LIST_GROUPS
from tests.support.clients import CK, poll_until
from tests.support.coordinator_process import CoordinatorProcess
from tests.zookeeper.test_groups_cli import OFFSETS_HEADER, described, ok, refused, run, table, wait_for_state

FAST = {"group_consumer_heartbeat_interval_ms": 300, "group_consumer_session_timeout_ms": 6000}
STATE_HEADER = ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE"]  # "COORDINATOR (ID)" split
MEMBERS_HEADER = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
EPOCHS_HEADER = ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]


@pytest.fixture(scope="module")
def groupkeeper(zookeeper, tmp_path_factory):
    process = CoordinatorProcess(zookeeper, tmp_path_factory.mktemp("groups-cli-consumer"), **FAST)
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def consumer(bootstrap: str, group: str, topic: str, client_id: str) -> CK:
    return CK(bootstrap, group, topic, protocol="consumer", **{"client.id": client_id})


def settled(everything: set, *members: CK) -> bool:
    """Every partition owned by exactly one member, each owning some."""
    owned = [tp for m in members for tp in m.assigned]
    return all(m.assigned for m in members) and len(owned) == len(set(owned)) and set(owned) == everything


def kafka4(partitions) -> str:
    """Kafka 4's assignment text: topic:0,1;other:2."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items())) or "-"


def rows_of(text: str, *groups: str) -> list[list[str]]:
    """The table's rows of `groups` (the module's coordinator holds other tests' groups too)."""
    return [row for row in table(text)[1:] if row[0] in groups]


def test_types_listed_and_filtered_and_both_types_described(groupkeeper):
    bootstrap, topic = groupkeeper.bootstrap, "typed"
    groupkeeper.topic(topic, 4)
    everything = {(topic, p) for p in range(4)}
    classic = CK(bootstrap, "classic-typed", topic)
    first = second = None
    try:
        poll_until(lambda: classic.assigned == everything, classic)
        first = consumer(bootstrap, "kip848-typed", topic, "kip-a")
        poll_until(lambda: first.assigned == everything, first, classic)
        second = consumer(bootstrap, "kip848-typed", topic, "kip-b")
        poll_until(lambda: settled(everything, first, second), first, second, classic)
        poll_until(lambda: described(bootstrap, "kip848-typed", "--state")["state"] == "Stable", first, second, classic)
        for member, base in ((first, 10), (second, 20)):
            member.consumer.commit(offsets=[CKPartition(t, p, base + p) for t, p in member.assigned],
                                   asynchronous=False)
        expected = {p: 10 + p if (topic, p) in first.assigned else 20 + p for p in range(4)}
        by_id = {member.consumer.memberid(): member for member in (first, second)}
        client_id = {first.consumer.memberid(): "kip-a", second.consumer.memberid(): "kip-b"}

        # list: the plain form as before; --type adds TYPE, in Kafka's words, before STATE
        assert {"classic-typed", "kip848-typed"} <= set(ok(bootstrap, "list").splitlines())
        typed = ok(bootstrap, "list", "--type")
        assert table(typed)[0] == ["GROUP", "TYPE"]
        assert rows_of(typed, "classic-typed", "kip848-typed") == [["classic-typed", "Classic"],
                                                                  ["kip848-typed", "Consumer"]]
        assert rows_of(ok(bootstrap, "list", "--type", "consumer"), "classic-typed", "kip848-typed") == [
            ["kip848-typed", "Consumer"]]
        assert rows_of(ok(bootstrap, "list", "--type", "Classic"), "classic-typed", "kip848-typed") == [
            ["classic-typed", "Classic"]]
        both = ok(bootstrap, "list", "--type", "classic,consumer", "--state", "stable")
        assert table(both)[0] == ["GROUP", "TYPE", "STATE"]
        assert rows_of(both, "classic-typed", "kip848-typed") == [["classic-typed", "Classic", "Stable"],
                                                                 ["kip848-typed", "Consumer", "Stable"]]
        states = ok(bootstrap, "list", "--state")
        assert table(states)[0] == ["GROUP", "STATE"]
        assert rows_of(states, "classic-typed", "kip848-typed") == [["classic-typed", "Stable"],
                                                                   ["kip848-typed", "Stable"]]
        assert rows_of(ok(bootstrap, "list", "--state", "Assigning,Reconciling"), "kip848-typed") == []
        listed = json.loads(ok(bootstrap, "list", "--json"))
        assert {"group": "kip848-typed", "state": "Stable", "protocol_type": "consumer", "type": "consumer"} in listed
        assert {"group": "classic-typed", "state": "Stable", "protocol_type": "consumer", "type": "classic"} in listed

        # the state view: the server's assignor; with --verbose, the epochs
        state = described(bootstrap, "kip848-typed", "--state")
        epoch = state["group_epoch"]
        assert epoch >= 2  # one bump per member that joined, at least
        assert state == {"group": "kip848-typed", "type": "consumer", "state": "Stable", "group_epoch": epoch,
                         "target_assignment_epoch": epoch, "assignment_strategy": "uniform",
                         "protocol_type": "consumer", "member_count": 2, "status": "OK",
                         "coordinator": {"id": INSTANCE_NODE_BASE, "host": "127.0.0.1", "port": groupkeeper.port}}
        coordinator = [bootstrap, f"({INSTANCE_NODE_BASE})"]
        assert table(ok(bootstrap, "describe", "kip848-typed", "--state")) == [
            STATE_HEADER + ["#MEMBERS", "STATUS"], ["kip848-typed", *coordinator, "uniform", "Stable", "2", "OK"]]
        assert table(ok(bootstrap, "describe", "kip848-typed", "--state", "--verbose")) == [
            STATE_HEADER + ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS", "STATUS"],
            ["kip848-typed", *coordinator, "uniform", "Stable", str(epoch), str(epoch), "2", "OK"]]

        # the members view: each member's epoch, current and (once stable, equal) target assignment
        members = described(bootstrap, "kip848-typed", "--members")
        assert members["type"] == "consumer" and members["target_assignment_epoch"] == epoch
        assert {x["consumer_id"] for x in members["members"]} == set(by_id)
        for x in members["members"]:
            mine = {topic: sorted(p for _, p in by_id[x["consumer_id"]].assigned)}
            assert x["assignment"] == x["target_assignment"] == mine
            assert (x["member_epoch"], x["partitions"], x["host"], x["client_id"]) == (
                epoch, 2, "127.0.0.1", client_id[x["consumer_id"]])
        rows = table(ok(bootstrap, "describe", "kip848-typed", "--members"))
        assert rows[0] == MEMBERS_HEADER
        assert sorted(rows[1:]) == sorted(["kip848-typed", m, "127.0.0.1", client_id[m], "2"] for m in by_id)
        verbose = run(bootstrap, "describe", "kip848-typed", "--members", "--verbose")
        assert verbose.exit_code == 0 and verbose.stderr == ""
        rows = table(verbose.stdout)
        assert rows[0] == MEMBERS_HEADER + EPOCHS_HEADER
        assert sorted(rows[1:]) == sorted(
            ["kip848-typed", m, "127.0.0.1", client_id[m], "2", str(epoch), kafka4(c.assigned), str(epoch),
             kafka4(c.assigned)] for m, c in by_id.items())

        # the offsets view: consumers from the members' current assignments
        owner = {tp: m for m, c in by_id.items() for tp in c.assigned}
        text = run(bootstrap, "describe", "kip848-typed")
        assert text.exit_code == 0 and text.stderr == ""
        assert table(text.stdout) == [OFFSETS_HEADER] + [
            ["kip848-typed", topic, str(p), str(expected[p]), "-", "-", owner[(topic, p)], "127.0.0.1",
             client_id[owner[(topic, p)]]] for p in range(4)]
        offsets = described(bootstrap, "kip848-typed")
        assert offsets["type"] == "consumer" and offsets["group_epoch"] == epoch
        assert [(r["partition"], r["current_offset"], r["consumer_id"]) for r in offsets["offsets"]] == [
            (p, expected[p], owner[(topic, p)]) for p in range(4)]

        # the classic group beside it: as before, epochs "-" (it has none)
        classic_id = classic.consumer.memberid()
        assert table(ok(bootstrap, "describe", "classic-typed", "--state")) == [
            STATE_HEADER + ["#MEMBERS", "STATUS"], ["classic-typed", *coordinator, "range", "Stable", "1", "-"]]
        assert table(ok(bootstrap, "describe", "classic-typed", "--state", "--verbose"))[1] == [
            "classic-typed", *coordinator, "range", "Stable", "-", "-", "1", "-"]  # nothing committed: no status
        assert table(ok(bootstrap, "describe", "classic-typed", "--members", "--verbose")) == [
            MEMBERS_HEADER + EPOCHS_HEADER, ["classic-typed", classic_id, "127.0.0.1", "rdkafka", "4", "-",
                                             f"{topic}:0,1,2,3", "-", "-"]]
        members = described(bootstrap, "classic-typed", "--members")
        assert (members["type"], members["group_epoch"], members["target_assignment_epoch"]) == ("classic", None, None)
        assert [(x["member_epoch"], x["target_assignment"], x["assignment"]) for x in members["members"]] == [
            (None, None, {topic: [0, 1, 2, 3]})]

        # an active consumer group can be neither reset nor deleted
        refused(run(bootstrap, "reset-offsets", "kip848-typed", "--topic", topic, "--to-offset", "0"),
                "Assignments can only be reset if the group 'kip848-typed' is inactive, "
                "but the current state is Stable.")
        refused(run(bootstrap, "delete", "kip848-typed"),
                "Deletion of consumer group 'kip848-typed' failed: the group is not empty (NON_EMPTY_GROUP).")
    finally:
        for member in (first, second, classic):
            if member is not None:
                member.consumer.close()

    # its members gone, the consumer group is Empty: still described as one, then reset and deleted
    wait_for_state(bootstrap, "kip848-typed", "Empty")
    text = run(bootstrap, "describe", "kip848-typed")
    assert text.stderr == "Consumer group 'kip848-typed' has no active members.\n"
    assert table(text.stdout)[1:] == [["kip848-typed", topic, str(p), str(expected[p]), "-", "-", "-", "-", "-"]
                                      for p in range(4)]
    assert table(ok(bootstrap, "describe", "kip848-typed", "--members")) == [MEMBERS_HEADER]  # as Kafka's
    assert described(bootstrap, "kip848-typed", "--state")["type"] == "consumer"
    assert rows_of(ok(bootstrap, "list", "--type", "consumer", "--state", "empty"), "kip848-typed") == [
        ["kip848-typed", "Consumer", "Empty"]]
    ok(bootstrap, "reset-offsets", "kip848-typed", "--topic", topic, "--to-offset", "5", "--execute")
    assert [r["current_offset"] for r in described(bootstrap, "kip848-typed")["offsets"]] == [5] * 4
    assert ok(bootstrap, "delete", "kip848-typed") == (
        "Deletion of requested consumer groups ('kip848-typed') was successful.\n")
    refused(run(bootstrap, "describe", "kip848-typed"), "Consumer group 'kip848-typed' does not exist.")
    assert rows_of(ok(bootstrap, "list", "--type"), "kip848-typed") == []


def test_current_and_target_assignments_differ_while_a_member_reconciles(groupkeeper):
    """The first member is not polled once the second joins, so it never hands over the two
    partitions the new target takes from it: the group stays Reconciling, the first member at
    its old epoch (ConsumerGroupDescribe, as Kafka's, shows it holding the two it keeps, not
    those it is revoking), the second at the new epoch with nothing yet and the other two as
    its target. Polled again, both reach their targets."""
    bootstrap, topic, group = groupkeeper.bootstrap, "reconciled", "kip848-moving"
    groupkeeper.topic(topic, 4)
    everything = {(topic, p) for p in range(4)}
    first = consumer(bootstrap, group, topic, "kip-first")
    second = None
    try:
        poll_until(lambda: first.assigned == everything, first)
        poll_until(lambda: described(bootstrap, group, "--state")["state"] == "Stable", first)
        second = consumer(bootstrap, group, topic, "kip-second")
        first_id = first.consumer.memberid()
        seen: dict = {}

        def held_back() -> bool:
            """The first has heard of its new target (its current assignment is cut to it)
            but cannot revoke the rest, the second waits for those."""
            seen.update(described(bootstrap, group, "--members"))
            members = {x["consumer_id"]: x for x in seen["members"]}
            if seen["state"] != "Reconciling" or len(members) != 2 or first_id not in members:
                return False
            mine = members.pop(first_id)
            other, = members.values()
            target = seen["target_assignment_epoch"]
            return (mine["member_epoch"] < target and len(mine["target_assignment"].get(topic, [])) == 2
                    and mine["assignment"] == mine["target_assignment"]
                    and other["member_epoch"] == target and other["assignment"] == {}
                    and len(other["target_assignment"].get(topic, [])) == 2)
        poll_until(held_back, second)  # the first is left alone: it keeps what it must give up

        members = {x["consumer_id"]: x for x in seen["members"]}
        second_id, = set(members) - {first_id}
        epoch = seen["target_assignment_epoch"]
        assert seen["group_epoch"] == epoch  # the target is computed; the members have not reached it
        mine, other = members[first_id], members[second_id]
        assert set(mine["target_assignment"][topic]) | set(other["target_assignment"][topic]) == {0, 1, 2, 3}
        verbose = run(bootstrap, "describe", group, "--members", "--verbose")
        assert verbose.exit_code == 0
        assert verbose.stderr == f"Warning: Consumer group '{group}' is rebalancing.\n"
        rows = {row[1]: row for row in table(verbose.stdout)[1:]}
        kept = kafka4((topic, p) for p in mine["target_assignment"][topic])
        assert rows[first_id][3:] == ["kip-first", "2", str(mine["member_epoch"]), kept, str(epoch), kept]
        assert rows[second_id][3:] == ["kip-second", "0", str(epoch), "-", str(epoch),
                                       kafka4((topic, p) for p in other["target_assignment"][topic])]
        assert rows_of(ok(bootstrap, "list", "--type", "consumer", "--state", "Reconciling"), group) == [
            [group, "Consumer", "Reconciling"]]
        state = run(bootstrap, "describe", group, "--state", "--verbose")
        assert state.stderr == ""  # Kafka warns before the members and offsets tables only
        assert table(state.stdout)[1][4:] == ["Reconciling", str(epoch), str(epoch), "2", "-"]  # nothing committed

        # polled, the first gives up what it must and the second takes it
        poll_until(lambda: settled(everything, first, second) and len(first.assigned) == 2
                   and described(bootstrap, group, "--state")["state"] == "Stable", first, second)
        final = described(bootstrap, group, "--members")
        assert final["target_assignment_epoch"] == epoch  # no new target: the same one, reached
        for x in final["members"]:
            assert x["assignment"] == x["target_assignment"] == members[x["consumer_id"]]["target_assignment"]
            assert x["member_epoch"] == epoch
    finally:
        for member in (first, second):
            if member is not None:
                member.consumer.close()


def test_a_coordinator_below_list_groups_v5_cannot_say_types(groupkeeper, monkeypatch):
    """As if the coordinator served ListGroups v4 only (this client then speaks v4): the
    TYPE column shows "-", and a filter by type is refused in one line."""
    bootstrap = groupkeeper.bootstrap
    groupkeeper.topic("untyped", 1)
    member = consumer(bootstrap, "kip848-untyped", "untyped", "kip-u")
    try:
        poll_until(lambda: member.assigned == {("untyped", 0)}, member)
        monkeypatch.setitem(admin.SPEAKS, LIST_GROUPS.key, (0, 4))
        assert rows_of(ok(bootstrap, "list", "--type", "--state"), "kip848-untyped") == [
            ["kip848-untyped", "-", "Stable"]]
        assert {"group": "kip848-untyped", "state": "Stable", "protocol_type": "consumer", "type": None} in (
            json.loads(ok(bootstrap, "list", "--json")))
        refused(run(bootstrap, "list", "--type", "consumer"),
                f"{bootstrap} does not serve ListGroups v5, which gives the groups' types")
    finally:
        member.consumer.close()


def test_bad_type_and_verbose_arguments_are_usage_errors():
    closed = f"127.0.0.1:{free_port()}"
    for args, message in [
        (("list", "--type", "share"), "unknown type 'share' (known: classic, consumer)"),
        (("list", "--type", "classic,streams"), "unknown type 'streams'"),
    ]:
        result = CliRunner().invoke(main, ["groups", *args, "--bootstrap-server", closed])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr and "Traceback" not in result.output, (args, result.output)
    # accepted, then refused only for want of a server
    for args in (("list", "--state", "Assigning,reconciling"), ("list", "--type"),
                 ("describe", "g", "--state", "--verbose"), ("describe", "g", "--verbose")):
        refused(run(closed, *args), f"cannot reach {closed}: connection refused")
