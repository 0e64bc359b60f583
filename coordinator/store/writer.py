"""Group commit across group-partitions: one writer sends the offset writes of every
group-partition this instance owns, as few multi() calls as it can.

A group-partition's commits wait in its store (`Batches`); when it has some and no
batch of its own in flight, it is ready. Each turn, the writer asks every ready store in
turn for its next batch's writes and puts them in one multi(), each store's part headed by
its own fence checks, up to MAX_REQUEST_BYTES. Batching per instance rather than per
group-partition is what keeps the number of multis, and of kazoo's thread's wakeups, low
when commits are spread over many group-partitions: at 5,000 commits a second over 50 of
them, a multi carried 1 to 3 commits per group-partition, and kazoo's connection thread,
contending for the GIL with the serving thread, took 40 % of the core.

A multi is all-or-nothing. When one store's part is refused (fenced off, or refused by
ZooKeeper), every other part of that multi reads back as rolled back: those stores write
their batch again, first (`RolledBack`). A store never has two batches in flight, so a
batch written again can never land after a later batch of the same store. PIPELINE_DEPTH
turns are in flight at once; outcomes are handed to the stores in the order sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import trio

from .. import logs, metrics
from . import layout
from .bridge import ZooKeeperBridge
from .budget import Budget

PIPELINE_DEPTH = 2  # turns (normally one multi each) in flight at once

# one store's share of a multi: its operations, their size in bytes, and what to tell the
# store of their outcome
Part = tuple[list, int, Callable[[Any], None]]
Share = tuple[Callable[[Any], None], int, int]  # a part in a multi: whom to tell, and its ops' slice


class Batches(Protocol):
    """What the writer asks of a store it writes for (`partition.Batches` is one)."""
    partition: int

    def take(self, budget: int, first: bool) -> list[Part] | None:
        """The parts of its next batch; None if its first commit does not fit in `budget`
        bytes of a multi that is not empty (`first` False)."""


class OffsetWriter:
    def __init__(self, zk: ZooKeeperBridge):
        self.zk = zk
        self._ready: dict[Batches, None] = {}  # stores with a batch to write, in order
        self._wake = trio.Event()
        self._slots = trio.Semaphore(PIPELINE_DEPTH)
        self.multis = 0  # multi() calls sent, for the benchmark
        # what the stores it writes for may make ZooKeeper hold, shared by them as it is (the
        # daemon sets the configured one; none by default)
        self.budget = Budget()
        self.log = logs.get("groupkeeper.store")

    def ready(self, store: Batches) -> None:
        """`store` has commits queued and no batch in flight: write them in the next turn."""
        self._ready[store] = None
        self._wake.set()

    def withdraw(self, store: Batches) -> None:
        self._ready.pop(store, None)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wake.wait()
            await self._slots.acquire()
            self._wake = trio.Event()
            if not self._turn():
                self._slots.release()
            if self._ready:  # a store whose batch did not fit goes in the next turn
                self._wake.set()

    def _turn(self) -> bool:
        """Send what the ready stores have, in as few multis as fit; False if nothing. A
        store leaves the ready ones as it is asked (it offers itself again from `take` if
        its batch failed there and commits are left), and goes back if its batch did not fit."""
        multis: list[tuple[list, list[Share]]] = [([], [])]  # each multi's operations, and each store's share of them
        size = 0
        for store in list(self._ready):
            del self._ready[store]
            try:
                parts = store.take(layout.MAX_REQUEST_BYTES - size, first=not multis[-1][0])
            except Exception:  # a bug: that store's commits wait; the others are written
                self.log.exception("taking a batch to write failed", partition=store.partition)
                continue
            if parts is None:  # its next batch does not fit in this multi
                self._ready[store] = None
                continue
            for i, (ops, cost, answered) in enumerate(parts):
                if i:  # a batch too large for one multi: each further part in one of its own
                    multis.append(([], []))
                    size = 0
                operations, shares = multis[-1]
                shares.append((answered, len(operations), len(operations) + len(ops)))
                operations += ops
                size += cost
        sent = [multi for multi in multis if multi[0]]
        if not sent:
            return False
        left = [len(sent)]
        for operations, shares in sent:
            self.multis += 1
            self.zk.send(operations, lambda outcome, shares=shares: self._answered(shares, outcome, left))
        return True

    def _answered(self, shares: list[Share], outcome: Any, left: list[int]) -> None:
        """A multi's outcome, split by store: its own results, or the exception kazoo met."""
        if not isinstance(outcome, BaseException) and not isinstance(outcome[0], Exception):
            metrics.OFFSET_COMMIT_WRITES.inc()  # it landed (a failed multi's results are all errors)
        for answered, start, end in shares:
            try:
                answered(outcome if isinstance(outcome, BaseException) else outcome[start:end])
            except Exception:  # a bug in one store: the others still hear of their writes
                self.log.exception("applying a write's outcome failed")
        left[0] -= 1
        if not left[0]:
            self._slots.release()
