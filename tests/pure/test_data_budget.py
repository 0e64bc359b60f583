"""The ZooKeeper data budget's arithmetic (store/budget.py), without I/O: what a commit adds,
the limits (the instance's share, a client's share, the records' headroom), charges given
back and clamped, the shares of several group-partitions, the warning and the refusals'
log lines. Against a real ZooKeeper and a real coordinator: tests/zookeeper/test_data_budget_store.py
and tests/zookeeper/test_e2e_zookeeper_budget.py."""

from __future__ import annotations

import pytest

from coordinator import metrics
from coordinator.store import layout
from coordinator.store.budget import (COMMITTED_LOG_BYTES, ENTRY_BYTES, OFFSETS_SHARE, REFUSALS_LOGGED_EVERY,
                                      Budget, Ledger, derived_budget, entry_cost, node_cost)
from coordinator.store.errors import OverBudget, RecordOverBudget, error_code
from protocol import ErrorCode

MiB = 1 << 20
P = 7  # the group-partition of the ledgers here


class Lines:
    """A logger that keeps what it is told."""

    def __init__(self):
        self.lines: list[tuple[str, dict]] = []

    def warning(self, event: str, **fields) -> None:
        self.lines.append((event, fields))

    def events(self) -> list[str]:
        return [event for event, _ in self.lines]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def budget(total: int | None, per_client: int | None = None, partitions: int = 1) -> tuple[Budget, Lines, Clock]:
    clock = Clock()
    b = Budget(total, per_client, lambda: partitions, clock)
    b.log = Lines()
    return b, b.log, clock


def ledger(b: Budget, partition: int = P) -> Ledger:
    led = Ledger(partition, b)
    led.join()
    return led


def written(led: Ledger, group: str, topic: str, partitions: range, metadata: str | None = None) -> None:
    """What the store's build does: each shard's new size, as encoded."""
    for shard in sorted({p // layout.SHARD_PARTITIONS for p in partitions}):
        entries = {p: (100, -1, metadata, 1700000000000) for p in partitions if p // layout.SHARD_PARTITIONS == shard}
        led.shards[(group, topic, shard)] = len(layout.encode_shard(entries))


def entries(topic: str, partitions, metadata: str | None = None, offset: int = 100) -> dict:
    return {(topic, p): (offset, -1, metadata, 1700000000000) for p in partitions}


def refusals(limit: str) -> float:
    return metrics.ZOOKEEPER_BUDGET_REFUSALS.labels(limit)._value.get()


def test_the_budget_derived_from_a_heap_leaves_room_for_zookeepers_committed_log():
    assert COMMITTED_LOG_BYTES == 192 * MiB  # 500 multis of 256 KiB, each held about one and a half times
    assert derived_budget(512 * MiB) == 64 * MiB  # the embedded default
    assert derived_budget(1024 * MiB) == 320 * MiB
    assert derived_budget(256 * MiB) == 32 * MiB  # never less than an eighth


def test_what_a_commit_adds_counts_its_znodes_and_entries_and_nothing_for_moved_offsets():
    b, _, _ = budget(None)
    led = ledger(b)
    first = entries("t", range(3), "m" * 10)
    growth, growing = led.growth("g", first, None)
    shard = node_cost(len(layout.shard_path(P, "g", "t", 0)), 2)
    parents = sum(node_cost(len(path), 0) for path in (layout.topic_offsets_path(P, "g", "t"),
                                                       layout.offsets_path(P, "g"), layout.group_path(P, "g")))
    assert growth == 3 * (ENTRY_BYTES + 12) + shard + parents and growing == [("t", p) for p in range(3)]
    # what is held after the write is at most what was reckoned (the entries' JSON is shorter)
    written(led, "g", "t", range(3), "m" * 10)
    assert 0 < led.groups["g"] <= growth and led.held == led.groups["g"] == b.used

    held = {"t": {p: entry for (_, p), entry in first.items()}}
    assert led.growth("g", entries("t", range(3), "n" * 10, offset=10**15), held) == (0, [])  # moved on
    assert led.growth("g", entries("t", range(3), "n" * 5), held) == (-15, [])  # shorter metadata frees room
    longer, growing = led.growth("g", entries("t", [1], "m" * 20), held)
    assert longer == 10 and growing == [("t", 1)]
    # a second topic: its own znode and its shard's, not the group's again
    assert led.growth("g", entries("u", [0]), held)[0] == (
        entry_cost((0, -1, None, 0)) + node_cost(len(layout.shard_path(P, "g", "u", 0)), 2)
        + node_cost(len(layout.topic_offsets_path(P, "g", "u")), 0))
    assert entry_cost((0, -1, "\x01", 0)) == ENTRY_BYTES + 8  # metadata as JSON: a control character takes 6


def test_past_the_instances_share_the_partitions_that_add_data_are_refused_and_the_others_go():
    b, log, clock = budget(1 * MiB)
    led = ledger(b)
    before = refusals("total")
    big = entries("t", range(700), "m" * 900)  # about 720 KB: under the 90 % offsets may fill
    refused, reserved = led.admit("big", big, None, "User:a")
    assert refused == [] and reserved is not None and b.used == reserved[2] < OFFSETS_SHARE * MiB
    written(led, "big", "t", range(700), "m" * 900)
    led.done(reserved, None)
    assert b.used == led.groups["big"] and b.clients == {"User:a": led.groups["big"]}

    # another client's commit of new partitions beside moved offsets of existing ones
    held = {"t": {p: entry for (_, p), entry in big.items()}}
    mixed = {**entries("t", range(10), "m" * 900, offset=5), **entries("t", range(1000, 1300), "x" * 900)}
    refused, reserved = led.admit("big", mixed, held, "User:b")
    assert refused == [("t", p) for p in range(1000, 1300)] and reserved is None
    assert refusals("total") == before + 1
    assert log.events() == ["zookeeper data budget nearly used", "zookeeper data budget: writes refused"]
    assert log.lines[-1][1]["limit"] == "total" and log.lines[-1][1]["client"] == "User:b"

    # refusals in a burst are one line, then a line with their count
    for _ in range(5):
        assert led.admit("other", entries("t", range(300), "y" * 1000), None, "User:b")[0]
    assert len(log.lines) == 2 and refusals("total") == before + 6
    clock.now += REFUSALS_LOGGED_EVERY
    led.admit("other", entries("t", range(300), "y" * 1000), None, "User:b")
    assert log.lines[-1][1]["refused"] == 7 - 1  # the five, and this one
    assert b.used == led.groups["big"]  # nothing reserved for what was refused


def test_one_client_takes_no_more_than_its_share_and_others_still_commit():
    b, log, _ = budget(4 * MiB, per_client=1 * MiB)
    led = ledger(b)
    before = refusals("client")
    n = 0
    while True:
        refused, reserved = led.admit(f"a{n}", entries("t", range(100), "m" * 400), None, "10.0.0.1")
        if refused:
            break
        written(led, f"a{n}", "t", range(100), "m" * 400)
        led.done(reserved, None)
        n += 1
    assert 15 <= n <= 25 and b.clients["10.0.0.1"] <= 1 * MiB < b.limit() / 2
    assert refusals("client") == before + 1 and log.lines[-1][1]["limit"] == "client"
    refused, reserved = led.admit("b", entries("t", range(100), "m" * 400), None, "10.0.0.2")
    assert refused == [] and reserved is not None
    # an unattributed commit (the store's own callers) is held to the total only
    assert led.admit("c", entries("t", range(100), "m" * 400), None, None)[0] == []


def test_a_failed_commit_gives_back_what_it_reserved():
    b, _, _ = budget(1 * MiB)
    led = ledger(b)
    refused, reserved = led.admit("g", entries("t", range(100), "m" * 100), None, "User:a")
    assert b.used == reserved[2] and b.clients == {"User:a": reserved[2]}
    led.done(reserved, RuntimeError("ZooKeeper did not answer"))
    assert b.used == 0 and b.clients == {} and led.charges == {}


def test_charges_follow_a_group_that_shrinks_or_goes():
    b, _, _ = budget(8 * MiB)
    led = ledger(b)
    for client, topic in (("User:a", "t"), ("User:b", "u")):
        _, reserved = led.admit("g", entries(topic, range(64), "m" * 1000), None, client)
        written(led, "g", topic, range(64), "m" * 1000)
        led.done(reserved, None)
    a, bb = b.clients["User:a"], b.clients["User:b"]
    assert a > 64 * 1000 and bb > 64 * 1000 and a + bb <= led.groups["g"]
    written(led, "g", "t", range(64), "")  # a's metadata emptied (retention, or a's commit)
    assert sum(b.clients.values()) <= led.groups["g"] and b.clients["User:b"] < bb  # the largest gave back first
    led.forget("g")  # deleted
    assert b.used == led.held == 0 and b.clients == {} and led.groups == {} and led.shards == {}


def test_records_have_headroom_past_the_offsets_and_no_more():
    b, _, _ = budget(1 * MiB)
    led = ledger(b)
    _, reserved = led.admit("g", entries("t", range(1000), "m" * 800), None, None)
    written(led, "g", "t", range(1000), "m" * 800)
    led.done(reserved, None)
    assert OFFSETS_SHARE * MiB - 100_000 < b.used < OFFSETS_SHARE * MiB
    assert len(led.admit("g", entries("t", range(5000, 5200), "m" * 800), None, None)[0]) == 200
    led.check_record("r", 20_000, 0)  # a group record may still be written
    led.record("r", 20_000)
    led.check_record("r", 19_000, 0)  # no larger than before: always
    before = refusals("records")
    with pytest.raises(RecordOverBudget):
        led.check_record("r", 200_000, 1)
    assert refusals("records") == before + 1 and led.records["r"] < 30_000


def test_an_instance_holds_its_share_by_the_group_partitions_it_owns():
    b, _, _ = budget(4 * MiB, per_client=2 * MiB, partitions=4)
    first = ledger(b, 0)
    assert b.limit() == 1 * MiB and b.client_limit() == 2 * MiB // 4
    assert first.admit("g", entries("t", range(500), "m" * 1000), None, "User:a")[0]  # past a client's quarter
    _, reserved = first.admit("g", entries("t", range(400), "m" * 1000), None, "User:a")
    written(first, "g", "t", range(400), "m" * 1000)
    first.done(reserved, None)
    _, reserved = first.admit("g", entries("u", range(400), "m" * 1000), None, "User:c")
    written(first, "g", "u", range(400), "m" * 1000)
    first.done(reserved, None)
    assert first.admit("h", entries("t", range(100), "m" * 1000), None, "User:b")[0]  # past a quarter's 90 %
    second = ledger(b, 1)
    assert b.limit() == 2 * MiB and b.used == first.held
    assert second.admit("h", entries("t", range(100), "m" * 1000), None, "User:b")[0] == []
    first.leave()  # handed over: its data goes with it
    assert b.limit() == 1 * MiB and b.used == second.held and "User:a" not in b.clients
    first.join()  # taken back
    assert b.used == first.held + second.held and b.clients["User:a"] == first.clients["User:a"]


def test_the_warning_comes_once_past_three_quarters_and_again_only_after_falling_back():
    b, log, _ = budget(1 * MiB)
    led = ledger(b)
    led.record("a", 700_000)
    assert log.events() == []
    led.record("b", 100_000)
    assert log.events() == ["zookeeper data budget nearly used"]
    assert log.lines[0][1]["budget_bytes"] == MiB and log.lines[0][1]["used_bytes"] == b.used
    led.record("c", 10_000)
    led.forget("c")
    led.record("c", 10_000)
    assert len(log.lines) == 1
    led.forget("b")
    led.forget("c")
    led.record("b", 100_000)
    assert len(log.lines) == 1  # not under 65 % in between
    led.forget("a")
    led.record("a", 700_000)
    assert len(log.lines) == 2


def test_without_a_budget_nothing_is_refused():
    b, log, _ = budget(None)
    led = ledger(b)
    assert led.admit("g", entries("t", range(10_000), "m" * 4096), None, "x")[0] == []
    led.check_record("g", 1 << 30, 5000)
    assert b.limit() == 0 and log.lines == []


def test_what_a_refusal_tells_a_kafka_client():
    """Kafka's answer for a commit too large (its log's limit), and for a group past its limit."""
    assert error_code(OverBudget("x")) == ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    assert error_code(RecordOverBudget("x")) == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_pending_transactional_offsets_count_and_are_refused_past_the_offsets_share():
    b, _, _ = budget(100_000)
    led = ledger(b)
    led.check_pending("g", "g@tx@1@0", 2_000, "alice")
    led.pending_written("g", "g@tx@1@0", 2_000)
    one = b.used
    assert 2_000 < one < 3_000  # its data, path and ZooKeeper's own bytes
    led.pending_written("g", "g@tx@1@0", 2_500)  # rewritten larger: the difference
    assert b.used == one + 500
    before = refusals("total")
    with pytest.raises(OverBudget):
        led.check_pending("g", "g@tx@2@0", int(OFFSETS_SHARE * 100_000), "alice")
    assert refusals("total") == before + 1
    led.check_pending("g", "g@tx@1@0", 2_500, "alice")  # no growth: always
    assert "alice" not in b.clients  # counted in the total, charged to no client
    led.pending_written("g", "g@tx@1@0", None)  # resolved: gone
    assert b.used == 0
    led.pending_written("h", "h@tx@1@0", 1_000)
    led.forget("h")  # a group gone takes its pending transactions' bytes with it
    assert b.used == 0 and led.pending == {}
