"""How a host's SASL attempts are paced after failures (`Pacing`), without I/O."""

from __future__ import annotations

from coordinator.security.sasl import Pacing


def test_a_host_without_failures_is_never_held_back():
    pacing = Pacing(0.1)
    assert [pacing.slot("10.0.0.1", t) for t in (0.0, 0.0, 0.01)] == [0.0, 0.0, 0.01]


def test_each_failure_doubles_the_gap_between_that_hosts_attempts_up_to_the_longest():
    pacing = Pacing(0.1, longest=1.0)
    delays = [pacing.failed("10.0.0.1", 0.0) for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    # ten connections at once get slots a gap apart, however many it opens
    slots = [pacing.slot("10.0.0.1", 0.0) for _ in range(10)]
    assert all(later - earlier == 1.0 for earlier, later in zip(slots, slots[1:]))
    assert slots[0] >= 1.0  # not before the last failure's own gap has passed
    assert pacing.slot("10.0.0.2", 0.0) == 0.0  # other hosts are not slowed


def test_a_host_is_forgiven_after_a_quiet_spell_and_the_table_is_bounded():
    pacing = Pacing(0.1, forget=60.0, hosts=3)
    pacing.failed("10.0.0.1", 0.0)
    assert pacing.slot("10.0.0.1", 61.0) == 61.0
    assert pacing.failed("10.0.0.1", 61.0) == 0.1  # counted afresh
    for n in range(2, 6):
        pacing.failed(f"10.0.0.{n}", 62.0)
    assert len(pacing._table) == 3 and "10.0.0.1" not in pacing._table  # the longest-quiet went first
