"""The conformance matrix: every client and protocol (tests/support/members.py's CLIENTS),
in every scenario, through a gateway in front of each broker (conftest.py's fronts).
conftest.py writes docs/conformance.md from the outcomes."""

from __future__ import annotations

import re
import time

import pytest

from tests.support.clients import committed, held_by_groupkeeper, produce_values, read_committed
from tests.support.members import CLIENTS, Member, copy_exactly_once

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)

BROKERS = ["Kafka 4.4", "Tansu"]
SCENARIOS = ["reads, commits", "two share, one leaves", "static return", "regex", "exactly-once"]
SCENARIO_TEXT = {
    "reads, commits": "one member reads every record of a 3-partition topic and commits; the commits read "
                      "back through the gateway equal the log's ends",
    "two share, one leaves": "two members of the client split 4 partitions and read; one leaves and the other "
                             "takes every partition and reads what follows; every record read, the commits "
                             "equal the log's ends",
    "static return": "a static member (group.instance.id) reads half, closes and comes back with its id within "
                     "the session: it holds the same partitions, reads on from its commits (nothing twice), "
                     "and the group does not rebalance",
    "regex": "the member subscribes by regular expression and is assigned the matching topics only; on the "
             "consumer protocol (KIP-848, resolved by groupkeeper) also a matching topic made after it joined",
    "exactly-once": "the client's own read-process-write loop: a read_committed member and a transactional "
                    "producer copy 150 records of 3 partitions, each batch (10 records at most) in a transaction "
                    "that carries the member's offsets (send_offsets_to_transaction or the client's equivalent, "
                    "with its group metadata), every third transaction aborted and the member rewound to the "
                    "committed offsets (franz-go and sarama send a transaction's offsets only when they commit "
                    "it); the copy, read with read_committed, holds every record exactly once, each committed "
                    "transaction's offsets became the group's at groupkeeper, and its commits equal the input's "
                    "log ends",
}
CLIENT_NAMES = list(CLIENTS)

# Cells known not to pass, with the reason (strict: a cell that passes fails the run, so
# this list stays true).
KNOWN: dict[tuple[str, str, str], str] = {
    **{("franz-go (consumer)", "static return", broker):
       "the client's: franz-go 1.22.3 leaves a KIP-848 static member (epoch -2) without its instance id, which "
       "Kafka 4.4's own coordinator refuses too (INVALID_REQUEST, 'InstanceId can't be null'), so the member is "
       "not released and its return waits out its session (tests/kafka/test_go_clients.py shows Kafka's answer)"
       for broker in BROKERS},
    ("Java (consumer)", "regex", "Tansu"):
        "Tansu's: the Java client asks Metadata for a topic it knows only by id (the topic made later, assigned "
        "by groupkeeper with its id) with the name \"\" and the id; Kafka resolves it by the id, Tansu answers "
        "INVALID_TOPIC_EXCEPTION (tests/tansu/test_tansu.py shows Tansu's answer), so the client never reads it",
}
# Cells that cannot be: the client has no such feature.
ABSENT = {("sarama (classic)", "regex"): "sarama's ConsumerGroup subscribes to topics by name only: it has no "
                                        "subscription by pattern"}
# Cells that cannot be, for every client: the broker lacks what the scenario needs.
NOT_AT_BROKER = {
    ("exactly-once", "Tansu"):
        "Tansu's: it writes a transaction's ABORT marker, but its Fetch never lists aborted transactions, so a "
        "read_committed consumer reads aborted records as committed ones and no copy can be exactly once "
        "(tests/tansu/test_tansu.py shows Tansu's answer, with no gateway)",
}


def slug(*parts: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-")


def rebalances(front, group: str) -> int:
    """Generations and group epochs groupkeeper has logged for `group` so far."""
    return sum(1 for entry in front.gateway.events()
               if entry.get("group") == group and entry.get("event") in ("rebalance completed", "group epoch bumped"))


def reads_and_commits(front, client, name, tmp_path):
    front.create_topic(name, 3)
    values = produce_values(front.gateway.bootstrap, name, 300, name, 3)
    member = Member(client, front.gateway.bootstrap, name, tmp_path, topics=(name,), records=len(values))
    try:
        result = member.finish(120)
    finally:
        member.kill()
    assert sorted(result["values"]) == sorted(values)
    assert sum(result["committed"].values()) == len(values)
    assert sum(committed([front.gateway.port], name).values()) == len(values)


def two_share_one_leaves(front, client, name, tmp_path):
    front.create_topic(name, 4)
    first, second = (Member(client, front.gateway.bootstrap, name, tmp_path, topics=(name,), instance_id="",
                            session_timeout_ms=10_000) for _ in range(2))
    try:
        first.wait_for(lambda m: len(m.assigned) == 2 and len(second.assigned) == 2, what="two partitions each")
        values = produce_values(front.gateway.bootstrap, name, 200, name, 4)
        first.wait_for(lambda m: m.count + second.count >= len(values), what="the two reading every record")
        gone = first.stop()
        second.wait_for(lambda m: len(m.assigned) == 4, what="every partition, once the other left")
        more = produce_values(front.gateway.bootstrap, name, 100, f"{name}-more", 4)
        second.wait_for(lambda m: m.count >= 100 + 100, what="what followed")
        stays = second.stop()
    finally:
        first.kill()
        second.kill()
    assert set(gone["values"]) | set(stays["values"]) == set(values) | set(more)
    assert sum(committed([front.gateway.port], name).values()) == len(values) + len(more)


def static_return(front, client, name, tmp_path):
    front.create_topic(name, 2)
    half = produce_values(front.gateway.bootstrap, name, 100, f"{name}-a", 2)
    first = Member(client, front.gateway.bootstrap, name, tmp_path, topics=(name,), instance_id="one",
                   session_timeout_ms=30_000, records=len(half))
    try:
        before = first.finish(120)
        assigned = [a for a in first.assignments if a][-1]
    finally:
        first.kill()
    assert sorted(before["values"]) == sorted(half)
    generations = rebalances(front, name)
    rest = produce_values(front.gateway.bootstrap, name, 100, f"{name}-b", 2)
    again = Member(client, front.gateway.bootstrap, name, tmp_path, topics=(name,), instance_id="one",
                   session_timeout_ms=30_000, records=len(rest))
    try:
        after = again.finish(120)
    finally:
        again.kill()
    assert sorted(after["values"]) == sorted(rest)  # from its commits: nothing read twice
    assert [a for a in again.assignments if a][0] == assigned  # (some clients say [] before they join)
    assert rebalances(front, name) == generations, "the static member's return rebalanced the group"


def regex(front, client, name, tmp_path):
    for topic in (f"{name}-rx-a", f"{name}-rx-b", f"{name}-other"):
        front.create_topic(topic, 2)
    member = Member(client, front.gateway.bootstrap, name, tmp_path, pattern=f"{name}-rx-.*")
    try:
        wanted = {f"{name}-rx-{t}-{p}" for t in "ab" for p in (0, 1)}
        member.wait_for(lambda m: m.assigned == wanted, what="the matching topics")
        topics = [f"{name}-rx-a", f"{name}-rx-b", f"{name}-other"]
        if client.protocol == "consumer":
            front.create_topic(f"{name}-rx-c", 2)
            member.wait_for(lambda m: m.assigned == wanted | {f"{name}-rx-c-0", f"{name}-rx-c-1"},
                            what="the matching topic made later")
            topics.append(f"{name}-rx-c")
        values = [v for t in topics for v in produce_values(front.gateway.bootstrap, t, 10, t, 2)]
        expected = [v for v in values if "-rx-" in v]
        member.wait_for(lambda m: m.count >= len(expected), what="every matching record")
        result = member.stop()
    finally:
        member.kill()
    assert sorted(result["values"]) == sorted(expected)


def exactly_once(front, client, name, tmp_path):
    sink = f"{name}-out"
    front.create_topic(name, 3)
    front.create_topic(sink, 3)
    values = produce_values(front.gateway.bootstrap, name, 150, name, 3)
    done = copy_exactly_once(client, front.gateway.bootstrap, name, name, sink, f"{name}-tx", len(values), tmp_path,
                             abort_every=3, batch=10)
    assert done["aborted"] >= 1, done
    assert len(done["values"]) == len(set(done["values"])), "a record copied in two committed transactions"
    assert sorted(done["values"]) == sorted(values)
    out = read_committed(front.gateway.bootstrap, sink, len(values))
    assert sorted(out) == sorted("out-" + v for v in values), "not every record exactly once"
    # the group's commits are the last transactions', and every committed transaction's
    # offsets went through groupkeeper's TxnOffsetCommit (none as a plain commit): the last
    # end reaches the group's owner as the gateway records it, and is logged as it is applied
    deadline = time.monotonic() + 30
    while True:
        offsets = committed([front.gateway.port], name)
        applied = sum(1 for e in front.gateway.events()
                      if e.get("group") == name and e.get("event") == "transactional offsets committed")
        if offsets == {(name, p): 50 for p in range(3)} and applied == done["transactions"]:
            break
        assert time.monotonic() < deadline, (offsets, applied, done)
        time.sleep(0.2)


RUN = {"reads, commits": reads_and_commits, "two share, one leaves": two_share_one_leaves,
       "static return": static_return, "regex": regex, "exactly-once": exactly_once}


def cells():
    for broker in BROKERS:
        for scenario in SCENARIOS:
            for client in CLIENT_NAMES:
                key = (client, scenario, broker)
                marks = [pytest.mark.xfail(reason=KNOWN[key], strict=True)] if key in KNOWN else []
                if (client, scenario) in ABSENT:
                    marks = [pytest.mark.skip(reason=ABSENT[(client, scenario)])]
                if (scenario, broker) in NOT_AT_BROKER:
                    marks = [pytest.mark.skip(reason=NOT_AT_BROKER[(scenario, broker)])]
                yield pytest.param(broker, scenario, client, marks=marks, id=slug(broker, scenario, client))


@pytest.mark.parametrize("front, scenario, client", list(cells()), indirect=["front"])
def test_cell(front, scenario, client, tmp_path):
    name = slug(scenario, client, front.name)[:60]
    RUN[scenario](front, CLIENTS[client], name, tmp_path)
    held_by_groupkeeper(front.gateway.port, front.broker_groups(), name)
