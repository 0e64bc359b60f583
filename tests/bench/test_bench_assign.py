"""The assignor benchmark's machinery on a small group: both sides run on the same input
and report what they did. (Figures come from `groupkeeper bench assign`, not from tests.)"""

from __future__ import annotations

import os

import pytest

from tools.bench import assign as bench


class Aborts:
    """A reference whose process dies before it can answer."""

    @classmethod
    def assign(cls, cluster, members):
        os._exit(3)


@pytest.mark.parametrize("mixed", [False, True])
def test_ours_reports_a_complete_balanced_rebalance(mixed):
    members, counts = bench.group(30, 6, 5, mixed)
    row = bench._ours("sticky", members, counts)
    assert row["unassigned"] == 0
    if not mixed:  # one member replaced: its 1 partition goes to the newcomer, nothing else moves
        assert (row["min_load"], row["max_load"], row["moved"]) == (1, 1, 0)


def test_the_group_is_the_same_for_both_sides_and_every_run():
    assert bench.group(50, 10, 3, True) == bench.group(50, 10, 3, True)
    members, _ = bench.group(50, 10, 3, True)
    assert len({m.topics for m in members}) > 1


@pytest.mark.parametrize("name", sorted(bench.REFERENCE))
def test_kafka_python_runs_each_reference_strategy(name):
    assert bench.reference_ms(name, (20, 4, 3, False), limit_s=60, memory_gib=4) > 0


def test_a_failing_reference_is_reported_not_taken_for_slowness():
    # kafka-python's roundrobin looks a skipped member up by the wrong key: KeyError
    with pytest.raises(bench.ReferenceFailed, match="kafka-python's roundrobin assignor failed: KeyError"):
        bench.reference_ms("roundrobin", (20, 4, 3, True), limit_s=60, memory_gib=4)


def test_a_reference_over_its_time_limit_is_none():
    assert bench.reference_ms("sticky", (2_000, 50, 100, False), limit_s=1, memory_gib=4) is None


def test_a_reference_out_of_memory_is_reported():
    with pytest.raises(bench.ReferenceFailed, match=r"kafka-python's sticky assignor failed: out of memory \(over 0.5 GiB more\)"):
        bench.reference_ms("sticky", (2_000, 100, 100, False), limit_s=120, memory_gib=0.5)


def test_a_reference_that_dies_is_reported_at_once(monkeypatch):
    monkeypatch.setitem(bench.REFERENCE, "range", "tests.bench.test_bench_assign:Aborts")
    with pytest.raises(bench.ReferenceFailed, match=r"its process died \(exit status 3\)"):
        bench.reference_ms("range", (20, 4, 3, False), limit_s=120, memory_gib=4)
