"""The owner's look at the brokers for transactions whose end was not recorded.

The gateway records every EndTxn it relays (gateway/transactions.py), and the owner of a
group with offsets pending resolves them from that record (`ownership.Coordinator._outcome`).
Some ends are never recorded: the producer died after sending EndTxn, or before it (the
transaction coordinator aborts it on its timeout, or when a new producer of the same
transactional id bumps the epoch), or the gateway instance that relayed EndTxn died before
recording it. For those, the brokers' own record of the end is read: the transaction's
marker in the group's partition of `__consumer_offsets` (`topics.markers`).

`PendingCheck` looks, every `interval`, at each pending transaction of the group-partitions
owned here that is older than `interval` (a transaction that ends normally is resolved
from the gateway's record within milliseconds), and at once at one that a later
transaction of its transactional id showed ended (`due`). Each look reads on from where the
last stopped (`PendingTxn.scan_from`, in memory), so a transaction that is still open costs
one Fetch of nothing new per look. A transaction that was seen ended and whose end cannot
be read (no marker yet, brokers that keep none, a log that no longer holds it) is reported
once (log, `groupkeeper_transactions_unresolved_total`) and stays pending: its outcome is
never guessed.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .. import logs, metrics
from ..store.pending import TxnKey
from ..topics.markers import MarkerReader, Unavailable

MAX_LOOKS = 1000  # transactions looked at per round at most; the rest at the next


class PendingCheck:
    def __init__(self, coordinator, markers: MarkerReader, interval: float, wall_ms: Callable[[], int]):
        self.coordinator = coordinator  # `ownership.Coordinator`: what is owned, and resolving
        self.markers = markers
        self.interval = interval
        self.wall_ms = wall_ms
        self.log = logs.get("groupkeeper.transactions")
        self._due: set[TxnKey] = set()  # seen ended, its end not recorded: looked at at once
        self._wake = trio.Event()
        self._failing = False  # the last look could not read the brokers (logged once)

    def due(self, key: TxnKey) -> None:
        """A later transaction of `key`'s transactional id began and no end of `key` was
        recorded: its end is read from the brokers now."""
        self._due.add(key)
        self._wake.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.round()
            with trio.move_on_after(self.interval):
                await self._wake.wait()
            self._wake = trio.Event()

    async def round(self) -> None:
        now_ms, looks = self.wall_ms(), 0
        for owned in list(self.coordinator.owned.values()):
            if owned.pending is None or not owned.loaded.is_set() or owned.releasing:
                continue
            for group, txns in list(owned.pending.by_group.items()):
                for key, txn in list(txns.items()):
                    due = key in self._due
                    if not due and now_ms - txn.since_ms < self.interval * 1000:
                        continue
                    if looks >= MAX_LOOKS:
                        self._wake.set()  # the rest right after
                        return
                    looks += 1
                    if not await self._look(owned, group, key, txn, due):
                        return  # the brokers cannot be read: everything waits for the next round
        self._due.clear()

    async def _look(self, owned, group: str, key: TxnKey, txn, due: bool) -> bool:
        """One transaction looked for; False when the brokers could not be read."""
        if txn.scan_from < 0:  # where its markers start was never learned: they cannot be read
            if due:
                self.coordinator.unresolved(key, group, "where the brokers write its end was not known")
            return True
        try:
            scan = await self.markers.find(group, key.producer_id, key.producer_epoch, txn.scan_from)
        except (Unavailable, Exception) as exc:  # noqa: BLE001 - any broker failure: next round
            metrics.TXN_MARKER_READS.labels("unavailable").inc()
            if not self._failing:
                self._failing = True
                self.log.warning("cannot read transactions' ends from the brokers; tried again",
                                 group=group, transactional_id=key.transactional_id,
                                 error=f"{type(exc).__name__}: {exc}")
            return False
        self._failing = False
        if scan.outcome is not None:
            metrics.TXN_MARKER_READS.labels("found").inc()
            self.log.info("a transaction's end read from the brokers", group=group,
                          transactional_id=key.transactional_id, producer_id=key.producer_id,
                          producer_epoch=key.producer_epoch, outcome=scan.outcome, marker_offset=scan.next_offset - 1)
            await self.coordinator.resolve_pending(owned, key, scan.outcome == "committed", {group: txn.zxid})
            return True
        metrics.TXN_MARKER_READS.labels("gone" if scan.gone else "not_yet").inc()
        txn.scan_from = scan.next_offset
        if scan.gone:
            self.coordinator.unresolved(key, group, "the brokers' log no longer holds its end")
        elif due:
            self.coordinator.unresolved(key, group, "no end of it written yet")
        return True
