"""What a transactional id's recorded state says of a pending transaction
(`cluster.ownership.decide`): an end of its producer id and epoch recorded after its offsets
decides it (the state, or the end kept as "previous"); one recorded before them is an earlier
transaction's (transaction version 1: the same epoch); a later transaction of the id with no
end of this one recorded leaves it unknown, never guessed; anything else is waited past."""

from __future__ import annotations

import pytest

from coordinator.cluster.ownership import decide
from coordinator.store.pending import TxnKey
from coordinator.store.transactions import Outcome

KEY = TxnKey("tx", 7, 3)
WRITTEN = 100  # the zxid of the pending offsets' write


def state(pid: int, epoch: int, what: str, zxid: int, previous: Outcome | None = None) -> Outcome:
    return Outcome("tx", pid, epoch, what, 0, previous, zxid)


@pytest.mark.parametrize("record, verdict", [
    (state(7, 3, "committed", 120), "committed"),
    (state(7, 3, "aborted", 120), "aborted"),
    (state(7, 3, "committed", 90), None),  # an earlier transaction of the same epoch: this one still open
    (state(7, 3, "begun", 120), None),  # its producer began it: still open
    (state(7, 2, "committed", 120), None),  # an older epoch's end
    (state(7, 4, "begun", 130, state(7, 3, "committed", 120)), "committed"),  # the end kept as previous
    (state(7, 4, "begun", 130, state(7, 3, "committed", 90)), "unknown"),  # ended, its end never seen
    (state(7, 4, "begun", 130), "unknown"),
    (state(8, 0, "begun", 130), "unknown"),  # another producer id for the transactional id
    (state(8, 0, "begun", 90), None),  # before these offsets: the producer that wrote them came after
])
def test_what_a_record_says_of_a_pending_transaction(record, verdict):
    assert decide(KEY, WRITTEN, record) == verdict
