"""How password checks are paced after failures (`Pacing`), without I/O."""

from __future__ import annotations

from coordinator.security.sasl import Pacing

ALICE, BOB = ("10.0.0.1", "alice"), ("10.0.0.1", "bob")


def test_without_failures_nothing_is_held_back():
    pacing = Pacing(0.1)
    assert [pacing.slot(ALICE, t) for t in (0.0, 0.0, 0.01)] == [0.0, 0.0, 0.01]


def test_each_failure_doubles_the_gap_between_checks_of_that_user_from_that_host():
    pacing = Pacing(0.1, longest=1.0)
    delays = [pacing.failed(ALICE, 0.0) for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    # ten connections at once get slots a gap apart, however many it opens
    slots = [pacing.slot(ALICE, 0.0) for _ in range(10)]
    assert all(later - earlier == 1.0 for earlier, later in zip(slots, slots[1:]))
    assert slots[0] >= 1.0  # not before the last failure's own gap has passed
    # another user from the same host (a NAT, say), and the same user from another host, go at once
    assert pacing.slot(BOB, 0.0) == 0.0 and pacing.slot(("10.0.0.2", "alice"), 0.0) == 0.0


def test_a_key_is_forgiven_after_a_quiet_spell_and_the_table_is_bounded():
    pacing = Pacing(0.1, forget=60.0, keys=3)
    pacing.failed(ALICE, 0.0)
    assert pacing.slot(ALICE, 61.0) == 61.0
    assert pacing.failed(ALICE, 61.0) == 0.1  # counted afresh
    for n in range(2, 6):
        pacing.failed((f"10.0.0.{n}", "alice"), 62.0)
    assert len(pacing._table) == 3 and ALICE not in pacing._table  # the longest-quiet went first
