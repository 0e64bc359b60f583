"""Kafka's own kafka-consumer-groups.sh (Kafka 4.4's ConsumerGroupCommand) against the gateway,
beside `groupkeeper groups ...` on the same groups, column for column: --list (with its --state
and --type filters), --describe (--offsets, --members, --state, each with --verbose),
--reset-offsets (--dry-run, --execute, neither), --delete-offsets and --delete. A classic group
(librdkafka with a static member, and kafka-python) and a consumer group (two librdkafka
members speaking `group.protocol=consumer` and one the classic protocol: a group migrating,
one of its members without partitions), first live, then empty. Groupkeeper's groups are
unknown to Kafka's own coordinators: the tool pointed at a broker does not list them.

What may differ between the two tools' outputs, and why, is said where the test normalises
it; Kafka's tool starts a JVM each time (1-3 s), so each invocation covers both groups where
the tool takes several. Differences kept on purpose, beyond those said below:

- Kafka's tool exits 0 whatever it says, and prints its errors on stdout ("Error: ..."); ours
  says them on stderr and exits 1 (groups_cli's module docstring), so that scripts can tell.
- Errors are groupkeeper's one line each, not Java's exceptions: --delete of a group that
  cannot be deleted ("Deletion of consumer group 'g' failed: the group is not empty
  (NON_EMPTY_GROUP)." where Kafka lists "* Group 'g' could not be deleted due to:
  org.apache.kafka.common.errors.GroupNotEmptyException: ..."), a partition's STATUS of
  --delete-offsets (the error's name), and --delete-offsets of a group that does not exist or
  of a topic that does not exist, which ours refuses in one line where Kafka prints a table of
  the exception for each partition (and, for the topic, "Request succeeded").
- Ours says on stderr that a dry run committed nothing, which Kafka's tool does not.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
from click.testing import CliRunner
from confluent_kafka import TopicPartition as CKPartition
from kafka import KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tools.cli import main
from tools.groups_cli import NO_ACTION_WARNING
from tests.support.clients import CK, kp_commit, kp_consumer
from tests.support.kafka import broker_groups, create_topic, kraft

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)

ORDERS, AUDIT = "cgt-orders", "cgt-audit"
CLASSIC, CONSUMER = "cgt-classic", "cgt-consumer"  # sorted, as Kafka's tool orders groups (a TreeMap)
ENDS = {(ORDERS, 0): 10, (ORDERS, 1): 20, (ORDERS, 2): 30, (AUDIT, 0): 5, (AUDIT, 1): 8}  # records produced
TOOL_TIMEOUT_MS = "30000"  # the tool's admin calls (default 5 s): two shared cores, a JVM starting beside


# -- the two tools ----------------------------------------------------------------------------

def kafka_tool(bootstrap: str, *args: str, polled: tuple = ()) -> subprocess.CompletedProcess:
    """kafka-consumer-groups.sh `args` against `bootstrap`; the live members in `polled` keep
    polling while its JVM runs. Its exit status is 0 even where it says "Error: ..." (Kafka's
    tool prints its errors and goes on), so it is not checked here."""
    command = kraft.tool_command("kafka-consumer-groups", "--bootstrap-server", bootstrap, *args)
    if "--list" not in args:
        command += ["--timeout", TOOL_TIMEOUT_MS]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while process.poll() is None:
        assert time.monotonic() < deadline, f"kafka-consumer-groups {' '.join(args)} did not end"
        for member in polled:
            member.poll()
        if not polled:
            time.sleep(0.05)
    out, err = process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def ours(bootstrap: str, *args: str, code: int | None = 0):
    """`groupkeeper groups args` against `bootstrap`, in-process; its exit status must be
    `code` (None: any)."""
    result = CliRunner().invoke(main, ["groups", *args, "--bootstrap-server", bootstrap])
    assert code is None or result.exit_code == code, (args, result.output)
    return result


def tables(text: str) -> list[list[list[str]]]:
    """The tables of a tool's output (apart by blank lines; lines that are not part of a table,
    such as Kafka's "Error: ..." on stdout, are left out by the caller), each its header and
    rows, every row cut into cells where the header's columns start.

    Cut by position, not by whitespace: Kafka leaves a member's GROUP-INSTANCE-ID blank when it
    has none. Normalised: the padding (Kafka pads each column to a fixed minimum width, ours to
    its widest cell), the spaces inside a cell (Kafka's COORDINATOR (ID) has two before the id,
    ours one), a blank cell shown as "-" (every empty cell of ours is "-", so that our rows
    split on whitespace), and the order of the rows (see `same`)."""
    found = []
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        header = [[m.start(), m.group()] for m in re.finditer(r"\S+", lines[0])]
        for i in range(len(header) - 1, 0, -1):  # "COORDINATOR (ID)" is one column
            if header[i][1] == "(ID)":
                header[i - 1][1] += " (ID)"
                del header[i]
        starts = [s for s, _ in header] + [None]
        rows = [[" ".join(line[starts[i]:starts[i + 1]].split()) or "-" for i in range(len(header))]
                for line in lines[1:]]
        found.append([[name for _, name in header]] + rows)
    return found


def same(kafka_text: str, our_text: str, status: bool = False) -> list[list[list[str]]]:
    """Both tools' tables, equal header for header and row for row; ours returned for more
    checks. The rows are compared sorted: Kafka orders --describe's rows by member (the member
    with most partitions first), --list's and --reset-offsets' as its hash maps happen to, ours
    by group, topic and partition. `status`: ours ends with STATUS (describe --state), which is
    groupkeeper's, not Kafka's: the group's status by Burrow's rules as its coordinator judges it
    (docs/metrics.md), after Kafka's columns so that what reads those reads ours; compared without."""
    theirs, mine = tables(kafka_text), tables(our_text)
    if status:
        assert all(t[0][-1] == "STATUS" for t in mine), our_text
        mine = [[row[:-1] for row in t] for t in mine]
    assert [t[0] for t in theirs] == [t[0] for t in mine], (kafka_text, our_text)
    for t, m in zip(theirs, mine):
        assert sorted(t[1:]) == sorted(m[1:]), (kafka_text, our_text)
    assert len(theirs) == len(mine), (kafka_text, our_text)
    return mine


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def said(stderr: str) -> list[str]:
    """Kafka's notices about groups on stderr, without what its admin client may log there
    (a connection retried on a busy machine)."""
    return [line for line in lines(stderr) if line.startswith(("Consumer group ", "Warning: Consumer group "))]


# -- the groups -------------------------------------------------------------------------------

def produce(bootstrap: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(t, b"%d" % i, partition=p) for (t, p), n in ENDS.items() for i in range(n)]
        for future in futures:
            future.get(timeout=60)
    finally:
        producer.close()


class Members:
    """The live members of both groups, polled together."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.ck: dict[str, CK] = {}
        self.kp = None

    def join(self, client_id: str, group: str, *topics: str, **config) -> CK:
        self.ck[client_id] = CK(self.bootstrap, group, *topics, **{"client.id": client_id}, **config)
        return self.ck[client_id]

    def poll(self) -> None:
        for member in self.ck.values():
            member.poll()
        if self.kp is not None:
            self.kp.poll(timeout_ms=50)

    def close(self) -> None:
        """Last joined first: the consumer group's classic member before its consumer-protocol
        ones, so that it stays a consumer group (its last consumer-protocol member leaving would
        turn it back into a classic group, as at Kafka)."""
        for member in reversed(self.ck.values()):
            member.consumer.close()
        if self.kp is not None:
            self.kp.close()


def described(bootstrap: str, group: str, view: str) -> dict:
    return json.loads(ours(bootstrap, "describe", group, view, "--json").stdout)


def until(condition, members: Members | None, what: str, timeout: float = 60.0) -> None:
    """Poll the members until `condition()` holds, failing after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached in time"
        if members is not None:
            for _ in range(3):
                members.poll()
        else:
            time.sleep(0.1)


def settled(bootstrap: str, group: str, members: Members, client_ids: set[str], partitions: set) -> bool:
    """`group` Stable, its members those of `client_ids`, every partition owned once, each
    member's current assignment its target, and each client holding what the coordinator says."""
    result = ours(bootstrap, "describe", group, "--members", "--json", code=None)
    if result.exit_code != 0:  # not joined yet
        return False
    document = json.loads(result.stdout)
    if document["state"] != "Stable" or {x["client_id"] for x in document["members"]} != client_ids:
        return False
    owned = [(t, p) for x in document["members"] for t, ps in x["assignment"].items() for p in ps]
    if sorted(owned) != sorted(partitions):
        return False
    for x in document["members"]:
        mine = {(t, p) for t, ps in x["assignment"].items() for p in ps}
        if x["target_assignment"] is not None and x["target_assignment"] != x["assignment"]:
            return False
        held = (members.ck[x["client_id"]].assigned if x["client_id"] in members.ck
                else {(tp.topic, tp.partition) for tp in members.kp.assignment()})
        if held != mine:
            return False
    return True


# -- the test ---------------------------------------------------------------------------------

def test_kafka_consumer_groups_sh_and_ours_agree(kafka, gateway):
    bootstrap = gateway.bootstrap
    create_topic(kafka, ORDERS, 3)
    create_topic(kafka, AUDIT, 2)
    produce(kafka.bootstrap)
    everything = set(ENDS)

    members = Members(bootstrap)
    try:
        # the classic group: librdkafka first, a static member (kafka-python joining second
        # never has to rejoin: tests/support/clients.py), then kafka-python
        members.join("cgt-static", CLASSIC, ORDERS, AUDIT, **{"group.instance.id": "cgt-static-1"})
        until(lambda: members.ck["cgt-static"].assigned == everything, members, "the static member's partitions")
        members.kp = kp_consumer(bootstrap, CLASSIC, ORDERS, AUDIT, client_id="cgt-kp")
        until(lambda: settled(bootstrap, CLASSIC, members, {"cgt-static", "cgt-kp"}, everything), members,
              "the classic group's assignment")
        # the consumer group, on AUDIT's two partitions: two members of the consumer protocol,
        # then one of the classic protocol (the group migrating); one of the three has none
        members.join("cgt-new-a", CONSUMER, AUDIT, protocol="consumer")
        members.join("cgt-new-b", CONSUMER, AUDIT, protocol="consumer")
        audit = {(AUDIT, 0), (AUDIT, 1)}
        until(lambda: settled(bootstrap, CONSUMER, members, {"cgt-new-a", "cgt-new-b"}, audit), members,
              "the consumer group's assignment")
        members.join("cgt-old", CONSUMER, AUDIT)
        until(lambda: settled(bootstrap, CONSUMER, members, {"cgt-new-a", "cgt-new-b", "cgt-old"}, audit), members,
              "the consumer group's assignment with its classic member")

        # commits: each member its own partitions (ORDERS-2 left uncommitted); in the consumer
        # group also ORDERS-1, which none of its members consumes
        classic_offsets = {(ORDERS, 0): 3, (ORDERS, 1): 5, (AUDIT, 0): 1, (AUDIT, 1): 2}
        kp_held = {(tp.topic, tp.partition) for tp in members.kp.assignment()}
        kp_commit(members.kp, {TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                               for (t, p), o in classic_offsets.items() if (t, p) in kp_held})
        static = members.ck["cgt-static"]
        static.consumer.commit(offsets=[CKPartition(t, p, o) for (t, p), o in classic_offsets.items()
                                        if (t, p) in static.assigned], asynchronous=False)
        consumer_offsets = {(AUDIT, 0): 4, (AUDIT, 1): 6, (ORDERS, 1): 25}  # past ORDERS-1's end: LAG -5
        for client_id in ("cgt-new-a", "cgt-new-b", "cgt-old"):
            member = members.ck[client_id]
            mine = [CKPartition(t, p, o) for (t, p), o in consumer_offsets.items() if (t, p) in member.assigned]
            if client_id == "cgt-new-a":
                mine.append(CKPartition(ORDERS, 1, consumer_offsets[(ORDERS, 1)]))
            if mine:
                member.consumer.commit(offsets=mine, asynchronous=False)
        for group, offsets in ((CLASSIC, classic_offsets), (CONSUMER, consumer_offsets)):  # synchronous commits
            assert {(r["topic"], r["partition"]): r["current_offset"]
                    for r in described(bootstrap, group, "--offsets")["offsets"]
                    if r["current_offset"] is not None} == offsets
        live(kafka, bootstrap, members, classic_offsets)
    finally:
        members.close()

    for group in (CLASSIC, CONSUMER):
        until(lambda: described(bootstrap, group, "--state")["state"] == "Empty", None, f"{group} Empty")
    empty(bootstrap, classic_offsets, consumer_offsets)


def live(kafka, bootstrap: str, members: Members, classic_offsets: dict) -> None:
    both = ("--group", CLASSIC, "--group", CONSUMER)

    # --list, and its filters; Kafka's tool at a broker knows none of these groups
    kafka_list = kafka_tool(bootstrap, "--list", polled=(members,))
    assert sorted(lines(kafka_list.stdout)) == lines(ours(bootstrap, "list").stdout) == [CLASSIC, CONSUMER]
    listed = same(kafka_tool(bootstrap, "--list", "--state", "--type", polled=(members,)).stdout,
                  ours(bootstrap, "list", "--state", "--type").stdout)
    assert listed == [[["GROUP", "TYPE", "STATE"], [CLASSIC, "Classic", "Stable"], [CONSUMER, "Consumer", "Stable"]]]
    filtered = same(kafka_tool(bootstrap, "--list", "--state", "Stable", "--type", "consumer", polled=(members,)).stdout,
                    ours(bootstrap, "list", "--state", "Stable", "--type", "consumer").stdout)
    assert filtered == [[["GROUP", "TYPE", "STATE"], [CONSUMER, "Consumer", "Stable"]]]
    at_broker = kafka_tool(kafka.bootstrap, "--list", polled=(members,))
    assert at_broker.returncode == 0, at_broker.stderr
    assert not {CLASSIC, CONSUMER} & set(lines(at_broker.stdout)) and not {CLASSIC, CONSUMER} & broker_groups(kafka)

    # --describe: the offsets view (--verbose, with the committed offsets' leader epochs, once empty)
    owners = {g: {(t, p): x["client_id"] for x in described(bootstrap, g, "--members")["members"]
                  for t, ps in x["assignment"].items() for p in ps} for g in (CLASSIC, CONSUMER)}
    offsets = same(kafka_tool(bootstrap, "--describe", *both, polled=(members,)).stdout,
                   ours(bootstrap, "describe", *both).stdout)
    assert offsets[0][0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                             "HOST", "CLIENT-ID"]
    # a row per partition owned or committed: the consumer group's member without partitions
    # has none (Kafka's; ours had one of dashes); ORDERS-1, committed by no owner, has no
    # consumer, and its commit past the log's end a negative LAG (Kafka's; ours showed 0)
    assert [(r[1], r[2], r[8]) for r in offsets[1][1:]] == [
        (AUDIT, "0", owners[CONSUMER][(AUDIT, 0)]), (AUDIT, "1", owners[CONSUMER][(AUDIT, 1)]), (ORDERS, "1", "-")]
    assert [r[3:6] for r in offsets[1][1:]] == [["4", "5", "1"], ["6", "8", "2"], ["25", "20", "-5"]]
    assert [(r[1], r[2], r[3], r[8]) for r in offsets[0][1:]] == [
        (t, str(p), str(classic_offsets[(t, p)]) if (t, p) in classic_offsets else "-", owners[CLASSIC][(t, p)])
        for t, p in sorted(ENDS)]

    # --members: GROUP-INSTANCE-ID where a member has one (Kafka's; ours had no such column)
    member_tables = same(kafka_tool(bootstrap, "--describe", *both, "--members", polled=(members,)).stdout,
                         ours(bootstrap, "describe", *both, "--members").stdout)
    assert member_tables[0][0] == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert sorted((r[2], r[4]) for r in member_tables[0][1:]) == [("-", "cgt-kp"), ("cgt-static-1", "cgt-static")]
    assert member_tables[1][0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert sorted(r[4] for r in member_tables[1][1:]) == ["0", "1", "1"]
    # --members --verbose: Kafka 4's epochs and assignments for a classic group too (ours had
    # Kafka 3's ASSIGNMENT column there), and UPGRADED while a consumer group has members of
    # both protocols (ours had none)
    member_tables = same(kafka_tool(bootstrap, "--describe", *both, "--members", "--verbose", polled=(members,)).stdout,
                         ours(bootstrap, "describe", *both, "--members", "--verbose").stdout)
    epochs = ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    assert member_tables[0][0][6:] == epochs
    assert {r[4]: r[6:] for r in member_tables[0][1:]} == {
        c: ["-", assignment_text(tp for tp, owner in owners[CLASSIC].items() if owner == c), "-", "-"]
        for c in ("cgt-kp", "cgt-static")}
    assert member_tables[1][0][5:] == epochs + ["UPGRADED"]
    assert sorted((r[3], r[9]) for r in member_tables[1][1:]) == [
        ("cgt-new-a", "true"), ("cgt-new-b", "true"), ("cgt-old", "false")]

    # --state (ours with STATUS, see `same`; --verbose once empty)
    where = described(bootstrap, CLASSIC, "--state")["coordinator"]
    states = same(kafka_tool(bootstrap, "--describe", *both, "--state", polled=(members,)).stdout,
                  ours(bootstrap, "describe", *both, "--state").stdout, status=True)
    coordinator = f"{where['host']}:{where['port']} ({where['id']})"
    assert states == [[["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                       [CLASSIC, coordinator, "range", "Stable", "2"]],
                      [["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                       [CONSUMER, coordinator, "uniform", "Stable", "3"]]]

    # a live group is neither reset nor its consumed offsets deleted: the same refusals (Kafka's
    # "Error: ..." on stdout, ours on stderr with exit status 1: see the module's docstring).
    # Kafka then prints an empty NEW-OFFSET table, ours none (every group refused)
    refused = kafka_tool(bootstrap, "--reset-offsets", *both, "--all-topics", "--to-earliest", "--dry-run",
                         polled=(members,))
    mine = ours(bootstrap, "reset-offsets", *both, "--all-topics", "--to-earliest", "--dry-run", code=1)
    words = [f"Error: Assignments can only be reset if the group '{g}' is inactive, but the current state is Stable."
             for g in (CLASSIC, CONSUMER)]
    # (Kafka's in its hash map's order)
    assert sorted(line for line in lines(refused.stdout) if line.startswith("Error")) == words == lines(mine.stderr)
    refused = kafka_tool(bootstrap, "--delete-offsets", "--group", CONSUMER, "--topic", f"{AUDIT}:0", polled=(members,))
    mine = ours(bootstrap, "delete-offsets", CONSUMER, "--topic", f"{AUDIT}:0", code=1)
    error = "Error: Encountered some partition-level error, see the follow-up details."
    assert lines(refused.stdout)[0] == error and lines(mine.stderr) == [error]
    theirs, mine = tables(refused.stdout.split(error, 1)[1]), tables(mine.stdout)
    assert theirs[0][0] == mine[0][0] == ["TOPIC", "PARTITION", "STATUS"]
    assert theirs[0][1][:2] == mine[0][1][:2] == [AUDIT, "0"]
    assert theirs[0][1][2].startswith("Error: org.apache.kafka.common.errors.GroupSubscribedToTopicException")
    assert mine[0][1][2] == "Error: GROUP_SUBSCRIBED_TO_TOPIC"


def assignment_text(partitions) -> str:
    """Kafka 4's form of an assignment: topic:0,1;other:2."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    return ";".join(f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(by_topic.items())) or "-"


def empty(bootstrap: str, classic_offsets: dict, consumer_offsets: dict) -> None:
    both = ("--group", CLASSIC, "--group", CONSUMER)
    notices = [f"Consumer group '{g}' has no active members." for g in (CLASSIC, CONSUMER)]
    assert [described(bootstrap, g, "--state")["type"] for g in (CLASSIC, CONSUMER)] == ["classic", "consumer"]

    # --describe of empty groups: the same notices on stderr; the offsets, with the leader
    # epochs committed with them (--verbose), without consumers
    theirs = kafka_tool(bootstrap, "--describe", *both, "--offsets", "--verbose")
    mine = ours(bootstrap, "describe", *both, "--offsets", "--verbose")
    assert said(theirs.stderr) == lines(mine.stderr) == notices
    offsets = same(theirs.stdout, mine.stdout)
    assert offsets[0][0] == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                             "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert {(r[1], int(r[2])): int(r[4]) for r in offsets[0][1:]} == classic_offsets
    assert {(r[1], int(r[2])): int(r[4]) for r in offsets[1][1:]} == consumer_offsets
    assert {tuple(r[7:]) for t in offsets for r in t[1:]} == {("-", "-", "-")}
    # --members: the header alone (Kafka's; ours printed nothing)
    theirs = kafka_tool(bootstrap, "--describe", *both, "--members")
    mine = ours(bootstrap, "describe", *both, "--members")
    assert said(theirs.stderr) == lines(mine.stderr) == notices
    assert same(theirs.stdout, mine.stdout) == [[["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]]] * 2
    # --state --verbose: the consumer group keeps its epochs; a classic group has none
    states = same(kafka_tool(bootstrap, "--describe", *both, "--state", "--verbose").stdout,
                  ours(bootstrap, "describe", *both, "--state", "--verbose").stdout, status=True)
    assert states[0][0][4:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert states[0][1][3:] == ["Empty", "-", "-", "0"]
    assert states[1][1][3] == "Empty" and states[1][1][4] != "-" and states[1][1][6] == "0"

    # --reset-offsets --dry-run: the same new offsets; nothing committed
    def committed(group: str) -> dict:
        return {(r["topic"], r["partition"]): r["current_offset"]
                for r in described(bootstrap, group, "--offsets")["offsets"] if r["current_offset"] is not None}
    reset = same(kafka_tool(bootstrap, "--reset-offsets", *both, "--all-topics", "--to-earliest", "--dry-run").stdout,
                 ours(bootstrap, "reset-offsets", *both, "--all-topics", "--to-earliest", "--dry-run").stdout)
    assert reset[0][0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert sorted(reset[0][1:]) == sorted([g, t, str(p), "0"] for g, offsets in ((CLASSIC, classic_offsets),
                                                                                 (CONSUMER, consumer_offsets))
                                          for t, p in offsets)
    assert committed(CLASSIC) == classic_offsets and committed(CONSUMER) == consumer_offsets

    # --execute: Kafka's tool commits; ours after it commits the same again and shows the same
    targets = [f"{ORDERS}", f"{AUDIT}:1"]
    theirs = kafka_tool(bootstrap, "--reset-offsets", *both, "--topic", targets[0], "--topic", targets[1],
                        "--to-offset", "4", "--execute")
    after = {(t, p): 4 for t, p in [(ORDERS, 0), (ORDERS, 1), (ORDERS, 2), (AUDIT, 1)]}
    assert committed(CLASSIC) == {**classic_offsets, **after} and committed(CONSUMER) == {**consumer_offsets, **after}
    same(theirs.stdout, ours(bootstrap, "reset-offsets", *both, "--topic", targets[0], "--topic", targets[1],
                             "--to-offset", "4", "--execute").stdout)

    # neither --dry-run nor --execute: the warning (Kafka's but for "In version 5.0", Kafka's
    # release, not groupkeeper's: see NO_ACTION_WARNING) and a dry run; past the log's end, the
    # new offset is the log end, with the same warning for each partition
    theirs = kafka_tool(bootstrap, "--reset-offsets", "--group", CONSUMER, "--all-topics", "--shift-by", "6")
    mine = ours(bootstrap, "reset-offsets", CONSUMER, "--all-topics", "--shift-by", "6")
    shifted = same(theirs.stdout, mine.stdout)
    assert sorted(shifted[0][1:]) == [[CONSUMER, AUDIT, "0", "5"], [CONSUMER, AUDIT, "1", "8"],
                                      [CONSUMER, ORDERS, "0", "10"], [CONSUMER, ORDERS, "1", "10"],
                                      [CONSUMER, ORDERS, "2", "10"]]
    warning = NO_ACTION_WARNING.replace("In a future major release,", "In version 5.0,")
    assert warning in lines(theirs.stderr) and NO_ACTION_WARNING in lines(mine.stderr)

    def clamped(text: str) -> list[str]:  # Kafka's are log lines ("WARN New offset ... (its logger)")
        return sorted(re.sub(r"^WARN:? | \(org\.apache\.kafka\.[\w.]+\)$", "", line) for line in lines(text)
                      if "New offset" in line)
    assert clamped(theirs.stderr) == clamped(mine.stderr) == [
        "New offset (10) is higher than latest offset for topic partition cgt-audit-0. Value will be set to 5.",
        "New offset (10) is higher than latest offset for topic partition cgt-audit-1. Value will be set to 8."]
    assert committed(CONSUMER) == {**consumer_offsets, **after}

    # --shift-by --execute, back: Kafka's tool shows the new offsets as a dry run, ours commits
    # them; below the log's start, the log start, with the same warning
    theirs = kafka_tool(bootstrap, "--reset-offsets", "--group", CLASSIC, "--all-topics", "--shift-by", "-2",
                        "--dry-run")
    mine = ours(bootstrap, "reset-offsets", CLASSIC, "--all-topics", "--shift-by", "-2", "--execute")
    same(theirs.stdout, mine.stdout)
    assert clamped(theirs.stderr) == clamped(mine.stderr) == [
        "New offset (-1) is lower than earliest offset for topic partition cgt-audit-0. Value will be set to 0."]
    assert committed(CLASSIC) == {(ORDERS, 0): 2, (ORDERS, 1): 2, (ORDERS, 2): 2, (AUDIT, 0): 0, (AUDIT, 1): 2}

    # --delete-offsets: Kafka's tool first, then ours (deleting what is gone again succeeds, as
    # OffsetDelete does at a broker): the same words and table
    for group, topic in ((CLASSIC, AUDIT), (CONSUMER, f"{ORDERS}:0,2")):
        theirs = kafka_tool(bootstrap, "--delete-offsets", "--group", group, "--topic", topic)
        mine = ours(bootstrap, "delete-offsets", group, "--topic", topic)
        assert lines(theirs.stdout)[0] == lines(mine.stdout)[0] == (
            f"Request succeeded for deleting offsets from group {group}.")
        deleted = same(theirs.stdout.split("\n", 2)[2], mine.stdout.split("\n", 2)[2])
        assert {r[2] for r in deleted[0][1:]} == {"Successful"} and len(deleted[0]) == 3
    assert committed(CLASSIC) == {(ORDERS, 0): 2, (ORDERS, 1): 2, (ORDERS, 2): 2}
    assert committed(CONSUMER) == {(AUDIT, 0): 4, (AUDIT, 1): 4, (ORDERS, 1): 4}

    # --delete: Kafka's tool deletes one group, ours the other, in the same words
    theirs = kafka_tool(bootstrap, "--delete", "--group", CLASSIC)
    mine = ours(bootstrap, "delete", CONSUMER)
    assert lines(theirs.stdout) == [f"Deletion of requested consumer groups ('{CLASSIC}') was successful."]
    assert lines(mine.stdout) == [f"Deletion of requested consumer groups ('{CONSUMER}') was successful."]
    assert ours(bootstrap, "list").stdout == ""
