"""`groupkeeper groups ...` against a real `groupkeeper run`: real consumers, their commits,
and, for log end offsets and lag, a stand-in broker leading partitions (tests/support/standin_broker.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata
from confluent_kafka import TopicPartition as CKPartition

from tools.cli import main
from tools.groups_cli import NO_ACTION_WARNING
from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from coordinator.store.zkserver import free_port
from protocol.schemas import LIST_OFFSETS, METADATA, OFFSET_COMMIT
from tests.support.clients import CK, RawConnection, RawMember, kp_assigned, kp_commit, kp_consumer, poll_until
from tests.support.coordinator_process import CoordinatorProcess
from tests.support.standin_broker import Log, StandInBroker

OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                  "HOST", "CLIENT-ID"]


@pytest.fixture(scope="module")
def groupkeeper(zookeeper, tmp_path_factory):
    process = CoordinatorProcess(zookeeper, tmp_path_factory.mktemp("groups-cli"))
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def run(bootstrap: str, *args: str):
    return CliRunner().invoke(main, ["groups", *args, "--bootstrap-server", bootstrap])


def ok(bootstrap: str, *args: str) -> str:
    result = run(bootstrap, *args)
    assert result.exit_code == 0, result.output
    return result.stdout


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def refused(result, message: str) -> None:
    """Exit status 1, nothing on stdout, and exactly `Error: message` on stderr (after
    Kafka's warning, where reset-offsets is given neither --dry-run nor --execute)."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    assert [line for line in result.stderr.splitlines() if line != NO_ACTION_WARNING] == [f"Error: {message}"]


def described(bootstrap: str, group: str, view: str = "--offsets") -> dict:
    return json.loads(ok(bootstrap, "describe", group, view, "--json"))


def wait_for_state(bootstrap: str, group: str, state: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (now := described(bootstrap, group, "--state")["state"]) != state:
        assert time.monotonic() < deadline, f"{group} is still {now}, not {state}"
        time.sleep(0.05)


def test_list_and_describe_a_group_of_real_consumers(groupkeeper):
    """No broker leads these partitions: LOG-END-OFFSET and LAG are "-"."""
    bootstrap, topic = groupkeeper.bootstrap, "watched"
    groupkeeper.topic(topic, 4)
    everything = {(topic, p) for p in range(4)}
    # librdkafka first: kafka-python 3.0.12 sometimes stops heartbeating after a rejoin
    # (tests/support/clients.py); joining second, it never has to rejoin here
    ck = CK(bootstrap, "watchers", topic)
    kp = None
    try:
        poll_until(lambda: ck.assigned == everything, ck)
        kp = kp_consumer(bootstrap, "watchers", topic, client_id="kp-watch")
        poll_until(lambda: kp_assigned(kp) and ck.assigned and kp_assigned(kp) | ck.assigned == everything
                   and not kp_assigned(kp) & ck.assigned, kp, ck)
        kp_commit(kp, {TopicPartition(t, p): OffsetAndMetadata(10 + p, "", -1) for t, p in kp_assigned(kp)})
        ck.consumer.commit(offsets=[CKPartition(t, p, 20 + p) for t, p in ck.assigned], asynchronous=False)
        expected = {p: 10 + p if (topic, p) in kp_assigned(kp) else 20 + p for p in range(4)}

        assert "watchers" in ok(bootstrap, "list").splitlines()
        states = table(ok(bootstrap, "list", "--state"))
        assert states[0] == ["GROUP", "STATE"] and ["watchers", "Stable"] in states
        assert "watchers" not in ok(bootstrap, "list", "--state", "Empty,PreparingRebalance")
        assert ["watchers", "Stable"] in table(ok(bootstrap, "list", "--state", "stable"))
        assert {"group": "watchers", "state": "Stable", "protocol_type": "consumer", "type": "classic"} in json.loads(
            ok(bootstrap, "list", "--json"))

        members = described(bootstrap, "watchers", "--members")
        assert members["coordinator"] == {"id": INSTANCE_NODE_BASE, "host": "127.0.0.1", "port": groupkeeper.port}
        assert members["state"] == "Stable"
        owner = {(t, p): x for x in members["members"] for t, ps in x["assignment"].items() for p in ps}
        assert set(owner) == everything
        assert sorted(x["client_id"] for x in members["members"]) == ["kp-watch", "rdkafka"]
        assert all(x["host"] == "127.0.0.1" and x["partitions"] == 2 for x in members["members"])

        offsets = described(bootstrap, "watchers")
        assert offsets["coordinator"]["id"] == INSTANCE_NODE_BASE
        assert offsets["offsets"] == [
            {"topic": topic, "partition": p, "current_offset": expected[p], "leader_epoch": None,
             "log_end_offset": None, "lag": None,
             "consumer_id": owner[(topic, p)]["consumer_id"], "host": "127.0.0.1",
             "client_id": owner[(topic, p)]["client_id"]} for p in range(4)]
        text = run(bootstrap, "describe", "watchers")
        assert text.stderr == ""
        assert table(text.stdout) == [OFFSETS_HEADER] + [
            ["watchers", topic, str(p), str(expected[p]), "-", "-", owner[(topic, p)]["consumer_id"], "127.0.0.1",
             owner[(topic, p)]["client_id"]] for p in range(4)]

        rows = table(ok(bootstrap, "describe", "watchers", "--members"))
        assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert sorted(r[3:] for r in rows[1:]) == [["kp-watch", "2"], ["rdkafka", "2"]]
        verbose = table(ok(bootstrap, "describe", "watchers", "--members", "--verbose"))
        # Kafka 4's columns, for a classic group too: no epochs, no target assignment
        assert verbose[0][5:] == ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        assert {r[1]: r[5:] for r in verbose[1:]} == {
            x["consumer_id"]: ["-", f"{topic}:{','.join(map(str, x['assignment'][topic]))}", "-", "-"]
            for x in members["members"]}

        state = table(ok(bootstrap, "describe", "watchers", "--state"))
        # STATUS by Burrow's rules: OK (no log end is known here, so no lag to judge)
        assert state == [["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS", "STATUS"],
                         ["watchers", bootstrap, f"({INSTANCE_NODE_BASE})", "range", "Stable", "2", "OK"]]
        assert described(bootstrap, "watchers", "--state") == {
            "group": "watchers", "type": "classic", "state": "Stable", "assignment_strategy": "range",
            "protocol_type": "consumer", "member_count": 2, "group_epoch": None, "target_assignment_epoch": None,
            "status": "OK",
            "coordinator": {"id": INSTANCE_NODE_BASE, "host": "127.0.0.1", "port": groupkeeper.port}}

        # an active group can be neither reset nor deleted, as Kafka refuses
        refused(run(bootstrap, "reset-offsets", "watchers", "--topic", topic, "--to-offset", "0", "--execute"),
                "Assignments can only be reset if the group 'watchers' is inactive, but the current state is Stable.")
        refused(run(bootstrap, "delete", "watchers"),
                "Deletion of consumer group 'watchers' failed: the group is not empty (NON_EMPTY_GROUP).")
        assert {r["partition"]: r["current_offset"] for r in described(bootstrap, "watchers")["offsets"]} == expected
    finally:
        if kp is not None:
            kp.close()
        ck.consumer.close()

    wait_for_state(bootstrap, "watchers", "Empty")
    text = run(bootstrap, "describe", "watchers")
    assert text.exit_code == 0
    assert text.stderr == "Consumer group 'watchers' has no active members.\n"
    assert table(text.stdout)[1:] == [["watchers", topic, str(p), str(expected[p]), "-", "-", "-", "-", "-"]
                                      for p in range(4)]
    assert table(ok(bootstrap, "describe", "watchers", "--members")) == [  # the header alone, as Kafka's
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]]
    assert ["watchers", "Empty"] in table(ok(bootstrap, "list", "--state", "Empty"))


def test_reset_offsets_and_delete_without_brokers(groupkeeper):
    """--to-offset and --shift-by need no broker (no log bounds: at least 0); the others do."""
    bootstrap, topic = groupkeeper.bootstrap, "resettable"
    groupkeeper.topic(topic, 3)

    # a group that does not exist yet can be given offsets, as Kafka allows
    dry = table(ok(bootstrap, "reset-offsets", "fresh", "--topic", topic, "--to-offset", "30"))
    assert dry == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [["fresh", topic, str(p), "30"] for p in range(3)]
    refused(run(bootstrap, "describe", "fresh"), "Consumer group 'fresh' does not exist.")
    ok(bootstrap, "reset-offsets", "fresh", "--topic", topic, "--to-offset", "30", "--execute")
    ok(bootstrap, "reset-offsets", "fresh", "--topic", f"{topic}:1,2", "--to-offset", "12", "--execute")

    def committed() -> dict[int, int]:
        return {r["partition"]: r["current_offset"] for r in described(bootstrap, "fresh")["offsets"]}
    assert committed() == {0: 30, 1: 12, 2: 12}

    shifted = table(ok(bootstrap, "reset-offsets", "fresh", "--topic", topic, "--shift-by", "-20"))
    assert [r[3] for r in shifted[1:]] == ["10", "0", "0"]  # clamped at 0: no log start is known
    assert committed() == {0: 30, 1: 12, 2: 12}  # a dry run commits nothing
    ok(bootstrap, "reset-offsets", "fresh", "--topic", f"{topic}:0", "--shift-by", "5", "--execute")
    assert committed() == {0: 35, 1: 12, 2: 12}

    for how in ("--to-earliest", "--to-latest"):
        refused(run(bootstrap, "reset-offsets", "fresh", "--topic", topic, how),
                f"cannot look up the {how[5:]} of {topic}-0: no reachable leader answered for it")
    refused(run(bootstrap, "reset-offsets", "fresh", "--topic", topic, "--to-datetime", "2024-01-01T00:00:00"),
            f"cannot look up the offset for --to-datetime of {topic}-0: no reachable leader answered for it")
    refused(run(bootstrap, "reset-offsets", "fresh", "--topic", "nowhere", "--to-offset", "1"),
            "topic 'nowhere' does not exist")
    refused(run(bootstrap, "reset-offsets", "fresh", "--topic", f"{topic}:3", "--to-offset", "1"),
            f"topic '{topic}' has no partition 3 (it has 3)")
    refused(run(bootstrap, "reset-offsets", "other", "--topic", topic, "--shift-by", "1"),
            f"cannot shift the offset of {topic}-0: it has no committed offset")

    # a member joins: resetting is refused, even as a dry run; once it leaves, the group can go
    member = RawMember(groupkeeper.port, "fresh", topic)
    try:
        member.join_and_sync()
        refused(run(bootstrap, "reset-offsets", "fresh", "--topic", topic, "--to-offset", "0"),
                "Assignments can only be reset if the group 'fresh' is inactive, but the current state is Stable.")
        refused(run(bootstrap, "delete", "fresh"),
                "Deletion of consumer group 'fresh' failed: the group is not empty (NON_EMPTY_GROUP).")
        member.leave()
    finally:
        member.close()
    wait_for_state(bootstrap, "fresh", "Empty")
    assert ok(bootstrap, "delete", "fresh") == "Deletion of requested consumer groups ('fresh') was successful.\n"
    refused(run(bootstrap, "describe", "fresh"), "Consumer group 'fresh' does not exist.")
    refused(run(bootstrap, "delete", "fresh"), "Consumer group 'fresh' does not exist.")
    assert "fresh" not in ok(bootstrap, "list").splitlines()


def test_log_end_offsets_and_lag_come_from_the_partition_leaders(zookeeper, tmp_path):
    """Partitions 0 and 1 are led by a stand-in broker; partition 2's leader is registered
    but not listening: its LOG-END-OFFSET and LAG are "-"."""
    topic = "lagged"
    process = CoordinatorProcess(zookeeper, tmp_path)
    broker = StandInBroker({(topic, 0): Log(0, 100, [(0, 1000), (50, 2000), (99, 3000)]),
                            (topic, 1): Log(10, 50)}).start()
    process.start()
    try:
        bootstrap = process.bootstrap
        process.topic(topic, 3)
        broker.register(process.zookeeper, 1)
        down = StandInBroker({(topic, 2): Log(0, 1)})  # registered, then gone: never reachable
        down.register(process.zookeeper, 3)
        down.stop()
        connection = RawConnection(process.port)
        try:
            deadline = time.monotonic() + 30
            while True:  # the coordinator's registry learns of the states through watches
                answer = connection.call(METADATA, 9, {"topics": [{"name": topic}]})
                leaders = [p.leader_id for t in answer.topics
                           for p in sorted(t.partitions, key=lambda p: p.partition_index)]
                if leaders == [1, 1, 3]:
                    break
                assert time.monotonic() < deadline, leaders
                time.sleep(0.05)
            assert [b.node_id for b in answer.brokers] == [1, 3, INSTANCE_NODE_BASE]
        finally:
            connection.close()

        member = RawMember(process.port, "laggards", topic)
        try:
            assert member.join_and_sync() == {topic: [0, 1, 2]}
            member.commit(topic, {0: 40, 1: 45, 2: 7})
            rows = described(bootstrap, "laggards")["offsets"]
            assert [(r["current_offset"], r["log_end_offset"], r["lag"], r["consumer_id"]) for r in rows] == [
                (40, 100, 60, member.member_id), (45, 50, 5, member.member_id), (7, None, None, member.member_id)]
            assert table(ok(bootstrap, "describe", "laggards"))[1:] == [
                ["laggards", topic, "0", "40", "100", "60", member.member_id, "127.0.0.1", "raw"],
                ["laggards", topic, "1", "45", "50", "5", member.member_id, "127.0.0.1", "raw"],
                ["laggards", topic, "2", "7", "-", "-", member.member_id, "127.0.0.1", "raw"]]
            assert (LIST_OFFSETS.key, 7) in broker.requests  # the highest version both speak
            member.leave()
        finally:
            member.close()
        wait_for_state(bootstrap, "laggards", "Empty")

        def reset(*args: str) -> dict[int, int]:
            out = ok(bootstrap, "reset-offsets", "laggards", *args)
            return {int(r[2]): int(r[3]) for r in table(out)[1:]}
        both = f"{topic}:0,1"
        assert reset("--topic", both, "--to-earliest") == {0: 0, 1: 10}
        assert reset("--topic", both, "--to-current") == {0: 40, 1: 45}
        assert reset("--all-topics", "--to-current") == {0: 40, 1: 45, 2: 7}  # the committed partitions
        # no record is a day old (the logs' records are from 1970's first seconds): the log end;
        # and as --to-datetime, from the record at or after the time, here 1 s after the epoch
        assert reset("--topic", both, "--by-duration", "P1D") == {0: 100, 1: 50}
        ago = int(time.time() * 1000) - 1500  # 1.5 s after the epoch, give or take the moment the CLI takes
        assert reset("--topic", both, "--by-duration", f"PT{ago // 1000}.{ago % 1000:03d}S") == {0: 50, 1: 50}
        # p0: the first record at or after 1.5 s; p1 has none that late: its log end
        assert reset("--topic", both, "--to-datetime", "1970-01-01T00:00:01.500Z") == {0: 50, 1: 50}
        assert reset("--topic", topic, "--to-offset", "1000") == {0: 100, 1: 50, 2: 1000}  # within the known logs
        assert reset("--topic", both, "--shift-by", "-60") == {0: 0, 1: 10}
        assert reset("--topic", both, "--to-latest", "--execute") == {0: 100, 1: 50}
        assert [(r["current_offset"], r["lag"]) for r in described(bootstrap, "laggards")["offsets"]] == [
            (100, 0), (50, 0), (7, None)]
        refused(run(bootstrap, "reset-offsets", "laggards", "--topic", topic, "--to-earliest"),
                f"cannot look up the earliest of {topic}-2: no reachable leader answered for it")
    finally:
        broker.stop()
        assert process.stop() == 0


def test_bad_input_and_unreachable_servers_are_one_line(groupkeeper, tmp_path):
    bootstrap = groupkeeper.bootstrap
    closed = f"127.0.0.1:{free_port()}"
    refused(run(closed, "list"), f"cannot reach {closed}: connection refused")
    refused(run(closed, "describe", "g"), f"cannot reach {closed}: connection refused")
    refused(run("nowhere", "list"), "'nowhere' is not HOST:PORT")
    refused(run(bootstrap, "describe", "never-seen"), "Consumer group 'never-seen' does not exist.")

    for args, message in [
        (("list", "--state", "Sleeping"), "unknown state 'sleeping'"),
        (("describe", "g", "--members", "--state"), "different views: give at most one"),
        (("describe", "g", "--offsets", "--members"), "different views: give at most one"),
        (("describe",), "name a group: GROUP, --group GROUP (repeatable) or --all-groups"),
        (("describe", "g", "--all-groups"), "give groups or --all-groups, not both"),
        (("delete",), "name a group"),
        (("delete", "--group", "g", "--all-groups"), "give groups or --all-groups, not both"),
        (("reset-offsets", "--topic", "t", "--to-latest"), "name a group"),
        (("reset-offsets", "g", "--topic", "t", "--to-latest", "--dry-run", "--execute"),
         "give --dry-run or --execute, not both"),
        (("reset-offsets", "g", "--to-latest"), "give the partitions to reset: --topic (repeatable) or --all-topics"),
        (("reset-offsets", "g", "--topic", "t", "--all-topics", "--to-latest"), "give the partitions to reset"),
        (("reset-offsets", "g", "--topic", "t", "--from-file", "plan.csv"), "--from-file takes its partitions"),
        (("reset-offsets", "g", "--topic", "t", "--to-current", "--to-latest"), "give exactly one of"),
        (("reset-offsets", "g", "--topic", "t", "--by-duration", "P1Y"), "is not an ISO 8601 duration"),
        (("reset-offsets", "g", "--topic", "t", "--by-duration", "PT"), "is not an ISO 8601 duration"),
        (("reset-offsets", "g", "--topic", "t"), "give exactly one of"),
        (("reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"), "give exactly one of"),
        (("reset-offsets", "g", "--topic", "t:x", "--to-latest"), "is not TOPIC or TOPIC:P,P,..."),
        (("reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday"), "is not YYYY-MM-DDTHH:mm:SS.sss"),
        (("reset-offsets", "g", "--topic", "t", "--to-offset", "-1"), "Invalid value"),
    ]:
        result = run(closed, *args)  # refused before anything is asked of the (closed) server
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr and "Traceback" not in result.output, (args, result.output)

    # the default address is the configured one
    config = tmp_path / "groupkeeper.toml"
    config.write_text(f'listeners = ["PLAINTEXT://0.0.0.0:1"]\nadvertised_listeners = ["PLAINTEXT://{bootstrap}"]\n')
    listed = CliRunner().invoke(main, ["groups", "list", "--config", str(config)])
    assert listed.exit_code == 0, listed.output
    missing = CliRunner().invoke(main, ["groups", "list", "--config", str(tmp_path / "none.toml")])
    assert missing.exit_code == 1 and missing.stderr.startswith("Error: config file")

    # and as a real process: one line on stderr, no traceback
    process = subprocess.run([sys.executable, "-m", "tools", "groups", "describe", "g",
                              "--bootstrap-server", closed], capture_output=True, text=True, timeout=60)
    assert process.returncode == 1
    assert process.stderr == f"Error: cannot reach {closed}: connection refused\n" and process.stdout == ""


def test_several_groups_bootstrap_lists_and_the_offsets_leader_epoch(zookeeper, tmp_path):
    """--group repeated and --all-groups for describe, reset-offsets and delete (a coordinator
    of its own, so that --all-groups means these groups); --bootstrap-server lists; the
    reset targets that need no broker, --export and --from-file; --offsets --verbose."""
    process = CoordinatorProcess(zookeeper, tmp_path)
    process.start()
    try:
        bootstrap, topic = process.bootstrap, "multi"
        process.topic(topic, 2)

        # a list: the first server that answers
        closed, also_closed = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        assert ok(f"{closed},{bootstrap}", "list") == ""
        refused(run(f"{closed},{also_closed}", "list"), "none of the bootstrap servers answered: "
                f"cannot reach {closed}: connection refused; cannot reach {also_closed}: connection refused")
        refused(run(f"{bootstrap},nowhere", "list"), "'nowhere' is not HOST:PORT")

        result = run(bootstrap, "reset-offsets", "--group", "a", "--group", "b", "--topic", topic,
                     "--to-offset", "4", "--execute")
        assert result.exit_code == 0 and result.stderr == "", result.output
        assert table(result.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
            [g, topic, str(p), "4"] for g in "ab" for p in range(2)]

        # a commit with a leader epoch (as an admin: the group is empty)
        connection = RawConnection(process.port)
        try:
            answer = connection.call(OFFSET_COMMIT, 7, {
                "group_id": "a", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [{
                    "name": topic, "partitions": [{"partition_index": 0, "committed_offset": 4,
                                                   "committed_leader_epoch": 9}]}]})
            assert [p.error_code for t in answer.topics for p in t.partitions] == [0]
        finally:
            connection.close()
        verbose = run(bootstrap, "describe", "a", "--offsets", "--verbose")
        assert table(verbose.stdout) == [
            ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
             "HOST", "CLIENT-ID"],
            ["a", topic, "0", "9", "4", "-", "-", "-", "-", "-"], ["a", topic, "1", "-", "4", "-", "-", "-", "-", "-"]]
        assert [r["leader_epoch"] for r in described(bootstrap, "a")["offsets"]] == [9, None]

        # several groups: a table each, a blank line between; Kafka's notices on stderr
        both = run(bootstrap, "describe", "--group", "a", "--group", "b")
        assert both.exit_code == 0
        first, second = both.stdout.split("\n\n")
        assert table(first)[0] == OFFSETS_HEADER and [r[0] for r in table(first)[1:]] == ["a", "a"]
        assert [r[0] for r in table(second)[1:]] == ["b", "b"]
        assert both.stderr.splitlines() == [f"Consumer group '{g}' has no active members." for g in "ab"]
        assert [d["group"] for d in json.loads(ok(bootstrap, "describe", "--all-groups", "--json"))] == ["a", "b"]
        assert json.loads(ok(bootstrap, "describe", "--group", "b", "--state", "--json"))["state"] == "Empty"
        missing = run(bootstrap, "describe", "--group", "a", "--group", "nope", "--json")
        assert missing.exit_code == 1 and [d["group"] for d in json.loads(missing.stdout)] == ["a"]
        assert missing.stderr.splitlines() == ["Error: Consumer group 'nope' does not exist."]

        # --export: Kafka's CSV, without the group for one --group; a dry run says nothing was committed
        exported = run(bootstrap, "reset-offsets", "--all-groups", "--all-topics", "--to-current", "--export",
                       "--dry-run")
        assert exported.exit_code == 0, exported.output
        assert exported.stdout == "".join(f"{g},{topic},{p},4\n" for g in "ab" for p in range(2))
        assert exported.stderr == "Dry run: nothing was committed (give --execute to commit these offsets).\n"
        exported = run(bootstrap, "reset-offsets", "a", "--topic", f"{topic}:1", "--shift-by", "-1", "--export",
                       "--dry-run")
        assert exported.stdout == f"{topic},1,3\n"
        # neither --dry-run nor --execute: Kafka's warning, and a dry run
        warned = run(bootstrap, "reset-offsets", "a", "--topic", topic, "--to-offset", "0")
        assert warned.exit_code == 0
        assert warned.stderr.splitlines() == [NO_ACTION_WARNING, "Dry run: nothing was committed (give --execute "
                                              "to commit these offsets)."]
        assert [r["current_offset"] for r in described(bootstrap, "a")["offsets"]] == [4, 4]

        # --from-file: what --export wrote, for one group or several
        plan = tmp_path / "plan.csv"
        plan.write_text(f"{topic},0,1\n\n{topic},1,2\n")
        ok(bootstrap, "reset-offsets", "a", "--from-file", str(plan), "--execute")
        assert [r["current_offset"] for r in described(bootstrap, "a")["offsets"]] == [1, 2]
        plan.write_text(f"a,{topic},0,7\nb,{topic},1,8\n")
        ok(bootstrap, "reset-offsets", "--group", "a", "--group", "b", "--from-file", str(plan), "--execute")
        assert [r["current_offset"] for r in described(bootstrap, "a")["offsets"]] == [7, 2]
        assert [r["current_offset"] for r in described(bootstrap, "b")["offsets"]] == [4, 8]
        plan.write_text(f"{topic},0,1\n")
        result = run(bootstrap, "reset-offsets", "--group", "a", "--group", "b", "--from-file", str(plan), "--dry-run")
        assert result.exit_code == 2 and "line 1: 'multi,0,1' is not group,topic,partition,offset (topic,partition," \
            "offset lines are for one --group)" in result.stderr, result.output
        plan.write_text(f"{topic},0,1\n{topic},x,1\n")
        result = run(bootstrap, "reset-offsets", "a", "--from-file", str(plan), "--dry-run")
        assert result.exit_code == 2 and "line 2: 'multi,x,1' is not topic,partition,offset" in result.stderr
        result = run(bootstrap, "reset-offsets", "a", "--from-file", str(tmp_path / "none.csv"), "--dry-run")
        assert result.exit_code == 2 and "none.csv: No such file or directory" in result.stderr

        # a member in b: b cannot be reset or deleted; a can, and the command exits 1 for b
        member = RawMember(process.port, "b", topic)
        try:
            member.join_and_sync()
            result = run(bootstrap, "reset-offsets", "--group", "a", "--group", "b", "--topic", topic,
                         "--to-offset", "3", "--execute")
            assert result.exit_code == 1
            assert table(result.stdout)[1:] == [["a", topic, "0", "3"], ["a", topic, "1", "3"]]
            assert result.stderr.splitlines() == [
                "Error: Assignments can only be reset if the group 'b' is inactive, but the current state is Stable."]
            assert [r["current_offset"] for r in described(bootstrap, "a")["offsets"]] == [3, 3]
            result = run(bootstrap, "delete", "--all-groups")
            assert result.exit_code == 1
            assert result.stdout == "These consumer groups were deleted successfully: 'a'\n"
            assert result.stderr.splitlines() == ["Error: Deletion of consumer group 'b' failed: the group is not "
                                                  "empty (NON_EMPTY_GROUP)."]
            member.leave()
        finally:
            member.close()
        wait_for_state(bootstrap, "b", "Empty")
        ok(bootstrap, "reset-offsets", "c", "--topic", topic, "--to-offset", "1", "--execute")
        assert ok(bootstrap, "delete", "--group", "b", "--group", "c") == \
            "Deletion of requested consumer groups ('b', 'c') was successful.\n"
        assert ok(bootstrap, "list") == ""
        result = run(bootstrap, "delete", "--group", "b", "--group", "c")
        assert result.exit_code == 1 and result.stdout == ""
        assert result.stderr.splitlines() == [f"Error: Consumer group '{g}' does not exist." for g in "bc"]
    finally:
        assert process.stop() == 0


def test_an_invalid_group_id_is_one_short_line(groupkeeper):
    """Longer than the coordinator's group_id_max_length: INVALID_GROUP_ID, said as such,
    with the id shortened (before: "the coordinator of group '<all 2,000 characters>' is not
    available (INVALID_GROUP_ID)")."""
    long_id = "g" * 2000
    message = f"The group id '{'g' * 48}...gggggggg' (2000 characters) is invalid (INVALID_GROUP_ID)."
    for args in (("describe", long_id), ("describe", long_id, "--members"), ("delete", long_id),
                 ("reset-offsets", long_id, "--topic", "t", "--to-offset", "1", "--dry-run")):
        refused(run(groupkeeper.bootstrap, *args), message)
    # among several groups: said for that one, and the others go on
    result = run(groupkeeper.bootstrap, "delete", "--group", long_id, "--group", "never-was")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"Error: {message}", "Error: Consumer group 'never-was' does not exist."]
