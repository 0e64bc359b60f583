"""/metrics of a running coordinator after driving a group through joins, commits, a leave
and a session expiry: each counter moved by exactly what was done. Raw members (our own
codec) make the counts exact: a real client heartbeats on its own schedule."""

from __future__ import annotations

import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import ErrorCode
from tests.support.clients import RawMember, join_together
from tests.support.coordinator_process import CoordinatorProcess

GROUP, TOPIC = "watched", "metered"


@pytest.fixture
def groupkeeper(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, metrics_group_series=1)
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def samples(process) -> dict[tuple[str, tuple], float]:
    status, text = process.scrape()
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found, name: str, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_counters_follow_a_group_through_its_life(groupkeeper):
    groupkeeper.topic(TOPIC, 4)
    first = RawMember(groupkeeper.port, GROUP, TOPIC, session_timeout_ms=1000)
    second = RawMember(groupkeeper.port, GROUP, TOPIC)
    try:
        before = samples(groupkeeper)
        assert value(before, "groupkeeper_zookeeper_connected") == 1
        assert value(before, "groupkeeper_group_partitions") == 50
        assert value(before, "groupkeeper_group_load_duration_seconds_count") == 50
        assert value(before, "groupkeeper_zookeeper_request_duration_seconds_count", op="multi") >= 50

        assert first.join_and_sync() == {TOPIC: [0, 1, 2, 3]}
        assert first.commit(TOPIC, {0: 10, 1: 11, 2: 12}) == [ErrorCode.NONE] * 3
        for _ in range(3):
            assert first.heartbeat() == ErrorCode.NONE
        one = samples(groupkeeper)
        assert value(one, "groupkeeper_rebalances_total", reason="member joined") == 1
        assert value(one, "groupkeeper_offset_commits_total") == 1
        assert value(one, "groupkeeper_offset_commit_partitions_total") == 3
        assert value(one, "groupkeeper_offset_commit_writes_total") == 1
        assert value(one, "groupkeeper_offset_commit_duration_seconds_count") == 1
        assert value(one, "groupkeeper_heartbeats_total") == 3
        assert value(one, "groupkeeper_requests_total", api="Heartbeat", error="NONE") == 3
        assert value(one, "groupkeeper_requests_total", api="OffsetCommit", error="NONE") == 1
        assert value(one, "groupkeeper_request_duration_seconds_count", api="OffsetCommit") == 1
        assert value(one, "groupkeeper_groups", type="classic", state="Stable") == 1
        assert value(one, "groupkeeper_group_members", group=GROUP) == 1

        # a second member: the first is told to rejoin (one REBALANCE_IN_PROGRESS heartbeat)
        joined: dict = {}
        joining = threading.Thread(target=lambda: joined.update(second.join_and_sync()))
        joining.start()
        mine = first.rejoin_when_asked()
        joining.join(30)
        assert sorted(mine[TOPIC] + joined[TOPIC]) == [0, 1, 2, 3]
        entry = groupkeeper.wait_for_log("rebalance completed", group=GROUP, generation=2)
        assert entry["reason"].startswith("member joined") and (entry["members_before"], entry["members_after"]) == (1, 2)
        assert entry["partitions_moved"] == 2 and entry["strategy"] == "range"

        assert second.leave() == ErrorCode.NONE
        first.rejoin_when_asked()
        groupkeeper.wait_for_log("rebalance completed", group=GROUP, generation=3, reason="member left")
        two = samples(groupkeeper)
        assert value(two, "groupkeeper_rebalances_total", reason="member joined") == 2
        assert value(two, "groupkeeper_rebalances_total", reason="member left") == 1
        assert value(two, "groupkeeper_members_removed_total", reason="left") == 1
        assert value(two, "groupkeeper_requests_total", api="Heartbeat", error="REBALANCE_IN_PROGRESS") == 2
        assert value(two, "groupkeeper_rebalance_duration_seconds_count") == 3
        assert value(two, "groupkeeper_group_members", group=GROUP) == 1

        # the first member falls silent: its 1 s session expires and the group empties
        groupkeeper.wait_for_log("member removed", group=GROUP, reason="session timeout", timeout=30)
        groupkeeper.wait_for_log("rebalance completed", group=GROUP, generation=4, reason="member expired")
        three = samples(groupkeeper)
        assert value(three, "groupkeeper_session_expirations_total") == 1
        assert value(three, "groupkeeper_rebalances_total", reason="member expired") == 1
        assert value(three, "groupkeeper_groups", type="classic", state="Empty") == 1
        assert value(three, "groupkeeper_group_members", group=GROUP) == 0
        assert not any(label == "member" for _, labels in three for label, _ in labels)
    finally:
        first.close()
        second.close()


def test_members_per_group_only_for_the_largest_groups(groupkeeper):
    """metrics_group_series = 1: the largest group has its own series, the others are summed
    in the series without a group label."""
    groupkeeper.topic(TOPIC, 2)
    members = [RawMember(groupkeeper.port, "small", TOPIC)]
    try:
        members[0].join_and_sync()
        big = [RawMember(groupkeeper.port, "big", TOPIC) for _ in range(2)]
        members += big
        join_together(*big)
        found = samples(groupkeeper)
        series = {labels: v for (name, labels), v in found.items() if name == "groupkeeper_group_members"}
        assert series == {(("group", "big"),): 2, (("group", ""),): 1}
    finally:
        for m in members:
            m.close()


def test_docs_describe_every_metric_and_only_those(groupkeeper):
    import re
    from pathlib import Path

    _, text = groupkeeper.scrape()
    live = {family.name + ("_total" if family.type == "counter" else "")
            for family in text_string_to_metric_families(text)}
    documented = set(re.findall(r"^\| `(groupkeeper_\w+)` \|", (Path(__file__).parents[2] / "docs" / "metrics.md")
                                .read_text(), re.MULTILINE))
    assert live == documented
