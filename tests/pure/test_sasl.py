"""When failed logins are answered (`Pacing`), without I/O: only failures wait, and a
guesser's parallel connections get their answers no sooner than one connection would."""

from __future__ import annotations

from coordinator.security.sasl import Pacing

ALICE, BOB = ("10.0.0.1", "alice"), ("10.0.0.1", "bob")


def test_each_failure_doubles_the_wait_for_its_answer():
    pacing = Pacing(0.1, longest=1.0)
    now, waits = 0.0, []
    for _ in range(6):  # one client retrying once each answer came
        at = pacing.failed(ALICE, now)
        waits.append(round(at - now, 3))
        now = at
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_parallel_failures_of_one_user_from_one_host_are_answered_a_gap_apart():
    pacing = Pacing(0.1, longest=1.0, hold=30.0)
    for _ in range(4):
        pacing.failed(ALICE, 0.0)
    answers = [pacing.failed(ALICE, 0.0) for _ in range(10)]  # ten connections at once, all wrong
    assert all(round(later - earlier, 6) == 1.0 for earlier, later in zip(answers, answers[1:]))
    # another user from the same host (a NAT, say), and the same user from another host, wait
    # only for their own first failure's delay
    assert pacing.failed(BOB, 0.0) == 0.1 and pacing.failed(("10.0.0.2", "alice"), 0.0) == 0.1


def test_no_failure_waits_longer_than_the_hold():
    """Connections left by a guesser do not linger: past `hold` the answers are not spread further."""
    pacing = Pacing(0.1, longest=1.0, hold=5.0)
    answers = [pacing.failed(ALICE, 2.0) for _ in range(20)]
    assert max(answers) == 7.0 and answers.count(7.0) > 1
    assert Pacing(20.0).failed(ALICE, 0.0) == 20.0  # a configured delay past 10 s is kept whole


def test_a_key_is_forgiven_after_a_quiet_spell_and_the_table_is_bounded():
    pacing = Pacing(0.1, forget=60.0, keys=3)
    pacing.failed(ALICE, 0.0)
    pacing.failed(ALICE, 0.0)
    assert pacing.failed(ALICE, 61.0) == 61.1  # counted afresh
    for n in range(2, 6):
        pacing.failed((f"10.0.0.{n}", "alice"), 62.0)
    assert len(pacing._table) == 3 and ALICE not in pacing._table  # the longest-quiet went first
