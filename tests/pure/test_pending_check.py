"""The owner's look at the brokers for pending transactions whose end was not recorded
(`cluster.pending_check`): only those pending longer than the interval, or seen ended (due)
at once; resolved as the marker says; reading on from where the last look stopped; never
guessed, reported once, when the end cannot be read."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from coordinator.cluster.pending_check import PendingCheck
from coordinator.store.pending import PendingTxn, TxnKey
from protocol.record_batches import ABORT, COMMIT
from tests.pure.test_markers import GROUP, reader
from tests.pure.test_record_batches import control_batch, data_batch

NOW = 10_000_000
OLD, FRESH = TxnKey("old", 7, 0), TxnKey("fresh", 8, 0)


class Owner:
    """The coordinator's side PendingCheck uses: what is owned, resolving, reporting."""

    def __init__(self, txns: dict[TxnKey, PendingTxn]):
        loaded = trio.Event()
        loaded.set()
        self.owned_one = SimpleNamespace(pending=SimpleNamespace(by_group={GROUP: txns}), loaded=loaded,
                                         releasing=False)
        self.owned = {0: self.owned_one}
        self.resolved: list[tuple[TxnKey, bool, list[str]]] = []
        self.reported: list[tuple[TxnKey, str]] = []

    async def resolve_pending(self, owned, key, committed, groups):
        assert owned is self.owned_one
        self.resolved.append((key, committed, groups))
        del owned.pending.by_group[GROUP][key]

    def unresolved(self, key, group, why, **context):
        self.reported.append((key, why))


def setup(old_from=0, fresh_from=0):
    markers, leader = reader()
    txns = {OLD: PendingTxn(OLD, NOW - 6_000, marker_from=old_from, scan_from=old_from),
            FRESH: PendingTxn(FRESH, NOW - 1_000, marker_from=fresh_from, scan_from=fresh_from)}
    owner = Owner(txns)
    return PendingCheck(owner, markers, 5.0, lambda: NOW), owner, leader, txns


def test_only_transactions_pending_past_the_interval_are_looked_for():
    check, owner, leader, txns = setup()
    leader.write(control_batch(0, 8, 0, COMMIT))  # the fresh one's end: not looked for yet
    leader.write(data_batch(1, [b"x"], producer_id=9, epoch=0))
    trio.run(check.round)
    assert owner.resolved == [] and txns[OLD].scan_from == 2  # read on: the next look starts there
    leader.write(control_batch(2, 7, 1, ABORT))  # the old one aborted on its timeout (epoch bumped)
    trio.run(check.round)
    assert owner.resolved == [(OLD, False, {GROUP: 0})]
    assert FRESH in txns and owner.reported == []


def test_a_transaction_seen_ended_is_looked_for_at_once_and_reported_once_if_its_end_is_not_there():
    check, owner, leader, txns = setup()
    check.due(FRESH)
    trio.run(check.round)
    assert owner.reported == [(FRESH, "no end of it written yet")]
    leader.write(control_batch(0, 8, 0, COMMIT))
    check.due(FRESH)
    trio.run(check.round)
    assert owner.resolved == [(FRESH, True, {GROUP: 0})]


def test_without_a_start_nothing_is_read_and_an_ended_one_is_reported():
    check, owner, leader, txns = setup(old_from=-1, fresh_from=-1)
    leader.write(control_batch(0, 7, 0, COMMIT))
    check.due(OLD)
    trio.run(check.round)
    assert owner.resolved == [] and [k for k, _ in owner.reported] == [OLD]
    assert [name for name, _ in leader.calls] == []


def test_brokers_that_cannot_answer_leave_everything_pending_and_end_the_round():
    check, owner, leader, txns = setup()
    check.markers.view.states.clear()
    looks = []
    find = check.markers.find

    async def counted(*args, **kwargs):
        looks.append(args[0])
        return await find(*args, **kwargs)
    check.markers.find = counted
    check.due(FRESH)
    trio.run(check.round)
    assert owner.resolved == [] and owner.reported == [] and set(txns) == {OLD, FRESH}
    assert FRESH in check._due  # looked for again at the next round
    assert len(looks) == 1  # the first failure ended the round: the other two wait for the next
