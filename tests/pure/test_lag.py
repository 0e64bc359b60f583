"""Consumer lag: the log ends table, lag from the committed offsets, the metric families
(pure, no I/O); the ListOffsets poller against a broker (the stand-in, over a socket)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from coordinator.cluster import lag
from coordinator.metrics import STEP, LagCollector, Pace
from coordinator.topics.brokers import BrokerTopics
from coordinator.topics.log_ends import PER_REQUEST, LogEndPoller, LogEnds
from tests.support.standin_broker import Log, StandInBroker
from tests.support.turns import turns_during


def coordinator_with(offsets: dict[str, dict[str, dict[int, int]]], loaded: bool = True, releasing: bool = False):
    """The shape `lag` reads of a Coordinator: owned group-partitions, each a store's
    confirmed offsets (group -> topic -> partition -> entry)."""
    event = trio.Event()
    if loaded:
        event.set()
    durable = {g: {t: {p: (o, -1, None, 0) for p, o in ps.items()} for t, ps in ts.items()}
               for g, ts in offsets.items()}
    return SimpleNamespace(owned={0: SimpleNamespace(store=SimpleNamespace(durable=durable), loaded=event,
                                                     releasing=releasing)})


def test_log_ends_are_bounded_and_age():
    ends = LogEnds(max_partitions=2)
    ends.seen("a", 0, 10, now=1.0)
    ends.seen("a", 1, -1, now=1.0)  # an error's -1: nothing learned
    ends.seen("a", 1, 5, now=2.0)
    ends.seen("b", 0, 7, now=2.0)  # full: refused, counted
    assert ends.get("a", 0) == (10, 1.0) and ends.get("b", 0) is None and ends.refused == 1
    ends.seen("a", 0, 12, now=3.0)  # a known one is always updated
    assert ends.get("a", 0) == (12, 3.0)
    assert ends.stale([("a", 0), ("a", 1), ("c", 0)], older_than=1.5, now=4.0) == [("a", 1), ("c", 0)]
    assert ends.forget_unseen(before=2.5) == 1 and ends.get("a", 1) is None


def test_lag_is_each_committed_offset_against_its_end_never_negative():
    coordinator = coordinator_with({"g1": {"orders": {0: 10, 1: 20, 2: 30}}, "g2": {"orders": {0: 50}}})
    ends = LogEnds()
    ends.seen("orders", 0, 40, now=0)
    ends.seen("orders", 1, 20, now=0)
    rows, unknown = lag.lag(coordinator, ends)
    assert sorted(rows) == [("g1", "orders", 0, 30), ("g1", "orders", 1, 0), ("g2", "orders", 0, 0)]
    assert unknown == 1  # g1's partition 2: no end seen
    assert lag.committed_partitions(coordinator) == {("orders", 0), ("orders", 1), ("orders", 2)}
    # group-partitions not loaded yet, or being handed over, are not this instance's to report
    assert lag.lag(coordinator_with({"g": {"t": {0: 1}}}, loaded=False), ends) == ([], 0)
    assert lag.lag(coordinator_with({"g": {"t": {0: 1}}}, releasing=True), ends) == ([], 0)


def families(collector) -> dict[str, dict[tuple, float]]:
    return {f.name: {tuple(s.labels.values()): s.value for s in f.samples} for f in collector.collect()}


def test_the_lag_metrics_bound_their_series():
    rows = [("big", "t", 0, 500), ("big", "t", 1, 400), ("big", "u", 0, 1), ("mid", "t", 0, 90),
            ("small", "t", 0, 3), ("small", "u", 0, 2)]
    got = families(LagCollector(lambda: (rows, 4), per_group=2, per_partition=0))
    assert got["groupkeeper_consumergroup_lag"] == {
        ("big", "t"): 900, ("big", "u"): 1, ("mid", "t"): 90,
        ("", "t"): 3, ("", "u"): 2}  # the groups beyond the two with most lag, summed
    assert got["groupkeeper_consumergroup_partition_lag"] == {}  # none by default
    assert got["groupkeeper_consumergroup_lag_unknown_partitions"] == {(): 4}
    got = families(LagCollector(lambda: (rows, 0), per_group=100, per_partition=2))
    assert got["groupkeeper_consumergroup_partition_lag"] == {("big", "t", "0"): 500, ("big", "t", "1"): 400}
    assert got["groupkeeper_consumergroup_lag"][("small", "u")] == 2


async def test_the_poller_asks_the_leaders_for_stale_ends_only():
    """Against a broker over a socket: the partitions wanted whose ends are unknown or old
    are asked with ListOffsets, grouped by leader; fresh ones are not asked again."""
    topic_id = uuid.uuid4()
    broker = StandInBroker({("orders", 0): Log(0, 120), ("orders", 1): Log(5, 77), ("orders", 2): Log(0, 3)},
                           {"orders": (3, topic_id)}, node_id=1).start()
    try:
        view = BrokerTopics([("127.0.0.1", broker.port)], max_age=60)
        assert await view.refresh()
        ends = LogEnds()
        wanted = {("orders", 0), ("orders", 1), ("unknown", 0)}  # a topic without a leader waits
        poller = LogEndPoller(ends, view, lambda: wanted, interval=30, per_second=1000)
        now = trio.current_time()
        assert poller.requests(now) == [(1, [("orders", 0), ("orders", 1)])]
        await poller.round()
        assert ends.get("orders", 0)[0] == 120 and ends.get("orders", 1)[0] == 77
        assert ends.get("orders", 2) is None  # not wanted: no group has an offset for it
        asked = len(broker.requests)
        assert poller.requests(trio.current_time()) == []  # fresh: nothing to ask
        await poller.round()
        assert len(broker.requests) == asked
    finally:
        broker.stop()


def test_requests_are_split_per_leader_and_size():
    view = SimpleNamespace(states={("t", p): SimpleNamespace(leader=p % 2) for p in range(2 * PER_REQUEST + 10)},
                           brokers={0: object(), 1: object()})
    poller = LogEndPoller(LogEnds(), view, lambda: list(view.states), interval=30, per_second=10)
    requests = poller.requests(0.0)
    assert [(leader, len(keys)) for leader, keys in requests] == [(0, PER_REQUEST), (0, 5), (1, PER_REQUEST), (1, 5)]


async def test_the_poller_reads_the_committed_partitions_in_steps():
    """What the daemon gives the poller is a stepped computation: driven with the loop run
    at its steps (`wanted_now`), or read in one piece by `requests` alone; the same either way."""
    coordinator = coordinator_with({f"g{n}": {"t": {n % 3: 1}, "u": {0: -1}} for n in range(9)})
    view = SimpleNamespace(states={("t", p): SimpleNamespace(leader=1) for p in range(4)}, brokers={1: object()})
    poller = LogEndPoller(LogEnds(), view, lambda: lag.committed_partitions_in_steps(coordinator, Pace(0)),
                          interval=30, per_second=10)
    wanted, turns = await turns_during(poller.wanted_now)
    assert wanted == {("t", 0), ("t", 1), ("t", 2)} == lag.committed_partitions(coordinator)  # u's -1: none
    assert turns >= 3  # 9 groups, a step after every other one: 4 (the last turn may not have come yet)
    assert poller.requests(0.0, wanted) == poller.requests(0.0) == [(1, [("t", 0), ("t", 1), ("t", 2)])]


# -- Burrow's rules -------------------------------------------------------------------------

def window(*commits):
    """(offset, seconds, lag) triples as commits (times in ms)."""
    return [(o, int(t * 1000), lag) for o, t, lag in commits]


def test_burrows_rules_each_in_their_order():
    now = 100_000
    # lag zero now, or at any commit of the window: OK whatever else
    assert lag.partition_status(window((5, 10, 3), (5, 20, 3)), 0, now) == lag.OK
    assert lag.partition_status(window((5, 10, 0), (5, 20, 3)), 3, now) == lag.OK
    # an offset that went backwards: REWIND, before anything else
    assert lag.partition_status(window((50, 60, 5), (40, 70, 9), (45, 80, 9)), 9, now) == lag.REWIND
    # the last commit longer ago than the window spans: STOP
    assert lag.partition_status(window((10, 40, 5), (20, 50, 5)), 5, 61_000) == lag.STOP
    assert lag.partition_status(window((10, 40, 5), (20, 50, 5)), 5, 59_000) != lag.STOP
    # the same offset committed again and again, with lag: STALL
    assert lag.partition_status(window((10, 80, 5), (10, 90, 7), (10, 100, 9)), 9, now) == lag.STALL
    # moving, but the lag never decreasing: WARN; once it decreases: OK
    assert lag.partition_status(window((10, 80, 5), (20, 90, 5), (30, 100, 8)), 8, now) == lag.WARN
    assert lag.partition_status(window((10, 80, 5), (20, 90, 9), (30, 100, 8)), 8, now) == lag.OK
    # nothing committed, or no end known: nothing to judge
    assert lag.partition_status([], 100, now) == lag.OK
    assert lag.partition_status(window((10, 80, 5)), None, now) == lag.OK


def _rules_one_by_one(window, lag_now, now_ms):
    """Burrow's rules as the module's comment lists them, each pair of commits compared in turn."""
    if not window or not lag_now:
        return lag.OK
    lags = [x for _, _, x in window if x is not None]
    if any(x == 0 for x in lags):
        return lag.OK
    if any(b[0] < a[0] for a, b in zip(window, window[1:])):
        return lag.REWIND
    if now_ms - window[-1][1] > window[-1][1] - window[0][1]:
        return lag.STOP
    if len(window) > 1 and all(c[0] == window[0][0] for c in window):
        return lag.STALL
    if len(lags) > 1 and all(b >= a for a, b in zip(lags, lags[1:])):
        return lag.WARN
    return lag.OK


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5), st.one_of(st.none(), st.integers(0, 4))),
                max_size=lag.WINDOW),
       st.one_of(st.none(), st.integers(0, 4)), st.integers(0, 30))
def test_the_rules_in_list_operations_judge_as_the_rules_one_by_one(commits, lag_now, now):
    window, when = [], 0
    for offset, gap, behind in commits:  # commit times never go back
        when += gap
        window.append((offset, when, behind))
    assert lag.partition_status(window, lag_now, now + when) == _rules_one_by_one(window, lag_now, now + when)


def test_commit_windows_keep_the_last_commits_with_their_lag_and_judge_groups():
    ends = LogEnds()
    ends.seen("t", 0, 100, now=0)
    windows = lag.CommitWindows(ends, window=3, min_distance_ms=1000)
    for i, offset in enumerate((10, 20, 30, 40)):
        windows.committed("g", "t", {0: (offset, -1, None, 10_000 * (i + 1))})
    windows.committed("g", "t", {0: (45, -1, None, 40_500)})  # within min distance: replaces the last
    assert windows.windows["g"][("t", 0)] == [(20, 20_000, 80), (30, 30_000, 70), (45, 40_500, 55)]
    coordinator = coordinator_with({"g": {"t": {0: 45}}, "stuck": {"t": {0: 5}}})
    for when in (10_000, 20_000, 30_000):
        windows.committed("stuck", "t", {0: (5, -1, None, when)})
    assert windows.statuses(coordinator, now_ms=41_000) == {"g": lag.OK, "stuck": lag.STALL}
    # a group no longer served here: its windows go
    assert windows.statuses(coordinator_with({"g": {"t": {0: 45}}}), now_ms=41_000) == {"g": lag.OK}
    assert windows.followed() == {("g", "t", 0)} and windows.partitions == 1


def test_the_status_metrics_name_the_worst_groups_and_count_all():
    statuses = {"a": lag.OK, "b": lag.STALL, "c": lag.WARN, "d": lag.OK}
    rows = [("a", "t", 0, 1000), ("b", "t", 0, 1), ("c", "t", 0, 5), ("d", "t", 0, 7)]
    got = families(LagCollector(lambda: (rows, 0), per_group=2, per_partition=0, statuses=lambda: statuses,
                                severity=lag.SEVERITY))
    assert got["groupkeeper_consumergroup_status"] == {("b", lag.STALL): 1, ("c", lag.WARN): 1}
    assert got["groupkeeper_consumergroups_by_status"] == {
        ("OK",): 2, ("WARN",): 1, ("STOP",): 0, ("STALL",): 1, ("REWIND",): 0}


def test_commit_windows_are_bounded_and_pruned_per_partition():
    ends = LogEnds()
    windows = lag.CommitWindows(ends, max_partitions=3)
    windows.committed("a", "t", {0: (1, -1, None, 1_000), 1: (1, -1, None, 1_000)})
    windows.committed("b", "t", {0: (1, -1, None, 1_000), 1: (1, -1, None, 1_000)})  # the fourth: not followed
    assert windows.followed() == {("a", "t", 0), ("a", "t", 1), ("b", "t", 0)} and windows.partitions == 3
    # a's partition 1 has no offset any more (deleted), b is not served here: their windows go
    windows.statuses(coordinator_with({"a": {"t": {0: 1}}}), now_ms=2_000)
    assert windows.followed() == {("a", "t", 0)} and windows.partitions == 1
    windows.committed("b", "u", {0: (1, -1, None, 1_000), 1: (1, -1, None, 1_000)})  # room again
    assert windows.partitions == 3 and ("b", "u", 1) in windows.followed()


def test_a_scrape_reads_the_groups_in_steps_while_commits_land_between_them():
    """`lag_in_steps` and `statuses_in_steps` step between groups (a pace of zero: at every
    other look at the clock), and what the serving loop changes between two steps (a new
    group, a group's first commit of another partition) neither breaks them nor loses a
    window begun meanwhile; their results are the one-piece ones'."""
    coordinator = coordinator_with({f"g{n}": {"t": {0: 10 * n}} for n in range(6)})
    durable = coordinator.owned[0].store.durable
    ends = LogEnds()
    ends.seen("t", 0, 100, now=0)
    windows = lag.CommitWindows(ends)
    windows.committed("gone", "t", {0: (1, -1, None, 1_000)})  # a group no longer served here
    for n in range(6):
        windows.committed(f"g{n}", "t", {0: (10 * n, -1, None, 1_000)})
    steps = lag.lag_in_steps(coordinator, ends, Pace(0))
    assert next(steps) is STEP
    durable["late"] = {"t": {0: (99, -1, None, 2_000)}}  # commits confirmed between two steps
    durable["g5"]["u"] = {0: (7, -1, None, 2_000)}
    stepped = 1
    try:
        while True:
            assert next(steps) is STEP
            stepped += 1
    except StopIteration as done:
        rows, unknown = done.value
    assert stepped >= 2
    # a snapshot of the store's groups: "late" came after it; g5, read after its new
    # partition, has it (its end unknown)
    assert sorted(rows) == [(f"g{n}", "t", 0, 100 - 10 * n) for n in range(6)] and unknown == 1
    assert (rows, unknown) != lag.lag(coordinator, ends)  # the one-piece reading sees "late" now
    statuses = windows.statuses_in_steps(coordinator, 5_000, Pace(0))
    assert next(statuses) is STEP
    windows.committed("late", "t", {0: (99, -1, None, 2_000)})  # a window begun meanwhile
    while True:
        try:
            assert next(statuses) is STEP
        except StopIteration as done:
            worst = done.value
            break
    assert set(worst) >= {f"g{n}" for n in range(6)}
    assert ("gone", "t", 0) not in windows.followed() and ("late", "t", 0) in windows.followed()


def test_the_lag_metrics_are_the_same_made_in_steps():
    coordinator = coordinator_with({f"g{n}": {"t": {0: n, 1: 2 * n}, "u": {0: 3}} for n in range(700)})
    ends = LogEnds()
    for topic, partition in (("t", 0), ("t", 1), ("u", 0)):
        ends.seen(topic, partition, 5_000, now=0)
    windows = lag.CommitWindows(ends)
    collector = LagCollector(lambda: lag.lag_in_steps(coordinator, ends, Pace(0)), per_group=5, per_partition=3,
                             statuses=lambda: windows.statuses_in_steps(coordinator, 0, Pace(0)),
                             severity=lag.SEVERITY)
    made = list(collector.collect_in_steps())
    in_steps = [m for m in made if m is not STEP]
    assert made.count(STEP) > 700  # between groups, and within the collector's own loops over their rows
    one_piece = LagCollector(lambda: lag.lag(coordinator, ends), per_group=5, per_partition=3,
                             statuses=lambda: windows.statuses(coordinator, 0), severity=lag.SEVERITY).collect()
    assert in_steps == one_piece and collector.collect() == one_piece
    assert {f.name: len(f.samples) for f in in_steps}["groupkeeper_consumergroup_lag"] == 12  # 5 named + "", 2 topics


def test_the_status_extension_is_read_by_us_and_skipped_by_kafka_python():
    """groupkeeper's tagged field in DescribeGroups v5+ and ConsumerGroupDescribe: our codec
    reads it back; kafka-python (as any other client) reads the answer, skipping it."""
    from protocol import RequestHeader, decode_response, encode_response
    from protocol.messages import build
    from protocol.schemas import CONSUMER_GROUP_DESCRIBE, DESCRIBE_GROUPS
    from tools.bench.kafka_python import reference_class

    for version in (5, 6):
        body = build(DESCRIBE_GROUPS.response.struct, {"groups": [
            {"error_code": 0, "group_id": "g", "group_state": "Empty", "protocol_type": "consumer",
             "protocol_data": "", "members": [], "groupkeeper_status": lag.STALL}]})
        frame = encode_response(RequestHeader(DESCRIBE_GROUPS.key, version, 7, None), body)
        assert decode_response(DESCRIBE_GROUPS.key, version, frame[4:])[1].groups[0].groupkeeper_status == lag.STALL
        theirs = reference_class(DESCRIBE_GROUPS.response).decode(frame, version=version, header=True, framed=True)
        assert theirs.groups[0].group_id == "g" and theirs.groups[0].group_state == "Empty"
        plain = build(DESCRIBE_GROUPS.response.struct, {"groups": [
            {"error_code": 0, "group_id": "g", "group_state": "Empty", "protocol_type": "consumer",
             "protocol_data": "", "members": []}]})
        assert len(frame) > len(encode_response(RequestHeader(DESCRIBE_GROUPS.key, version, 7, None), plain))
    body = build(CONSUMER_GROUP_DESCRIBE.response.struct, {"groups": [
        {"error_code": 0, "group_id": "c", "group_state": "Stable", "members": [], "groupkeeper_status": lag.WARN}]})
    frame = encode_response(RequestHeader(CONSUMER_GROUP_DESCRIBE.key, 0, 7, None), body)
    assert decode_response(CONSUMER_GROUP_DESCRIBE.key, 0, frame[4:])[1].groups[0].groupkeeper_status == lag.WARN
